// The candidates of one model in one endpoint view, compiled once per view: de-duplicated
// endpoints with where their signal records are, address hashes and queue limits, and aggregates
// (ranges, mean load, queue-limit exclusions: aggregates.ts) and load scores that are kept up to
// date from the board's change log rather than recomputed per pick. Read by the picker (picker.ts).

import { isRoutable } from '../endpoints/model.js';
import type { Endpoint, PoolView } from '../endpoints/model.js';
import { candidateLoad, isExcluded, LoadAggregates } from './aggregates.js';
import { hashAddress, mixEndpointHash } from './rendezvous.js';
import { inFlightScore, kvCacheScore, queueDepthScore } from './scorers.js';
import type { Range } from './scorers.js';
import { Field } from './signals.js';
import type { SignalBoard } from './signals.js';
import { OPEN_POOL } from './saturation.js';
import type { SaturationLimits } from './saturation.js';
import type { PoolPolicy } from './settings.js';
import type { ScorerWeights } from './scorer-table.js';

/** A model's candidates, compiled once per endpoint view. */
export class CandidateSet {
  readonly endpoints: Endpoint[] = [];
  /**
   * Per candidate, two int32s: where its record starts in the board's signals (slot ×
   * Field.Stride), and its address hash for rendezvous, premixed (mixEndpointHash).
   */
  readonly records: Int32Array;
  /** The board's layout version the slots were looked up at. */
  layoutVersion = -1;
  readonly queueLimits: Float64Array;
  /** The pools of the candidates, once each; `poolIndex[i]` is candidate i's place in it. */
  readonly pools: string[] = [];
  readonly poolIndex: Int32Array;
  /** Per candidate, its pool's saturation limits (flow control; OPEN_POOL where it is off). */
  readonly saturationLimits: SaturationLimits[] = [];
  /** Some candidate's pool has flow control: the picker then places candidates without room last. */
  readonly saturates: boolean;
  readonly indexOf = new Map<string, number>();
  /** Scratch space for one pick (picks never overlap: one event loop). */
  readonly order: Int32Array;
  /** False after a pick with a subset hint: `order` must be refilled with every candidate. */
  orderIsAll = false;
  /**
   * Per candidate, 1 while over its pool's queue limit: kept up to date by `sync`, and written for
   * its candidates by a pick with a subset hint (the same function of the same signals).
   */
  readonly excluded: Uint8Array;
  /** Pass 1 over every candidate, kept up to date from the board's change log by `sync`. */
  readonly aggregates = new LoadAggregates();
  /** Per candidate, the signals `aggregates` counts it with (Mirror.Stride numbers each). */
  private readonly counted: Float64Array;
  /** Candidate index by board slot (−1: not a candidate), as of `layoutVersion`. */
  private indexBySlot = new Int32Array(0);
  /**
   * Per candidate, the load part of its score (in-flight, queue, KV cache: loadScore), valid for
   * the ranges in `scoredRanges` and for every candidate not listed in `rescore`.
   */
  readonly loadScores: Float64Array;
  /** minFlight, maxFlight, minOthersWaiting, maxOthersWaiting that `loadScores` were computed for (NaN: none yet). */
  readonly scoredRanges = new Float64Array(4).fill(Number.NaN);
  /** Candidates whose signals changed since their load score was computed (each listed once). */
  readonly rescore: Int32Array;
  rescoreCount = 0;
  private readonly listed: Uint8Array;
  /** How far into the board's change log `aggregates` is (−1: not yet counted). */
  private syncedEpoch = -1;
  private syncedCount = 0;

  constructor(pools: readonly PoolView[], board: SignalBoard, policy: (pool: string) => PoolPolicy) {
    for (const pool of pools) {
      for (const endpoint of pool.endpoints) {
        // First pool in configuration order wins an address listed twice; a Ready copy in a later
        // pool is still found when an earlier copy is not routable.
        if (!isRoutable(endpoint) || this.indexOf.has(endpoint.address)) continue;
        this.indexOf.set(endpoint.address, this.endpoints.length);
        this.endpoints.push(endpoint);
      }
    }
    const n = this.endpoints.length;
    this.records = new Int32Array(2 * n);
    this.queueLimits = new Float64Array(n);
    this.poolIndex = new Int32Array(n);
    this.counted = new Float64Array(Mirror.Stride * n);
    const limits = new Map(pools.map((p) => [p.name, policy(p.name).maxQueueDepth ?? Number.POSITIVE_INFINITY]));
    const saturation = new Map(pools.map((p) => [p.name, policy(p.name).saturation ?? OPEN_POOL]));
    for (let i = 0; i < n; i++) {
      this.records[2 * i + 1] = mixEndpointHash(hashAddress(this.endpoints[i].address));
      this.queueLimits[i] = limits.get(this.endpoints[i].pool) ?? Number.POSITIVE_INFINITY;
      this.saturationLimits.push(saturation.get(this.endpoints[i].pool) ?? OPEN_POOL);
      let pool = this.pools.indexOf(this.endpoints[i].pool);
      if (pool < 0) pool = this.pools.push(this.endpoints[i].pool) - 1;
      this.poolIndex[i] = pool;
    }
    this.saturates = this.saturationLimits.some((limits) => limits !== OPEN_POOL);
    this.order = new Int32Array(n);
    this.excluded = new Uint8Array(n);
    this.loadScores = new Float64Array(n);
    this.rescore = new Int32Array(n);
    this.listed = new Uint8Array(n);
    this.resolveSlots(board);
  }

