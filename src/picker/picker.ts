// The picking pipeline: filters, then weighted scorers, then the best 1 + fallbacks distinct
// endpoints in order. Pure apart from the signal records it reads and the one random draw per
// pick that breaks ties; no I/O, no clocks.
//
// Cost: what depends only on the endpoint view (the candidates of a model, de-duplicated, with
// where their signal records are, address hashes and queue limits) is compiled once per view and
// cached. What depends on the signals too is kept up to date rather than recomputed: the board logs
// which records changed, and before a pick the model's candidate set replays those changes into
// its aggregates (ranges, mean load, queue-limit exclusions: aggregates.ts) and rescores only the
// changed candidates' load scores (all of them when a range moved). A pick is then one linear pass
// over typed arrays that adds LoRA affinity and the prefill saved to the kept scores (after a pass
// that finds the affinity key's owner, for a prompt with a key), with no sort and no allocation
// that grows with the pool: the top few are kept by insertion into a fixed-size list.
// Small sets and picks with a subset hint (whose ranges are the subset's) compute it all afresh:
// a pass for the aggregates, then the scoring pass.
//
//   filters  routable (Ready with an address) · the gateway's subset hint · the pool's queue limit
//   scorers  queue depth (less ours, counted live) · KV-cache use · our in-flight count ·
//            prefill saved (the tokens a candidate holds, from its KV events or, without them, the
//            affinity key's owner found with bounded load before the pass, against the queue it
//            would join) · LoRA affinity ·
//            recent latency (a replica demoted as much slower than its pool ranks below every
//            replica that is not, while one of those has room in its batch)
//            · any per-candidate scorer of the table (scorer-table.ts), asked once per pick
//   room     where flow control is on, a candidate that cannot take a request without queueing
//            past its pool's saturation limits (saturation.ts) ranks below every one that can, and
//            saves no prefill: a request dispatched because the pool has room goes where the room is
//   ties     visiting order from a random start, so equal endpoints share traffic evenly; the
//            affinity key's rendezvous-first candidate wins a tie it is in, so a prompt that saves
//            nothing yet lands at equal score where its later turns will be credited

import type { Endpoint, PoolView } from '../endpoints/model.js';
import { candidateLoad, isExcluded } from './aggregates.js';
import { mixedRendezvousWeight } from './rendezvous.js';
import { canTake, isSaturated } from './saturation.js';
import { hasBatchRoom, isOverloaded, loraAffinityScore, outstandingLoad, prefillSavedScore } from './scorers.js';
import type { PrefillCosts, Range } from './scorers.js';
import { Field, LATENCY_DEMOTED, LATENCY_NEUTRAL } from './signals.js';
import type { SignalBoard } from './signals.js';
import { CandidateSet, loadScore } from './candidate-set.js';
import type { PoolPolicy } from './settings.js';
import { builtInWeight, prefillCostsOf, SCORERS, sectionDefaults } from './scorer-table.js';
import type { CandidateScore, PrefixMatch, ScorerWeights, ScoringRequest, WeightedScorer } from './scorer-table.js';

export interface PipelineOptions {
  /** The weights of the scorers built into the passes below (scorer-table.ts). */
  readonly weights: ScorerWeights;
  /** The per-candidate scorers that are on (scorer-table.ts candidateScorers); absent = none. */
  readonly scorers?: readonly WeightedScorer[];
  /** Fallbacks after the primary. */
  readonly fallbacks: number;
  /** Bounded load for prefix affinity: the owner keeps a prefix while load ≤ factor × mean + slack. */
  readonly boundedLoad: {
    readonly factor: number;
    readonly slack: number;
    /**
     * An owner reporting more waiting requests than this is overloaded whatever the mean: its batch
     * is full, and a request sent there waits however warm its cache. Undefined = no such limit.
     */
    readonly maxQueue?: number;
  };
  /** Adapters a server may hold before LoRA affinity stops sending it new ones. */
  readonly maxAdaptersPerServer: number;
  /** The prefix scorer's cost figures for a pool whose answers have not measured its own yet; default picker.prefix's defaults. */
  readonly prefillCosts?: PrefillCosts;
  readonly poolPolicy: (pool: string) => PoolPolicy;
  /** Uniform in [0, 1); Math.random in production. */
  readonly random: () => number;
}

