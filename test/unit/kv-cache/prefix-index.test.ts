// The index of the servers' cached blocks (src/kv-cache/prefix-index.ts): what a prompt matches per
// trusted server, and what an untrusted server gets (no figure: approximate affinity places it),
// with each episode reported once and the entries dropped.
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import type { KvEvent, KvEventBatch } from '../../../src/kv-cache/kv-events.js';
import { PrefixIndex } from '../../../src/kv-cache/prefix-index.js';

const SIZE = 4;
const A = '10.0.0.1:8000';
const B = '10.0.0.2:8000';
const prompt = Array.from({ length: 22 }, (_, i) => 500 + i); // 5 whole blocks

function batch(seq: number, events: KvEvent[]): KvEventBatch {
  return { topic: 'kv@m', seq: BigInt(seq), ts: 0, events, dataParallelRank: 0 };
}

function stored(hashes: bigint[], parent: bigint | null, from: number): KvEvent {
  return {
    type: 'BlockStored',
    blockHashes: hashes,
    parentBlockHash: parent,
    tokenIds: prompt.slice(from, from + SIZE * hashes.length),
    blockSize: SIZE,
    loraId: null,
    loraName: null,
    medium: 'GPU',
    extraKeys: false,
  };
}

function indexed(pendingMs?: number): { index: PrefixIndex; log: string[] } {
  const log: string[] = [];
  const index = new PrefixIndex(
    { silenceMs: 1000, rebuildMs: 5000, pendingMs },
    {
      episode: (pool, address, reason) => log.push(`episode ${pool} ${address} ${reason}`),
      recovered: (pool, address) => log.push(`recovered ${pool} ${address}`),
      dropped: (pool, blocks) => log.push(`dropped ${pool} ${blocks}`),
    },
  );
  index.follow(A, 'p');
  index.follow(B, 'p');
  return { index, log };
}

