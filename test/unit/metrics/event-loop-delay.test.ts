// The event-loop delay metric must show a stall: a callback that keeps the loop busy makes the
// sampler's next timer late by at least the stall's length, and that lands in the histogram.

import assert from 'node:assert/strict';
import { it } from 'node:test';
import { setTimeout as delay } from 'node:timers/promises';
import { Registry } from 'prom-client';
import { EVENT_LOOP_DELAY_BUCKETS, EVENT_LOOP_SAMPLE_MS, EventLoopDelayMetric } from '../../../src/metrics/event-loop-delay.js';
import { parseHistogram } from '../../../scripts/bench/stats.js';

const NAME = 'test_event_loop_delay_seconds';

async function snapshot(registry: Registry) {
  const h = parseHistogram(await registry.metrics(), NAME, '').get('');
  assert.ok(h !== undefined, 'the histogram is exported');
  return h;
}

it('a 120 ms stall shows up as a delay of at least 100 ms', async () => {
  const registry = new Registry();
  const metric = new EventLoopDelayMetric(registry, NAME);
  try {
    // Let the sampler take a few samples first.
    while ((await snapshot(registry)).count === 0) await delay(EVENT_LOOP_SAMPLE_MS * 2);
    const beforeStall = await snapshot(registry);
    const stallUntil = performance.now() + 120;
    while (performance.now() < stallUntil) {
      // busy: nothing else may run
    }
    await delay(EVENT_LOOP_SAMPLE_MS * 2); // the late timer fires now
    const afterStall = await snapshot(registry);
    const above = (h: typeof afterStall, bound: number) => h.count - (h.buckets.find((b) => b.le === bound)?.count ?? 0);
    assert.ok(EVENT_LOOP_DELAY_BUCKETS.includes(0.1));
    assert.ok(above(afterStall, 0.1) - above(beforeStall, 0.1) >= 1, 'at least one sample above 100 ms after the stall');
    assert.ok(afterStall.sum - beforeStall.sum >= 0.1, 'the stall adds at least 100 ms of delay');
  } finally {
    metric.stop();
  }
});