export interface PickRequest extends ScoringRequest {
  /**
   * The prompt's prefix-affinity key (routing/affinity-key.ts: its leading whole cache blocks); absent when
   * it has none, and the request is placed by load alone.
   */
  readonly affinityKey?: number;
  /**
   * Estimated tokens of the prompt's shared part (what the affinity key's owner may hold): its
   * prefill saved there, in the cost model. Absent with a key = not estimated: the owner within
   * bounds takes the full prefix score.
   */
  readonly sharedTokens?: number;
  /** Only these `ip:port` may be picked (the gateway's subset hint). */
  readonly subset?: ReadonlySet<string>;
}

export type PickOutcome =
  /** `score`: the primary's total score (higher is better), for traces. */
  | { readonly kind: 'picked'; readonly endpoints: readonly Endpoint[]; readonly score: number }
  /** No routable endpoint (or none inside the subset). */
  | { readonly kind: 'none' }
  /** Every candidate reports a queue at or above its pool's limit. */
  | { readonly kind: 'shed'; readonly pools: readonly string[]; readonly shortestQueue: number };

/**
 * From this many candidates on, a pick without a subset hint keeps its aggregates and load scores
 * up to date instead of recomputing them (measured: below about a hundred candidates, with signals
 * changing between picks, replaying the changes through the counted multisets costs more than a
 * pass over every candidate;
 * `npm run build && node dist/scripts/bench-pick-ab.js --baseline <checkout> --churn` shows it).
 */
const INCREMENTAL_FROM = 128;

/**
 * Added to the affinity key's home so that it wins ties. Scores are sums of weighted terms of order
 * 1; float rounding in those sums is about 1e-13, while the scorers' own differences (counts,
 * ratios of counts, latency bands) are orders of magnitude above 1e-9: it decides ties only.
 */
const HOME_TIE_NUDGE = 1e-9;

/** The candidate (an index) first in `key`'s rendezvous order among those not excluded; -1: none. */
function homeOfKey(set: CandidateSet, count: number, key: number): number {
  const { order, excluded, records } = set;
  const all = count === set.size;
  let home = -1;
  let top = -1;
  for (let j = 0; j < count; j++) {
    const i = all ? j : order[j];
    if (excluded[i] === 1) continue;
    const w = mixedRendezvousWeight(key, records[2 * i + 1]);
    if (w > top) {
      top = w;
      home = i;
    }
  }
  return home;
}

/** What pass 1 learns about the candidates of one pick (one reused instance per picker). */
class Summary {
  minFlight = Infinity;
  maxFlight = -Infinity;
  /** The queue scorer's range: others' waiting among candidates that report metrics (excluded ones included). */
  minOthersWaiting = Infinity;
  maxOthersWaiting = -Infinity;
  reporting = 0;
  /** Not excluded by their pool's queue limit. */
  eligible = 0;
  /** Outstanding load summed over the eligible. */
  loadSum = 0;
  /** The least outstanding load among the eligible (what the request would join at best). */
  minLoad = Infinity;
}

/** The per-request inputs of pass 2 (one reused instance per picker). */
class Scoring {
  useAffinity = false;
  key = 0;
  /** The prefill-saved scorer speaks: a prompt with an affinity key, or precise matches. */
  usePrefill = false;
  /** Precise matches from the servers' KV events, when there are any. */
  precise: PrefixMatch | undefined = undefined;
  /** Tokens the affinity key's owner is credited with (Infinity: not estimated). */
  sharedTokens = Infinity;
  /** The affinity key's owner (a candidate index; -1: none), found before pass 2. */
  owner = -1;
  /** The most any candidate is credited with: what prefill scores are shares of. */
  bestTokens = 0;
  minLoad = 0;
  useLora = false;
  holds = -1;
  meanLoad = 0;
  start = 0;
  /**
   * The affinity key's home: the candidate first in its rendezvous order (an index; -1: no key, or
   * an owner was found, whose prefix bonus decides instead). It wins ties, so a prompt that saves
   * nothing anywhere yet (a conversation's first turn, a prefix no server holds) still lands, at
   * equal score, where the key's later requests will be credited, on every replica alike.
   */
  keyHome = -1;
  /** The model's latency scores by slot (latency-tracker.ts), or undefined: latency does not speak. */
  latency: Float64Array | undefined = undefined;
  /** The per-candidate scorers that speak for this request: how many, their score functions and weights. */
  extras = 0;
  readonly extraScores: CandidateScore[] = [];
  readonly extraWeights: number[] = [];
}

