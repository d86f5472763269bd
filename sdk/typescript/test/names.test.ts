import { test } from 'node:test';
import assert from 'node:assert/strict';
import { derivedName } from '../src/undo.js';

// Temporary names as Go's suffixed (client/undo.go): the base cut to its
// first 63 - len(tag) - 8 bytes, then -tag- and 6 random [a-z0-9].
test('derivedName cuts the base like Go', () => {
  assert.match(derivedName('a'.repeat(63), 'try'), /^a{52}-try-[a-z0-9]{6}$/);
  assert.match(derivedName('a'.repeat(63), 'back'), /^a{51}-back-[a-z0-9]{6}$/);
  assert.match(derivedName('a'.repeat(51) + '-', 'old'), /^a{51}--old-[a-z0-9]{6}$/);
  assert.match(derivedName('b'.repeat(40), 'longertag'), /^b{40}-longertag-[a-z0-9]{6}$/);
  assert.equal(derivedName('c'.repeat(63), 'longertag').length, 63);
  assert.match(derivedName('dev', 'old'), /^dev-old-[a-z0-9]{6}$/);
});
