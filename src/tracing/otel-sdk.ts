// The OpenTelemetry SDK as llm-extproc runs it: a tracer provider with our sampler and resource, a
// BatchSpanProcessor with a bounded queue, and the OTLP/HTTP (protobuf) exporter. Not registered
// globally: only our RequestTracer uses it, and it passes the parent context explicitly.
//
// Bounded by construction: a finished span goes into a queue of at most `maxQueueSize` (one more is
// dropped at once, never waited for), an export request gives up after `exportTimeoutMs`, and at
// most EXPORTS_IN_FLIGHT requests are open at once (a further one fails at once), so a collector
// that is down or stalled costs at most maxQueueSize + EXPORTS_IN_FLIGHT × maxExportBatchSize spans
// of memory and nothing on the request path (span.end() only queues). What is lost is counted
// through the SDK's own self-observability counter (otel.sdk.processor.span.processed with
// error.type), which this module turns into calls of `TracingObserver`.

import { createNoopMeter } from '@opentelemetry/api';
import type { Attributes, Meter, MeterProvider, ObservableCallback, ObservableResult } from '@opentelemetry/api';
import { setGlobalErrorHandler, W3CTraceContextPropagator } from '@opentelemetry/core';
import { OTLPTraceExporter } from '@opentelemetry/exporter-trace-otlp-proto';
import { defaultResource, detectResources, envDetector, resourceFromAttributes } from '@opentelemetry/resources';
// sdk-trace, not sdk-trace-base: the latter's processor reads OTEL_BSP_* itself, and every
// variable is resolved in one place here (config/tracing-config.ts).
import {
  AlwaysOffSampler,
  AlwaysOnSampler,
  BatchSpanProcessor,
  ParentBasedSampler,
  TraceIdRatioBasedSampler,
  TracerProvider,
} from '@opentelemetry/sdk-trace';
import type { Sampler } from '@opentelemetry/sdk-trace';
import { OtelRequestTracer } from './otel-request-trace.js';
import type { RequestTracer } from './request-trace.js';
import type { SamplerSettings, TracingSettings } from './tracing-settings.js';

/** Open export requests at most (the exporter fails a further one at once). */
const EXPORTS_IN_FLIGHT = 2;

const PROCESSED_COUNTER = 'otel.sdk.processor.span.processed';
const QUEUE_SIZE = 'otel.sdk.processor.span.queue.size';

export interface TracingObserver {
  spansExported(count: number): void;
  /** `queue_full`: the queue held maxQueueSize spans; `export_failed`: refused, unreachable or timed out. */
  spansDropped(reason: 'queue_full' | 'export_failed', count: number): void;
  /** An error the SDK reports (an export that failed): for a throttled log line. */
  error(error: unknown): void;
}

export interface RunningTracing {
  readonly tracer: RequestTracer;
  /** Finished spans waiting in the export queue now. */
  queueLength(): number;
  /** Exports what is queued, for at most `boundMs`, then stops (spans still queued are lost). */
  shutdown(boundMs: number): Promise<void>;
}

export function startTracing(settings: TracingSettings, observer: TracingObserver): RunningTracing {
  const selfObservation = new SelfObservation(observer);
  // The SDK reports failed exports to its global error handler; the default writes through the
  // (unregistered) diag logger, i.e. nowhere.
  setGlobalErrorHandler((error) => observer.error(error));
  const exporter = new OTLPTraceExporter({
    url: settings.endpoint,
    timeoutMillis: settings.exportTimeoutMs,
    concurrencyLimit: EXPORTS_IN_FLIGHT,
  });
  const processor = new BatchSpanProcessor({
    exporter,
    maxQueueSize: settings.maxQueueSize,
    maxExportBatchSize: settings.maxExportBatchSize,
    scheduledDelayMillis: settings.scheduledDelayMs,
    exportTimeoutMillis: settings.exportTimeoutMs,
    selfObsMeterProvider: selfObservation,
  });
  const resource = defaultResource()
    .merge(detectResources({ detectors: [envDetector] }))
    .merge(resourceFromAttributes({ 'service.name': settings.serviceName }));
  const provider = new TracerProvider({ resource, sampler: samplerOf(settings.sampler), spanProcessors: [processor] });
  const tracer = new OtelRequestTracer(provider.getTracer('llm-extproc'), new W3CTraceContextPropagator());
  return {
    tracer,
    queueLength: () => selfObservation.queueLength(),
    shutdown: (boundMs) => withinBound(provider.shutdown(), boundMs),
  };
}

function samplerOf(settings: SamplerSettings): Sampler {
  const root =
    settings.kind === 'always_on'
      ? new AlwaysOnSampler()
      : settings.kind === 'always_off'
        ? new AlwaysOffSampler()
        : new TraceIdRatioBasedSampler(settings.ratio);
  return settings.parentBased ? new ParentBasedSampler({ root }) : root;
}

/** Resolves when `work` settles or `boundMs` passed, whichever is first; never rejects. */
async function withinBound(work: Promise<unknown>, boundMs: number): Promise<void> {
  let timer: NodeJS.Timeout | undefined;
  const bound = new Promise<void>((resolve) => {
    timer = setTimeout(resolve, boundMs);
    timer.unref();
  });
  try {
    await Promise.race([work.then(noop, noop), bound]);
  } finally {
    clearTimeout(timer);
  }
}

function noop(): void {}

/**
 * A MeterProvider for the batch processor's self-observability only: its processed-spans counter
 * becomes observer calls, and its queue-size callback is kept so the queue can be read on demand.
 * Every other instrument is the API's no-op.
 */
class SelfObservation implements MeterProvider {
  private queueCallback: ObservableCallback | undefined;
  private readonly meter: Meter;

  constructor(private readonly observer: TracingObserver) {
    const base = createNoopMeter();
    const processed = (count: number, attributes?: Attributes): void => {
      const errorType = attributes?.['error.type'];
      if (errorType === undefined) observer.spansExported(count);
      else this.observer.spansDropped(errorType === 'queue_full' ? 'queue_full' : 'export_failed', count);
    };
    this.meter = {
      createGauge: (name, options) => base.createGauge(name, options),
      createHistogram: (name, options) => base.createHistogram(name, options),
      createUpDownCounter: (name, options) => base.createUpDownCounter(name, options),
      createObservableGauge: (name, options) => base.createObservableGauge(name, options),
      createObservableCounter: (name, options) => base.createObservableCounter(name, options),
      addBatchObservableCallback: (callback, observables) => base.addBatchObservableCallback(callback, observables),
      removeBatchObservableCallback: (callback, observables) => base.removeBatchObservableCallback(callback, observables),
      createCounter: (name, options) => {
        const counter = base.createCounter(name, options);
        return name === PROCESSED_COUNTER ? { add: processed } : counter;
      },
      createObservableUpDownCounter: (name, options) => {
        const instrument = base.createObservableUpDownCounter(name, options);
        if (name !== QUEUE_SIZE) return instrument;
        return {
          addCallback: (callback) => {
            this.queueCallback = callback;
          },
          removeCallback: () => {
            this.queueCallback = undefined;
          },
        };
      },
    };
  }

  getMeter(): Meter {
    return this.meter;
  }

  queueLength(): number {
    let length = 0;
    const result: ObservableResult = {
      observe: (value) => {
        length = value;
      },
    };
    void this.queueCallback?.(result);
    return length;
  }
}