/**
 * Pass 1: ranges for normalisation, the queue-limit filter (into `set.excluded`), mean load,
 * reporting count.
 */
function summarise(set: CandidateSet, count: number, signals: Float64Array, out: Summary): Summary {
  const { order, excluded, records, queueLimits } = set;
  // Without a subset hint every candidate is visited in order: skip the `order` indirection.
  const all = count === set.size;
  let minFlight = Infinity;
  let maxFlight = -Infinity;
  let minOthersWaiting = Infinity;
  let maxOthersWaiting = -Infinity;
  let reporting = 0;
  let eligible = 0;
  let loadSum = 0;
  let minLoad = Infinity;
  for (let j = 0; j < count; j++) {
    const i = all ? j : order[j];
    const at = records[2 * i];
    const flight = signals[at + Field.InFlight];
    if (flight < minFlight) minFlight = flight;
    if (flight > maxFlight) maxFlight = flight;
    if (signals[at + Field.Reporting] === 1) {
      const othersWaiting = signals[at + Field.OthersWaiting];
      reporting++;
      if (othersWaiting < minOthersWaiting) minOthersWaiting = othersWaiting;
      if (othersWaiting > maxOthersWaiting) maxOthersWaiting = othersWaiting;
      if (isExcluded(true, signals[at + Field.Waiting], queueLimits[i])) {
        excluded[i] = 1;
        continue;
      }
      const load = candidateLoad(flight, true, signals[at + Field.OthersLoad]);
      loadSum += load;
      if (load < minLoad) minLoad = load;
    } else {
      loadSum += flight;
      if (flight < minLoad) minLoad = flight;
    }
    excluded[i] = 0;
    eligible++;
  }
  out.minFlight = minFlight;
  out.maxFlight = maxFlight;
  out.minOthersWaiting = minOthersWaiting;
  out.maxOthersWaiting = maxOthersWaiting;
  out.reporting = reporting;
  out.eligible = eligible;
  out.loadSum = loadSum;
  out.minLoad = minLoad;
  return out;
}

/**
 * Whether any eligible candidate that is not demoted for latency can take a request into its batch
 * now (scorers.ts hasBatchRoom: a limit not known yet counts as room; flow control's saturation
 * limits, where set, count too).
 */
function roomOutsideDemoted(set: CandidateSet, count: number, signals: Float64Array, latency: Float64Array): boolean {
  const { order, excluded, records, saturates, saturationLimits } = set;
  const all = count === set.size;
  for (let j = 0; j < count; j++) {
    const i = all ? j : order[j];
    if (excluded[i] === 1) continue;
    const at = records[2 * i];
    const slot = at / Field.Stride;
    if (slot < latency.length && latency[slot] === LATENCY_DEMOTED) continue;
    if (saturates && !canTake(signals, at, saturationLimits[i])) continue;
    if (hasRoomAt(signals, at)) return true;
  }
  return false;
}

/** Whether the candidate whose record is at `at` can take one more request into its batch now (hasBatchRoom). */
function hasRoomAt(signals: Float64Array, at: number): boolean {
  const outstanding = candidateLoad(signals[at + Field.InFlight], signals[at + Field.Reporting] === 1, signals[at + Field.OthersLoad]);
  return hasBatchRoom(outstanding, signals[at + Field.BatchLimit]);
}

/** The shortest queue the candidates report (a pass: only a pick that sheds asks). */
function shortestReportedQueue(set: CandidateSet, count: number, signals: Float64Array): number {
  const { order, records } = set;
  const all = count === set.size;
  let shortest = Infinity;
  for (let j = 0; j < count; j++) {
    const at = records[2 * (all ? j : order[j])];
    if (signals[at + Field.Reporting] === 1 && signals[at + Field.Waiting] < shortest) shortest = signals[at + Field.Waiting];
  }
  return shortest;
}

