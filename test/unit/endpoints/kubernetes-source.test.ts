// The Kubernetes source, with the real @kubernetes/client-node, against the fake API server
// through a kubeconfig. Nothing of ours is mocked: the sink and observer only record.

import { describe, it } from 'node:test';
import type { TestContext } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { pino } from 'pino';
import type { Logger } from 'pino';
import { KubernetesSource } from '../../../src/endpoints/kubernetes-source.js';
import type { KubernetesSourceConfig, KubernetesSourceObserver } from '../../../src/endpoints/kubernetes-source.js';
import type { EndpointSink, ObservedEndpoint, ObservedPool } from '../../../src/endpoints/model.js';
import type { ObjectiveIndex } from '../../../src/endpoints/inference-objectives.js';
import { FakeKubeApi, inferenceObjectivesPath, inferencePoolsPath, podsPath, writeKubeconfig } from '../../support/fake-kube-api.js';
import type { KubeObject } from '../../support/fake-kube-api.js';
import { crashLoopPod, notReadyPod, pendingPod, readyPod, startingPod } from '../../support/pod-builders.js';

const NS = 'models';
const LABELS = { app: 'vllm', model: 'llama' };
const POOL = { name: 'llama', namespace: NS, selector: LABELS, targetPort: 8000, models: ['llama-3-8b'] };

class RecordingSink implements EndpointSink {
  readonly views: (readonly ObservedPool[])[] = [];
  syncCalls = 0;
  /** The view as it was when `markSynced` was called. */
  viewAtSync: readonly ObservedPool[] | undefined;

  replaceAll(source: string, pools: readonly ObservedPool[]): void {
    assert.equal(source, 'kubernetes');
    this.views.push(pools);
  }

  markSynced(source: string): void {
    assert.equal(source, 'kubernetes');
    this.syncCalls++;
    this.viewAtSync = this.latest();
  }

  get synced(): boolean {
    return this.syncCalls > 0;
  }

  latest(): readonly ObservedPool[] {
    return this.views.at(-1) ?? [];
  }

  pool(name: string): ObservedPool | undefined {
    return this.latest().find((p) => p.name === name);
  }

  endpoint(pool: string, id: string): ObservedEndpoint | undefined {
    return this.pool(pool)?.endpoints.find((e) => e.id === id);
  }

  ids(pool: string): string[] {
    return (this.pool(pool)?.endpoints ?? []).map((e) => e.id);
  }
}

class RecordingObserver implements KubernetesSourceObserver {
  readonly restarts: Array<{ resource: string; reason: string }> = [];
  readonly lists: string[] = [];
  readonly events: string[] = [];

  watchRestarted(resource: string, reason: 'gone' | 'dropped' | 'error'): void {
    this.restarts.push({ resource, reason });
  }

  listed(resource: string): void {
    this.lists.push(resource);
  }

  eventReceived(resource: string): void {
    this.events.push(resource);
  }

  restartCount(reason: string): number {
    return this.restarts.filter((r) => r.reason === reason).length;
  }
}

interface LogEntry {
  level: number;
  msg: string;
  [key: string]: unknown;
}

/** A pino logger whose JSON lines the test can read. */
function recordingLogger(): { logger: Logger; entries: LogEntry[] } {
  const entries: LogEntry[] = [];
  const logger = pino(
    { level: 'debug' },
    {
      write(line: string): void {
        entries.push(JSON.parse(line) as LogEntry);
      },
    },
  );
  return { logger, entries };
}

/** Polls `check` until it holds or the deadline passes (then fails with `what`). */
async function eventually(what: string, check: () => boolean, timeoutMs = 5000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!check()) {
    if (Date.now() > deadline) assert.fail(`timed out waiting for: ${what}`);
    await new Promise((resolve) => setTimeout(resolve, 5));
  }
}

interface Harness {
  /** Every objective table the source handed over, oldest first. */
  objectives: ObjectiveIndex[];
  api: FakeKubeApi;
  source: KubernetesSource;
  sink: RecordingSink;
  observer: RecordingObserver;
  logs: LogEntry[];
  kubeconfigPath: string;
  start(): void;
}

