// A discrete-event simulation of a pool of model servers behind one router, to compare picking
// policies on a synthetic multi-tenant workload. Deterministic for a seed; no clocks, no I/O.
//
// Workload: tenants of Zipf-like popularity, each with its own system prompt (shared by all its
// requests); per request a fresh user prompt and an output length; next to them, short
// single-turn prompts (a few to 40 tokens) drawn from a small set of common openings, so many
// are identical; arrivals are Poisson with a rate that switches between calm and burst periods.
// Servers: `slots` requests run at once (the batch limit); the rest wait in FIFO order. A running
// request costs prefill time for the prompt tokens not in the server's prefix cache, then decode
// time per output token. The prefix cache is vLLM's: whole 16-token blocks only (the tail of a
// prompt that does not fill its last block is never cached), keyed by chained block hashes, LRU at
// a per-server capacity, so a hit is the longest cached run of whole blocks.
// Routers: 1 or more llm-extproc replicas, each with its own Picker and its own view (our in-flight
// counts are per replica, as in production; each scrapes the servers itself); every arrival goes
// to one of them at random, as Envoy spreads ext_proc streams.
// The pipeline policy is the real Picker (src/picker/picker.ts) fed the way llm-extproc feeds it:
// our in-flight counts at once, model-server metrics (queue, batch, KV use) scraped every
// `scrapeMs`, the key of the shared part's whole blocks (the request minus its last message), and
// each finished request's TTFT and time per output token (the latency tracker, default settings).
// Slow servers (`slowServers`, `slowFactor`) take that many times as long for prefill and decode.

import type { Endpoint, PoolView } from '../../src/endpoints/model.js';
import { Picker } from '../../src/picker/picker.js';
import { LatencyTracker } from '../../src/picker/latency-tracker.js';
import { DEFAULT_PICKER_SETTINGS, DEFAULT_WEIGHTS } from '../../src/picker/settings.js';
import { DEFAULT_BOUNDED_LOAD, DEFAULT_LATENCY, onlyScorers, SCORERS } from '../../src/picker/scorer-table.js';
import type { PrefixMatch, ScorerWeights } from '../../src/picker/scorer-table.js';
import { SignalBoard } from '../../src/picker/signals.js';
import { Events, percentile, prng, scrapeAll } from './kernel.js';

export interface SimConfig {
  readonly seed: number;
  readonly servers: number;
  readonly slots: number;
  /** Prefix-cache capacity per server, in 16-token blocks. */
  readonly cacheBlocks: number;
  readonly tenants: number;
  readonly requests: number;
  /** Mean arrivals per second in calm and burst periods, and the mean length of each period. */
  readonly calmRate: number;
  readonly burstRate: number;
  readonly periodSeconds: number;
  readonly prefillMsPerToken: number;
  readonly decodeMsPerToken: number;
  readonly scrapeMs: number;
  /** Share of requests that are short single-turn prompts (no system prompt). */
  readonly shortShare: number;
  /** llm-extproc replicas, each with its own view. */
  readonly routers: number;
  /** The pipeline's bounded load (as picker.prefix.loadFactor / loadSlack / maxQueue). */
  readonly boundedLoad: { readonly factor: number; readonly slack: number; readonly maxQueue?: number };
  /** The first `slowServers` servers take `slowFactor` times as long for prefill and for every token. */
  readonly slowServers: number;
  readonly slowFactor: number;
  /**
   * Which of the routers' random streams to use (which replica takes an arrival, the picker's
   * tie-breaks): the same workload under another draw shows how much a result owes to chance.
   */
  readonly draw: number;
}

export const DEFAULT_SIM: SimConfig = {
  seed: 7,
  servers: 8,
  slots: 8,
  cacheBlocks: 1024,
  tenants: 24,
  requests: 20_000,
  calmRate: 14,
  burstRate: 30,
  periodSeconds: 20,
  prefillMsPerToken: 0.4,
  decodeMsPerToken: 12,
  scrapeMs: 250,
  shortShare: 0.3,
  routers: 1,
  boundedLoad: DEFAULT_BOUNDED_LOAD,
  slowServers: 0,
  slowFactor: 1,
  draw: 0,
};

export type PolicyName = 'round-robin' | 'least-in-flight' | 'pipeline' | 'precise' | 'pipeline without latency';
export const POLICIES: readonly PolicyName[] = ['round-robin', 'least-in-flight', 'pipeline', 'precise'];
/** The slow-replica scenario: what the latency signal changes. */
export const SLOW_REPLICA_POLICIES: readonly PolicyName[] = ['least-in-flight', 'pipeline without latency', 'pipeline'];

