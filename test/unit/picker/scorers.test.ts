// The scorers one by one: each is a pure function from a candidate's signals to [0, 1].
import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import {
  hasBatchRoom,
  inFlightScore,
  isOverloaded,
  kvCacheScore,
  loraAffinityScore,
  lowerIsBetter,
  observedBatchLimit,
  othersLoad,
  othersWaiting,
  outstandingLoad,
  prefillSavedScore,
  queueDepthScore,
} from '../../../src/picker/scorers.js';

describe('queueDepthScore', () => {
  const cases: ReadonlyArray<{ name: string; waiting: number | undefined; min: number; max: number; expected: number }> = [
    { name: 'shortest queue scores 1', waiting: 0, min: 0, max: 10, expected: 1 },
    { name: 'longest queue scores 0', waiting: 10, min: 0, max: 10, expected: 0 },
    { name: 'halfway scores 0.5', waiting: 5, min: 0, max: 10, expected: 0.5 },
    { name: 'all equal: everyone scores 1', waiting: 4, min: 4, max: 4, expected: 1 },
    { name: 'unknown (stale, failing, missing) scores 0, never idle', waiting: undefined, min: 0, max: 10, expected: 0 },
    { name: 'unknown scores 0 even when every known queue is long', waiting: undefined, min: 50, max: 50, expected: 0 },
    { name: 'NaN counts as unknown', waiting: Number.NaN, min: 0, max: 1, expected: 0 },
  ];
  for (const c of cases) it(c.name, () => assert.equal(queueDepthScore(c.waiting, { min: c.min, max: c.max }), c.expected));
});

describe('kvCacheScore', () => {
  const cases: ReadonlyArray<{ usage: number | undefined; expected: number }> = [
    { usage: 0, expected: 1 },
    { usage: 0.25, expected: 0.75 },
    { usage: 1, expected: 0 },
    { usage: 1.3, expected: 0 },
    { usage: -0.1, expected: 1 },
    { usage: undefined, expected: 0 },
  ];
  for (const c of cases) it(`usage ${String(c.usage)} → ${c.expected}`, () => assert.equal(kvCacheScore(c.usage), c.expected));
});

describe('inFlightScore', () => {
  const cases: ReadonlyArray<{ inFlight: number; min: number; max: number; expected: number }> = [
    { inFlight: 0, min: 0, max: 4, expected: 1 },
    { inFlight: 4, min: 0, max: 4, expected: 0 },
    { inFlight: 3, min: 2, max: 6, expected: 0.75 },
    { inFlight: 7, min: 7, max: 7, expected: 1 },
  ];
  for (const c of cases)
    it(`${c.inFlight} in [${c.min}, ${c.max}] → ${c.expected}`, () =>
      assert.equal(inFlightScore(c.inFlight, { min: c.min, max: c.max }), c.expected));
});

describe('lowerIsBetter', () => {
  it('clamps values outside the range', () => {
    assert.equal(lowerIsBetter(-5, { min: 0, max: 10 }), 1);
    assert.equal(lowerIsBetter(20, { min: 0, max: 10 }), 0);
  });
});

describe('prefillSavedScore: prefill saved against the queue joined', () => {
  // 0.4 ms of prefill per token, 300 ms per request ahead in the queue.
  const p = 0.0004;
  const q = 0.3;
  const cases: ReadonlyArray<{ name: string; matched: number; best: number; excess: number; expected: number }> = [
    { name: 'the best-cached candidate at the least load scores 1', matched: 6000, best: 6000, excess: 0, expected: 1 },
    { name: 'half the best match, no queue: 0.5', matched: 3000, best: 6000, excess: 0, expected: 0.5 },
    {
      name: 'a 6k-token context outweighs a request ahead: 2.4 s saved, 0.3 s queued',
      matched: 6000,
      best: 6000,
      excess: 1,
      expected: 2.1 / 2.4,
    },
    { name: 'a two-block prompt does not: 12.8 ms saved, 300 ms queued', matched: 32, best: 32, excess: 1, expected: 0 },
    {
      name: 'a two-block prompt at the least load keeps its cache (a tie-break among equals)',
      matched: 32,
      best: 32,
      excess: 0,
      expected: 1,
    },
    { name: 'nothing cached scores 0', matched: 0, best: 6000, excess: 0, expected: 0 },
    { name: 'nobody has anything cached: 0', matched: 0, best: 0, excess: 0, expected: 0 },
    { name: 'the queue eats the saving: 0, never negative', matched: 6000, best: 6000, excess: 20, expected: 0 },
  ];
  for (const c of cases) {
    it(c.name, () => {
      assert.ok(
        Math.abs(
          prefillSavedScore(c.matched, c.best, c.excess, { prefillSecondsPerToken: p, queueSecondsPerRequest: q, requestSeconds: 0 }) -
            c.expected,
        ) < 1e-12,
      );
    });
  }
});

describe('loraAffinityScore', () => {
  const cases: ReadonlyArray<{ name: string; adapters: string[] | undefined; max: number; expected: number }> = [
    { name: 'server already has the adapter', adapters: ['sql', 'chat'], max: 4, expected: 1 },
    { name: 'has it even when full', adapters: ['sql', 'a', 'b', 'c'], max: 4, expected: 1 },
    { name: 'free slot: can load it', adapters: ['chat'], max: 4, expected: 0.5 },
    { name: 'no adapters at all: free slot', adapters: [], max: 4, expected: 0.5 },
    { name: 'full without it: would evict', adapters: ['a', 'b'], max: 2, expected: 0 },
    { name: 'metrics unusable: nothing known', adapters: undefined, max: 4, expected: 0 },
  ];
  for (const c of cases) {
    it(c.name, () => assert.equal(loraAffinityScore(c.adapters?.includes('sql') ?? false, c.adapters?.length, c.max), c.expected));
  }
});