async function setup(
  t: TestContext,
  config: Partial<KubernetesSourceConfig> = {},
  prepare?: (api: FakeKubeApi) => Promise<void> | void,
  /** false = as the app runs it with flow control off everywhere: nobody reads objectives. */
  flowControl = true,
): Promise<Harness> {
  const api = await FakeKubeApi.start();
  const dir = mkdtempSync(join(tmpdir(), 'kube-source-test-'));
  const kubeconfigPath = writeKubeconfig(dir, api);
  await prepare?.(api);
  const { logger, entries } = recordingLogger();
  const observer = new RecordingObserver();
  const sink = new RecordingSink();
  const objectives: ObjectiveIndex[] = [];
  const source = new KubernetesSource(
    { kubeconfigPath, pools: [POOL], backoff: { initialMs: 10, maxMs: 100 }, ...config },
    { logger, observer, ...(flowControl ? { objectivesChanged: (index: ObjectiveIndex) => objectives.push(index) } : {}) },
  );
  t.after(async () => {
    await source.stop();
    await api.stop();
    rmSync(dir, { recursive: true, force: true });
  });
  return { api, source, sink, observer, objectives, logs: entries, kubeconfigPath, start: () => source.start(sink) };
}

function pod(
  builder: typeof readyPod,
  name: string,
  extra: { ip?: string; labels?: Record<string, string>; namespace?: string } = {},
): KubeObject {
  return builder({ name, namespace: extra.namespace ?? NS, labels: extra.labels ?? LABELS, ...(extra.ip ? { ip: extra.ip } : {}) });
}

function lastWatchQuery(api: FakeKubeApi, path: string): URLSearchParams {
  const found = api.requests.filter((r) => r.watch && r.path === path).at(-1);
  assert.ok(found, `a watch request on ${path}`);
  return new URLSearchParams(found.query);
}

void describe('KubernetesSource: initial list', () => {
  void it('lists before serving: the first synced view holds every matching pod with its state', async (t) => {
    const h = await setup(t, {}, (api) => {
      api.upsertPod(pod(readyPod, 'vllm-ready', { ip: '10.1.0.1' }));
      api.upsertPod(pod(notReadyPod, 'vllm-loading', { ip: '10.1.0.2' }));
      api.upsertPod(pod(pendingPod, 'vllm-pending'));
      api.upsertPod(pod(crashLoopPod, 'vllm-crashing', { ip: '10.1.0.3' }));
      api.upsertPod(pod(readyPod, 'other-app', { labels: { app: 'other' }, ip: '10.1.0.9' }));
      api.upsertPod(pod(readyPod, 'vllm-elsewhere', { namespace: 'elsewhere', ip: '10.1.0.8' }));
    });
    h.start();
    await eventually('synced', () => h.sink.synced);

    assert.equal(h.sink.syncCalls, 1);
    const view = h.sink.viewAtSync;
    assert.ok(view);
    assert.deepEqual(
      view.map((p) => ({ name: p.name, models: p.models })),
      [{ name: 'llama', models: ['llama-3-8b'] }],
    );
    const byId = new Map(view[0]?.endpoints.map((e) => [e.id, e]));
    assert.deepEqual([...byId.keys()].sort(), ['models/vllm-crashing', 'models/vllm-loading', 'models/vllm-pending', 'models/vllm-ready']);
    assert.deepEqual(byId.get('models/vllm-ready'), { id: 'models/vllm-ready', address: '10.1.0.1:8000', state: 'Ready', reason: 'ready' });
    assert.equal(byId.get('models/vllm-loading')?.state, 'NotReady');
    assert.equal(byId.get('models/vllm-loading')?.reason, 'readiness probe failing: container model-server');
    assert.equal(byId.get('models/vllm-pending')?.state, 'Pending');
    assert.equal(byId.get('models/vllm-pending')?.address, '');
    assert.equal(byId.get('models/vllm-crashing')?.state, 'CrashLoop');

    // The client asked for what we meant: the pool's selector, bookmarks, a bearer token.
    await h.api.waitForWatch(podsPath(NS));
    const query = lastWatchQuery(h.api, podsPath(NS));
    assert.equal(query.get('labelSelector'), 'app=vllm,model=llama');
    assert.equal(query.get('allowWatchBookmarks'), 'true');
    assert.ok(h.api.requests.every((r) => r.authorization === 'Bearer fake-token'));
    assert.deepEqual(h.observer.lists, ['pods/llama']);
  });

  void it("honours llm-d's pod keys and their inference.networking.k8s.io aliases: active-ports and engine-type", async (t) => {
    const annotated = (name: string, ip: string, annotations: Record<string, string>, labels: Record<string, string> = {}): KubeObject => {
      const object = pod(readyPod, name, { ip, labels: { ...LABELS, ...labels } });
      return { ...object, metadata: { ...object.metadata, annotations } };
    };
    const h = await setup(t, {}, (api) => {
      api.upsertPod(annotated('serves-8000', '10.1.0.1', { 'llm-d.ai/active-ports': '8001, 8000' }, { 'llm-d.ai/engine-type': 'sglang' }));
      api.upsertPod(annotated('serves-8001', '10.1.0.2', { 'llm-d.ai/active-ports': '8001' }));
      api.upsertPod(
        annotated(
          'legacy-keys',
          '10.1.0.3',
          { 'inference.networking.k8s.io/active-ports': '9000' },
          {
            'inference.networking.k8s.io/engine-type': 'vllm',
          },
        ),
      );
      // llm-d's key wins over the alias when both are set.
      api.upsertPod(
        annotated('both-keys', '10.1.0.4', { 'llm-d.ai/active-ports': '8000', 'inference.networking.k8s.io/active-ports': '9000' }),
      );
      api.upsertPod(annotated('no-keys', '10.1.0.5', {}));
    });
    h.start();
    await eventually('synced', () => h.sink.synced);
    const seen = Object.fromEntries(
      (h.sink.viewAtSync?.[0]?.endpoints ?? []).map((e) => [e.id.replace('models/', ''), [e.state, e.engine ?? '-']]),
    );
    assert.deepEqual(seen, {
      'serves-8000': ['Ready', 'sglang'],
      'serves-8001': ['NotReady', '-'],
      'legacy-keys': ['NotReady', 'vllm'],
      'both-keys': ['Ready', '-'],
      'no-keys': ['Ready', '-'],
    });
    assert.equal(h.sink.endpoint('llama', 'models/serves-8001')?.reason, "port 8000 not in the pod's active-ports annotation");
  });

  void it('is not synced until every pool has listed (one namespace forbidden, then allowed)', async (t) => {
    const second = { name: 'mistral', namespace: 'team-b', selector: { app: 'mistral' }, targetPort: 9000, models: ['mistral-7b'] };
    const h = await setup(t, { pools: [POOL, second] }, (api) => {
      api.setPathError(podsPath('team-b'), 403);
      api.upsertPod(pod(readyPod, 'vllm-0', { ip: '10.1.0.1' }));
      api.upsertPod(readyPod({ name: 'mistral-0', namespace: 'team-b', labels: { app: 'mistral' }, ip: '10.2.0.1' }));
    });
    h.start();
    await eventually('pool llama listed', () => h.observer.lists.includes('pods/llama'));
    await eventually('team-b list retried', () => h.api.requests.filter((r) => r.path === podsPath('team-b')).length >= 3);
    assert.equal(h.sink.synced, false, 'must not be synced while a pool has never listed');
    assert.deepEqual(h.sink.ids('llama'), ['models/vllm-0']);
    assert.deepEqual(h.sink.ids('mistral'), []);
    assert.ok(
      h.logs.some(
        (e) => e.msg === 'list failed; will retry' && e['detail'] === `HTTP 403: request to ${podsPath('team-b')} fails on purpose`,
      ),
    );

    h.api.setPathError(podsPath('team-b'), undefined);
    await eventually('synced', () => h.sink.synced);
    assert.deepEqual(
      h.sink.viewAtSync?.map((p) => [p.name, p.endpoints.map((e) => e.address)]),
      [
        ['llama', ['10.1.0.1:8000']],
        ['mistral', ['10.2.0.1:9000']],
      ],
    );
  });
});

