// What a pick needs to know about all of a model's candidates before it can score any one of them
// (the ranges scores are normalised to, the mean load bounded load compares against, who is over
// its pool's queue limit), kept up to date one candidate at a time instead of recomputed by a pass
// over every candidate on every pick. Pure: the caller says what a candidate's signals were and are.
//
// Exactness: the aggregates must equal what a pass over the candidates in order would compute,
// whatever the numbers (scraped gauges can be any float). Extremes are counted multisets, so an
// extreme that leaves is replaced by the next one exactly; the load sum is exact while every load is
// a modest integer (the usual case: counts of requests) and is otherwise summed afresh, in candidate
// order, by the caller.

import { outstandingLoad } from './scorers.js';

/**
 * Smallest and largest of a multiset of numbers. NaN is never counted: a pass comparing with `<`
 * and `>` never picks it either. Removing the last copy of an extreme defers finding the new one
 * to the next read (one walk over the distinct values, few when values are counts).
 */
export class CountedExtremes {
  private readonly counts = new Map<number, number>();
  private low = Infinity;
  private high = -Infinity;
  private stale = false;

  add(value: number): void {
    if (Number.isNaN(value)) return;
    this.counts.set(value, (this.counts.get(value) ?? 0) + 1);
    if (value < this.low) this.low = value;
    if (value > this.high) this.high = value;
  }

  /** `value` must have been added (and not removed since). */
  remove(value: number): void {
    if (Number.isNaN(value)) return;
    const count = this.counts.get(value) ?? 0;
    if (count > 1) {
      this.counts.set(value, count - 1);
      return;
    }
    this.counts.delete(value);
    if (value === this.low || value === this.high) this.stale = true;
  }

  get min(): number {
    if (this.stale) this.refresh();
    return this.low;
  }

  get max(): number {
    if (this.stale) this.refresh();
    return this.high;
  }

  clear(): void {
    this.counts.clear();
    this.low = Infinity;
    this.high = -Infinity;
    this.stale = false;
  }

  private refresh(): void {
    this.low = Infinity;
    this.high = -Infinity;
    for (const value of this.counts.keys()) {
      if (value < this.low) this.low = value;
      if (value > this.high) this.high = value;
    }
    this.stale = false;
  }
}

/** Integer loads up to this size sum exactly in a double over up to 2^20 candidates. */
const EXACT_LOAD_LIMIT = 2 ** 32;

/** Over its pool's queue limit: takes no new requests. Unknown metrics never are. */
export function isExcluded(reporting: boolean, waiting: number, queueLimit: number): boolean {
  return reporting && waiting >= queueLimit;
}

/** A candidate's outstanding load as the mean load counts it (only eligible candidates count). */
export function candidateLoad(inFlight: number, reporting: boolean, othersLoad: number): number {
  return reporting ? outstandingLoad(inFlight, othersLoad) : inFlight;
}

/** The aggregates over a set of candidates, each added once and withdrawn with the same signals. */
export class LoadAggregates {
  /** In-flight counts of every candidate. */
  readonly inFlight = new CountedExtremes();
  /** The queue scorer's input (others' waiting) of the candidates that report (those over their queue limit included). */
  readonly othersWaiting = new CountedExtremes();
  reporting = 0;
  /** Candidates not excluded by their queue limit. */
  eligible = 0;
  /** Sum of the eligible candidates' loads that are integers within EXACT_LOAD_LIMIT. */
  private exactLoadSum = 0;
  /** Eligible candidates whose load is anything else: while any, the sum must be taken afresh. */
  private inexactLoads = 0;

  /**
   * Adds (`sign` 1) or withdraws (`sign` −1) one candidate: its in-flight count, whether it reports
   * fresh metrics (only then do waiting and the others' load count), and its pool's queue limit.
   * Numbers, not an object: this runs for every signal change.
   */
  apply(
    sign: 1 | -1,
    inFlight: number,
    reporting: boolean,
    waiting: number,
    othersWaiting: number,
    othersLoad: number,
    queueLimit: number,
  ): void {
    if (sign === 1) this.inFlight.add(inFlight);
    else this.inFlight.remove(inFlight);
    if (reporting) {
      this.reporting += sign;
      if (sign === 1) this.othersWaiting.add(othersWaiting);
      else this.othersWaiting.remove(othersWaiting);
    }
    if (isExcluded(reporting, waiting, queueLimit)) return;
    this.eligible += sign;
    const load = candidateLoad(inFlight, reporting, othersLoad);
    if (Number.isInteger(load) && Math.abs(load) <= EXACT_LOAD_LIMIT) this.exactLoadSum += sign * load;
    else this.inexactLoads += sign;
  }

  /** The eligible candidates' load sum, when it is known exactly without a pass (else undefined). */
  get loadSum(): number | undefined {
    return this.inexactLoads === 0 ? this.exactLoadSum : undefined;
  }

  clear(): void {
    this.inFlight.clear();
    this.othersWaiting.clear();
    this.reporting = 0;
    this.eligible = 0;
    this.exactLoadSum = 0;
    this.inexactLoads = 0;
  }
}
