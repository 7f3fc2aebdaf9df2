// InferenceObjective priorities, live, end to end: a real kube-apiserver and etcd, llm-extproc with
// the real @kubernetes/client-node, a real Envoy, and a model server on an InferencePool's pod. The
// pool's one replica takes one request at a time (saturation.maxInFlight: 1) and the test decides
// when each answer finishes, so the order queued requests reach the model server is the queue's
// order. First, under the deprecated group alone: llm-extproc starts before the InferenceObjective
// CRD exists (as on a cluster without the alpha CRDs); the CRD is installed while it runs, then
// objectives are created and patched. Then with llm-d's CRDs installed beside it (llm-d.ai/v1alpha2,
// test/support/crds): the llm-d.ai objective applies and the deprecated group's is ignored, even
// for a model only it names (llm-d's rule).
//
// A control plane of its own: the CRD's absence at the start is part of what is tested.

import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { CustomObjectsApi } from '@kubernetes/client-node';
import type { TestContext } from 'node:test';
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

const ID_HEADER = 'x-test-request-id';
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

interface Queued {
  readonly model: string;
  readonly headers?: Record<string, string>;
}

/** One namespace's test bed: a pool of one replica taking one request at a time, and llm-extproc with flow control watching it. */
interface Bed {
  readonly pool: string;
  readonly logs: LogLine[];
  readonly chat: (id: string, model: string, headers?: Record<string, string>) => Promise<ClientResponse>;
  /** Waits for the source to hand routing a table, logged after line `from`, where `check` holds for the pool. */
  readonly applied: (from: number, check: (pool: PoolObjectives) => boolean, what: string) => Promise<void>;
  /** One running request saturates the pool; `queued` wait in this order; returns the order they reached the server. */
  readonly round: (tag: string, queued: readonly Queued[]) => Promise<string[]>;
}

/** In namespace `ns`, which exists. */
async function startBed(t: TestContext, ns: string): Promise<Bed> {
  const pool = `${ns}/chat-pool`;
  const server = await startModelServer({ id: 'pod-0', host: '127.0.0.2', models: ['chat', 'batch'] });
  t.after(() => server.close());
  const held = new HeldAnswers(server);
  await new FakeKubelet(plane.core()).createPod({ name: 'vllm-0', namespace: ns, labels: { app: 'vllm' }, ip: '127.0.0.2' }, readyPod);
  await plane.createInferencePool({ namespace: ns, name: 'chat-pool', app: 'vllm', port: server.port, models: ['chat', 'batch'] });

  const logs: LogLine[] = [];
  const logger = pino({ level: 'debug' }, { write: (line: string) => void logs.push(JSON.parse(line) as LogLine) });
  const gateway = await startGateway({
    configYaml: toYaml({
      kubernetes: {
        kubeconfigPath: await plane.writeKubeconfig(`${ns}-kubeconfig.yaml`),
        inferencePools: { enabled: true, namespaces: [ns] },
        backoff: { initialMs: 100, maxMs: 500 },
        timeouts: { listSeconds: 10, watchSeconds: 60 },
      },
      picker: {
        pools: { [pool]: { metricsFormat: 'none' } },
        // Requests no rule names get 5: between the objectives' low and high priorities.
        flowControl: { enabled: true, defaultPriority: 5, ttlSeconds: 60, timedTtlSeconds: 8, saturation: { maxInFlight: 1 } },
      },
    }),
    backendAddresses: [server.address],
    envoy: { messageTimeoutMs: 10_000 },
    logger,
  });
  t.after(() => gateway.stop());

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
        .pools.get(pool)
        ?.endpoints.some((e) => e.state === 'Ready')
        ? true
        : undefined,
    {
      description: 'the pool and its Ready pod',
      timeoutMs: TIMEOUT_MS,
    },
  );
  const applied = async (from: number, check: (p: PoolObjectives) => boolean, what: string): Promise<void> => {
    await waitUntil(
      () => {
        const tables = logs.slice(from).filter((l) => l.msg === 'InferenceObjective priorities changed');
        return tables.some((l) => check(l.objectives?.[pool] ?? { byName: {}, byModel: {} })) ? true : undefined;
      },
      { description: what, timeoutMs: TIMEOUT_MS },
    );
  };
  const round = async (tag: string, queued: readonly Queued[]): Promise<string[]> => {
    const before = server.requests.length;
    held.hold(1 + queued.length);
    const responses = [chat(`${tag}-running`, 'chat')];
    await arrivals(server, before + 1);
    for (const [i, q] of queued.entries()) {
      responses.push(chat(`${tag}-${i}-${q.model}`, q.model, q.headers));
      await waitForQueue(gateway, i + 1, { pool });
    }
    for (let k = 1; k <= queued.length; k++) {
      held.releaseNext();
      await arrivals(server, before + 1 + k);
    }
    held.releaseNext();
    for (const response of await Promise.all(responses)) assert.equal(response.status, 200, response.text());
    return server.requests.slice(before + 1).map((r) => String(r.headers[ID_HEADER]));
  };
  return { pool, logs, chat, applied, round };
}

/** An InferenceObjective of `group` on the pool `chat-pool`, for `models` (our annotation) when given. */
function objective(group: string, ns: string, name: string, priority: number, models?: string): object {
  return {
    apiVersion: `${group}/v1alpha2`,
    kind: 'InferenceObjective',
    metadata: { name, namespace: ns, ...(models === undefined ? {} : { annotations: { 'llm-extproc.io/models': models } }) },
    spec: { priority, poolRef: { name: 'chat-pool' } },
  };
}

const LEGACY_GROUP = 'inference.networking.x-k8s.io';
const LLM_D_GROUP = 'llm-d.ai';

