// Latency as a picking signal: the decayed estimator, the scorer, and the tracker's passive
// outlier handling (demotion of a replica much slower than its pool, probes, reinstatement), read
// by the real picker through the signal board.
import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import fc from 'fast-check';
import type { Endpoint, PoolView } from '../../../src/endpoints/model.js';
import { DecayedMean, latencyScore, medianOf, SAME_SPEED, slowness } from '../../../src/picker/latency.js';
import { LatencyTracker, SLOW_REPLICA } from '../../../src/picker/latency-tracker.js';
import type { LatencySample } from '../../../src/picker/latency-tracker.js';
import { Picker } from '../../../src/picker/picker.js';
import { DEFAULT_WEIGHTS } from '../../../src/picker/settings.js';
import { DEFAULT_LATENCY } from '../../../src/picker/scorer-table.js';
import type { LatencySettings } from '../../../src/picker/scorer-table.js';
import { LATENCY_DEMOTED, LATENCY_NEUTRAL, recordScrape, SignalBoard } from '../../../src/picker/signals.js';

const H = 1000;
const FLOOR = { ttftSeconds: 0.02, tpotSeconds: 0.002 };

describe('DecayedMean', () => {
  it('samples taken together weigh alike: their plain mean', () => {
    const m = new DecayedMean();
    for (const v of [1, 2, 3, 6]) m.observe(v, 0, H);
    assert.equal(m.mean, 3);
    assert.equal(m.weightAt(0, H), 4);
  });

  it('a sample one half-life older weighs half as much', () => {
    const m = new DecayedMean();
    m.observe(0, 0, H);
    m.observe(9, H, H);
    assert.equal(m.mean, 9 / 1.5);
  });

  it('time alone lowers the confidence, never the mean', () => {
    const m = new DecayedMean();
    m.observe(4, 0, H);
    m.observe(8, 0, H);
    assert.equal(m.weightAt(2 * H, H), 0.5);
    assert.equal(m.mean, 6);
  });

  it('NaN before any sample; restart forgets the past', () => {
    const m = new DecayedMean();
    assert.ok(Number.isNaN(m.mean));
    m.observe(100, 0, H);
    m.restart(1, 10);
    assert.equal(m.mean, 1);
    assert.equal(m.weightAt(10, H), 1);
  });

  it('property: the mean stays within the samples, the weight within their count', () => {
    fc.assert(
      fc.property(
        fc.array(fc.record({ value: fc.double({ min: 0, max: 100, noNaN: true }), gap: fc.integer({ min: 0, max: 5000 }) }), {
          minLength: 1,
          maxLength: 50,
        }),
        (samples) => {
          const m = new DecayedMean();
          let now = 0;
          for (const s of samples) m.observe(s.value, (now += s.gap), H);
          const values = samples.map((s) => s.value);
          const eps = 1e-9 * Math.max(1, ...values);
          assert.ok(m.mean >= Math.min(...values) - eps && m.mean <= Math.max(...values) + eps);
          assert.ok(m.weightAt(now, H) <= samples.length + 1e-9 && m.weightAt(now, H) >= 1 - 1e-9);
        },
      ),
    );
  });
});