export interface SimResult {
  readonly policy: PolicyName;
  readonly routers: number;
  readonly requests: number;
  readonly meanWaitMs: number;
  readonly p99WaitMs: number;
  readonly meanTtftMs: number;
  readonly p99TtftMs: number;
  /** Whole prompt blocks served from a prefix cache / all whole prompt blocks. */
  readonly cacheHitRatio: number;
  /** Requests served by the busiest server / by the least busy one. */
  readonly maxMinLoad: number;
  /** Share of the requests the slow servers served (0 without any). */
  readonly slowShare: number;
}

const BLOCK_TOKENS = 16;

export interface SimRequest {
  readonly id: number;
  readonly arrival: number;
  readonly tenant: number;
  /** Chained hashes of the prompt's blocks: the tenant's system prompt, then the user's blocks. */
  readonly blocks: readonly number[];
  /** How many of `blocks` are the system prompt (what the router hashes for affinity). */
  readonly systemBlocks: number;
  readonly promptTokens: number;
  readonly outputTokens: number;
}

function chain(previous: number, value: number): number {
  let h = Math.imul(previous ^ value, 0x01000193) >>> 0;
  h = Math.imul(h ^ (h >>> 15), 0x85ebca6b) >>> 0;
  return (h ^ (h >>> 13)) >>> 0;
}

/** Short single-turn openings: how many distinct ones, and their popularity (Zipf-like). */
const SHORT_PHRASES = 40;
/** Affinity key = the key of the first 16 whole blocks (picker.prefix.keyBlocks' default). */
const KEY_BLOCKS = 16;

/** The synthetic workload, the same for every policy. */
export function workload(config: SimConfig): SimRequest[] {
  const rand = prng(config.seed);
  // Tenants: popularity ∝ 1 / (rank + 1), system prompts of 500–4000 tokens.
  const weights = Array.from({ length: config.tenants }, (_, i) => 1 / (i + 1));
  const total = weights.reduce((a, b) => a + b, 0);
  const systemTokens = Array.from({ length: config.tenants }, () => 500 + Math.floor(rand() * 3500));
  const systemHashes = systemTokens.map((tokens, tenant) => {
    const out: number[] = [];
    let h = 0x811c9dc5 ^ tenant;
    for (let b = 0; b < Math.floor(tokens / BLOCK_TOKENS); b++) out.push((h = chain(h, b)));
    return out;
  });
  const requests: SimRequest[] = [];
  let now = 0;
  let burst = false;
  let periodEnd = config.periodSeconds * 1000 * -Math.log(1 - rand());
  for (let id = 0; id < config.requests; id++) {
    const rate = burst ? config.burstRate : config.calmRate;
    now += (1000 / rate) * -Math.log(1 - rand());
    while (now > periodEnd) {
      burst = !burst;
      periodEnd += config.periodSeconds * 1000 * -Math.log(1 - rand());
    }
    const outputTokens = 10 + Math.floor(-Math.log(1 - rand()) * 120);
    if (rand() < config.shortShare) {
      // One message, all of it shared with the identical ones: whole blocks only.
      const phrase = Math.floor(SHORT_PHRASES * rand() * rand());
      const promptTokens = 2 + ((phrase * 7) % 39);
      const blocks: number[] = [];
      let h = 0x51ed ^ phrase;
      for (let b = 0; b < Math.floor(promptTokens / BLOCK_TOKENS); b++) blocks.push((h = chain(h, b)));
      requests.push({ id, arrival: now, tenant: -1 - phrase, blocks, systemBlocks: blocks.length, promptTokens, outputTokens });
      continue;
    }
    let pick = rand() * total;
    let tenant = 0;
    while (pick > weights[tenant] && tenant < config.tenants - 1) pick -= weights[tenant++];
    const userTokens = 30 + Math.floor(rand() * 600);
    const system = systemHashes[tenant];
    const promptTokens = systemTokens[tenant] + userTokens;
    // The system prompt's whole blocks are shared; the block it shares with the user turn, and
    // every one after, is this request's own.
    const blocks = [...system];
    let h = system.length > 0 ? system[system.length - 1] : 0;
    for (let b = system.length; b < Math.floor(promptTokens / BLOCK_TOKENS); b++) blocks.push((h = chain(h, 0x9e3779b9 ^ (id * 131 + b))));
    requests.push({ id, arrival: now, tenant, blocks, systemBlocks: system.length, promptTokens, outputTokens });
  }
  return requests;
}

