// The generic list-watch loop (src/endpoints/list-watch.ts) against a scripted API: an in-memory
// collection that answers paged lists and hands each watch to the test, which sends events and
// ends the watch the ways a real API server does (410 Gone, a dropped connection, an API error).
// The Kubernetes source's own tests run it against a real kube-apiserver and our faithful fake.
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import type { TestContext } from 'node:test';
import { pino } from 'pino';
import { ListWatchLoop } from '../../../src/endpoints/list-watch.js';
import type {
  Collection,
  KubernetesSourceObserver,
  ListPage,
  LoopChange,
  LoopDeps,
  WatchClient,
} from '../../../src/endpoints/list-watch.js';
import { waitUntil } from '../../support/wait-until.js';

interface Thing {
  readonly name: string;
  readonly colour: string;
}

function object(name: string, colour: string, resourceVersion = '1'): unknown {
  return { metadata: { name, resourceVersion }, spec: { colour } };
}

/** One watch the loop opened: its query, and the test's hands on it. */
interface OpenWatch {
  readonly query: Record<string, string | number | boolean | undefined>;
  event(type: string, object: unknown): void;
  done(err: unknown): void;
  aborted: boolean;
}

/** A scripted API: `pages` answer the lists in order (the last one repeats), watches are queued for the test. */
class ScriptedApi implements WatchClient {
  readonly lists: Array<string | undefined> = [];
  readonly watches: OpenWatch[] = [];
  listPages: ListPage[][] = [];
  private listCalls = 0;

  collection(): Collection<Thing> {
    return {
      resource: 'things/test',
      watchPath: '/api/v1/things',
      labelSelector: 'app=test',
      list: (_signal, _timeoutSeconds, continueToken) => {
        this.lists.push(continueToken);
        const round = this.listPages[Math.min(this.listCalls, this.listPages.length - 1)];
        const index = continueToken === undefined ? 0 : Number(continueToken);
        if (index === round.length - 1) this.listCalls++;
        return Promise.resolve(round[index]);
      },
      project: (value) => {
        const meta = (value as { metadata?: { name?: string } }).metadata;
        const colour = (value as { spec?: { colour?: string } }).spec?.colour;
        return meta?.name === undefined || colour === 'invisible' ? undefined : { name: meta.name, colour: colour ?? '' };
      },
    };
  }

  watch(
    _path: string,
    query: Record<string, string | number | boolean | undefined>,
    onEvent: (type: string, object: unknown) => void,
    onDone: (err: unknown) => void,
  ): Promise<{ abort(): void }> {
    const open: OpenWatch = { query, event: onEvent, done: onDone, aborted: false };
    this.watches.push(open);
    return Promise.resolve({ abort: () => (open.aborted = true) });
  }
}

class RecordingObserver implements KubernetesSourceObserver {
  readonly restarts: string[] = [];
  listed(): void {}
  eventReceived(): void {}
  watchRestarted(_resource: string, reason: 'gone' | 'dropped' | 'error'): void {
    this.restarts.push(reason);
  }
}

function startLoop(t: TestContext, api: ScriptedApi): { loop: ListWatchLoop<Thing>; changes: LoopChange[]; observer: RecordingObserver } {
  const changes: LoopChange[] = [];
  const observer = new RecordingObserver();
  const deps: LoopDeps = {
    watch: api,
    logger: pino({ level: 'silent' }),
    observer,
    backoff: { initialMs: 1, maxMs: 5 },
    listSeconds: 5,
    watchSeconds: 60,
  };
  const loop = new ListWatchLoop(api.collection(), deps, (change) => changes.push(change));
  loop.start();
  t.after(() => loop.stop()); // also when an assertion fails: the loop would run on
  return { loop, changes, observer };
}

const names = (loop: ListWatchLoop<Thing>): string[] => [...loop.items()].map((t) => `${t.name}:${t.colour}`).sort();
const wait = { timeoutMs: 5000 };

