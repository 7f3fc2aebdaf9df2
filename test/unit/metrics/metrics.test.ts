// Metric recorders: names, labels and values an operator's dashboards depend on.

import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { ALERTED_RESULTS, Metrics } from '../../../src/metrics/metrics.js';
import { metricValue, samples } from '../../support/prometheus.js';

/** One pool `p` with these Ready endpoints. */
function view(addresses: string[]) {
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

describe('Metrics', () => {
  it('counts requests by result and attempts by endpoint, outcome and reason', async () => {
    const m = new Metrics({ processMetrics: false });
    m.requestFinished('llama', 'ok');
    m.requestFinished('llama', 'stream_broken');
    m.attempt('p', '10.0.0.1:8000', 'failure', 'stream_broken');
    const text = await m.registry.metrics();
    assert.equal(metricValue(text, 'llm_extproc_requests_total', { model: 'llama' }), 2);
    assert.equal(
      metricValue(text, 'llm_extproc_upstream_attempts_total', { endpoint: '10.0.0.1:8000', outcome: 'failure', reason: 'stream_broken' }),
      1,
    );
  });

  it('a served model has the series the alerts read at 0 before its first request, and only those', async () => {
    const m = new Metrics({ processMetrics: false });
    m.modelsServed(['llama', 'phi']);
    m.modelsServed(['llama']);
    const series = samples(await m.registry.metrics())
      .filter((s) => s.name === 'llm_extproc_requests_total')
      .map((s) => `${s.labels.get('model')} ${s.labels.get('result')} ${s.value}`)
      .sort();
    assert.deepEqual(series, ['llama', 'phi'].flatMap((model) => ALERTED_RESULTS.map((result) => `${model} ${result} 0`)).sort());
    assert.ok(ALERTED_RESULTS.includes('stream_broken') && ALERTED_RESULTS.includes('cancelled_mid_stream'));
    m.requestFinished('llama', 'stream_broken');
    const text = await m.registry.metrics();
    assert.equal(
      metricValue(text, 'llm_extproc_requests_total', { model: 'llama', result: 'stream_broken' }),
      1,
      'counted into the same series',
    );
    assert.equal(metricValue(text, 'llm_extproc_requests_total', { model: 'phi', result: 'stream_broken' }), 0);
  });

  it('reports endpoint states per pool, dropping to zero when a state empties', async () => {
    const m = new Metrics({ processMetrics: false });
    const endpoint = { id: 'a', address: '10.0.0.1:8000', reason: '', pool: 'p' };
    m.endpointView({
      version: 1,
      pools: new Map([['p', { name: 'p', models: ['m'], endpoints: [{ ...endpoint, state: 'Starting' }] }]]),
      poolsByModel: new Map(),
    });
    m.endpointView({
      version: 2,
      pools: new Map([['p', { name: 'p', models: ['m'], endpoints: [{ ...endpoint, state: 'Ready' }] }]]),
      poolsByModel: new Map(),
    });
    const text = await m.registry.metrics();
    assert.equal(metricValue(text, 'llm_extproc_endpoints', { pool: 'p', state: 'Ready' }), 1);
    assert.equal(metricValue(text, 'llm_extproc_endpoints', { pool: 'p', state: 'Starting' }), 0);
  });

  it('drops per-endpoint series when the endpoint leaves the view (pod IPs churn)', async () => {
    const m = new Metrics({ processMetrics: false });
    m.endpointView(view(['10.0.0.1:8000', '10.0.0.2:8000']));
    m.attempt('p', '10.0.0.1:8000', 'failure', 'upstream_connect_failed');
    m.attempt('p', '10.0.0.2:8000', 'success', 'ok');
    m.quarantined('p', '10.0.0.1:8000');
    m.endpointView(view(['10.0.0.2:8000']));
    const text = await m.registry.metrics();
    assert.doesNotMatch(text, /10\.0\.0\.1:8000/);
    assert.equal(metricValue(text, 'llm_extproc_upstream_attempts_total', { endpoint: '10.0.0.2:8000', outcome: 'success' }), 1);
  });

  it('computes the endpoint cache age at scrape time from the last refresh', async () => {
    const m = new Metrics({ processMetrics: false });
    m.sourceRefreshed('kubernetes', Date.now() - 42_000);
    const age = metricValue(await m.registry.metrics(), 'llm_extproc_endpoint_cache_age_seconds', { source: 'kubernetes' });
    assert.ok(age >= 42 && age < 60, `age ${age}`);
  });

  it('keeps separate registries per instance (no global state between servers)', async () => {
    const a = new Metrics({ processMetrics: false });
    const b = new Metrics({ processMetrics: false });
    a.watchRestarted('pods/p', 'gone');
    assert.equal(metricValue(await b.registry.metrics(), 'llm_extproc_kubernetes_watch_restarts_total'), 0);
    assert.equal(metricValue(await a.registry.metrics(), 'llm_extproc_kubernetes_watch_restarts_total', { reason: 'gone' }), 1);
  });
});

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
    m.requestEnded('OK', 0.2);
    assert.equal(metricValue(await m.registry.metrics(), 'llm_extproc_in_flight_requests'), 1);
    m.requestEnded('Canceled', 7);
    assert.equal(metricValue(await m.registry.metrics(), 'llm_extproc_in_flight_requests'), 0);
  });

  void it('restart an endpoint’s attempt series from zero when the endpoint leaves and comes back', async () => {
    const m = new Metrics({ processMetrics: false });
    m.endpointView(view(['10.0.0.1:8000']));
    m.attempt('p', '10.0.0.1:8000', 'success', 'ok');
    m.attempt('p', '10.0.0.1:8000', 'success', 'ok');
    m.endpointView(view([])); // counted but never scraped before it left
    m.endpointView(view(['10.0.0.1:8000']));
    assert.doesNotMatch(await m.registry.metrics(), /10\.0\.0\.1:8000/);
    m.attempt('p', '10.0.0.1:8000', 'success', 'ok');
    const labels = { pool: 'p', endpoint: '10.0.0.1:8000', outcome: 'success', reason: 'ok' };
    assert.equal(metricValue(await m.registry.metrics(), 'llm_extproc_upstream_attempts_total', labels), 1);
    m.endpointView(view([]));
    assert.doesNotMatch(await m.registry.metrics(), /10\.0\.0\.1:8000/);
  });
});
