// The blocks one model server holds in its prefix cache, as its KV events tell: vLLM's hash of each
// block (what BlockRemoved names) mapped to our key (block-keys.ts: the chain of its tokens), in the
// order they were stored. Bounded by the server's own capacity (`num_gpu_blocks`): should a
// BlockRemoved be lost, the oldest entries go first, as the oldest blocks are the first the server
// evicts. Pure; one instance per server, owned by the prefix-cache index (prefix-index.ts).

import { blockKey, rootKey } from './block-keys.js';
import type { KvEvent } from './kv-events.js';

/** Our key of a block we cannot match from a prompt (unknown parent, extra hash keys). */
const UNMATCHABLE = -1;

/** What applying one batch's events did, for the counters. */
export interface ApplyCounts {
  stored: number;
  removed: number;
  /** Stored blocks that can never match a prompt (parent unknown to us, or extra hash keys). */
  unmatchable: number;
  /** Entries dropped to stay within the server's capacity. */
  overCapacity: number;
  /** AllBlocksCleared seen. */
  cleared: boolean;
}

export function noCounts(): ApplyCounts {
  return { stored: 0, removed: 0, unmatchable: 0, overCapacity: 0, cleared: false };
}

/** Whether a block stored on this medium is in the engine's own cache (offload tiers are not counted). */
function ownCache(medium: string | null): boolean {
  return medium === null || medium === 'GPU';
}

export class PodBlocks {
  /** vLLM's hash → our key, oldest first. */
  private readonly byHash = new Map<bigint, number>();
  /** Our key → how many of vLLM's hashes carry it (one, unless two chains collide in our hash). */
  private readonly keys = new Map<number, number>();
  /** The block size the server's events report; undefined until the first BlockStored. */
  blockSize: number | undefined;

  /** `capacity`: the server's cache size in blocks (`num_gpu_blocks`), Infinity while unknown. */
  constructor(public capacity = Number.POSITIVE_INFINITY) {}

  get size(): number {
    return this.byHash.size;
  }

  /** Whether the block with our key `key` is cached here. */
  has(key: number): boolean {
    return this.keys.has(key);
  }

  /** How many of `keys` (a prompt's blocks, in order) are cached here from the first one on. */
  leadingMatches(keys: readonly number[]): number {
    let n = 0;
    while (n < keys.length && this.keys.has(keys[n])) n++;
    return n;
  }

  clear(): void {
    this.byHash.clear();
    this.keys.clear();
  }

  apply(events: readonly KvEvent[], counts: ApplyCounts = noCounts()): ApplyCounts {
    for (const event of events) {
      if (event.type === 'BlockStored') this.store(event, counts);
      else if (event.type === 'BlockRemoved') {
        if (!ownCache(event.medium)) continue;
        for (const hash of event.blockHashes) if (this.remove(hash)) counts.removed++;
      } else {
        this.clear();
        counts.cleared = true;
      }
    }
    this.bound(counts);
    return counts;
  }

  /** Lowers the capacity (a scrape told it) and drops the oldest entries beyond it. */
  setCapacity(blocks: number, counts: ApplyCounts = noCounts()): ApplyCounts {
    this.capacity = blocks > 0 ? blocks : Number.POSITIVE_INFINITY;
    this.bound(counts);
    return counts;
  }

  private store(event: Extract<KvEvent, { type: 'BlockStored' }>, counts: ApplyCounts): void {
    if (!ownCache(event.medium)) return;
    this.blockSize = event.blockSize;
    let parent = event.parentBlockHash === null ? rootKey(event.loraName) : (this.byHash.get(event.parentBlockHash) ?? UNMATCHABLE);
    for (let i = 0; i < event.blockHashes.length; i++) {
      const key =
        parent === UNMATCHABLE || event.extraKeys ? UNMATCHABLE : blockKey(parent, event.tokenIds, i * event.blockSize, event.blockSize);
      const hash = event.blockHashes[i];
      // Stored again (after its eviction was not told to us, or a restart we did not see): fresh.
      this.remove(hash);
      this.byHash.set(hash, key);
      if (key === UNMATCHABLE) counts.unmatchable++;
      else this.keys.set(key, (this.keys.get(key) ?? 0) + 1);
      counts.stored++;
      parent = key;
    }
  }

  private remove(hash: bigint): boolean {
    const key = this.byHash.get(hash);
    if (key === undefined) return false;
    this.byHash.delete(hash);
    if (key !== UNMATCHABLE) {
      const left = (this.keys.get(key) ?? 1) - 1;
      if (left > 0) this.keys.set(key, left);
      else this.keys.delete(key);
    }
    return true;
  }

  private bound(counts: ApplyCounts): void {
    while (this.byHash.size > this.capacity) {
      const oldest = this.byHash.keys().next().value as bigint;
      this.remove(oldest);
      counts.overCapacity++;
    }
  }
}
