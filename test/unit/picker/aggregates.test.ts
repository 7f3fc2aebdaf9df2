// The picker's per-model aggregates (ranges, reporting and eligible counts, the load sum, queue-limit
// exclusions) and per-candidate load scores, kept up to date from the signal board's change log,
// always equal a pass over the candidates from scratch: after any sequence of in-flight changes,
// scrapes, scrape failures, staleness, endpoints leaving and coming back, and the board growing.
import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import fc from 'fast-check';
import type { Endpoint, PoolView } from '../../../src/endpoints/model.js';
import { CountedExtremes } from '../../../src/picker/aggregates.js';
import { LoadTracker } from '../../../src/picker/load-tracker.js';
import { Picker } from '../../../src/picker/picker.js';
import { DEFAULT_WEIGHTS } from '../../../src/picker/settings.js';
import { DEFAULT_BOUNDED_LOAD } from '../../../src/picker/scorer-table.js';
import type { CandidateSet } from '../../../src/picker/candidate-set.js';
import { inFlightScore, kvCacheScore, queueDepthScore } from '../../../src/picker/scorers.js';
import { markStaleIfOld, recordScrape, recordScrapeFailure, SignalBoard } from '../../../src/picker/signals.js';

function newPicker(board: SignalBoard, random: () => number = () => 0.5): Picker {
  return new Picker(board, {
    weights: DEFAULT_WEIGHTS,
    fallbacks: 2,
    boundedLoad: DEFAULT_BOUNDED_LOAD,
    maxAdaptersPerServer: 2,
    poolPolicy: (pool) => (pool === 'limited' ? { maxQueueDepth: LIMIT } : {}),
    random,
  });
}

/** -0 and 0 are the same extreme (no score can tell them apart). */
const same = (a: number, b: number): boolean => a === b || (Number.isNaN(a) && Number.isNaN(b));

describe('CountedExtremes', () => {
  it('min and max equal those of the multiset after any adds and removes (NaN never counts)', () => {
    const value = fc.oneof(fc.integer({ min: -3, max: 3 }), fc.double(), fc.constantFrom(Number.NaN, -0, Infinity, -Infinity));
    fc.assert(
      fc.property(fc.array(fc.tuple(fc.boolean(), value, fc.nat()), { maxLength: 80 }), (ops) => {
        const extremes = new CountedExtremes();
        const bag: number[] = [];
        for (const [add, v, pick] of ops) {
          if (add || bag.length === 0) {
            extremes.add(v);
            bag.push(v);
          } else {
            const [removed] = bag.splice(pick % bag.length, 1);
            extremes.remove(removed);
          }
          const counted = bag.filter((x) => !Number.isNaN(x));
          assert.ok(same(extremes.min, counted.length === 0 ? Infinity : Math.min(...counted)));
          assert.ok(same(extremes.max, counted.length === 0 ? -Infinity : Math.max(...counted)));
        }
      }),
      { numRuns: 300 },
    );
  });
});

// Enough candidates for the picker to keep its aggregates and load scores from pick to pick.
const ADDRESSES = Array.from({ length: 300 }, (_, i) => `10.0.${i >> 8}.${i & 255}:8000`);
const ep = (address: string, pool: string): Endpoint => ({ id: address, address, state: 'Ready', reason: '', pool });
/** Two pools (one with a queue limit), one address listed in both: the first listing counts. */
const POOLS: PoolView[] = [
  { name: 'limited', models: ['m'], endpoints: ADDRESSES.slice(0, 150).map((a) => ep(a, 'limited')) },
  { name: 'open', models: ['m'], endpoints: ADDRESSES.slice(149).map((a) => ep(a, 'open')) },
];
const LIMIT = 6;

/**
 * The queue scorer's input: the part of a reported queue that was not ours when it was reported
 * (an unreadable gauge, NaN, counts as none).
 */
function queueNotOurs(waiting: number, ourInFlightThen: number): number {
  const beyondOurs = waiting - ourInFlightThen;
  return beyondOurs > 0 ? beyondOurs : 0;
}

