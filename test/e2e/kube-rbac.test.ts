// RBAC for real: the chart's own ServiceAccount, Role and RoleBinding (rendered by
// `helm template` from charts/llm-extproc and applied by server-side apply) are all llm-extproc
// may use against a real kube-apiserver with --authorization-mode=RBAC. It syncs with exactly
// those grants; a pool in a namespace the chart did not bind gets the documented 403 (unsynced,
// logged, retried) and recovers without a restart once the re-rendered chart binds it.

import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { promisify } from 'node:util';
import { CoreV1Api } from '@kubernetes/client-node';
import { pino } from 'pino';
import { parseAllDocuments, stringify as toYaml } from 'yaml';
import { repoRoot } from '../../scripts/repo-root.js';
import { startGateway } from '../support/gateway.js';
import { KubeControlPlane } from '../support/kube-control-plane.js';
import { FakeKubelet } from '../support/kube-kubelet.js';
import type { TestPod } from '../support/kube-kubelet.js';
import { startModelServer } from '../support/model-server.js';
import { readyPod } from '../support/pod-builders.js';
import { waitUntil } from '../support/wait-until.js';

const run = promisify(execFile);
const RELEASE = 'edge';
const RELEASE_NS = 'gateway';
const SERVICE_ACCOUNT = `${RELEASE}-llm-extproc`;
const TIMEOUT_MS = 30_000;

let plane: KubeControlPlane;

before(async () => {
  plane = await KubeControlPlane.start();
  await plane.installInferencePoolCrd();
});

after(async () => {
  await plane?.stop();
});

/** helm from scripts/install-helm.mjs (built once from the Go module proxy, then cached). */
async function helmBin(): Promise<string> {
  const { stdout } = await run(process.execPath, [join(repoRoot(), 'scripts', 'install-helm.mjs')], { maxBuffer: 1 << 20 });
  return stdout.trim().split('\n').at(-1) ?? '';
}

/** `helm template` of the repository's chart with these values. */
async function renderChart(values: object): Promise<string> {
  const helm = await helmBin();
  const child = run(helm, ['template', RELEASE, join(repoRoot(), 'charts', 'llm-extproc'), '--namespace', RELEASE_NS, '--values', '-'], {
    maxBuffer: 16 << 20,
  });
  child.child.stdin?.end(toYaml(values));
  return (await child).stdout;
}

/** Only the RBAC objects of a rendered chart (the test does not run the Deployment). */
function rbacManifests(rendered: string): string {
  const keep = new Set(['ServiceAccount', 'Role', 'RoleBinding']);
  return parseAllDocuments(rendered)
    .map((d) => d.toJS() as { kind?: string } | null)
    .filter((o): o is { kind: string } => o !== null && keep.has(o.kind ?? ''))
    .map((o) => toYaml(o))
    .join('---\n');
}

interface LogLine {
  level: number;
  msg: string;
  detail?: string;
  resource?: string;
}

