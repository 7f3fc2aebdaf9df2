// Passive health bookkeeping: which failures quarantine an endpoint, for how long, and what an
// operator reads about it. Time is a plain number passed in, so every case is exact.
import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { PassiveHealth } from '../../../src/endpoints/passive-health.js';
import type { AttemptFailure, QuarantinePolicy } from '../../../src/endpoints/passive-health.js';

const POLICY: QuarantinePolicy = { threshold: 3, baseMs: 10_000, maxMs: 60_000 };
const A = '10.0.0.1:8000';
const B = '10.0.0.2:8000';

/** Feeds failures at `now` and returns which of them started a quarantine. */
function fail(health: PassiveHealth, address: string, failures: readonly AttemptFailure[], now: number): boolean[] {
  return failures.map((failure) => health.recordFailure(address, failure, now));
}

/** Quarantines `address` once (threshold failures) and returns the time it ends. */
function quarantine(health: PassiveHealth, address: string, now: number, policy: QuarantinePolicy = POLICY): number {
  const started = fail(health, address, Array<AttemptFailure>(policy.threshold).fill('connect_failure'), now);
  assert.equal(started.at(-1), true, 'the threshold-th failure quarantines');
  const until = health.status(address, now)?.until;
  assert.ok(until !== undefined);
  return until;
}

describe('PassiveHealth: which streaks quarantine', () => {
  const cases: ReadonlyArray<{ name: string; failures: AttemptFailure[]; quarantinedAfter: number | undefined }> = [
    { name: 'threshold connect failures', failures: ['connect_failure', 'connect_failure', 'connect_failure'], quarantinedAfter: 3 },
    { name: 'threshold resets', failures: ['reset', 'reset', 'reset'], quarantinedAfter: 3 },
    { name: 'connect failures and resets mixed', failures: ['reset', 'connect_failure', 'reset'], quarantinedAfter: 3 },
    { name: 'one short of the threshold', failures: ['connect_failure', 'connect_failure'], quarantinedAfter: undefined },
    { name: 'timeouts never', failures: ['timeout', 'timeout', 'timeout', 'timeout', 'timeout'], quarantinedAfter: undefined },
    {
      name: 'bad responses never',
      failures: ['bad_response', 'bad_response', 'bad_response', 'bad_response'],
      quarantinedAfter: undefined,
    },
    // A slow or wrong answer neither counts towards nor breaks a connect-failure streak.
    {
      name: 'timeouts interleaved do not count',
      failures: ['connect_failure', 'timeout', 'connect_failure', 'bad_response', 'connect_failure'],
      quarantinedAfter: 5,
    },
  ];
  for (const c of cases) {
    it(c.name, () => {
      const health = new PassiveHealth(POLICY);
      const started = fail(health, A, c.failures, 1_000);
      const expected = c.failures.map((_, i) => c.quarantinedAfter !== undefined && i === c.quarantinedAfter - 1);
      assert.deepEqual(started, expected);
      assert.equal(health.status(A, 1_000) !== undefined, c.quarantinedAfter !== undefined);
    });
  }

  it('a success resets the streak', () => {
    const health = new PassiveHealth(POLICY);
    assert.deepEqual(fail(health, A, ['connect_failure', 'connect_failure'], 0), [false, false]);
    assert.equal(health.recordSuccess(A), false, 'not quarantined, so no release');
    assert.deepEqual(fail(health, A, ['connect_failure', 'connect_failure'], 0), [false, false]);
    assert.equal(health.status(A, 0), undefined);
    assert.deepEqual(fail(health, A, ['connect_failure'], 0), [true], 'a fresh streak of three quarantines');
  });

  it('streaks are per address', () => {
    const health = new PassiveHealth(POLICY);
    fail(health, A, ['connect_failure', 'connect_failure'], 0);
    fail(health, B, ['connect_failure', 'connect_failure'], 0);
    assert.equal(health.status(A, 0), undefined);
    assert.equal(health.status(B, 0), undefined);
    assert.deepEqual(fail(health, A, ['reset'], 0), [true]);
    assert.equal(health.status(B, 0), undefined, 'B is untouched by A crossing the threshold');
  });

  it('failures while quarantined do not extend the quarantine', () => {
    const health = new PassiveHealth(POLICY);
    const until = quarantine(health, A, 0);
    assert.deepEqual(fail(health, A, ['connect_failure', 'reset', 'connect_failure'], 5_000), [false, false, false]);
    assert.equal(health.status(A, 5_000)?.until, until);
  });

  it('a success while quarantined releases the endpoint and forgets its strikes', () => {
    const health = new PassiveHealth(POLICY);
    quarantine(health, A, 0);
    assert.equal(health.recordSuccess(A), true);
    assert.equal(health.status(A, 1), undefined);
    // Fresh record: the full threshold is needed again, and the backoff starts from the base.
    assert.deepEqual(fail(health, A, ['connect_failure', 'connect_failure', 'connect_failure'], 2), [false, false, true]);
    assert.equal(health.status(A, 2)?.until, 2 + POLICY.baseMs);
  });

  it('a success for an unknown address is a no-op', () => {
    const health = new PassiveHealth(POLICY);
    assert.equal(health.recordSuccess(A), false);
    assert.equal(health.status(A, 0), undefined);
  });
});