void describe('KubernetesSource: watch events', () => {
  void it('reflects ADDED, MODIFIED and DELETED, including pods leaving the selector', async (t) => {
    const h = await setup(t);
    h.start();
    await eventually('synced', () => h.sink.synced);
    assert.deepEqual(h.sink.ids('llama'), []);

    h.api.upsertPod(pod(startingPod, 'vllm-0'));
    await eventually('starting pod appears', () => h.sink.endpoint('llama', 'models/vllm-0')?.state === 'Starting');
    assert.equal(h.sink.endpoint('llama', 'models/vllm-0')?.reason, 'ContainerCreating: container model-server');

    h.api.upsertPod(pod(notReadyPod, 'vllm-0', { ip: '10.1.0.5' }));
    await eventually('not ready', () => h.sink.endpoint('llama', 'models/vllm-0')?.state === 'NotReady');
    assert.equal(h.sink.endpoint('llama', 'models/vllm-0')?.address, '10.1.0.5:8000');

    h.api.upsertPod(pod(readyPod, 'vllm-0', { ip: '10.1.0.5' }));
    await eventually('ready', () => h.sink.endpoint('llama', 'models/vllm-0')?.state === 'Ready');

    h.api.upsertPod(pod(readyPod, 'vllm-1', { ip: '10.1.0.6' }));
    await eventually('second pod', () => h.sink.ids('llama').length === 2);

    // Relabelled out of the pool: the watch reports it as DELETED.
    h.api.upsertPod(pod(readyPod, 'vllm-1', { ip: '10.1.0.6', labels: { app: 'vllm', model: 'other' } }));
    await eventually('relabelled pod leaves', () => h.sink.endpoint('llama', 'models/vllm-1') === undefined);

    h.api.deletePod(NS, 'vllm-0');
    await eventually('deleted pod leaves', () => h.sink.ids('llama').length === 0);
    assert.ok(h.observer.events.filter((r) => r === 'pods/llama').length >= 5);
    assert.equal(h.observer.restarts.length, 0);
  });

  void it('a pod being deleted turns Terminating at once, then disappears', async (t) => {
    const h = await setup(t, {}, (api) => {
      api.upsertPod(pod(readyPod, 'vllm-0', { ip: '10.1.0.5' }));
    });
    h.start();
    await eventually('ready', () => h.sink.endpoint('llama', 'models/vllm-0')?.state === 'Ready');

    h.api.setPodDeletionTimestamp(NS, 'vllm-0');
    await eventually('terminating', () => h.sink.endpoint('llama', 'models/vllm-0')?.state === 'Terminating');
    assert.equal(h.sink.endpoint('llama', 'models/vllm-0')?.reason, 'pod is being deleted');

    h.api.deletePod(NS, 'vllm-0');
    await eventually('gone from the cache', () => h.sink.endpoint('llama', 'models/vllm-0') === undefined);
  });
});

