// What a vLLM engine publishes about its prefix cache, read from one ZMQ message. vLLM
// (`--kv-events-config` with `"publisher":"zmq"`) sends three frames per message: the topic, an
// 8-byte big-endian sequence number (from 0 at each start of the engine, one per batch), and a
// msgpack batch `[ts, [event, ...], data_parallel_rank]`. vLLM 0.32 encodes each event as a map with
// a `type` (BlockStored, BlockRemoved, AllBlocksCleared); older releases as an array whose first
// element is that tag, fields in declaration order. Both are read. Pure: the msgpack decoder is
// passed in (the socket's edge module owns the libraries, loaded only in precise mode), so these
// rules are table-tested without either. docs/picking.md ("What a real vLLM reports and publishes")
// records what a real server sends.

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
      /** The adapter's name (vLLM ≥ 0.11), which is what a request names as its model. */
      readonly loraName: string | null;
      /** `GPU` (the engine's own cache; also on the CPU build), `CPU` for an offload tier, or null. */
      readonly medium: string | null;
      /**
       * Whether some block's hash covers more than its tokens and its adapter (a cache salt, images:
       * vLLM's `extra_keys`): such blocks cannot be matched from a prompt's tokens.
       */
      readonly extraKeys: boolean;
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

/** A message that is not a KV-event batch; `reason` says what is wrong (logged, counted). */
export class KvEventFormatError extends Error {
  override readonly name = 'KvEventFormatError';
}

/** Block hashes are 64-bit: msgpack sends small ones as plain integers, the rest as uint64; 32 raw bytes when int hashes are off. */
function hash(value: unknown): bigint {
  if (typeof value === 'bigint') return value;
  if (typeof value === 'number' && Number.isSafeInteger(value) && value >= 0) return BigInt(value);
  if (value instanceof Uint8Array && value.length > 0)
    return BigInt(`0x${Buffer.from(value.buffer, value.byteOffset, value.length).toString('hex')}`);
  throw new KvEventFormatError(`not a block hash: ${typeof value}`);
}

function hashes(value: unknown): bigint[] {
  if (!Array.isArray(value)) throw new KvEventFormatError('block_hashes is not an array');
  return value.map(hash);
}

function intOrNull(value: unknown): number | null {
  if (value === null || value === undefined) return null;
  const n = Number(value);
  return Number.isFinite(n) ? n : null;
}

function stringOrNull(value: unknown): string | null {
  return typeof value === 'string' ? value : null;
}

/** Field names in the order older vLLM wrote them into a tagged array. */
const ARRAY_FIELDS: Readonly<Record<KvEvent['type'], readonly string[]>> = {
  BlockStored: ['block_hashes', 'parent_block_hash', 'token_ids', 'block_size', 'lora_id', 'medium'],
  BlockRemoved: ['block_hashes', 'medium'],
  AllBlocksCleared: [],
};

function isEventType(value: string): value is KvEvent['type'] {
  return Object.hasOwn(ARRAY_FIELDS, value);
}

function asFields(raw: unknown): { type: string; fields: Readonly<Record<string, unknown>> } {
  if (Array.isArray(raw) && typeof raw[0] === 'string') {
    const tag = raw[0];
    const names = isEventType(tag) ? ARRAY_FIELDS[tag] : [];
    return { type: tag, fields: Object.fromEntries(names.map((name, i) => [name, raw[i + 1]])) };
  }
  if (raw !== null && typeof raw === 'object' && !Array.isArray(raw) && !(raw instanceof Uint8Array)) {
    const fields = raw as Readonly<Record<string, unknown>>;
    return { type: typeof fields['type'] === 'string' ? fields['type'] : '', fields };
  }
  throw new KvEventFormatError('a KV event is neither a map nor a tagged array');
}

/** Whether any block carries extra hash keys (vLLM sends one null per block when none do). */
function hasExtraKeys(value: unknown): boolean {
  if (value === null || value === undefined) return false;
  if (!Array.isArray(value)) return true;
  return value.some((keys) => keys !== null && keys !== undefined);
}

/** One event in either layout; undefined for a type this release does not know (skipped, not an error). */
export function parseKvEvent(raw: unknown): KvEvent | undefined {
  const { type, fields } = asFields(raw);
  switch (type) {
    case 'BlockStored': {
      const tokenIds = fields['token_ids'];
      if (!Array.isArray(tokenIds)) throw new KvEventFormatError('BlockStored without token_ids');
      const blockHashes = hashes(fields['block_hashes']);
      const blockSize = Number(fields['block_size']);
      if (!Number.isInteger(blockSize) || blockSize < 1) throw new KvEventFormatError('BlockStored without a block_size');
      if (tokenIds.length !== blockSize * blockHashes.length)
        throw new KvEventFormatError(`BlockStored with ${tokenIds.length} token ids for ${blockHashes.length} blocks of ${blockSize}`);
      const parent = fields['parent_block_hash'];
      return {
        type,
        blockHashes,
        parentBlockHash: parent === null || parent === undefined ? null : hash(parent),
        tokenIds: tokenIds.map(Number),
        blockSize,
        loraId: intOrNull(fields['lora_id']),
        loraName: stringOrNull(fields['lora_name']),
        medium: stringOrNull(fields['medium']),
        extraKeys: hasExtraKeys(fields['extra_keys']),
      };
    }
    case 'BlockRemoved':
      return { type, blockHashes: hashes(fields['block_hashes']), medium: stringOrNull(fields['medium']) };
    case 'AllBlocksCleared':
      return { type };
    default:
      return undefined;
  }
}

/** One ZMQ message (three frames) as a batch; `decode` is a msgpack decoder that returns 64-bit integers as bigint. */
export function parseKvEventMessage(frames: readonly Uint8Array[], decode: (payload: Uint8Array) => unknown): KvEventBatch {
  if (frames.length !== 3) throw new KvEventFormatError(`a KV-event message has 3 frames, got ${frames.length}`);
  const [topic, seq, payload] = frames;
  if (seq.length !== 8) throw new KvEventFormatError(`the sequence frame has 8 bytes, got ${seq.length}`);
  let batch: unknown;
  try {
    batch = decode(payload);
  } catch (err) {
    throw new KvEventFormatError(`the payload is not msgpack: ${err instanceof Error ? err.message : String(err)}`);
  }
  if (!Array.isArray(batch) || batch.length < 2 || !Array.isArray(batch[1]))
    throw new KvEventFormatError('the payload is not [ts, events, rank]');
  const events: KvEvent[] = [];
  for (const raw of batch[1] as unknown[]) {
    const event = parseKvEvent(raw);
    if (event !== undefined) events.push(event);
  }
  return {
    topic: Buffer.from(topic.buffer, topic.byteOffset, topic.length).toString('utf8'),
    seq: Buffer.from(seq.buffer, seq.byteOffset, seq.length).readBigUInt64BE(0),
    ts: Number(batch[0]),
    events,
    dataParallelRank: intOrNull(batch[2]),
  };
}
