// End to end: real Envoy + our server with the Kubernetes source (the real
// @kubernetes/client-node) against the fake API server, and real model servers bound on the
// pods' IPs (127.0.0.2-4, all on one port, as pods of one Deployment would be).

import assert from 'node:assert/strict';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, it } from 'node:test';
import type { TestContext } from 'node:test';
import { stringify as toYaml } from 'yaml';
import type { EndpointState, EndpointView } from '../../src/endpoints/model.js';
import { EXT_PROC_SERVICE_NAME } from '../support/proto-definitions.js';
import { FakeKubeApi, podsPath, writeKubeconfig } from '../support/fake-kube-api.js';
import { freePort } from '../support/free-ports.js';
import { startGateway } from '../support/gateway.js';
import { metricValue } from '../support/prometheus.js';
import type { Gateway } from '../support/gateway.js';
import { healthClient } from '../support/grpc-health-client.js';
import type { ClientResponse } from '../support/http-client.js';
import { startModelServer } from '../support/model-server.js';
import type { ModelServer } from '../support/model-server.js';
import { notReadyPod, readyPod, startingPod, terminatingPod } from '../support/pod-builders.js';
import type { PodJson, PodOptions } from '../support/pod-builders.js';
import { waitUntil } from '../support/wait-until.js';

const CHAT = '/v1/chat/completions';
const MODEL = 'llama-3-8b';
const POOL = 'llama';
const NS = 'models';
const LABELS = { app: 'vllm', model: 'llama' };
const REQUEST_ID_HEADER = 'x-test-request-id';

/** The three pods of the pool: name, IP, and the id of the model server bound on that IP. */
const PODS = {
  a: { name: 'vllm-a', ip: '127.0.0.2', server: 'pod-a' },
  b: { name: 'vllm-b', ip: '127.0.0.3', server: 'pod-b' },
  c: { name: 'vllm-c', ip: '127.0.0.4', server: 'pod-c' },
} as const;

type PodKey = keyof typeof PODS;
const POD_KEYS = Object.keys(PODS) as PodKey[];

interface Cluster {
  readonly api: FakeKubeApi;
  readonly gateway: Gateway;
  readonly servers: Readonly<Record<PodKey, ModelServer>>;
  /** The pod `key` as `builder` makes it, with its name, namespace, labels and IP. */
  pod(builder: (o: PodOptions) => PodJson, key: PodKey): PodJson;
}

interface ClusterOptions {
  /** Pods present before the gateway starts. */
  readonly pods?: ReadonlyArray<readonly [(o: PodOptions) => PodJson, PodKey]>;
  /** Start with the API server unreachable (and do not wait for the cache to sync). */
  readonly apiUnavailable?: boolean;
}

function podOf(builder: (o: PodOptions) => PodJson, key: PodKey): PodJson {
  return builder({ name: PODS[key].name, namespace: NS, labels: { ...LABELS }, ip: PODS[key].ip });
}

/** One model server per pod IP, all on one port (free on every interface: free-ports.ts). */
async function startPodServers(): Promise<Record<PodKey, ModelServer>> {
  const port = await freePort();
  const started: ModelServer[] = [];
  try {
    for (const key of POD_KEYS) started.push(await startModelServer({ id: PODS[key].server, host: PODS[key].ip, port, models: [MODEL] }));
  } catch (err) {
    await Promise.all(started.map((s) => s.close()));
    throw err;
  }
  const [a, b, c] = started as [ModelServer, ModelServer, ModelServer];
  return { a, b, c };
}

function kubernetesYaml(kubeconfigPath: string, targetPort: number): string {
  return toYaml({
    kubernetes: {
      kubeconfigPath,
      pools: [{ name: POOL, namespace: NS, selector: LABELS, targetPort, models: [MODEL] }],
      // Small backoff: reconnects after faults take tens of milliseconds, not seconds.
      backoff: { initialMs: 20, maxMs: 200 },
      timeouts: { listSeconds: 5, watchSeconds: 60 },
    },
  });
}

