// Our block keys (src/kv-cache/block-keys.ts): a chain over whole blocks of token ids, as vLLM
// chains its own hashes, so that a prompt's blocks and a server's stored blocks meet on equal keys.
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import fc from 'fast-check';
import { blockKey, blockKeys, rootKey } from '../../../src/kv-cache/block-keys.js';

describe('block keys', () => {
  it('whole blocks only, chained: equal prefixes give equal keys up to the first differing block', () => {
    const a = [1, 2, 3, 4, 5, 6, 7];
    const b = [1, 2, 3, 4, 9, 6, 7, 8];
    const ka = blockKeys(a, 2, 0);
    const kb = blockKeys(b, 2, 0);
    assert.equal(ka.length, 3, 'the tail of 1 token is no block');
    assert.equal(kb.length, 4);
    assert.deepEqual(ka.slice(0, 2), kb.slice(0, 2));
    assert.notEqual(ka[2], kb[2]);
    assert.notEqual(kb[3], blockKeys([9, 9, 9, 9, 9, 9, 7, 8], 2, 0)[3], 'the same tokens after another parent are another block');
    assert.deepEqual(blockKeys(a, 2, 0, 2), ka.slice(0, 2), 'maxBlocks');
  });

  it('a block stored after its parent gets the key the whole prompt gives it (what BlockStored with a parent needs)', () => {
    fc.assert(
      fc.property(
        fc.array(fc.integer({ min: 0, max: 200_000 }), { minLength: 8, maxLength: 64 }),
        fc.integer({ min: 1, max: 8 }),
        (tokens, size) => {
          const keys = blockKeys(tokens, size, 0);
          for (let i = 1; i < keys.length; i++) assert.equal(blockKey(keys[i - 1], tokens, i * size, size), keys[i]);
        },
      ),
    );
  });

  it('keys are safe integers, and an adapter starts its own chain', () => {
    fc.assert(
      fc.property(fc.array(fc.integer({ min: 0, max: 2 ** 31 - 1 }), { minLength: 4, maxLength: 40 }), (tokens) => {
        for (const key of blockKeys(tokens, 4, rootKey('sql-lora'))) assert.ok(Number.isSafeInteger(key) && key >= 0);
      }),
    );
    assert.equal(rootKey(null), 0);
    assert.equal(rootKey(''), 0);
    assert.notEqual(rootKey('a'), rootKey('b'));
    assert.notDeepEqual(blockKeys([1, 2], 2, rootKey('a')), blockKeys([1, 2], 2, 0));
  });

  it('no collisions among 200,000 distinct blocks', () => {
    const seen = new Set<number>();
    for (let i = 0; i < 200_000; i++) seen.add(blockKey(i % 7, [i, i >> 3, 17], 0, 3));
    assert.equal(seen.size, 200_000);
  });
});
