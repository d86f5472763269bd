import { test } from 'node:test';
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { checkpointFor } from '../src/index.js';

// dist/test/ -> sdk/testdata/
const vectors = fileURLToPath(new URL('../../../testdata/checkpoint_for.json', import.meta.url));

test('checkpointFor gives every kind of sdk/testdata/checkpoint_for.json', () => {
  const data = JSON.parse(readFileSync(vectors, 'utf8')) as { cases: [string, string][] };
  assert.ok(data.cases.length >= 100);
  const wrong: string[] = [];
  for (const [cmd, want] of data.cases) {
    const got = checkpointFor(cmd);
    if (got !== want) wrong.push(`${JSON.stringify(cmd)}: got ${got}, want ${want}`);
  }
  assert.deepEqual(wrong, []);
});

test('checkpointFor: extra cases', () => {
  const cases: [string, string][] = [
    ['echo hi>out.txt', 'git'],
    ['echo hi &> /dev/null', 'none'],
    ['cat a 2>/dev/null | sort > /etc/x', 'checkpoint'],
    ['echo "$(rm -rf x)"', 'checkpoint'],
    ["echo '$(rm -rf x)'", 'none'],
    ['git clean -fd && git branch -D x', 'checkpoint'],
    ['nohup psql -f x.sql &', 'fork'],
    ['bash -c "ls"', 'none'],
    ['env FOO=1 rm x', 'git'],
    ['sudo -u bob rm -rf /tmp/x', 'git'],
    ['rm -rf /tmp/../etc', 'checkpoint'],
    ['curl -o /etc/x https://example.org', 'checkpoint'],
    ["sed -i 's/../x/' f", 'git'],
    ['git clone https://example.org/r.git /opt/r', 'checkpoint'],
    ['npx knex migrate:latest', 'fork'],
    ['wget -O - https://example.org', 'none'],
    ['node --version', 'none'],
  ];
  for (const [cmd, want] of cases) assert.equal(checkpointFor(cmd), want, cmd);
});
