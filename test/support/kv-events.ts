// A subscriber to one vLLM server's KV-cache events, for tests: what the engine says it stored in
// and evicted from its prefix cache. vLLM (`--kv-events-config` with `"publisher":"zmq"` and an
// endpoint it binds, `tcp://*:PORT`) publishes on a ZMQ PUB socket; each message has three frames:
// the topic, an 8-byte big-endian sequence number (from 0 at each start of the engine), and a
// msgpack batch `[ts, [event, ...], data_parallel_rank]`. vLLM 0.32 encodes each event as a map
// with a `type` (BlockStored, BlockRemoved, AllBlocksCleared); older releases as an array whose
// first element is that tag, fields in declaration order. Both are read here. What was published
// before a subscriber connected is not delivered (PUB/SUB), so connect before the traffic.
// docs/picking.md ("What a real vLLM reports and publishes") records what a real server sends.

import { Decoder } from '@msgpack/msgpack';
import { Subscriber } from 'zeromq';
import { waitUntil } from './wait-until.js';

export type KvEvent =
  | {
      readonly type: 'BlockStored';
      /** One per full block stored, chained: each block's hash covers its parent's. */
      readonly blockHashes: readonly bigint[];
      /** The block before the first one here, or null at the start of a prompt. */
      readonly parentBlockHash: bigint | null;
      /** The tokens of all the blocks, in order: blockSize × blockHashes.length ids. */
      readonly tokenIds: readonly number[];
      readonly blockSize: number;
      readonly loraId: number | null;
      readonly medium: string | null;
    }
  | { readonly type: 'BlockRemoved'; readonly blockHashes: readonly bigint[]; readonly medium: string | null }
  | { readonly type: 'AllBlocksCleared' };

export interface KvEventBatch {
  readonly topic: string;
  readonly seq: bigint;
  /** The engine's clock (seconds since the epoch) when the batch was made. */
  readonly ts: number;
  readonly events: readonly KvEvent[];
  readonly dataParallelRank: number | null;
}

/** Block hashes are 64-bit: msgpack sends small ones as plain integers, the rest as uint64. */
function hash(value: unknown): bigint {
  if (typeof value === 'bigint') return value;
  if (typeof value === 'number' && Number.isInteger(value)) return BigInt(value);
  if (value instanceof Uint8Array) return BigInt(`0x${Buffer.from(value).toString('hex') || '0'}`);
  throw new Error(`not a block hash: ${String(value)}`);
}

function hashes(value: unknown): bigint[] {
  if (!Array.isArray(value)) throw new Error('block_hashes is not an array');
  return value.map(hash);
}

function intOrNull(value: unknown): number | null {
  return value === null || value === undefined ? null : Number(value);
}

function stringOrNull(value: unknown): string | null {
  return typeof value === 'string' ? value : null;
}

/** Field names in the order older vLLM wrote them into a tagged array. */
const ARRAY_FIELDS: Record<KvEvent['type'], readonly string[]> = {
  BlockStored: ['block_hashes', 'parent_block_hash', 'token_ids', 'block_size', 'lora_id', 'medium'],
  BlockRemoved: ['block_hashes', 'medium'],
  AllBlocksCleared: [],
};

function asFields(raw: unknown): { type: string; fields: Record<string, unknown> } {
  if (Array.isArray(raw) && typeof raw[0] === 'string') {
    const names = ARRAY_FIELDS[raw[0] as KvEvent['type']] ?? [];
    return { type: raw[0], fields: Object.fromEntries(names.map((name, i) => [name, raw[i + 1]])) };
  }
  if (raw !== null && typeof raw === 'object' && !Array.isArray(raw)) {
    const fields = raw as Record<string, unknown>;
    return { type: String(fields['type']), fields };
  }
  throw new Error('a KV event is neither a map nor a tagged array');
}