void describe('RBAC from the chart against a real kube-apiserver', () => {
  void it("syncs with exactly the chart's grants; an unbound namespace gets 403 and recovers when the chart binds it, without a restart", async (t) => {
    for (const ns of [RELEASE_NS, 'models', 'team-b']) await plane.createNamespace(ns);
    const kubelet = new FakeKubelet(plane.core());
    const llama: TestPod = { name: 'vllm-llama', namespace: 'models', labels: { app: 'vllm-llama' }, ip: '127.0.0.2' };
    const mistral: TestPod = { name: 'vllm-mistral', namespace: 'team-b', labels: { app: 'mistral' }, ip: '127.0.0.3' };
    const llamaServer = await startModelServer({ id: 'llama', host: llama.ip, models: ['llama-3-8b'] });
    t.after(() => llamaServer.close());
    // Pods of both pools listen on one port (a pool has one targetPort; here both use the same).
    const mistralServer = await startModelServer({ id: 'mistral', host: mistral.ip, port: llamaServer.port, models: ['mistral-7b'] });
    t.after(() => mistralServer.close());
    await kubelet.createPod(llama, readyPod);
    await kubelet.createPod(mistral, readyPod);

    const llamaPool = {
      name: 'llama',
      namespace: 'models',
      selector: { app: 'vllm-llama' },
      targetPort: llamaServer.port,
      models: ['llama-3-8b'],
    };
    const mistralPool = {
      name: 'mistral',
      namespace: 'team-b',
      selector: { app: 'mistral' },
      targetPort: llamaServer.port,
      models: ['mistral-7b'],
    };

    // The chart as first installed knows only the llama pool (and InferencePools in models).
    const firstValues = {
      serviceAccount: { create: true },
      config: { kubernetes: { pools: [llamaPool], inferencePools: { enabled: true, namespaces: ['models'] } } },
    };
    const applied = await plane.apply(rbacManifests(await renderChart(firstValues)));
    assert.deepEqual(applied.map((o) => `${o.kind}/${o.metadata?.namespace}/${o.metadata?.name}`).sort(), [
      `Role/models/${SERVICE_ACCOUNT}-endpoints`,
      `RoleBinding/models/${SERVICE_ACCOUNT}-endpoints`,
      `ServiceAccount/${RELEASE_NS}/${SERVICE_ACCOUNT}`,
    ]);
    const token = await plane.serviceAccountToken(RELEASE_NS, SERVICE_ACCOUNT);

    // The grants are exactly the chart's: reading pods in models works, nothing else does.
    const asExtproc = plane.kubeConfig(token).makeApiClient(CoreV1Api);
    assert.equal((await asExtproc.listNamespacedPod({ namespace: 'models' })).items.length, 1);
    for (const attempt of [
      () => asExtproc.listNamespacedPod({ namespace: 'team-b' }),
      () => asExtproc.listNamespacedSecret({ namespace: 'models' }),
      () => asExtproc.deleteNamespacedPod({ namespace: 'models', name: llama.name }),
      () => asExtproc.listPodForAllNamespaces(),
    ]) {
      await assert.rejects(attempt(), (err: { code?: number }) => err.code === 403);
    }

    // llm-extproc, authenticated as the chart's ServiceAccount, configured for both pools: the
    // second one's namespace is not bound yet.
    const logs: LogLine[] = [];
    const logger = pino({ level: 'debug' }, { write: (line: string) => void logs.push(JSON.parse(line) as LogLine) });
    const kubeconfigPath = await plane.writeKubeconfig('extproc-kubeconfig.yaml', token);
    const gateway = await startGateway({
      configYaml: toYaml({
        kubernetes: {
          kubeconfigPath,
          pools: [llamaPool, mistralPool],
          inferencePools: { enabled: true, namespaces: ['models'] },
          backoff: { initialMs: 100, maxMs: 500 },
        },
      }),
      backendAddresses: [llamaServer.address, mistralServer.address],
      waitForSync: false,
      logger,
    });
    t.after(() => gateway.stop());
    const readyz = `http://127.0.0.1:${gateway.app.httpPort}/readyz`;

    // The documented 403: that pool's list fails with the API's message, the source retries and
    // stays unsynced, and the pool it may read is there.
    const forbidden = await waitUntil(() => logs.find((l) => l.resource === 'pods/mistral' && /^HTTP 403/.test(l.detail ?? '')), {
      description: '403 logged for pods/mistral',
      timeoutMs: TIMEOUT_MS,
    });
    assert.match(
      forbidden.detail ?? '',
      new RegExp(`system:serviceaccount:${RELEASE_NS}:${SERVICE_ACCOUNT}.*cannot list resource "pods".*namespace "team-b"`),
    );
    await waitUntil(() => (logs.some((l) => l.resource === 'pods/llama' && l.msg === 'initial list complete') ? true : undefined), {
      description: 'llama listed',
      timeoutMs: TIMEOUT_MS,
    });
    await waitUntil(
      () => (logs.filter((l) => l.resource === 'pods/mistral' && l.msg === 'list failed; will retry').length >= 2 ? true : undefined),
      {
        description: 'the forbidden list retried',
        timeoutMs: TIMEOUT_MS,
      },
    );
    assert.equal(gateway.app.store.isSynced(), false);
    assert.equal((await fetch(readyz)).status, 503);

    // The chart is upgraded with the second pool: server-side apply adds its Role and RoleBinding.
    // The same process syncs, and both models are served.
    const secondValues = { ...firstValues, config: { kubernetes: { ...firstValues.config.kubernetes, pools: [llamaPool, mistralPool] } } };
    const reapplied = await plane.apply(rbacManifests(await renderChart(secondValues)));
    assert.ok(reapplied.some((o) => o.kind === 'RoleBinding' && o.metadata?.namespace === 'team-b'));
    await waitUntil(() => (gateway.app.store.isSynced() ? true : undefined), {
      description: 'synced after the binding appeared',
      timeoutMs: TIMEOUT_MS,
    });
    assert.equal((await fetch(readyz)).status, 200);
    for (const [model, server] of [
      ['llama-3-8b', 'llama'],
      ['mistral-7b', 'mistral'],
    ] as const) {
      const response = await gateway.send({ path: '/v1/chat/completions', body: { model, messages: [{ role: 'user', content: 'hi' }] } });
      assert.equal(response.status, 200, response.text());
      assert.equal(response.headers['x-model-server-id'], server);
    }
  });
});
