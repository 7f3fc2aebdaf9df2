// The prefix-cache index of the model servers whose KV events we follow: per server, the blocks it
// holds (pod-blocks.ts) and whether its events can be trusted now (publisher-state.ts). What the
// picker asks of it, per request: how many of the prompt's leading whole blocks each trusted server
// holds (a PrefixMatch). Pure: the subscriber (kv-events-source.ts) feeds it what the sockets say
// and the time; the observer hears what it must count and log.
//
// A server is also credited, for a short while, with the blocks of the prompts just sent to it
// (pending blocks): its events report them only once its scheduler has taken the request, and until
// then a second request with the same prefix would find no holder and go wherever load sends it,
// there to prefill the same prefix again. The events confirm them; a pick that never stores them
// (refused, cancelled, queued past the window) stops counting when the window ends.

import type { PrefixMatch } from '../picker/scorer-table.js';
import { blockKeys, rootKey } from './block-keys.js';
import type { KvEventBatch } from './kv-events.js';
import { noCounts, PodBlocks } from './pod-blocks.js';
import type { ApplyCounts } from './pod-blocks.js';
import { PublisherState } from './publisher-state.js';
import type { EpisodeReason, PublisherPhase, PublisherTimings, Verdict } from './publisher-state.js';

export interface PrefixIndexObserver {
  /** A server's index stopped being trusted: picks fall back to approximate affinity for it (counted, logged once). */
  episode?(pool: string, address: string, reason: EpisodeReason, detail: string): void;
  /** Trusted again after an episode (logged). */
  recovered?(pool: string, address: string): void;
  /** A batch was applied (counted: events by type, blocks stored, removed, dropped for capacity). */
  applied?(pool: string, counts: ApplyCounts, events: number): void;
  /** A server's entries were dropped (an episode, a departure). */
  dropped?(pool: string, blocks: number): void;
}

/** The publisher timings, and the window of pending blocks. */
export interface PrefixIndexTimings extends PublisherTimings {
  /** How long a routed prompt's blocks count as held by its server before its events report them (absent or 0: not at all). */
  readonly pendingMs?: number;
}

/** Pending blocks per server while its capacity is unknown (a large GPU's cache, in 16-token blocks). */
const MAX_PENDING_BLOCKS = 65_536;

/** A server whose events we follow. */
class Server {
  readonly blocks = new PodBlocks();
  /** Blocks of prompts routed here that its events have not reported yet: key → until when they count. */
  readonly pending = new Map<number, number>();
  readonly state: PublisherState;
  constructor(
    readonly pool: string,
    timings: PublisherTimings,
  ) {
    this.state = new PublisherState(timings);
  }
}

/** What one request's prompt matches, server by server (built per pick; looked up per candidate). */
class Matches implements PrefixMatch {
  constructor(
    private readonly tokens: ReadonlyMap<string, number>,
    readonly bestTokens: number,
    /** Whole blocks of the prompt, for telling which server must store new ones. */
    readonly promptBlocks: number,
    readonly blockSize: number,
    /** The prompt's block keys at `blockSize` (what a routed server is credited with while they are pending). */
    readonly keys: readonly number[],
  ) {}

  matchedTokens(address: string): number | undefined {
    return this.tokens.get(address);
  }
}

export class PrefixIndex {
  private readonly servers = new Map<string, Server>();
  private readonly pendingMs: number;

  constructor(
    private readonly timings: PrefixIndexTimings,
    private readonly observer: PrefixIndexObserver = {},
  ) {
    this.pendingMs = timings.pendingMs ?? 0;
  }

  /** Starts following a server (its entries start empty: nothing it publishes before is seen). */
  follow(address: string, pool: string): void {
    if (!this.servers.has(address)) this.servers.set(address, new Server(pool, this.timings));
  }

  /** Stops following a server (it left the pool): its entries go. */
  forget(address: string): void {
    const server = this.servers.get(address);
    if (server === undefined) return;
    if (server.blocks.size > 0) this.observer.dropped?.(server.pool, server.blocks.size);
    this.servers.delete(address);
  }

  addresses(): IterableIterator<string> {
    return this.servers.keys();
  }

  phase(address: string): PublisherPhase | undefined {
    return this.servers.get(address)?.state.phase;
  }

  /** Blocks the index holds for a server (0 when it does not follow it). */
  blocks(address: string): number {
    return this.servers.get(address)?.blocks.size ?? 0;
  }

  /** Servers per pool and phase (the publishers gauge). */
  phases(): Map<string, Map<PublisherPhase, number>> {
    const out = new Map<string, Map<PublisherPhase, number>>();
    for (const server of this.servers.values()) {
      let byPhase = out.get(server.pool);
      if (byPhase === undefined) out.set(server.pool, (byPhase = new Map<PublisherPhase, number>()));
      byPhase.set(server.state.phase, (byPhase.get(server.state.phase) ?? 0) + 1);
    }
    return out;
  }

  batch(address: string, batch: KvEventBatch, now: number): void {
    const server = this.servers.get(address);
    if (server === undefined) return;
    const cleared = batch.events.some((e) => e.type === 'AllBlocksCleared');
    const verdict = server.state.batch(batch.seq, cleared, now);
    this.follows(address, server, verdict, `sequence ${batch.seq}`);
    if (!verdict.apply) return;
    const counts = server.blocks.apply(batch.events, noCounts());
    this.observer.applied?.(server.pool, counts, batch.events.length);
  }

