// The picker's settings as the configuration file gives them, with their defaults. Shared by the
// config parser (config.ts), the wiring (app.ts) and the routing glue.

import type { MetricsFormat } from './server-metrics.js';

export interface ScorerWeights {
  readonly queue: number;
  readonly kvCache: number;
  readonly inFlight: number;
  readonly prefix: number;
  readonly lora: number;
}

/** Prefix affinity dominates while the owner is within bounds; load decides the rest. */
export const DEFAULT_WEIGHTS: ScorerWeights = { queue: 1, kvCache: 1, inFlight: 1, prefix: 4, lora: 2 };

export interface PoolPolicy {
  /** Endpoints reporting at least this many waiting requests take no new ones; all of them = shed. */
  readonly maxQueueDepth?: number;
}

/**
 * Tight bounds: an LLM server with a full batch makes every new request wait, so a prefix owner
 * gives way as soon as it reports a queue or runs 10 % (+1) above the mean (see docs/benchmarks.md,
 * simulation).
 */
export const DEFAULT_BOUNDED_LOAD = { factor: 1.1, slack: 1, maxQueue: 0 } as const;

export interface PoolPickerSettings extends PoolPolicy {
  /** The flavour of the pool's model servers, or `none` to not scrape them. */
  readonly metricsFormat?: MetricsFormat | 'none';
}

export interface PickerSettings {
  readonly weights: ScorerWeights;
  readonly prefix: {
    /** Affinity key = hash of the prompt's first keyBlocks × 128 characters. */
    readonly keyBlocks: number;
    readonly loadFactor: number;
    readonly loadSlack: number;
    /** The owner gives its prefixes up while it reports more waiting requests than this. */
    readonly maxQueue: number;
  };
  readonly lora: { readonly maxAdaptersPerServer: number };
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
  /** Per-pool overrides by pool name. */
  readonly pools: Readonly<Record<string, PoolPickerSettings>>;
}

export const DEFAULT_PICKER_SETTINGS: PickerSettings = {
  weights: DEFAULT_WEIGHTS,
  prefix: {
    keyBlocks: 8,
    loadFactor: DEFAULT_BOUNDED_LOAD.factor,
    loadSlack: DEFAULT_BOUNDED_LOAD.slack,
    maxQueue: DEFAULT_BOUNDED_LOAD.maxQueue,
  },
  lora: { maxAdaptersPerServer: 4 },
  metrics: { enabled: true, format: 'vllm', path: '/metrics', intervalMs: 1000, timeoutMs: 500, staleAfterMs: 5000, concurrency: 16 },
  pools: {},
};

/** Least in-flight only: what routing does when given no picker settings (unit tests of other modules). */
export const IN_FLIGHT_ONLY: PickerSettings = {
  ...DEFAULT_PICKER_SETTINGS,
  weights: { queue: 0, kvCache: 0, inFlight: 1, prefix: 0, lora: 0 },
  metrics: { ...DEFAULT_PICKER_SETTINGS.metrics, enabled: false },
};

export function poolSettings(settings: PickerSettings, pool: string): PoolPickerSettings {
  return Object.hasOwn(settings.pools, pool) ? settings.pools[pool] : {};
}

/** Which flavour to scrape a pool as; undefined = not scraped. */
export function metricsFormatFor(settings: PickerSettings, pool: string): MetricsFormat | undefined {
  if (!settings.metrics.enabled) return undefined;
  const own = poolSettings(settings, pool).metricsFormat;
  if (own === 'none') return undefined;
  return own ?? settings.metrics.format;
}