/** An LRU set of block hashes (Map keeps insertion order; re-inserting moves a block to the back). */
export class PrefixCache {
  private readonly blocks = new Map<number, true>();
  constructor(private readonly capacity: number) {}

  /** Blocks of the longest cached prefix of `blocks`. */
  hits(blocks: readonly number[]): number {
    let n = 0;
    while (n < blocks.length && this.blocks.has(blocks[n])) n++;
    return n;
  }

  /** Stores (or refreshes) every block of the prompt, evicting the least recently used. */
  store(blocks: readonly number[]): void {
    for (const b of blocks) {
      this.blocks.delete(b);
      this.blocks.set(b, true);
    }
    while (this.blocks.size > this.capacity) this.blocks.delete(this.blocks.keys().next().value as number);
  }

  get size(): number {
    return this.blocks.size;
  }
}

interface Server {
  readonly address: string;
  readonly cache: PrefixCache;
  /** Waiting requests, with the router that placed each (whose in-flight count it is in). */
  readonly queue: Array<{ readonly request: SimRequest; readonly router: Router }>;
  running: number;
  served: number;
  /** 1, or slowFactor for a slow server. */
  readonly slowdown: number;
}

/** One llm-extproc replica: its own signals (in-flight counts, scrapes) and picker. */
interface Router {
  readonly board: SignalBoard;
  readonly picker: Picker;
  /** Fed with each finished request's TTFT and TPOT, as llm-extproc feeds it (pipeline with latency). */
  readonly latency: LatencyTracker | undefined;
  roundRobin: number;
}

type SimEvent =
  | { time: number; kind: 'arrival'; request: SimRequest }
  | { time: number; kind: 'finish'; server: Server; router: Router; request: SimRequest; ttftMs: number; cachedTokens: number }
  | { time: number; kind: 'scrape' };

/**
 * The scorer weights each policy picks with, derived from the scorer table (src/picker/scorer-table.ts):
 * a scorer added there runs in `pipeline` at its default weight. Round robin never asks the picker.
 */
export const POLICY_WEIGHTS: { readonly [P in PolicyName]: ScorerWeights } = {
  'round-robin': onlyScorers(SCORERS, { inFlight: 1 }),
  'least-in-flight': onlyScorers(SCORERS, { inFlight: 1 }),
  pipeline: DEFAULT_WEIGHTS,
  precise: DEFAULT_WEIGHTS,
  'pipeline without latency': { ...DEFAULT_WEIGHTS, latency: 0 },
};

/**
 * What precise mode knows at a pick: every server's cached blocks of the prompt, as its KV events
 * told them (here the simulated caches themselves: events without loss or delay).
 */
function exactMatches(servers: readonly Server[], request: SimRequest): PrefixMatch {
  const matched = new Map<string, number>();
  let bestTokens = 0;
  for (const server of servers) {
    const tokens = server.cache.hits(request.blocks) * BLOCK_TOKENS;
    matched.set(server.address, tokens);
    if (tokens > bestTokens) bestTokens = tokens;
  }
  return { matchedTokens: (address) => matched.get(address), bestTokens };
}

