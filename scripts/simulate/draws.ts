// One scenario row over several router draws: the same workload, the routers' random stream
// changed (which replica takes each arrival, the picker's tie-breaks), so that a comparison
// between policies is not one lucky draw. A p99 from one draw moves by several percent from draw
// to draw, as much as some of the gaps between policies. Deterministic for a seed; no I/O.

import { simulate } from './sim.js';
import type { PolicyName, SimConfig, SimRequest, SimResult } from './sim.js';

/** The measures of a run that are averaged over draws. */
const MEASURES = ['meanWaitMs', 'p99WaitMs', 'meanTtftMs', 'p99TtftMs', 'cacheHitRatio', 'maxMinLoad', 'slowShare'] as const;
export type Measure = (typeof MEASURES)[number];

export interface Estimate {
  readonly mean: number;
  /** Standard error of the mean (sample standard deviation / √draws); 0 for one draw. */
  readonly stderr: number;
  readonly min: number;
  readonly max: number;
}

export interface DrawSummary {
  readonly draws: number;
  /** A result whose measures are the means over the draws (what charts and comparisons use). */
  readonly mean: SimResult;
  readonly estimates: Readonly<Record<Measure, Estimate>>;
}

export function estimate(values: readonly number[]): Estimate {
  const n = values.length;
  if (n === 0) throw new Error('estimate: no values');
  const mean = values.reduce((a, b) => a + b, 0) / n;
  const variance = n < 2 ? 0 : values.reduce((a, v) => a + (v - mean) ** 2, 0) / (n - 1);
  return { mean, stderr: Math.sqrt(variance / n), min: Math.min(...values), max: Math.max(...values) };
}

/** Summarises runs of one scenario row (same policy, routers and request count). */
function summarise(runs: readonly SimResult[]): DrawSummary {
  if (runs.length === 0) throw new Error('summarise: no runs');
  const estimates = Object.fromEntries(MEASURES.map((m) => [m, estimate(runs.map((r) => r[m]))])) as Record<Measure, Estimate>;
  const means = Object.fromEntries(MEASURES.map((m) => [m, estimates[m].mean])) as Record<Measure, number>;
  return { draws: runs.length, mean: { ...runs[0], ...means }, estimates };
}

/** Runs one scenario row under draws 0 … draws − 1 of the routers' random stream. */
export function simulateDraws(config: SimConfig, policy: PolicyName, requests: readonly SimRequest[], draws: number): DrawSummary {
  return summarise(Array.from({ length: draws }, (_, draw) => simulate({ ...config, draw }, policy, requests)));
}
