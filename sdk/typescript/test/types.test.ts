// src/types.gen.ts is generated from api/openapi.yaml (npm run gen): this
// regenerates it in memory and fails on any difference.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';

const here = (p: string) => fileURLToPath(new URL(p, import.meta.url));
// From dist/test/: the package's own directories.
const gen = () => import(new URL('../../scripts/gen-types.mjs', import.meta.url).href);

test('src/types.gen.ts matches api/openapi.yaml (run npm run gen)', async () => {
  const { generate } = await gen();
  const spec = readFileSync(here('../../../../api/openapi.yaml'), 'utf8');
  const want = generate(spec).source as string;
  const got = readFileSync(here('../../src/types.gen.ts'), 'utf8');
  if (got !== want) {
    const a = got.split('\n');
    const b = want.split('\n');
    let i = 0;
    while (i < a.length && a[i] === b[i]) i++;
    assert.fail(`src/types.gen.ts differs from api/openapi.yaml at line ${i + 1}: have ${JSON.stringify(a[i])}, want ${JSON.stringify(b[i])}; run npm run gen`);
  }
});

test('the generator: camelCase names, optional when not required, enums as unions, map fields listed', async () => {
  const { generate } = await gen();
  const spec = `
openapi: 3.1.0
components:
  schemas:
    Thing:
      description: A thing.
      type: object
      required: [memory_mb]
      properties:
        memory_mb: {type: integer, description: "MiB."}
        state: {type: string, enum: [a, b]}
        labels: {type: object, additionalProperties: {type: string}}
        metadata: {type: [object, "null"]}
        rules:
          type: array
          items: {type: object, properties: {path_prefix: {type: string}}}
`;
  const { source, mapFields } = generate(spec);
  assert.match(source, /\/\*\* A thing\. \*\/\nexport interface Thing \{/);
  assert.match(source, /\/\*\* MiB\. \*\/\n  memoryMb: number;/);
  assert.match(source, /  state\?: "a" \| "b";/);
  assert.match(source, /  labels\?: Record<string, string>;/);
  assert.match(source, /  metadata\?: Record<string, unknown> \| null;/);
  assert.match(source, /pathPrefix\?: string;/);
  assert.deepEqual(mapFields, ['labels', 'metadata']);
});

test('the generator fails on a name that is a map in one schema and an object in another', async () => {
  const { generate } = await gen();
  const spec = `
components:
  schemas:
    A:
      type: object
      properties:
        labels: {type: object, additionalProperties: {type: string}}
    B:
      type: object
      properties:
        labels: {type: object, properties: {team_name: {type: string}}}
`;
  assert.throws(() => generate(spec), /labels: a map at A\.labels, an object at B\.labels/);
});
