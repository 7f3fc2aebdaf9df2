// The Grafana dashboard and the chart's alert rules query metrics by name and label; a renamed
// metric or label would leave an empty panel or an alert that never fires. Every query is checked
// against the metrics the server really registers.
import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { Metrics } from '../../../src/metrics/metrics.js';
import { repoRoot } from '../../../scripts/repo-root.js';

const CHART = join(repoRoot(), 'charts', 'llm-extproc');

/** Our metric names and their label names, from the server's own registry (process metrics included, as the server runs). */
function registeredMetrics(): Map<string, readonly string[]> {
  const metrics = new Metrics({ processMetrics: true });
  const out = new Map<string, readonly string[]>();
  for (const m of metrics.registry.getMetricsAsArray())
    out.set(m.name, (m as unknown as { labelNames?: readonly string[] }).labelNames ?? []);
  return out;
}

/** Problems with one PromQL expression: unknown metrics, or grouping/matching on labels none of its metrics has. */
function problems(expr: string, known: Map<string, readonly string[]>): string[] {
  const found: string[] = [];
  const names = [...expr.matchAll(/\b(?:llm_extproc|llm_d_epp|gen_ai_(?:client|server)|inference_objective|inference_pool)_[a-z_]+/g)].map(
    (m) => m[0],
  );
  assert.ok(names.length > 0, `no llm-extproc metric in ${expr}`);
  const labels = new Set<string>(['le']);
  for (const raw of names) {
    const name = known.has(raw) ? raw : raw.replace(/_(bucket|sum|count)$/, '');
    const metricLabels = known.get(name);
    if (metricLabels === undefined) found.push(`unknown metric ${raw}`);
    else for (const l of metricLabels) labels.add(l);
  }
  const used = [
    ...[...expr.matchAll(/\b(?:by|on|without)\s*\(([^)]*)\)/g)].flatMap((m) => (m[1] ?? '').split(',')),
    ...[...expr.matchAll(/\{([^}]*)\}/g)].flatMap((m) => [...(m[1] ?? '').matchAll(/([a-z_]+)\s*[!=]~?/g)].map((l) => l[1] ?? '')),
  ]
    .map((l) => l.trim())
    .filter((l) => l !== '');
  for (const l of used) if (!labels.has(l)) found.push(`label ${l} is not on ${names.join(', ')}`);
  return found;
}

describe('Grafana dashboard', () => {
  const dashboard = JSON.parse(readFileSync(join(CHART, 'files', 'grafana-dashboard.json'), 'utf8')) as {
    uid: string;
    panels: Array<{ title: string; targets: Array<{ expr: string }> }>;
  };
  const known = registeredMetrics();

  it('every panel query uses metrics and labels the server exports', () => {
    for (const panel of dashboard.panels) {
      assert.ok(panel.targets.length > 0, `${panel.title} has a query`);
      for (const { expr } of panel.targets) assert.deepEqual(problems(expr, known), [], `${panel.title}: ${expr}`);
    }
  });

  it("uses llm-d's canonical llm_d_epp_* names, never their deprecated inference_objective_* / inference_pool_* twins", () => {
    const exprs = dashboard.panels.flatMap((p) => p.targets.map((t) => t.expr));
    assert.ok(
      exprs.some((e) => e.includes('llm_d_epp_')),
      'the model rewrite panel reads llm_d_epp_request_total',
    );
    for (const expr of exprs) assert.doesNotMatch(expr, /\binference_(objective|pool)_/, expr);
  });

  it('shows what operators ask first', () => {
    const queries = dashboard.panels.flatMap((p) => p.targets.map((t) => t.expr)).join('\n');
    const wanted: Array<[string, RegExp]> = [
      ['requests and errors by model and code', /by \(model, result\) \(rate\(llm_extproc_requests_total/],
      ['attempts by endpoint and outcome', /by \([^)]*endpoint, outcome\) \(rate\(llm_extproc_upstream_attempts_total/],
      ['endpoints by pool and state', /by \(pool, state\) \(llm_extproc_endpoints\)/],
      ['added latency per message', /by \(le, message\) \(rate\(llm_extproc_message_processing_seconds_bucket/],
      ['watch restarts', /llm_extproc_kubernetes_watch_restarts_total/],
      ['cache age', /llm_extproc_endpoint_cache_age_seconds/],
      ['time to first token by model', /by \(le, gen_ai_request_model\) \(rate\(gen_ai_server_time_to_first_token_seconds_bucket/],
      ['inter-token latency by model', /by \(le, gen_ai_request_model\) \(rate\(llm_extproc_inter_token_latency_seconds_bucket/],
      ['time to first token by replica', /by \(pool, endpoint\) \(rate\(gen_ai_server_time_to_first_token_seconds_sum/],
      ['inter-token latency by replica', /by \(le, pool, endpoint\) \(rate\(llm_extproc_inter_token_latency_seconds_bucket/],
      ['tokens by model and type', /by \(model, type\) \(rate\(llm_extproc_tokens_total/],
      ['answers without usage', /llm_extproc_answers_without_usage_total/],
      ['resident memory per replica', /^llm_extproc_process_resident_memory_bytes$/m],
    ];
    for (const [what, pattern] of wanted) assert.match(queries, pattern, what);
  });
});

describe('PrometheusRule alerts', () => {
  const template = readFileSync(join(CHART, 'templates', 'prometheusrule.yaml'), 'utf8');
  const known = registeredMetrics();
  // Each alert's expr, with the chart's threshold placeholders ({{ $r.x }}) replaced by a number.
  const alerts = [...template.matchAll(/- alert: (\w+)\n\s+expr: (\|\n(?: {12,}\S.*\n)+|.*\n)/g)].map((m) => ({
    name: m[1] ?? '',
    expr: (m[2] ?? '').replace(/^\|\n/, '').replace(/\{\{ \$r\.\w+ \}\}/g, '1'),
  }));

  it('covers no ready replica, error ratio by code, mid-stream failures, watch restarts, cache age and a slow replica', () => {
    assert.deepEqual(alerts.map((a) => a.name).sort(), [
      'LlmExtprocEndpointCacheStale',
      'LlmExtprocErrorRatioHigh',
      'LlmExtprocKubernetesWatchRestarts',
      'LlmExtprocMidStreamFailures',
      'LlmExtprocModelNoReadyReplica',
      'LlmExtprocPoolNoReadyReplica',
      'LlmExtprocReplicaSlowerThanPool',
    ]);
  });

  it('the slow-replica alert compares each replica with its own pool, by the configured ratio', () => {
    const slow = template.slice(template.indexOf('- alert: LlmExtprocReplicaSlowerThanPool'));
    assert.match(slow, /sum by \(pool, endpoint\) \(rate\(gen_ai_server_time_to_first_token_seconds_sum\[15m\]\)\)/);
    assert.match(slow, /> on \(pool\) group_left\s+\{\{ \$r\.slowReplicaRatio \}\} \* quantile by \(pool\) \(0\.5,/);
  });

  it('every alert queries metrics and labels the server exports', () => {
    for (const { name, expr } of alerts) assert.deepEqual(problems(expr, known), [], `${name}: ${expr}`);
  });
});
