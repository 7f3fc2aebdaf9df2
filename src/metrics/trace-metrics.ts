// What becomes of our trace spans: exported, or dropped (the export queue was full, or an export
// failed or timed out), and how many wait in the bounded export queue. A collector that is down or
// slow shows here, never in request latency.

import { Counter, Gauge } from 'prom-client';
import type { Registry } from 'prom-client';

export type SpanDropReason = 'queue_full' | 'export_failed';

export class TraceMetrics {
  private queueLength: () => number = () => 0;

  private readonly exported: Counter;
  private readonly dropped: Counter<'reason'>;

  constructor(registry: Registry) {
    this.exported = new Counter({
      name: 'llm_extproc_trace_spans_exported_total',
      help: 'Trace spans the OTLP collector accepted.',
      registers: [registry],
    });
    this.dropped = new Counter({
      name: 'llm_extproc_trace_spans_dropped_total',
      help: 'Trace spans lost: queue_full (the export queue held tracing.maxQueueSize spans), export_failed (the collector refused, was unreachable or did not answer within tracing.exportTimeoutSeconds).',
      labelNames: ['reason'] as const,
      registers: [registry],
    });
    for (const reason of ['queue_full', 'export_failed'] as const) this.dropped.inc({ reason }, 0);
    const queued = (): number => this.queueLength();
    new Gauge({
      name: 'llm_extproc_trace_queue_spans',
      help: 'Finished spans waiting in the export queue (at most tracing.maxQueueSize).',
      registers: [registry],
      // Read when /metrics is scraped (`this` is the gauge).
      collect(this: Gauge) {
        this.set(queued());
      },
    });
  }

  spansExported(count: number): void {
    this.exported.inc(count);
  }

  spansDropped(reason: SpanDropReason, count: number): void {
    this.dropped.inc({ reason }, count);
  }

  reportQueueFrom(length: () => number): void {
    this.queueLength = length;
  }
}
