// When a pool is saturated (src/picker/saturation.ts), as flow control asks before queueing: a
// replica has room while its fresh report shows a short queue and KV cache below the limits and our
// in-flight count is under the limit; stale or missing metrics never count as room.
import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { canTake, DEFAULT_SATURATION, isSaturated, OPEN_POOL } from '../../../src/picker/saturation.js';
import type { SaturationLimits } from '../../../src/picker/saturation.js';
import { Field, SignalBoard } from '../../../src/picker/signals.js';

const LIMITS: SaturationLimits = { ...DEFAULT_SATURATION, maxInFlight: 4, scraped: true };

function board(): SignalBoard {
  return new SignalBoard();
}

function report(b: SignalBoard, address: string, waiting: number, kv: number | undefined): number {
  const cell = b.cell(address);
  cell.storeReport({ waiting, running: 4, kvCacheUsage: kv, runningAdapters: [], waitingAdapters: [], maxAdapters: undefined });
  cell.metricsState = 'fresh';
  return cell.slot * Field.Stride;
}

describe('saturation', () => {
  it('the defaults are vLLM-shaped: 5 waiting, 80 % KV cache, no in-flight limit', () => {
    assert.deepEqual({ ...DEFAULT_SATURATION }, { queueDepth: 5, kvCacheUsage: 0.8, maxInFlight: Number.POSITIVE_INFINITY });
  });

  const cases: ReadonlyArray<{ name: string; waiting: number; kv: number | undefined; inFlight: number; room: boolean }> = [
    { name: 'short queue, cache half full', waiting: 4, kv: 0.5, inFlight: 0, room: true },
    { name: 'queue at the limit', waiting: 5, kv: 0.5, inFlight: 0, room: false },
    { name: 'KV cache at the limit', waiting: 0, kv: 0.8, inFlight: 0, room: false },
    { name: 'no KV figure (TGI): judged by the queue', waiting: 0, kv: undefined, inFlight: 0, room: true },
    { name: 'our in-flight count at the limit', waiting: 0, kv: 0.1, inFlight: 4, room: false },
  ];
  for (const c of cases) {
    it(`fresh report, ${c.name}: ${c.room ? 'room' : 'full'}`, () => {
      const b = board();
      const at = report(b, '10.0.0.1:8000', c.waiting, c.kv);
      b.cell('10.0.0.1:8000').inFlight = c.inFlight;
      assert.equal(canTake(b.signals, at, LIMITS), c.room);
    });
  }

  for (const state of ['stale', 'failing', 'missing'] as const) {
    it(`a ${state} report is never room where the pool is scraped; an unscraped pool is judged by in-flight alone`, () => {
      const b = board();
      const at = report(b, '10.0.0.1:8000', 0, 0);
      b.cell('10.0.0.1:8000').metricsState = state;
      assert.equal(canTake(b.signals, at, LIMITS), false);
      assert.equal(canTake(b.signals, at, { ...LIMITS, scraped: false }), true);
      b.cell('10.0.0.1:8000').inFlight = 4;
      assert.equal(canTake(b.signals, at, { ...LIMITS, scraped: false }), false);
    });
  }

  it('a pool is saturated only when every candidate is full; an empty pool is not saturated; a pool without flow control never is', () => {
    const b = board();
    const full = report(b, '10.0.0.1:8000', 9, 0.2);
    const roomy = report(b, '10.0.0.2:8000', 1, 0.2);
    const records = Int32Array.from([full, 0, roomy, 0]);
    assert.equal(isSaturated(b.signals, records, [LIMITS, LIMITS], 2, undefined), false);
    assert.equal(isSaturated(b.signals, records, [LIMITS, LIMITS], 1, undefined), true);
    // Only the second candidate visited (a subset hint naming the roomy one):
    assert.equal(isSaturated(b.signals, records, [LIMITS, LIMITS], 1, Int32Array.from([1])), false);
    assert.equal(isSaturated(b.signals, records, [LIMITS, LIMITS], 0, undefined), false);
    assert.equal(isSaturated(b.signals, records, [OPEN_POOL, OPEN_POOL], 1, undefined), false);
  });
});
