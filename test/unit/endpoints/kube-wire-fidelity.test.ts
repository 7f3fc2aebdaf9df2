// The Kubernetes source against what a real API server does on the wire and our fake did not:
// paged lists (limit/continue, an expired continue token), HTTP 410 when a watch starts from a
// compacted resourceVersion, watch events split across chunks (even inside a UTF-8 character) or
// merged into one, and a watch ending at its timeoutSeconds. The real server cannot produce most
// of these on demand, so the fake does, with the real @kubernetes/client-node in between.

import assert from 'node:assert/strict';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, it } from 'node:test';
import type { TestContext } from 'node:test';
import { pino } from 'pino';
import { KubernetesSource } from '../../../src/endpoints/kubernetes-source.js';
import { LIST_PAGE_SIZE } from '../../../src/endpoints/list-watch.js';
import type { KubernetesSourceConfig, KubernetesSourceObserver } from '../../../src/endpoints/kubernetes-source.js';
import type { EndpointSink, ObservedPool } from '../../../src/endpoints/model.js';
import { FakeKubeApi, podsPath, writeKubeconfig } from '../../support/fake-kube-api.js';
import { notReadyPod, pendingPod, readyPod } from '../../support/pod-builders.js';
import { waitUntil } from '../../support/wait-until.js';

const NS = 'models';
const LABELS = { app: 'vllm' };
const POOL = { name: 'llama', namespace: NS, selector: LABELS, targetPort: 8000, models: ['llama-3-8b'] };
const PATH = podsPath(NS);

class Recorder implements EndpointSink, KubernetesSourceObserver {
  latest: readonly ObservedPool[] = [];
  synced = false;
  readonly restarts: string[] = [];

  replaceAll(_source: string, pools: readonly ObservedPool[]): void {
    this.latest = pools;
  }

  markSynced(): void {
    this.synced = true;
  }

  watchRestarted(_resource: string, reason: string): void {
    this.restarts.push(reason);
  }

  listed(): void {}
  eventReceived(): void {}

  state(name: string): string | undefined {
    return this.latest[0]?.endpoints.find((e) => e.id === `${NS}/${name}`)?.state;
  }

  reason(name: string): string | undefined {
    return this.latest[0]?.endpoints.find((e) => e.id === `${NS}/${name}`)?.reason;
  }

  count(): number {
    return this.latest[0]?.endpoints.length ?? 0;
  }
}

async function start(
  t: TestContext,
  prepare: (api: FakeKubeApi) => void,
  config: Partial<KubernetesSourceConfig> = {},
): Promise<{ api: FakeKubeApi; rec: Recorder }> {
  const api = await FakeKubeApi.start({ historyLimit: 100_000 });
  const dir = mkdtempSync(join(tmpdir(), 'kube-wire-'));
  prepare(api);
  const rec = new Recorder();
  const source = new KubernetesSource(
    { kubeconfigPath: writeKubeconfig(dir, api), pools: [POOL], backoff: { initialMs: 10, maxMs: 100 }, ...config },
    { logger: pino({ level: 'silent' }), observer: rec },
  );
  t.after(async () => {
    await source.stop();
    await api.stop();
    rmSync(dir, { recursive: true, force: true });
  });
  source.start(rec);
  return { api, rec };
}

function pod(builder: typeof readyPod, name: string): ReturnType<typeof readyPod> {
  return builder({ name, namespace: NS, labels: LABELS });
}

function until(description: string, check: () => boolean): Promise<true> {
  return waitUntil(() => (check() ? true : undefined), { description, timeoutMs: 15_000 });
}

function listRequests(api: FakeKubeApi): Array<{ query: URLSearchParams; status: number }> {
  return api.requests.filter((r) => !r.watch && r.path === PATH).map((r) => ({ query: new URLSearchParams(r.query), status: r.status }));
}

