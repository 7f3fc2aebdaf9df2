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
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { it } from 'node:test';
import { repoRoot } from '../../../scripts/repo-root.js';
import { ModelRewrites } from '../../../src/picker/model-rewrite.js';
import { Metrics } from '../../../src/metrics/metrics.js';
import { FlowMetrics } from '../../../src/metrics/flow-metrics.js';
import { chunkGapTally } from '../../../src/metrics/llm-d-series.js';
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

// llm-d's router names, checked against its metrics documentation: docs/metrics.md of
// llm-d/llm-d-router at commit ebab687 (tags to v0.10.0). Every name its "Metrics catalog" lists is
// kept, with its type and the labels the doc lists, in llm-d-documented-metrics.json beside this
// file (the names, not the prose; the commit is in it too). Every llm_d_epp_* series we export must
// be in that list, of its type, with its labels less the ones below; every listed series we do
// not export is named below with the reason.

/** Labels llm-d's guide lists on its request series ("Request and latency") that we do not carry (docs/gateways.md says so), with why. */
const LABELS_NOT_CARRIED: Readonly<Record<string, string>> = {
  fairness_id: 'our tenants label only our own flow-control series (llm_extproc_flow_*), capped; not the request series',
  priority: 'as fairness_id: the request series are per model only (flow control carries it)',
  error_code: 'errors are counted by result in llm_extproc_requests_total{result}',
};

/** The guide's series we do not compute, and why. */
const NOT_COMPUTED: Readonly<Record<string, string>> = {
  llm_d_epp_scheduler_e2e_duration_seconds:
    'our pick is not timed apart from the message it is made in (llm_extproc_message_processing_seconds)',
  llm_d_epp_scheduler_attempts_total:
    'no scheduler attempts: a pick is one pass (llm_extproc_upstream_attempts_total counts attempts on replicas)',
  llm_d_epp_request_processing_duration_seconds:
    'our time is per ext_proc message (llm_extproc_message_processing_seconds), not per request',
  llm_d_epp_response_processing_duration_seconds: 'as request_processing_duration_seconds',
  llm_d_epp_plugin_duration_seconds: 'no plugins',
  llm_d_epp_info: 'no build commit is known at run time (the version is in --version)',
  llm_d_epp_datalayer_poll_errors_total: 'ours: llm_extproc_model_server_scrapes_total{result}',
  llm_d_epp_datalayer_extract_errors_total: 'ours: llm_extproc_model_server_scrapes_total{result="parse_error"}',
  llm_d_epp_prefix_indexer_size: 'no approximate prefix indexer of that design',
  llm_d_epp_prefix_indexer_hit_ratio: 'as prefix_indexer_size',
  llm_d_epp_prefix_indexer_hit_bytes: 'as prefix_indexer_size',
  llm_d_epp_encoder_cache_queries_total: 'no multimodal encoder cache',
  llm_d_epp_encoder_cache_hits_total: 'no multimodal encoder cache',
  llm_d_epp_encoder_cache_hit_ratio: 'no multimodal encoder cache',
  llm_d_epp_program_aware_jains_fairness_index: 'no program-aware fairness',
  llm_d_epp_program_aware_avg_wait_time_milliseconds: 'no program-aware fairness',
  llm_d_epp_program_aware_attained_service_tokens: 'no program-aware fairness',
  llm_d_epp_inference_request_metric: 'no latency predictor',
  llm_d_epp_request_predicted_ttft_seconds: 'no latency predictor',
  llm_d_epp_request_ttft_prediction_duration_seconds: 'no latency predictor',
  llm_d_epp_request_predicted_tpot_seconds: 'no latency predictor',
  llm_d_epp_request_tpot_prediction_duration_seconds: 'no latency predictor',
  llm_d_epp_request_slo_violation_total: 'no latency predictor',
  llm_d_epp_disagg_decision_total: 'no prefill/decode disaggregation',
  llm_d_epp_pd_decision_total: 'no prefill/decode disaggregation',
  llm_d_epp_disaggregatedset_strict_header_no_match_total: 'no disaggregated sets',
  llm_d_epp_disaggregatedset_revision_gating_share: 'no disaggregated sets',
  llm_d_epp_flow_control_request_queue_duration_seconds:
    'our queue does not know the model a request was rewritten to; its wait is llm_extproc_flow_queue_wait_seconds{pool,priority,tenant,outcome}',
  llm_d_epp_flow_control_dispatch_cycle_duration_seconds: 'no dispatch loop: a queue is drained when something frees room',
  llm_d_epp_flow_control_request_enqueue_duration_seconds: 'enqueueing is not timed',
  llm_d_epp_flow_control_queue_size: 'our queue lengths are by pool, priority and tenant, not model (llm_extproc_flow_queue_length)',
  llm_d_epp_flow_control_queue_bytes: 'queued bytes are not exported',
  llm_d_epp_flow_control_pool_saturation: 'saturation is a yes/no per replica (picker/saturation.ts), not a pool ratio',
  llm_d_epp_flow_control_stale_endpoints: 'ours: llm_extproc_endpoint_load_reports{state="stale"}',
  llm_d_epp_flow_control_capacity_utilization_requests: 'no per-band capacity',
  llm_d_epp_flow_control_capacity_utilization_bytes: 'no per-band capacity',
  llm_d_epp_flow_control_global_capacity_utilization_requests: 'no global capacity',
  llm_d_epp_flow_control_global_capacity_utilization_bytes: 'no global capacity',
  llm_d_epp_inflight_requests: 'ours per replica live in the picker (llm_extproc_in_flight_requests is the total)',
  llm_d_epp_inflight_tokens: 'no in-flight token count',
  llm_d_epp_kv_cache_index_admissions_total: 'our KV-event index has its own series (llm_extproc_kv_events_*)',
  llm_d_epp_kv_cache_index_evictions_total: 'as kv_cache_index_admissions_total',
  llm_d_epp_kv_cache_index_lookup_requests_total: 'as kv_cache_index_admissions_total',
  llm_d_epp_kv_cache_index_lookup_hits_total: 'as kv_cache_index_admissions_total',
  llm_d_epp_kv_cache_index_max_pod_hit_count_total: 'as kv_cache_index_admissions_total',
  llm_d_epp_kv_cache_index_lookup_latency_seconds: 'as kv_cache_index_admissions_total',
  llm_d_epp_kv_cache_events_dedup_removed_hashes_suppressed_total: 'as kv_cache_index_admissions_total',
  llm_d_epp_kv_cache_events_dedup_removed_hashes_forwarded_total: 'as kv_cache_index_admissions_total',
};