export function simulate(config: SimConfig, policy: PolicyName, requests: readonly SimRequest[] = workload(config)): SimResult {
  const servers: Server[] = Array.from({ length: config.servers }, (_, i) => ({
    address: `10.1.0.${i + 1}:8000`,
    cache: new PrefixCache(config.cacheBlocks),
    queue: [],
    running: 0,
    served: 0,
    slowdown: i < config.slowServers ? config.slowFactor : 1,
  }));
  const byAddress = new Map(servers.map((s) => [s.address, s]));
  const endpoints: Endpoint[] = servers.map((s) => ({ id: s.address, address: s.address, state: 'Ready', reason: '', pool: 'sim' }));
  const pools: PoolView[] = [{ name: 'sim', models: ['m'], endpoints }];
  // Draw 0 is the stream every earlier run used; the others are spread by the golden ratio.
  const rand = prng(((config.seed ^ 0x5eed) + Math.imul(config.draw, 0x9e3779b9)) >>> 0);
  const routers: Router[] = Array.from({ length: config.routers }, () => {
    const board = new SignalBoard();
    const weights = POLICY_WEIGHTS[policy];
    const latency = weights.latency > 0 ? new LatencyTracker(board, DEFAULT_LATENCY) : undefined;
    const picker = new Picker(board, {
      weights,
      fallbacks: 2,
      boundedLoad: config.boundedLoad,
      maxAdaptersPerServer: DEFAULT_PICKER_SETTINGS.lora.maxAdaptersPerServer,
      poolPolicy: () => ({}),
      random: rand,
    });
    return { board, picker, latency, roundRobin: 0 };
  });
  const waits: number[] = [];
  const ttfts: number[] = [];
  let promptBlocks = 0;
  let cachedBlocks = 0;
  const events = new Events<SimEvent>();
  for (const request of requests) events.push({ time: request.arrival, kind: 'arrival', request });
  // A policy with a scorer fed by the servers' metrics scrapes them (round-robin and least in-flight never do).
  const scraped = policy !== 'round-robin' && (POLICY_WEIGHTS[policy].queue > 0 || POLICY_WEIGHTS[policy].kvCache > 0);
  if (scraped) events.push({ time: 0, kind: 'scrape' });
  let pending = requests.length;

  const start = (server: Server, router: Router, request: SimRequest, now: number): void => {
    server.running++;
    const hitBlocks = server.cache.hits(request.blocks);
    const cached = hitBlocks * BLOCK_TOKENS;
    server.cache.store(request.blocks);
    promptBlocks += request.blocks.length;
    cachedBlocks += hitBlocks;
    const prefill = (request.promptTokens - cached) * config.prefillMsPerToken * server.slowdown;
    const ttftMs = now - request.arrival + prefill;
    waits.push(now - request.arrival);
    ttfts.push(ttftMs);
    const finish = now + prefill + request.outputTokens * config.decodeMsPerToken * server.slowdown;
    events.push({ time: finish, kind: 'finish', server, router, request, ttftMs, cachedTokens: cached });
  };

  const boards = routers.map((router) => router.board);
  for (let event = events.pop(); event !== undefined; event = events.pop()) {
    const now = event.time;
    if (event.kind === 'scrape') {
      scrapeAll(boards, servers, (s) => s.running / config.slots, now);
      if (pending > 0) events.push({ time: now + config.scrapeMs, kind: 'scrape' });
    } else if (event.kind === 'arrival') {
      const router = routers[Math.floor(rand() * routers.length)];
      let server: Server;
      if (policy === 'round-robin') server = servers[router.roundRobin++ % servers.length];
      else {
        // The chained hash of the last counted block is the key of all of them; the shared part's
        // whole blocks are what its owner may hold (the estimate the request's size gives).
        const request = event.request;
        const key = request.systemBlocks > 0 ? request.blocks[Math.min(request.systemBlocks, KEY_BLOCKS) - 1] : undefined;
        const affinity = key === undefined ? {} : { affinityKey: key, sharedTokens: request.systemBlocks * BLOCK_TOKENS };
        const outcome = router.picker.pick(
          pools,
          policy === 'precise' ? { model: 'm', ...affinity, prefix: exactMatches(servers, request) } : { model: 'm', ...affinity },
        );
        if (outcome.kind !== 'picked') throw new Error(`simulation: pick gave ${outcome.kind}`);
        server = byAddress.get(outcome.endpoints[0].address) as Server;
        router.latency?.picked('m', server.address);
      }
      router.board.cell(server.address).inFlight++;
      server.served++;
      if (server.running < config.slots) start(server, router, event.request, now);
      else server.queue.push({ request: event.request, router });
    } else {
      const server = event.server;
      server.running--;
      pending--;
      event.router.board.cell(server.address).inFlight--;
      event.router.latency?.record(
        {
          model: 'm',
          pool: 'sim',
          address: server.address,
          timeToFirstToken: event.ttftMs / 1000,
          timePerOutputToken: (config.decodeMsPerToken * server.slowdown) / 1000,
          promptTokens: event.request.promptTokens,
          durationSeconds: (now - event.request.arrival) / 1000,
          cachedTokens: event.cachedTokens,
        },
        now,
      );
      const next = server.queue.shift();
      if (next !== undefined) start(server, next.router, next.request, now);
    }
  }
  waits.sort((a, b) => a - b);
  ttfts.sort((a, b) => a - b);
  const served = servers.map((s) => s.served);
  return {
    policy,
    routers: config.routers,
    requests: requests.length,
    meanWaitMs: waits.reduce((a, b) => a + b, 0) / waits.length,
    p99WaitMs: percentile(waits, 0.99),
    meanTtftMs: ttfts.reduce((a, b) => a + b, 0) / ttfts.length,
    p99TtftMs: percentile(ttfts, 0.99),
    cacheHitRatio: promptBlocks === 0 ? 0 : cachedBlocks / promptBlocks,
    maxMinLoad: Math.max(...served) / Math.max(1, Math.min(...served)),
    slowShare: served.slice(0, config.slowServers).reduce((a, b) => a + b, 0) / requests.length,
  };
}
