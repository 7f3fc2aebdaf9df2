// Issue 18, Envoy Gateway half: `helm install` beside the real Envoy Gateway controller (v1.9.1,
// built from the Go module proxy) on a real kube-apiserver, and a real Envoy 1.40 programmed by it
// over xDS from the chart's rendered manifests (test/support/envoy-gateway-bed.ts). No profile, no
// transcription: what the controller generates from the chart's defaults is what the traffic meets.
//
// The cells: the gateway scenarios every gateway suite runs (test/support/gateway-scenarios.ts), with
// request bodies of 1 MiB and 5 MiB and SSE streams of 20 s and 120 s, and the failure modes as Envoy
// Gateway implements them (llm-extproc down with FailClose and FailOpen, llm-extproc draining at
// SIGTERM, a pod the gateway marks DRAINING that llm-extproc still sees Ready, a picked address the
// gateway's cluster does not hold). Every failure is catalog JSON, or the documented gateway reply.

import assert from 'node:assert/strict';
import { createHash } from 'node:crypto';
import { after, before, describe, it } from 'node:test';
import { assertCatalogError } from '../support/catalog-assert.js';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { stringify as toYaml } from 'yaml';
import { CHART_DIR } from '../../scripts/chart/chart-files.js';
import { repoRoot } from '../../scripts/repo-root.js';
import { helmBinaryPath, run } from '../support/helm.js';
import { GATEWAY_PROFILES } from '../../tools/envoy-config/gateway-profiles.js';
import {
  bootstrapAsDump,
  connectionManager,
  dumpClusters,
  dumpListeners,
  dumpRoutes,
  type ConfigDump,
} from '../support/envoy-config-dump.js';
import type { GatewayProxy } from '../support/envoy-gateway.js';
import {
  EnvoyGatewayBed,
  GATEWAY_NAME,
  MODELS_NS,
  MODELS_SERVICE,
  RELEASE,
  RELEASE_NS,
  ROUTE_CLUSTER,
  deepMerge,
} from '../support/envoy-gateway-bed.js';
import { freePort } from '../support/free-ports.js';
import { metricValue } from '../support/prometheus.js';
import { ARRANGED_POOLS, arrangedPools, fromArrangedPools, gatewayScenarios } from '../support/gateway-scenarios.js';
import type { ClientRequest, ClientResponse } from '../support/http-client.js';
import { waitUntil } from '../support/wait-until.js';
import { liveEnvoyGatewayUnavailable } from '../support/envoy-gateway.js';

const CHAT = '/v1/chat/completions';
/** What docs/gateways.md promises for a long stream; the paced model server takes this long. */
const LONG_STREAM_SECONDS = [20, 120] as const;

function chat(model: string, extra: Record<string, unknown> = {}): ClientRequest {
  return { path: CHAT, body: { model, messages: [{ role: 'user', content: 'hi there' }], ...extra } };
}

const sha256 = (bytes: Buffer): string => createHash('sha256').update(bytes).digest('hex');

// The bed needs root: pod addresses on the loopback interface and Envoy Gateway's /certs (see
// test/support/pod-network.ts and envoy-gateway.ts). CI runs as root; elsewhere the file reports
// itself skipped with the reason instead of failing the whole suite.
const NEEDS = liveEnvoyGatewayUnavailable();

