// Reading vLLM's KV-event messages (src/kv-cache/kv-events.ts): both event layouts, 64-bit hashes,
// and what is refused. The payloads are made with the msgpack library llm-extproc decodes them with.
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { Decoder, Encoder } from '@msgpack/msgpack';
import { KvEventFormatError, parseKvEvent, parseKvEventMessage } from '../../../src/kv-cache/kv-events.js';

const encoder = new Encoder({ useBigInt64: true });
const decoder = new Decoder({ useBigInt64: true });
const decode = (payload: Uint8Array): unknown => decoder.decode(payload);

function seqFrame(seq: bigint): Buffer {
  const b = Buffer.alloc(8);
  b.writeBigUInt64BE(seq);
  return b;
}

function message(seq: bigint, events: unknown[], topic = 'kv@m'): Buffer[] {
  return [Buffer.from(topic), seqFrame(seq), Buffer.from(encoder.encode([1733234567.25, events, 0]))];
}

const BIG = 0xfedcba9876543210n; // above 2^53: only a bigint holds it

describe('KV-event messages', () => {
  it('reads a 0.32 batch: maps with a type, 64-bit hashes as bigint, the sequence number, the rank', () => {
    const batch = parseKvEventMessage(
      message(7n, [
        {
          type: 'BlockStored',
          block_hashes: [BIG, 5n],
          parent_block_hash: null,
          token_ids: [1, 2, 3, 4],
          block_size: 2,
          lora_id: null,
          lora_name: null,
          medium: 'GPU',
          extra_keys: [null, null],
          group_idx: 0,
          kv_cache_spec_kind: 'full_attention',
        },
        { type: 'BlockRemoved', block_hashes: [BIG], medium: 'GPU', group_idx: 0 },
        { type: 'AllBlocksCleared' },
      ]),
      decode,
    );
    assert.equal(batch.topic, 'kv@m');
    assert.equal(batch.seq, 7n);
    assert.equal(batch.ts, 1733234567.25);
    assert.equal(batch.dataParallelRank, 0);
    assert.deepEqual(batch.events, [
      {
        type: 'BlockStored',
        blockHashes: [BIG, 5n],
        parentBlockHash: null,
        tokenIds: [1, 2, 3, 4],
        blockSize: 2,
        loraId: null,
        loraName: null,
        medium: 'GPU',
        extraKeys: false,
      },
      { type: 'BlockRemoved', blockHashes: [BIG], medium: 'GPU' },
      { type: 'AllBlocksCleared' },
    ]);
  });

  it('reads the older layout: tagged arrays, fields in declaration order', () => {
    assert.deepEqual(parseKvEvent(['BlockStored', [9n], 8n, [4, 5], 2, 3, null]), {
      type: 'BlockStored',
      blockHashes: [9n],
      parentBlockHash: 8n,
      tokenIds: [4, 5],
      blockSize: 2,
      loraId: 3,
      loraName: null,
      medium: null,
      extraKeys: false,
    });
    assert.deepEqual(parseKvEvent(['BlockRemoved', [9n], 'GPU']), { type: 'BlockRemoved', blockHashes: [9n], medium: 'GPU' });
    assert.deepEqual(parseKvEvent(['AllBlocksCleared']), { type: 'AllBlocksCleared' });
  });

  it('takes 32-byte hashes (VLLM_KV_EVENTS_USE_INT_BLOCK_HASHES=0) and small integers alike', () => {
    const bytes = new Uint8Array(32).fill(0xab);
    const event = parseKvEvent({ type: 'BlockRemoved', block_hashes: [bytes, 12], medium: null });
    assert.deepEqual(event, { type: 'BlockRemoved', blockHashes: [BigInt(`0x${'ab'.repeat(32)}`), 12n], medium: null });
  });

  it('marks blocks whose hash covers more than tokens (a cache salt, images) as extra-keyed', () => {
    const event = parseKvEvent({
      type: 'BlockStored',
      block_hashes: [1n],
      parent_block_hash: null,
      token_ids: [1],
      block_size: 1,
      extra_keys: [['salt']],
    });
    assert.equal(event?.type === 'BlockStored' && event.extraKeys, true);
  });

  it('skips event types it does not know, and refuses what is not a batch, with the reason', () => {
    const batch = parseKvEventMessage(message(1n, [{ type: 'SomethingNew', x: 1 }, { type: 'AllBlocksCleared' }]), decode);
    assert.deepEqual(batch.events, [{ type: 'AllBlocksCleared' }]);
    const cases: Array<[Buffer[], RegExp]> = [
      [message(1n, []).slice(0, 2), /3 frames, got 2/],
      [[Buffer.from('t'), Buffer.alloc(4), Buffer.alloc(1)], /8 bytes, got 4/],
      [[Buffer.from('t'), seqFrame(1n), Buffer.from([0xc1])], /not msgpack/],
      [[Buffer.from('t'), seqFrame(1n), Buffer.from(encoder.encode({ a: 1 }))], /not \[ts, events, rank\]/],
      [message(1n, [{ type: 'BlockStored', block_hashes: [1n], token_ids: [1, 2, 3], block_size: 2 }]), /3 token ids for 1 blocks of 2/],
      [message(1n, [{ type: 'BlockStored', block_hashes: [1n], block_size: 2 }]), /without token_ids/],
      [message(1n, [{ type: 'BlockRemoved', block_hashes: [-1] }]), /not a block hash/],
      [message(1n, ['just a string']), /neither a map nor a tagged array/],
    ];
    for (const [frames, reason] of cases)
      assert.throws(
        () => parseKvEventMessage(frames, decode),
        (err: unknown) => err instanceof KvEventFormatError && reason.test(err.message),
      );
  });
});
