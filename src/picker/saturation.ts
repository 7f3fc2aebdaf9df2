// Saturation: can any candidate take one more request without queueing past its pool's limits?
// Pure over the signal board's records; flow control (routing/flow-control.ts) queues a pool's
// requests only while the answer is no. A candidate can take a request while our in-flight count
// is under the pool's limit and, where its servers are scraped, it reports fresh metrics with a
// queue and KV-cache use under the limits. A stale, failing or missing report is never read as
// idle: such a candidate counts as full, as it does for the picker's scorers.

import { Field } from './signals.js';

export interface SaturationLimits {
  /** A candidate reporting at least this many waiting requests is full. */
  readonly queueDepth: number;
  /** A candidate reporting at least this KV-cache use (0..1) is full; servers that report none are not judged by it. */
  readonly kvCacheUsage: number;
  /** A candidate with this many of our requests in flight is full (Infinity: no limit). */
  readonly maxInFlight: number;
  /** The pool's servers are scraped: a candidate without a fresh report is full. */
  readonly scraped: boolean;
}

/**
 * vLLM's own signals: a batch with waiting requests is past full, and vLLM starts preempting as its
 * KV cache nears full. Five waiting and 80 % are the figures llm-d's saturation detector ships with.
 */
export const DEFAULT_SATURATION = { queueDepth: 5, kvCacheUsage: 0.8, maxInFlight: Number.POSITIVE_INFINITY } as const;

/** The limits of a pool without flow control: its candidates always have room. */
export const OPEN_POOL: SaturationLimits = Object.freeze({
  queueDepth: Number.POSITIVE_INFINITY,
  kvCacheUsage: Number.POSITIVE_INFINITY,
  maxInFlight: Number.POSITIVE_INFINITY,
  scraped: false,
});

/** Whether the candidate whose record starts at `at` can take one more request. */
export function canTake(signals: Float64Array, at: number, limits: SaturationLimits): boolean {
  if (signals[at + Field.InFlight] >= limits.maxInFlight) return false;
  if (signals[at + Field.Reporting] !== 1) return !limits.scraped;
  if (signals[at + Field.Waiting] >= limits.queueDepth) return false;
  // NaN (not reported) compares false: such servers are judged by their queue alone.
  return !(signals[at + Field.KvCacheUsage] >= limits.kvCacheUsage);
}

/**
 * True when none of the `count` candidates can take a request (none at all is not saturation: it
 * is "no ready replica"). `records[2 × i]` is where candidate i's record starts, `visit[j]` the
 * j-th candidate to look at (or j itself when `visit` is undefined), `limits[i]` its pool's limits.
 * Stops at the first candidate with room, so a pool with room costs one look in the usual case.
 */
export function isSaturated(
  signals: Float64Array,
  records: Int32Array,
  limits: readonly SaturationLimits[],
  count: number,
  visit: Int32Array | undefined,
): boolean {
  if (count === 0) return false;
  for (let j = 0; j < count; j++) {
    const i = visit === undefined ? j : visit[j];
    if (canTake(signals, records[2 * i], limits[i])) return false;
  }
  return true;
}
