// What llm-extproc says about itself during a phase, from its /metrics: event-loop delay
// (`llm_extproc_event_loop_delay_seconds`), GC pauses (`llm_extproc_nodejs_gc_duration_seconds`) and
// how long each message stayed inside it (`llm_extproc_message_turnaround_seconds`), as differences between a scrape before and one after the phase. In cluster mode the primary's
// /metrics already adds the workers up.

import { histogramDelta, histogramSum, histogramTotal, parseHistogram } from './stats.js';
import type { HistogramSnapshot } from './stats.js';

const EVENT_LOOP_METRIC = 'llm_extproc_event_loop_delay_seconds';
const GC_METRIC = 'llm_extproc_nodejs_gc_duration_seconds';
const TURNAROUND_METRIC = 'llm_extproc_message_turnaround_seconds';

export interface ServerSnapshot {
  readonly loop: HistogramSnapshot | undefined;
  readonly gc: HistogramSnapshot | undefined;
  /** Absent on the transports that do not report it (grpc-js). */
  readonly turnaround: HistogramSnapshot | undefined;
}

/** Event-loop delay, GC and message turnaround observed during some phases (added up over rounds). */
export interface ServerPhaseStats {
  loop: HistogramSnapshot | undefined;
  gcSeconds: number;
  turnaround: HistogramSnapshot | undefined;
}

export function serverSnapshot(metricsText: string): ServerSnapshot {
  return {
    loop: parseHistogram(metricsText, EVENT_LOOP_METRIC, '').get(''),
    gc: histogramTotal(parseHistogram(metricsText, GC_METRIC, 'kind')),
    turnaround: nonEmpty(parseHistogram(metricsText, TURNAROUND_METRIC, '').get('')),
  };
}

function nonEmpty(h: HistogramSnapshot | undefined): HistogramSnapshot | undefined {
  return h === undefined || h.count === 0 ? undefined : h;
}

function addHistogram(
  into: HistogramSnapshot | undefined,
  before: HistogramSnapshot | undefined,
  after: HistogramSnapshot | undefined,
): HistogramSnapshot | undefined {
  return after === undefined ? into : histogramSum(into, histogramDelta(after, before));
}

/** Adds what happened between `before` and `after` to `into`. */
export function addServerDelta(into: ServerPhaseStats | undefined, before: ServerSnapshot, after: ServerSnapshot): ServerPhaseStats {
  const gcSeconds = after.gc === undefined ? 0 : after.gc.sum - (before.gc?.sum ?? 0);
  return {
    loop: addHistogram(into?.loop, before.loop, after.loop),
    gcSeconds: (into?.gcSeconds ?? 0) + gcSeconds,
    turnaround: addHistogram(into?.turnaround, before.turnaround, after.turnaround),
  };
}
