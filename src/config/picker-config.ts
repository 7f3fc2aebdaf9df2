// The `picker:` section of the config file (validated by schema.ts) mapped onto PickerSettings,
// with defaults and the one rule the schema cannot express.

import { DEFAULT_FLOW_CONTROL, DEFAULT_PICKER_SETTINGS } from '../picker/settings.js';
import type { FlowControlSettings, PickerSettings, PoolPickerSettings } from '../picker/settings.js';
import type { ConfigFile } from './schema.js';

export class PickerConfigError extends Error {
  override readonly name = 'PickerConfigError';
}

type PickerSection = NonNullable<ConfigFile['picker']>;

export function pickerSettings(section: PickerSection | undefined): PickerSettings {
  const d = DEFAULT_PICKER_SETTINGS;
  const w = section?.weights ?? {};
  const prefix = section?.prefix ?? {};
  const m = section?.metrics ?? {};
  const intervalMs = (m.intervalSeconds ?? d.metrics.intervalMs / 1000) * 1000;
  const staleAfterMs = m.staleAfterSeconds === undefined ? Math.max(d.metrics.staleAfterMs, 3 * intervalMs) : m.staleAfterSeconds * 1000;
  if (staleAfterMs < intervalMs) {
    throw new PickerConfigError(
      `picker.metrics.staleAfterSeconds: must be ≥ intervalSeconds (${intervalMs / 1000}), or every report would go stale before the next scrape`,
    );
  }
  const l = section?.latency ?? {};
  const latency = {
    ...d.latency,
    ...(l.halfLifeSeconds === undefined ? {} : { halfLifeMs: l.halfLifeSeconds * 1000 }),
    ...(l.minSamples === undefined ? {} : { minSamples: l.minSamples }),
    ...(l.outlierFactor === undefined ? {} : { outlierFactor: l.outlierFactor }),
    ...(l.recoverFactor === undefined ? {} : { recoverFactor: l.recoverFactor }),
    ...(l.probeIntervalSeconds === undefined ? {} : { probeIntervalMs: l.probeIntervalSeconds * 1000 }),
  };
  if (latency.recoverFactor >= latency.outlierFactor) {
    throw new PickerConfigError(
      `picker.latency.recoverFactor: must be < outlierFactor (${latency.outlierFactor}), or a demoted replica would be reinstated as soon as it is demoted`,
    );
  }
  const pools: Record<string, PoolPickerSettings> = {};
  for (const [name, pool] of Object.entries(section?.pools ?? {})) {
    pools[name] = {
      ...(pool.metricsFormat === undefined ? {} : { metricsFormat: pool.metricsFormat }),
      ...(pool.maxQueueDepth === undefined ? {} : { maxQueueDepth: pool.maxQueueDepth }),
      ...(pool.flowControl === undefined ? {} : { flowControl: pool.flowControl }),
      ...(pool.saturation === undefined ? {} : { saturation: pool.saturation }),
      ...(pool.blockTokens === undefined ? {} : { blockTokens: pool.blockTokens }),
      ...(pool.charsPerToken === undefined ? {} : { charsPerToken: pool.charsPerToken }),
    };
  }
  return {
    weights: {
      queue: w.queue ?? d.weights.queue,
      kvCache: w.kvCache ?? d.weights.kvCache,
      inFlight: w.inFlight ?? d.weights.inFlight,
      prefix: w.prefix ?? d.weights.prefix,
      lora: w.lora ?? d.weights.lora,
      latency: w.latency ?? d.weights.latency,
    },
    prefix: {
      keyBlocks: prefix.keyBlocks ?? d.prefix.keyBlocks,
      blockTokens: prefix.blockTokens ?? d.prefix.blockTokens,
      charsPerToken: prefix.charsPerToken ?? d.prefix.charsPerToken,
      loadFactor: prefix.loadFactor ?? d.prefix.loadFactor,
      loadSlack: prefix.loadSlack ?? d.prefix.loadSlack,
      maxQueue: prefix.maxQueue ?? d.prefix.maxQueue,
    },
    lora: { maxAdaptersPerServer: section?.lora?.maxAdaptersPerServer ?? d.lora.maxAdaptersPerServer },
    latency,
    metrics: {
      enabled: m.enabled ?? d.metrics.enabled,
      format: m.format ?? d.metrics.format,
      path: m.path ?? d.metrics.path,
      intervalMs,
      timeoutMs: (m.timeoutSeconds ?? d.metrics.timeoutMs / 1000) * 1000,
      staleAfterMs,
      concurrency: m.concurrency ?? d.metrics.concurrency,
    },
    flowControl: flowControlSettings(section?.flowControl),
    pools,
  };
}

function flowControlSettings(section: PickerSection['flowControl']): FlowControlSettings {
  const d = DEFAULT_FLOW_CONTROL;
  const f = section ?? {};
  return {
    enabled: f.enabled ?? d.enabled,
    tenantHeader: f.tenantHeader ?? d.tenantHeader,
    priorityHeader: f.priorityHeader ?? d.priorityHeader,
    objectiveHeader: f.objectiveHeader ?? d.objectiveHeader,
    defaultPriority: f.defaultPriority ?? d.defaultPriority,
    priorityByModel: f.priorityByModel ?? d.priorityByModel,
    priorityByHeaderValue: f.priorityByHeaderValue ?? d.priorityByHeaderValue,
    ttlMs: f.ttlSeconds === undefined ? d.ttlMs : f.ttlSeconds * 1000,
    timedTtlMs: f.timedTtlSeconds === undefined ? d.timedTtlMs : f.timedTtlSeconds * 1000,
    maxQueued: f.maxQueued ?? d.maxQueued,
    maxQueuedBytes: f.maxQueuedBytes ?? d.maxQueuedBytes,
    saturation: {
      queueDepth: f.saturation?.queueDepth ?? d.saturation.queueDepth,
      kvCacheUsage: f.saturation?.kvCacheUsage ?? d.saturation.kvCacheUsage,
      maxInFlight: f.saturation?.maxInFlight ?? d.saturation.maxInFlight,
    },
    tenantLabels: f.tenantLabels ?? d.tenantLabels,
  };
}
