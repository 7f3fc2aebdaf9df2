// Issue 18, failure modes under the real Istio control plane (see live-istio.test.ts for the bed):
// llm-extproc draining at SIGTERM, a pod the gateway's cluster holds as unhealthy while llm-extproc
// sees it Ready, picks the gateway's cluster does not hold, and llm-extproc down with the
// InferencePool's FailClose (the chart's default) and FailOpen, as Istio implements them.

import assert from 'node:assert/strict';
import { createHash } from 'node:crypto';
import { after, before, describe, it } from 'node:test';
import type { V1EndpointSlice } from '@kubernetes/client-node';
import { assertCatalogError } from '../support/catalog-assert.js';
import { metricValue } from '../support/prometheus.js';
import type { ClientRequest, ClientResponse } from '../support/http-client.js';
import { IstioBed, MODEL, MODELS_NS, TARGET_PORT } from '../support/istio-bed.js';
import { podNetworkUnavailable } from '../support/pod-network.js';
import { waitUntil } from '../support/wait-until.js';

const CHAT = '/v1/chat/completions';
const chat = (content = 'hi'): ClientRequest => ({ path: CHAT, body: { model: MODEL, messages: [{ role: 'user', content }] } });
const digest = (b: Buffer): string => createHash('sha256').update(b).digest('hex');

