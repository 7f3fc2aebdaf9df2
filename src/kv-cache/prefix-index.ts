// The prefix-cache index of the model servers whose KV events we follow: per server, the blocks it
// holds (pod-blocks.ts) and whether its events can be trusted now (publisher-state.ts). What the
// picker asks of it, per request: how many of the prompt's leading whole blocks each trusted server
// holds (a PrefixMatch). Pure: the subscriber (kv-events-source.ts) feeds it what the sockets say
// and the time; the observer hears what it must count and log.

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

/** A server whose events we follow. */
class Server {
  readonly blocks = new PodBlocks();
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
  ) {}

  matchedTokens(address: string): number | undefined {
    return this.tokens.get(address);
  }
}

export class PrefixIndex {
  private readonly servers = new Map<string, Server>();

  constructor(
    private readonly timings: PublisherTimings,
    private readonly observer: PrefixIndexObserver = {},
  ) {}

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

  /** Time passes: silent publishers, finished rebuilds. */
  tick(now: number): void {
    for (const [address, server] of this.servers) {
      const verdict = server.state.tick(now);
      if (verdict.drop || verdict.episode !== undefined || verdict.recovered === true)
        this.follows(address, server, verdict, `no KV events for over ${this.timings.silenceMs / 1000} s after requests that store blocks`);
    }
  }

  /**
   * What a prompt's token ids match on the trusted servers among `addresses` (the candidates).
   * `adapter`: the LoRA adapter the request names, whose blocks vLLM hashes apart.
   */
  match(tokens: readonly number[], adapter: string | undefined, addresses: Iterable<string>): Matches {
    const matched = new Map<string, number>();
    const root = rootKey(adapter);
    // Keys per block size (one, unless servers of a model are configured apart).
    const keysBySize = new Map<number, number[]>();
    let best = 0;
    let promptBlocks = 0;
    let blockSize = 0;
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
      const tokensMatched = server.blocks.leadingMatches(keys) * size;
      matched.set(address, tokensMatched);
      if (tokensMatched > best) best = tokensMatched;
      promptBlocks = keys.length;
      blockSize = size;
    }
    return new Matches(matched, best, promptBlocks, blockSize);
  }

  /** The request went to `address`: if the prompt has whole blocks it lacks, it must publish them soon (silence detection). */
  routed(address: string, match: PrefixMatch, now: number): void {
    if (!(match instanceof Matches)) return;
    const server = this.servers.get(address);
    const tokens = match.matchedTokens(address);
    if (server === undefined || tokens === undefined || match.blockSize === 0) return;
    if (tokens / match.blockSize < match.promptBlocks) server.state.expectPublish(now);
  }

  private follows(address: string, server: Server, verdict: Verdict, detail: string): void {
    if (verdict.drop && server.blocks.size > 0) {
      this.observer.dropped?.(server.pool, server.blocks.size);
      server.blocks.clear();
    }
    if (verdict.episode !== undefined) this.observer.episode?.(server.pool, address, verdict.episode, detail);
    if (verdict.recovered === true) this.observer.recovered?.(server.pool, address);
  }
}
