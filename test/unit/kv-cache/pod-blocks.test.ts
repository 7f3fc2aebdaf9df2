// One server's cached blocks as its KV events tell (src/kv-cache/pod-blocks.ts): stored blocks are
// keyed by their token chain, so a prompt cut in the same blocks finds them; removals, clears, the
// server's capacity, and blocks that cannot be matched.
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { blockKeys, rootKey } from '../../../src/kv-cache/block-keys.js';
import type { KvEvent } from '../../../src/kv-cache/kv-events.js';
import { PodBlocks } from '../../../src/kv-cache/pod-blocks.js';

const SIZE = 4;
const prompt = Array.from({ length: 40 }, (_, i) => 100 + i); // 10 blocks

function stored(
  hashes: bigint[],
  parent: bigint | null,
  tokens: number[],
  extra: Partial<Extract<KvEvent, { type: 'BlockStored' }>> = {},
): KvEvent {
  return {
    type: 'BlockStored',
    blockHashes: hashes,
    parentBlockHash: parent,
    tokenIds: tokens,
    blockSize: SIZE,
    loraId: null,
    loraName: null,
    medium: 'GPU',
    extraKeys: false,
    ...extra,
  };
}

describe('a server’s cached blocks', () => {
  it('a prompt matches the blocks stored for it, across events chained by parent hash', () => {
    const pod = new PodBlocks();
    const counts = pod.apply([stored([11n, 12n, 13n], null, prompt.slice(0, 12)), stored([14n, 15n], 13n, prompt.slice(12, 20))]);
    assert.equal(counts.stored, 5);
    const keys = blockKeys(prompt, SIZE, 0);
    assert.equal(pod.leadingMatches(keys), 5);
    assert.equal(pod.blockSize, SIZE);
    const other = [...prompt.slice(0, 8), 1, 2, 3, 4, ...prompt.slice(12)];
    assert.equal(pod.leadingMatches(blockKeys(other, SIZE, 0)), 2, 'a prompt that differs in block 3 matches two');
  });

  it('removals and AllBlocksCleared take blocks away; a removed parent breaks the match there', () => {
    const pod = new PodBlocks();
    pod.apply([stored([1n, 2n, 3n], null, prompt.slice(0, 12))]);
    const keys = blockKeys(prompt, SIZE, 0);
    const counts = pod.apply([{ type: 'BlockRemoved', blockHashes: [2n, 99n], medium: 'GPU' }]);
    assert.equal(counts.removed, 1, 'a hash it never had is not counted');
    assert.equal(pod.leadingMatches(keys), 1);
    pod.apply([{ type: 'BlockRemoved', blockHashes: [1n], medium: 'CPU' }]);
    assert.equal(pod.leadingMatches(keys), 1, 'an offload tier’s removal is not the engine’s cache');
    assert.equal(pod.apply([{ type: 'AllBlocksCleared' }]).cleared, true);
    assert.equal(pod.size, 0);
    assert.equal(pod.leadingMatches(keys), 0);
  });

  it('stays within the server’s capacity: the oldest blocks go first', () => {
    const pod = new PodBlocks(3);
    const counts = pod.apply([stored([1n, 2n], null, prompt.slice(0, 8)), stored([3n, 4n], 2n, prompt.slice(8, 16))]);
    assert.equal(counts.overCapacity, 1);
    assert.equal(pod.size, 3);
    assert.equal(pod.leadingMatches(blockKeys(prompt, SIZE, 0)), 0, 'the first block went');
    assert.equal(pod.setCapacity(1).overCapacity, 2);
    assert.equal(pod.size, 1);
  });

  it('blocks it cannot match are kept for their removals but never match: unknown parent, extra keys, another medium', () => {
    const pod = new PodBlocks();
    const counts = pod.apply([stored([7n, 8n], 6n, prompt.slice(4, 12)), stored([21n], null, prompt.slice(0, 4), { extraKeys: true })]);
    assert.equal(counts.unmatchable, 3);
    assert.equal(pod.leadingMatches(blockKeys(prompt, SIZE, 0)), 0);
    assert.equal(pod.apply([{ type: 'BlockRemoved', blockHashes: [7n, 8n, 21n], medium: 'GPU' }]).removed, 3);
    pod.apply([stored([30n], null, prompt.slice(0, 4), { medium: 'CPU' })]);
    assert.equal(pod.size, 0);
  });

  it('an adapter’s blocks match only requests for that adapter', () => {
    const pod = new PodBlocks();
    pod.apply([stored([1n, 2n], null, prompt.slice(0, 8), { loraId: 1, loraName: 'sql' })]);
    assert.equal(pod.leadingMatches(blockKeys(prompt, SIZE, 0)), 0);
    assert.equal(pod.leadingMatches(blockKeys(prompt, SIZE, rootKey('sql'))), 2);
  });

  it('a block stored again is fresh (its earlier copy replaced, not counted twice)', () => {
    const pod = new PodBlocks(2);
    pod.apply([stored([1n], null, prompt.slice(0, 4)), stored([2n], 1n, prompt.slice(4, 8))]);
    pod.apply([stored([1n], null, prompt.slice(0, 4))]);
    assert.equal(pod.size, 2);
    pod.apply([stored([3n], 2n, prompt.slice(8, 12))]);
    assert.equal(pod.leadingMatches(blockKeys(prompt, SIZE, 0)), 1, 'block 2 was the oldest; block 1, stored again, stayed');
  });
});