void describe('live Istio: failure modes', { skip: podNetworkUnavailable() }, () => {
  let bed: IstioBed;
  const endpoint = (name: string): string => `${bed.pods.get(name)!.ip}:${TARGET_PORT}`;

  before(async () => {
    bed = await IstioBed.start({
      name: 'failures',
      values: { debugEndpoints: true, config: { quarantine: { consecutiveFailures: 1000 } } },
      modelPods: [{ name: 'a' }, { name: 'b' }],
    });
  });

  after(async () => {
    await bed?.stop();
  });

  /** The slices as the endpoint controller writes them, with `patch` applied to the pool's endpoints. */
  const poolSlice =
    (patch: (endpoints: NonNullable<V1EndpointSlice['endpoints']>) => V1EndpointSlice['endpoints']) =>
    (slice: V1EndpointSlice): V1EndpointSlice =>
      slice.metadata?.labels?.['kubernetes.io/service-name']?.includes('-ip-') === true
        ? { ...slice, endpoints: patch(slice.endpoints ?? []) }
        : slice;

  void it('a pod Ready for llm-extproc but unhealthy in the gateway cluster still gets the requests picked for it (override_host ignores EDS health)', async () => {
    // The endpoint controller (or a readiness gate only it sees) says a is not ready; the Pod says Ready.
    await bed.slices.reconcile(
      MODELS_NS,
      poolSlice((eps) =>
        eps.map((e) => (e.targetRef?.name === 'a' ? { ...e, conditions: { ready: false, serving: false, terminating: false } } : e)),
      ),
    );
    try {
      await bed.waitForPoolHosts((hosts) => hosts.get(endpoint('a')) === '/failed_eds_health', 'a unhealthy');
      const before = await bed.pickerMetrics();
      const served = new Set<string>();
      for (let i = 0; i < 10; i++) {
        const response = await bed.send(chat(`unhealthy ${i}`));
        assert.equal(response.status, 200, response.text());
        served.add(response.headers['x-model-server-id'] ?? '');
      }
      // Envoy routes to our pick whatever its EDS health says: the picker's view of the pods decides.
      assert.ok(served.has('a'), `a still served the requests picked for it (served: ${[...served].join(',')})`);
      const after = await bed.pickerMetrics();
      const delta = (name: string, labels: Record<string, string> = {}): number =>
        metricValue(after, name, labels) - metricValue(before, name, labels);
      assert.equal(
        delta('llm_extproc_upstream_attempts_total', { outcome: 'success' }),
        10,
        'every answer recorded as a success of the replica that served it',
      );
      assert.equal(delta('llm_extproc_served_outside_pick_total'), 0, 'the served host was always our pick');
    } finally {
      await bed.slices.reconcile(MODELS_NS);
      await bed.waitForPoolHosts((hosts) => hosts.get(endpoint('a')) === 'healthy', 'a healthy again');
    }
  });

  void it('picks the gateway cluster does not hold are skipped; with none held, Envoy falls back and llm-extproc counts it served outside its pick', async () => {
    // A new Ready pod the endpoint controller has not written yet: llm-extproc sees it, Envoy does not.
    const d = await bed.addModelPod({ name: 'd' }, 20);
    await waitUntil(
      async () => {
        const text = await (await fetch(`${bed.pickers[0].opsUrl}/debug/endpoints`)).text();
        return text.includes(d.address) ? true : undefined;
      },
      { description: 'llm-extproc to see pod d', timeoutMs: 30_000, intervalMs: 100 },
    );
    for (let i = 0; i < 6; i++) {
      const response = await bed.send(chat(`unknown host ${i}`));
      assert.equal(response.status, 200, response.text());
      assert.match(response.headers['x-model-server-id'] ?? '', /^[ab]$/);
    }
    assert.equal(d.requests.length, 0, 'Envoy cannot route to a host its cluster lacks');

    // Now a and b go NotReady for llm-extproc while the gateway's slice is stale (still ready):
    // every pick is d, which Envoy lacks, so override_host's fallback (round robin) chooses.
    const before = await bed.pickerMetrics();
    for (const name of ['a', 'b']) await bed.setModelPodReady(name, false, { endpointController: false });
    await bed.slices.reconcile(
      MODELS_NS,
      poolSlice((eps) =>
        eps.filter((e) => e.targetRef?.name !== 'd').map((e) => ({ ...e, conditions: { ready: true, serving: true, terminating: false } })),
      ),
    );
    try {
      await waitUntil(
        async () => {
          const text = await (await fetch(`${bed.pickers[0].opsUrl}/debug/endpoints`)).text();
          return /NotReady/.test(text) ? true : undefined;
        },
        { description: 'llm-extproc to see a and b NotReady', timeoutMs: 30_000, intervalMs: 100 },
      );
      await bed.waitForPoolHosts(
        (hosts) => hosts.get(endpoint('a')) === 'healthy' && hosts.get(endpoint('b')) === 'healthy' && !hosts.has(d.address),
        'the stale view: a and b healthy, d unknown',
      );
      const responses: ClientResponse[] = [];
      for (let i = 0; i < 4; i++) responses.push(await bed.send(chat(`fallback ${i}`)));
      for (const response of responses) {
        assert.equal(response.status, 200, response.text());
        assert.match(response.headers['x-model-server-id'] ?? '', /^[ab]$/, 'served by a host Envoy holds, chosen by its fallback policy');
      }
      const after = await bed.pickerMetrics();
      assert.equal(
        metricValue(after, 'llm_extproc_served_outside_pick_total') - metricValue(before, 'llm_extproc_served_outside_pick_total'),
        4,
        'each answer from outside our list is counted',
      );
      assert.equal(
        metricValue(after, 'llm_extproc_upstream_attempts_total', { endpoint: d.address, outcome: 'success' }),
        0,
        'nothing recorded as a success of the pick that was never used',
      );
    } finally {
      for (const name of ['a', 'b']) await bed.setModelPodReady(name, true);
      await bed.terminateModelPod('d');
      await bed.waitForPoolHosts(
        (hosts) => hosts.get(endpoint('a')) === 'healthy' && hosts.get(endpoint('b')) === 'healthy' && !hosts.has(d.address),
      );
    }
  });

  void it('llm-extproc draining at SIGTERM: streams in flight finish byte-identical, new requests go to the other replica', async () => {
    assert.equal(bed.pickers.length, 2, 'the chart runs two replicas');
    for (const name of ['a', 'b']) bed.server(name).setBehavior({ kind: 'paced-random-sse', events: 16, gapMs: 250, bytesPerEvent: 256 });
    let drainingIndex = 0;
    try {
      const streams = Array.from({ length: 4 }, (_, i) =>
        bed.send({ path: CHAT, body: { model: MODEL, stream: true, messages: [{ role: 'user', content: `s${i}` }] } }),
      );
      // The replica to drain is one that holds a stream: the gateway spreads ext_proc streams over
      // the two replicas as it likes, so four streams can all land on one of them.
      drainingIndex = await waitUntil(
        async () => {
          const inFlight = await Promise.all(
            bed.pickers.map(async (p) => metricValue(await (await fetch(`${p.opsUrl}/metrics`)).text(), 'llm_extproc_in_flight_requests')),
          );
          const holder = inFlight.findIndex((n) => n > 0);
          return holder < 0 ? undefined : holder;
        },
        { description: 'a stream in flight on a replica', timeoutMs: 10_000, intervalMs: 20 },
      );
      const draining = bed.pickers[drainingIndex];
      // Shutdown (a rollout, `kubectl delete pod`): SIGTERM; from then on /readyz fails, the kubelet
      // reports the pod not ready and the endpoint controller takes it out of the ready set.
      draining.process.signal('SIGTERM');
      await waitUntil(async () => ((await fetch(`${draining.opsUrl}/readyz`)).status === 503 ? true : undefined), {
        description: 'the draining replica to report not ready',
        timeoutMs: 10_000,
        intervalMs: 20,
      });
      await bed.setPickerReady(drainingIndex, false);
      for (let i = 0; i < 6; i++) {
        const response = await bed.send(chat(`during drain ${i}`));
        assert.equal(response.status, 200, response.text());
      }
      for (const response of await Promise.all(streams)) {
        assert.equal(response.status, 200);
        assert.equal(response.error, undefined, 'the stream in flight was not cut');
        const served = bed
          .server(response.headers['x-model-server-id'] ?? '')
          .requests.find((r) => digest(r.response.body) === digest(response.body));
        assert.ok(served !== undefined, 'the client got exactly what a model server sent');
      }
      const exit = await draining.process.exitWithin(60_000);
      assert.equal(exit.code, 0, 'drained and exited cleanly');
    } finally {
      for (const name of ['a', 'b']) bed.server(name).setBehavior({ kind: 'ok' });
      await bed.restartPicker(drainingIndex);
    }
  });

  void it("llm-extproc down with FailClose (the default): nothing routed, and the chart's EnvoyFilter makes Istio's reply gateway_unavailable JSON", async () => {
    const counts = () => bed.server('a').requests.length + bed.server('b').requests.length;
    const before = counts();
    await Promise.all(bed.pickers.map((p) => p.process.kill()));
    try {
      // Without the EnvoyFilter (gateway.inferencePool.istio.gateways empty) this is Envoy's 500 with an empty body.
      const response = assertCatalogError(await bed.send(chat('picker down')), 'gateway_unavailable');
      assert.match(response.error.message, /routing service/);
      assert.equal(counts(), before, 'fail closed: nothing routed without the picker');
    } finally {
      for (let i = 0; i < bed.pickers.length; i++) await bed.restartPicker(i);
    }
    assert.equal((await bed.send(chat('picker back'))).status, 200);
  });

  void it('llm-extproc down with FailOpen: Istio still fails closed once a request body went to the processor (full duplex); bodyless requests fail open', async () => {
    await bed.upgrade({ config: { quarantine: { consecutiveFailures: 1000 } }, gateway: { inferencePool: { failureMode: 'FailOpen' } } });
    await waitUntil(async () => ((await bed.routeExtProcOverrides())?.['failure_mode_allow'] === true ? true : undefined), {
      description: 'istiod to push the FailOpen route',
      timeoutMs: 60_000,
      intervalMs: 200,
    });
    const counts = () => bed.server('a').requests.length + bed.server('b').requests.length;
    await Promise.all(bed.pickers.map((p) => p.process.kill()));
    try {
      const before = counts();
      // Envoy 1.40 cannot fail open under FULL_DUPLEX_STREAMED after it streamed body chunks to the
      // processor: it answers its own 500 (docs/gateways.md; the chart's NOTES warn about FailOpen),
      // which the chart's EnvoyFilter turns into catalog JSON.
      assertCatalogError(await bed.send(chat('fail open')), 'gateway_unavailable');
      assert.equal(counts(), before, 'nothing routed');
      // Without a body the filter does fail open: Envoy's own balancer picks a healthy host.
      const models = await bed.send({ path: '/v1/models' });
      assert.equal(models.status, 200, models.text());
      assert.match(models.headers['x-model-server-id'] ?? '', /^[ab]$/);
    } finally {
      for (let i = 0; i < bed.pickers.length; i++) await bed.restartPicker(i);
      await bed.upgrade({ config: { quarantine: { consecutiveFailures: 1000 } } });
    }
  });
});