/** One event in either layout. */
export function parseKvEvent(raw: unknown): KvEvent {
  const { type, fields } = asFields(raw);
  switch (type) {
    case 'BlockStored': {
      const tokenIds = fields['token_ids'];
      if (!Array.isArray(tokenIds)) throw new Error('BlockStored without token_ids');
      return {
        type,
        blockHashes: hashes(fields['block_hashes']),
        parentBlockHash:
          fields['parent_block_hash'] === null || fields['parent_block_hash'] === undefined ? null : hash(fields['parent_block_hash']),
        tokenIds: tokenIds.map(Number),
        blockSize: Number(fields['block_size']),
        loraId: intOrNull(fields['lora_id']),
        medium: stringOrNull(fields['medium']),
      };
    }
    case 'BlockRemoved':
      return { type, blockHashes: hashes(fields['block_hashes']), medium: stringOrNull(fields['medium']) };
    case 'AllBlocksCleared':
      return { type };
    default:
      throw new Error(`unknown KV event type ${type}`);
  }
}

const decoder = new Decoder({ useBigInt64: true });

/** One ZMQ message (three frames) as a batch. */
export function parseKvEventMessage(frames: readonly Buffer[]): KvEventBatch {
  if (frames.length !== 3) throw new Error(`a KV-event message has 3 frames, got ${frames.length}`);
  const [topic, seq, payload] = frames;
  if (seq.length !== 8) throw new Error(`the sequence frame has 8 bytes, got ${seq.length}`);
  const batch = decoder.decode(payload);
  if (!Array.isArray(batch) || batch.length < 2 || !Array.isArray(batch[1])) throw new Error('the payload is not [ts, events, rank]');
  return {
    topic: topic.toString('utf8'),
    seq: seq.readBigUInt64BE(0),
    ts: Number(batch[0]),
    events: (batch[1] as unknown[]).map(parseKvEvent),
    dataParallelRank: intOrNull(batch[2]),
  };
}

export class KvEventSubscriber {
  /** Every batch received, in order. Tests may clear it (`batches.length = 0`). */
  readonly batches: KvEventBatch[] = [];
  /** Messages that did not parse, with the reason (a test should assert there are none). */
  readonly rejected: string[] = [];
  private readonly socket = new Subscriber();
  private readonly done: Promise<void>;
  private handshakes = 0;

  private constructor(endpoint: string, topic: string) {
    // Counted from before the connect: a handshake also happens again after a publisher restarts.
    this.socket.events.on('handshake', () => this.handshakes++);
    this.socket.connect(endpoint);
    this.socket.subscribe(topic);
    this.done = this.receive();
  }

  /** Connects and resolves once the ZMTP handshake with the publisher is done (what it sends from then on arrives). */
  static async connect(endpoint: string, topic = ''): Promise<KvEventSubscriber> {
    const subscriber = new KvEventSubscriber(endpoint, topic);
    await subscriber.connected(1);
    return subscriber;
  }

  /** Resolves once `count` handshakes have happened (the first connect, then each reconnect to a restarted publisher). */
  async connected(count: number, timeoutMs = 10_000): Promise<void> {
    await waitUntil(() => (this.handshakes >= count ? true : undefined), {
      description: `ZMQ handshake #${count} with the publisher`,
      timeoutMs,
    });
  }

  private async receive(): Promise<void> {
    try {
      for await (const frames of this.socket) {
        try {
          this.batches.push(parseKvEventMessage(frames));
        } catch (err) {
          this.rejected.push(err instanceof Error ? err.message : String(err));
        }
      }
    } catch {
      // Closed while waiting for the next message.
    }
  }

  /** Every event received so far, flattened. */
  events(): KvEvent[] {
    return this.batches.flatMap((b) => b.events);
  }

  /** Waits until `probe` over the events so far returns something. */
  waitFor<T>(probe: (events: KvEvent[]) => T | undefined, description: string, timeoutMs = 10_000): Promise<T> {
    return waitUntil(() => probe(this.events()), { description, timeoutMs });
  }

  async close(): Promise<void> {
    this.socket.close();
    await this.done;
  }
}