async function startCluster(t: TestContext, options: ClusterOptions = {}): Promise<Cluster> {
  const servers = await startPodServers();
  const api = await FakeKubeApi.start();
  const dir = await mkdtemp(join(tmpdir(), 'llm-extproc-kube-e2e-'));
  const release = async (): Promise<void> => {
    await api.stop();
    await Promise.all(Object.values(servers).map((s) => s.close()));
    await rm(dir, { recursive: true, force: true });
  };
  let gateway: Gateway;
  try {
    for (const [builder, key] of options.pods ?? []) api.upsertPod(podOf(builder, key));
    if (options.apiUnavailable === true) await api.setUnavailable(true);
    gateway = await startGateway({
      configYaml: kubernetesYaml(writeKubeconfig(dir, api), servers.a.port),
      backendAddresses: POD_KEYS.map((k) => servers[k].address),
      waitForSync: options.apiUnavailable !== true,
    });
  } catch (err) {
    await release();
    throw err;
  }
  // One hook, so Envoy and our server stop before the API server and model servers go away.
  t.after(async () => {
    await gateway.stop();
    await release();
  });
  return { api, gateway, servers, pod: podOf };
}

// ---- store view ------------------------------------------------------------------------------

function stateIn(view: EndpointView, key: PodKey): EndpointState | undefined {
  return view.pools.get(POOL)?.endpoints.find((e) => e.id === `${NS}/${PODS[key].name}`)?.state;
}

/** Waits until the store's view has every listed pod in the given state (`undefined`: absent). */
async function waitForStates(gateway: Gateway, expected: Partial<Record<PodKey, EndpointState | undefined>>): Promise<EndpointView> {
  return waitUntil(
    () => {
      const view = gateway.app.store.view();
      return Object.entries(expected).every(([key, state]) => stateIn(view, key as PodKey) === state) ? view : undefined;
    },
    { description: `store view ${JSON.stringify(expected)}` },
  );
}

// ---- requests --------------------------------------------------------------------------------

function chat(id: string, extra: Record<string, unknown> = {}): { path: string; body: object; headers: Record<string, string> } {
  return {
    path: CHAT,
    body: { model: MODEL, messages: [{ role: 'user', content: `request ${id}` }], ...extra },
    headers: { [REQUEST_ID_HEADER]: id },
  };
}

function inferenceRequests(server: ModelServer): ModelServer['requests'] {
  return server.requests.filter((r) => r.method === 'POST');
}

/** Which server received the request tagged `id` (each test request carries its own id). */
function receiverOf(cluster: Cluster, id: string): PodKey | undefined {
  return POD_KEYS.find((k) => inferenceRequests(cluster.servers[k]).some((r) => r.headers[REQUEST_ID_HEADER] === id));
}

interface GatewayErrorBody {
  error: { code: string; type: string; message: string; [detail: string]: unknown };
}

/** A structured OpenAI-style error: JSON content type and `{"error": {code, type, message}}`; never plain text. */
function assertStructuredError(response: ClientResponse, context: string): GatewayErrorBody['error'] {
  assert.match(
    response.headers['content-type'] ?? '',
    /^application\/json/,
    `${context}: content-type of ${response.status} ${response.text()}`,
  );
  let body: unknown;
  assert.doesNotThrow(() => (body = response.json()), `${context}: body is JSON: ${response.text()}`);
  const error = (body as Partial<GatewayErrorBody>).error;
  assert.ok(error !== undefined && typeof error === 'object', `${context}: has an error object: ${response.text()}`);
  assert.equal(typeof error.code, 'string', `${context}: error.code`);
  assert.equal(typeof error.type, 'string', `${context}: error.type`);
  assert.equal(typeof error.message, 'string', `${context}: error.message`);
  return error;
}

/**
 * A response is either a 200 from the server that really received the request (and one of
 * `allowed`), or a structured JSON error. Returns the pod that served it, if any.
 */
