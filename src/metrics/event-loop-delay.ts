// Event-loop delay as a Prometheus histogram: how late the event loop ran a timer that was due,
// i.e. how long any callback (an ext_proc message, a body parse, GC) made everything else wait.
// perf_hooks.monitorEventLoopDelay samples in native code; every second its distribution is
// folded into the histogram and the sampler reset, so rates and quantiles over any window work
// (histogram_quantile over rate(), or the bench's before/after difference).

import { monitorEventLoopDelay } from 'node:perf_hooks';
import type { IntervalHistogram } from 'node:perf_hooks';
import { Histogram } from 'prom-client';
import type { Registry } from 'prom-client';

/** Sampling period of the native monitor (ms). Its samples include this period; we subtract it. */
export const EVENT_LOOP_SAMPLE_MS = 5;
const FOLD_INTERVAL_MS = 1_000;

export const EVENT_LOOP_DELAY_BUCKETS = [0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1];

export class EventLoopDelayMetric {
  private readonly histogram: Histogram;
  private readonly monitor: IntervalHistogram;
  private readonly timer: NodeJS.Timeout;

  constructor(registry: Registry, name: string) {
    this.histogram = new Histogram({
      name,
      help: `Event-loop delay: how late a due timer ran (sampled every ${EVENT_LOOP_SAMPLE_MS} ms by perf_hooks.monitorEventLoopDelay).`,
      buckets: EVENT_LOOP_DELAY_BUCKETS,
      registers: [registry],
      // Cluster mode: the primary's /metrics adds the workers' histograms up.
      aggregator: 'sum',
      collect: () => this.fold(),
    });
    this.monitor = monitorEventLoopDelay({ resolution: EVENT_LOOP_SAMPLE_MS });
    this.monitor.enable();
    this.timer = setInterval(() => this.fold(), FOLD_INTERVAL_MS).unref();
  }

  /** Moves the samples taken since the last fold into the histogram. */
  fold(): void {
    const count = this.monitor.count;
    if (count === 0) return;
    // HDR histogram percentiles: [percentile, value ns] pairs, ascending. Each step's share of
    // the samples is observed at that step's value (exact to the HDR histogram's precision).
    let observed = 0;
    for (const [percentile, valueNs] of this.monitor.percentiles) {
      const upTo = Math.round((percentile / 100) * count);
      const delaySeconds = Math.max(0, valueNs / 1e6 - EVENT_LOOP_SAMPLE_MS) / 1e3;
      for (; observed < upTo; observed++) this.histogram.observe(delaySeconds);
    }
    this.monitor.reset();
  }

  stop(): void {
    clearInterval(this.timer);
    this.monitor.disable();
  }
}
