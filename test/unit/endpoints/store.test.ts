// The endpoint store with a manual clock: views built from sources, sync tracking, and the
// passive-health quarantine as users see it (state, reason, events, release on time).
import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { EndpointStore } from '../../../src/endpoints/store.js';
import type { Clock, StoreEvents } from '../../../src/endpoints/store.js';
import type { Endpoint, EndpointView, ObservedEndpoint, ObservedPool } from '../../../src/endpoints/model.js';
import type { QuarantinePolicy } from '../../../src/endpoints/passive-health.js';

const T0 = Date.UTC(2025, 0, 1);

/** A test clock: time moves only when `advance` is called, which fires the timers that came due. */
class ManualClock implements Clock {
  private time = T0;
  private nextId = 0;
  private readonly timers = new Map<number, { at: number; callback: () => void }>();

  now(): number {
    return this.time;
  }

  setTimer(callback: () => void, delayMs: number): { cancel(): void } {
    const id = this.nextId++;
    this.timers.set(id, { at: this.time + delayMs, callback });
    return { cancel: () => this.timers.delete(id) };
  }

  get pendingTimers(): number {
    return this.timers.size;
  }

  /** Moves time forward by `ms`, firing due timers in time order (timers they set may fire too). */
  advance(ms: number): void {
    const target = this.time + ms;
    for (;;) {
      let due: [number, { at: number; callback: () => void }] | undefined;
      for (const entry of this.timers) if (entry[1].at <= target && (due === undefined || entry[1].at < due[1].at)) due = entry;
      if (due === undefined) break;
      this.timers.delete(due[0]);
      this.time = Math.max(this.time, due[1].at);
      due[1].callback();
    }
    this.time = target;
  }
}

/** Every event the store emitted, in order, as short strings plus the raw values. */
function record(store: EndpointStore): { log: string[]; views: EndpointView[]; unsubscribe: () => void } {
  const log: string[] = [];
  const views: EndpointView[] = [];
  const events: StoreEvents = {
    viewChanged: (view) => {
      views.push(view);
      log.push(`view:${view.version}`);
    },
    synced: () => log.push('synced'),
    quarantined: (endpoint, reason) => log.push(`quarantined:${endpoint.pool}/${endpoint.id}:${reason}`),
    released: (endpoint) => log.push(`released:${endpoint.pool}/${endpoint.id}`),
  };
  const unsubscribe = store.subscribe(events);
  return { log, views, unsubscribe };
}

const POLICY: QuarantinePolicy = { threshold: 2, baseMs: 10_000, maxMs: 60_000 };

function ep(address: string, state: ObservedEndpoint['state'] = 'Ready', reason = '', id = address): ObservedEndpoint {
  return { id, address, state, reason };
}

function pool(name: string, models: string[], endpoints: ObservedEndpoint[]): ObservedPool {
  return { name, models, endpoints };
}

function stateOf(store: EndpointStore, poolName: string, id: string): Endpoint | undefined {
  return store
    .view()
    .pools.get(poolName)
    ?.endpoints.find((e) => e.id === id);
}

function newStore(sources: string[] = ['static']): { store: EndpointStore; clock: ManualClock } {
  const clock = new ManualClock();
  return { store: new EndpointStore(sources, POLICY, clock), clock };
}