/** The aggregates as a pass over the candidates from scratch computes them, in candidate order. */
function fromScratch(board: SignalBoard, set: CandidateSet) {
  let minFlight = Infinity;
  let maxFlight = -Infinity;
  let minWaiting = Infinity;
  let maxWaiting = -Infinity;
  let reporting = 0;
  let eligible = 0;
  let loadSum = 0;
  const excluded: number[] = [];
  for (const endpoint of set.endpoints) {
    const cell = board.peek(endpoint.address);
    const flight = cell?.inFlight ?? 0;
    const load = cell?.usableLoad();
    if (flight < minFlight) minFlight = flight;
    if (flight > maxFlight) maxFlight = flight;
    if (load === undefined) {
      excluded.push(0);
      eligible++;
      loadSum += flight;
      continue;
    }
    reporting++;
    const othersWaiting = queueNotOurs(load.waiting, cell?.inFlightAtReport ?? 0);
    if (othersWaiting < minWaiting) minWaiting = othersWaiting;
    if (othersWaiting > maxWaiting) maxWaiting = othersWaiting;
    const limit = endpoint.pool === 'limited' ? LIMIT : Infinity;
    if (load.waiting >= limit) {
      excluded.push(1);
      continue;
    }
    excluded.push(0);
    eligible++;
    // Ours live, the others' share as the report had it (what was not ours when it was taken).
    const others = load.waiting + load.running - (cell?.inFlightAtReport ?? 0);
    loadSum += flight + (others > 0 ? others : 0);
  }
  return { minFlight, maxFlight, minWaiting, maxWaiting, reporting, eligible, loadSum, excluded };
}

function incremental(set: CandidateSet) {
  const a = set.aggregates;
  return {
    minFlight: a.inFlight.min,
    maxFlight: a.inFlight.max,
    minWaiting: a.othersWaiting.min,
    maxWaiting: a.othersWaiting.max,
    reporting: a.reporting,
    eligible: a.eligible,
    loadSum: a.loadSum ?? set.sumLoads(),
    excluded: [...set.excluded],
  };
}

/** Scraped gauges: counts mostly, but any float must keep the aggregates exact. */
const gauge = fc.oneof(
  { weight: 6, arbitrary: fc.integer({ min: 0, max: 12 }) },
  { weight: 2, arbitrary: fc.double({ min: 0, max: 12, noNaN: true }) },
  { weight: 1, arbitrary: fc.constantFrom(Number.NaN, Infinity, -0, 2 ** 40 + 0.5, 1e300) },
);
// Most changes hit a few candidates, so that extremes leave and come back.
const address = fc.oneof(fc.constantFrom(...ADDRESSES.slice(0, 2), ...ADDRESSES.slice(148, 150)), fc.constantFrom(...ADDRESSES));
const op = fc.oneof(
  { weight: 4, arbitrary: fc.record({ kind: fc.constant('acquire' as const), address }) },
  { weight: 2, arbitrary: fc.record({ kind: fc.constant('release' as const), address }) },
  // A request on every endpoint, or one fewer on each: the least loaded changes.
  fc.record({ kind: fc.constantFrom('acquire all' as const, 'release all' as const) }),
  {
    weight: 4,
    arbitrary: fc.record({
      kind: fc.constant('scrape' as const),
      address,
      waiting: gauge,
      running: gauge,
      kvCache: fc.option(fc.double({ min: -0.5, max: 1.5 })),
      adapter: fc.boolean(),
    }),
  },
  fc.record({ kind: fc.constant('failure' as const), address }),
  fc.record({ kind: fc.constant('stale' as const), address }),
  // Endpoints leave the view (their cells go unless requests are in flight) and come back.
  fc.record({ kind: fc.constant('churn' as const), keep: fc.subarray(ADDRESSES) }),
  // Other models' endpoints: the board grows (its signals array is replaced).
  fc.record({ kind: fc.constant('grow' as const), count: fc.integer({ min: 1, max: 40 }) }),
  // More changes than the change log holds between two picks: it starts over.
  fc.record({ kind: fc.constant('burst' as const), address, writes: fc.integer({ min: 1000, max: 1300 }) }),
);

type Op = typeof op extends fc.Arbitrary<infer T> ? T : never;

/** A board and what writes to it, as the server has them. */
interface World {
  readonly board: SignalBoard;
  readonly tracker: LoadTracker;
  /** Addresses of other models created so far. */
  others: number;
  now: number;
}

function change(w: World, o: Op): void {
  w.now += 1000;
  switch (o.kind) {
    case 'acquire':
      w.tracker.acquire(o.address);
      break;
    case 'release':
      w.tracker.release(o.address);
      break;
    case 'acquire all':
      for (const a of ADDRESSES) w.tracker.acquire(a);
      break;
    case 'release all':
      for (const a of ADDRESSES) w.tracker.release(a);
      break;
    case 'scrape':
      recordScrape(
        w.board.cell(o.address),
        {
          waiting: o.waiting,
          running: o.running,
          kvCacheUsage: o.kvCache ?? undefined,
          runningAdapters: o.adapter ? ['sql'] : [],
          waitingAdapters: [],
          maxAdapters: undefined,
        },
        w.now,
      );
      break;
    case 'failure':
      recordScrapeFailure(w.board.cell(o.address), 'refused');
      break;
    case 'stale':
      markStaleIfOld(w.board.cell(o.address), w.now, 500);
      break;
    case 'churn':
      w.board.retainOnly(new Set(o.keep));
      break;
    case 'grow':
      for (let i = 0; i < o.count; i++) w.board.cell(`10.1.${w.others >> 8}.${w.others++ & 255}:8000`);
      break;
    case 'burst':
      for (let i = 0; i < o.writes; i++) w.board.cell(o.address).inFlight = i % 5;
      break;
  }
}

