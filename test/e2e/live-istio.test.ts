// Issue 18, the Istio half: llm-extproc behind the real Istio control plane. istiod (built from the
// Go module proxy) watches the suite's real kube-apiserver, where the chart's rendered manifests
// for examples/inferencepool-istio.yaml are applied as they are, with a user's Gateway (class
// istio) and HTTPRoute to the InferencePool; istiod programs a real Envoy 1.40 bootstrapped as the
// Gateway's pod (test/support/istio-bed.ts). Nothing here is a transcription of Istio's config:
// every cell runs through what istiod generated.

import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { assertCatalogError } from '../support/catalog-assert.js';
import { GATEWAY_PROFILES } from '../../tools/envoy-config/gateway-profiles.js';
import { metricValue } from '../support/prometheus.js';
import { arrangeServers, gatewayScenarios } from '../support/gateway-scenarios.js';
import type { ClientRequest } from '../support/http-client.js';
import { IstioBed, MODEL, TARGET_PORT } from '../support/istio-bed.js';
import type { Behavior } from '../support/model-server.js';
import { podNetworkUnavailable } from '../support/pod-network.js';
import { waitUntil } from '../support/wait-until.js';

const CHAT = '/v1/chat/completions';

function chat(extra: Record<string, unknown> = {}, model = MODEL): ClientRequest {
  return { path: CHAT, body: { model, messages: [{ role: 'user', content: 'hi there' }], ...extra } };
}