describe('isOverloaded (bounded load)', () => {
  const cases: ReadonlyArray<{ load: number; mean: number; factor: number; slack: number; expected: boolean }> = [
    { load: 0, mean: 0, factor: 1.25, slack: 2, expected: false },
    { load: 2, mean: 0, factor: 1.25, slack: 2, expected: false },
    { load: 3, mean: 0, factor: 1.25, slack: 2, expected: true },
    { load: 14, mean: 10, factor: 1.25, slack: 2, expected: false },
    { load: 15, mean: 10, factor: 1.25, slack: 2, expected: true },
    { load: 50, mean: 25, factor: 1.25, slack: 2, expected: true },
  ];
  for (const c of cases)
    it(`load ${c.load}, mean ${c.mean} → ${c.expected}`, () => assert.equal(isOverloaded(c.load, c.mean, c.factor, c.slack), c.expected));
});

describe('othersLoad: the reported load that is not ours', () => {
  const cases: ReadonlyArray<{ waiting: number; running: number | undefined; oursThen: number; expected: number; why: string }> = [
    { waiting: 10, running: 4, oursThen: 0, expected: 14, why: 'all of it is others' },
    { waiting: 10, running: 4, oursThen: 6, expected: 8, why: 'ours taken out' },
    { waiting: 1, running: 2, oursThen: 9, expected: 0, why: 'ours not arrived yet: never below 0' },
    { waiting: 3, running: undefined, oursThen: 1, expected: 2, why: 'no batch gauge (TGI-like)' },
    { waiting: Number.NaN, running: 4, oursThen: 0, expected: 0, why: 'an unreadable gauge counts as nothing' },
  ];
  for (const c of cases)
    it(`${c.waiting} waiting + ${String(c.running)} running, ${c.oursThen} ours then → ${c.expected} (${c.why})`, () =>
      assert.equal(othersLoad(c.waiting, c.running, c.oursThen), c.expected));
});

describe("othersWaiting: the reported queue that is not ours (the queue scorer's input)", () => {
  const cases: ReadonlyArray<{ waiting: number; oursThen: number; expected: number; why: string }> = [
    { waiting: 5, oursThen: 0, expected: 5, why: 'all of it is others' },
    { waiting: 5, oursThen: 2, expected: 3, why: 'at most ours were queued: the rest is others' },
    { waiting: 3, oursThen: 8, expected: 0, why: 'one llm-extproc replica: the whole queue can be ours' },
    { waiting: Number.NaN, oursThen: 0, expected: 0, why: 'an unreadable gauge counts as nothing' },
  ];
  for (const c of cases)
    it(`${c.waiting} waiting, ${c.oursThen} ours then → ${c.expected} (${c.why})`, () =>
      assert.equal(othersWaiting(c.waiting, c.oursThen), c.expected));
});

describe('observedBatchLimit and hasBatchRoom: how many a server runs at once, as its reports show it', () => {
  const cases: ReadonlyArray<{ previous: number; waiting: number; running: number; expected: number; why: string }> = [
    { previous: Number.NaN, waiting: 0, running: 5, expected: Number.NaN, why: 'no queue yet: only room for what runs, no limit' },
    { previous: Number.NaN, waiting: 2, running: 8, expected: 8, why: 'a queue: the batch is full at what runs' },
    { previous: 8, waiting: 0, running: 10, expected: 10, why: 'more running than the limit: it was higher' },
    { previous: 8, waiting: 0, running: 3, expected: 8, why: 'fewer running without a queue says nothing new' },
    {
      previous: 8,
      waiting: 1,
      running: 6,
      expected: 8,
      why: 'a queue behind fewer never lowers it (a queue scraped before the next step)',
    },
    { previous: 8, waiting: 1, running: 12, expected: 12, why: 'a queue behind more raises it' },
    {
      previous: Number.NaN,
      waiting: 3,
      running: 0,
      expected: Number.NaN,
      why: 'a queue with nothing running (starting, or no gauge) says nothing',
    },
    { previous: 8, waiting: 1, running: Number.NaN, expected: 8, why: 'an unreadable batch gauge changes nothing' },
  ];
  for (const c of cases)
    it(`${c.previous} then ${c.waiting} waiting behind ${c.running} running → ${c.expected} (${c.why})`, () =>
      assert.ok(Object.is(observedBatchLimit(c.previous, c.waiting, c.running), c.expected)));

  it('room: below the limit; a limit not known yet is room', () => {
    assert.equal(hasBatchRoom(7, 8), true);
    assert.equal(hasBatchRoom(8, 8), false);
    assert.equal(hasBatchRoom(12, 8), false);
    assert.equal(hasBatchRoom(100, Number.NaN), true);
  });
});

describe('outstandingLoad: the others from the report plus ours now', () => {
  const cases: ReadonlyArray<{ inFlight: number; others: number; expected: number; why: string }> = [
    { inFlight: 3, others: 0, expected: 3, why: 'only ours' },
    { inFlight: 3, others: 11, expected: 14, why: 'both' },
    { inFlight: 0, others: 0, expected: 0, why: 'idle' },
  ];
  for (const c of cases)
    it(`${c.inFlight} ours + ${c.others} others → ${c.expected} (${c.why})`, () =>
      assert.equal(outstandingLoad(c.inFlight, c.others), c.expected));
});