void describe('live Envoy Gateway v1.9.1', { skip: NEEDS }, () => {
  let bed: EnvoyGatewayBed;

  before(async () => {
    bed = await EnvoyGatewayBed.start({
      pools: [
        { name: 'chat', pods: [{ id: 'chat-a' }, { id: 'chat-b' }, { id: 'chat-c', state: 'not-ready' }] },
        { name: 'other', pods: [{ id: 'other' }] },
        { name: 'starting', pods: [{ id: 'starting-a', state: 'starting' }] },
        ...arrangedPools(LONG_STREAM_SECONDS).map((pool) => ({
          name: pool.model,
          pods: pool.replicas.map((id) => ({ id, behavior: pool.behavior })),
        })),
        { name: 'drain', pods: [{ id: 'drain-a' }, { id: 'drain-b' }] },
        { name: 'ghost', pods: [{ id: 'ghost-a' }, { id: 'ghost-b' }] },
      ],
    });
    // Refuse only now: the port stays bound by the other pods' servers, and this address stays dead.
    await Promise.all(ARRANGED_POOLS.refuse.replicas.map((id) => bed.server(id).refuse()));
  });

  after(async () => {
    await bed?.stop();
  });

  /** The model server that answered, from its id header. */
  function servedBy(response: ClientResponse): string {
    return response.headers['x-model-server-id'] ?? '';
  }

  void describe('behind the live Envoy Gateway controller, from the chart defaults', () => {
    // Its 32 KiB buffer limit and 15 s route timeout are raised by the chart: big bodies and long streams pass.
    gatewayScenarios(
      () => ({
        send: (request) => bed.send(request),
        metricsText: () => bed.metricsText(),
        chat: { model: 'chat', ready: [bed.server('chat-a'), bed.server('chat-b')], notReady: bed.server('chat-c') },
        other: { model: 'other', server: bed.server('other') },
        arrange: fromArrangedPools((id) => bed.server(id)),
      }),
      {
        bodies: { bytes: [1024 * 1024, 5 * 1024 * 1024], outcome: 'identical' },
        longStreamSeconds: LONG_STREAM_SECONDS,
        startingModel: 'starting',
        resetBlamed: true,
      },
    );
  });

  void describe('what Envoy Gateway generates from the chart (its live xDS, field by field)', () => {
    void it('buffer limits fit the bodies, the route waits an hour, our filter and policies are on the route', async () => {
      const dump = await bed.proxy.configDump();
      const limit = 8 * 1024 * 1024 + 64 * 1024; // routing.maxRequestBodyBytes (default 8 MiB) plus headers
      const listener = dumpListeners(dump).find((l) => l['name'] === `${RELEASE_NS}/${GATEWAY_NAME}/http`)!;
      assert.equal(listener['per_connection_buffer_limit_bytes'], limit, 'ClientTrafficPolicy connection.bufferLimit on the listener');
      const clusters = dumpClusters(dump);
      const models = clusters.find((c) => c['name'] === ROUTE_CLUSTER)!;
      assert.equal(models['type'], 'EDS', 'endpoints from EndpointSlices');
      assert.equal(models['per_connection_buffer_limit_bytes'], limit, 'BackendTrafficPolicy connection.bufferLimit on the model servers');
      const lb = JSON.stringify(models['load_balancing_policy']);
      assert.match(lb, /envoy\.load_balancing_policies\.override_host/);
      assert.match(lb, /"override_host_sources":\[\{"header":"x-gateway-destination-endpoint"\}\]/, 'the pick header, no metadata source');
      assert.match(lb, /round_robin/, 'fallback: round robin over the cluster');
      const extproc = clusters.find((c) =>
        String(c['name']).startsWith(`envoyextensionpolicy/${RELEASE_NS}/${RELEASE}-llm-extproc/extproc/0`),
      )!;
      assert.equal(extproc['per_connection_buffer_limit_bytes'], limit, 'backendSettings connection.bufferLimit on llm-extproc');
      const filters = connectionManager(listener)['http_filters'] as Array<Record<string, unknown>>;
      const filter = filters.find((f) => String(f['name']).startsWith('envoy.filters.http.ext_proc/'))!;
      assert.equal(filter['disabled'], true, 'disabled at the listener...');
      const route = (await bed.route())!;
      assert.ok(Object.keys(route.typed_per_filter_config ?? {}).includes(String(filter['name'])), '...and enabled on our route');
      assert.equal(route.route?.timeout, '3600s', 'BackendTrafficPolicy timeout.http.requestTimeout (chart default 1h)');
      const config = filter['typed_config'] as Record<string, unknown>;
      assert.deepEqual(
        {
          modes: config['processing_mode'],
          failOpen: config['failure_mode_allow'] ?? false,
          messageTimeout: config['message_timeout'],
          attributes: config['response_attributes'],
          receiving: (config['metadata_options'] as Record<string, unknown> | undefined)?.['receiving_namespaces'],
          override: config['allow_mode_override'],
        },
        {
          modes: {
            request_header_mode: 'SEND',
            response_header_mode: 'SEND',
            request_body_mode: 'BUFFERED',
            response_body_mode: 'STREAMED',
            request_trailer_mode: 'SKIP',
            response_trailer_mode: 'SKIP',
          },
          failOpen: false,
          messageTimeout: '1s',
          attributes: ['response.code_details', 'response.flags', 'upstream.address'],
          receiving: { untyped: ['envoy.lb'] },
          override: true,
        },
      );
    });
  });

  void describe('gateway profiles held against the live Envoy Gateway translation', () => {
    // Envoy AI Gateway runs on Envoy Gateway and has no controller here (its module is not on the
    // Go module proxy): the parts of the aigw profiles that Envoy Gateway owns — the listener, and
    // the HTTPRoute rule's cluster that AI Gateway's extension server turns into ORIGINAL_DST — are
    // compared with what the live controller generates for a plain Gateway and HTTPRoute.
    let plain: GatewayProxy;
    before(async () => {
      const port = await freePort();
      await bed.plane.createNamespace('plain');
      await bed.plane.apply(
        [
          {
            apiVersion: 'gateway.networking.k8s.io/v1',
            kind: 'Gateway',
            metadata: { name: 'plain-gateway', namespace: 'plain' },
            spec: { gatewayClassName: 'eg', listeners: [{ name: 'http', protocol: 'HTTP', port }] },
          },
          {
            apiVersion: 'gateway.networking.k8s.io/v1beta1',
            kind: 'ReferenceGrant',
            metadata: { name: 'plain-routes', namespace: MODELS_NS },
            spec: {
              from: [{ group: 'gateway.networking.k8s.io', kind: 'HTTPRoute', namespace: 'plain' }],
              to: [{ group: '', kind: 'Service', name: MODELS_SERVICE }],
            },
          },
          {
            apiVersion: 'gateway.networking.k8s.io/v1',
            kind: 'HTTPRoute',
            metadata: { name: 'plain-route', namespace: 'plain' },
            spec: {
              parentRefs: [{ name: 'plain-gateway' }],
              rules: [{ backendRefs: [{ name: MODELS_SERVICE, namespace: MODELS_NS, port: 8000 }] }],
            },
          },
        ]
          .map((o) => toYaml(o))
          .join('---\n'),
      );
      plain = await bed.controller.proxy('plain', 'plain-gateway');
      await waitUntil(async () => ((await plain.clusterHosts()).get('httproute/plain/plain-route/rule/0')?.length ? true : undefined), {
        description: 'the plain route programmed',
        timeoutMs: 120_000,
        intervalMs: 100,
      });
    });
    after(async () => {
      await plain?.stop();
    });

    /** What Envoy Gateway decides for a Gateway and an HTTPRoute rule, read from a dump. */
    function envoyGatewayOwned(dump: ConfigDump, clusterName: string): Record<string, unknown> {
      const cluster = dumpClusters(dump).find((c) => c['name'] === clusterName);
      const route = dumpRoutes(dump).find((r) => (r['route'] as Record<string, unknown> | undefined)?.['cluster'] === clusterName);
      const listener = dumpListeners(dump).find(
        (l) => JSON.stringify(connectionManager(l)).includes(clusterName) || connectionManager(l)['rds'] !== undefined,
      );
      return {
        clusterName: clusterName.replace(/^httproute\/[^/]+\/[^/]+\/rule\/(\d+)$/, 'httproute/<namespace>/<route>/rule/$1'),
        listenerBufferLimit: listener?.['per_connection_buffer_limit_bytes'],
        clusterBufferLimit: cluster?.['per_connection_buffer_limit_bytes'],
        connectTimeout: cluster?.['connect_timeout'],
        routeTimeout: (route?.['route'] as Record<string, unknown> | undefined)?.['timeout'] ?? '(none: Envoy default 15 s)',
      };
    }

    for (const name of ['aigw', 'aigw-buffered'] as const) {
      void it(`${name}: the listener, route and pool-cluster fields Envoy Gateway owns match the live controller`, async () => {
        const profile = GATEWAY_PROFILES[name].render({
          listener: { address: '127.0.0.1', port: 0 },
          admin: { address: '127.0.0.1', port: 0 },
          extProc: '127.0.0.1:9002',
          pickerTls: { kind: 'unverified' },
          backends: ['10.0.0.1:8000'],
        });
        const ours = envoyGatewayOwned(bootstrapAsDump(profile), 'httproute/models/llm-route/rule/0');
        const live = envoyGatewayOwned(await plain.configDump(), 'httproute/plain/plain-route/rule/0');
        assert.deepEqual(ours, live, `${name} drifted from Envoy Gateway v1.9.1's translation`);
      });
    }
  });

  void describe('chart values that decide what Envoy Gateway does (helm upgrade)', () => {
    void it('gateway.envoyGateway.requestTimeout is the longest a request may take: a hung model server gets 504 upstream_timeout JSON', async () => {
      const defaults = bed.installedValues;
      const route = await bed.route();
      assert.equal(route?.route?.timeout, '3600s', 'the chart default (1h) is on the route');
      await bed.install(deepMerge(defaults, { gateway: { envoyGateway: { requestTimeout: '2s' } } }));
      try {
        await bed.waitForRoute((r) => r.route?.timeout === '2s', 'timeout 2s');
        assertCatalogError(await bed.send(chat('hang')), 'upstream_timeout');
      } finally {
        await bed.install(defaults);
        await bed.waitForRoute((r) => r.route?.timeout === '3600s', 'timeout back to 3600s');
      }
    });
  });

  void describe('helm install prints what the chart cannot fix (NOTES.txt, against the real API server)', () => {
    before(async () => {
      await bed.plane.installInferencePoolCrd();
    });

    /** `helm install --dry-run=server` as the admin: the API server is asked, NOTES.txt is rendered. */
    async function notes(valuesFile: string, set: string): Promise<string> {
      const kubeconfig = await bed.plane.writeKubeconfig('helm-kubeconfig.yaml');
      const home = await mkdtemp(join(tmpdir(), 'llm-extproc-helm-'));
      try {
        const res = await run(
          helmBinaryPath(),
          [
            'install',
            'notes',
            join(repoRoot(), CHART_DIR),
            '--dry-run=server',
            '--namespace',
            RELEASE_NS,
            '-f',
            join(repoRoot(), CHART_DIR, 'examples', valuesFile),
            '--set',
            set,
          ],
          {
            env: {
              ...process.env,
              KUBECONFIG: kubeconfig,
              HELM_CACHE_HOME: join(home, 'c'),
              HELM_CONFIG_HOME: join(home, 'f'),
              HELM_DATA_HOME: join(home, 'd'),
            },
          },
        );
        assert.equal(res.code, 0, res.stderr);
        return res.stdout;
      } finally {
        await rm(home, { recursive: true, force: true });
      }
    }

    void it('Envoy AI Gateway in buffered mode: a warning about the 32 KiB limit', async () => {
      const out = await notes('inferencepool-ai-gateway.yaml', 'gateway.inferencePool.aiGateway.processingBodyMode=buffered');
      assert.match(out, /WARNING: Envoy AI Gateway's buffered body mode holds whole bodies within Envoy Gateway's 32 KiB/);
    });

    void it('Envoy Gateway with the fixes switched off: a warning for each', async () => {
      const out = await notes('envoy-gateway.yaml', 'gateway.envoyGateway.bufferLimit.enabled=false,gateway.envoyGateway.requestTimeout=');
      assert.match(out, /WARNING: gateway\.envoyGateway\.bufferLimit is off/);
      assert.match(out, /WARNING: gateway\.envoyGateway\.requestTimeout is empty/);
      assert.doesNotMatch(await notes('envoy-gateway.yaml', 'gateway.envoyGateway.enabled=true'), /WARNING/);
    });
  });

  void describe('failure modes under Envoy Gateway', () => {
    void it('a pod the gateway marks DRAINING (not-ready endpoint) that llm-extproc still sees Ready keeps getting its picks: served, never an error', async () => {
      const [a, b] = [bed.server('drain-a'), bed.server('drain-b')];
      await bed.writeModelEndpoints(new Map([['drain-a', 'not-ready']]));
      try {
        await bed.waitForHosts(ROUTE_CLUSTER, (hosts) => hosts.get(a.address) === 'DRAINING', 'drain-a DRAINING');
        // At least 8 requests, and on until both pods have served one (the picks of two equally
        // idle pods can all fall on one for 8 requests in a row: about 1 run in 128), at most 40.
        for (let i = 0; i < 40 && (i < 8 || a.requests.length === 0 || b.requests.length === 0); i++) {
          const response = await bed.send(chat('drain', { messages: [{ role: 'user', content: `drain ${i}` }] }));
          assert.equal(response.status, 200, response.text());
          assert.match(servedBy(response), /^drain-[ab]$/);
        }
        // Envoy's override_host selects a DRAINING host it is told to: the gateway's readiness view
        // does not veto our pick (docs/gateways.md). Readiness is llm-extproc's pod watch.
        assert.ok(a.requests.length > 0, 'the picked DRAINING pod was served');
        assert.ok(b.requests.length > 0, 'and the other pod too');
      } finally {
        await bed.writeModelEndpoints();
        await bed.waitForHosts(ROUTE_CLUSTER, (hosts) => hosts.get(a.address) === 'HEALTHY', 'drain-a HEALTHY again');
      }
    });

    void it('a picked address the gateway cluster does not hold: Envoy falls back to a host it has; the pick is counted as a connect failure', async () => {
      const [a, b] = [bed.server('ghost-a'), bed.server('ghost-b')];
      // The endpoint controller has not published ghost-a yet (and, for a deterministic fallback,
      // nothing but ghost-b): both pods are Ready in the API, as llm-extproc sees them.
      await bed.writeModelEndpoints(new Map([...bed.pods.keys()].filter((id) => id !== 'ghost-b').map((id) => [id, 'absent' as const])));
      try {
        await bed.waitForHosts(ROUTE_CLUSTER, (hosts) => hosts.size === 1 && hosts.get(b.address) === 'HEALTHY', 'only ghost-b');
        for (let i = 0; i < 8; i++) {
          const response = await bed.send(chat('ghost', { messages: [{ role: 'user', content: `ghost ${i}` }] }));
          assert.equal(response.status, 200, response.text());
          assert.equal(servedBy(response), 'ghost-b');
        }
        assert.equal(a.requests.length, 0, 'Envoy cannot reach an address its cluster lacks');
        const metrics = await bed.metricsText();
        const missed = metricValue(metrics, 'llm_extproc_upstream_attempts_total', {
          endpoint: a.address,
          outcome: 'failure',
          reason: 'upstream_connect_failed',
        });
        assert.ok(missed > 0, 'picks of ghost-a served elsewhere are counted against ghost-a (upstream.address told us)');
        assert.equal(metricValue(metrics, 'llm_extproc_upstream_attempts_total', { endpoint: b.address, outcome: 'success' }), 8);
      } finally {
        await bed.writeModelEndpoints();
        await bed.waitForHosts(ROUTE_CLUSTER, (hosts) => hosts.get(a.address) === 'HEALTHY', 'every pod back');
      }
    });

    void it('llm-extproc draining at SIGTERM: the stream in flight completes, new requests are served while it drains; once it is gone, gateway_unavailable JSON (FailClose)', async () => {
      bed.server('long-20-a').setBehavior({ kind: 'paced-random-sse', events: 6, gapMs: 1000, bytesPerEvent: 200 });
      const before = bed.server('long-20-a').requests.length;
      const inFlight = bed.send({ ...chat('long-20', { stream: true }), timeoutMs: 60_000 });
      await waitUntil(() => (bed.server('long-20-a').requests.length > before ? true : undefined), { description: 'the stream under way' });
      // The kubelet sends SIGTERM; the endpoint controller marks the endpoint terminating (still serving).
      bed.extproc.signal('SIGTERM');
      await bed.writeExtprocEndpoints('terminating');
      const during = await bed.send(chat('chat'));
      assert.equal(during.status, 200, `served while draining: ${during.text()}`);
      const response = await inFlight;
      assert.equal(response.status, 200);
      assert.equal(response.error, undefined);
      const served = bed.server('long-20-a').requests.at(-1)!;
      assert.equal(await served.response.settled, 'ended');
      assert.equal(sha256(response.body), sha256(served.response.body), 'the stream in flight at SIGTERM arrives whole');
      assert.equal(bed.server('long-20-a').requests.length, before + 1, 'and was never retried');
      bed.server('long-20-a').setBehavior({ kind: 'ok' });
      assert.deepEqual(await bed.extproc.exitWithin(60_000), { code: 0, signal: null });
      // The endpoint is still listed (terminating) but nothing listens: Envoy's empty 500, as JSON.
      const gone = await bed.send(chat('chat'));
      assertCatalogError(gone, 'gateway_unavailable');
      assert.equal(gone.headers['retry-after'], '5');
    });

    void it('llm-extproc without a ready endpoint: Envoy Gateway makes the route a direct 500, answered as gateway_unavailable JSON', async () => {
      await bed.writeExtprocEndpoints('none');
      await bed.waitForRoute((r) => r.direct_response?.status === 500, 'a direct 500 (extension policy Invalid)');
      const before = [...bed.pods.values()].reduce((n, p) => n + p.server.requests.length, 0);
      assertCatalogError(await bed.send(chat('chat')), 'gateway_unavailable');
      assert.equal(
        [...bed.pods.values()].reduce((n, p) => n + p.server.requests.length, 0),
        before,
        'nothing reached a model server',
      );
      // A new llm-extproc pod becomes ready: the policy is Accepted again and traffic flows.
      await bed.startExtproc();
      await bed.waitForPoliciesAccepted();
      await bed.waitForRoute((r) => r.direct_response === undefined, 'routing again');
      const { ip, port } = bed.extprocAddress();
      await bed.waitForExtprocHost(`${ip}:${port}`);
      const back = await bed.send(chat('chat'));
      assert.equal(back.status, 200, back.text());
    });

    void it('FailOpen (gateway.envoyGateway.failOpen): with llm-extproc down, requests go on unpicked to ready endpoints of the route', async () => {
      const defaults = bed.installedValues;
      // FailOpen suits a route whose Service selects one pool's pods: unpicked requests go to any
      // ready endpoint of it (docs/gateways.md). Here: the chat pods only.
      const chatOnly = new Map([...bed.pods.values()].filter((p) => p.pool !== 'chat').map((p) => [p.pod.name, 'absent' as const]));
      await bed.install(deepMerge(defaults, { gateway: { envoyGateway: { failOpen: true } } }));
      await bed.writeModelEndpoints(chatOnly);
      try {
        await bed.waitForHosts(ROUTE_CLUSTER, (hosts) => hosts.size === 3, 'the chat pods only');
        await bed.extproc.kill();
        const served = new Set<string>();
        for (let i = 0; i < 6; i++) {
          const response = await bed.send(chat('chat', { messages: [{ role: 'user', content: `open ${i}` }] }));
          assert.equal(response.status, 200, response.text());
          served.add(servedBy(response));
        }
        // Without endpoints the extension policy is Invalid; with FailOpen Envoy Gateway drops the
        // filter from the route instead of answering 500.
        await bed.writeExtprocEndpoints('none');
        await bed.waitForRoute(
          (r) => !Object.keys(r.typed_per_filter_config ?? {}).some((k) => k.includes('ext_proc')),
          'no ext_proc filter',
        );
        const response = await bed.send(chat('chat'));
        assert.equal(response.status, 200, response.text());
        served.add(servedBy(response));
        assert.ok(
          [...served].every((id) => id === 'chat-a' || id === 'chat-b'),
          `served by ${[...served].join(', ')}`,
        );
        assert.equal(bed.server('chat-c').requests.length, 0, 'never the not-ready endpoint');
      } finally {
        await bed.install(defaults, { wait: false });
        await bed.writeModelEndpoints();
        await bed.startExtproc();
        await bed.waitForPoliciesAccepted();
        await bed.waitForProgrammed();
      }
      assert.equal((await bed.send(chat('chat'))).status, 200, 'picked again once llm-extproc is back');
    });
  });
});
