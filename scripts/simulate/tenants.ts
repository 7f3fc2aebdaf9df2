// The saturated multi-tenant scenario of `npm run simulate`: an interactive tenant at a steady rate,
// a batch tenant that floods the pool at several times its capacity for a while, and a sheddable
// tenant (priority below zero), without flow control and with it, behind 1 or more llm-extproc
// replicas. Deterministic for a seed; no clocks, no I/O.
//
// Model servers as in sim.ts: `slots` requests run at once, the rest wait in FIFO order; a request
// costs prefill per prompt token, then decode per output token; each reports its queue, its batch
// and its KV-cache use (the tokens its running requests hold, prompt and output, over `kvTokens`),
// scraped every `scrapeMs`.
// Each llm-extproc replica is what production runs, on the simulation's clock: the real Picker
// with the pool's saturation limits (src/picker/saturation.ts), the real FlowControl
// (src/routing/flow-control.ts, its queue src/routing/flow-queue.ts) with a virtual timer for the
// TTL, admitted the way StoreRouting.admit does it, woken when one of its own requests finishes
// and when a scrape lands. Each replica counts only its own in-flight requests and queues only
// its own arrivals; Envoy spreads the streams over the replicas at random (or, in one variant,
// sends all the batch tenant's to the first replica).

import type { Endpoint, PoolView } from '../../src/endpoints/model.js';
import { GatewayError } from '../../src/errors/gateway-error.js';
import { Picker } from '../../src/picker/picker.js';
import { DEFAULT_SATURATION, type SaturationLimits } from '../../src/picker/saturation.js';
import { DEFAULT_FLOW_CONTROL, DEFAULT_PICKER_SETTINGS } from '../../src/picker/settings.js';
import { DEFAULT_BOUNDED_LOAD } from '../../src/picker/scorer-table.js';
import { SignalBoard } from '../../src/picker/signals.js';
import { FlowControl, type FlowTimers } from '../../src/routing/flow-control.js';
import { Events, percentile, prng, scrapeAll } from './kernel.js';
import { POLICY_WEIGHTS } from './sim.js';

export type TenantName = 'interactive' | 'batch' | 'sheddable';
const TENANTS: readonly TenantName[] = ['interactive', 'batch', 'sheddable'];
/** Interactive and batch share a priority (fairness between tenants decides); sheddable is below zero. */
const PRIORITY: Readonly<Record<TenantName, number>> = { interactive: 0, batch: 0, sheddable: -1 };

export type Spread = 'random' | 'batch-on-one';

export interface TenantSimConfig {
  readonly seed: number;
  readonly servers: number;
  readonly slots: number;
  /** KV-cache capacity per server, in tokens. */
  readonly kvTokens: number;
  readonly prefillMsPerToken: number;
  readonly decodeMsPerToken: number;
  readonly scrapeMs: number;
  /** Arrivals run this long; the batch tenant sends only between floodFrom and floodUntil. */
  readonly durationSeconds: number;
  readonly floodFromSeconds: number;
  readonly floodUntilSeconds: number;
  /** Mean arrival rates, in multiples of the pool's capacity (poolCapacity). */
  readonly load: Readonly<Record<TenantName, number>>;
  readonly routers: number;
  readonly spread: Spread;
  readonly flowControl: boolean;
  /** picker.flowControl.saturation.maxInFlight: our requests per model server, per llm-extproc replica. */
  readonly maxInFlight: number;
  /** The TTL in the queue (timedTtlSeconds for our shipped buffered configs) and the queue bound. */
  readonly ttlMs: number;
  readonly maxQueued: number;
}

export const DEFAULT_TENANT_SIM: TenantSimConfig = {
  seed: 7,
  servers: 8,
  slots: 8,
  kvTokens: 8192,
  prefillMsPerToken: 0.4,
  decodeMsPerToken: 12,
  scrapeMs: 250,
  durationSeconds: 90,
  floodFromSeconds: 15,
  floodUntilSeconds: 75,
  load: { interactive: 0.2, batch: 5, sheddable: 0.2 },
  routers: 1,
  spread: 'random',
  flowControl: false,
  // As many as a server runs at once: a replica alone keeps every batch full and no queue behind it.
  maxInFlight: 8,
  ttlMs: DEFAULT_FLOW_CONTROL.timedTtlMs,
  maxQueued: DEFAULT_FLOW_CONTROL.maxQueued,
};

