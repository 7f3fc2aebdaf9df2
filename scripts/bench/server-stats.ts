// What llm-extproc says about itself during a phase, from its /metrics: event-loop delay
// (`llm_extproc_event_loop_delay_seconds`) and GC pauses (`llm_extproc_nodejs_gc_duration_seconds`),
// as differences between a scrape before and one after the phase. In cluster mode the primary's
// /metrics already adds the workers up.

import { histogramDelta, histogramSum, histogramTotal, parseHistogram } from './stats.js';
import type { HistogramSnapshot } from './stats.js';

export const EVENT_LOOP_METRIC = 'llm_extproc_event_loop_delay_seconds';
export const GC_METRIC = 'llm_extproc_nodejs_gc_duration_seconds';

export interface ServerSnapshot {
  readonly loop: HistogramSnapshot | undefined;
  readonly gc: HistogramSnapshot | undefined;
}

/** Event-loop delay and GC observed during some phases (added up over rounds). */
export interface ServerPhaseStats {
  loop: HistogramSnapshot | undefined;
  gcSeconds: number;
}

export function serverSnapshot(metricsText: string): ServerSnapshot {
  return {
    loop: parseHistogram(metricsText, EVENT_LOOP_METRIC, '').get(''),
    gc: histogramTotal(parseHistogram(metricsText, GC_METRIC, 'kind')),
  };
}

/** Adds what happened between `before` and `after` to `into`. */
export function addServerDelta(into: ServerPhaseStats | undefined, before: ServerSnapshot, after: ServerSnapshot): ServerPhaseStats {
  const loop = after.loop === undefined ? undefined : histogramDelta(after.loop, before.loop);
  const gcSeconds = after.gc === undefined ? 0 : after.gc.sum - (before.gc?.sum ?? 0);
  return {
    loop: loop === undefined ? into?.loop : histogramSum(into?.loop, loop),
    gcSeconds: (into?.gcSeconds ?? 0) + gcSeconds,
  };
}