void describe('KubernetesSource: watch faults', () => {
  void it('410 Gone on an open watch (ERROR event): relists and keeps going', async (t) => {
    const h = await setup(t, {}, (api) => {
      api.upsertPod(pod(readyPod, 'vllm-0', { ip: '10.1.0.5' }));
    });
    h.start();
    await eventually('synced', () => h.sink.synced);
    await h.api.waitForWatch(podsPath(NS));
    const listsBefore = h.api.listCount(podsPath(NS));

    const rewatched = h.api.nextWatch(podsPath(NS));
    assert.equal(h.api.expireWatches(), 1);
    await rewatched;
    assert.equal(h.api.listCount(podsPath(NS)), listsBefore + 1, 'relisted after 410');
    assert.equal(h.observer.restartCount('gone'), 1);
    assert.deepEqual(h.observer.restarts, [{ resource: 'pods/llama', reason: 'gone' }]);

    h.api.upsertPod(pod(readyPod, 'vllm-1', { ip: '10.1.0.6' }));
    await eventually('events flow after the relist', () => h.sink.ids('llama').length === 2);
  });

  void it('410 Gone when resuming after an outage: converges to the changes made meanwhile', async (t) => {
    const h = await setup(t, {}, (api) => {
      api.upsertPod(pod(readyPod, 'vllm-0', { ip: '10.1.0.5' }));
      api.upsertPod(pod(readyPod, 'vllm-1', { ip: '10.1.0.6' }));
      api.upsertPod(pod(notReadyPod, 'vllm-2', { ip: '10.1.0.7' }));
    });
    h.start();
    await eventually('synced', () => h.sink.ids('llama').length === 3 && h.sink.synced);
    await h.api.waitForWatch(podsPath(NS));
    const staleRv = lastWatchQuery(h.api, podsPath(NS)).get('resourceVersion');

    // The API server fails (watch cut, 500s on rewatch) while the cluster keeps changing, and
    // history is compacted before it comes back.
    await h.api.setUnavailable(true, 'error');
    h.api.deletePod(NS, 'vllm-0');
    h.api.upsertPod(pod(crashLoopPod, 'vllm-1', { ip: '10.1.0.6' }));
    h.api.upsertPod(pod(readyPod, 'vllm-2', { ip: '10.1.0.7' }));
    h.api.upsertPod(pod(readyPod, 'vllm-3', { ip: '10.1.0.8' }));
    h.api.compactHistory();
    await eventually('the client is retrying', () => h.observer.restartCount('error') >= 2);
    assert.deepEqual(h.sink.ids('llama'), ['models/vllm-0', 'models/vllm-1', 'models/vllm-2'], 'cache unchanged while the API is down');

    await h.api.setUnavailable(false);
    await eventually('converged', () => {
      const p = h.sink.pool('llama');
      return (
        p !== undefined &&
        p.endpoints.map((e) => `${e.id}=${e.state}`).join(' ') === 'models/vllm-1=CrashLoop models/vllm-2=Ready models/vllm-3=Ready'
      );
    });
    assert.ok(h.observer.restartCount('dropped') >= 1, 'the cut watch counted as dropped');
    assert.ok(h.observer.restartCount('gone') >= 1, 'resuming from the stale resourceVersion hit 410');
    assert.ok(
      h.api.requests.some((r) => r.watch && new URLSearchParams(r.query).get('resourceVersion') === staleRv && r.status === 200),
      'it first tried to resume from where it was',
    );
    await h.api.waitForWatch(podsPath(NS));
    assert.equal(h.sink.syncCalls, 1, 'markSynced is called once, not again after recovery');
  });

  void it('dropped watch: reconnects from the last resourceVersion and catches up without relisting', async (t) => {
    const h = await setup(t, {}, (api) => {
      api.upsertPod(pod(readyPod, 'vllm-0', { ip: '10.1.0.5' }));
    });
    h.start();
    await eventually('synced', () => h.sink.synced);
    await h.api.waitForWatch(podsPath(NS));
    const listsBefore = h.api.listCount(podsPath(NS));
    const rvBefore = h.api.resourceVersion;

    const reconnected = h.api.nextWatch(podsPath(NS));
    assert.equal(h.api.dropWatches(), 1);
    // Changes while the client has no watch open; it must replay them on reconnect.
    h.api.upsertPod(pod(notReadyPod, 'vllm-0', { ip: '10.1.0.5' }));
    h.api.upsertPod(pod(readyPod, 'vllm-1', { ip: '10.1.0.6' }));
    await reconnected;
    await eventually(
      'caught up',
      () => h.sink.endpoint('llama', 'models/vllm-0')?.state === 'NotReady' && h.sink.endpoint('llama', 'models/vllm-1')?.state === 'Ready',
    );

    assert.equal(h.api.listCount(podsPath(NS)), listsBefore, 'no relist needed');
    assert.equal(lastWatchQuery(h.api, podsPath(NS)).get('resourceVersion'), rvBefore);
    assert.deepEqual(h.observer.restarts, [{ resource: 'pods/llama', reason: 'dropped' }]);
  });

  void it('API server unreachable at start: not synced, keeps retrying, syncs when it comes up', async (t) => {
    const h = await setup(t, {}, async (api) => {
      api.upsertPod(pod(readyPod, 'vllm-0', { ip: '10.1.0.5' }));
      await api.setUnavailable(true, 'refuse');
    });
    assert.doesNotThrow(() => h.start());
    await eventually('several failed attempts', () => h.logs.filter((e) => e.msg === 'list failed; will retry').length >= 3);
    assert.equal(h.sink.synced, false);
    assert.ok(h.logs.some((e) => e.msg === 'list failed; will retry' && e['detail'] === 'ECONNREFUSED'));
    assert.deepEqual(h.sink.ids('llama'), [], 'the pool is known but empty');

    await h.api.setUnavailable(false);
    await eventually('synced', () => h.sink.synced);
    assert.deepEqual(
      h.sink.viewAtSync?.[0]?.endpoints.map((e) => e.state),
      ['Ready'],
    );
  });

  void it('API server failing with 500 at start, then recovering', async (t) => {
    const h = await setup(t, {}, async (api) => {
      api.upsertPod(pod(readyPod, 'vllm-0', { ip: '10.1.0.5' }));
      await api.setUnavailable(true, 'error');
    });
    h.start();
    await eventually('several 500s', () => h.api.requests.filter((r) => r.status === 500).length >= 3);
    assert.equal(h.sink.synced, false);
    await h.api.setUnavailable(false);
    await eventually('synced', () => h.sink.synced);
    assert.deepEqual(h.sink.ids('llama'), ['models/vllm-0']);
  });

  void it('slow API: a list that exceeds its timeout is abandoned and retried', async (t) => {
    const h = await setup(t, { timeouts: { listSeconds: 0.2 } }, (api) => {
      api.upsertPod(pod(readyPod, 'vllm-0', { ip: '10.1.0.5' }));
      api.setLatency(1000);
    });
    h.start();
    await eventually('a list timed out', () =>
      h.logs.some((e) => e.msg === 'list failed; will retry' && e['detail'] === 'list timed out after 0.2 s'),
    );
    assert.equal(h.sink.synced, false);
    h.api.setLatency(0);
    await eventually('synced', () => h.sink.synced);
    assert.deepEqual(h.sink.ids('llama'), ['models/vllm-0']);
  });

  void it('bookmarks advance the resourceVersion, so a resume after compaction needs no relist', async (t) => {
    const h = await setup(t);
    h.start();
    await eventually('synced', () => h.sink.synced);
    await h.api.waitForWatch(podsPath(NS));
    const listsBefore = h.api.listCount(podsPath(NS));

    // Activity the pool does not see moves the global resourceVersion on.
    h.api.upsertPod(pod(readyPod, 'unrelated', { namespace: 'elsewhere' }));
    h.api.upsertPod(pod(readyPod, 'unrelated-2', { namespace: 'elsewhere' }));
    const eventsBefore = h.observer.events.length;
    assert.equal(h.api.sendBookmark(), 1);
    await eventually('bookmark received', () => h.observer.events.length > eventsBefore);
    const bookmarkRv = h.api.resourceVersion;

    h.api.compactHistory();
    const reconnected = h.api.nextWatch(podsPath(NS));
    h.api.dropWatches();
    await reconnected;
    assert.equal(lastWatchQuery(h.api, podsPath(NS)).get('resourceVersion'), bookmarkRv);
    assert.equal(h.api.listCount(podsPath(NS)), listsBefore, 'no relist: the bookmark kept us current');
    assert.equal(h.observer.restartCount('gone'), 0);
  });

  void it('stop() ends every watch and timer', async (t) => {
    const h = await setup(t);
    h.start();
    await eventually('synced', () => h.sink.synced);
    await h.api.waitForWatch(podsPath(NS));
    // A twin source on another namespace stays running: it shows how soon a live source
    // reconnects, so "the stopped one did not" is checked after reconnects had every chance.
    const twinSink = new RecordingSink();
    const twin = new KubernetesSource(
      { kubeconfigPath: h.kubeconfigPath, pools: [{ ...POOL, namespace: 'twin' }], backoff: { initialMs: 10, maxMs: 10 } },
      { logger: recordingLogger().logger, observer: new RecordingObserver() },
    );
    t.after(() => twin.stop());
    void twin.start(twinSink);
    await eventually('twin synced', () => twinSink.synced);
    await h.api.waitForWatch(podsPath('twin'));
    await h.source.stop();
    await eventually('server saw the watch close', () => h.api.openWatchCount(podsPath(NS)) === 0);
    const requests = h.api.requests.filter((r) => r.path === podsPath(NS)).length;
    h.api.upsertPod(pod(readyPod, 'vllm-late', { ip: '10.1.0.9' }));
    for (let i = 0; i < 3; i++) {
      const reconnected = h.api.nextWatch(podsPath('twin'));
      h.api.dropWatches();
      await reconnected;
    }
    assert.equal(h.api.requests.filter((r) => r.path === podsPath(NS)).length, requests, 'nothing reconnects after stop');
    assert.ok(!h.sink.ids('llama').includes('models/vllm-late'));
  });
});

