// The rule that keeps V8's young generation under its ceiling (src/util/young-generation-cap.ts),
// on a scripted young generation that doubles when the factor allows, as V8's does. What the real
// V8 does with the flag it sets is in test/unit/entry/process-settings.test.ts.

import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { YoungGenerationCap } from '../../../src/util/young-generation-cap.js';

const MiB = 1024 * 1024;

/** A young generation of `startBytes` that doubles at each `scavenge()` while the factor is 2, up to V8's own 32 MiB. */
function bed(startBytes = 2 * MiB) {
  const state = { size: startBytes as number | undefined, factor: 1, now: 0, sets: [] as number[], timers: [] as Array<() => void> };
  const cap = new YoungGenerationCap({
    capBytes: 8 * MiB,
    newSpaceBytes: () => state.size,
    setGrowthFactor: (factor) => {
      state.factor = factor;
      state.sets.push(factor);
    },
    now: () => state.now,
    minIntervalMs: 1,
    every: (_ms, task) => void state.timers.push(task),
    timerMs: 100,
  });
  const scavenge = (): void => {
    if (state.factor === 2 && state.size !== undefined) state.size = Math.min(32 * MiB, 2 * state.size);
  };
  /** A load: `rounds` times, 2 ms pass, a scavenge comes and a stream ends. */
  const load = (rounds: number): void => {
    for (let i = 0; i < rounds; i++) {
      state.now += 2;
      scavenge();
      cap.streamEnded();
    }
  };
  return { cap, state, scavenge, load };
}

void describe('YoungGenerationCap: V8 grows the young generation up to the ceiling and no further', () => {
  void it('nothing grows while the program starts; once started, a load takes it to the ceiling, where it stays', () => {
    const { cap, state, load } = bed();
    load(10);
    assert.equal(state.size, 2 * MiB, 'before start() the factor stays 1');
    assert.deepEqual(state.sets, []);
    cap.start();
    load(100);
    assert.equal(state.size, 8 * MiB);
    assert.equal(cap.growthFactor, 1);
    assert.deepEqual(state.sets, [2, 1], 'the flag is set only when the decision changes');
  });

  void it('when V8 shrinks it at rest, growth is allowed again up to the ceiling', () => {
    const { cap, state, load } = bed();
    cap.start();
    load(10);
    assert.equal(state.size, 8 * MiB);
    state.size = 1 * MiB; // the process idled: V8's memory reducer shrank the young generation
    load(10);
    assert.equal(state.size, 8 * MiB);
    assert.equal(cap.growthFactor, 1);
  });

  void it('looks at most once per minIntervalMs, however many streams end', () => {
    let looks = 0;
    let now = 5;
    const cap = new YoungGenerationCap({
      capBytes: 8 * MiB,
      newSpaceBytes: () => {
        looks++;
        return 2 * MiB;
      },
      setGrowthFactor: () => undefined,
      now: () => now,
      minIntervalMs: 1,
      every: () => undefined,
      timerMs: 100,
    });
    cap.start();
    for (let i = 0; i < 1000; i++) cap.streamEnded();
    assert.equal(looks, 1);
    now = 6; // exactly minIntervalMs later
    cap.streamEnded();
    assert.equal(looks, 2);
  });

  void it('the timer keeps the ceiling where no stream ends (a cluster primary, a watch, scrapes)', () => {
    const { cap, state, scavenge } = bed();
    cap.start();
    assert.equal(state.timers.length, 1, 'one timer, set at start');
    cap.start();
    assert.equal(state.timers.length, 1, 'a second start() sets no second timer');
    for (let i = 0; i < 20; i++) {
      state.now += 100;
      scavenge();
      for (const task of state.timers) task();
    }
    assert.equal(state.size, 8 * MiB);
    assert.equal(cap.growthFactor, 1);
  });

  void it('a size V8 does not report counts as over the ceiling: no growth', () => {
    const { cap, state, scavenge } = bed();
    state.size = undefined;
    cap.start();
    state.now += 2;
    cap.streamEnded();
    scavenge();
    assert.equal(cap.growthFactor, 1);
    assert.deepEqual(state.sets, []);
  });
});
