// End to end: real Envoy + llm-extproc (the real @kubernetes/client-node) against a real
// kube-apiserver and etcd (TLS, token auth, RBAC, admission, the watch cache). The tests play the
// kubelet: they create pods bound to a node and report readiness through the status subresource.
// Model servers listen on the pods' IPs (127.0.0.2-4, one port), as pods of one Deployment would.
//
// One control plane for the file; each test works in its own namespace. The API-server restart
// test runs last because it takes the shared server down and back up.

import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import type { TestContext } from 'node:test';
import { CustomObjectsApi } from '@kubernetes/client-node';
import { stringify as toYaml } from 'yaml';
import type { EndpointState } from '../../src/endpoints/model.js';
import { freePort } from '../support/free-ports.js';
import { startGateway } from '../support/gateway.js';
import { metricValue } from '../support/prometheus.js';
import type { Gateway } from '../support/gateway.js';
import type { ClientResponse } from '../support/http-client.js';
import { KubeControlPlane } from '../support/kube-control-plane.js';
import { FakeKubelet } from '../support/kube-kubelet.js';
import type { TestPod } from '../support/kube-kubelet.js';
import { startModelServer } from '../support/model-server.js';
import type { ModelServer } from '../support/model-server.js';
import { notReadyPod, readyPod } from '../support/pod-builders.js';
import { waitUntil } from '../support/wait-until.js';

const CHAT = '/v1/chat/completions';
const MODEL = 'llama-3-8b';
const LABELS = { app: 'vllm', model: 'llama' };
const REQUEST_ID_HEADER = 'x-test-request-id';
/** Propagation through a real API server on a loaded machine: generous, but bounded. */
const STATE_TIMEOUT_MS = 30_000;
const IPS = ['127.0.0.2', '127.0.0.3', '127.0.0.4'] as const;

let plane: KubeControlPlane;
let kubelet: FakeKubelet;

before(async () => {
  plane = await KubeControlPlane.start();
  kubelet = new FakeKubelet(plane.core());
  await plane.installInferencePoolCrd();
});

after(async () => {
  await plane?.stop();
});

// ---- model servers ---------------------------------------------------------------------------

/** One model server per IP, all on one port (free on every interface: free-ports.ts). */
async function startServers(t: TestContext, ids: readonly string[], models: readonly string[] = [MODEL]): Promise<ModelServer[]> {
  const port = await freePort();
  const started: ModelServer[] = [];
  t.after(() => Promise.all(started.map((s) => s.close())));
  for (const [i, id] of ids.entries()) started.push(await startModelServer({ id, host: IPS[i], port, models }));
  return started;
}

async function startExtproc(t: TestContext, kubernetes: object, servers: readonly ModelServer[]): Promise<Gateway> {
  const kubeconfigPath = await plane.writeKubeconfig(`kubeconfig-${Date.now()}-${Math.random().toString(16).slice(2)}.yaml`);
  const gateway = await startGateway({
    configYaml: toYaml({
      kubernetes: {
        kubeconfigPath,
        backoff: { initialMs: 100, maxMs: 1000 },
        timeouts: { listSeconds: 10, watchSeconds: 60 },
        ...kubernetes,
      },
    }),
    backendAddresses: servers.map((s) => s.address),
  });
  t.after(() => gateway.stop());
  return gateway;
}

// ---- requests and assertions -----------------------------------------------------------------

function chat(id: string, model = MODEL, stream = false): { path: string; body: object; headers: Record<string, string> } {
  return {
    path: CHAT,
    body: { model, stream, messages: [{ role: 'user', content: `request ${id}` }] },
    headers: { [REQUEST_ID_HEADER]: id },
  };
}

function posts(server: ModelServer): ModelServer['requests'] {
  return server.requests.filter((r) => r.method === 'POST');
}

function receiver(servers: readonly ModelServer[], id: string): ModelServer | undefined {
  return servers.find((s) => posts(s).some((r) => r.headers[REQUEST_ID_HEADER] === id));
}