void describe('InferenceObjectives from a real kube-apiserver order a saturated pool, live', () => {
  void it('CRD installed while running; an objective orders its model after, a patch before, the header names one', async (t) => {
    const NS = 'e2e-objectives';
    await plane.createNamespace(NS);
    const { logs, chat, applied, round } = await startBed(t, NS);
    const custom = plane.kubeConfig().makeApiClient(CustomObjectsApi);
    const objectiveLogs = (): LogLine[] => logs.filter((l) => l.resource === `inferenceobjectives/${NS}`);

    // Without the CRD: synced and serving (readiness does not wait for an alpha kind), said once.
    assert.equal((await chat('without-crd', 'chat')).status, 200);
    await waitUntil(() => (objectiveLogs().filter((l) => l.msg === 'still not served; will retry').length >= 2 ? true : undefined), {
      description: 'the objective list retried quietly',
      timeoutMs: TIMEOUT_MS,
    });

    // The CRD arrives (the API group inference.networking.x-k8s.io/v1alpha2 from GIE v1.0.1).
    await plane.installInferenceObjectiveCrd();
    const objectives = { group: LEGACY_GROUP, version: 'v1alpha2', namespace: NS, plural: 'inferenceobjectives' };
    let mark = logs.length;
    await custom.createNamespacedCustomObject({ ...objectives, body: objective(LEGACY_GROUP, NS, 'batch-jobs', 1, 'batch') });
    await applied(mark, (p) => p.byModel.batch === 1, 'batch-jobs (priority 1) applied');
    const warnings = objectiveLogs().filter((l) => l.level >= 40);
    assert.equal(warnings.length, 1, `the missing CRD is said once: ${JSON.stringify(warnings)}`);
    assert.match(warnings[0].msg, /not served or not readable/);

    // Priority 1 for batch, 5 for chat: the batch requests queued first still go last.
    assert.deepEqual(await round('low', [{ model: 'batch' }, { model: 'batch' }, { model: 'chat' }, { model: 'chat' }]), [
      'low-2-chat',
      'low-3-chat',
      'low-0-batch',
      'low-1-batch',
    ]);

    // Patched to 9 (through the API, live): batch now goes before chat even when it queues after.
    // A second objective, named by the EPP's header (its deprecated name), outranks both.
    mark = logs.length;
    await custom.patchNamespacedCustomObject({
      ...objectives,
      name: 'batch-jobs',
      body: [{ op: 'replace', path: '/spec/priority', value: 9 }],
    });
    await custom.createNamespacedCustomObject({ ...objectives, body: objective(LEGACY_GROUP, NS, 'on-call', 20) });
    await applied(mark, (p) => p.byModel.batch === 9 && p.byName['on-call'] === 20, 'the patch and on-call applied');
    assert.deepEqual(
      await round('high', [
        { model: 'chat' },
        { model: 'chat' },
        { model: 'batch' },
        { model: 'chat', headers: { 'x-gateway-inference-objective': 'on-call' } },
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

  void it("with llm-d's CRDs installed too: the llm-d.ai objective applies, the deprecated group's is ignored, said once", async (t) => {
    const NS = 'e2e-objectives-llm-d';
    // Both groups' CRDs served before llm-extproc starts (the deprecated one may be there already: applied again).
    await plane.installInferenceObjectiveCrd();
    await plane.installLlmdCrds();
    const custom = plane.kubeConfig().makeApiClient(CustomObjectsApi);
    await plane.createNamespace(NS);
    const create = (group: string, body: object): Promise<unknown> =>
      custom.createNamespacedCustomObject({ group, version: 'v1alpha2', namespace: NS, plural: 'inferenceobjectives', body });
    // The same model under both groups, opposite priorities; a model only the deprecated group names.
    await create(LEGACY_GROUP, objective(LEGACY_GROUP, NS, 'batch-legacy', 9, 'batch'));
    await create(LEGACY_GROUP, objective(LEGACY_GROUP, NS, 'chat-legacy', 9, 'chat'));
    await create(LLM_D_GROUP, objective(LLM_D_GROUP, NS, 'batch-jobs', 1, 'batch'));
    await create(LLM_D_GROUP, objective(LLM_D_GROUP, NS, 'on-call', 20));

    const { pool, logs, applied, round } = await startBed(t, NS);
    await applied(0, (p) => p.byModel.batch === 1 && p.byName['on-call'] === 20, "llm-d.ai's objectives applied");
    const both = (): LogLine[] => logs.filter((l) => /InferenceObjective is installed under both/.test(l.msg));
    await waitUntil(() => (both().length > 0 ? true : undefined), { description: 'both groups said', timeoutMs: TIMEOUT_MS });

    // batch at llm-d.ai's 1, not the deprecated 9; chat at the default 5, not the deprecated 9;
    // the llm-d header names the llm-d.ai objective and outranks both.
    assert.deepEqual(
      await round('both', [
        { model: 'batch' },
        { model: 'chat' },
        { model: 'chat', headers: { 'x-llm-d-inference-objective': 'on-call' } },
        { model: 'batch' },
      ]),
      ['both-2-chat', 'both-1-chat', 'both-0-batch', 'both-3-batch'],
    );
    assert.equal(both().length, 1, 'said once');
    assert.equal(both()[0].level, 40);
    const tables = logs.filter((l) => l.msg === 'InferenceObjective priorities changed');
    for (const table of tables) {
      const names = Object.keys(table.objectives?.[pool]?.byName ?? {});
      assert.ok(!names.some((n) => n.endsWith('-legacy')), `no deprecated objective in ${JSON.stringify(table.objectives)}`);
    }
  });
});