describe('EndpointStore: views', () => {
  it('starts empty at version 0', () => {
    const { store } = newStore();
    assert.equal(store.view().version, 0);
    assert.equal(store.view().pools.size, 0);
    assert.equal(store.view().poolsByModel.size, 0);
  });

  it('replaceAll builds pools and poolsByModel in configuration order', () => {
    const { store } = newStore();
    store.replaceAll('static', [
      pool('big', ['llama', 'llama-70b'], [ep('10.0.0.1:8000'), ep('10.0.0.2:8000', 'Starting', 'ContainerCreating')]),
      pool('small', ['llama', 'phi'], [ep('10.0.1.1:8000')]),
      pool('empty', ['mistral'], []),
    ]);
    const view = store.view();
    assert.deepEqual([...view.pools.keys()], ['big', 'small', 'empty']);
    const byModel = Object.fromEntries([...view.poolsByModel].map(([model, pools]) => [model, pools.map((p) => p.name)]));
    assert.deepEqual(byModel, { llama: ['big', 'small'], 'llama-70b': ['big'], phi: ['small'], mistral: ['empty'] });
    assert.deepEqual(view.pools.get('big')?.endpoints, [
      { id: '10.0.0.1:8000', address: '10.0.0.1:8000', state: 'Ready', reason: '', pool: 'big' },
      { id: '10.0.0.2:8000', address: '10.0.0.2:8000', state: 'Starting', reason: 'ContainerCreating', pool: 'big' },
    ]);
    // poolsByModel holds the same pool objects as pools.
    assert.equal(view.poolsByModel.get('llama')?.[0], view.pools.get('big'));
  });

  it('pools of several sources are combined; a source replaces only its own pools', () => {
    const { store } = newStore(['a', 'b']);
    store.replaceAll('a', [pool('pa', ['m'], [ep('10.0.0.1:8000')])]);
    store.replaceAll('b', [pool('pb', ['m'], [ep('10.0.0.2:8000')])]);
    assert.deepEqual(
      store
        .view()
        .poolsByModel.get('m')
        ?.map((p) => p.name),
      ['pa', 'pb'],
    );
    store.replaceAll('a', []);
    assert.deepEqual([...store.view().pools.keys()], ['pb']);
    assert.deepEqual(
      store
        .view()
        .poolsByModel.get('m')
        ?.map((p) => p.name),
      ['pb'],
    );
  });

  it('every change publishes a new view with a higher version, and viewChanged carries it', () => {
    const { store } = newStore();
    const { log, views } = record(store);
    const versions: number[] = [];
    for (let i = 1; i <= 3; i++) {
      store.replaceAll('static', [pool('p', ['m'], [ep(`10.0.0.${i}:8000`)])]);
      versions.push(store.view().version);
    }
    assert.deepEqual(versions, [1, 2, 3]);
    assert.deepEqual(log, ['view:1', 'view:2', 'view:3']);
    assert.equal(views.at(-1), store.view());
  });

  it('an old view is left untouched by later changes (immutable snapshots)', () => {
    const { store } = newStore();
    store.replaceAll('static', [pool('p', ['m'], [ep('10.0.0.1:8000')])]);
    const old = store.view();
    store.replaceAll('static', [pool('q', ['n'], [])]);
    assert.deepEqual([...old.pools.keys()], ['p']);
    assert.deepEqual([...store.view().pools.keys()], ['q']);
  });

  it('endpointsAt finds the endpoint behind an address in every pool that lists it', () => {
    const { store } = newStore();
    store.replaceAll('static', [pool('a', ['m'], [ep('10.0.0.1:8000')]), pool('b', ['n'], [ep('10.0.0.1:8000'), ep('10.0.0.2:8000')])]);
    assert.deepEqual(
      store.endpointsAt('10.0.0.1:8000').map((e) => e.pool),
      ['a', 'b'],
    );
    assert.deepEqual(store.endpointsAt('10.9.9.9:8000'), []);
  });

  it('unsubscribe stops events', () => {
    const { store } = newStore();
    const { log, unsubscribe } = record(store);
    store.replaceAll('static', []);
    unsubscribe();
    store.replaceAll('static', []);
    assert.deepEqual(log, ['view:1']);
  });
});

describe('EndpointStore: sync', () => {
  const cases: ReadonlyArray<{ name: string; sources: string[]; marks: string[]; synced: boolean[]; events: number }> = [
    { name: 'one source', sources: ['static'], marks: ['static'], synced: [true], events: 1 },
    { name: 'two sources, in turn', sources: ['a', 'b'], marks: ['a', 'b'], synced: [false, true], events: 1 },
    { name: 'a repeated mark does not count twice', sources: ['a', 'b'], marks: ['a', 'a'], synced: [false, false], events: 0 },
    { name: 'an unknown source does not count', sources: ['a'], marks: ['other', 'a'], synced: [false, true], events: 1 },
    { name: 'synced fires once', sources: ['a'], marks: ['a', 'a', 'a'], synced: [true, true, true], events: 1 },
  ];
  for (const c of cases) {
    it(c.name, () => {
      const { store } = newStore(c.sources);
      const { log } = record(store);
      assert.equal(store.isSynced(), false);
      const synced = c.marks.map((source) => {
        store.markSynced(source);
        return store.isSynced();
      });
      assert.deepEqual(synced, c.synced);
      assert.equal(log.filter((e) => e === 'synced').length, c.events);
    });
  }

  it('data alone does not sync a source', () => {
    const { store } = newStore();
    store.replaceAll('static', [pool('p', ['m'], [ep('10.0.0.1:8000')])]);
    assert.equal(store.isSynced(), false);
  });
});