describe('medianOf and slowness', () => {
  it('median of odd and even counts; NaN when empty', () => {
    assert.equal(medianOf(Float64Array.from([5, 1, 3]), 3), 3);
    assert.equal(medianOf(Float64Array.from([4, 1, 3, 2, 99]), 4), 2.5);
    assert.ok(Number.isNaN(medianOf(new Float64Array(4), 0)));
  });

  it('property: the median has as many values at or below it as at or above it', () => {
    fc.assert(
      fc.property(fc.array(fc.double({ min: -1e6, max: 1e6, noNaN: true }), { minLength: 1, maxLength: 40 }), (values) => {
        const median = medianOf(Float64Array.from(values), values.length);
        assert.ok(values.filter((v) => v <= median).length >= values.length / 2);
        assert.ok(values.filter((v) => v >= median).length >= values.length / 2);
      }),
    );
  });

  it('TPOT against its median decides; faster than the median is 1', () => {
    assert.equal(slowness(0.125, 0.04, 0.125, 0.01, FLOOR), 4);
    // A long TTFT with a normal TPOT is the prompt (its length, cache misses, the queue), not the replica.
    assert.equal(slowness(0.5, 0.01, 0.125, 0.01, FLOOR), 1);
    assert.equal(slowness(0.05, 0.005, 0.1, 0.01, FLOOR), 1);
  });

  it('TTFT decides only where TPOT is not known; nothing known is 1', () => {
    assert.equal(slowness(0.5, Number.NaN, 0.125, 0.01, FLOOR), 4);
    assert.equal(slowness(0.5, 0.04, 0.125, Number.NaN, FLOOR), 4);
    assert.equal(slowness(Number.NaN, 0.04, 0.1, 0.01, FLOOR), 4);
    assert.equal(slowness(0.3, 0.03, Number.NaN, Number.NaN, FLOOR), 1);
  });

  it('a few milliseconds next to a tiny median are not "3× slower" (the floor)', () => {
    assert.equal(slowness(0.015, 0.0015, 0.005, 0.0005, FLOOR), 1);
    assert.equal(slowness(0.08, Number.NaN, 0.005, 0.0005, FLOOR), 4);
    assert.equal(slowness(0.08, 0.008, 0.005, 0.0005, FLOOR), 4);
  });

  it('the score: 1 up to SAME_SPEED times the median (noise between equally fast replicas), SAME_SPEED/s for s times slower', () => {
    assert.equal(SAME_SPEED, 1.2);
    assert.equal(latencyScore(0.5), 1);
    assert.equal(latencyScore(1), 1);
    // A decayed mean of identical samples is not always exactly the median: still 1.
    assert.equal(latencyScore(1.0000000000000002), 1);
    assert.equal(latencyScore(1.2), 1);
    assert.equal(latencyScore(2.4), 0.5);
    assert.equal(latencyScore(4.8), 0.25);
  });
});

const SETTINGS: LatencySettings = { ...DEFAULT_LATENCY, halfLifeMs: 10_000, minSamples: 3, probeIntervalMs: 2000 };
const ADDRESSES = ['10.0.0.1:8000', '10.0.0.2:8000', '10.0.0.3:8000'] as const;
const [FAST_A, FAST_B, SLOW] = ADDRESSES;

function pools(addresses: readonly string[] = ADDRESSES): PoolView[] {
  const endpoints: Endpoint[] = addresses.map((address) => ({ id: address, address, state: 'Ready', reason: '', pool: 'p' }));
  return [{ name: 'p', models: ['m'], endpoints }];
}

interface Bed {
  readonly board: SignalBoard;
  readonly tracker: LatencyTracker;
  readonly events: string[];
  /** One sample per address at `now`, each with its TTFT (TPOT a tenth of it). */
  answer(now: number, ttfts: Readonly<Record<string, number>>): void;
  value(address: string): number;
  state(address: string): string | undefined;
}

function bed(addresses: readonly string[] = ADDRESSES, settings: LatencySettings = SETTINGS): Bed {
  const board = new SignalBoard();
  for (const a of addresses) board.cell(a);
  const events: string[] = [];
  const tracker = new LatencyTracker(board, settings, {
    demoted: (_model, _pool, address, detail) => events.push(`demoted ${address}: ${detail}`),
    reinstated: (_model, _pool, address, why) => events.push(`reinstated ${address}: ${why}`),
  });
  const sample = (address: string, ttft: number): LatencySample => ({
    model: 'm',
    pool: 'p',
    address,
    timeToFirstToken: ttft,
    timePerOutputToken: ttft / 10,
  });
  return {
    board,
    tracker,
    events,
    answer: (now, ttfts) => {
      for (const [address, ttft] of Object.entries(ttfts)) tracker.record(sample(address, ttft), now);
    },
    value: (address) => board.latencyTable('m')?.[board.cell(address).slot] ?? LATENCY_NEUTRAL,
    state: (address) => tracker.snapshot(address, 0)[0]?.state,
  };
}

/**
 * Rounds 300 ms apart (more than the refresh interval): with decay, four samples are needed
 * before they weigh minSamples (3), and the verdict comes at the round after.
 */
function warm(b: Bed, ttfts: Readonly<Record<string, number>>, from = 0): number {
  let now = from;
  for (let round = 0; round < 6; round++) b.answer((now += 300), ttfts);
  return now;
}

function firstPicks(picker: Picker, n: number): Map<string, number> {
  const counts = new Map<string, number>();
  const view = pools();
  for (let i = 0; i < n; i++) {
    const outcome = picker.pick(view, { model: 'm' });
    assert.equal(outcome.kind, 'picked');
    if (outcome.kind === 'picked') counts.set(outcome.endpoints[0].address, (counts.get(outcome.endpoints[0].address) ?? 0) + 1);
  }
  return counts;
}