/** The least outstanding load among a set's eligible candidates (a pass; the kept aggregates do not count it). */
function minEligibleLoad(set: CandidateSet, signals: Float64Array): number {
  let min = Infinity;
  for (let i = 0; i < set.size; i++) {
    if (set.excluded[i] === 1) continue;
    const at = set.records[2 * i];
    const load = candidateLoad(signals[at + Field.InFlight], signals[at + Field.Reporting] === 1, signals[at + Field.OthersLoad]);
    if (load < min) min = load;
  }
  return min;
}

/**
 * A pool's cost figures: each measured one, else its default. Prefill per token is measured only
 * from answers that report their usage (not every client asks for it), time to first token from
 * every streamed answer: a pool measured on one side only keeps the defaults' exchange rate
 * between them (prompt tokens saved per request ahead). Else a queue measured on servers slower
 * than the defaults assume, set against a prefill figure that assumes fast ones, would make every
 * saving look too small to follow (real vLLM on CPU: median TTFT 0.5 s, and the defaults' 0.1 ms
 * per token left a 600-token shared prompt worth a tenth of a request ahead: its picks were as
 * good as least in-flight's, docs/benchmarks.md).
 */
function withDefaults(measured: PrefillCosts, defaults: PrefillCosts): PrefillCosts {
  const queue = measured.queueSecondsPerRequest > 0 ? measured.queueSecondsPerRequest : defaults.queueSecondsPerRequest;
  return {
    prefillSecondsPerToken:
      measured.prefillSecondsPerToken > 0
        ? measured.prefillSecondsPerToken
        : defaults.prefillSecondsPerToken * (queue / defaults.queueSecondsPerRequest),
    queueSecondsPerRequest: queue,
    requestSeconds: measured.requestSeconds > 0 ? measured.requestSeconds : defaults.requestSeconds,
  };
}

export class Picker {
  private readonly summary = new Summary();
  private readonly scoring = new Scoring();
  private readonly compiled = new WeakMap<readonly PoolView[], CandidateSet>();
  private readonly k: number;
  private readonly topIndex: Int32Array;
  private readonly topScore: Float64Array;
  private readonly topPosition: Int32Array;
  private readonly demotedScore: number;
  private readonly extras: readonly WeightedScorer[];
  private readonly costScratch: PrefillCosts[] = [];
  private readonly defaultCosts: PrefillCosts;

  constructor(
    private readonly board: SignalBoard,
    private readonly options: PipelineOptions,
  ) {
    this.k = 1 + Math.max(0, options.fallbacks);
    this.extras = options.scorers ?? [];
    this.defaultCosts = options.prefillCosts ?? prefillCostsOf(sectionDefaults(SCORERS).prefix);
    let extraWeight = 0;
    for (const extra of this.extras) extraWeight += extra.weight;
    // Below what any other replica can score, so a demoted one leads only when no other is
    // eligible, or none of the others has room in its batch (rank).
    this.demotedScore = -(builtInWeight(SCORERS, options.weights) + extraWeight + 1);
    this.topIndex = new Int32Array(this.k + 2);
    this.topScore = new Float64Array(this.k + 2);
    this.topPosition = new Int32Array(this.k + 2);
  }

  /** The compiled candidates of one model's pools (the same array object for as long as the view lives). */
  candidates(pools: readonly PoolView[]): CandidateSet {
    let set = this.compiled.get(pools);
    if (set === undefined) this.compiled.set(pools, (set = new CandidateSet(pools, this.board, this.options.poolPolicy)));
    else if (set.layoutVersion !== this.board.layoutVersion) set.resolveSlots(this.board);
    return set;
  }

