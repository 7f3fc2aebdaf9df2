// A discrete-event simulation of a pool of model servers behind one router, to compare picking
// policies on a synthetic multi-tenant workload. Deterministic for a seed; no clocks, no I/O.
//
// Workload: tenants of Zipf-like popularity, each with its own system prompt (shared by all its
// requests); per request a fresh user prompt and an output length; arrivals are Poisson with a
// rate that switches between calm and burst periods.
// Servers: `slots` requests run at once (the batch limit); the rest wait in FIFO order. A running
// request costs prefill time for the prompt tokens not in the server's prefix cache, then decode
// time per output token. The prefix cache is an LRU of 16-token blocks (vLLM's block size), keyed
// by chained block hashes, so a hit is the longest cached prefix of the prompt.
// The pipeline policy is the real Picker (src/picker/pipeline.ts) fed the way llm-extproc feeds it:
// our in-flight counts at once, model-server metrics (queue, batch, KV use) scraped every
// `scrapeMs`, and the hashes of the system prompt (the request minus its last message).

import type { Endpoint, PoolView } from '../../src/endpoints/model.js';
import { Picker } from '../../src/picker/picker.js';
import { DEFAULT_BOUNDED_LOAD, DEFAULT_WEIGHTS } from '../../src/picker/settings.js';
import type { ScorerWeights } from '../../src/picker/settings.js';
import { recordScrape, SignalBoard } from '../../src/picker/signals.js';

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
  /** The pipeline's bounded load (as picker.prefix.loadFactor / loadSlack / maxQueue). */
  readonly boundedLoad: { readonly factor: number; readonly slack: number; readonly maxQueue?: number };
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
  boundedLoad: DEFAULT_BOUNDED_LOAD,
};

export type PolicyName = 'round-robin' | 'least-in-flight' | 'pipeline';
export const POLICIES: readonly PolicyName[] = ['round-robin', 'least-in-flight', 'pipeline'];

export interface SimResult {
  readonly policy: PolicyName;
  readonly requests: number;
  readonly meanWaitMs: number;
  readonly p99WaitMs: number;
  readonly meanTtftMs: number;
  readonly p99TtftMs: number;
  /** Prompt tokens served from a prefix cache / all prompt tokens. */
  readonly cacheHitRatio: number;
  /** Requests served by the busiest server / by the least busy one. */
  readonly maxMinLoad: number;
}

const BLOCK_TOKENS = 16;

