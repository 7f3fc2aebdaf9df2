// The `picker:` section of the configuration file: scorer weights, prefix and LoRA affinity,
// model-server metrics scraping, and per-pool metrics flavour and queue limit (load shedding).
// Pure and self-contained: config.ts hands it the raw mapping.

import { METRICS_FORMATS } from '../picker/server-metrics.js';
import type { MetricsFormat } from '../picker/server-metrics.js';
import { DEFAULT_PICKER_SETTINGS } from '../picker/settings.js';
import type { PickerSettings, PoolPickerSettings } from '../picker/settings.js';

type Raw = Record<string, unknown>;

export class PickerConfigError extends Error {
  override readonly name = 'PickerConfigError';
}

function mapping(value: unknown, where: string): Raw {
  if (value === undefined || value === null) return {};
  if (typeof value !== 'object' || Array.isArray(value)) throw new PickerConfigError(`${where}: expected a mapping`);
  return value as Raw;
}

function onlyKeys(raw: Raw, known: readonly string[], where: string): void {
  for (const key of Object.keys(raw)) if (!known.includes(key)) throw new PickerConfigError(`${where}${key}: unknown setting (expected one of ${known.join(', ')})`);
}

function number(raw: Raw, key: string, where: string, fallback: number, min: number, options: { whole?: boolean; max?: number } = {}): number {
  const value = raw[key];
  if (value === undefined || value === null) return fallback;
  const n = typeof value === 'string' && value.trim() !== '' ? Number(value) : value;
  const max = options.max ?? Infinity;
  if (typeof n !== 'number' || !Number.isFinite(n) || n < min || n > max || (options.whole === true && !Number.isInteger(n))) {
    const what = options.whole === true ? 'a whole number' : 'a number';
    throw new PickerConfigError(`${where}${key}: expected ${what} ≥ ${min}${max === Infinity ? '' : ` and ≤ ${max}`}, got ${JSON.stringify(value)}`);
  }
  return n;
}

function format(value: unknown, where: string, allowNone: boolean): MetricsFormat | 'none' {
  const allowed: readonly string[] = allowNone ? [...METRICS_FORMATS, 'none'] : METRICS_FORMATS;
  if (typeof value !== 'string' || !allowed.includes(value)) throw new PickerConfigError(`${where}: expected one of ${allowed.join(', ')}, got ${JSON.stringify(value)}`);
  return value as MetricsFormat | 'none';
}

/** Parses `picker:`; every key is optional and defaults to DEFAULT_PICKER_SETTINGS. */
export function pickerSection(value: unknown): PickerSettings {
  const raw = mapping(value, 'picker');
  const d = DEFAULT_PICKER_SETTINGS;
  onlyKeys(raw, ['weights', 'prefix', 'lora', 'metrics', 'pools'], 'picker.');

  const weights = mapping(raw.weights, 'picker.weights');
  onlyKeys(weights, ['queue', 'kvCache', 'inFlight', 'prefix', 'lora'], 'picker.weights.');
  const w = 'picker.weights.';

  const prefix = mapping(raw.prefix, 'picker.prefix');
  onlyKeys(prefix, ['keyBlocks', 'loadFactor', 'loadSlack', 'maxQueue'], 'picker.prefix.');
  const lora = mapping(raw.lora, 'picker.lora');
  onlyKeys(lora, ['maxAdaptersPerServer'], 'picker.lora.');

  const metrics = mapping(raw.metrics, 'picker.metrics');
  const m = 'picker.metrics.';
  onlyKeys(metrics, ['enabled', 'format', 'path', 'intervalSeconds', 'timeoutSeconds', 'staleAfterSeconds', 'concurrency'], m);
  if (metrics.enabled !== undefined && typeof metrics.enabled !== 'boolean') throw new PickerConfigError(`${m}enabled: expected true or false`);
  const path = metrics.path ?? d.metrics.path;
  if (typeof path !== 'string' || !path.startsWith('/')) throw new PickerConfigError(`${m}path: expected a path starting with /, got ${JSON.stringify(path)}`);
  const intervalMs = number(metrics, 'intervalSeconds', m, d.metrics.intervalMs / 1000, 0.05) * 1000;
  const timeoutMs = number(metrics, 'timeoutSeconds', m, d.metrics.timeoutMs / 1000, 0.01) * 1000;
  const staleAfterMs = number(metrics, 'staleAfterSeconds', m, Math.max(d.metrics.staleAfterMs, 3 * intervalMs) / 1000, 0.01) * 1000;
  if (staleAfterMs < intervalMs) throw new PickerConfigError(`${m}staleAfterSeconds: must be ≥ intervalSeconds (${intervalMs / 1000}), or every report would go stale before the next scrape`);

  const pools: Record<string, PoolPickerSettings> = {};
  for (const [name, poolValue] of Object.entries(mapping(raw.pools, 'picker.pools'))) {
    const at = `picker.pools.${name}.`;
    const pool = mapping(poolValue, `picker.pools.${name}`);
    onlyKeys(pool, ['metricsFormat', 'maxQueueDepth'], at);
    pools[name] = {
      ...(pool.metricsFormat === undefined ? {} : { metricsFormat: format(pool.metricsFormat, `${at}metricsFormat`, true) }),
      ...(pool.maxQueueDepth === undefined ? {} : { maxQueueDepth: number(pool, 'maxQueueDepth', at, 0, 1, { whole: true }) }),
    };
  }

  return {
    weights: {
      queue: number(weights, 'queue', w, d.weights.queue, 0),
      kvCache: number(weights, 'kvCache', w, d.weights.kvCache, 0),
      inFlight: number(weights, 'inFlight', w, d.weights.inFlight, 0),
      prefix: number(weights, 'prefix', w, d.weights.prefix, 0),
      lora: number(weights, 'lora', w, d.weights.lora, 0),
    },
    prefix: {
      keyBlocks: number(prefix, 'keyBlocks', 'picker.prefix.', d.prefix.keyBlocks, 1, { whole: true, max: 16 }),
      loadFactor: number(prefix, 'loadFactor', 'picker.prefix.', d.prefix.loadFactor, 1),
      loadSlack: number(prefix, 'loadSlack', 'picker.prefix.', d.prefix.loadSlack, 0),
      maxQueue: number(prefix, 'maxQueue', 'picker.prefix.', d.prefix.maxQueue, 0, { whole: true }),
    },
    lora: { maxAdaptersPerServer: number(lora, 'maxAdaptersPerServer', 'picker.lora.', d.lora.maxAdaptersPerServer, 1, { whole: true }) },
    metrics: {
      enabled: metrics.enabled === undefined ? d.metrics.enabled : metrics.enabled === true,
      format: metrics.format === undefined ? d.metrics.format : (format(metrics.format, `${m}format`, false) as MetricsFormat),
      path,
      intervalMs,
      timeoutMs,
      staleAfterMs,
      concurrency: number(metrics, 'concurrency', m, d.metrics.concurrency, 1, { whole: true }),
    },
    pools,
  };
}