function checkResponse(cluster: Cluster, id: string, response: ClientResponse, allowed: readonly PodKey[]): PodKey | undefined {
  if (response.status !== 200) {
    assertStructuredError(response, `request ${id}`);
    return undefined;
  }
  const servedBy = receiverOf(cluster, id);
  assert.ok(servedBy !== undefined, `request ${id} answered 200 but no model server received it`);
  assert.equal(response.headers['x-model-server-id'], PODS[servedBy].server, `request ${id}: the answer comes from the server that got it`);
  assert.ok(allowed.includes(servedBy), `request ${id} went to ${servedBy}; allowed: ${allowed.join(', ')}`);
  return servedBy;
}

/** Sends `count` requests one after another; each must be a 200 from one of `allowed`. Returns counts per pod. */
async function probe(cluster: Cluster, tag: string, count: number, allowed: readonly PodKey[]): Promise<Record<PodKey, number>> {
  const counts: Record<PodKey, number> = { a: 0, b: 0, c: 0 };
  for (let i = 0; i < count; i++) {
    const id = `${tag}-${i}`;
    const response = await cluster.gateway.send(chat(id));
    assert.equal(response.status, 200, `probe ${id}: ${response.text()}`);
    const servedBy = checkResponse(cluster, id, response, allowed);
    if (servedBy !== undefined) counts[servedBy]++;
  }
  return counts;
}

/**
 * Sends requests until one reaches `target` (for up to `withinMs`); each must be a 200 from one of
 * `allowed`. Bounded by time, not a count: a pod that just became Ready is not preferred until its
 * first metrics scrape while its peers report load, and a loaded machine serves many requests
 * within one scrape interval.
 */
async function probeUntilServedBy(
  cluster: Cluster,
  tag: string,
  target: PodKey,
  allowed: readonly PodKey[],
  withinMs = 30_000,
): Promise<void> {
  const deadline = Date.now() + withinMs;
  for (let i = 0; Date.now() < deadline; i++) {
    const id = `${tag}-${i}`;
    const response = await cluster.gateway.send(chat(id));
    assert.equal(response.status, 200, `probe ${id}: ${response.text()}`);
    if (checkResponse(cluster, id, response, allowed) === target) return;
  }
  assert.fail(`no request reached pod ${target} within ${withinMs} ms`);
}

interface Outcome {
  readonly seq: number;
  readonly id: string;
  readonly response: ClientResponse | undefined;
  readonly failure: unknown;
}

/**
 * A steady flow of requests from a few concurrent clients, each request tagged with a
 * sequence number, so tests can tell which requests were sent after a given moment.
 */
class SteadyLoad {
  private nextSeq = 0;
  private running = true;
  readonly outcomes: Outcome[] = [];
  private readonly workers: Array<Promise<void>>;

  constructor(
    private readonly gateway: Gateway,
    private readonly tag: string,
    concurrency: number,
  ) {
    this.workers = Array.from({ length: concurrency }, () => this.work());
  }

  /** Sequence number the next request will get. */
  get nextRequestSeq(): number {
    return this.nextSeq;
  }

  idOf(seq: number): string {
    return `${this.tag}-${seq}`;
  }

  seqOf(id: string): number | undefined {
    return id.startsWith(`${this.tag}-`) ? Number(id.slice(this.tag.length + 1)) : undefined;
  }

  /** Resolves once `count` more requests have completed than had when called. */
  async completeMore(count: number): Promise<void> {
    const target = this.outcomes.length + count;
    await waitUntil(() => (this.outcomes.length >= target ? true : undefined), {
      description: `${count} more load requests`,
      timeoutMs: 20_000,
    });
  }

  async stop(): Promise<readonly Outcome[]> {
    this.running = false;
    await Promise.all(this.workers);
    return this.outcomes;
  }

  private async work(): Promise<void> {
    while (this.running) {
      const seq = this.nextSeq++;
      const id = this.idOf(seq);
      try {
        this.outcomes.push({ seq, id, response: await this.gateway.send({ ...chat(id), timeoutMs: 10_000 }), failure: undefined });
      } catch (failure) {
        this.outcomes.push({ seq, id, response: undefined, failure });
      }
    }
  }
}

