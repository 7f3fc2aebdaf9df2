// InferenceModelRewrite, live, end to end: a real kube-apiserver and etcd with llm-d's API group
// installed (llm-d.ai/v1alpha2, our manifest of its published shapes), llm-extproc watching it
// with the real @kubernetes/client-node, a real Envoy, and two model servers on an InferencePool's
// pods. A rewrite splits `m` 90/10 between `m-v1` and `m-v2`; then it is changed to send everything
// to `m-v2` (llm-d's CRD refuses weight 0: "0/100" is the one target), then deleted. Each model
// server sees the rewritten name in a body otherwise byte for byte as the client sent it, the client
// gets the answer byte for byte as the model server wrote it (naming the rewritten model), and the
// metrics carry both names. Last, the deprecated group's kind is installed beside llm-d's with a
// rewrite of its own: ignored, as llm-d does, and said once.
//
// A control plane of its own: the CRDs installed along the way are part of what is tested.

import assert from 'node:assert/strict';
import { readFile } from 'node:fs/promises';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { CustomObjectsApi } from '@kubernetes/client-node';
import { pino } from 'pino';
import { stringify as toYaml } from 'yaml';
import { repoRoot } from '../../scripts/repo-root.js';
import { startGateway } from '../support/gateway.js';
import { KubeControlPlane } from '../support/kube-control-plane.js';
import { FakeKubelet } from '../support/kube-kubelet.js';
import { startModelServer } from '../support/model-server.js';
import type { ModelServer } from '../support/model-server.js';
import { readyPod } from '../support/pod-builders.js';
import { waitUntil } from '../support/wait-until.js';

const NS = 'e2e-rewrite';
const POOL = `${NS}/chat-pool`;
const TIMEOUT_MS = 30_000;
/** Requests sent at once: enough to keep Envoy and the picker busy, few enough for a 2-core machine. */
const CONCURRENCY = 25;

interface LogLine {
  level: number;
  msg: string;
  rules?: unknown[];
}

let plane: KubeControlPlane;

before(async () => {
  plane = await KubeControlPlane.start();
  await plane.installInferencePoolCrd();
  await plane.installLlmdCrds();
});

after(async () => {
  await plane?.stop();
});

/** The body a client sends, as text with its own spacing: the model server must see these bytes but for the model's value. */
function bodyText(id: number, model: string): string {
  return `{ "model" : "${model}",\n  "messages": [{"role": "user", "content": "caf\\u00e9 #${id}", "model": "inner"}], "max_tokens": 3 }`;
}