  pick(pools: readonly PoolView[], request: PickRequest): PickOutcome {
    const set = this.candidates(pools);
    const count = this.filterSubset(set, request.subset);
    if (count === 0) return { kind: 'none' };
    const { weights } = this.options;
    // Large sets without a subset hint keep pass 1 and the load scores from pick to pick; small
    // ones (and subsets, whose ranges are their own) compute them afresh, which costs them less.
    const incremental = count === set.size && count >= INCREMENTAL_FROM;
    // Read after compiling: compiling may add slots, and growing the board replaces the array.
    const summary = incremental ? this.aggregated(set) : summarise(set, count, this.board.signals, this.summary);
    if (summary.eligible === 0)
      return { kind: 'shed', pools: this.poolsOf(set, count), shortestQueue: shortestReportedQueue(set, count, this.board.signals) };

    const scoring = this.scoring;
    scoring.useAffinity = weights.prefix > 0 && request.affinityKey !== undefined;
    scoring.key = request.affinityKey ?? 0;
    scoring.precise = weights.prefix > 0 ? request.prefix : undefined;
    scoring.usePrefill = scoring.useAffinity || scoring.precise !== undefined;
    if (scoring.usePrefill) {
      scoring.sharedTokens = scoring.useAffinity ? (request.sharedTokens ?? Infinity) : 0;
      const precise = scoring.precise?.bestTokens ?? 0;
      scoring.bestTokens = scoring.useAffinity && scoring.sharedTokens > precise ? scoring.sharedTokens : precise;
      scoring.minLoad = incremental ? minEligibleLoad(set, this.board.signals) : summary.minLoad;
    }
    // The LoRA scorer only speaks for a model that some endpoint reports as an adapter; its
    // holders are marked in their records, so the loop reads a number per candidate.
    scoring.useLora = weights.lora > 0 && this.board.adapters.has(request.model);
    scoring.holds = scoring.useLora ? this.board.markHolders(request.model) : -1;
    scoring.meanLoad = summary.loadSum / summary.eligible;
    scoring.owner = scoring.useAffinity ? this.affinityOwner(set, count, summary, scoring) : -1;
    // An owner takes the prefix bonus, which decides; without one the key's home breaks ties.
    scoring.keyHome = scoring.useAffinity && scoring.owner < 0 ? homeOfKey(set, count, scoring.key) : -1;
    scoring.latency = weights.latency > 0 ? this.board.latencyTable(request.model) : undefined;
    scoring.extras = this.extras.length === 0 ? 0 : this.prepareExtras(request, scoring);
    // From a random start, so that ties go to a random endpoint (the key's home excepted: rank).
    scoring.start = Math.floor(this.options.random() * count) % count;
    const kept = this.rank(set, count, summary, scoring, incremental ? this.loadScores(set, summary) : undefined);

    const picked: Endpoint[] = [];
    for (let r = 0; r < kept && r < this.k; r++) picked.push(set.endpoints[this.topIndex[r]]);
    return { kind: 'picked', endpoints: picked, score: this.topScore[0] };
  }

  /** Asks each per-candidate scorer what it makes of the request; keeps those that speak. */
  private prepareExtras(request: PickRequest, scoring: Scoring): number {
    let count = 0;
    for (const extra of this.extras) {
      const score = extra.scorer.forRequest(request);
      if (score === undefined) continue;
      scoring.extraScores[count] = score;
      scoring.extraWeights[count] = extra.weight;
      count++;
    }
    return count;
  }

  /**
   * Whether no candidate (inside the subset hint, when there is one) can take a request without
   * queueing past its pool's saturation limits (saturation.ts). Allocation-free; stops at the
   * first candidate with room.
   */
  saturated(pools: readonly PoolView[], subset: ReadonlySet<string> | undefined): boolean {
    const set = this.candidates(pools);
    const count = this.filterSubset(set, subset);
    return isSaturated(this.board.signals, set.records, set.saturationLimits, count, set.orderIsAll ? undefined : set.order);
  }

  /** Pass 1 without a pass: the set's aggregates, brought up to date. */
  private aggregated(set: CandidateSet): Summary {
    set.sync(this.board);
    const { aggregates } = set;
    const out = this.summary;
    out.minFlight = aggregates.inFlight.min;
    out.maxFlight = aggregates.inFlight.max;
    out.minOthersWaiting = aggregates.othersWaiting.min;
    out.maxOthersWaiting = aggregates.othersWaiting.max;
    out.reporting = aggregates.reporting;
    out.eligible = aggregates.eligible;
    out.loadSum = aggregates.loadSum ?? set.sumLoads();
    return out;
  }

