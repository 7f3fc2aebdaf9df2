// Event-loop delay as a Prometheus histogram: how late the event loop ran a timer that was due,
// i.e. how long any callback (an ext_proc message, a body parse, GC) made everything else wait.
//
// Sampled like perf_hooks.monitorEventLoopDelay (a repeating timer whose lateness is recorded),
// but in JS straight into the histogram: the native monitor's reset() drops the first interval
// after it, so periodically folding its distribution into a histogram would lose exactly the
// stall that follows a fold. prom-client's default metrics still export the native monitor's
// since-last-scrape gauges (llm_extproc_nodejs_eventloop_lag_*); this histogram adds windowed
// quantiles (histogram_quantile over rate()) and the bench's before/after differences.

import { Histogram } from 'prom-client';
import type { Registry } from 'prom-client';

/**
 * Sampling period (ms); its lateness, not the period itself, is recorded. Every sample wakes the
 * process: at 5 ms the sampler alone was ~2 % of the server's busy time under load (CPU profile of
 * `npm run bench`). A stall of any length still delays the next sample by its length; shorter
 * periods only add samples of sub-millisecond lateness, which is timer granularity, not load.
 */
export const EVENT_LOOP_SAMPLE_MS = 20;

export const EVENT_LOOP_DELAY_BUCKETS = [0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1];

export class EventLoopDelayMetric {
  private readonly histogram: Histogram;
  private timer: NodeJS.Timeout | undefined;
  private due = 0;

  constructor(registry: Registry, name: string) {
    this.histogram = new Histogram({
      name,
      help: `Event-loop delay: how late a timer due every ${EVENT_LOOP_SAMPLE_MS} ms ran.`,
      buckets: EVENT_LOOP_DELAY_BUCKETS,
      registers: [registry],
      // Cluster mode: the primary's /metrics adds the workers' histograms up.
      aggregator: 'sum',
    });
    this.schedule();
  }

  private schedule(): void {
    this.due = performance.now() + EVENT_LOOP_SAMPLE_MS;
    this.timer = setTimeout(() => {
      const now = performance.now();
      // libuv timers have millisecond granularity: up to ~1 ms of lateness is the clock, not load.
      this.histogram.observe(Math.max(0, now - this.due) / 1000);
      this.due = now + EVENT_LOOP_SAMPLE_MS;
      this.timer?.refresh(); // re-arms the same timer: no new Timeout per sample
    }, EVENT_LOOP_SAMPLE_MS).unref();
  }

  stop(): void {
    clearTimeout(this.timer);
    this.timer = undefined;
  }
}