  get size(): number {
    return this.endpoints.length;
  }

  /** (Re)reads each candidate's slot: at compile time, and after the board released slots. */
  resolveSlots(board: SignalBoard): void {
    let slots = 0;
    for (let i = 0; i < this.endpoints.length; i++) {
      const slot = board.cell(this.endpoints[i].address).slot;
      this.records[2 * i] = slot * Field.Stride;
      if (slot >= slots) slots = slot + 1;
    }
    this.indexBySlot = new Int32Array(slots).fill(-1);
    for (let i = 0; i < this.endpoints.length; i++) this.indexBySlot[this.records[2 * i] / Field.Stride] = i;
    this.layoutVersion = board.layoutVersion;
    this.syncedEpoch = -1;
  }

  /**
   * Brings `aggregates` and `excluded` up to date with the board: replays the change log since
   * the last sync, or counts every candidate afresh when that is as cheap (or the log started over).
   */
  sync(board: SignalBoard): void {
    if (this.layoutVersion !== board.layoutVersion) this.resolveSlots(board);
    const signals = board.signals;
    const from = this.syncedEpoch === board.changeEpoch ? this.syncedCount : -1;
    if (from < 0 || board.changeCount - from > this.size) {
      this.aggregates.clear();
      for (let i = 0; i < this.size; i++) this.count(i, signals);
      this.scoredRanges.fill(Number.NaN);
    } else {
      const indexBySlot = this.indexBySlot;
      for (let k = from; k < board.changeCount; k++) {
        const slot = board.changedSlot(k);
        const i = slot < indexBySlot.length ? indexBySlot[slot] : -1;
        if (i < 0) continue;
        const c = Mirror.Stride * i;
        const counted = this.counted;
        this.aggregates.apply(
          -1,
          counted[c + Mirror.InFlight],
          counted[c + Mirror.Reporting] === 1,
          counted[c + Mirror.Waiting],
          counted[c + Mirror.OthersWaiting],
          counted[c + Mirror.OthersLoad],
          this.queueLimits[i],
        );
        this.count(i, signals);
        if (this.listed[i] === 0) {
          this.listed[i] = 1;
          this.rescore[this.rescoreCount++] = i;
        }
      }
    }
    this.syncedEpoch = board.changeEpoch;
    this.syncedCount = board.changeCount;
  }

  /** Empties the rescore list (its candidates have their load scores again). */
  rescored(): void {
    for (let r = 0; r < this.rescoreCount; r++) this.listed[this.rescore[r]] = 0;
    this.rescoreCount = 0;
  }

  /** The eligible candidates' load sum, in candidate order (as a pass over them adds it up). */
  sumLoads(): number {
    let sum = 0;
    const counted = this.counted;
    for (let i = 0; i < this.size; i++) {
      if (this.excluded[i] === 1) continue;
      const c = Mirror.Stride * i;
      sum += candidateLoad(counted[c + Mirror.InFlight], counted[c + Mirror.Reporting] === 1, counted[c + Mirror.OthersLoad]);
    }
    return sum;
  }

  /** Counts candidate `i` in the aggregates with its current signals. */
  private count(i: number, signals: Float64Array): void {
    const at = this.records[2 * i];
    const c = Mirror.Stride * i;
    const counted = this.counted;
    const inFlight = (counted[c + Mirror.InFlight] = signals[at + Field.InFlight]);
    const reporting = (counted[c + Mirror.Reporting] = signals[at + Field.Reporting]) === 1;
    const waiting = (counted[c + Mirror.Waiting] = signals[at + Field.Waiting]);
    const othersWaiting = (counted[c + Mirror.OthersWaiting] = signals[at + Field.OthersWaiting]);
    const others = (counted[c + Mirror.OthersLoad] = signals[at + Field.OthersLoad]);
    this.aggregates.apply(1, inFlight, reporting, waiting, othersWaiting, others, this.queueLimits[i]);
    this.excluded[i] = isExcluded(reporting, waiting, this.queueLimits[i]) ? 1 : 0;
  }
}

/** Layout of `CandidateSet.counted`: the signals a candidate's aggregates were counted with. */
const enum Mirror {
  InFlight = 0,
  Reporting = 1,
  Waiting = 2,
  OthersLoad = 3,
  OthersWaiting = 4,
  Stride = 5,
}

/**
 * The part of a candidate's score that depends on its load signals and the candidates' ranges
 * only: the in-flight, queue and KV-cache scorers, weighted and added in this order (the pick adds
 * LoRA and prefix affinity after, so the sum is the same to the last bit however it is reached).
 */
export function loadScore(weights: ScorerWeights, signals: Float64Array, at: number, flightRange: Range, waitingRange: Range): number {
  let score = weights.inFlight * inFlightScore(signals[at + Field.InFlight], flightRange);
  if (signals[at + Field.Reporting] === 1) {
    if (weights.queue > 0) score += weights.queue * queueDepthScore(signals[at + Field.OthersWaiting], waitingRange);
    if (weights.kvCache > 0) score += weights.kvCache * kvCacheScore(signals[at + Field.KvCacheUsage]);
  }
  return score;
}