/** Prompt tokens are uniform in [PROMPT_MIN, PROMPT_MIN + PROMPT_SPAN); outputs 10 + exponential. */
const PROMPT_MIN = 100;
const PROMPT_SPAN = 800;
const OUTPUT_MIN = 10;
const OUTPUT_MEAN_EXTRA = 120;
/** E[floor(X)] for X exponential with mean OUTPUT_MEAN_EXTRA. */
const MEAN_OUTPUT = OUTPUT_MIN + 1 / (Math.exp(1 / OUTPUT_MEAN_EXTRA) - 1);

/** Requests per second the pool serves with every slot busy (mean service time of a request). */
function poolCapacity(config: TenantSimConfig): number {
  const serviceMs = (PROMPT_MIN + (PROMPT_SPAN - 1) / 2) * config.prefillMsPerToken + MEAN_OUTPUT * config.decodeMsPerToken;
  return (config.servers * config.slots * 1000) / serviceMs;
}

interface TenantRequest {
  readonly id: number;
  readonly model: 'm';
  readonly tenant: TenantName;
  readonly arrival: number;
  readonly promptTokens: number;
  readonly outputTokens: number;
}

/** The three tenants' Poisson arrivals, merged in time order. */
export function tenantWorkload(config: TenantSimConfig): TenantRequest[] {
  const rand = prng(config.seed);
  const capacity = poolCapacity(config);
  const out: Array<Omit<TenantRequest, 'id'>> = [];
  for (const tenant of TENANTS) {
    const from = tenant === 'batch' ? config.floodFromSeconds : 0;
    const until = tenant === 'batch' ? config.floodUntilSeconds : config.durationSeconds;
    const meanGapMs = 1000 / (config.load[tenant] * capacity);
    for (let at = from * 1000 + meanGapMs * -Math.log(1 - rand()); at < until * 1000; at += meanGapMs * -Math.log(1 - rand())) {
      const promptTokens = PROMPT_MIN + Math.floor(rand() * PROMPT_SPAN);
      const outputTokens = OUTPUT_MIN + Math.floor(-Math.log(1 - rand()) * OUTPUT_MEAN_EXTRA);
      out.push({ model: 'm', tenant, arrival: at, promptTokens, outputTokens });
    }
  }
  out.sort((a, b) => a.arrival - b.arrival || TENANTS.indexOf(a.tenant) - TENANTS.indexOf(b.tenant));
  return out.map((r, id) => ({ ...r, id }));
}

export interface TenantStats {
  readonly tenant: TenantName;
  readonly priority: number;
  readonly sent: number;
  /** Requests that got a first token. */
  readonly served: number;
  readonly p50TtftMs: number;
  readonly p99TtftMs: number;
  /** Arrivals and first tokens per second during the flood. */
  readonly floodDemand: number;
  readonly floodThroughput: number;
  /** 429s: shed (priority < 0 while saturated), pool_saturated (queue full), queue_timeout (TTL). */
  readonly shed: number;
  readonly queueFull: number;
  readonly expired: number;
}

export interface TenantSimResult {
  readonly routers: number;
  readonly spread: Spread;
  readonly flowControl: boolean;
  readonly capacity: number;
  readonly tenants: readonly TenantStats[];
  /** The most requests one llm-extproc replica had in flight to one server (flow control: at most maxInFlight). */
  readonly peakInFlight: number;
  /** First tokens per second during the flood, all tenants. */
  readonly floodThroughput: number;
  /**
   * Jain's fairness index over the priority-0 tenants during the flood, of each one's throughput
   * over its max-min fair share of what the pool served then: 1 = each got its fair share (the
   * interactive tenant all it asked for, the batch tenant the rest), 1/n = one took it all.
   */
  readonly jain: number;
}

interface Server {
  readonly address: string;
  readonly queue: Array<{ readonly request: TenantRequest; readonly router: Router }>;
  running: number;
  /** KV-cache tokens the running requests hold. */
  kvHeld: number;
}

interface Router {
  readonly board: SignalBoard;
  readonly picker: Picker;
  /** Undefined without flow control. */
  readonly flow: FlowControl<TenantRequest, Server> | undefined;
}

interface TimerEvent {
  time: number;
  kind: 'timer';
  callback: () => void;
  live: boolean;
}

type Event =
  | { time: number; kind: 'arrival'; request: TenantRequest }
  | { time: number; kind: 'finish'; server: Server; router: Router; request: TenantRequest }
  | { time: number; kind: 'scrape' }
  | TimerEvent;

const POOL = 'sim';