void describe('KubernetesSource: InferencePools', () => {
  function inferencePool(name: string, matchLabels: Record<string, string>, port: number, models?: string): KubeObject & { spec: unknown } {
    return {
      apiVersion: 'inference.networking.k8s.io/v1',
      kind: 'InferencePool',
      metadata: { name, namespace: NS, ...(models === undefined ? {} : { annotations: { 'llm-extproc.io/models': models } }) },
      spec: { selector: { matchLabels }, targetPorts: [{ number: port }], endpointPickerRef: { name: 'epp', port: { number: 9002 } } },
    };
  }

  void it('each InferencePool becomes a pool; pools come and go with them', async (t) => {
    const h = await setup(t, { pools: [], inferencePools: { enabled: true, namespaces: [NS] } }, (api) => {
      api.upsertInferencePool(inferencePool('pool-a', { app: 'a' }, 8000, 'model-a, model-a-lora'));
      api.upsertPod(readyPod({ name: 'a-0', namespace: NS, labels: { app: 'a' }, ip: '10.3.0.1' }));
      api.upsertPod(readyPod({ name: 'b-0', namespace: NS, labels: { app: 'b' }, ip: '10.3.0.2' }));
    });
    h.start();
    await eventually('synced', () => h.sink.synced);
    // Synced only once the InferencePool's own pods were listed.
    assert.deepEqual(h.sink.viewAtSync, [
      {
        name: 'models/pool-a',
        models: ['model-a', 'model-a-lora'],
        endpoints: [{ id: 'models/a-0', address: '10.3.0.1:8000', state: 'Ready', reason: 'ready' }],
      },
    ]);
    assert.ok(h.observer.lists.includes(`inferencepools/${NS}`));
    assert.ok(h.observer.lists.includes('pods/models/pool-a'));

    h.api.upsertInferencePool(inferencePool('pool-b', { app: 'b' }, 9000, 'model-b'));
    await eventually('pool-b appears with its pods', () => h.sink.endpoint('models/pool-b', 'models/b-0')?.address === '10.3.0.2:9000');
    assert.deepEqual(
      h.sink.latest().map((p) => p.name),
      ['models/pool-a', 'models/pool-b'],
    );

    // Changing served models or the port keeps the pod watch; changing the selector replaces it.
    h.api.upsertInferencePool(inferencePool('pool-b', { app: 'b' }, 9001, 'model-b,model-b2'));
    await eventually('pool-b updated', () => h.sink.pool('models/pool-b')?.models.length === 2);
    assert.equal(h.sink.endpoint('models/pool-b', 'models/b-0')?.address, '10.3.0.2:9001');
    h.api.upsertInferencePool(inferencePool('pool-b', { app: 'a' }, 9001, 'model-b'));
    await eventually('pool-b follows its new selector', () => h.sink.ids('models/pool-b').join() === 'models/a-0');

    h.api.deleteInferencePool(NS, 'pool-a');
    await eventually('pool-a removed', () => h.sink.pool('models/pool-a') === undefined);
    await eventually('its pod watch stopped', () => h.api.openWatchCount(podsPath(NS)) === 1);
    assert.equal(h.api.openWatchCount(inferencePoolsPath(NS)), 1);
  });

  void it('ignores an InferencePool it cannot use, with a warning', async (t) => {
    const h = await setup(t, { pools: [POOL], inferencePools: { enabled: true, namespaces: [NS] } }, (api) => {
      const broken = inferencePool('broken', {}, 8000, 'x');
      broken.spec = { selector: {}, targetPorts: [] };
      api.upsertInferencePool(broken);
      api.upsertInferencePool(inferencePool('llama', LABELS, 8000));
    });
    h.start();
    await eventually('synced', () => h.sink.synced);
    assert.deepEqual(
      h.sink.latest().map((p) => [p.name, p.models]),
      [
        ['llama', ['llama-3-8b']],
        ['models/llama', []],
      ],
    );
    assert.ok(h.logs.some((e) => e.level === 40 && e.msg === 'InferencePool models/broken has no spec.selector.matchLabels; ignoring it'));
    assert.ok(h.logs.some((e) => e.level === 40 && e.msg.includes('models/llama has no llm-extproc.io/models annotation')));
  });

  void it('a missing InferencePool CRD (404) keeps the source unsynced and retrying', async (t) => {
    const h = await setup(t, { pools: [POOL], inferencePools: { enabled: true, namespaces: [NS] } }, (api) => {
      api.setPathError(inferencePoolsPath(NS), 404);
    });
    h.start();
    await eventually('pods listed', () => h.observer.lists.includes('pods/llama'));
    await eventually('retried the CRD', () => h.api.requests.filter((r) => r.path === inferencePoolsPath(NS)).length >= 3);
    assert.equal(h.sink.synced, false);
    h.api.setPathError(inferencePoolsPath(NS), undefined);
    await eventually('synced', () => h.sink.synced);
  });
});

