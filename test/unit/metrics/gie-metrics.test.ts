// The Gateway API Inference Extension's metric names, checked against its metrics documentation:
// the table "Exposed metrics / EPP" of
//   https://gateway-api-inference-extension.sigs.k8s.io/guides/metrics-and-observability/
//   (source: kubernetes-sigs/gateway-api-inference-extension, site-src/guides/metrics-and-observability.md
//   at commit 03f9741b43c0fbe9f15a45f4f31f2765348b3520)
// transcribed below for the series llm-extproc provides. Not provided (not in issue 22's list):
// inference_objective_normalized_time_per_output_token_seconds, inference_objective_request_sizes,
// inference_objective_response_sizes, inference_extension_info.
// The doc's "Distribution" is a Prometheus histogram; units are the names' (seconds, tokens).

import assert from 'node:assert/strict';
import { it } from 'node:test';
import { Metrics } from '../../../src/metrics/metrics.js';
import { findSample, samples } from '../../support/prometheus.js';

interface DocumentedMetric {
  readonly name: string;
  readonly type: 'counter' | 'histogram' | 'gauge';
  readonly labels: readonly string[];
}

const DOCUMENTED: readonly DocumentedMetric[] = [
  { name: 'inference_objective_request_total', type: 'counter', labels: ['model_name', 'target_model_name'] },
  { name: 'inference_objective_request_error_total', type: 'counter', labels: ['model_name', 'target_model_name'] },
  { name: 'inference_objective_request_duration_seconds', type: 'histogram', labels: ['model_name', 'target_model_name'] },
  { name: 'inference_objective_input_tokens', type: 'histogram', labels: ['model_name', 'target_model_name'] },
  { name: 'inference_objective_output_tokens', type: 'histogram', labels: ['model_name', 'target_model_name'] },
  { name: 'inference_objective_running_requests', type: 'gauge', labels: ['model_name'] },
  { name: 'inference_pool_average_kv_cache_utilization', type: 'gauge', labels: ['name'] },
  { name: 'inference_pool_average_queue_size', type: 'gauge', labels: ['name'] },
  { name: 'inference_pool_per_pod_queue_size', type: 'gauge', labels: ['model_server_pod', 'name'] },
  { name: 'inference_pool_ready_pods', type: 'gauge', labels: ['name'] },
];

/** A server's metrics after two requests for one model (one answered with usage, one failed) and a pool scrape. */
async function exercised(): Promise<string> {
  const metrics = new Metrics({ processMetrics: false });
  metrics.reportPoolLoadsFrom(() => [
    {
      name: 'pool-a',
      readyPods: 2,
      pods: [
        { pod: 'vllm-0', waiting: 3, kvCacheUsage: 0.5 },
        { pod: 'vllm-1', waiting: 1, kvCacheUsage: 0.25 },
      ],
    },
  ]);
  metrics.requestRouted('m');
  metrics.requestRouted('m');
  metrics.requestFigures({
    model: 'm',
    pool: 'pool-a',
    endpoint: '10.0.0.1:8000',
    operation: 'chat',
    answer: 'json',
    usage: { input: 12, output: 5, cached: undefined },
    duration: 0.7,
    timeToFirstToken: undefined,
    interTokenLatency: undefined,
    timePerOutputToken: undefined,
  });
  metrics.requestFinished('m', 'ok');
  metrics.requestReleased('m');
  metrics.requestFinished('m', 'upstream_unavailable');
  return metrics.registry.metrics();
}

it('exposes the documented Inference Extension series with their type and exactly their labels', async () => {
  const text = await exercised();
  const all = samples(text);
  for (const doc of DOCUMENTED) {
    assert.match(text, new RegExp(`^# TYPE ${doc.name} ${doc.type}$`, 'm'), `${doc.name} is a ${doc.type}`);
    const own = all.filter((s) =>
      doc.type === 'histogram' ? [`${doc.name}_bucket`, `${doc.name}_sum`, `${doc.name}_count`].includes(s.name) : s.name === doc.name,
    );
    assert.ok(own.length > 0, `${doc.name} has samples`);
    for (const s of own) {
      const names = [...s.labels.keys()].filter((l) => !(s.name.endsWith('_bucket') && l === 'le')).sort();
      assert.deepEqual(names, [...doc.labels].sort(), `${s.name} labels`);
    }
  }
});

it('the series say what happened: requests, errors, duration, tokens, running requests and pool load', async () => {
  const all = samples(await exercised());
  const model = { model_name: 'm', target_model_name: 'm' };
  assert.equal(findSample(all, 'inference_objective_request_total', model)?.value, 2);
  assert.equal(findSample(all, 'inference_objective_request_error_total', model)?.value, 1);
  assert.equal(findSample(all, 'inference_objective_request_duration_seconds_sum', model)?.value, 0.7);
  assert.equal(findSample(all, 'inference_objective_request_duration_seconds_bucket', { ...model, le: '0.6' })?.value, 0);
  assert.equal(findSample(all, 'inference_objective_request_duration_seconds_bucket', { ...model, le: '0.8' })?.value, 1);
  assert.equal(findSample(all, 'inference_objective_input_tokens_sum', model)?.value, 12);
  assert.equal(findSample(all, 'inference_objective_output_tokens_sum', model)?.value, 5);
  assert.equal(findSample(all, 'inference_objective_running_requests', { model_name: 'm' })?.value, 1, 'two routed, one released');
  assert.equal(findSample(all, 'inference_pool_ready_pods', { name: 'pool-a' })?.value, 2);
  assert.equal(findSample(all, 'inference_pool_average_kv_cache_utilization', { name: 'pool-a' })?.value, 0.375);
  assert.equal(findSample(all, 'inference_pool_average_queue_size', { name: 'pool-a' })?.value, 2);
  assert.equal(findSample(all, 'inference_pool_per_pod_queue_size', { name: 'pool-a', model_server_pod: 'vllm-0' })?.value, 3);
  assert.equal(findSample(all, 'inference_pool_per_pod_queue_size', { name: 'pool-a', model_server_pod: 'vllm-1' })?.value, 1);
});

it('a pool without fresh load reports shows its ready pods and no made-up load', async () => {
  const metrics = new Metrics({ processMetrics: false });
  metrics.reportPoolLoadsFrom(() => [{ name: 'cold', readyPods: 1, pods: [] }]);
  const all = samples(await metrics.registry.metrics());
  assert.equal(findSample(all, 'inference_pool_ready_pods', { name: 'cold' })?.value, 1);
  assert.equal(findSample(all, 'inference_pool_average_queue_size', { name: 'cold' })?.value, undefined);
  assert.equal(findSample(all, 'inference_pool_average_kv_cache_utilization', { name: 'cold' })?.value, undefined);
});