// Needs CAP_NET_ADMIN for the pods' addresses (pod-network.ts): skipped, with the reason, where a
// non-root developer runs the suite; as root (CI) it always runs.
void describe('live Istio: the chart under istiod with its defaults', { skip: podNetworkUnavailable() }, () => {
  let bed: IstioBed;

  before(async () => {
    bed = await IstioBed.start({
      name: 'core',
      // A user's values over the Istio example: quarantine off (baseSeconds 0), so the
      // refused-connection cell (whose failed checks would quarantine both replicas at once) does
      // not take the pool out for the cells after it.
      // No metrics scraping either: a replica refused mid-test fails its next scrape and is never
      // primary after it, so whether the fallback cell sees it tried first would depend on the
      // scrape timer. Picks go by our in-flight counts, ties at random.
      values: { config: { quarantine: { consecutiveFailures: 1000, baseSeconds: 0 }, picker: { metrics: { enabled: false } } } },
      modelPods: [{ name: 'a' }, { name: 'b' }, { name: 'c', ready: false }],
    });
  });

  after(async () => {
    await bed?.stop();
  });

  /** Both ready replicas answer this way (the pick may land on either). */
  function behave(behavior: Behavior): void {
    for (const name of ['a', 'b']) bed.server(name).setBehavior(behavior);
  }

  void it('istiod programs the pool cluster: ready pods healthy, the not-ready pod present but failing EDS health', async () => {
    const hosts = await bed.poolHosts();
    const ip = (name: string): string => `${bed.pods.get(name)!.ip}:${TARGET_PORT}`;
    assert.equal(hosts.get(ip('a')), 'healthy');
    assert.equal(hosts.get(ip('b')), 'healthy');
    // PILOT_AUTO_SEND_UNHEALTHY_ENDPOINTS (default on): not-ready endpoints are sent as UNHEALTHY.
    assert.equal(hosts.get(ip('c')), '/failed_eds_health');
  });

  void it('the `istio` profile of gateway-profiles.ts (kept for the fast tests) matches what istiod generates, field by field', async () => {
    const live = await liveIstioConfig(bed);
    const profile = profileIstioConfig();
    assert.deepEqual(canonical(profile.listenerExtProc), canonical(live.listenerExtProc), 'listener-level ext_proc filter');
    assert.deepEqual(canonical(profile.routeOverrides), canonical(live.routeOverrides), 'per-route ExtProcPerRoute overrides');
    assert.deepEqual(canonical(profile.retryPolicy), canonical(live.retryPolicy), 'route retry policy');
    assert.equal(profile.routeTimeout, live.routeTimeout, 'route timeout');
    assert.deepEqual(canonical(profile.poolLb), canonical(live.poolLb), 'pool cluster load balancing (override_host)');
    assert.equal(live.listenerBufferLimit, undefined, 'no listener buffer limit: Envoy keeps its 1 MiB default, as in the profile');
  });

  gatewayScenarios(
    () => ({
      send: (request) => bed.send(request),
      metricsText: () => bed.pickerMetrics(),
      chat: { model: MODEL, ready: [bed.server('a'), bed.server('b')], notReady: bed.server('c') },
      // One pool: each scenario makes both ready replicas answer its way, then puts them back.
      arrange: (arrangement) => arrangeServers(MODEL, [bed.server('a'), bed.server('b')], arrangement),
    }),
    { bodies: { bytes: [1024 * 1024, 5 * 1024 * 1024], outcome: 'identical' }, longStreamSeconds: [20, 120], resetBlamed: false },
  );

  void it('attributes the answer to the replica that served it when a fallback answered (served host from Istio)', async () => {
    behave({ kind: 'ok' });
    const [a, b] = [bed.server('a'), bed.server('b')];
    await a.refuse();
    try {
      const before = await bed.pickerMetrics();
      let after = before;
      const delta = (labels: Record<string, string>): number =>
        metricValue(after, 'llm_extproc_upstream_attempts_total', labels) -
        metricValue(before, 'llm_extproc_upstream_attempts_total', labels);
      const served = new Set<string>();
      // Ties break at random, so a is primary about every other request: keep going until it was
      // (and then a few more); 200 requests make a miss impossible in practice.
      let sent = 0;
      for (let sinceRefused = 0; sent < 200 && sinceRefused < 3; sent++) {
        const response = await bed.send(chat({ messages: [{ role: 'user', content: `fallback ${sent}` }] }));
        assert.equal(response.status, 200, response.text());
        served.add(response.headers['x-model-server-id'] ?? '');
        after = await bed.pickerMetrics();
        if (delta({ endpoint: a.address, outcome: 'failure' }) > 0) sinceRefused++;
      }
      assert.deepEqual([...served], ['b'], 'Envoy walked our list to the live replica');
      assert.equal(delta({ endpoint: b.address, outcome: 'success' }), sent, 'every answer recorded against b, which served it');
      assert.equal(delta({ endpoint: a.address, outcome: 'success' }), 0, 'nothing recorded as a success of the dead replica');
      assert.ok(delta({ endpoint: a.address, outcome: 'failure' }) > 0, 'the refused first picks counted against a');
      assert.equal(
        metricValue(after, 'llm_extproc_served_outside_pick_total') - metricValue(before, 'llm_extproc_served_outside_pick_total'),
        0,
        'Istio reported a served host from our list every time',
      );
    } finally {
      await a.resume();
    }
  });

  void it('answers 503 no_ready_replica JSON once the pool has no ready pod, and recovers', async () => {
    behave({ kind: 'ok' });
    await Promise.all(['a', 'b'].map((n) => bed.setModelPodReady(n, false)));
    try {
      const response = await waitUntil(
        async () => {
          const r = await bed.send(chat());
          return r.status === 503 ? r : undefined;
        },
        { description: 'llm-extproc to see the pool without ready pods', timeoutMs: 30_000, intervalMs: 100 },
      );
      assertCatalogError(response, 'no_ready_replica');
      assert.match(response.headers['retry-after'] ?? '', /^\d+$/);
    } finally {
      await Promise.all(['a', 'b'].map((n) => bed.setModelPodReady(n, true)));
    }
    const healthy = (name: string) => (hosts: Map<string, string>) => hosts.get(`${bed.pods.get(name)!.ip}:${TARGET_PORT}`) === 'healthy';
    await bed.waitForPoolHosts((hosts) => healthy('a')(hosts) && healthy('b')(hosts), 'both pods healthy again');
    await waitUntil(async () => ((await bed.send(chat())).status === 200 ? true : undefined), {
      description: 'requests served again',
      timeoutMs: 30_000,
      intervalMs: 100,
    });
  });
});

// ---------------------------------------------------------------------------------------------
// The profile against the live translation

type Json = Record<string, unknown>;

/** What the profile and the live config are compared on; names and addresses of the bed are left out. */
interface IstioShape {
  readonly listenerExtProc: unknown;
  /** ExtProcPerRoute.overrides without grpc_service (its cluster name is the bed's Service). */
  readonly routeOverrides: unknown;
  readonly retryPolicy: unknown;
  readonly routeTimeout: unknown;
  /** lb_policy and load_balancing_policy of the pool's cluster. */
  readonly poolLb: unknown;
  readonly listenerBufferLimit?: unknown;
}