describe('EndpointStore: passive health', () => {
  const A = '10.0.0.1:8000';
  const B = '10.0.0.2:8000';

  function fleet(store: EndpointStore, endpoints: ObservedEndpoint[] = [ep(A), ep(B)]): void {
    store.replaceAll('static', [pool('p', ['m'], endpoints)]);
  }

  it('threshold failures quarantine a Ready endpoint, with a reason, and announce it', () => {
    const { store } = newStore();
    fleet(store);
    const { log } = record(store);
    store.recordFailure(A, 'connect_failure');
    assert.equal(stateOf(store, 'p', A)?.state, 'Ready', 'one failure is below the threshold');
    assert.deepEqual(log, [], 'no view change below the threshold');
    store.recordFailure(A, 'connect_failure');
    const quarantined = stateOf(store, 'p', A);
    assert.equal(quarantined?.state, 'Quarantined');
    assert.equal(quarantined?.reason, '2 consecutive connect failures; until 2025-01-01T00:00:10Z');
    assert.equal(stateOf(store, 'p', B)?.state, 'Ready');
    assert.deepEqual(log, ['view:2', `quarantined:p/${A}:2 consecutive connect failures; until 2025-01-01T00:00:10Z`]);
  });

  it('timeouts and bad responses never quarantine', () => {
    const { store } = newStore();
    fleet(store);
    for (let i = 0; i < 5; i++) {
      store.recordFailure(A, 'timeout');
      store.recordFailure(A, 'bad_response');
    }
    assert.equal(stateOf(store, 'p', A)?.state, 'Ready');
    assert.equal(store.view().version, 1);
  });

  it('a success resets the streak', () => {
    const { store } = newStore();
    fleet(store);
    store.recordFailure(A, 'reset');
    store.recordSuccess(A);
    store.recordFailure(A, 'reset');
    assert.equal(stateOf(store, 'p', A)?.state, 'Ready');
  });

  it('the endpoint is released when its backoff ends, and released is announced', () => {
    const { store, clock } = newStore();
    fleet(store);
    store.recordFailure(A, 'connect_failure');
    store.recordFailure(A, 'connect_failure');
    const { log } = record(store);
    const seenOnRelease: Array<string | undefined> = [];
    store.subscribe({ released: (endpoint) => seenOnRelease.push(stateOf(store, endpoint.pool, endpoint.id)?.state) });
    assert.equal(clock.pendingTimers, 1, 'one release timer');
    clock.advance(9_999);
    assert.equal(stateOf(store, 'p', A)?.state, 'Quarantined');
    assert.deepEqual(log, []);
    clock.advance(1);
    const released = stateOf(store, 'p', A);
    assert.deepEqual(released, { id: A, address: A, state: 'Ready', reason: '', pool: 'p' });
    assert.deepEqual([...log].sort(), [`released:p/${A}`, 'view:3']);
    assert.deepEqual(seenOnRelease, ['Ready'], 'listeners of released already read the new view');
    assert.equal(clock.pendingTimers, 0);
  });

  it('on probation one failure re-quarantines for twice as long', () => {
    const { store, clock } = newStore();
    fleet(store);
    store.recordFailure(A, 'connect_failure');
    store.recordFailure(A, 'connect_failure');
    clock.advance(10_000);
    store.recordFailure(A, 'connect_failure');
    assert.equal(stateOf(store, 'p', A)?.state, 'Quarantined');
    clock.advance(19_999);
    assert.equal(stateOf(store, 'p', A)?.state, 'Quarantined');
    clock.advance(1);
    assert.equal(stateOf(store, 'p', A)?.state, 'Ready');
  });

  it('a success while quarantined releases at once', () => {
    const { store, clock } = newStore();
    fleet(store);
    store.recordFailure(A, 'connect_failure');
    store.recordFailure(A, 'connect_failure');
    const { log } = record(store);
    store.recordSuccess(A);
    assert.equal(stateOf(store, 'p', A)?.state, 'Ready');
    assert.deepEqual([...log].sort(), [`released:p/${A}`, 'view:3']);
    assert.equal(clock.pendingTimers, 0, 'the release timer is cancelled');
  });

  it('two quarantines: one timer at a time, each released at its own time', () => {
    const { store, clock } = newStore();
    fleet(store);
    store.recordFailure(A, 'connect_failure');
    store.recordFailure(A, 'connect_failure');
    clock.advance(4_000);
    store.recordFailure(B, 'reset');
    store.recordFailure(B, 'reset');
    assert.equal(stateOf(store, 'p', B)?.reason, '2 consecutive connection resets; until 2025-01-01T00:00:14Z');
    assert.equal(clock.pendingTimers, 1);
    const { log } = record(store);
    clock.advance(6_000);
    assert.deepEqual([stateOf(store, 'p', A)?.state, stateOf(store, 'p', B)?.state], ['Ready', 'Quarantined']);
    clock.advance(4_000);
    assert.deepEqual([stateOf(store, 'p', A)?.state, stateOf(store, 'p', B)?.state], ['Ready', 'Ready']);
    assert.deepEqual(
      log.filter((e) => e.startsWith('released')),
      [`released:p/${A}`, `released:p/${B}`],
    );
  });

  it('an address in two pools is quarantined in both', () => {
    const { store } = newStore();
    store.replaceAll('static', [pool('a', ['m'], [ep(A)]), pool('b', ['n'], [ep(A)])]);
    const { log } = record(store);
    store.recordFailure(A, 'connect_failure');
    store.recordFailure(A, 'connect_failure');
    assert.deepEqual([stateOf(store, 'a', A)?.state, stateOf(store, 'b', A)?.state], ['Quarantined', 'Quarantined']);
    assert.deepEqual(
      log.filter((e) => e.startsWith('quarantined')).map((e) => e.split(':')[1]),
      ['a/10.0.0.1', 'b/10.0.0.1'],
    );
  });

  it('quarantine is layered only on Ready endpoints: other states keep their own state and reason', () => {
    const { store } = newStore();
    fleet(store, [ep(A, 'NotReady', 'readiness probe failing')]);
    store.recordFailure(A, 'connect_failure');
    store.recordFailure(A, 'connect_failure');
    assert.deepEqual(stateOf(store, 'p', A), { id: A, address: A, state: 'NotReady', reason: 'readiness probe failing', pool: 'p' });
  });

  it('no quarantined event for an endpoint that is not Ready (it is not quarantined in the view)', () => {
    const { store } = newStore();
    fleet(store, [ep(A, 'NotReady', 'readiness probe failing')]);
    const { log } = record(store);
    store.recordFailure(A, 'connect_failure');
    store.recordFailure(A, 'connect_failure');
    assert.deepEqual(
      log.filter((e) => e.startsWith('quarantined')),
      [],
    );
  });

  it('a failing pod that becomes Ready while its quarantine runs shows as Quarantined', () => {
    const { store } = newStore();
    fleet(store, [ep(A, 'NotReady', 'readiness probe failing')]);
    store.recordFailure(A, 'connect_failure');
    store.recordFailure(A, 'connect_failure');
    fleet(store, [ep(A)]);
    assert.equal(stateOf(store, 'p', A)?.state, 'Quarantined');
  });

  it('an endpoint removed by its source drops its health record', () => {
    const { store, clock } = newStore();
    fleet(store);
    store.recordFailure(A, 'connect_failure');
    store.recordFailure(A, 'connect_failure');
    fleet(store, [ep(B)]);
    assert.equal(clock.pendingTimers, 0, 'no release timer for a forgotten endpoint');
    fleet(store);
    assert.equal(stateOf(store, 'p', A)?.state, 'Ready', 'it comes back fresh');
    store.recordFailure(A, 'connect_failure');
    assert.equal(stateOf(store, 'p', A)?.state, 'Ready', 'a fresh streak: one failure is below the threshold');
  });

  it('failures for an address no source lists change nothing', () => {
    const { store, clock } = newStore();
    fleet(store);
    const { log } = record(store);
    store.recordFailure('10.9.9.9:8000', 'connect_failure');
    store.recordFailure('10.9.9.9:8000', 'connect_failure');
    assert.equal(log.filter((e) => e.startsWith('quarantined')).length, 0);
    assert.equal(clock.pendingTimers, 0);
  });

  it('stop cancels the release timer', () => {
    const { store, clock } = newStore();
    fleet(store);
    store.recordFailure(A, 'connect_failure');
    store.recordFailure(A, 'connect_failure');
    store.stop();
    assert.equal(clock.pendingTimers, 0);
  });
});