/** `count` sequential requests; each must be a 200 from one of `allowed` (by server id). Returns counts per id. */
async function probe(
  gateway: Gateway,
  servers: readonly ModelServer[],
  tag: string,
  count: number,
  allowed: readonly string[],
  model = MODEL,
): Promise<Record<string, number>> {
  const counts: Record<string, number> = {};
  for (let i = 0; i < count; i++) {
    const id = `${tag}-${i}`;
    const response = await gateway.send(chat(id, model));
    assert.equal(response.status, 200, `${id}: ${response.text()}`);
    const by = receiver(servers, id);
    assert.ok(by !== undefined, `${id} answered 200 but no model server received it`);
    assert.equal(response.headers['x-model-server-id'], by.id);
    assert.ok(allowed.includes(by.id), `${id} went to ${by.id}; allowed: ${allowed.join(', ')}`);
    counts[by.id] = (counts[by.id] ?? 0) + 1;
  }
  return counts;
}

/** Sends requests until one reaches `target`; each must be a 200 from one of `allowed`. */
async function probeUntil(
  gateway: Gateway,
  servers: readonly ModelServer[],
  tag: string,
  target: string,
  allowed: readonly string[],
  model = MODEL,
): Promise<void> {
  // Bounded by time, not by a count: a pod that just became Ready is not preferred until its
  // first metrics scrape (one interval) while its peers report load, and a loaded machine can
  // serve many requests within that interval.
  const deadline = Date.now() + STATE_TIMEOUT_MS;
  for (let i = 0; Date.now() < deadline; i++) {
    const counts = await probe(gateway, servers, `${tag}-${i}`, 1, allowed, model);
    if (counts[target] === 1) return;
  }
  assert.fail(`no request reached ${target} within ${STATE_TIMEOUT_MS} ms`);
}

function assertJsonError(response: ClientResponse, context: string): { code: string } {
  assert.match(response.headers['content-type'] ?? '', /^application\/json/, `${context}: ${response.status} ${response.text()}`);
  const error = (response.json() as { error?: { code?: unknown; message?: unknown } }).error;
  assert.equal(typeof error?.code, 'string', `${context}: ${response.text()}`);
  assert.equal(typeof error?.message, 'string', `${context}: ${response.text()}`);
  return error as { code: string };
}

function stateOf(gateway: Gateway, pool: string, pod: TestPod): EndpointState | undefined {
  return gateway.app.store
    .view()
    .pools.get(pool)
    ?.endpoints.find((e) => e.id === `${pod.namespace}/${pod.name}`)?.state;
}

async function waitForState(gateway: Gateway, pool: string, pod: TestPod, state: EndpointState | undefined): Promise<void> {
  await waitUntil(() => (stateOf(gateway, pool, pod) === state ? true : undefined), {
    description: `${pod.namespace}/${pod.name} ${state ?? 'absent'} in pool ${pool} (now ${stateOf(gateway, pool, pod) ?? 'absent'})`,
    timeoutMs: STATE_TIMEOUT_MS,
  });
}

function pods(namespace: string, names: readonly string[], labels: Record<string, string> = LABELS): TestPod[] {
  return names.map((name, i) => ({ name, namespace, labels, ip: IPS[i] ?? '' }));
}

// ---- tests -----------------------------------------------------------------------------------