  /**
   * Every candidate's load score (pass 2's bulk), kept from pick to pick: only the candidates
   * whose signals changed are scored again, unless a range moved (then every score does).
   */
  private loadScores(set: CandidateSet, summary: Summary): Float64Array {
    const { weights } = this.options;
    const signals = this.board.signals;
    const { records, loadScores, scoredRanges: ranges } = set;
    const flightRange: Range = { min: summary.minFlight, max: summary.maxFlight };
    const waitingRange: Range = { min: summary.minOthersWaiting, max: summary.maxOthersWaiting };
    if (
      ranges[0] !== flightRange.min ||
      ranges[1] !== flightRange.max ||
      ranges[2] !== waitingRange.min ||
      ranges[3] !== waitingRange.max
    ) {
      for (let i = 0; i < set.size; i++) loadScores[i] = loadScore(weights, signals, records[2 * i], flightRange, waitingRange);
      ranges[0] = flightRange.min;
      ranges[1] = flightRange.max;
      ranges[2] = waitingRange.min;
      ranges[3] = waitingRange.max;
    } else {
      for (let r = 0; r < set.rescoreCount; r++) {
        const i = set.rescore[r];
        loadScores[i] = loadScore(weights, signals, records[2 * i], flightRange, waitingRange);
      }
    }
    set.rescored();
    return loadScores;
  }

  /**
   * The affinity key's owner, as consistent hashing with bounded load has it: of the candidates
   * within bounds (known to report, when any does; no longer queue than the limit; load ≤ factor ×
   * mean + slack) whose saving the queue does not eat, the one the key's rendezvous order ranks
   * first. Full candidates and those whose own KV events speak for them are not asked. -1: none.
   */
  private affinityOwner(set: CandidateSet, count: number, summary: Summary, scoring: Scoring): number {
    const { factor, slack, maxQueue } = this.options.boundedLoad;
    const ownerMaxQueue = maxQueue ?? Infinity;
    const { order, excluded, records, saturates, saturationLimits } = set;
    const all = count === set.size;
    const signals = this.board.signals;
    const { key, meanLoad, sharedTokens, bestTokens, minLoad, precise } = scoring;
    const costs = this.costsOf(set);
    let owner = -1;
    let ownerWeight = -1;
    for (let j = 0; j < count; j++) {
      const i = all ? j : order[j];
      if (excluded[i] === 1) continue;
      const at = records[2 * i];
      if (saturates && !canTake(signals, at, saturationLimits[i])) continue;
      // Owners must be known to be within bounds: when any candidate reports metrics, one that
      // does not is never trusted with a prefix.
      const reports = signals[at + Field.Reporting] === 1;
      if (!reports && summary.reporting > 0) continue;
      if (reports && signals[at + Field.Waiting] > ownerMaxQueue) continue;
      const flight = signals[at + Field.InFlight];
      const others = signals[at + Field.OthersLoad];
      if (isOverloaded(reports ? outstandingLoad(flight, others) : flight, meanLoad, factor, slack)) continue;
      if (precise?.matchedTokens(set.endpoints[i].address) !== undefined) continue;
      const w = mixedRendezvousWeight(key, records[2 * i + 1]);
      if (w <= ownerWeight) continue;
      const excess = candidateLoad(flight, reports, others) - minLoad;
      if (sharedTokens !== Infinity && !(prefillSavedScore(sharedTokens, bestTokens, excess, costs[set.poolIndex[i]]) > 0)) continue;
      ownerWeight = w;
      owner = i;
    }
    return owner;
  }

