// InferenceObjective priorities, live, end to end: a real kube-apiserver and etcd, llm-extproc with
// the real @kubernetes/client-node, a real Envoy, and a model server on an InferencePool's pod. The
// pool's one replica takes one request at a time (saturation.maxInFlight: 1) and the test decides
// when each answer finishes, so the order queued requests reach the model server is the queue's
// order. llm-extproc starts before the InferenceObjective CRD exists (as on a cluster without the
// alpha CRDs); the CRD is installed while it runs, then objectives are created and patched.
//
// A control plane of its own: the CRD's absence at the start is part of what is tested.

import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { CustomObjectsApi } from '@kubernetes/client-node';
import { pino } from 'pino';
import { stringify as toYaml } from 'yaml';
import { arrivals, HeldAnswers, waitForQueue } from '../support/flow-helpers.js';
import { startGateway } from '../support/gateway.js';
import type { ClientResponse } from '../support/http-client.js';
import { KubeControlPlane } from '../support/kube-control-plane.js';
import { FakeKubelet } from '../support/kube-kubelet.js';
import { startModelServer } from '../support/model-server.js';
import { readyPod } from '../support/pod-builders.js';
import { waitUntil } from '../support/wait-until.js';

const NS = 'e2e-objectives';
const POOL = `${NS}/chat-pool`;
const ID_HEADER = 'x-test-request-id';
const OBJECTIVE_HEADER = 'x-gateway-inference-objective';
const TIMEOUT_MS = 30_000;

interface PoolObjectives {
  byName: Record<string, number>;
  byModel: Record<string, number>;
}

interface LogLine {
  level: number;
  msg: string;
  resource?: string;
  objectives?: Record<string, PoolObjectives>;
}

let plane: KubeControlPlane;

before(async () => {
  plane = await KubeControlPlane.start();
  await plane.installInferencePoolCrd();
});

after(async () => {
  await plane?.stop();
});

