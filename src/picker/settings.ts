// The picker's settings as the configuration file gives them, with their defaults. Shared by the
// config parser (config.ts), the wiring (app.ts) and the routing glue.

import type { MetricsFormat } from './server-metrics.js';
import { DEFAULT_SATURATION } from './saturation.js';
import type { SaturationLimits } from './saturation.js';

export interface ScorerWeights {
  readonly queue: number;
  readonly kvCache: number;
  readonly inFlight: number;
  readonly prefix: number;
  readonly lora: number;
  /** Recent time to first token and per output token against the pool's medians (latency.ts). */
  readonly latency: number;
}

/** Prefix affinity dominates while the owner is within bounds; load decides the rest. */
export const DEFAULT_WEIGHTS: ScorerWeights = { queue: 1, kvCache: 1, inFlight: 1, prefix: 4, lora: 2, latency: 2 };

/** How recent latency is estimated, and when a replica counts as much slower than its pool. */
export interface LatencySettings {
  /** A sample loses half its weight in this time. */
  readonly halfLifeMs: number;
  /** Decayed samples an estimate needs before it is trusted (untrusted = scored as the median). */
  readonly minSamples: number;
  /** Demoted at this many times the pool's median TTFT or TPOT (needs 3 trusted replicas in the pool). */
  readonly outlierFactor: number;
  /** A demoted replica is reinstated at or below this many times the median (hysteresis). */
  readonly recoverFactor: number;
  /** A demoted replica gets one probe request this often, so that a recovery can be seen. */
  readonly probeIntervalMs: number;
  /** Latencies below these are never called slow, whatever the ratio (jitter next to a tiny median). */
  readonly floorTtftSeconds: number;
  readonly floorTpotSeconds: number;
}

/**
 * Ten seconds of memory: long enough that one slow answer does not demote a replica, short enough
 * that a slowdown is acted on within seconds at a few requests per second per replica.
 */
export const DEFAULT_LATENCY: LatencySettings = {
  halfLifeMs: 10_000,
  minSamples: 3,
  outlierFactor: 2,
  recoverFactor: 1.5,
  probeIntervalMs: 2000,
  floorTtftSeconds: 0.02,
  floorTpotSeconds: 0.002,
};

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

const DEFAULT_TENANT_HEADER = 'x-llm-d-inference-fairness-id';

export const DEFAULT_FLOW_CONTROL: FlowControlSettings = {
  enabled: false,
  tenantHeader: DEFAULT_TENANT_HEADER,
  priorityHeader: 'x-llm-extproc-priority',
  // What the Gateway API Inference Extension's EPP reads (v1.0).
  objectiveHeader: 'x-gateway-inference-objective',
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
 * Tight bounds: an LLM server with a full batch makes every new request wait, so a prefix owner
 * gives way as soon as it reports a queue or runs 10 % (+1) above the mean (see docs/benchmarks.md,
 * simulation).
 */
export const DEFAULT_BOUNDED_LOAD = { factor: 1.1, slack: 1, maxQueue: 0 } as const;

/** How a pool's model servers cut their prefix cache. */
export interface CacheBlockSize {
  /** Tokens per KV-cache block (vLLM `--block-size`). */
  readonly blockTokens: number;
  /** Characters per token, estimated high. */
  readonly charsPerToken: number;
}

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
}

/**
 * vLLM's default KV-cache block (`--block-size 16` on GPUs) and four characters per token: the
 * usual figure for English text with BPE tokenizers. Code and most other languages give fewer
 * characters per token, so for them four undercounts tokens, the safe side: a block we call whole
 * is whole on the server.
 */
export const DEFAULT_CACHE_BLOCK: CacheBlockSize = { blockTokens: 16, charsPerToken: 4 };

export interface PickerSettings {
  readonly weights: ScorerWeights;
  readonly prefix: {
    /** Affinity key = hash of the shared prompt's first keyBlocks whole cache blocks (fewer if it has fewer). */
    readonly keyBlocks: number;
    /** Tokens per KV-cache block of the model servers, for pools without their own. */
    readonly blockTokens: number;
    /** Characters per token (estimated high), for pools without their own. */
    readonly charsPerToken: number;
    readonly loadFactor: number;
    readonly loadSlack: number;
    /** The owner gives its prefixes up while it reports more waiting requests than this. */
    readonly maxQueue: number;
  };
  readonly lora: { readonly maxAdaptersPerServer: number };
  readonly latency: LatencySettings;
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
  /** Per-pool overrides by pool name. */
  readonly pools: Readonly<Record<string, PoolPickerSettings>>;
}

export const DEFAULT_PICKER_SETTINGS: PickerSettings = {
  weights: DEFAULT_WEIGHTS,
  prefix: {
    // 16 blocks of 16 tokens: the first ~256 tokens (about 1 KiB of text) decide the owner.
    keyBlocks: 16,
    blockTokens: DEFAULT_CACHE_BLOCK.blockTokens,
    charsPerToken: DEFAULT_CACHE_BLOCK.charsPerToken,
    loadFactor: DEFAULT_BOUNDED_LOAD.factor,
    loadSlack: DEFAULT_BOUNDED_LOAD.slack,
    maxQueue: DEFAULT_BOUNDED_LOAD.maxQueue,
  },
  lora: { maxAdaptersPerServer: 4 },
  latency: DEFAULT_LATENCY,
  metrics: { enabled: true, format: 'vllm', path: '/metrics', intervalMs: 1000, timeoutMs: 500, staleAfterMs: 5000, concurrency: 16 },
  flowControl: DEFAULT_FLOW_CONTROL,
  pools: {},
};

/** Least in-flight only: what routing does when given no picker settings (unit tests of other modules). */
export const IN_FLIGHT_ONLY: PickerSettings = {
  ...DEFAULT_PICKER_SETTINGS,
  weights: { queue: 0, kvCache: 0, inFlight: 1, prefix: 0, lora: 0, latency: 0 },
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