  /**
   * Pass 2: every eligible candidate's score (its load score, LoRA affinity, the per-candidate
   * scorers, the prefill it saves), the best k + 1 kept in order, and the candidate that saves the
   * most raised to its score without a latency penalty. Returns how many are kept. A function of
   * its own (as is pass 1) so that V8 optimises each loop with complete type feedback: with one
   * function holding both loops, a pool large enough to enter the first loop's
   * on-stack-replacement code on every call deoptimised there on every call.
   */
  private rank(set: CandidateSet, count: number, summary: Summary, scoring: Scoring, loadScores: Float64Array | undefined): number {
    const { weights, maxAdaptersPerServer } = this.options;
    const { order, excluded, records } = set;
    const all = count === set.size;
    const signals = this.board.signals;
    // Without kept load scores (a small set, a subset hint) they are computed here, over these ranges.
    const fresh = loadScores === undefined;
    const flightRange: Range = { min: summary.minFlight, max: summary.maxFlight };
    const waitingRange: Range = { min: summary.minOthersWaiting, max: summary.maxOthersWaiting };
    const loraWeight = weights.lora;
    const { useLora, holds, start, latency, extras, extraScores, extraWeights } = scoring;
    const { usePrefill, precise, owner, sharedTokens, bestTokens, minLoad } = scoring;
    const keyHome = scoring.keyHome;
    const prefixWeight = weights.prefix;
    const costs = usePrefill ? this.costsOf(set) : this.costScratch;
    const latencyWeight = weights.latency;
    const demotedScore = this.demotedScore;
    // Below every candidate with room, demoted or not (a full replica queues the request for sure).
    const fullScore = 2 * demotedScore;
    const { saturates, saturationLimits } = set;
    const limit = this.k + 1;
    const topScore = this.topScore;
    // Whether a candidate that is not demoted has room in its batch (-1: not asked yet; asked at the first demoted one).
    let roomElsewhere = -1;
    let kept = 0;
    let saver = -1;
    let saverBonus = 0;
    let saverBase = 0;
    let saverPosition = 0;
    for (let step = 0; step < count; step++) {
      const j = start + step < count ? start + step : start + step - count;
      const i = all ? j : order[j];
      if (excluded[i] === 1) continue;
      const at = records[2 * i];
      const full = saturates && !canTake(signals, at, saturationLimits[i]);
      let score = fresh ? loadScore(weights, signals, at, flightRange, waitingRange) : loadScores[i];
      if (useLora) {
        const reports = signals[at + Field.Reporting] === 1;
        const maxAdapters = Math.min(maxAdaptersPerServer, signals[at + Field.MaxAdapters]);
        const has = signals[at + Field.AdapterMark] === holds;
        score += loraWeight * loraAffinityScore(has, reports ? signals[at + Field.AdapterCount] : undefined, maxAdapters);
      }
      for (let e = 0; e < extras; e++) score += extraWeights[e] * extraScores[e](set.endpoints[i], signals, at);
      // Prefill saved against the queue joined (the cost model), from one source per candidate:
      // the tokens its own KV events say it holds, where they are trusted; else the affinity key's
      // owner is credited with the prompt's shared part (not estimated: the full score).
      if (usePrefill && !full) {
        const cached = precise?.matchedTokens(set.endpoints[i].address) ?? (i === owner ? sharedTokens : 0);
        if (cached > 0) {
          const reports = signals[at + Field.Reporting] === 1;
          const excess = candidateLoad(signals[at + Field.InFlight], reports, signals[at + Field.OthersLoad]) - minLoad;
          const bonus = cached === Infinity ? 1 : prefillSavedScore(cached, bestTokens, excess, costs[set.poolIndex[i]]);
          score += prefixWeight * bonus;
          // The candidate that saves the most is scored as if at its pool median, demoted or
          // not (ties: the first visited): the prefill-saved scorer outweighs every load scorer
          // by design, and a replica's warm cache for its prefixes is worth more than its speed
          // (`npm run simulate`, slow-replica scenario: taking prefixes from slow owners lost
          // cache hits and p99 TTFT). Bounded load and the queue in the cost model still move
          // requests off a holder that falls behind; latency decides where the others go.
          if (bonus > saverBonus) {
            saverBonus = bonus;
            saver = i;
            saverPosition = step;
            saverBase = score;
          }
        }
      }
      if (latency !== undefined) {
        const slot = at / Field.Stride;
        const value = slot < latency.length ? latency[slot] : LATENCY_NEUTRAL;
        if (value === LATENCY_DEMOTED) {
          // Below every replica that is not demoted, while one of them has room in its batch. When
          // none has any and this one has, it is scored as they are: a free slot on a slow replica
          // starts the request sooner than a queue anywhere (`npm run simulate`, short prompts with
          // a slow replica: ranked below every other, its idle slots went unused in bursts and the
          // p99 queue wait rose above least in-flight's).
          if (roomElsewhere < 0) roomElsewhere = roomOutsideDemoted(set, count, signals, latency) ? 1 : 0;
          if (roomElsewhere === 1 || full || !hasRoomAt(signals, at)) score += demotedScore;
        } else {
          // A penalty, 0 for a replica as fast as its pool (latencyScore's band): while every
          // replica is, each score is the very number it is without latency, so the picks are too
          // by construction; adding the weight to every candidate would leave that to the rounding
          // of every sum.
          score += latencyWeight * (value - LATENCY_NEUTRAL);
        }
      }
      if (full) score += fullScore;
      // The key's home wins ties, and only ties: the nudge is far below any scorer's resolution.
      if (i === keyHome) score += HOME_TIE_NUDGE;
      // Most candidates do not make the top list: test that before calling.
      if (kept < limit || score > topScore[limit - 1]) kept = this.keep(kept, i, score, step);
    }
    if (saver >= 0) kept = this.raise(kept, saver, saverBase, saverPosition);
    return kept;
  }