/** Seeded PRNG (mulberry32). */
function prng(seed: number): () => number {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

interface SimRequest {
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
    for (let b = 0; b < Math.ceil(tokens / BLOCK_TOKENS); b++) out.push((h = chain(h, b)));
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
    let pick = rand() * total;
    let tenant = 0;
    while (pick > weights[tenant] && tenant < config.tenants - 1) pick -= weights[tenant++];
    const userTokens = 30 + Math.floor(rand() * 600);
    const outputTokens = 10 + Math.floor(-Math.log(1 - rand()) * 120);
    const system = systemHashes[tenant];
    const blocks = [...system];
    let h = system[system.length - 1];
    for (let b = 0; b < Math.ceil(userTokens / BLOCK_TOKENS); b++) blocks.push((h = chain(h, 0x9e3779b9 ^ (id * 131 + b))));
    requests.push({
      id,
      arrival: now,
      tenant,
      blocks,
      systemBlocks: system.length,
      promptTokens: systemTokens[tenant] + userTokens,
      outputTokens,
    });
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
  readonly queue: SimRequest[];
  running: number;
  served: number;
}

/** A binary min-heap of events by time. */
class Events<T extends { time: number }> {
  private readonly heap: T[] = [];
  push(event: T): void {
    const h = this.heap;
    h.push(event);
    let i = h.length - 1;
    while (i > 0) {
      const parent = (i - 1) >> 1;
      if (h[parent].time <= h[i].time) break;
      [h[parent], h[i]] = [h[i], h[parent]];
      i = parent;
    }
  }
  pop(): T | undefined {
    const h = this.heap;
    const top = h[0];
    const last = h.pop();
    if (h.length > 0 && last !== undefined) {
      h[0] = last;
      let i = 0;
      for (;;) {
        const l = 2 * i + 1;
        const r = l + 1;
        let m = i;
        if (l < h.length && h[l].time < h[m].time) m = l;
        if (r < h.length && h[r].time < h[m].time) m = r;
        if (m === i) break;
        [h[m], h[i]] = [h[i], h[m]];
        i = m;
      }
    }
    return top;
  }
}

type SimEvent =
  | { time: number; kind: 'arrival'; request: SimRequest }
  | { time: number; kind: 'finish'; server: Server; request: SimRequest }
  | { time: number; kind: 'scrape' };

const LEAST_IN_FLIGHT: ScorerWeights = { queue: 0, kvCache: 0, inFlight: 1, prefix: 0, lora: 0 };

function percentile(sorted: readonly number[], q: number): number {
  return sorted.length === 0 ? 0 : sorted[Math.min(sorted.length - 1, Math.floor(q * sorted.length))];
}

export function simulate(config: SimConfig, policy: PolicyName, requests: readonly SimRequest[] = workload(config)): SimResult {
  const servers: Server[] = Array.from({ length: config.servers }, (_, i) => ({
    address: `10.1.0.${i + 1}:8000`,
    cache: new PrefixCache(config.cacheBlocks),
    queue: [],
    running: 0,
    served: 0,
  }));
  const byAddress = new Map(servers.map((s) => [s.address, s]));
  const endpoints: Endpoint[] = servers.map((s) => ({ id: s.address, address: s.address, state: 'Ready', reason: '', pool: 'sim' }));
  const pools: PoolView[] = [{ name: 'sim', models: ['m'], endpoints }];
  const board = new SignalBoard();
  const rand = prng(config.seed ^ 0x5eed);
  const picker = new Picker(board, {
    weights: policy === 'pipeline' ? DEFAULT_WEIGHTS : LEAST_IN_FLIGHT,
    fallbacks: 2,
    boundedLoad: config.boundedLoad,
    keyBlocks: 8,
    maxAdaptersPerServer: 4,
    poolPolicy: () => ({}),
    random: rand,
  });
  let roundRobin = 0;
  const waits: number[] = [];
  const ttfts: number[] = [];
  let promptTokens = 0;
  let cachedTokens = 0;
  const events = new Events<SimEvent>();
  for (const request of requests) events.push({ time: request.arrival, kind: 'arrival', request });
  if (policy === 'pipeline') events.push({ time: 0, kind: 'scrape' });
  let pending = requests.length;

  const start = (server: Server, request: SimRequest, now: number): void => {
    server.running++;
    const hitBlocks = server.cache.hits(request.blocks);
    const cached = Math.min(request.promptTokens, hitBlocks * BLOCK_TOKENS);
    server.cache.store(request.blocks);
    promptTokens += request.promptTokens;
    cachedTokens += cached;
    const prefill = (request.promptTokens - cached) * config.prefillMsPerToken;
    waits.push(now - request.arrival);
    ttfts.push(now - request.arrival + prefill);
    events.push({ time: now + prefill + request.outputTokens * config.decodeMsPerToken, kind: 'finish', server, request });
  };

  for (let event = events.pop(); event !== undefined; event = events.pop()) {
    const now = event.time;
    if (event.kind === 'scrape') {
      for (const s of servers) {
        recordScrape(
          board.cell(s.address),
          {
            waiting: s.queue.length,
            running: s.running,
            kvCacheUsage: s.running / config.slots,
            runningAdapters: [],
            waitingAdapters: [],
            maxAdapters: undefined,
          },
          now,
        );
      }
      if (pending > 0) events.push({ time: now + config.scrapeMs, kind: 'scrape' });
    } else if (event.kind === 'arrival') {
      let server: Server;
      if (policy === 'round-robin') server = servers[roundRobin++ % servers.length];
      else {
        const outcome = picker.pick(pools, { model: 'm', promptBlocks: event.request.blocks.slice(0, event.request.systemBlocks) });
        if (outcome.kind !== 'picked') throw new Error(`simulation: pick gave ${outcome.kind}`);
        server = byAddress.get(outcome.endpoints[0].address) as Server;
      }
      board.cell(server.address).inFlight++;
      server.served++;
      if (server.running < config.slots) start(server, event.request, now);
      else server.queue.push(event.request);
    } else {
      const server = event.server;
      server.running--;
      pending--;
      board.cell(server.address).inFlight--;
      const next = server.queue.shift();
      if (next !== undefined) start(server, next, now);
    }
  }
  waits.sort((a, b) => a - b);
  ttfts.sort((a, b) => a - b);
  const served = servers.map((s) => s.served);
  return {
    policy,
    requests: requests.length,
    meanWaitMs: waits.reduce((a, b) => a + b, 0) / waits.length,
    p99WaitMs: percentile(waits, 0.99),
    meanTtftMs: ttfts.reduce((a, b) => a + b, 0) / ttfts.length,
    p99TtftMs: percentile(ttfts, 0.99),
    cacheHitRatio: cachedTokens / promptTokens,
    maxMinLoad: Math.max(...served) / Math.max(1, Math.min(...served)),
  };
}