void describe('KubernetesSource on the real wire format', () => {
  void it('lists thousands of pods in pages (limit/continue) and watches from the list resourceVersion', async (t) => {
    const total = 2 * LIST_PAGE_SIZE + 234;
    const { api, rec } = await start(t, (api) => {
      for (let i = 0; i < total; i++) api.upsertPod(pod(i % 2 === 0 ? readyPod : notReadyPod, `vllm-${String(i).padStart(5, '0')}`));
    });
    await until('synced', () => rec.synced);
    assert.equal(rec.count(), total);
    const lists = listRequests(api);
    assert.deepEqual(
      lists.map((l) => l.query.get('limit')),
      [String(LIST_PAGE_SIZE), String(LIST_PAGE_SIZE), String(LIST_PAGE_SIZE)],
    );
    assert.deepEqual(
      lists.map((l) => l.query.has('continue')),
      [false, true, true],
    );
    // Changes after the list arrive through the watch, none lost between pages.
    api.upsertPod(pod(notReadyPod, 'vllm-00000'));
    await until('vllm-00000 NotReady', () => rec.state('vllm-00000') === 'NotReady');
    assert.equal(rec.state('vllm-00001'), 'NotReady');
    assert.equal(rec.state('vllm-00002'), 'Ready');
  });

  void it('starts the list over when its continue token expires between pages (410)', async (t) => {
    const total = LIST_PAGE_SIZE + 10;
    const { api, rec } = await start(t, (api) => {
      for (let i = 0; i < total; i++) api.upsertPod(pod(readyPod, `vllm-${String(i).padStart(5, '0')}`));
      api.expireNextContinueTokens(1);
    });
    await until('synced', () => rec.synced);
    assert.equal(rec.count(), total);
    const lists = listRequests(api);
    // Page 1, page 2 refused with 410, then page 1 and page 2 again.
    assert.deepEqual(
      lists.map((l) => [l.query.has('continue'), l.status]),
      [
        [false, 200],
        [true, 410],
        [false, 200],
        [true, 200],
      ],
    );
  });

  void it('relists when a watch from a compacted resourceVersion is refused with HTTP 410', async (t) => {
    const { api, rec } = await start(t, (api) => {
      api.upsertPod(pod(readyPod, 'vllm-a'));
      api.upsertPod(pod(readyPod, 'vllm-b'));
      api.setWatchGoneMode('http');
    });
    await until('synced', () => rec.synced);
    await api.waitForWatch(PATH);
    const listsBefore = api.listCount(PATH);
    const rewatched = api.nextWatch(PATH);
    api.dropWatches();
    api.upsertPod(pod(notReadyPod, 'vllm-b'));
    api.compactHistory();
    await rewatched;
    await until('vllm-b NotReady', () => rec.state('vllm-b') === 'NotReady');
    assert.ok(
      api.requests.some((r) => r.watch && r.status === 410),
      'a watch was refused with HTTP 410',
    );
    assert.ok(rec.restarts.includes('gone'), `restarts: ${rec.restarts.join(', ')}`);
    assert.equal(api.listCount(PATH), listsBefore + 1, 'relisted once after the 410');
  });

  void it('reads watch events split across chunks, even inside a UTF-8 character', async (t) => {
    const { api, rec } = await start(t, (api) => api.upsertPod(pod(readyPod, 'vllm-a')));
    await until('synced', () => rec.synced);
    await api.waitForWatch(PATH);
    api.setEventFraming('split');
    const writesBefore = api.eventWrites;
    const pending = pod(pendingPod, 'vllm-a');
    const condition = pending.status.conditions[0];
    assert.ok(condition !== undefined);
    // Multi-byte characters everywhere, so the byte thirds fall inside some of them.
    condition.message = '0/3 nœuds disponibles — モデルを待っています ⏳';
    api.upsertPod(pending);
    await until('vllm-a Pending', () => rec.state('vllm-a') === 'Pending');
    assert.equal(rec.reason('vllm-a'), 'Unschedulable: 0/3 nœuds disponibles — モデルを待っています ⏳');
    assert.ok(api.eventWrites - writesBefore >= 3, `the event went out in ${api.eventWrites - writesBefore} writes`);
  });

  void it('reads several watch events merged into one chunk', async (t) => {
    const { api, rec } = await start(t, (api) => {
      for (const name of ['vllm-a', 'vllm-b', 'vllm-c']) api.upsertPod(pod(notReadyPod, name));
    });
    await until('synced', () => rec.synced);
    await api.waitForWatch(PATH);
    api.setEventFraming('merged');
    const writesBefore = api.eventWrites;
    api.upsertPod(pod(readyPod, 'vllm-a'));
    api.deletePod(NS, 'vllm-b');
    api.upsertPod(pod(readyPod, 'vllm-d'));
    await until(
      'all three changes',
      () => rec.state('vllm-a') === 'Ready' && rec.state('vllm-b') === undefined && rec.state('vllm-d') === 'Ready',
    );
    assert.equal(api.eventWrites - writesBefore, 1, 'the three events went out in one write');
    assert.equal(rec.state('vllm-c'), 'NotReady');
  });

  void it('resumes a watch the server ends at timeoutSeconds without relisting or counting a restart', async (t) => {
    const { api, rec } = await start(t, (api) => api.upsertPod(pod(notReadyPod, 'vllm-a')), { timeouts: { watchSeconds: 1 } });
    await until('synced', () => rec.synced);
    await until('two watches ended at their timeout', () => api.watchCount(PATH) >= 3);
    const watches = api.requests.filter((r) => r.watch && r.path === PATH).map((r) => new URLSearchParams(r.query));
    assert.ok(watches.every((q) => q.get('timeoutSeconds') === '1'));
    assert.ok(
      watches.slice(1).every((q) => q.get('resourceVersion') !== null && q.get('resourceVersion') !== ''),
      'each resume names a resourceVersion',
    );
    api.upsertPod(pod(readyPod, 'vllm-a'));
    await until('vllm-a Ready', () => rec.state('vllm-a') === 'Ready');
    assert.equal(api.listCount(PATH), 1, 'no relist');
    assert.deepEqual(rec.restarts, [], 'an expired watch is routine, not a restart');
  });
});
