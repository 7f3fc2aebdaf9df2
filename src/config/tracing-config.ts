// The `tracing` section of the config file together with the standard OTEL_* variables, resolved
// into TracingSettings. Pure: the caller passes the environment.
//
// Precedence, as everywhere in llm-extproc: an environment variable wins over the file, which wins
// over the default. Among the variables, the more specific wins (OTEL_EXPORTER_OTLP_TRACES_ENDPOINT
// over OTEL_EXPORTER_OTLP_ENDPOINT, OTEL_SERVICE_NAME over `service.name` in
// OTEL_RESOURCE_ATTRIBUTES). OTEL_SDK_DISABLED=true turns tracing off whatever else says. A value
// that cannot be honoured (an unknown sampler, a negative queue size) is a config error: an explicit
// choice is never silently ignored.

import { MAX_TIMER_MS, TRACING_DEFAULTS } from '../tracing/tracing-settings.js';
import type { SamplerSettings, TracingSettings } from '../tracing/tracing-settings.js';
import type { ConfigFile } from './schema.js';

type Env = Readonly<Record<string, string | undefined>>;
type TracingSection = NonNullable<ConfigFile['tracing']>;

export class TracingConfigError extends Error {
  override readonly name = 'TracingConfigError';
}

/** The OTEL_* variables read here (listed by `--help` and in docs/observability.md). */
export const TRACING_ENVIRONMENT = [
  { name: 'OTEL_SDK_DISABLED', help: 'true: tracing off, whatever the config file says.' },
  { name: 'OTEL_TRACES_EXPORTER', help: 'A list with otlp: tracing on (others ignored); none: tracing off (unset: tracing.enabled).' },
  { name: 'OTEL_SERVICE_NAME', help: 'The service.name of our spans (over tracing.serviceName).' },
  { name: 'OTEL_RESOURCE_ATTRIBUTES', help: 'key=value,… added to the resource of our spans.' },
  { name: 'OTEL_EXPORTER_OTLP_TRACES_ENDPOINT', help: 'The OTLP/HTTP traces URL, used as is.' },
  { name: 'OTEL_EXPORTER_OTLP_ENDPOINT', help: 'The OTLP/HTTP base URL; /v1/traces is appended.' },
  { name: 'OTEL_TRACES_SAMPLER', help: 'always_on, always_off, traceidratio or their parentbased_ forms.' },
  { name: 'OTEL_TRACES_SAMPLER_ARG', help: 'The ratio of the traceidratio samplers (0…1, default 1).' },
  { name: 'OTEL_BSP_MAX_QUEUE_SIZE', help: 'Spans waiting for export at most (over tracing.maxQueueSize).' },
  { name: 'OTEL_BSP_MAX_EXPORT_BATCH_SIZE', help: 'Spans per export request at most.' },
  { name: 'OTEL_BSP_SCHEDULE_DELAY', help: 'Milliseconds between exports of a part-full batch.' },
  { name: 'OTEL_BSP_EXPORT_TIMEOUT', help: 'Milliseconds one export may take (over the next two).' },
  { name: 'OTEL_EXPORTER_OTLP_TRACES_TIMEOUT', help: 'Milliseconds one export may take (over the next one).' },
  { name: 'OTEL_EXPORTER_OTLP_TIMEOUT', help: 'Milliseconds one export may take (over tracing.exportTimeoutSeconds).' },
] as const;

const SAMPLERS: Readonly<Record<string, { kind: SamplerSettings['kind']; parentBased: boolean }>> = {
  always_on: { kind: 'always_on', parentBased: false },
  always_off: { kind: 'always_off', parentBased: false },
  traceidratio: { kind: 'traceidratio', parentBased: false },
  parentbased_always_on: { kind: 'always_on', parentBased: true },
  parentbased_always_off: { kind: 'always_off', parentBased: true },
  parentbased_traceidratio: { kind: 'traceidratio', parentBased: true },
};

