// Tracing as the app starts it: nothing at all when off; when on, the SDK (imported only then,
// so a server without tracing never loads it), its losses counted in /metrics and told in at most
// one log line per kind per interval.
import { performance } from 'node:perf_hooks';
import type { Logger } from 'pino';
import type { TraceMetrics } from '../metrics/trace-metrics.js';
import { errorMessage } from '../util/error-message.js';
import { LogThrottle } from '../util/log-throttle.js';
import type { RunningTracing } from './otel-sdk.js';
import type { TracingSettings } from './tracing-settings.js';

/**
 * Tracing on: the SDK (loaded only then), its losses in /metrics and in at most one log line per
 * kind per interval. Off: undefined, and the request path never calls a tracer.
 */
export async function startTracingIfOn(
  settings: TracingSettings,
  logger: Logger,
  traceMetrics: TraceMetrics,
): Promise<RunningTracing | undefined> {
  if (!settings.enabled) return undefined;
  const { startTracing } = await import('./otel-sdk.js');
  const log = logger.child({ component: 'tracing' });
  const throttle = new LogThrottle<'queue_full' | 'export_failed' | 'error'>();
  const tracing = startTracing(settings, {
    spansExported: (count) => traceMetrics.spansExported(count),
    spansDropped: (reason, count) => {
      traceMetrics.spansDropped(reason, count);
      const suppressed = throttle.admit(reason, performance.now());
      if (suppressed !== undefined) log.warn({ reason, count, suppressed }, 'trace spans dropped');
    },
    error: (err) => {
      const suppressed = throttle.admit('error', performance.now());
      if (suppressed !== undefined) log.warn({ err: errorMessage(err), suppressed }, 'trace export failed');
    },
  });
  traceMetrics.reportQueueFrom(() => tracing.queueLength());
  log.info(
    { endpoint: settings.endpoint, sampler: settings.sampler, serviceName: settings.serviceName, maxQueueSize: settings.maxQueueSize },
    'tracing on: exporting spans over OTLP/HTTP',
  );
  if (settings.ignoredExporters.length > 0)
    log.warn(
      { ignored: settings.ignoredExporters },
      'OTEL_TRACES_EXPORTER: llm-extproc exports with otlp only; the other exporters named are ignored',
    );
  return tracing;
}