/**
 * Every load response is a complete 200 from a server in `allowed`: some pod is Ready at every
 * moment of the flow, so no error (not even a well-formed JSON one) is acceptable.
 */
function checkOutcomes(cluster: Cluster, outcomes: readonly Outcome[], allowed: readonly PodKey[]): void {
  for (const outcome of outcomes) {
    assert.ok(outcome.response !== undefined, `load request ${outcome.id} got no HTTP response: ${String(outcome.failure)}`);
    assert.equal(outcome.response.error, undefined, `load request ${outcome.id}: the response broke off`);
    assert.equal(outcome.response.status, 200, `load request ${outcome.id}: ${outcome.response.text()}`);
    assert.ok(checkResponse(cluster, outcome.id, outcome.response, allowed) !== undefined);
  }
}

// ---- tests -----------------------------------------------------------------------------------

void describe('Kubernetes endpoints through a real Envoy', () => {
  void it('routes only to ready pods while pods turn ready and start terminating under steady traffic', async (t) => {
    const cluster = await startCluster(t, {
      pods: [
        [readyPod, 'a'],
        [notReadyPod, 'b'],
        [readyPod, 'c'],
      ],
    });
    const { api, gateway, servers } = cluster;

    // Every pod has its own IP and the pool's port, as Envoy's cluster lists them.
    const initial = gateway.app.store.view().pools.get(POOL);
    assert.deepEqual(
      initial?.endpoints.map((e) => [e.id, e.address, e.state]),
      POD_KEYS.map((k) => [`${NS}/${PODS[k].name}`, `${PODS[k].ip}:${servers.a.port}`, k === 'b' ? 'NotReady' : 'Ready']),
    );
    assert.equal(new Set(POD_KEYS.map((k) => servers[k].port)).size, 1, 'all model servers share one port');

    // What b had received at the moment the store first saw it Ready (must be nothing), and the
    // first request sequence number sent after the store saw it Terminating.
    let receivedByBWhenReady: number | undefined;
    let firstSeqAfterTerminating: number | undefined;
    const load = new SteadyLoad(gateway, 'load', 4);
    const unsubscribe = gateway.app.store.subscribe({
      viewChanged: (view) => {
        const state = stateIn(view, 'b');
        if (state === 'Ready') receivedByBWhenReady ??= inferenceRequests(servers.b).length;
        if (state === 'Terminating') firstSeqAfterTerminating ??= load.nextRequestSeq;
      },
    });
    let outcomes: readonly Outcome[];
    try {
      // 1. b is Running but its readiness probe fails: traffic goes to a and c only.
      await load.completeMore(20);
      await probe(cluster, 'not-ready', 20, ['a', 'c']);
      assert.equal(inferenceRequests(servers.b).length, 0, 'the not-ready pod got a request');

      // 2. b turns ready: it gets traffic.
      api.upsertPod(cluster.pod(readyPod, 'b'));
      await waitForStates(gateway, { a: 'Ready', b: 'Ready', c: 'Ready' });
      assert.equal(receivedByBWhenReady, 0, 'b received requests before the store saw it ready');
      await probeUntilServedBy(cluster, 'ready', 'b', ['a', 'b', 'c']);
      await load.completeMore(20);

      // 3. b's deletion is requested: no new request reaches it.
      api.setPodDeletionTimestamp(NS, PODS.b.name);
      await waitForStates(gateway, { a: 'Ready', b: 'Terminating', c: 'Ready' });
      await load.completeMore(40);
      await probe(cluster, 'terminating', 20, ['a', 'c']);
    } finally {
      outcomes = await load.stop();
      unsubscribe();
    }

    // Every response of the steady flow was a 200 from the server that got it.
    assert.ok(outcomes.length >= 80, 'the steady flow ran');
    checkOutcomes(cluster, outcomes, ['a', 'b', 'c']);
    t.diagnostic(`steady flow: ${outcomes.length} requests, all served`);
    const boundary = firstSeqAfterTerminating;
    assert.ok(boundary !== undefined);
    const lateToB = inferenceRequests(servers.b)
      .map((r) => load.seqOf(String(r.headers[REQUEST_ID_HEADER])))
      .filter((seq): seq is number => seq !== undefined && seq >= boundary);
    assert.deepEqual(lateToB, [], 'requests sent after the store saw b terminating reached b');

    // 4. b is gone from the API: it leaves the view.
    api.deletePod(NS, PODS.b.name);
    await waitForStates(gateway, { a: 'Ready', b: undefined, c: 'Ready' });
    await probe(cluster, 'deleted', 10, ['a', 'c']);
  });

  void it('answers 503 no_ready_replica JSON naming the states and reasons when no pod is ready', async (t) => {
    const cluster = await startCluster(t, {
      pods: [
        [startingPod, 'b'],
        [terminatingPod, 'a'],
      ],
    });
    const { api, gateway, servers } = cluster;
    await waitForStates(gateway, { a: 'Terminating', b: 'Starting' });

    const expected = {
      message:
        'model llama-3-8b has no ready replica: 2 pods — 1 starting (ContainerCreating: container model-server), ' +
        '1 terminating (pod is being deleted). Retry in about 15 s.',
      replicas: { ready: 0, pending: 0, starting: 1, not_ready: 0, crash_loop: 0, quarantined: 0, terminating: 1 },
    };
    for (const stream of [false, true]) {
      const response = await gateway.send(chat(`no-ready-${stream}`, { stream }));
      assert.equal(response.status, 503, response.text());
      assert.equal(response.headers['retry-after'], '15');
      const error = assertStructuredError(response, `no ready replica (stream: ${stream})`);
      assert.equal(error.code, 'no_ready_replica');
      assert.equal(error.type, 'service_unavailable_error');
      assert.equal(error.message, expected.message);
      assert.deepEqual(error.replicas, expected.replicas);
      assert.equal(error.model, MODEL);
    }
    assert.equal(inferenceRequests(servers.a).length, 0, 'the terminating pod got a request');

    // The starting pod comes up: the same request now succeeds, served by it.
    api.upsertPod(cluster.pod(readyPod, 'b'));
    await waitForStates(gateway, { a: 'Terminating', b: 'Ready' });
    assert.deepEqual(await probe(cluster, 'recovered', 5, ['b']), { a: 0, b: 5, c: 0 });
  });

  void it('reports NOT_SERVING and answers JSON errors until the API server is reachable, then serves', async (t) => {
    const cluster = await startCluster(t, {
      pods: [
        [readyPod, 'a'],
        [notReadyPod, 'b'],
      ],
      apiUnavailable: true,
    });
    const { api, gateway, servers } = cluster;
    const health = healthClient(gateway.app.grpcAddress);
    t.after(() => health.close());
    const readyz = `http://127.0.0.1:${gateway.app.httpPort}/readyz`;

    // The client keeps failing to list (connection refused) and backs off: not serving.
    assert.equal(gateway.app.store.isSynced(), false);
    assert.equal(await health.check(), 'NOT_SERVING');
    assert.equal(await health.check(EXT_PROC_SERVICE_NAME), 'NOT_SERVING');
    const watch = health.watch();
    await watch.until('NOT_SERVING');
    assert.equal((await fetch(readyz)).status, 503);

    // Requests still get an answer, and it is a structured error, never Envoy's plain text: before
    // the first sync nothing is known about models or pods, so it is a retryable 503 saying so.
    const early = await gateway.send(chat('unsynced'));
    assert.equal(early.status, 503, early.text());
    assert.match(early.headers['retry-after'] ?? '', /^\d+$/);
    const error = assertStructuredError(early, 'request before the first sync');
    assert.equal(error.code, 'no_ready_replica');
    assert.equal(error.type, 'service_unavailable_error');
    assert.equal(early.headers['retry-after'], '5');
    assert.match(error.message, /^model llama-3-8b cannot be routed yet: the endpoint list has not been loaded/);
    assert.equal(error.endpoints_synced, false);
    // Nor can the model list be given yet: an empty 200 would tell clients there are no models.
    const earlyModels = await gateway.send({ path: '/v1/models' });
    assert.equal(earlyModels.status, 503);
    assert.equal(assertStructuredError(earlyModels, 'model list before the first sync').code, 'no_ready_replica');
    assert.equal(inferenceRequests(servers.a).length + inferenceRequests(servers.b).length, 0);

    // The API server comes back: the first list syncs the cache and health flips to SERVING.
    await api.setUnavailable(false);
    await watch.until('SERVING');
    assert.deepEqual(watch.statuses, ['NOT_SERVING', 'SERVING']);
    assert.equal(await health.check(), 'SERVING');
    assert.equal(gateway.app.store.isSynced(), true);
    assert.equal((await fetch(readyz)).status, 200);
    await waitForStates(gateway, { a: 'Ready', b: 'NotReady' });
    assert.deepEqual(await probe(cluster, 'synced', 5, ['a']), { a: 5, b: 0, c: 0 });
    const models = await gateway.send({ path: '/v1/models' });
    assert.equal(models.status, 200);
    assert.deepEqual(
      (models.json() as { data: Array<{ id: string }> }).data.map((m) => m.id),
      [MODEL],
    );
  });

  void it('follows pod changes made while the watch was broken (410 Gone, dropped connection) and counts the restarts', async (t) => {
    const cluster = await startCluster(t, {
      pods: [
        [readyPod, 'a'],
        [readyPod, 'b'],
        [notReadyPod, 'c'],
      ],
    });
    const { api, gateway } = cluster;
    const path = podsPath(NS);
    await api.waitForWatch(path);
    await probe(cluster, 'before', 5, ['a', 'b']);

    // 410: the server expires the open watch; c turns ready before the client relists.
    let rewatched = api.nextWatch(path);
    assert.equal(api.expireWatches(), 1);
    api.upsertPod(cluster.pod(readyPod, 'c'));
    await rewatched;
    await waitForStates(gateway, { a: 'Ready', b: 'Ready', c: 'Ready' });
    await probeUntilServedBy(cluster, 'after-gone', 'c', ['a', 'b', 'c']);

    // Dropped connection: b's deletion is requested while no watch is open; the client
    // resumes from its last resourceVersion and the history replays the change.
    rewatched = api.nextWatch(path);
    assert.equal(api.dropWatches(), 1);
    api.setPodDeletionTimestamp(NS, PODS.b.name);
    await rewatched;
    await waitForStates(gateway, { a: 'Ready', b: 'Terminating', c: 'Ready' });
    assert.equal((await probe(cluster, 'after-drop', 20, ['a', 'c'])).b, 0);

    // Both at once: the connection drops, a turns not ready, and history is compacted before
    // the client comes back, so its resume gets 410 and it must relist to see the change.
    rewatched = api.nextWatch(path);
    assert.equal(api.dropWatches(), 1);
    api.upsertPod(cluster.pod(notReadyPod, 'a'));
    api.compactHistory();
    await rewatched;
    await waitForStates(gateway, { a: 'NotReady', b: 'Terminating', c: 'Ready' });
    assert.deepEqual(await probe(cluster, 'after-compaction', 10, ['c']), { a: 0, b: 0, c: 10 });

    const metrics = await gateway.metricsText();
    const restarts = (reason: string): number =>
      metricValue(metrics, 'llm_extproc_kubernetes_watch_restarts_total', { resource: `pods/${POOL}`, reason });
    assert.ok(restarts('gone') >= 2, `gone restarts: ${restarts('gone')}\n${metrics}`);
    assert.ok(restarts('dropped') >= 2, `dropped restarts: ${restarts('dropped')}`);
    assert.ok(metricValue(metrics, 'llm_extproc_kubernetes_watch_restarts_total') > 0);
  });
});
