// The `picker:` section of the config file (validated by schema.ts) mapped onto PickerSettings,
// over the defaults: the scorers' weights and sections as their rows declare them
// (picker/scorer-table.ts), then scraping, flow control and the pools.

import { DEFAULT_FLOW_CONTROL, DEFAULT_PICKER_SETTINGS, DEFAULT_PRECISE_EVENTS } from '../picker/settings.js';
import type { FlowControlSettings, PickerSettings, PoolPickerSettings, PreciseSettings } from '../picker/settings.js';
import { mergedSections, mergedWeights, SCORERS, withGiven } from '../picker/scorer-table.js';
import type { ConfigFile } from './schema.js';

export class PickerConfigError extends Error {
  override readonly name = 'PickerConfigError';
}

type PickerSection = NonNullable<ConfigFile['picker']>;

function refuse(message: string): never {
  throw new PickerConfigError(message);
}

export function pickerSettings(section: PickerSection | undefined): PickerSettings {
  const d = DEFAULT_PICKER_SETTINGS;
  const m = section?.metrics ?? {};
  const intervalMs = (m.intervalSeconds ?? d.metrics.intervalMs / 1000) * 1000;
  const staleAfterMs = m.staleAfterSeconds === undefined ? Math.max(d.metrics.staleAfterMs, 3 * intervalMs) : m.staleAfterSeconds * 1000;
  if (staleAfterMs < intervalMs) {
    throw new PickerConfigError(
      `picker.metrics.staleAfterSeconds: must be ≥ intervalSeconds (${intervalMs / 1000}), or every report would go stale before the next scrape`,
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
      ...(pool.precise === undefined ? {} : { precise: pool.precise }),
      ...(pool.kvEventsPort === undefined ? {} : { kvEventsPort: pool.kvEventsPort }),
    };
  }
  return {
    weights: mergedWeights(SCORERS, section?.weights),
    ...mergedSections(SCORERS, section ?? {}, refuse),
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
    precise: preciseSettings(section?.precise, pools),
    pools,
  };
}

function preciseSettings(
  section: PickerSection['precise'],
  pools: Readonly<Record<string, PoolPickerSettings>>,
): PreciseSettings | undefined {
  if (section === undefined) return undefined;
  const d = DEFAULT_PRECISE_EVENTS;
  const e = section.events ?? {};
  const discover = e.discover ?? d.discover;
  if (e.port === undefined && !discover && !Object.values(pools).some((pool) => pool.kvEventsPort !== undefined)) {
    throw new PickerConfigError(
      "picker.precise.events: set port (the KV-event publisher's port on each model server, vLLM's --kv-events-config endpoint tcp://*:PORT) or discover: true (ask each server's GET /kv_event_sources)",
    );
  }
  return {
    tokenizerDir: section.tokenizerDir,
    events: {
      port: e.port,
      discover,
      topic: e.topic ?? d.topic,
      silenceMs: e.silenceSeconds === undefined ? d.silenceMs : e.silenceSeconds * 1000,
      rebuildMs: e.rebuildSeconds === undefined ? d.rebuildMs : e.rebuildSeconds * 1000,
      heartbeatMs: e.heartbeatSeconds === undefined ? d.heartbeatMs : e.heartbeatSeconds * 1000,
      pendingMs: e.pendingSeconds === undefined ? d.pendingMs : e.pendingSeconds * 1000,
    },
  };
}

function flowControlSettings(section: PickerSection['flowControl']): FlowControlSettings {
  const d = DEFAULT_FLOW_CONTROL;
  const { ttlSeconds, timedTtlSeconds, saturation, ...same } = section ?? {};
  return {
    ...withGiven(d, same),
    ttlMs: ttlSeconds === undefined ? d.ttlMs : ttlSeconds * 1000,
    timedTtlMs: timedTtlSeconds === undefined ? d.timedTtlMs : timedTtlSeconds * 1000,
    saturation: withGiven(d.saturation, saturation ?? {}),
  };
}