function pick(object: Json, keys: readonly string[]): Json {
  return Object.fromEntries(keys.filter((k) => object[k] !== undefined).map((k) => [k, object[k]]));
}

function shapeOf(httpFilters: Json[], route: Json, poolCluster: Json, listener: Json): IstioShape {
  const extProc = httpFilters.find((f) => f['name'] === 'envoy.filters.http.ext_proc');
  const action = route['route'] as Json;
  const perRoute = (route['typed_per_filter_config'] as Json)['envoy.filters.http.ext_proc'] as { overrides: Json };
  const overrides = { ...perRoute.overrides };
  const grpc = overrides['grpc_service'] as { envoy_grpc: Json };
  assert.match(String(grpc.envoy_grpc['cluster_name']), /^outbound\|9002\|\|/, 'the picker is called through its Service cluster');
  delete overrides['grpc_service'];
  return {
    listenerExtProc: extProc?.['typed_config'],
    routeOverrides: overrides,
    retryPolicy: action['retry_policy'],
    routeTimeout: action['timeout'],
    poolLb: pick(poolCluster, ['lb_policy', 'load_balancing_policy']),
    listenerBufferLimit: listener['per_connection_buffer_limit_bytes'],
  };
}

/** Numbers and their int64 JSON strings compare equal; key order does not matter. */
function canonical(value: unknown): unknown {
  if (typeof value === 'number') return String(value);
  if (Array.isArray(value)) return value.map(canonical);
  if (value !== null && typeof value === 'object') {
    return Object.fromEntries(
      Object.entries(value as Json)
        .sort(([a], [b]) => a.localeCompare(b))
        .map(([k, v]) => [k, canonical(v)]),
    );
  }
  return value;
}

function profileIstioConfig(): IstioShape {
  const rendered = GATEWAY_PROFILES.istio.render({
    listener: { address: '127.0.0.1', port: 0 },
    admin: { address: '127.0.0.1', port: 0 },
    extProc: '127.0.0.1:9002',
    pickerTls: { kind: 'plaintext' },
    backends: ['127.0.0.1:8000'],
  }) as { static_resources: { listeners: Json[]; clusters: Json[] } };
  const listener = rendered.static_resources.listeners[0];
  const hcm = ((listener['filter_chains'] as Json[])[0]['filters'] as Json[])[0]['typed_config'] as Json;
  const route = ((hcm['route_config'] as Json)['virtual_hosts'] as Json[])[0]['routes'] as Json[];
  const pool = rendered.static_resources.clusters.find((c) => String(c['name']).includes('llm-pool'))!;
  return shapeOf(hcm['http_filters'] as Json[], route[0], pool, listener);
}

async function liveIstioConfig(bed: IstioBed): Promise<IstioShape> {
  const dump = await bed.proxy.configDump();
  const of = (kind: string): Json => dump.configs.find((c) => c['@type'].endsWith(`.${kind}`))!;
  const gatewayListener = ((of('ListenersConfigDump')['dynamic_listeners'] as Json[]) ?? [])
    .map((l) => (l['active_state'] as Json)['listener'] as Json)
    .find((l) => String(l['name']).endsWith(`_${bed.gatewayPort}`))!;
  const hcm = ((gatewayListener['filter_chains'] as Json[])[0]['filters'] as Json[])[0]['typed_config'] as Json;
  const routes = (of('RoutesConfigDump')['dynamic_route_configs'] as Json[]).flatMap((r) =>
    (((r['route_config'] as Json)['virtual_hosts'] as Json[] | undefined) ?? []).flatMap((h) => (h['routes'] as Json[] | undefined) ?? []),
  );
  const route = routes.find((r) => (r['typed_per_filter_config'] as Json | undefined)?.['envoy.filters.http.ext_proc'] !== undefined)!;
  const pool = (of('ClustersConfigDump')['dynamic_active_clusters'] as Json[])
    .map((c) => c['cluster'] as Json)
    .find((c) => String(c['name']).includes('-ip-'))!;
  return shapeOf(hcm['http_filters'] as Json[], route, pool, gatewayListener);
}