describe('PassiveHealth: backoff and probation', () => {
  it('the quarantine lasts baseMs, then doubles per strike up to maxMs', () => {
    const health = new PassiveHealth(POLICY);
    const expected = [10_000, 20_000, 40_000, 60_000, 60_000, 60_000];
    const observed: number[] = [];
    let now = 0;
    let until = quarantine(health, A, now);
    observed.push(until - now);
    for (let strike = 1; strike < expected.length; strike++) {
      now = until; // released exactly when the quarantine ends
      assert.equal(health.status(A, now), undefined, `released at the end of strike ${strike}`);
      assert.deepEqual(fail(health, A, ['connect_failure'], now), [true], 'on probation one failure re-quarantines');
      until = health.status(A, now)?.until ?? Number.NaN;
      observed.push(until - now);
    }
    assert.deepEqual(observed, expected);
  });

  const caps: ReadonlyArray<{ policy: QuarantinePolicy; first: number }> = [
    { policy: { threshold: 1, baseMs: 5_000, maxMs: 3_000 }, first: 3_000 },
    { policy: { threshold: 2, baseMs: 1_000, maxMs: 1_000 }, first: 1_000 },
    { policy: { threshold: 4, baseMs: 250, maxMs: 60_000 }, first: 250 },
  ];
  for (const { policy, first } of caps) {
    it(`first quarantine under ${JSON.stringify(policy)} lasts ${first} ms`, () => {
      const health = new PassiveHealth(policy);
      const started = fail(health, A, Array<AttemptFailure>(policy.threshold).fill('connect_failure'), 100);
      assert.deepEqual(
        started,
        started.map((_, i) => i === policy.threshold - 1),
      );
      assert.equal(health.status(A, 100)?.until, 100 + first);
    });
  }

  it('baseMs 0 (quarantine disabled) never leaves an endpoint quarantined', () => {
    const health = new PassiveHealth({ threshold: 1, baseMs: 0, maxMs: 3_000 });
    for (let i = 0; i < 5; i++) health.recordFailure(A, 'connect_failure', 100);
    assert.equal(health.status(A, 100), undefined);
    assert.equal(health.nextRelease(100), undefined);
  });

  it('baseMs 0: recordFailure does not report a quarantine that never happens', () => {
    const health = new PassiveHealth({ threshold: 1, baseMs: 0, maxMs: 3_000 });
    assert.equal(health.recordFailure(A, 'connect_failure', 100), false);
  });

  it('after release a success ends probation: the full threshold applies again', () => {
    const health = new PassiveHealth(POLICY);
    const until = quarantine(health, A, 0);
    health.recordSuccess(A);
    assert.deepEqual(fail(health, A, ['connect_failure', 'connect_failure'], until + 1), [false, false]);
    assert.equal(health.status(A, until + 1), undefined);
  });

  it('a non-health failure on probation does not re-quarantine', () => {
    const health = new PassiveHealth(POLICY);
    const until = quarantine(health, A, 0);
    assert.deepEqual(fail(health, A, ['timeout', 'bad_response'], until), [false, false]);
    assert.equal(health.status(A, until), undefined);
  });
});

