// The per-message histogram must expose exactly what prom-client's own Histogram exposes for the
// same observations (scrape text and the JSON the cluster aggregator sums), and aggregate across
// workers like it.

import assert from 'node:assert/strict';
import { it } from 'node:test';
import fc from 'fast-check';
import { AggregatorRegistry, Histogram, Registry } from 'prom-client';
import { CountingHistogram } from '../../../src/metrics/counting-histogram.js';

const BUCKETS = [0.00001, 0.000025, 0.00005, 0.0001, 0.001, 0.05];

it("property: same text and JSON as prom-client's Histogram for any observations and removals, bucket bounds included", async () => {
  const observation = fc.tuple(
    fc.constantFrom('request_headers', 'response_body', 'x'),
    fc.constantFrom('10.0.0.1:8000', '10.0.0.2:8000'),
    fc.oneof(fc.constantFrom(...BUCKETS, 0), fc.double({ min: 0, max: 1, noNaN: true })),
    fc.boolean(),
  );
  await fc.assert(
    fc.asyncProperty(fc.array(observation, { maxLength: 40 }), async (observations) => {
      const ours = new Registry();
      const theirs = new Registry();
      const labelNames = ['message', 'endpoint'];
      const counting = new CountingHistogram({ name: 'h_seconds', help: 'help', buckets: BUCKETS, registers: [ours] }, labelNames);
      const reference = new Histogram({ name: 'h_seconds', help: 'help', labelNames, buckets: BUCKETS, registers: [theirs] });
      for (const [message, endpoint, value, removeAfter] of observations) {
        counting.child(message, endpoint).observe(value);
        reference.labels({ message, endpoint }).observe(value);
        if (removeAfter) {
          counting.drop(message, endpoint);
          reference.remove({ message, endpoint });
        }
      }
      assert.equal(await ours.metrics(), await theirs.metrics());
      const sumOfTwo = async (registry: Registry) =>
        await AggregatorRegistry.aggregate([await registry.getMetricsAsJSON(), await registry.getMetricsAsJSON()]).metrics();
      assert.equal(await sumOfTwo(ours), await sumOfTwo(theirs));
    }),
    { numRuns: 150 },
  );
});

it('property: without a label, observe(value, count) is exactly `count` observations of prom-client', async () => {
  // Values on a 2^-20 grid, so that value × count and repeated addition give the same exact sum
  // (bucket bounds themselves are covered by the property above).
  const value = fc.integer({ min: 0, max: 2 ** 20 }).map((n) => n / 2 ** 20);
  await fc.assert(
    fc.asyncProperty(fc.array(fc.tuple(value, fc.integer({ min: 1, max: 6 })), { maxLength: 30 }), async (observations) => {
      const ours = new Registry();
      const theirs = new Registry();
      const counting = new CountingHistogram({ name: 't_seconds', help: 'help', buckets: BUCKETS, registers: [ours] });
      const reference = new Histogram({ name: 't_seconds', help: 'help', buckets: BUCKETS, registers: [theirs] });
      const series = counting.child();
      for (const [v, count] of observations) {
        series.observe(v, count);
        for (let i = 0; i < count; i++) reference.observe(v);
      }
      // prom-client shows an unlabelled histogram with zeros before its first observation: so must we.
      assert.equal(await ours.metrics(), await theirs.metrics());
      const sumOfTwo = async (registry: Registry) =>
        await AggregatorRegistry.aggregate([await registry.getMetricsAsJSON(), await registry.getMetricsAsJSON()]).metrics();
      assert.equal(await sumOfTwo(ours), await sumOfTwo(theirs));
    }),
    { numRuns: 150 },
  );
});