describe('incremental pick aggregates', () => {
  it('equal a from-scratch pass after any sequence of signal changes, churn and growth', () => {
    fc.assert(
      fc.property(fc.array(op, { minLength: 1, maxLength: 60 }), (ops) => {
        const board = new SignalBoard();
        const tracker = new LoadTracker(board);
        const picker = newPicker(board);
        const world = { board, tracker, others: 0, now: 0 };
        for (const o of ops) {
          change(world, o);
          // A pick after every change: it brings the aggregates and load scores up to date.
          assert.notEqual(picker.pick(POOLS, { model: 'm' }).kind, 'none');
          const set = picker.candidates(POOLS);
          const got = incremental(set);
          const want = fromScratch(board, set);
          for (const key of ['minFlight', 'maxFlight', 'minWaiting', 'maxWaiting', 'reporting', 'eligible', 'loadSum'] as const)
            assert.ok(same(got[key], want[key]), `${key}: incremental ${got[key]}, from scratch ${want[key]} after ${JSON.stringify(o)}`);
          assert.deepEqual(got.excluded, want.excluded);
          if (want.eligible > 0) {
            // The load scores the pick used: each as the scorers compute it from scratch.
            const flightRange = { min: want.minFlight, max: want.maxFlight };
            const waitingRange = { min: want.minWaiting, max: want.maxWaiting };
            set.endpoints.forEach((endpoint, i) => {
              const cell = board.peek(endpoint.address);
              const load = cell?.usableLoad();
              let score = DEFAULT_WEIGHTS.inFlight * inFlightScore(cell?.inFlight ?? 0, flightRange);
              if (load !== undefined) {
                score += DEFAULT_WEIGHTS.queue * queueDepthScore(queueNotOurs(load.waiting, cell?.inFlightAtReport ?? 0), waitingRange);
                score += DEFAULT_WEIGHTS.kvCache * kvCacheScore(load.kvCacheUsage);
              }
              assert.ok(
                same(set.loadScores[i], score),
                `load score of ${endpoint.address}: kept ${set.loadScores[i]}, from scratch ${score}`,
              );
            });
          }
        }
      }),
      { numRuns: 300 },
    );
  });
});

describe('picks with kept aggregates and load scores', () => {
  it('are the picks computed afresh, after any sequence of signal changes', () => {
    // The same endpoints twice: as they are (kept aggregates), and with one more endpoint that a
    // subset hint leaves out (everything afresh, over the same candidates in the same order).
    const ghost = ep('10.9.9.9:8000', 'open');
    const withGhost: PoolView[] = [POOLS[0], { ...POOLS[1], endpoints: [...POOLS[1].endpoints, ghost] }];
    const everyone = new Set(ADDRESSES);
    const request = fc.record({
      model: fc.constantFrom('m', 'sql'),
      affinityKey: fc.option(fc.integer({ min: 0, max: 2 ** 32 - 1 }), { nil: undefined }),
    });
    fc.assert(
      fc.property(
        fc.array(fc.tuple(op, request, fc.double({ min: 0, max: 1, maxExcluded: true, noNaN: true })), { minLength: 1, maxLength: 40 }),
        (steps) => {
          const world = (board: SignalBoard): World => ({ board, tracker: new LoadTracker(board), others: 0, now: 0 });
          const kept = world(new SignalBoard());
          const fresh = world(new SignalBoard());
          let draw = 0;
          const keptPicker = newPicker(kept.board, () => draw);
          const freshPicker = newPicker(fresh.board, () => draw);
          for (const [o, r, d] of steps) {
            change(kept, o);
            change(fresh, o);
            draw = d;
            const a = keptPicker.pick(POOLS, r);
            const b = freshPicker.pick(withGhost, { ...r, subset: everyone });
            assert.deepEqual(
              a.kind === 'picked' ? a.endpoints.map((e) => e.address) : a,
              b.kind === 'picked' ? b.endpoints.map((e) => e.address) : b,
              `after ${JSON.stringify(o)}`,
            );
          }
        },
      ),
      { numRuns: 150 },
    );
  });
});
