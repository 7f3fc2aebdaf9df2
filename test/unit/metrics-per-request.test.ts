// The per-request recorders count outside prom-client and hand their counts over when scraped:
// what a scrape shows must be what inc() would have shown, scrape after scrape.

import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { Metrics } from '../../src/metrics/metrics.js';
import { metricValue } from '../support/gateway.js';

function viewOf(addresses: string[]) {
  return {
    version: 1,
    pools: new Map([
      [
        'p',
        {
          name: 'p',
          models: ['m'],
          endpoints: addresses.map((address) => ({ id: address, address, reason: '', pool: 'p', state: 'Ready' as const })),
        },
      ],
    ]),
    poolsByModel: new Map(),
  };
}

void describe('per-request metrics', () => {
  void it('accumulate across scrapes, per label set, in text and in the JSON the cluster aggregator sums', async () => {
    const m = new Metrics({ processMetrics: false });
    m.requestFinished('llama', 'ok');
    m.requestFinished('llama', 'ok');
    m.requestFinished('phi', 'upstream_error');
    let text = await m.registry.metrics();
    assert.equal(metricValue(text, 'llm_extproc_requests_total', { model: 'llama', result: 'ok' }), 2);
    assert.equal(metricValue(text, 'llm_extproc_requests_total', { model: 'phi', result: 'upstream_error' }), 1);
    m.requestFinished('llama', 'ok');
    text = await m.registry.metrics();
    assert.equal(metricValue(text, 'llm_extproc_requests_total', { model: 'llama', result: 'ok' }), 3);
    const json = await m.registry.getMetricsAsJSON();
    const requests = json.find((metric) => metric.name === 'llm_extproc_requests_total');
    assert.deepEqual(
      requests?.values.map((v) => [v.labels, v.value]),
      [
        [{ model: 'llama', result: 'ok' }, 3],
        [{ model: 'phi', result: 'upstream_error' }, 1],
      ],
    );
  });

  void it('count open streams at scrape time', async () => {
    const m = new Metrics({ processMetrics: false });
    m.requestStarted();
    m.requestStarted();
    m.requestEnded();
    assert.equal(metricValue(await m.registry.metrics(), 'llm_extproc_in_flight_requests'), 1);
    m.requestEnded();
    assert.equal(metricValue(await m.registry.metrics(), 'llm_extproc_in_flight_requests'), 0);
  });

  void it('restart an endpoint’s attempt series from zero when the endpoint leaves and comes back', async () => {
    const m = new Metrics({ processMetrics: false });
    m.endpointView(viewOf(['10.0.0.1:8000']));
    m.attempt('p', '10.0.0.1:8000', 'success', 'ok');
    m.attempt('p', '10.0.0.1:8000', 'success', 'ok');
    m.endpointView(viewOf([])); // counted but never scraped before it left
    m.endpointView(viewOf(['10.0.0.1:8000']));
    assert.doesNotMatch(await m.registry.metrics(), /10\.0\.0\.1:8000/);
    m.attempt('p', '10.0.0.1:8000', 'success', 'ok');
    const labels = { pool: 'p', endpoint: '10.0.0.1:8000', outcome: 'success', reason: 'ok' };
    assert.equal(metricValue(await m.registry.metrics(), 'llm_extproc_upstream_attempts_total', labels), 1);
    m.endpointView(viewOf([]));
    assert.doesNotMatch(await m.registry.metrics(), /10\.0\.0\.1:8000/);
  });
});