interface GuideMetric {
  readonly name: string;
  readonly type: 'counter' | 'histogram' | 'gauge';
  readonly section: string;
  /** Absent where the doc lists no labels. */
  readonly labels?: readonly string[];
}

interface DocumentedList {
  readonly commit: string;
  readonly metrics: readonly GuideMetric[];
}

const LLM_D_GUIDE = JSON.parse(
  readFileSync(join(repoRoot(), 'test', 'unit', 'metrics', 'llm-d-documented-metrics.json'), 'utf8'),
) as DocumentedList;

/** The guide's series we export: each of its type, with the guide's labels less the ones we do not carry. */
const LLM_D_DOCUMENTED: readonly DocumentedMetric[] = LLM_D_GUIDE.metrics
  .filter((m) => !(m.name in NOT_COMPUTED))
  .map((m) => ({
    name: m.name,
    type: m.type,
    labels: (m.labels ?? []).filter((l) => m.section !== 'Request and latency' || !(l in LABELS_NOT_CARRIED)),
  }));

/**
 * A server's metrics after two requests for one model (one answered with usage, one failed), a
 * stream for it rewritten to m-v2, a pool scrape, and two requests that met a saturated pool.
 */
async function exercised(deprecatedNames = true): Promise<string> {
  const metrics = new Metrics({ processMetrics: false, deprecatedNames });
  metrics.reportPoolLoadsFrom(() => [
    {
      name: 'pool-a',
      readyPods: 2,
      pods: [
        { pod: 'vllm-0', waiting: 3, running: 6, kvCacheUsage: 0.5 },
        { pod: 'vllm-1', waiting: 1, running: 2, kvCacheUsage: 0.25 },
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
    responseBytes: 300,
  });
  metrics.requestFinished('m', 'ok');
  metrics.requestReleased('m');
  metrics.requestFinished('m', 'upstream_unavailable');
  metrics.modelRewrites.decided('gateway/canary', 'm', 'm-v2');
  metrics.requestRouted('m-v2', 'm', 1500);
  const gaps = chunkGapTally();
  for (const gap of [0.004, 0.03, 0.03, 3]) gaps.observe(gap);
  metrics.requestFigures(
    {
      model: 'm',
      pool: 'pool-a',
      endpoint: '10.0.0.1:8000',
      operation: 'chat',
      answer: 'stream',
      usage: { input: 40, output: 11, cached: 32 },
      duration: 2.2,
      timeToFirstToken: 0.15,
      timeToFirstTokenFromStart: 0.18,
      interTokenLatency: 0.03,
      timePerOutputToken: 0.035,
      responseBytes: 5000,
      chunkGaps: gaps,
    },
    'm-v2',
  );
  metrics.requestFinished('m', 'ok', 'm-v2');
  for (const [code, seconds] of [
    ['OK', 0.7],
    ['OK', 2.2],
    ['Canceled', 40],
  ] as const) {
    metrics.requestStarted();
    metrics.requestEnded(code, seconds);
  }
  const flow = new FlowMetrics(metrics.registry, 10);
  flow.queued('pool-a', 0, 'team-a');
  flow.left('pool-a', 0, 'team-a', 'expired', 1.5);
  flow.rejected('pool-a', 0, 'team-b', 'pool_saturated');
  return metrics.registry.metrics();
}

/** Each documented series is there, of its type, with exactly its labels. */
function assertDocumented(text: string, documented: readonly DocumentedMetric[]): void {
  const all = samples(text);
  for (const doc of documented) {
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
}

it('exposes the documented Inference Extension series with their type and exactly their labels', async () => {
  assertDocumented(await exercised(), DOCUMENTED);
});

it("exposes llm-d's documented llm_d_epp_* series with their type and labels, the same figures as their GIE twins", async () => {
  const text = await exercised();
  assertDocumented(text, LLM_D_DOCUMENTED);
  const all = samples(text);
  const model = { model_name: 'm', target_model_name: 'm' };
  assert.equal(findSample(all, 'llm_d_epp_request_total', model)?.value, 2);
  assert.equal(findSample(all, 'llm_d_epp_request_error_total', model)?.value, 1);
  assert.equal(findSample(all, 'llm_d_epp_request_duration_seconds_bucket', { ...model, le: '0.8' })?.value, 1);
  assert.equal(findSample(all, 'llm_d_epp_request_input_tokens_sum', model)?.value, 12);
  assert.equal(findSample(all, 'llm_d_epp_ready_endpoints', { name: 'pool-a' })?.value, 2);
  assert.equal(findSample(all, 'llm_d_epp_per_endpoint_queue_size', { name: 'pool-a', model_server_endpoint: 'vllm-0' })?.value, 3);
});

it("llm-d's series of its own: running by model and target, request and response size, cached tokens, NTPOT, TTFT by streaming, TPOT, ITL, pool spread, flow-control outcomes, streams", async () => {
  const all = samples(await exercised());
  const value = (name: string, labels: Record<string, string>): number | undefined => findSample(all, name, labels)?.value;
  const asIs = { model_name: 'm', target_model_name: 'm' };
  const rewritten = { model_name: 'm', target_model_name: 'm-v2' };
  // Two routed as m, one released; one for m routed as m-v2 and not released.
  assert.equal(value('llm_d_epp_request_running', asIs), 1);
  assert.equal(value('llm_d_epp_request_running', rewritten), 1);
  assert.equal(value('inference_objective_running_requests', { model_name: 'm-v2' }), 1, 'the GIE twin: by the model routed as');
  assert.equal(value('llm_d_epp_request_size_bytes_bucket', { ...rewritten, le: '1024' }), 0);
  assert.equal(value('llm_d_epp_request_size_bytes_bucket', { ...rewritten, le: '2048' }), 1);
  assert.equal(value('llm_d_epp_request_cached_tokens_sum', rewritten), 32);
  assert.equal(value('llm_d_epp_request_cached_tokens_count', asIs), undefined, 'the JSON answer reported no cached tokens');
  // NTPOT: duration / output tokens (0.7 / 5 = 0.14; 2.2 / 11 = 0.2).
  assert.equal(value('llm_d_epp_request_ntpot_seconds_bucket', { ...asIs, le: '0.1' }), 0);
  assert.equal(value('llm_d_epp_request_ntpot_seconds_bucket', { ...asIs, le: '0.2' }), 1);
  assert.equal(value('llm_d_epp_request_ntpot_seconds_sum', rewritten), 0.2);
  // TTFT: the whole duration of a JSON answer; from the first message to the first content event of a stream.
  assert.equal(value('llm_d_epp_request_ttft_seconds_sum', { ...asIs, streaming: 'false' }), 0.7);
  assert.equal(value('llm_d_epp_request_ttft_seconds_sum', { ...rewritten, streaming: 'true' }), 0.18);
  assert.equal(value('llm_d_epp_request_streaming_tpot_seconds_sum', rewritten), 0.035);
  assert.equal(value('llm_d_epp_request_streaming_tpot_seconds_count', asIs), undefined, 'a JSON answer has no TPOT');
  // Response size on llm-d's buckets (…, 256, 512, …, 4096, 8192, …).
  assert.equal(value('llm_d_epp_response_size_bytes_bucket', { ...asIs, le: '256' }), 0);
  assert.equal(value('llm_d_epp_response_size_bytes_bucket', { ...asIs, le: '512' }), 1);
  assert.equal(value('llm_d_epp_response_size_bytes_bucket', { ...rewritten, le: '4096' }), 0);
  assert.equal(value('llm_d_epp_response_size_bytes_sum', rewritten), 5000);
  // ITL: each held gap, on llm-d's buckets (…, 0.005, …, 0.04, …, 2, +Inf).
  assert.equal(value('llm_d_epp_request_streaming_itl_seconds_bucket', { ...rewritten, le: '0.005' }), 1);
  assert.equal(value('llm_d_epp_request_streaming_itl_seconds_bucket', { ...rewritten, le: '0.04' }), 3);
  assert.equal(value('llm_d_epp_request_streaming_itl_seconds_bucket', { ...rewritten, le: '2' }), 3);
  assert.equal(value('llm_d_epp_request_streaming_itl_seconds_count', rewritten), 4);
  assert.equal(value('llm_d_epp_request_streaming_itl_seconds_count', asIs), undefined, 'a JSON answer has no ITL');
  // Pool spread over running 6 and 2, queues 3 and 1, KV 0.5 and 0.25 (sample deviation, n − 1).
  assert.equal(value('llm_d_epp_average_running_requests', { name: 'pool-a' }), 4);
  assert.equal(value('llm_d_epp_std_dev_running_requests', { name: 'pool-a' }), Math.sqrt(8));
  assert.equal(value('llm_d_epp_std_dev_queue_size', { name: 'pool-a' }), Math.sqrt(2));
  assert.equal(value('llm_d_epp_std_dev_kv_cache_utilization', { name: 'pool-a' }), Math.sqrt(0.03125));
  const flow = { priority: '0', inference_pool: 'pool-a' };
  assert.equal(value('llm_d_epp_flow_control_requests_total', { ...flow, outcome: 'EvictedTTL' }), 1);
  assert.equal(value('llm_d_epp_flow_control_requests_total', { ...flow, outcome: 'RejectedCapacity' }), 1);
  assert.equal(value('llm_d_epp_extproc_streams_total', { code: 'OK' }), 2);
  assert.equal(value('llm_d_epp_extproc_streams_total', { code: 'Canceled' }), 1);
  assert.equal(value('llm_d_epp_extproc_stream_duration_seconds_bucket', { le: '1' }), 1);
  assert.equal(value('llm_d_epp_extproc_stream_duration_seconds_bucket', { le: '5' }), 2);
  assert.equal(value('llm_d_epp_extproc_stream_duration_seconds_count', {}), 3);
});

it("every llm_d_epp_* series we export is in llm-d's guide (ebab687) with its type; every guide series we do not export is named with why", async () => {
  assert.equal(LLM_D_GUIDE.commit, 'ebab687927f5331c1b39defcb579a07951bce56c');
  const guide = new Map(LLM_D_GUIDE.metrics.map((m) => [m.name, m.type]));
  const exported = new Map([...(await exercised()).matchAll(/^# TYPE (llm_d_epp_\w+) (\w+)$/gm)].map((m) => [m[1], m[2]] as const));
  for (const [name, type] of exported) assert.equal(guide.get(name), type, `${name}: in the guide, as a ${type}`);
  for (const name of Object.keys(NOT_COMPUTED)) {
    assert.ok(guide.has(name), `${name} (not computed) is in the guide`);
    assert.ok(!exported.has(name), `${name} is exported, yet listed as not computed`);
  }
  for (const name of guide.keys()) assert.ok(exported.has(name) || name in NOT_COMPUTED, `${name}: exported, or named as not computed`);
});

it('a rewritten request is counted under the model asked for and the model it was sent as', async () => {
  const metrics = new Metrics({ processMetrics: false });
  metrics.requestFinished('m', 'ok', 'm-v2');
  metrics.requestFinished('m', 'upstream_unavailable', 'm-v2');
  metrics.requestFinished('m', 'ok');
  const all = samples(await metrics.registry.metrics());
  for (const name of ['inference_objective_request_total', 'llm_d_epp_request_total']) {
    assert.equal(findSample(all, name, { model_name: 'm', target_model_name: 'm-v2' })?.value, 2, name);
    assert.equal(findSample(all, name, { model_name: 'm', target_model_name: 'm' })?.value, 1, name);
  }
  assert.equal(findSample(all, 'llm_d_epp_request_error_total', { model_name: 'm', target_model_name: 'm-v2' })?.value, 1);
});

it('model rewrite decisions: by rule, model asked for and target; client-named models capped at 1,000, then "other"', async () => {
  const metrics = new Metrics({ processMetrics: false });
  const rewrites = new ModelRewrites(
    [
      {
        name: 'team/canary',
        matches: [{ model: { value: 'm' } }],
        targets: [{ modelRewrite: 'm-v1', weight: 3 }, { modelRewrite: 'm-v2' }],
      },
      { targets: [{ modelRewrite: 'fallback' }] },
    ],
    (rule, model, target) => metrics.modelRewrites.decided(rule, model, target),
  );
  for (let i = 0; i < 8; i++) rewrites.targetFor('m');
  for (let i = 0; i < 1005; i++) rewrites.targetFor(`client-${i}`);
  const all = samples(await metrics.registry.metrics());
  const decisions = (labels: Record<string, string>): number | undefined =>
    findSample(all, 'llm_d_epp_model_rewrite_decisions_total', labels)?.value;
  assert.equal(decisions({ model_rewrite_name: 'team/canary', model_name: 'm', target_model: 'm-v1' }), 6);
  assert.equal(decisions({ model_rewrite_name: 'team/canary', model_name: 'm', target_model: 'm-v2' }), 2);
  // The rule without matches is the config's (unnamed): m took the first 1 of 1,000 names, so 999 client names fit.
  assert.equal(decisions({ model_rewrite_name: 'config', model_name: 'client-998', target_model: 'fallback' }), 1);
  assert.equal(decisions({ model_rewrite_name: 'config', model_name: 'client-999', target_model: 'fallback' }), undefined);
  assert.equal(decisions({ model_rewrite_name: 'config', model_name: 'other', target_model: 'fallback' }), 6);
});

it('metrics.deprecatedNames: false drops the GIE names and keeps every llm_d_epp_* series with its figures', async () => {
  const text = await exercised(false);
  assert.doesNotMatch(text, /^inference_(objective|pool|extension)_/m);
  assertDocumented(text, LLM_D_DOCUMENTED);
  assert.equal(findSample(samples(text), 'llm_d_epp_request_total', { model_name: 'm', target_model_name: 'm' })?.value, 2);
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
