import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { LogThrottle } from '../../../src/util/log-throttle.js';

void describe('LogThrottle', () => {
  void it('admits the first event of a kind, leaves out the rest of its interval, and tells the next line how many were left out', () => {
    const throttle = new LogThrottle<'a' | 'b'>(1000);
    assert.equal(throttle.admit('a', 0), 0);
    for (let t = 1; t < 1000; t += 100) assert.equal(throttle.admit('a', t), undefined);
    assert.equal(throttle.admit('b', 500), 0, 'each kind has its own interval');
    assert.equal(throttle.admit('a', 1000), 10);
    assert.equal(throttle.admit('a', 1500), undefined);
    assert.equal(throttle.admit('a', 2000), 1);
    assert.equal(throttle.admit('a', 9000), 0, 'a quiet spell starts the count again');
  });

  void it('writes at most one line per interval per kind under a flood: 100,000 events over 10 intervals give 10 lines', () => {
    const throttle = new LogThrottle<'flood'>(1000);
    let lines = 0;
    let toldLeftOut = 0;
    for (let i = 0; i < 100_000; i++) {
      const leftOut = throttle.admit('flood', i / 10);
      if (leftOut !== undefined) {
        lines++;
        toldLeftOut += leftOut;
      }
    }
    assert.equal(lines, 10);
    assert.equal(toldLeftOut + throttle.admit('flood', 10_000)! + lines, 100_000, 'every event is either a line or counted in one');
  });
});
