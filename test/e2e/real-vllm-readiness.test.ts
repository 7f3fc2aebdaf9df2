// A real vLLM pod while it loads, behind a real kube-apiserver, Envoy and llm-extproc. The test
// plays the kubelet: it creates the pod Running but not Ready, probes vLLM's /health as the
// pod's readiness probe would (docs/kubernetes.md), and reports Ready on the first 200. What must
// hold: vLLM's /health does not answer before the model is loaded (so that probe is the right
// one), every request while it loads gets llm-extproc's `no_ready_replica` naming the pod's state
// (never a connect error or a hang), and the first request after Ready is answered by vLLM.

import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { stringify as toYaml } from 'yaml';
import { startGateway, type Gateway } from '../support/gateway.js';
import type { ClientResponse } from '../support/http-client.js';
import { KubeControlPlane } from '../support/kube-control-plane.js';
import { FakeKubelet, type TestPod } from '../support/kube-kubelet.js';
import { notReadyPod, readyPod } from '../support/pod-builders.js';
import { launchVllmServer, vllmInstall, vllmUnavailable, VLLM_MODEL, type VllmServer } from '../support/vllm-server.js';
import { waitUntil } from '../support/wait-until.js';

const unavailable = await vllmUnavailable();
const NAMESPACE = 'models';
const LABELS = { app: 'vllm' };
/** The pod's IP: its own loopback address, as a pod has its own IP. */
const POD_IP = '127.0.0.2';

/** What a readiness probe of GET /health saw, in order, repeats collapsed. */
type ProbeResult = 'refused' | `HTTP ${number}`;

async function probeHealth(server: VllmServer): Promise<ProbeResult> {
  try {
    return `HTTP ${(await server.get('/health')).status}`;
  } catch {
    return 'refused';
  }
}

describe('a real vLLM pod while it loads its model (real kube-apiserver)', { skip: unavailable }, () => {
  let plane: KubeControlPlane | undefined;
  let server: VllmServer | undefined;
  let gateway: Gateway | undefined;

  before(async () => {
    // The control plane starts while vLLM loads: neither waits for the other.
    const [started, launched] = await Promise.all([
      KubeControlPlane.start(),
      vllmInstall().then((install) => launchVllmServer(install, { id: 'loading', host: POD_IP })),
    ]);
    plane = started;
    server = launched;
  });

  after(async () => {
    await gateway?.stop();
    await server?.stop();
    await plane?.stop();
  });

  it('gets no_ready_replica while vLLM loads, and vLLM answers from the first request after its /health says 200', async () => {
    assert.ok(plane !== undefined && server !== undefined);
    const vllm = server;
    const kubelet = new FakeKubelet(plane.core());
    await plane.createNamespace(NAMESPACE);
    const pod: TestPod = { name: 'vllm-0', namespace: NAMESPACE, labels: LABELS, ip: POD_IP };
    await kubelet.createPod(pod, notReadyPod);
    const kubeconfigPath = await plane.writeKubeconfig('kubeconfig-readiness.yaml');
    gateway = await startGateway({
      configYaml: toYaml({
        kubernetes: {
          kubeconfigPath,
          backoff: { initialMs: 100, maxMs: 1000 },
          pools: [{ name: 'tiny', namespace: NAMESPACE, selector: LABELS, targetPort: vllm.port, models: [VLLM_MODEL] }],
        },
      }),
      backendAddresses: [vllm.address],
      // vLLM loads on the same two cores as Envoy and llm-extproc; the ext_proc timeout is not tested here.
      envoy: { messageTimeoutMs: 5000 },
    });
    const g = gateway;

    // The readiness probe, every 250 ms: Ready on the first 200, as the kubelet reports it. Each
    // time it fails, a client request; what it got is checked below (a throw here would only
    // count as "not yet").
    const seen: ProbeResult[] = [];
    const whileLoading: ClientResponse[] = [];
    const request = {
      path: '/v1/chat/completions',
      body: { model: VLLM_MODEL, messages: [{ role: 'user', content: 'hi' }], max_tokens: 4 },
    };
    await waitUntil(
      async () => {
        const result = await probeHealth(vllm);
        if (seen.at(-1) !== result) seen.push(result);
        if (result === 'HTTP 200') return true;
        whileLoading.push(await g.send(request));
        return undefined;
      },
      { description: 'vLLM to answer its readiness probe', timeoutMs: 6 * 60_000, intervalMs: 250 },
    );
    // vLLM 0.32 opens its port only once the engine is ready: the probe sees refusals, then 200.
    assert.deepEqual(seen, ['refused', 'HTTP 200']);
    assert.ok(whileLoading.length >= 3, `only ${whileLoading.length} requests were made while vLLM loaded`);
    for (const response of whileLoading) {
      // A client gets llm-extproc's answer at once, naming why.
      assert.equal(response.status, 503, response.text());
      const error = (response.json() as { error: { code: string; message: string; replicas: Record<string, number> } }).error;
      assert.equal(error.code, 'no_ready_replica');
      assert.equal(error.replicas['not_ready'], 1, JSON.stringify(error));
      assert.match(error.message, /not ready/i);
      assert.ok(Number(response.headers['retry-after']) > 0);
    }

    await kubelet.setStatus(pod, readyPod);
    await waitUntil(() => (g.app.store.view().pools.get('tiny')?.endpoints[0]?.state === 'Ready' ? true : undefined), {
      description: 'the pod Ready in llm-extproc',
      timeoutMs: 30_000,
    });
    const response = await g.send(request);
    assert.equal(response.status, 200, response.text());
    const answer = response.json() as { model: string; choices: Array<{ message: { role: string } }> };
    assert.equal(answer.model, VLLM_MODEL);
    assert.equal(answer.choices[0].message.role, 'assistant');
  });
});