  /** Each of the set's pools' cost figures (measured, else the defaults), by the set's pool index. */
  private costsOf(set: CandidateSet): PrefillCosts[] {
    const out = this.costScratch;
    for (let p = 0; p < set.pools.length; p++) {
      const measured = this.board.prefillCosts(set.pools[p]);
      out[p] = measured === undefined ? this.defaultCosts : withDefaults(measured, this.defaultCosts);
    }
    return out;
  }

  /** Fills `set.order` with the candidates allowed by the subset hint; returns how many. */
  private filterSubset(set: CandidateSet, subset: ReadonlySet<string> | undefined): number {
    const order = set.order;
    if (subset === undefined) {
      if (!set.orderIsAll) for (let i = 0; i < set.size; i++) order[i] = i;
      set.orderIsAll = true;
      return set.size;
    }
    set.orderIsAll = false;
    let count = 0;
    if (subset.size < set.size) {
      // Walk the (small) hint, in candidate order so the result does not depend on hint order.
      for (const address of subset) {
        const i = set.indexOf.get(address);
        if (i !== undefined) order[count++] = i;
      }
      order.subarray(0, count).sort();
    } else {
      for (let i = 0; i < set.size; i++) if (subset.has(set.endpoints[i].address)) order[count++] = i;
    }
    return count;
  }

  /** Inserts into the fixed top list (k + 1 long: one spare for the owner's boost). Ties keep the earlier visit. */
  private keep(kept: number, index: number, score: number, position: number): number {
    const limit = this.k + 1;
    const top = this.topScore;
    if (kept === limit && score <= top[limit - 1]) return kept;
    let at = kept < limit ? kept : limit - 1;
    while (at > 0 && top[at - 1] < score) {
      top[at] = top[at - 1];
      this.topIndex[at] = this.topIndex[at - 1];
      this.topPosition[at] = this.topPosition[at - 1];
      at--;
    }
    top[at] = score;
    this.topIndex[at] = index;
    this.topPosition[at] = position;
    return kept < limit ? kept + 1 : kept;
  }

  /** Gives the prefix owner its bonus and moves it up to its place. */
  private boost(kept: number, owner: number, score: number, position: number): number {
    let at = -1;
    for (let r = 0; r < kept; r++) if (this.topIndex[r] === owner) at = r;
    if (at < 0) {
      // Not among the best by load alone: it takes the spare slot at the end.
      at = kept;
      kept++;
    }
    this.topScore[at] = score;
    this.topIndex[at] = owner;
    this.topPosition[at] = position;
    while (at > 0 && (this.topScore[at - 1] < score || (this.topScore[at - 1] === score && this.topPosition[at - 1] > position))) {
      this.topScore[at] = this.topScore[at - 1];
      this.topIndex[at] = this.topIndex[at - 1];
      this.topPosition[at] = this.topPosition[at - 1];
      this.topScore[at - 1] = score;
      this.topIndex[at - 1] = owner;
      this.topPosition[at - 1] = position;
      at--;
    }
    return kept;
  }

  /** The best saver's score without a latency penalty, where the penalty had put it lower. */
  private raise(kept: number, index: number, score: number, position: number): number {
    for (let r = 0; r < kept; r++)
      if (this.topIndex[r] === index) return this.topScore[r] >= score ? kept : this.boost(kept, index, score, position);
    return this.boost(kept, index, score, position);
  }

  private poolsOf(set: CandidateSet, count: number): string[] {
    const pools = new Set<string>();
    for (let j = 0; j < count; j++) pools.add(set.endpoints[set.order[j]].pool);
    return [...pools];
  }
}