export function tracingSettings(section: TracingSection | undefined, env: Env): TracingSettings {
  const file = section ?? {};
  const maxQueueSize = count(env, 'OTEL_BSP_MAX_QUEUE_SIZE') ?? file.maxQueueSize ?? TRACING_DEFAULTS.maxQueueSize;
  const batch = count(env, 'OTEL_BSP_MAX_EXPORT_BATCH_SIZE') ?? file.maxExportBatchSize ?? TRACING_DEFAULTS.maxExportBatchSize;
  // OTEL_SDK_DISABLED=true wins over everything, OTEL_TRACES_EXPORTER over the file.
  const off = disabled(env);
  const exporters = off ? undefined : exportersFrom(env);
  return {
    enabled: !off && (exporters === undefined ? (file.enabled ?? TRACING_DEFAULTS.enabled) : exporters.otlp),
    endpoint: endpointFrom(file, env),
    sampler: samplerFrom(file, env),
    serviceName: serviceNameFrom(file, env),
    maxQueueSize,
    // The SDK would shrink it with a warning; say it here instead.
    maxExportBatchSize: Math.min(batch, maxQueueSize),
    scheduledDelayMs: millis(env, 'OTEL_BSP_SCHEDULE_DELAY') ?? seconds(file.scheduledDelaySeconds, TRACING_DEFAULTS.scheduledDelaySeconds),
    exportTimeoutMs:
      millis(env, 'OTEL_BSP_EXPORT_TIMEOUT') ??
      millis(env, 'OTEL_EXPORTER_OTLP_TRACES_TIMEOUT') ??
      millis(env, 'OTEL_EXPORTER_OTLP_TIMEOUT') ??
      seconds(file.exportTimeoutSeconds, TRACING_DEFAULTS.exportTimeoutSeconds),
    shutdownFlushMs: seconds(file.shutdownFlushSeconds, TRACING_DEFAULTS.shutdownFlushSeconds),
    propagateToUpstream: file.propagateToUpstream ?? TRACING_DEFAULTS.propagateToUpstream,
    ignoredExporters: exporters?.ignored ?? [],
  };
}

function disabled(env: Env): boolean {
  return value(env, 'OTEL_SDK_DISABLED')?.toLowerCase() === 'true';
}

/**
 * OTEL_TRACES_EXPORTER is a comma-separated list (OTel spec). We export with otlp only: a list
 * naming it turns tracing on and the other names are ignored (and told); `none` alone turns it
 * off. A list without otlp, or `none` among others, cannot be honoured.
 */
function exportersFrom(env: Env): { otlp: boolean; ignored: readonly string[] } | undefined {
  const text = value(env, 'OTEL_TRACES_EXPORTER');
  if (text === undefined) return undefined;
  const names = [
    ...new Set(
      text
        .toLowerCase()
        .split(',')
        .map((n) => n.trim())
        .filter((n) => n !== ''),
    ),
  ];
  if (names.length === 1 && names[0] === 'none') return { otlp: false, ignored: [] };
  if (names.includes('none'))
    throw new TracingConfigError(`OTEL_TRACES_EXPORTER: none cannot be combined with other exporters, got ${JSON.stringify(text)}`);
  if (!names.includes('otlp'))
    throw new TracingConfigError(`OTEL_TRACES_EXPORTER: llm-extproc exports with otlp (or none), got ${JSON.stringify(text)}`);
  return { otlp: true, ignored: names.filter((n) => n !== 'otlp') };
}

function endpointFrom(file: TracingSection, env: Env): string {
  const traces = value(env, 'OTEL_EXPORTER_OTLP_TRACES_ENDPOINT');
  if (traces !== undefined) return httpUrl('OTEL_EXPORTER_OTLP_TRACES_ENDPOINT', traces);
  const base = value(env, 'OTEL_EXPORTER_OTLP_ENDPOINT');
  if (base !== undefined) return httpUrl('OTEL_EXPORTER_OTLP_ENDPOINT', `${base.replace(/\/+$/, '')}/v1/traces`);
  // The schema only checks the scheme; `http://` or a port past 65535 fails here as it would for the variables.
  return file.endpoint === undefined ? TRACING_DEFAULTS.endpoint : httpUrl('tracing.endpoint', file.endpoint);
}