void describe('InferenceObjectives from a real kube-apiserver order a saturated pool, live', () => {
  void it('CRD installed while running; an objective orders its model after, a patch before, the header names one', async (t) => {
    await plane.createNamespace(NS);
    const server = await startModelServer({ id: 'pod-0', host: '127.0.0.2', models: ['chat', 'batch'] });
    t.after(() => server.close());
    const held = new HeldAnswers(server);
    await new FakeKubelet(plane.core()).createPod({ name: 'vllm-0', namespace: NS, labels: { app: 'vllm' }, ip: '127.0.0.2' }, readyPod);
    const custom = plane.kubeConfig().makeApiClient(CustomObjectsApi);
    await custom.createNamespacedCustomObject({
      group: 'inference.networking.k8s.io',
      version: 'v1',
      namespace: NS,
      plural: 'inferencepools',
      body: {
        apiVersion: 'inference.networking.k8s.io/v1',
        kind: 'InferencePool',
        metadata: { name: 'chat-pool', namespace: NS, annotations: { 'llm-extproc.io/models': 'chat,batch' } },
        spec: {
          selector: { matchLabels: { app: 'vllm' } },
          targetPorts: [{ number: server.port }],
          endpointPickerRef: { name: 'llm-extproc', port: { number: 9002 } },
        },
      },
    });

    const logs: LogLine[] = [];
    const logger = pino({ level: 'debug' }, { write: (line: string) => void logs.push(JSON.parse(line) as LogLine) });
    const gateway = await startGateway({
      configYaml: toYaml({
        kubernetes: {
          kubeconfigPath: await plane.writeKubeconfig('objectives-kubeconfig.yaml'),
          inferencePools: { enabled: true, namespaces: [NS] },
          backoff: { initialMs: 100, maxMs: 500 },
          timeouts: { listSeconds: 10, watchSeconds: 60 },
        },
        picker: {
          pools: { [POOL]: { metricsFormat: 'none' } },
          // Requests no rule names get 5: between the objective's 1 and its patched 9.
          flowControl: { enabled: true, defaultPriority: 5, ttlSeconds: 60, timedTtlSeconds: 8, saturation: { maxInFlight: 1 } },
        },
      }),
      backendAddresses: [server.address],
      envoy: { messageTimeoutMs: 10_000 },
      logger,
    });
    t.after(() => gateway.stop());
    const objectiveLogs = (): LogLine[] => logs.filter((l) => l.resource === `inferenceobjectives/${NS}`);

    // Without the CRD: synced and serving (readiness does not wait for an alpha kind), said once.
    const chat = (id: string, model: string, headers: Record<string, string> = {}): Promise<ClientResponse> =>
      gateway.send({
        path: '/v1/chat/completions',
        headers: { [ID_HEADER]: id, ...headers },
        body: { model, stream: true, messages: [{ role: 'user', content: id }] },
      });
    await waitUntil(
      () =>
        gateway.app.store
          .view()
          .pools.get(POOL)
          ?.endpoints.some((e) => e.state === 'Ready')
          ? true
          : undefined,
      {
        description: 'the pool and its Ready pod',
        timeoutMs: TIMEOUT_MS,
      },
    );
    assert.equal((await chat('without-crd', 'chat')).status, 200);
    await waitUntil(() => (objectiveLogs().filter((l) => l.msg === 'still not served; will retry').length >= 2 ? true : undefined), {
      description: 'the objective list retried quietly',
      timeoutMs: TIMEOUT_MS,
    });

    // The CRD arrives (the API group inference.networking.x-k8s.io/v1alpha2 from GIE v1.0.1).
    await plane.installInferenceObjectiveCrd();
    const objectives = { group: 'inference.networking.x-k8s.io', version: 'v1alpha2', namespace: NS, plural: 'inferenceobjectives' };
    const objective = (name: string, priority: number, models?: string): object => ({
      apiVersion: 'inference.networking.x-k8s.io/v1alpha2',
      kind: 'InferenceObjective',
      metadata: { name, namespace: NS, ...(models === undefined ? {} : { annotations: { 'llm-extproc.io/models': models } }) },
      spec: { priority, poolRef: { name: 'chat-pool' } },
    });
    let mark = logs.length;
    await custom.createNamespacedCustomObject({ ...objectives, body: objective('batch-jobs', 1, 'batch') });
    /** Waits for the source to hand routing a table, logged after line `from`, where `check` holds for our pool. */
    const applied = async (from: number, check: (pool: PoolObjectives) => boolean, what: string): Promise<void> => {
      await waitUntil(
        () => {
          const tables = logs.slice(from).filter((l) => l.msg === 'InferenceObjective priorities changed');
          return tables.some((l) => check(l.objectives?.[POOL] ?? { byName: {}, byModel: {} })) ? true : undefined;
        },
        { description: what, timeoutMs: TIMEOUT_MS },
      );
    };
    await applied(mark, (p) => p.byModel.batch === 1, 'batch-jobs (priority 1) applied');
    const warnings = objectiveLogs().filter((l) => l.level >= 40);
    assert.equal(warnings.length, 1, `the missing CRD is said once: ${JSON.stringify(warnings)}`);
    assert.match(warnings[0].msg, /not served or not readable/);

    /** One running request saturates the pool; `queued` wait in this order; returns the order they reached the server. */
    const round = async (tag: string, queued: ReadonlyArray<{ model: string; headers?: Record<string, string> }>): Promise<string[]> => {
      const before = server.requests.length;
      held.hold(1 + queued.length);
      const responses = [chat(`${tag}-running`, 'chat')];
      await arrivals(server, before + 1);
      for (const [i, q] of queued.entries()) {
        responses.push(chat(`${tag}-${i}-${q.model}`, q.model, q.headers));
        await waitForQueue(gateway, i + 1, { pool: POOL });
      }
      for (let k = 1; k <= queued.length; k++) {
        held.releaseNext();
        await arrivals(server, before + 1 + k);
      }
      held.releaseNext();
      for (const response of await Promise.all(responses)) assert.equal(response.status, 200, response.text());
      return server.requests.slice(before + 1).map((r) => String(r.headers[ID_HEADER]));
    };

    // Priority 1 for batch, 5 for chat: the batch requests queued first still go last.
    assert.deepEqual(await round('low', [{ model: 'batch' }, { model: 'batch' }, { model: 'chat' }, { model: 'chat' }]), [
      'low-2-chat',
      'low-3-chat',
      'low-0-batch',
      'low-1-batch',
    ]);

    // Patched to 9 (through the API, live): batch now goes before chat even when it queues after.
    // A second objective, named by the EPP's header, outranks both.
    mark = logs.length;
    await custom.patchNamespacedCustomObject({
      ...objectives,
      name: 'batch-jobs',
      body: [{ op: 'replace', path: '/spec/priority', value: 9 }],
    });
    await custom.createNamespacedCustomObject({ ...objectives, body: objective('on-call', 20) });
    await applied(mark, (p) => p.byModel.batch === 9 && p.byName['on-call'] === 20, 'the patch and on-call applied');
    assert.deepEqual(
      await round('high', [
        { model: 'chat' },
        { model: 'chat' },
        { model: 'batch' },
        { model: 'chat', headers: { [OBJECTIVE_HEADER]: 'on-call' } },
      ]),
      ['high-3-chat', 'high-2-batch', 'high-0-chat', 'high-1-chat'],
    );

    // Deleted: batch is back to the default priority, queued in arrival order with chat.
    mark = logs.length;
    await custom.deleteNamespacedCustomObject({ ...objectives, name: 'batch-jobs' });
    await applied(mark, (p) => !('batch' in p.byModel), 'batch-jobs removed');
    assert.deepEqual(await round('gone', [{ model: 'chat' }, { model: 'batch' }, { model: 'chat' }]), [
      'gone-0-chat',
      'gone-1-batch',
      'gone-2-chat',
    ]);
  });
});