void describe('list-watch loop', () => {
  void it('lists every page, then watches from the list resourceVersion and applies each event', async (t) => {
    const api = new ScriptedApi();
    api.listPages = [
      [
        { items: [object('a', 'red'), object('b', 'blue')], resourceVersion: '10', continueToken: '1' },
        { items: [object('c', 'green'), object('hidden', 'invisible')], resourceVersion: '10', continueToken: '' },
      ],
    ];
    const { loop, changes } = startLoop(t, api);
    const watch = await waitUntil(() => api.watches[0], { description: 'the first watch', ...wait });
    assert.deepEqual(api.lists, [undefined, '1'], 'both pages, the second with the continue token');
    assert.ok(loop.synced);
    assert.deepEqual(names(loop), ['a:red', 'b:blue', 'c:green'], 'what project() skips is not kept');
    assert.equal(watch.query.resourceVersion, '10');
    assert.equal(watch.query.labelSelector, 'app=test');
    assert.equal(watch.query.allowWatchBookmarks, true);

    watch.event('MODIFIED', object('a', 'orange', '11'));
    watch.event('DELETED', object('b', 'blue', '12'));
    watch.event('ADDED', object('d', 'black', '13'));
    watch.event('MODIFIED', object('c', 'invisible', '14'));
    watch.event('BOOKMARK', { metadata: { resourceVersion: '15' } });
    assert.deepEqual(names(loop), ['a:orange', 'd:black']);
    assert.deepEqual(changes, [
      { kind: 'reset' },
      { kind: 'set', name: 'a' },
      { kind: 'delete', name: 'b' },
      { kind: 'set', name: 'd' },
      { kind: 'delete', name: 'c' },
    ]);

    // A dropped connection: rewatch from the last resourceVersion seen (the bookmark's), no relist.
    watch.done(new Error('socket hang up'));
    const rewatch = await waitUntil(() => api.watches[1], { description: 'the rewatch', ...wait });
    assert.equal(rewatch.query.resourceVersion, '15');
    assert.equal(api.lists.length, 2, 'no relist after a dropped watch');
    await loop.stop();
    assert.ok(rewatch.aborted, 'stop aborts the open watch');
  });

  void it('relists after 410 Gone (an ERROR event or the HTTP status) and replaces what it kept', async (t) => {
    const api = new ScriptedApi();
    api.listPages = [
      [{ items: [object('a', 'red')], resourceVersion: '10' }],
      [{ items: [object('b', 'blue')], resourceVersion: '20' }],
      [{ items: [object('c', 'green')], resourceVersion: '30' }],
    ];
    const { loop, changes, observer } = startLoop(t, api);
    const first = await waitUntil(() => api.watches[0], { description: 'the first watch', ...wait });
    first.event('ERROR', { kind: 'Status', code: 410, reason: 'Expired', message: 'too old resource version' });
    const second = await waitUntil(() => api.watches[1], { description: 'the watch after the relist', ...wait });
    assert.equal(second.query.resourceVersion, '20');
    assert.deepEqual(names(loop), ['b:blue']);
    second.done(Object.assign(new Error('Gone'), { statusCode: 410 }));
    const third = await waitUntil(() => api.watches[2], { description: 'the watch after the second relist', ...wait });
    assert.equal(third.query.resourceVersion, '30');
    assert.deepEqual(names(loop), ['c:green']);
    assert.deepEqual(observer.restarts, ['gone', 'gone']);
    assert.deepEqual(
      changes.filter((c) => c.kind === 'reset'),
      [{ kind: 'reset' }, { kind: 'reset' }, { kind: 'reset' }],
    );
    await loop.stop();
  });

  void it('an API error on the watch restarts it after a backoff, keeping what it has', async (t) => {
    const api = new ScriptedApi();
    api.listPages = [[{ items: [object('a', 'red')], resourceVersion: '10' }]];
    const { loop, observer } = startLoop(t, api);
    const first = await waitUntil(() => api.watches[0], { description: 'the first watch', ...wait });
    first.done(Object.assign(new Error('Forbidden'), { statusCode: 403 }));
    const second = await waitUntil(() => api.watches[1], { description: 'the rewatch', ...wait });
    assert.equal(second.query.resourceVersion, '10');
    assert.deepEqual(observer.restarts, ['error']);
    assert.deepEqual(names(loop), ['a:red']);
    await loop.stop();
  });
});