void describe('KubernetesSource: InferenceObjectives', () => {
  function inferencePool(name: string): KubeObject & { spec: unknown } {
    return {
      apiVersion: 'inference.networking.k8s.io/v1',
      kind: 'InferencePool',
      metadata: { name, namespace: NS, annotations: { 'llm-extproc.io/models': 'chat,batch' } },
      spec: {
        selector: { matchLabels: LABELS },
        targetPorts: [{ number: 8000 }],
        endpointPickerRef: { name: 'epp', port: { number: 9002 } },
      },
    };
  }
  function objective(name: string, pool: string, priority: number | undefined, models?: string): KubeObject & { spec: unknown } {
    return {
      apiVersion: 'inference.networking.x-k8s.io/v1alpha2',
      kind: 'InferenceObjective',
      metadata: { name, namespace: NS, ...(models === undefined ? {} : { annotations: { 'llm-extproc.io/models': models } }) },
      spec: {
        poolRef: { group: 'inference.networking.k8s.io', kind: 'InferencePool', name: pool },
        ...(priority === undefined ? {} : { priority }),
      },
    };
  }
  const latest = (h: Harness): ObjectiveIndex | undefined => h.objectives.at(-1);

  void it("follows the objectives of our pools live: added, changed, deleted; other pools' objectives are left out", async (t) => {
    const h = await setup(t, { pools: [], inferencePools: { enabled: true, namespaces: [NS] } }, (api) => {
      api.upsertInferencePool(inferencePool('pool-a'));
      api.upsertInferenceObjective(objective('batch', 'pool-a', 1, 'batch'));
      api.upsertInferenceObjective(objective('theirs', 'pool-z', 50, 'chat'));
    });
    h.start();
    await eventually('synced', () => h.sink.synced);
    await eventually('the objective applies', () => latest(h)?.get('models/pool-a')?.byModel.get('batch') === 1);
    assert.deepEqual([...(latest(h)?.keys() ?? [])], ['models/pool-a'], "pool-z's objective is not ours");

    h.api.upsertInferenceObjective(objective('batch', 'pool-a', 9, 'batch'));
    await eventually('the new priority applies', () => latest(h)?.get('models/pool-a')?.byModel.get('batch') === 9);
    h.api.upsertInferenceObjective(objective('urgent', 'pool-a', 20));
    await eventually('a second one, by name', () => latest(h)?.get('models/pool-a')?.byName.get('urgent') === 20);
    h.api.deleteInferenceObjective(NS, 'batch');
    await eventually('the deleted one is gone', () => latest(h)?.get('models/pool-a')?.byModel.has('batch') === false);

    // The objective of a pool that appears later applies once the pool does.
    h.api.upsertInferencePool(inferencePool('pool-z'));
    await eventually("pool-z's objective applies with its pool", () => latest(h)?.get('models/pool-z')?.byModel.get('chat') === 50);
    h.api.deleteInferencePool(NS, 'pool-z');
    await eventually('and stops applying when the pool goes', () => latest(h)?.has('models/pool-z') === false);
  });

  void it('a missing InferenceObjective CRD (404) does not hold up the sync, is said once, and is picked up once installed', async (t) => {
    const h = await setup(t, { pools: [], inferencePools: { enabled: true, namespaces: [NS] } }, (api) => {
      api.upsertInferencePool(inferencePool('pool-a'));
      api.setPathError(inferenceObjectivesPath(NS), 404);
    });
    h.start();
    await eventually('synced without the objectives', () => h.sink.synced);
    await eventually('retried the CRD', () => h.api.requests.filter((r) => r.path === inferenceObjectivesPath(NS)).length >= 4);
    // This fake serves the deprecated group only; its loop says its group (llm-d.ai's is `inferenceobjectives/<ns>`).
    const legacy = `inferenceobjectives.inference.networking.x-k8s.io/${NS}`;
    const said = h.logs.filter((l) => l.resource === legacy && l.level >= 40);
    assert.equal(said.length, 1, JSON.stringify(said));
    assert.match(said[0].msg, /not served or not readable/);
    assert.match(String(said[0].detail), /^HTTP 404/);

    h.api.upsertInferenceObjective(objective('batch', 'pool-a', 3, 'batch'));
    h.api.setPathError(inferenceObjectivesPath(NS), undefined);
    await eventually('the objective applies', () => latest(h)?.get('models/pool-a')?.byModel.get('batch') === 3);
    assert.ok(h.logs.some((l) => l.resource === legacy && l.msg === 'initial list complete'));
  });

  void it('warns once about an objective it cannot use; objectives: false watches none', async (t) => {
    const h = await setup(t, { pools: [], inferencePools: { enabled: true, namespaces: [NS] } }, (api) => {
      api.upsertInferencePool(inferencePool('pool-a'));
      const broken = objective('broken', 'pool-a', 1);
      broken.spec = { poolRef: { name: 'pool-a', kind: 'Service', group: '' }, priority: 1 };
      api.upsertInferenceObjective(broken);
    });
    h.start();
    await eventually('synced', () => h.sink.synced);
    await eventually('warned', () => h.logs.some((l) => l.level === 40 && /models\/broken refers to kind "Service"/.test(l.msg)));

    const off = await setup(t, { pools: [], inferencePools: { enabled: true, namespaces: [NS], objectives: false } });
    off.start();
    await eventually('synced', () => off.sink.synced);
    assert.equal(off.api.requests.filter((r) => r.path === inferenceObjectivesPath(NS)).length, 0);
  });

  void it('with flow control off, no InferenceObjective is listed or watched', async (t) => {
    const h = await setup(
      t,
      { pools: [], inferencePools: { enabled: true, namespaces: [NS] } },
      (api) => {
        api.upsertInferencePool(inferencePool('pool-a'));
        api.upsertInferenceObjective(objective('batch', 'pool-a', 3, 'batch'));
      },
      false,
    );
    h.start();
    await eventually('synced', () => h.sink.synced);
    // The pool's pods were asked for after the pools listed, so an objective list started with them would be here too.
    await eventually('the pool is served', () => h.api.requests.some((r) => r.path === podsPath(NS)));
    assert.equal(h.api.requests.filter((r) => r.path === inferenceObjectivesPath(NS)).length, 0);
    assert.deepEqual(h.objectives, []);
  });
});

void describe('KubernetesSource: configuration', () => {
  void it('refuses a plain-HTTP API server unless the kubeconfig says so', async (t) => {
    const api = await FakeKubeApi.start();
    const dir = mkdtempSync(join(tmpdir(), 'kube-source-test-'));
    t.after(async () => {
      await api.stop();
      rmSync(dir, { recursive: true, force: true });
    });
    const kubeconfigPath = writeKubeconfig(dir, api);
    const { logger } = recordingLogger();
    // Pool definitions are validated by buildConfig against the config schema (config.test.ts).
    assert.doesNotThrow(() => new KubernetesSource({ kubeconfigPath, pools: [POOL] }, { logger }));
    const insecure = writeKubeconfig(dir, api, 'plain.yaml');
    writeFileSync(insecure, readFileSync(insecure, 'utf8').replace('      insecure-skip-tls-verify: true\n', ''));
    assert.throws(() => new KubernetesSource({ kubeconfigPath: insecure, pools: [POOL] }, { logger }), /plain HTTP/);
  });
});