  badMessage(address: string, reason: string, now: number): void {
    const server = this.servers.get(address);
    if (server !== undefined) this.follows(address, server, server.state.badMessage(now), reason);
  }

  connected(address: string): void {
    this.servers.get(address)?.state.connected();
  }

  disconnected(address: string, detail: string): void {
    const server = this.servers.get(address);
    if (server !== undefined) this.follows(address, server, server.state.disconnected(), detail);
  }

  /** The server's capacity in blocks (`num_gpu_blocks`, from its metrics). */
  capacity(address: string, blocks: number): void {
    const server = this.servers.get(address);
    if (server === undefined || server.blocks.capacity === blocks) return;
    const counts = server.blocks.setCapacity(blocks, noCounts());
    if (counts.overCapacity > 0) this.observer.applied?.(server.pool, counts, 0);
  }

  /**
   * The server's block size as its metrics report it (`block_size`), until its events say: without
   * it, the prompts sent to a server that has stored nothing yet (just started, or just followed)
   * could not be cut into its blocks to be credited as pending.
   */
  blockSize(address: string, size: number): void {
    const server = this.servers.get(address);
    if (server !== undefined && server.blocks.blockSize === undefined) server.blocks.blockSize = size;
  }

  /** Time passes: silent publishers, finished rebuilds, pending blocks whose window ended. */
  tick(now: number): void {
    for (const [address, server] of this.servers) {
      // Every entry is set anew at the end with the same window, so the map is in expiry order:
      // only the expired head is visited.
      for (const [key, until] of server.pending) {
        if (until > now) break;
        server.pending.delete(key);
      }
      const verdict = server.state.tick(now);
      if (verdict.drop || verdict.episode !== undefined || verdict.recovered === true)
        this.follows(address, server, verdict, `no KV events for over ${this.timings.silenceMs / 1000} s after requests that store blocks`);
    }
  }

  /**
   * What a prompt's token ids match on the trusted servers among `addresses` (the candidates).
   * `adapter`: the LoRA adapter the request names, whose blocks vLLM hashes apart.
   */
  match(tokens: readonly number[], adapter: string | undefined, addresses: Iterable<string>, now: number): Matches {
    const matched = new Map<string, number>();
    const root = rootKey(adapter);
    // Keys per block size (one, unless servers of a model are configured apart).
    const keysBySize = new Map<number, number[]>();
    let best = 0;
    let promptBlocks = 0;
    let blockSize = 0;
    let promptKeys: readonly number[] = [];
    for (const address of addresses) {
      const server = this.servers.get(address);
      if (server === undefined || !server.state.trusted) continue;
      const size = server.blocks.blockSize;
      if (size === undefined) {
        // Trusted but nothing stored yet: an empty cache.
        matched.set(address, 0);
        continue;
      }
      let keys = keysBySize.get(size);
      if (keys === undefined) keysBySize.set(size, (keys = blockKeys(tokens, size, root)));
      const tokensMatched = leadingHeld(server, keys, now) * size;
      matched.set(address, tokensMatched);
      if (tokensMatched > best) best = tokensMatched;
      promptBlocks = keys.length;
      blockSize = size;
      promptKeys = keys;
    }
    return new Matches(matched, best, promptBlocks, blockSize, promptKeys);
  }

  /**
   * The request went to `address`: if the prompt has whole blocks it lacks, it must publish them
   * soon (silence detection), and until it does they count as its own (pending).
   */
  routed(address: string, match: PrefixMatch, now: number): void {
    if (!(match instanceof Matches)) return;
    const server = this.servers.get(address);
    const tokens = match.matchedTokens(address);
    if (server === undefined || tokens === undefined || match.blockSize === 0) return;
    if (tokens / match.blockSize >= match.promptBlocks) return;
    server.state.expectPublish(now);
    // Keys cut at another block size than this server's cannot match its events: not credited.
    if (this.pendingMs <= 0 || server.blocks.blockSize !== match.blockSize) return;
    const until = now + this.pendingMs;
    const { pending } = server;
    for (const key of match.keys) {
      if (server.blocks.has(key)) continue;
      // Set anew at the end of the insertion order: the oldest entries are the first to go.
      pending.delete(key);
      pending.set(key, until);
    }
    // No more pending than the server can hold (its capacity, else a bound of our own): a replica
    // routing many long new prompts keeps the newest, not an unbounded map.
    const limit = Math.min(server.blocks.capacity, MAX_PENDING_BLOCKS);
    if (pending.size > limit)
      for (const key of pending.keys()) {
        pending.delete(key);
        if (pending.size <= limit) break;
      }
  }

  private follows(address: string, server: Server, verdict: Verdict, detail: string): void {
    if (verdict.drop) server.pending.clear();
    if (verdict.drop && server.blocks.size > 0) {
      this.observer.dropped?.(server.pool, server.blocks.size);
      server.blocks.clear();
    }
    if (verdict.episode !== undefined) this.observer.episode?.(server.pool, address, verdict.episode, detail);
    if (verdict.recovered === true) this.observer.recovered?.(server.pool, address);
  }
}

/** How many of `keys`, from the first, the server holds or has pending at `now`. */
function leadingHeld(server: Server, keys: readonly number[], now: number): number {
  const { blocks, pending } = server;
  let n = 0;
  while (n < keys.length) {
    const key = keys[n];
    if (!blocks.has(key)) {
      const until = pending.get(key);
      if (until === undefined || until <= now) break;
    }
    n++;
  }
  return n;
}
