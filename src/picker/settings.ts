// The picker's settings as the configuration file gives them, with their defaults (the scorers'
// own come from their rows in scorer-table.ts). Shared by the config parser (config.ts), the
// wiring (app.ts) and routing.

import type { MetricsFormat } from './server-metrics.js';
import { defaultWeights, onlyScorers, SCORERS, sectionDefaults } from './scorer-table.js';
import type { CacheBlockSize, ScorerWeights, SectionsOf } from './scorer-table.js';
import { DEFAULT_SATURATION } from './saturation.js';
import type { SaturationLimits } from './saturation.js';

export interface PoolPolicy {
  /** Endpoints reporting at least this many waiting requests take no new ones; all of them = shed. */
  readonly maxQueueDepth?: number;
  /** Flow control's limits for the pool; absent = no flow control there (never saturated). */
  readonly saturation?: SaturationLimits;
}

/** The saturation limits the configuration can set (whether the pool is scraped follows from the metrics settings). */
export type SaturationSettings = Omit<SaturationLimits, 'scraped'>;

/**
 * Flow control (routing/flow-control.ts): while every candidate of a pool is saturated, requests
 * wait in the pool's bounded queues, highest priority first and fair between tenants, instead of
 * piling onto busy replicas.
 */
export interface FlowControlSettings {
  /** For every pool, unless the pool's own `flowControl` says otherwise. */
  readonly enabled: boolean;
  /** The tenant a request belongs to (fairness inside a priority); absent header = the default tenant. */
  readonly tenantHeader: string;
  /** A header whose value names a priority class in `priorityByHeaderValue`. */
  readonly priorityHeader: string;
  /**
   * A header whose value names an InferenceObjective of the request's pool (the EPP's header); '' =
   * no header names an objective. Trusted as the EPP trusts it: any client can name any objective
   * (the highest priority included) unless the gateway strips or sets the header.
   */
  readonly objectiveHeader: string;
  readonly defaultPriority: number;
  readonly priorityByModel: Readonly<Record<string, number>>;
  /** Header values the operator lists, and their priority: a client can pick a listed class, not a number of its own. */
  readonly priorityByHeaderValue: Readonly<Record<string, number>>;
  /** Longest wait in a queue where Envoy runs no message timer (full-duplex body modes). */
  readonly ttlMs: number;
  /** Longest wait where Envoy's ext_proc message timer runs (buffered and streamed modes): must stay below it. */
  readonly timedTtlMs: number;
  /** Requests that may wait per pool, and the request bytes they may hold together. */
  readonly maxQueued: number;
  readonly maxQueuedBytes: number;
  readonly saturation: SaturationSettings;
  /** Tenants named in the queue metrics (the busiest); the rest are counted under `other`. */
  readonly tenantLabels: number;
}

export const DEFAULT_FLOW_CONTROL: FlowControlSettings = {
  enabled: false,
  // llm-d's names (extproc/protocol-names.ts); the x-gateway-* names they replaced are read too.
  tenantHeader: 'x-llm-d-inference-fairness-id',
  priorityHeader: 'x-llm-extproc-priority',
  objectiveHeader: 'x-llm-d-inference-objective',
  defaultPriority: 0,
  priorityByModel: {},
  priorityByHeaderValue: {},
  // Our shipped Envoy configs time each ext_proc message out after 1 s in buffered modes.
  ttlMs: 30_000,
  timedTtlMs: 800,
  maxQueued: 1000,
  maxQueuedBytes: 64 * 1024 * 1024,
  saturation: DEFAULT_SATURATION,
  tenantLabels: 20,
};

/**
 * Precise prefix matching (kv-cache/): the servers' own KV-cache events say which blocks each
 * holds, and the model's tokenizer cuts each prompt in the same blocks. Absent = approximate
 * affinity only.
 */
export interface PreciseSettings {
  /** The directory holding the model's tokenizer.json and tokenizer_config.json (and chat_template.jinja). */
  readonly tokenizerDir: string;
  readonly events: {
    /** The publisher's port on each server (vLLM --kv-events-config endpoint tcp://*:PORT); undefined = discover. */
    readonly port: number | undefined;
    /** Ask each server's GET /kv_event_sources for its publisher. */
    readonly discover: boolean;
    /** Topic prefix to subscribe to ('' = all). */
    readonly topic: string;
    readonly silenceMs: number;
    readonly rebuildMs: number;
    readonly heartbeatMs: number;
    /** How long a prompt's blocks count as held by the server it was sent to before its events report them (0: not at all). */
    readonly pendingMs: number;
  };
}

export const DEFAULT_PRECISE_EVENTS: PreciseSettings['events'] = {
  port: undefined,
  discover: false,
  topic: '',
  // A prefill publishes its blocks within milliseconds; ten seconds without any after requests
  // that store blocks is a publisher that stopped, not a busy one.
  silenceMs: 10_000,
  // A server's working set turns over in tens of seconds under load: after a gap, what is in use
  // has been stored again (and published) by then.
  rebuildMs: 30_000,
  heartbeatMs: 1000,
  // vLLM publishes a request's blocks once its scheduler has taken it: within a step when the
  // batch has room, later behind a queue. Long enough to cover a queue of a few seconds; short,
  // because a pending block the server then evicts, or never stored, is credited until it ends.
  pendingMs: 5000,
};