describe('PassiveHealth: status, nextRelease, retainOnly', () => {
  /** The absolute end time as the reason prints it (whole seconds, UTC). */
  const iso = (ms: number): string => new Date(ms).toISOString().replace(/\.\d+Z$/, 'Z');

  const reasons: ReadonlyArray<{ name: string; failures: AttemptFailure[]; reason: string }> = [
    {
      name: 'connect failures',
      failures: ['connect_failure', 'connect_failure', 'connect_failure'],
      reason: `3 consecutive connect failures; until ${iso(10_000)}`,
    },
    { name: 'resets name resets', failures: ['reset', 'reset', 'reset'], reason: `3 consecutive connection resets; until ${iso(10_000)}` },
    {
      name: 'the last failure names the kind',
      failures: ['reset', 'reset', 'connect_failure'],
      reason: `3 consecutive connect failures; until ${iso(10_000)}`,
    },
  ];
  for (const c of reasons) {
    it(`reason: ${c.name}`, () => {
      const health = new PassiveHealth(POLICY);
      fail(health, A, c.failures, 0);
      assert.deepEqual(health.status(A, 0), { until: 10_000, reason: c.reason });
    });
  }

  it('the reason gives an absolute time, so it reads the same whenever it is looked at', () => {
    const health = new PassiveHealth(POLICY);
    const start = Date.UTC(2025, 0, 1, 12, 0, 0, 250);
    const until = quarantine(health, A, start);
    assert.equal(until, start + 10_000);
    const early = health.status(A, start)?.reason;
    const late = health.status(A, until - 1)?.reason;
    assert.equal(early, '3 consecutive connect failures; until 2025-01-01T12:00:10Z');
    assert.equal(late, early);
  });

  it('status is undefined before the threshold and once the quarantine ended', () => {
    const health = new PassiveHealth(POLICY);
    fail(health, A, ['connect_failure', 'connect_failure'], 0);
    assert.equal(health.status(A, 0), undefined);
    const until = quarantine(health, B, 0);
    assert.notEqual(health.status(B, until - 1), undefined);
    assert.equal(health.status(B, until), undefined);
  });

  it('a probation re-quarantine does not claim a streak of threshold failures', () => {
    const health = new PassiveHealth(POLICY);
    const until = quarantine(health, A, 0);
    fail(health, A, ['connect_failure'], until);
    assert.deepEqual(health.status(A, until), {
      until: until + 20_000,
      reason: `another failure after a previous quarantine; until ${iso(until + 20_000)}`,
    });
  });

  it('nextRelease is the earliest quarantine end after now', () => {
    const health = new PassiveHealth(POLICY);
    assert.equal(health.nextRelease(0), undefined, 'nothing quarantined');
    const untilA = quarantine(health, A, 0); // 10 000
    const untilB = quarantine(health, B, 4_000); // 14 000
    assert.equal(health.nextRelease(0), untilA);
    assert.equal(health.nextRelease(untilA), untilB, 'A has been released at its end time');
    assert.equal(health.nextRelease(untilB), undefined);
  });

  it('nextRelease ignores streaks below the threshold', () => {
    const health = new PassiveHealth(POLICY);
    fail(health, A, ['connect_failure', 'connect_failure'], 0);
    assert.equal(health.nextRelease(0), undefined);
  });

  it('retainOnly forgets addresses no source lists any more', () => {
    const health = new PassiveHealth(POLICY);
    quarantine(health, A, 0);
    quarantine(health, B, 0);
    health.retainOnly(new Set([B]));
    assert.equal(health.status(A, 1), undefined, 'A is forgotten');
    assert.notEqual(health.status(B, 1), undefined, 'B is kept');
    assert.equal(health.nextRelease(1), health.status(B, 1)?.until);
    // A comes back as a new endpoint: full threshold, base backoff.
    assert.deepEqual(fail(health, A, ['connect_failure', 'connect_failure', 'connect_failure'], 1), [false, false, true]);
    assert.equal(health.status(A, 1)?.until, 1 + POLICY.baseMs);
  });

  it('retainOnly also forgets a partial streak', () => {
    const health = new PassiveHealth(POLICY);
    fail(health, A, ['connect_failure', 'connect_failure'], 0);
    health.retainOnly(new Set());
    assert.deepEqual(fail(health, A, ['connect_failure'], 0), [false]);
  });
});

describe('PassiveHealth: quarantine after a failed check', () => {
  it('quarantines at once with the base backoff, then doubles on the next one', () => {
    const health = new PassiveHealth(POLICY);
    assert.equal(health.quarantineNow(A, 0), true);
    assert.equal(health.status(A, 0)?.until, 10_000);
    assert.match(
      health.status(A, 0)?.reason ?? '',
      /^an attempt failed \(no connection, a reset, or a broken stream\) and the replica then failed its health check; until /,
    );
    assert.equal(health.quarantineNow(A, 5_000), false, 'already quarantined: no change');
    assert.equal(health.status(A, 5_000)?.until, 10_000, 'and the end does not move');
    assert.equal(health.quarantineNow(A, 10_000), true);
    assert.equal(health.status(A, 10_000)?.until, 30_000, 'second strike: twice the base');
    assert.equal(health.status(B, 0), undefined, 'other endpoints untouched');
  });

  it('does nothing when passive health is off (baseSeconds 0)', () => {
    const health = new PassiveHealth({ threshold: 3, baseMs: 0, maxMs: 0 });
    assert.equal(health.quarantineNow(A, 0), false);
    assert.equal(health.status(A, 0), undefined);
  });
});