void describe('InferenceModelRewrite from a real kube-apiserver, through a real Envoy, live', () => {
  void it('90/10 within ±3 points over 1,000 requests; a live change moves every later one; deleted, the name goes as sent', async (t) => {
    await plane.createNamespace(NS);
    const first = await startModelServer({ id: 'pod-0', host: '127.0.0.2', models: ['m', 'm-v1', 'm-v2'] });
    t.after(() => first.close());
    const second = await startModelServer({ id: 'pod-1', host: '127.0.0.3', port: first.port, models: ['m', 'm-v1', 'm-v2'] });
    t.after(() => second.close());
    const servers: ModelServer[] = [first, second];
    const kubelet = new FakeKubelet(plane.core());
    await kubelet.createPod({ name: 'vllm-0', namespace: NS, labels: { app: 'vllm' }, ip: '127.0.0.2' }, readyPod);
    await kubelet.createPod({ name: 'vllm-1', namespace: NS, labels: { app: 'vllm' }, ip: '127.0.0.3' }, readyPod);
    const custom = plane.kubeConfig().makeApiClient(CustomObjectsApi);
    await plane.createInferencePool({ namespace: NS, name: 'chat-pool', app: 'vllm', port: first.port, models: ['m', 'm-v1', 'm-v2'] });
    const rewrites = { group: 'llm-d.ai', version: 'v1alpha2', namespace: NS, plural: 'inferencemodelrewrites' };
    await custom.createNamespacedCustomObject({
      ...rewrites,
      body: {
        apiVersion: 'llm-d.ai/v1alpha2',
        kind: 'InferenceModelRewrite',
        metadata: { name: 'm-canary', namespace: NS },
        spec: {
          poolRef: { name: 'chat-pool' },
          rules: [
            {
              matches: [{ model: { type: 'Exact', value: 'm' } }],
              targets: [
                { modelRewrite: 'm-v1', weight: 90 },
                { modelRewrite: 'm-v2', weight: 10 },
              ],
            },
          ],
        },
      },
    });

    const logs: LogLine[] = [];
    const logger = pino({ level: 'info' }, { write: (line: string) => void logs.push(JSON.parse(line) as LogLine) });
    const gateway = await startGateway({
      configYaml: toYaml({
        kubernetes: {
          kubeconfigPath: await plane.writeKubeconfig('rewrite-kubeconfig.yaml'),
          inferencePools: { enabled: true, namespaces: [NS] },
          backoff: { initialMs: 100, maxMs: 500 },
          timeouts: { listSeconds: 10, watchSeconds: 60 },
        },
        picker: { pools: { [POOL]: { metricsFormat: 'none' } } },
      }),
      backendAddresses: [first.address, second.address],
      logger,
    });
    t.after(() => gateway.stop());
    /** Waits for the source to hand over rules, logged after line `from`, that `check` accepts. */
    const applied = async (from: number, check: (rules: unknown[]) => boolean, what: string): Promise<void> => {
      await waitUntil(
        () => (logs.slice(from).some((l) => l.msg === 'InferenceModelRewrite rules changed' && check(l.rules ?? [])) ? true : undefined),
        { description: what, timeoutMs: TIMEOUT_MS },
      );
    };
    await waitUntil(
      () =>
        gateway.app.store
          .view()
          .pools.get(POOL)
          ?.endpoints.filter((e) => e.state === 'Ready').length === 2
          ? true
          : undefined,
      {
        description: 'the pool and its two Ready pods',
        timeoutMs: TIMEOUT_MS,
      },
    );
    await applied(0, (rules) => rules.length === 1, 'the 90/10 rewrite applied');

    let nextId = 0;
    /** Sends `n` requests for `m` (CONCURRENCY at a time); returns the model each model server received, per request. */
    const send = async (n: number): Promise<string[]> => {
      const seen: string[] = [];
      const ids = Array.from({ length: n }, () => nextId++);
      for (let i = 0; i < ids.length; i += CONCURRENCY) {
        const batch = ids.slice(i, i + CONCURRENCY);
        const responses = await Promise.all(
          batch.map((id) => gateway.send({ path: '/v1/chat/completions', headers: { 'x-test-id': String(id) }, body: bodyText(id, 'm') })),
        );
        for (const [k, response] of responses.entries()) {
          assert.equal(response.status, 200, response.text());
          const id = batch[k];
          const received = servers.flatMap((s) => s.requests).find((r) => r.headers['x-test-id'] === String(id));
          assert.ok(received !== undefined, `request ${id} reached a model server`);
          const sentAs = (JSON.parse(received.body.toString()) as { model: string }).model;
          // Every other byte as the client wrote it: spacing, the escape, the nested "model".
          assert.equal(received.body.toString(), bodyText(id, sentAs), `request ${id}: only the model's value changed`);
          // The answer as the model server wrote it, byte for byte: it names the model that served
          // (the rewritten name), not the one the client asked for (docs/picking.md, "Model rewrite").
          assert.equal(response.text(), received.response.body.toString(), `request ${id}: the answer untouched`);
          assert.equal((response.json() as { model: string }).model, sentAs, `request ${id}: the answer names ${sentAs}`);
          seen.push(sentAs);
        }
      }
      return seen;
    };
    const tally = (models: string[]): Record<string, number> => {
      const counts: Record<string, number> = {};
      for (const m of models) counts[m] = (counts[m] ?? 0) + 1;
      return counts;
    };

    // 90/10 over 1,000 requests, within ±3 points; both model servers take part and see both names.
    const split = tally(await send(1000));
    assert.deepEqual(Object.keys(split).sort(), ['m-v1', 'm-v2'], JSON.stringify(split));
    assert.ok(Math.abs(split['m-v2'] / 1000 - 0.1) <= 0.03, `m-v2 got ${split['m-v2']} of 1000: ${JSON.stringify(split)}`);
    assert.ok(Math.abs(split['m-v1'] / 1000 - 0.9) <= 0.03, `m-v1 got ${split['m-v1']} of 1000`);
    for (const server of servers) {
      const names = new Set(
        server.requests
          .filter((r) => r.path === '/v1/chat/completions')
          .map((r) => (JSON.parse(r.body.toString()) as { model: string }).model),
      );
      assert.ok(names.has('m-v1') && !names.has('m'), `${server.address} received the rewritten names: ${[...names].join(',')}`);
    }
    // Every ext_proc stream of the 1,000 closed with OK (llm-d's stream series), once Envoy has ended them.
    const metrics = await waitUntil(
      async () => {
        const text = await gateway.metricsText();
        return /^llm_d_epp_extproc_streams_total\{code="OK"\} 1000$/m.test(text) ? text : undefined;
      },
      { description: '1,000 ext_proc streams closed with OK', timeoutMs: TIMEOUT_MS },
    );
    assert.match(metrics, /^llm_d_epp_extproc_stream_duration_seconds_count 1000$/m);
    for (const [target, count] of Object.entries(split)) {
      // Routed by both names, and all finished.
      assert.match(metrics, new RegExp(`^llm_d_epp_request_running\\{model_name="m",target_model_name="${target}"\\} 0$`, 'm'));
      for (const family of ['inference_objective_request_total', 'llm_d_epp_request_total']) {
        assert.match(
          metrics,
          new RegExp(`^${family}\\{model_name="m",target_model_name="${target}"\\} ${count}$`, 'm'),
          `${family} for ${target}`,
        );
      }
    }

    // Live: everything to m-v2. Every request after the change moves.
    let mark = logs.length;
    await custom.patchNamespacedCustomObject({
      ...rewrites,
      name: 'm-canary',
      body: [{ op: 'replace', path: '/spec/rules/0/targets', value: [{ modelRewrite: 'm-v2', weight: 100 }] }],
    });
    await applied(
      mark,
      (rules) => JSON.stringify(rules).includes('"targets":[{"modelRewrite":"m-v2","weight":100}]'),
      'the change applied',
    );
    assert.deepEqual(tally(await send(200)), { 'm-v2': 200 });

    // Deleted: the name as sent.
    mark = logs.length;
    await custom.deleteNamespacedCustomObject({ ...rewrites, name: 'm-canary' });
    await applied(mark, (rules) => rules.length === 0, 'the deletion applied');
    assert.deepEqual(tally(await send(100)), { m: 100 });

    // The deprecated group installed beside llm-d's, with a rewrite of its own: ignored (llm-d's rule), said once.
    const manifest = await readFile(join(repoRoot(), 'test', 'support', 'crds', 'llm-d.ai-v1alpha2.yaml'), 'utf8');
    const legacyGroup = 'inference.networking.x-k8s.io';
    const legacyCrd = manifest.split('\n---\n').find((doc) => doc.includes('kind: InferenceModelRewrite')) ?? '';
    await plane.installCrds(legacyCrd.replaceAll('llm-d.ai', legacyGroup));
    await custom.createNamespacedCustomObject({
      group: legacyGroup,
      version: 'v1alpha2',
      namespace: NS,
      plural: 'inferencemodelrewrites',
      body: {
        apiVersion: `${legacyGroup}/v1alpha2`,
        kind: 'InferenceModelRewrite',
        metadata: { name: 'old-group', namespace: NS },
        spec: { poolRef: { name: 'chat-pool' }, rules: [{ matches: [{ model: { value: 'm' } }], targets: [{ modelRewrite: 'm-v1' }] }] },
      },
    });
    const both = (): LogLine[] => logs.filter((l) => /InferenceModelRewrite is installed under both/.test(l.msg));
    await waitUntil(() => (both().length > 0 ? true : undefined), { description: 'both groups said', timeoutMs: TIMEOUT_MS });
    assert.deepEqual(tally(await send(50)), { m: 50 }, 'the deprecated group is ignored while llm-d.ai is installed');
    assert.equal(both().length, 1, 'said once');
    assert.equal(both()[0].level, 40);
  });
});