export interface PoolPickerSettings {
  /** Load shedding (PoolPolicy.maxQueueDepth). */
  readonly maxQueueDepth?: number;
  /** Flow control for this pool; default picker.flowControl.enabled. */
  readonly flowControl?: boolean;
  /** This pool's saturation limits over picker.flowControl.saturation. */
  readonly saturation?: Partial<SaturationSettings>;
  /** The flavour of the pool's model servers, or `none` to not scrape them. */
  readonly metricsFormat?: MetricsFormat | 'none';
  /** How the pool's servers cut their prefix cache (defaults: `picker.prefix`). */
  readonly blockTokens?: number;
  readonly charsPerToken?: number;
  /** Precise prefix matching for this pool; default: on wherever picker.precise is set. */
  readonly precise?: boolean;
  /** The KV-event publisher's port on this pool's servers, over picker.precise.events.port. */
  readonly kvEventsPort?: number;
}

/** The picker's settings: every scorer's weight and the scorers' own sections (scorer-table.ts), scraping, flow control, pools. */
export interface PickerSettings extends SectionsOf<typeof SCORERS> {
  readonly weights: ScorerWeights;
  readonly metrics: {
    readonly enabled: boolean;
    /** Default flavour for pools without their own. */
    readonly format: MetricsFormat;
    readonly path: string;
    readonly intervalMs: number;
    readonly timeoutMs: number;
    readonly staleAfterMs: number;
    readonly concurrency: number;
  };
  readonly flowControl: FlowControlSettings;
  /** Precise prefix matching; undefined = off (approximate affinity). */
  readonly precise: PreciseSettings | undefined;
  /** Per-pool overrides by pool name. */
  readonly pools: Readonly<Record<string, PoolPickerSettings>>;
}

export const DEFAULT_WEIGHTS: ScorerWeights = defaultWeights(SCORERS);

export const DEFAULT_PICKER_SETTINGS: PickerSettings = {
  weights: DEFAULT_WEIGHTS,
  ...sectionDefaults(SCORERS),
  metrics: { enabled: true, format: 'vllm', path: '/metrics', intervalMs: 1000, timeoutMs: 500, staleAfterMs: 5000, concurrency: 16 },
  flowControl: DEFAULT_FLOW_CONTROL,
  precise: undefined,
  pools: {},
};

/** Least in-flight only: what routing does when given no picker settings (unit tests of other modules). */
export const IN_FLIGHT_ONLY: PickerSettings = {
  ...DEFAULT_PICKER_SETTINGS,
  weights: onlyScorers(SCORERS, { inFlight: 1 }),
  metrics: { ...DEFAULT_PICKER_SETTINGS.metrics, enabled: false },
};

export function poolSettings(settings: PickerSettings, pool: string): PoolPickerSettings {
  return Object.hasOwn(settings.pools, pool) ? settings.pools[pool] : {};
}

/** How the servers of `pool` cut their prefix cache. */
export function cacheBlockFor(settings: PickerSettings, pool: string): CacheBlockSize {
  const own = poolSettings(settings, pool);
  return { blockTokens: own.blockTokens ?? settings.prefix.blockTokens, charsPerToken: own.charsPerToken ?? settings.prefix.charsPerToken };
}

/** Whether a pool's picks use its servers' KV events. */
export function preciseFor(settings: PickerSettings, pool: string): boolean {
  return settings.precise !== undefined && settings.weights.prefix > 0 && (poolSettings(settings, pool).precise ?? true);
}

/** Which flavour to scrape a pool as; undefined = not scraped. */
export function metricsFormatFor(settings: PickerSettings, pool: string): MetricsFormat | undefined {
  if (!settings.metrics.enabled) return undefined;
  const own = poolSettings(settings, pool).metricsFormat;
  if (own === 'none') return undefined;
  return own ?? settings.metrics.format;
}

/** Whether some pool may queue: flow control on for every pool, or named for one (the chart's RBAC asks the same). */
export function flowControlAnywhere(settings: PickerSettings): boolean {
  return settings.flowControl.enabled || Object.values(settings.pools).some((pool) => pool.flowControl === true);
}

/** What the picker applies to `pool`: load shedding and, where flow control is on, saturation limits. */
export function poolPolicy(settings: PickerSettings, pool: string): PoolPolicy {
  const own = poolSettings(settings, pool);
  const shed = own.maxQueueDepth === undefined ? {} : { maxQueueDepth: own.maxQueueDepth };
  if (!(own.flowControl ?? settings.flowControl.enabled)) return shed;
  const base = settings.flowControl.saturation;
  const saturation: SaturationLimits = {
    queueDepth: own.saturation?.queueDepth ?? base.queueDepth,
    kvCacheUsage: own.saturation?.kvCacheUsage ?? base.kvCacheUsage,
    maxInFlight: own.saturation?.maxInFlight ?? base.maxInFlight,
    scraped: metricsFormatFor(settings, pool) !== undefined,
  };
  return { ...shed, saturation };
}