function samplerFrom(file: TracingSection, env: Env): SamplerSettings {
  const name = value(env, 'OTEL_TRACES_SAMPLER')?.toLowerCase();
  if (name !== undefined) {
    const known = Object.hasOwn(SAMPLERS, name) ? SAMPLERS[name] : undefined;
    if (known === undefined)
      throw new TracingConfigError(`OTEL_TRACES_SAMPLER: expected one of ${Object.keys(SAMPLERS).join(', ')}, got ${JSON.stringify(name)}`);
    const arg = value(env, 'OTEL_TRACES_SAMPLER_ARG');
    return { ...known, ratio: known.kind === 'traceidratio' && arg !== undefined ? ratio('OTEL_TRACES_SAMPLER_ARG', arg) : 1 };
  }
  // The file's ratio applies to new traces; a client's sampled flag is followed (parent based).
  const fileRatio = file.sampleRatio ?? TRACING_DEFAULTS.sampleRatio;
  if (fileRatio >= 1) return { kind: 'always_on', ratio: 1, parentBased: true };
  if (fileRatio <= 0) return { kind: 'always_off', ratio: 0, parentBased: true };
  return { kind: 'traceidratio', ratio: fileRatio, parentBased: true };
}

function serviceNameFrom(file: TracingSection, env: Env): string {
  return value(env, 'OTEL_SERVICE_NAME') ?? resourceServiceName(env) ?? file.serviceName ?? TRACING_DEFAULTS.serviceName;
}

/** `service.name` in OTEL_RESOURCE_ATTRIBUTES (key=value pairs, comma separated, values percent-encoded). */
function resourceServiceName(env: Env): string | undefined {
  const text = value(env, 'OTEL_RESOURCE_ATTRIBUTES');
  if (text === undefined) return undefined;
  let found: string | undefined;
  for (const pair of text.split(',')) {
    const eq = pair.indexOf('=');
    if (eq < 0 || pair.slice(0, eq).trim() !== 'service.name') continue;
    try {
      found = decodeURIComponent(pair.slice(eq + 1).trim());
    } catch {
      throw new TracingConfigError('OTEL_RESOURCE_ATTRIBUTES: service.name is not valid percent-encoding');
    }
  }
  return found === '' ? undefined : found;
}

function httpUrl(name: string, text: string): string {
  let url: URL;
  try {
    url = new URL(text);
  } catch {
    throw new TracingConfigError(`${name}: expected an http(s) URL, got ${JSON.stringify(text)}`);
  }
  if (url.protocol !== 'http:' && url.protocol !== 'https:')
    throw new TracingConfigError(`${name}: expected an http(s) URL (OTLP over HTTP), got ${JSON.stringify(text)}`);
  return text;
}

function ratio(name: string, text: string): number {
  const n = Number(text);
  if (text.trim() === '' || !Number.isFinite(n) || n < 0 || n > 1)
    throw new TracingConfigError(`${name}: expected a number from 0 to 1, got ${JSON.stringify(text)}`);
  return n;
}

function count(env: Env, name: string): number | undefined {
  const text = value(env, name);
  if (text === undefined) return undefined;
  const n = Number(text);
  if (!Number.isInteger(n) || n < 1) throw new TracingConfigError(`${name}: expected a whole number above 0, got ${JSON.stringify(text)}`);
  return n;
}

function millis(env: Env, name: string): number | undefined {
  const text = value(env, name);
  if (text === undefined) return undefined;
  const n = Number(text);
  if (!Number.isFinite(n) || n <= 0 || n > MAX_TIMER_MS)
    throw new TracingConfigError(`${name}: expected milliseconds above 0 and at most ${MAX_TIMER_MS}, got ${JSON.stringify(text)}`);
  return n;
}

function seconds(fileValue: number | undefined, fallback: number): number {
  return (fileValue ?? fallback) * 1000;
}

/** An empty variable counts as unset (Kubernetes renders unset values as ""). */
function value(env: Env, name: string): string | undefined {
  const text = env[name];
  return text === undefined || text.trim() === '' ? undefined : text.trim();
}
