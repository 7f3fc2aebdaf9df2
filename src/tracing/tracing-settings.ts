// Tracing's settings once the config file and the standard OTEL_* variables are resolved
// (config/tracing-config.ts), with their defaults. Shared by the config parser, the schema's
// "Default" texts and the SDK wiring (otel-sdk.ts). Plain data.

/** How a new trace (or a client's trace) is sampled; the OTEL_TRACES_SAMPLER names. */
export interface SamplerSettings {
  readonly kind: 'always_on' | 'always_off' | 'traceidratio';
  /** traceidratio only: the share of traces kept, 0…1. */
  readonly ratio: number;
  /** Follow the client's sampled flag when its `traceparent` has one (the parentbased_* samplers). */
  readonly parentBased: boolean;
}

export interface TracingSettings {
  readonly enabled: boolean;
  /** The OTLP/HTTP traces URL, `…/v1/traces` included. */
  readonly endpoint: string;
  readonly sampler: SamplerSettings;
  readonly serviceName: string;
  /** Finished spans waiting for export; one more is dropped (and counted), never queued. */
  readonly maxQueueSize: number;
  /** Spans sent in one export request (at most maxQueueSize). */
  readonly maxExportBatchSize: number;
  /** How long to wait for a batch before the span queue is exported. */
  readonly scheduledDelayMs: number;
  /** One export gives up after this long (its spans are counted as dropped). */
  readonly exportTimeoutMs: number;
  /** At shutdown, the queued spans get this long to be sent. */
  readonly shutdownFlushMs: number;
  /**
   * The request to the model server carries our span's `traceparent` (and `tracestate`) in place
   * of the client's, so the model server's own span is a child of ours.
   */
  readonly propagateToUpstream: boolean;
  /** OTEL_TRACES_EXPORTER names besides `otlp` that we do not export with (told once at startup). */
  readonly ignoredExporters: readonly string[];
}

export const TRACING_DEFAULTS = {
  enabled: false,
  endpoint: 'http://localhost:4318/v1/traces',
  sampleRatio: 1,
  serviceName: 'llm-extproc',
  maxQueueSize: 2048,
  maxExportBatchSize: 128,
  scheduledDelaySeconds: 1,
  exportTimeoutSeconds: 10,
  shutdownFlushSeconds: 2,
  propagateToUpstream: true,
} as const;

/** Longest timer Node keeps (2^31−1 ms); a longer one fires at once. The schema and the OTEL_BSP_* checks stay below it. */
export const MAX_TIMER_MS = 2 ** 31 - 1;

/** Tracing off: what the app runs with unless the config (or the environment) turns it on. */
export const TRACING_OFF: TracingSettings = Object.freeze({
  enabled: false,
  endpoint: TRACING_DEFAULTS.endpoint,
  sampler: Object.freeze({ kind: 'always_on' as const, ratio: 1, parentBased: true }),
  serviceName: TRACING_DEFAULTS.serviceName,
  maxQueueSize: TRACING_DEFAULTS.maxQueueSize,
  maxExportBatchSize: TRACING_DEFAULTS.maxExportBatchSize,
  scheduledDelayMs: TRACING_DEFAULTS.scheduledDelaySeconds * 1000,
  exportTimeoutMs: TRACING_DEFAULTS.exportTimeoutSeconds * 1000,
  shutdownFlushMs: TRACING_DEFAULTS.shutdownFlushSeconds * 1000,
  propagateToUpstream: TRACING_DEFAULTS.propagateToUpstream,
  ignoredExporters: Object.freeze([]),
});