describe('the prefix-cache index', () => {
  it('a prompt matches each trusted server’s leading cached blocks; the best is known', () => {
    const { index } = indexed();
    index.batch(A, batch(0, [stored([1n, 2n, 3n], null, 0)]), 0);
    index.batch(B, batch(0, [stored([9n], null, 0)]), 0);
    const match = index.match(prompt, undefined, [A, B, '10.0.0.3:8000'], 0);
    assert.equal(match.matchedTokens(A), 3 * SIZE);
    assert.equal(match.matchedTokens(B), SIZE);
    assert.equal(match.matchedTokens('10.0.0.3:8000'), undefined, 'a server we do not follow has no figure');
    assert.equal(match.bestTokens, 3 * SIZE);
  });

  it('a server whose events are not trusted has no figure; its entries are dropped and the episode told once', () => {
    const { index, log } = indexed();
    index.batch(A, batch(0, [stored([1n, 2n], null, 0)]), 0);
    index.disconnected(A, 'connection closed');
    index.disconnected(A, 'connection closed');
    assert.equal(index.match(prompt, undefined, [A], 0).matchedTokens(A), undefined);
    assert.deepEqual(log, ['dropped p 2', 'episode p 10.0.0.1:8000 disconnected']);
    // Back: new events rebuild it; trusted after rebuildMs of them.
    index.batch(A, batch(1, [stored([1n], null, 0)]), 100);
    assert.equal(index.phase(A), 'rebuilding');
    index.tick(5100);
    assert.equal(index.phase(A), 'trusted');
    assert.equal(index.match(prompt, undefined, [A], 0).matchedTokens(A), SIZE, 'rebuilt from the new events alone');
    assert.equal(log.at(-1), 'recovered p 10.0.0.1:8000');
  });

  it('silent: a request whose blocks the server lacks, and no event within silenceMs', () => {
    const { index, log } = indexed();
    index.batch(A, batch(0, [stored([1n], null, 0)]), 0);
    const match = index.match(prompt, undefined, [A], 0);
    index.routed(A, match, 1000);
    index.tick(1500);
    assert.equal(index.phase(A), 'trusted');
    index.tick(2001);
    assert.equal(index.phase(A), 'down');
    assert.deepEqual(log, ['dropped p 1', 'episode p 10.0.0.1:8000 silent']);
  });

  it('a request whose blocks are all cached expects nothing (vLLM publishes nothing for it)', () => {
    const { index } = indexed();
    index.batch(A, batch(0, [stored([1n, 2n, 3n, 4n, 5n], null, 0)]), 0);
    index.routed(A, index.match(prompt, undefined, [A], 0), 1000);
    index.tick(60_000);
    assert.equal(index.phase(A), 'trusted');
  });

  it('the capacity a scrape reports bounds the entries; a server that leaves takes its entries', () => {
    const { index, log } = indexed();
    index.batch(A, batch(0, [stored([1n, 2n, 3n], null, 0)]), 0);
    index.capacity(A, 2);
    assert.equal(index.blocks(A), 2);
    index.forget(A);
    assert.equal(index.phase(A), undefined);
    assert.deepEqual(log, ['dropped p 2']);
    assert.deepEqual(
      [...index.phases()].map(([pool, byPhase]) => [pool, [...byPhase]]),
      [['p', [['connecting', 1]]]],
    );
  });

  describe('pending blocks: a prompt just sent to a server, before its events report it', () => {
    it('count as held there for pendingMs, so a second request with the prefix follows the first', () => {
      const { index } = indexed(2000);
      index.batch(A, batch(0, [stored([1n], null, 0)]), 0);
      index.batch(B, batch(0, [stored([7n, 8n], null, 0)]), 0);
      index.routed(A, index.match(prompt, undefined, [A, B], 1000), 1000);
      const next = index.match(prompt, undefined, [A, B], 1500);
      assert.equal(next.matchedTokens(A), 5 * SIZE, 'all five blocks: one stored, four pending');
      assert.equal(next.matchedTokens(B), 2 * SIZE);
      assert.equal(next.bestTokens, 5 * SIZE);
      assert.equal(
        index.match(prompt, undefined, [A], 3000).matchedTokens(A),
        SIZE,
        'the window ended with no event: the stored block alone',
      );
      // An event keeps the publisher from counting as silent; the tick then prunes what expired.
      index.batch(A, batch(1, [stored([1n], null, 0)]), 2900);
      index.tick(3000);
      assert.equal(index.phase(A), 'trusted');
      assert.equal(index.match(prompt, undefined, [A], 2500).matchedTokens(A), SIZE, 'and the expired entries are gone');
    });

    it('the events confirm them: held after the window', () => {
      const { index } = indexed(2000);
      index.batch(A, batch(0, [stored([1n], null, 0)]), 0);
      index.routed(A, index.match(prompt, undefined, [A], 1000), 1000);
      index.batch(A, batch(1, [stored([2n, 3n, 4n, 5n], 1n, SIZE)]), 1200);
      index.tick(10_000);
      assert.equal(index.match(prompt, undefined, [A], 10_000).matchedTokens(A), 5 * SIZE);
    });

    it('go with the server’s entries when its events stop being trusted', () => {
      const { index, log } = indexed(60_000);
      index.batch(A, batch(0, [stored([1n], null, 0)]), 0);
      index.routed(A, index.match(prompt, undefined, [A], 1000), 1000);
      index.disconnected(A, 'connection closed');
      assert.equal(index.match(prompt, undefined, [A], 1100).matchedTokens(A), undefined);
      index.batch(A, batch(1, [stored([1n], null, 0)]), 1200);
      index.tick(6300);
      assert.equal(index.phase(A), 'trusted');
      assert.equal(
        index.match(prompt, undefined, [A], 6300).matchedTokens(A),
        SIZE,
        'rebuilt from events alone, nothing pending from before',
      );
      assert.deepEqual(log.slice(0, 2), ['dropped p 1', 'episode p 10.0.0.1:8000 disconnected']);
    });

    it('no more of them than the server can hold: the newest are kept', () => {
      const { index } = indexed(60_000);
      index.batch(A, batch(0, [stored([1n], null, 0)]), 0);
      index.capacity(A, 3);
      index.routed(A, index.match(prompt, undefined, [A], 1000), 1000);
      // Blocks 2–5 pending, 3 kept: the first of them went, so the leading run stops after block 1.
      assert.equal(index.match(prompt, undefined, [A], 1001).matchedTokens(A), SIZE);
      const other = index.match(
        prompt.map((t) => t + 1000),
        undefined,
        [A],
        1002,
      );
      index.routed(A, other, 1002);
      assert.equal(
        index
          .match(
            prompt.map((t) => t + 1000),
            undefined,
            [A],
            1003,
          )
          .matchedTokens(A),
        0,
        'its first blocks went too',
      );
    });

    it('a server that has stored nothing yet is credited once its metrics give its block size', () => {
      const { index } = indexed(2000);
      index.batch(A, batch(0, [{ type: 'AllBlocksCleared' }]), 0);
      assert.equal(index.phase(A), 'trusted');
      index.routed(A, index.match(prompt, undefined, [A], 1000), 1000);
      assert.equal(index.match(prompt, undefined, [A], 1001).matchedTokens(A), 0, 'block size unknown: nothing to cut the prompt by');
      index.blockSize(A, SIZE);
      index.routed(A, index.match(prompt, undefined, [A], 1002), 1002);
      assert.equal(index.match(prompt, undefined, [A], 1003).matchedTokens(A), 5 * SIZE);
    });

    it('without pendingMs only what the events report counts', () => {
      const { index } = indexed();
      index.batch(A, batch(0, [stored([1n], null, 0)]), 0);
      index.routed(A, index.match(prompt, undefined, [A], 1000), 1000);
      assert.equal(index.match(prompt, undefined, [A], 1001).matchedTokens(A), SIZE);
    });
  });
});