/** Max-min fair shares of `total` between tenants asking for `demands` (water filling). */
export function maxMinShares(total: number, demands: readonly number[]): number[] {
  const order = demands.map((_, i) => i).sort((a, b) => demands[a] - demands[b]);
  const shares = new Array<number>(demands.length).fill(0);
  let left = total;
  order.forEach((i, k) => {
    shares[i] = Math.min(demands[i], left / (order.length - k));
    left -= shares[i];
  });
  return shares;
}

/** Jain's fairness index of the values: (Σx)² / (n · Σx²). */
export function jainIndex(values: readonly number[]): number {
  const sum = values.reduce((a, b) => a + b, 0);
  const squares = values.reduce((a, b) => a + b * b, 0);
  return squares === 0 ? 1 : (sum * sum) / (values.length * squares);
}

export function simulateTenants(config: TenantSimConfig, requests: readonly TenantRequest[] = tenantWorkload(config)): TenantSimResult {
  const servers: Server[] = Array.from({ length: config.servers }, (_, i) => ({
    address: `10.2.0.${i + 1}:8000`,
    queue: [],
    running: 0,
    kvHeld: 0,
  }));
  const endpoints: Endpoint[] = servers.map((s) => ({ id: s.address, address: s.address, state: 'Ready', reason: '', pool: POOL }));
  const pools: PoolView[] = [{ name: POOL, models: ['m'], endpoints }];
  const byAddress = new Map(servers.map((s) => [s.address, s]));
  const rand = prng(config.seed ^ 0x7e4a);
  const events = new Events<Event>();
  let now = 0;
  const timers: FlowTimers = {
    set: (callback, delayMs) => {
      const timer: TimerEvent = { time: now + delayMs, kind: 'timer', callback, live: true };
      events.push(timer);
      return timer;
    },
    clear: (handle) => {
      (handle as TimerEvent).live = false;
    },
  };
  const saturation: SaturationLimits = { ...DEFAULT_SATURATION, maxInFlight: config.maxInFlight, scraped: true };
  const routers: Router[] = Array.from({ length: config.routers }, () => {
    const board = new SignalBoard();
    // The default scorers; prompts are all distinct here (no prefix key) and no latency tracker runs.
    const picker = new Picker(board, {
      weights: POLICY_WEIGHTS['pipeline without latency'],
      fallbacks: 2,
      boundedLoad: DEFAULT_BOUNDED_LOAD,
      maxAdaptersPerServer: DEFAULT_PICKER_SETTINGS.lora.maxAdaptersPerServer,
      poolPolicy: () => (config.flowControl ? { saturation } : {}),
      random: rand,
    });
    const router: Router = {
      board,
      picker,
      flow: config.flowControl
        ? new FlowControl<TenantRequest, Server>(
            {
              saturated: () => picker.saturated(pools, undefined),
              route: () => pickFor(router),
              release: (server) => board.cell(server.address).inFlight--,
            },
            { maxQueued: config.maxQueued, maxQueuedBytes: Number.POSITIVE_INFINITY },
            undefined,
            () => now,
            timers,
          )
        : undefined,
    };
    return router;
  });

  const ttfts = new Map<TenantName, number[]>(TENANTS.map((t) => [t, []]));
  const rejected = new Map<TenantName, { shed: number; queueFull: number; expired: number }>(
    TENANTS.map((t) => [t, { shed: 0, queueFull: 0, expired: 0 }]),
  );
  const floodServed = new Map<TenantName, number>(TENANTS.map((t) => [t, 0]));
  const floodFrom = config.floodFromSeconds * 1000;
  const floodUntil = config.floodUntilSeconds * 1000;
  let pending = requests.length;
  let peakInFlight = 0;

  /** Picks a server and charges our in-flight count, as StoreRouting.routeIn does. */
  function pickFor(router: Router): Server {
    const outcome = router.picker.pick(pools, { model: 'm' });
    if (outcome.kind !== 'picked') throw new Error(`simulation: pick gave ${outcome.kind}`);
    const address = outcome.endpoints[0].address;
    const cell = router.board.cell(address);
    peakInFlight = Math.max(peakInFlight, ++cell.inFlight);
    return byAddress.get(address) as Server;
  }

  function start(server: Server, router: Router, request: TenantRequest): void {
    server.running++;
    server.kvHeld += request.promptTokens + request.outputTokens;
    const prefill = request.promptTokens * config.prefillMsPerToken;
    const firstToken = now + prefill;
    (ttfts.get(request.tenant) as number[]).push(firstToken - request.arrival);
    if (firstToken >= floodFrom && firstToken < floodUntil) floodServed.set(request.tenant, (floodServed.get(request.tenant) ?? 0) + 1);
    events.push({ time: firstToken + request.outputTokens * config.decodeMsPerToken, kind: 'finish', server, router, request });
  }

  function place(server: Server, router: Router, request: TenantRequest): void {
    if (server.running < config.slots) start(server, router, request);
    else server.queue.push({ request, router });
  }

  function reject(request: TenantRequest, error: GatewayError): void {
    pending--;
    const counts = rejected.get(request.tenant) as { shed: number; queueFull: number; expired: number };
    if (error.kind === 'shed') counts.shed++;
    else if (error.kind === 'pool_saturated') counts.queueFull++;
    else if (error.kind === 'queue_timeout') counts.expired++;
    else throw error;
  }

  /** StoreRouting.admit: straight through while the pool has room and nobody waits, else the queue. */
  function admit(router: Router, request: TenantRequest): void {
    const flow = router.flow;
    if (flow === undefined || (!flow.letThrough(POOL) && !router.picker.saturated(pools, undefined))) {
      place(pickFor(router), router, request);
      return;
    }
    try {
      const queued = flow.enqueue(POOL, request, {
        priority: PRIORITY[request.tenant],
        tenant: request.tenant,
        bytes: 1,
        ttlMs: config.ttlMs,
      });
      queued.listen((outcome) => (outcome.kind === 'routed' ? place(outcome.routed, router, request) : reject(request, outcome.error)));
    } catch (thrown) {
      if (!(thrown instanceof GatewayError)) throw thrown;
      reject(request, thrown);
    }
  }

  for (const request of requests) events.push({ time: request.arrival, kind: 'arrival', request });
  events.push({ time: 0, kind: 'scrape' });
  const boards = routers.map((router) => router.board);
  for (let event = events.pop(); event !== undefined; event = events.pop()) {
    now = event.time;
    if (event.kind === 'timer') {
      if (event.live) event.callback();
    } else if (event.kind === 'scrape') {
      scrapeAll(boards, servers, (s) => s.kvHeld / config.kvTokens, now);
      for (const router of routers) router.flow?.wake();
      if (pending > 0) events.push({ time: now + config.scrapeMs, kind: 'scrape' });
    } else if (event.kind === 'arrival') {
      const batchOnOne = config.spread === 'batch-on-one' && event.request.tenant === 'batch';
      const router = routers[batchOnOne ? 0 : Math.floor(rand() * routers.length)];
      admit(router, event.request);
    } else {
      const { server, router, request } = event;
      server.running--;
      server.kvHeld -= request.promptTokens + request.outputTokens;
      pending--;
      const next = server.queue.shift();
      if (next !== undefined) start(server, next.router, next.request);
      // Our response ended: the replica that placed it counts one fewer and may let a waiting one through.
      router.board.cell(server.address).inFlight--;
      router.flow?.wake();
    }
  }

  const floodSeconds = (floodUntil - floodFrom) / 1000;
  const tenants: TenantStats[] = TENANTS.map((tenant) => {
    const times = (ttfts.get(tenant) as number[]).sort((a, b) => a - b);
    const counts = rejected.get(tenant) as { shed: number; queueFull: number; expired: number };
    const mine = requests.filter((r) => r.tenant === tenant);
    return {
      tenant,
      priority: PRIORITY[tenant],
      sent: mine.length,
      served: times.length,
      p50TtftMs: percentile(times, 0.5),
      p99TtftMs: percentile(times, 0.99),
      floodDemand: mine.filter((r) => r.arrival >= floodFrom && r.arrival < floodUntil).length / floodSeconds,
      floodThroughput: (floodServed.get(tenant) ?? 0) / floodSeconds,
      ...counts,
    };
  });
  // What the pool served during the flood, all tenants together: room that went to the sheddable
  // tenant was room the priority-0 tenants could have had.
  const fair = tenants.filter((t) => t.priority === 0);
  const shares = maxMinShares(
    tenants.reduce((a, t) => a + t.floodThroughput, 0),
    fair.map((t) => t.floodDemand),
  );
  return {
    routers: config.routers,
    spread: config.spread,
    flowControl: config.flowControl,
    capacity: poolCapacity(config),
    peakInFlight,
    floodThroughput: tenants.reduce((a, t) => a + t.floodThroughput, 0),
    tenants,
    jain: jainIndex(fair.map((t, i) => (shares[i] === 0 ? 1 : t.floodThroughput / shares[i]))),
  };
}