void describe('Kubernetes endpoints from a real kube-apiserver through a real Envoy', () => {
  void it('routes only to pods the kubelet reports Ready: not-ready container, Ready → NotReady under an in-flight stream, terminating, pod IP reused', async (t) => {
    const ns = 'e2e-pods';
    const pool = 'llama';
    await plane.createNamespace(ns);
    const [a, b, c] = pods(ns, ['vllm-a', 'vllm-b', 'vllm-c']) as [TestPod, TestPod, TestPod];
    const servers = await startServers(t, ['pod-a', 'pod-b', 'pod-c']);
    const [serverA, serverB] = servers as [ModelServer, ModelServer, ModelServer];
    await kubelet.createPod(a, readyPod);
    await kubelet.createPod(b, notReadyPod);
    await kubelet.createPod(c, readyPod);
    const gateway = await startExtproc(
      t,
      { pools: [{ name: pool, namespace: ns, selector: LABELS, targetPort: serverA.port, models: [MODEL] }] },
      servers,
    );

    // 1. b is Running but its container is not ready: it never gets traffic.
    await waitForState(gateway, pool, b, 'NotReady');
    assert.deepEqual(
      gateway.app.store
        .view()
        .pools.get(pool)
        ?.endpoints.map((e) => [e.id, e.address, e.state]),
      [
        [`${ns}/vllm-a`, `127.0.0.2:${serverA.port}`, 'Ready'],
        [`${ns}/vllm-b`, `127.0.0.3:${serverA.port}`, 'NotReady'],
        [`${ns}/vllm-c`, `127.0.0.4:${serverA.port}`, 'Ready'],
      ],
    );
    await probe(gateway, servers, 'not-ready', 20, ['pod-a', 'pod-c']);
    assert.equal(posts(serverB).length, 0, 'the not-ready pod got a request');

    // 2. b turns ready and gets traffic.
    await kubelet.setStatus(b, readyPod);
    await waitForState(gateway, pool, b, 'Ready');
    await probeUntil(gateway, servers, 'ready', 'pod-b', ['pod-a', 'pod-b', 'pod-c']);

    // 3. A slow stream is running on b when its readiness probe starts failing: new requests stop
    //    reaching b, and the running stream still finishes.
    serverB.setBehavior({ kind: 'slow-chunks', delayMs: 1000 });
    let stream: Promise<ClientResponse> | undefined;
    let streamDone = false;
    for (let i = 0; i < 100 && stream === undefined; i++) {
      const id = `stream-${i}`;
      let firstChunk: () => void = () => undefined;
      const started = new Promise<void>((resolve) => (firstChunk = resolve));
      const pending = gateway.send({ ...chat(id, MODEL, true), timeoutMs: 60_000, onData: () => firstChunk() });
      await Promise.race([started, pending]);
      if (receiver(servers, id) === serverB) {
        stream = pending.finally(() => (streamDone = true));
      } else {
        assert.equal((await pending).status, 200);
      }
    }
    assert.ok(stream !== undefined, 'no stream reached pod b');
    await kubelet.setStatus(b, notReadyPod);
    await waitForState(gateway, pool, b, 'NotReady');
    assert.equal(streamDone, false, 'the stream finished before the NotReady status arrived: cannot tell anything');
    const toBBefore = posts(serverB).length;
    await probe(gateway, servers, 'after-not-ready', 10, ['pod-a', 'pod-c']);
    assert.equal(posts(serverB).length, toBBefore, 'a new request reached b after it turned NotReady');
    const streamed = await stream;
    assert.equal(streamed.status, 200);
    assert.equal(streamed.error, undefined, 'the in-flight stream broke off');
    assert.match(streamed.text(), /data: \[DONE\]\s*$/, 'the in-flight stream did not finish');
    serverB.setBehavior({ kind: 'ok' });

    // 4. c's deletion is requested: the API server marks it Terminating (the kubelet has not
    //    stopped it yet) and it gets no new request; then it leaves the API and the view.
    await kubelet.setStatus(b, readyPod);
    await kubelet.requestDeletion(c);
    await waitForState(gateway, pool, c, 'Terminating');
    await probe(gateway, servers, 'terminating', 10, ['pod-a', 'pod-b']);
    await kubelet.finishDeletion(c);
    await waitForState(gateway, pool, c, undefined);

    // 5. Pod IP reuse: a is terminating and its IP goes to a new pod d (a new process on the same
    //    address). d gets traffic only once Ready, and keeps it after a is gone.
    await kubelet.requestDeletion(a);
    await waitForState(gateway, pool, a, 'Terminating');
    await serverA.close();
    const serverD = await startModelServer({ id: 'pod-d', host: IPS[0], port: serverA.port, models: [MODEL] });
    t.after(() => serverD.close());
    const all = [...servers, serverD];
    const d: TestPod = { name: 'vllm-d', namespace: ns, labels: LABELS, ip: IPS[0] };
    await kubelet.createPod(d, notReadyPod);
    await waitForState(gateway, pool, d, 'NotReady');
    await probe(gateway, all, 'ip-reused-not-ready', 10, ['pod-b']);
    assert.equal(posts(serverD).length, 0, 'the new pod got traffic before it was Ready');
    await kubelet.setStatus(d, readyPod);
    await waitForState(gateway, pool, d, 'Ready');
    await probeUntil(gateway, all, 'ip-reused-ready', 'pod-d', ['pod-b', 'pod-d']);
    await kubelet.finishDeletion(a);
    await waitForState(gateway, pool, a, undefined);
    assert.equal(stateOf(gateway, pool, d), 'Ready');
    await probeUntil(gateway, all, 'ip-reused-old-gone', 'pod-d', ['pod-b', 'pod-d']);
  });

  void it('follows InferencePools as they are added, changed and deleted', async (t) => {
    const ns = 'e2e-pools';
    await plane.createNamespace(ns);
    const [x, y] = [
      { name: 'vllm-x', namespace: ns, labels: { app: 'vllm', variant: 'x' }, ip: IPS[0] },
      { name: 'vllm-y', namespace: ns, labels: { app: 'vllm', variant: 'y' }, ip: IPS[1] },
    ] as const;
    const servers = await startServers(t, ['pod-x', 'pod-y'], ['m1', 'm2']);
    const port = servers[0]?.port ?? 0;
    await kubelet.createPod(x, readyPod);
    await kubelet.createPod(y, readyPod);
    const gateway = await startExtproc(t, { pools: [], inferencePools: { enabled: true, namespaces: [ns] } }, servers);
    const custom = plane.kubeConfig().makeApiClient(CustomObjectsApi);
    const group = { group: 'inference.networking.k8s.io', version: 'v1', namespace: ns, plural: 'inferencepools' };
    const poolName = `${ns}/chat`;
    const inferencePool = (variant: string, models: string): object => ({
      apiVersion: 'inference.networking.k8s.io/v1',
      kind: 'InferencePool',
      metadata: { name: 'chat', namespace: ns, annotations: { 'llm-extproc.io/models': models } },
      spec: {
        selector: { matchLabels: { app: 'vllm', variant } },
        targetPorts: [{ number: port }],
        endpointPickerRef: { name: 'llm-extproc', port: { number: 9002 } },
      },
    });

    // Before any InferencePool: the model is unknown, and nothing reaches a model server.
    const unknown = await gateway.send(chat('before', 'm1'));
    assert.equal(assertJsonError(unknown, 'before the pool').code, 'model_not_found');

    // Added: its selector picks x.
    await custom.createNamespacedCustomObject({ ...group, body: inferencePool('x', 'm1') });
    await waitForState(gateway, poolName, x, 'Ready');
    assert.deepEqual(await probe(gateway, servers, 'added', 5, ['pod-x'], 'm1'), { 'pod-x': 5 });

    // Changed: another selector (now y) and one more model name, through the API's own validation.
    const current = (await custom.getNamespacedCustomObject({ ...group, name: 'chat' })) as { metadata: { resourceVersion: string } };
    const changed = inferencePool('y', 'm1,m2') as { metadata: Record<string, unknown> };
    changed.metadata.resourceVersion = current.metadata.resourceVersion;
    await custom.replaceNamespacedCustomObject({ ...group, name: 'chat', body: changed });
    await waitForState(gateway, poolName, y, 'Ready');
    await waitForState(gateway, poolName, x, undefined);
    assert.deepEqual(await probe(gateway, servers, 'changed-m1', 5, ['pod-y'], 'm1'), { 'pod-y': 5 });
    assert.deepEqual(await probe(gateway, servers, 'changed-m2', 5, ['pod-y'], 'm2'), { 'pod-y': 5 });

    // An invalid change is refused by the API server (CRD schema validation), so the pool stays.
    await assert.rejects(
      custom.patchNamespacedCustomObject({ ...group, name: 'chat', body: [{ op: 'replace', path: '/spec/targetPorts', value: [] }] }),
      (err: { code?: number }) => err.code === 422,
    );

    // Deleted: the pool and its models go away; requests get a JSON error and reach no server.
    const before = servers.reduce((n, s) => n + posts(s).length, 0);
    await custom.deleteNamespacedCustomObject({ ...group, name: 'chat' });
    await waitUntil(() => (gateway.app.store.view().pools.has(poolName) ? undefined : true), {
      description: 'pool removed',
      timeoutMs: STATE_TIMEOUT_MS,
    });
    const gone = await gateway.send(chat('deleted', 'm1'));
    assert.equal(assertJsonError(gone, 'after deletion').code, 'model_not_found');
    assert.equal(
      servers.reduce((n, s) => n + posts(s).length, 0),
      before,
    );
  });

  void it('keeps routing correctly while the API server restarts, then resumes watching', async (t) => {
    const ns = 'e2e-restart';
    const pool = 'llama';
    await plane.createNamespace(ns);
    const [a, b, c] = pods(ns, ['vllm-a', 'vllm-b', 'vllm-c']) as [TestPod, TestPod, TestPod];
    const servers = await startServers(t, ['pod-a', 'pod-b', 'pod-c']);
    await kubelet.createPod(a, readyPod);
    await kubelet.createPod(b, readyPod);
    await kubelet.createPod(c, notReadyPod);
    const gateway = await startExtproc(
      t,
      { pools: [{ name: pool, namespace: ns, selector: LABELS, targetPort: servers[0]?.port ?? 0, models: [MODEL] }] },
      servers,
    );
    await waitForState(gateway, pool, c, 'NotReady');

    // Steady traffic the whole time the API server is down and coming back.
    let running = true;
    const outcomes: Array<{ id: string; response: ClientResponse }> = [];
    const worker = async (w: number): Promise<void> => {
      for (let i = 0; running; i++) {
        const id = `restart-${w}-${i}`;
        outcomes.push({ id, response: await gateway.send({ ...chat(id), timeoutMs: 20_000 }) });
      }
    };
    const workers = [worker(0), worker(1)];
    try {
      await plane.stopApiserver();
      // Watches fail and reconnects are refused; llm-extproc keeps its last view meanwhile.
      await waitUntil(
        async () => (metricValue(await gateway.metricsText(), 'llm_extproc_kubernetes_watch_restarts_total') > 0 ? true : undefined),
        {
          description: 'a watch restart counted while the API server is down',
          timeoutMs: STATE_TIMEOUT_MS,
        },
      );
      const during = outcomes.length;
      await waitUntil(() => (outcomes.length >= during + 20 ? true : undefined), {
        description: '20 requests while the API server is down',
        timeoutMs: STATE_TIMEOUT_MS,
      });
      await plane.startApiserver();
    } finally {
      running = false;
      await Promise.all(workers);
    }
    for (const { id, response } of outcomes) {
      assert.equal(response.status, 200, `${id}: ${response.text()}`);
      assert.ok(['pod-a', 'pod-b'].includes(receiver(servers, id)?.id ?? ''), `${id} went to ${receiver(servers, id)?.id ?? 'nobody'}`);
    }
    t.diagnostic(`${outcomes.length} requests while the API server restarted, all served by ready pods`);

    // The watch is back: changes made after the restart arrive.
    await kubelet.setStatus(c, readyPod);
    await waitForState(gateway, pool, c, 'Ready');
    await probeUntil(gateway, servers, 'after-restart', 'pod-c', ['pod-a', 'pod-b', 'pod-c']);
    await kubelet.setStatus(a, notReadyPod);
    await waitForState(gateway, pool, a, 'NotReady');
    await probe(gateway, servers, 'after-restart-not-ready', 10, ['pod-b', 'pod-c']);
  });
});