function pickerOn(board: SignalBoard, draws: readonly number[] = [0, 0.34, 0.67], weights = DEFAULT_WEIGHTS): Picker {
  let i = 0;
  return new Picker(board, {
    weights,
    fallbacks: 2,
    boundedLoad: { factor: 1.1, slack: 1 },
    maxAdaptersPerServer: 4,
    poolPolicy: () => ({}),
    random: () => draws[i++ % draws.length],
  });
}

describe('LatencyTracker: passive outlier handling', () => {
  it('a replica 3× slower than its two peers is demoted with the named reason, and the picker sends it nothing first', () => {
    const b = bed();
    warm(b, { [FAST_A]: 0.1, [FAST_B]: 0.1, [SLOW]: 0.3 });
    assert.equal(b.value(SLOW), LATENCY_DEMOTED);
    assert.equal(b.value(FAST_A), 1);
    const [entry] = b.tracker.snapshot(SLOW, 1800);
    assert.equal(entry.state, 'demoted');
    assert.equal(entry.reason, SLOW_REPLICA);
    assert.match(
      entry.detail ?? '',
      /^3\.0× slower than its pool \(demoted at 2×\): time per output token 30 ms \(pool median 10 ms\), time to first token 300 ms \(pool median 100 ms\)$/,
    );
    assert.deepEqual(
      b.events.map((e) => e.split(': ')[0]),
      [`demoted ${SLOW}`],
    );
    const counts = firstPicks(pickerOn(b.board), 30);
    assert.equal(counts.get(SLOW), undefined, `the demoted replica led no pick: ${JSON.stringify([...counts])}`);
    // Still a fallback: it is Ready, and better than nothing.
    const outcome = pickerOn(b.board).pick(pools(), { model: 'm' });
    assert.ok(outcome.kind === 'picked' && outcome.endpoints[2].address === SLOW);
  });

  it('a demoted replica still takes requests when it is the only one left', () => {
    const b = bed();
    warm(b, { [FAST_A]: 0.1, [FAST_B]: 0.1, [SLOW]: 0.3 });
    const outcome = pickerOn(b.board).pick(pools([SLOW]), { model: 'm' });
    assert.ok(outcome.kind === 'picked' && outcome.endpoints[0].address === SLOW);
  });

  it("a demoted replica takes a request when every other replica's batch is full, as their reports showed it, and only while it has room itself", () => {
    const b = bed();
    warm(b, { [FAST_A]: 0.1, [FAST_B]: 0.1, [SLOW]: 0.3 });
    const scrape = (address: string, waiting: number, running: number): void =>
      recordScrape(
        b.board.cell(address),
        { waiting, running, kvCacheUsage: 0.5, runningAdapters: [], waitingAdapters: [], maxAdapters: undefined },
        0,
      );
    const leader = (weights = DEFAULT_WEIGHTS): string => {
      const outcome = pickerOn(b.board, [0], weights).pick(pools(), { model: 'm' });
      assert.equal(outcome.kind, 'picked');
      return outcome.kind === 'picked' ? outcome.endpoints[0].address : '';
    };
    const first = (): string => leader();
    // Without latency the slow replica would lead every pick below: one request of ours is in flight
    // at each fast replica and none at the slow one, and their queues are alike.
    const blind = (): string => leader({ ...DEFAULT_WEIGHTS, latency: 0 });
    b.board.cell(FAST_A).inFlight = 1;
    b.board.cell(FAST_B).inFlight = 1;
    // Nothing known of any batch yet: a limit never seen counts as room, and the demoted replica waits.
    scrape(FAST_A, 0, 4);
    scrape(FAST_B, 0, 4);
    scrape(SLOW, 0, 1);
    assert.equal(blind(), SLOW);
    assert.notEqual(first(), SLOW);
    // Both fast replicas queue 2 behind 4 running: their batches hold 4, and with ours both are full.
    scrape(FAST_A, 2, 4);
    scrape(FAST_B, 2, 4);
    assert.equal(first(), SLOW);
    // One fast replica drains to 3 running (its limit stays 4): it has room again, and takes the request.
    scrape(FAST_B, 0, 3);
    assert.equal(blind(), SLOW);
    assert.equal(first(), FAST_B);
    // Every fast batch full again, and the slow replica's own too (it queues behind 1): it stays below.
    scrape(FAST_B, 2, 4);
    scrape(SLOW, 1, 1);
    assert.equal(blind(), SLOW);
    assert.notEqual(first(), SLOW);
  });

  it('somewhat slower (under the outlier factor) is scored down, not demoted', () => {
    const b = bed();
    warm(b, { [FAST_A]: 0.1, [FAST_B]: 0.1, [SLOW]: 0.15 });
    assert.equal(b.state(SLOW), 'normal');
    assert.ok(Math.abs(b.value(SLOW) - SAME_SPEED / 1.5) < 1e-9);
  });

  it('no verdict without three measured replicas, nor before minSamples', () => {
    const two = bed([FAST_A, SLOW]);
    warm(two, { [FAST_A]: 0.1, [SLOW]: 0.5 });
    assert.equal(two.state(SLOW), 'normal');
    const early = bed();
    for (const now of [300, 600, 900]) early.answer(now, { [FAST_A]: 0.1, [FAST_B]: 0.1, [SLOW]: 0.5 });
    assert.equal(early.state(SLOW), 'normal');
    assert.equal(early.value(SLOW), LATENCY_NEUTRAL);
  });

  it('probes: one request per probe interval, and a probe at pool speed reinstates it', () => {
    const b = bed();
    let now = warm(b, { [FAST_A]: 0.1, [FAST_B]: 0.1, [SLOW]: 0.3 });
    // Before the interval: still demoted however many samples the others give.
    b.answer((now += 300), { [FAST_A]: 0.1, [FAST_B]: 0.1 });
    assert.equal(b.value(SLOW), LATENCY_DEMOTED);
    b.answer((now += 2000), { [FAST_A]: 0.1, [FAST_B]: 0.1 });
    assert.equal(b.state(SLOW), 'probing');
    assert.equal(b.value(SLOW), LATENCY_NEUTRAL);
    // The picker may now choose it; once it is the primary the probe is spent.
    b.tracker.picked('m', FAST_A);
    assert.equal(b.state(SLOW), 'probing');
    b.tracker.picked('m', SLOW);
    assert.equal(b.value(SLOW), LATENCY_DEMOTED);
    // No second probe while the first one's answer is awaited.
    b.answer((now += 2500), { [FAST_A]: 0.1, [FAST_B]: 0.1 });
    assert.equal(b.state(SLOW), 'demoted');
    // The probe's answer: the replica has sped up.
    b.answer((now += 100), { [SLOW]: 0.11 });
    assert.equal(b.state(SLOW), 'normal');
    assert.equal(b.value(SLOW), 1);
    assert.match(b.events.at(-1) ?? '', /^reinstated 10\.0\.0\.3:8000: a probe answered at 1\.1× the pool's median$/);
  });

  it('a probe answered slowly keeps it demoted, and the next probe comes an interval later', () => {
    const b = bed();
    let now = warm(b, { [FAST_A]: 0.1, [FAST_B]: 0.1, [SLOW]: 0.3 });
    b.answer((now += 2000), { [FAST_A]: 0.1, [FAST_B]: 0.1 });
    b.tracker.picked('m', SLOW);
    b.answer((now += 300), { [SLOW]: 0.3 });
    assert.equal(b.state(SLOW), 'demoted');
    b.answer((now += 300), { [FAST_A]: 0.1, [FAST_B]: 0.1 });
    assert.equal(b.state(SLOW), 'demoted');
    b.answer((now += 2000), { [FAST_A]: 0.1, [FAST_B]: 0.1 });
    assert.equal(b.state(SLOW), 'probing');
  });

  it('decay: with no recent answers of its own the verdict lapses and the replica is forgotten', () => {
    const b = bed();
    let now = warm(b, { [FAST_A]: 0.1, [FAST_B]: 0.1, [SLOW]: 0.3 });
    // Its samples (about six) weigh less than one after 2.6 half-lives; the peers keep answering.
    for (let t = 0; t < 20; t++) b.answer((now += 1000), { [FAST_A]: 0.1, [FAST_B]: 0.1 });
    assert.notEqual(b.state(SLOW), 'normal', 'still demoted (or probing) while its samples weigh one or more');
    for (let t = 0; t < 15; t++) b.answer((now += 1000), { [FAST_A]: 0.1, [FAST_B]: 0.1 });
    assert.equal(b.state(SLOW), 'normal');
    assert.equal(b.value(SLOW), LATENCY_NEUTRAL);
    assert.match(b.events.at(-1) ?? '', /too few recent answers/);
    for (let t = 0; t < 100; t++) b.answer((now += 1000), { [FAST_A]: 0.1, [FAST_B]: 0.1 });
    assert.deepEqual(b.tracker.snapshot(SLOW, now), []);
  });

  it('the medians leave demoted replicas out: a second slow one is judged against the fast', () => {
    const addresses = ['10.0.0.1:8000', '10.0.0.2:8000', '10.0.0.3:8000', '10.0.0.4:8000', '10.0.0.5:8000'];
    const b = bed(addresses);
    warm(b, { [addresses[0]]: 0.1, [addresses[1]]: 0.1, [addresses[2]]: 0.1, [addresses[3]]: 0.4, [addresses[4]]: 0.4 });
    assert.deepEqual(
      addresses.map((a) => b.state(a)),
      ['normal', 'normal', 'normal', 'demoted', 'demoted'],
    );
  });

  it('a demoted replica keeps the prompt prefixes it owns (its warm cache), and takes no other request first', () => {
    const b = bed();
    warm(b, { [FAST_A]: 0.1, [FAST_B]: 0.1, [SLOW]: 0.3 });
    const picker = pickerOn(b.board);
    // Find a key the slow replica owns (rendezvous over the three), from the picker itself with latency off.
    const plain = pickerOn(new SignalBoard(), [0], { ...DEFAULT_WEIGHTS, latency: 0 });
    const owned = Array.from({ length: 64 }, (_, k) => k + 1).filter((key) => {
      const o = plain.pick(pools(), { model: 'm', affinityKey: key });
      return o.kind === 'picked' && o.endpoints[0].address === SLOW;
    });
    assert.ok(owned.length > 0);
    for (const key of owned) {
      const o = picker.pick(pools(), { model: 'm', affinityKey: key });
      assert.ok(o.kind === 'picked' && o.endpoints[0].address === SLOW, `key ${key} stays with its owner`);
    }
    assert.equal(firstPicks(picker, 30).get(SLOW), undefined);
  });

  it('a slot released by the board and taken by another address starts neutral', () => {
    const b = bed();
    warm(b, { [FAST_A]: 0.1, [FAST_B]: 0.1, [SLOW]: 0.3 });
    const slot = b.board.cell(SLOW).slot;
    b.board.retainOnly(new Set([FAST_A, FAST_B]));
    const newcomer = b.board.cell('10.0.0.9:8000');
    assert.equal(newcomer.slot, slot);
    assert.equal(b.board.latencyTable('m')?.[slot], LATENCY_NEUTRAL);
  });
});

describe('latency with every replica as fast as its pool', () => {
  it('picks exactly what the pipeline without latency picks (scores within SAME_SPEED of the median, or unmeasured)', () => {
    const addresses = Array.from({ length: 6 }, (_, i) => `10.0.1.${i + 1}:8000`);
    fc.assert(
      fc.property(
        fc.array(fc.integer({ min: 0, max: 9 }), { minLength: 6, maxLength: 6 }),
        // Slowness per replica within the band, or not measured (undefined).
        fc.array(fc.option(fc.double({ min: 0.5, max: SAME_SPEED, noNaN: true })), { minLength: 6, maxLength: 6 }),
        fc.array(fc.double({ min: 0, max: 0.999, noNaN: true }), { minLength: 1, maxLength: 20 }),
        fc.option(fc.integer({ min: 0, max: 2 ** 31 })),
        (flights, slownesses, draws, key) => {
          const board = new SignalBoard();
          addresses.forEach((address, i) => {
            board.cell(address).inFlight = flights[i];
            const s = slownesses[i];
            if (s !== null) board.setLatency('m', board.cell(address).slot, latencyScore(s));
          });
          const options = (latency: number, k: number) => {
            let i = k;
            return {
              weights: { ...DEFAULT_WEIGHTS, latency },
              fallbacks: 2,
              boundedLoad: { factor: 1.1, slack: 1 },
              maxAdaptersPerServer: 4,
              poolPolicy: () => ({}),
              random: () => draws[i++ % draws.length],
            };
          };
          const withLatency = new Picker(board, options(DEFAULT_WEIGHTS.latency, 0));
          const without = new Picker(board, options(0, 0));
          const request = key === null ? { model: 'm' } : { model: 'm', affinityKey: key };
          for (let n = 0; n < draws.length; n++)
            assert.deepEqual(withLatency.pick(pools(addresses), request), without.pick(pools(addresses), request));
        },
      ),
      { numRuns: 200 },
    );
  });
});
