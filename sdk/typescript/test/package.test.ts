// The package can be published: not private, ESM with types, and its
// version is the project's (the repository's VERSION file).
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { existsSync, readFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';

const root = (p: string) => fileURLToPath(new URL(`../../${p}`, import.meta.url));

test('package.json: version from VERSION, publishable, ESM with types', () => {
  const pkg = JSON.parse(readFileSync(root('package.json'), 'utf8'));
  const versionFile = fileURLToPath(new URL('../../../../VERSION', import.meta.url));
  const want = existsSync(versionFile) ? readFileSync(versionFile, 'utf8').trim() : '0.1.0';
  assert.equal(pkg.version, want, 'package.json version must equal the repository VERSION file');
  assert.notEqual(pkg.private, true, 'the package is published');
  assert.equal(pkg.license, 'Apache-2.0');
  assert.equal(pkg.type, 'module');
  assert.equal(pkg.exports['.'].types, './dist/src/index.d.ts');
  assert.equal(pkg.exports['.'].import ?? pkg.exports['.'].default, './dist/src/index.js');
  assert.ok(pkg.devDependencies.yaml && /^\d+\.\d+\.\d+$/.test(pkg.devDependencies.yaml), 'yaml (the generator) is pinned');
});
