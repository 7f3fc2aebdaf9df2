// Flow control as routing applies it (src/routing/routing.ts + flow-control.ts), on a real endpoint
// store and signal board: nothing waits while the pool has room; while it is saturated requests
// wait, leave in priority order when a request finishes, are shed when sheddable, refused when the
// queue is full, time out after their TTL and leave at once when cancelled.
import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { EndpointStore } from '../../../src/endpoints/store.js';
import { indexObjectives } from '../../../src/endpoints/inference-objectives.js';
import type { ObjectiveIndex } from '../../../src/endpoints/inference-objectives.js';
import { GatewayError } from '../../../src/errors/gateway-error.js';
import { LoadTracker } from '../../../src/picker/load-tracker.js';
import { DEFAULT_FLOW_CONTROL, DEFAULT_PICKER_SETTINGS } from '../../../src/picker/settings.js';
import type { FlowControlSettings, PickerSettings } from '../../../src/picker/settings.js';
import { FlowControl, QueuedRequest } from '../../../src/routing/flow-control.js';
import type { FlowTimers, QueueOutcome } from '../../../src/routing/flow-control.js';
import { StoreRouting } from '../../../src/routing/routing.js';
import type { FlowRequest, QueuedRoute, RoutedRequest } from '../../../src/routing/routing.js';
import { OTHER_TENANT, TenantLabels } from '../../../src/metrics/flow-metrics.js';
import { waitUntil } from '../../support/wait-until.js';

/** One replica that takes one request at a time (our in-flight count; its metrics are not scraped). */
function routing(flow: Partial<FlowControlSettings> = {}, replicas = 1, objectives?: () => ObjectiveIndex): StoreRouting {
  const store = new EndpointStore(['static'], { threshold: 3, baseMs: 10_000, maxMs: 60_000 });
  store.replaceAll('static', [
    {
      name: 'p',
      models: ['chat', 'batch'],
      endpoints: Array.from({ length: replicas }, (_, i) => ({
        id: `r${i}`,
        address: `10.0.0.${i + 1}:8000`,
        state: 'Ready' as const,
        reason: '',
      })),
    },
  ]);
  store.markSynced('static');
  const settings: PickerSettings = {
    ...DEFAULT_PICKER_SETTINGS,
    metrics: { ...DEFAULT_PICKER_SETTINGS.metrics, enabled: false },
    flowControl: {
      ...DEFAULT_FLOW_CONTROL,
      enabled: true,
      priorityByModel: { batch: -1 },
      priorityByHeaderValue: { interactive: 10 },
      saturation: { ...DEFAULT_FLOW_CONTROL.saturation, maxInFlight: 1 },
      ...flow,
    },
  };
  return new StoreRouting(store, new LoadTracker(), {
    fallbacks: 0,
    picker: settings,
    random: () => 0,
    ...(objectives === undefined ? {} : { objectives }),
  });
}

const facts = (tenant?: string, priorityClass?: string): FlowRequest => ({ tenant, priorityClass, bytes: 100, timed: false });

function routed(admitted: RoutedRequest | QueuedRoute): RoutedRequest {
  assert.ok(!(admitted instanceof QueuedRequest), 'routed at once');
  return admitted;
}

/** Admits and, when queued, records the outcome under `name`. */
function waiter(r: StoreRouting, name: string, log: string[], model = 'chat', flow = facts()) {
  const admitted = r.admit({ model }, flow);
  assert.ok(admitted instanceof QueuedRequest, `${name} waits`);
  let outcome: QueueOutcome<RoutedRequest> | undefined;
  admitted.listen((o) => {
    outcome = o;
    log.push(o.kind === 'routed' ? name : `${name}:${o.error.kind}`);
  });
  return { queued: admitted, outcome: () => outcome };
}

function lengths(r: StoreRouting): number {
  let n = 0;
  for (const row of r.queueLengths()) n += row.length;
  return n;
}

describe('flow control', () => {
  it('nothing waits while the pool has room', () => {
    const r = routing({}, 2);
    const first = routed(r.admit({ model: 'chat' }, facts()));
    const second = routed(r.admit({ model: 'chat' }, facts()));
    assert.notEqual(first.endpoints[0].address, second.endpoints[0].address);
    assert.equal(lengths(r), 0);
  });

  it('while saturated, requests wait and leave highest priority first, tenants in turn, when a request finishes', () => {
    const r = routing();
    const running = routed(r.admit({ model: 'chat' }, facts()));
    const log: string[] = [];
    waiter(r, 'a1', log, 'chat', facts('a'));
    waiter(r, 'a2', log, 'chat', facts('a'));
    waiter(r, 'b1', log, 'chat', facts('b'));
    const vip = waiter(r, 'vip', log, 'chat', facts('c', 'interactive'));
    const all = new Map([['vip', vip]]);
    assert.equal(lengths(r), 4);
    r.release(running);
    assert.deepEqual(log, ['vip'], 'the interactive request goes first, alone: the replica has room for one');
    // Each finished request lets exactly the next one through.
    for (const expected of [
      ['vip', 'a1'],
      ['vip', 'a1', 'b1'],
      ['vip', 'a1', 'b1', 'a2'],
    ]) {
      const last = log[log.length - 1];
      const out = last === 'vip' ? all.get('vip')?.outcome() : undefined;
      r.release(out?.kind === 'routed' ? out.routed : running);
      assert.deepEqual(log, expected);
    }
    assert.equal(lengths(r), 0);
  });

  it('sheddable requests are refused at once while saturated, and pass when not', () => {
    const r = routing();
    const running = routed(r.admit({ model: 'chat' }, facts()));
    assert.throws(
      () => r.admit({ model: 'batch' }, facts()),
      (err: unknown) => err instanceof GatewayError && err.kind === 'shed',
    );
    r.release(running);
    routed(r.admit({ model: 'batch' }, facts()));
  });

  it('a full queue refuses with pool_saturated (size bound)', () => {
    const r = routing({ maxQueued: 2 });
    routed(r.admit({ model: 'chat' }, facts()));
    const log: string[] = [];
    waiter(r, 'w1', log);
    waiter(r, 'w2', log);
    assert.throws(
      () => r.admit({ model: 'chat' }, facts()),
      (err: unknown) => err instanceof GatewayError && err.kind === 'pool_saturated',
    );
  });

  it('a request waits at most its TTL, then gets queue_timeout', async () => {
    const r = routing({ ttlMs: 30 });
    routed(r.admit({ model: 'chat' }, facts()));
    const log: string[] = [];
    const w = waiter(r, 'w', log);
    const outcome = await waitUntil(() => w.outcome(), { description: 'the TTL expiry' });
    assert.equal(outcome.kind, 'failed');
    assert.ok(outcome.kind === 'failed' && outcome.error.kind === 'queue_timeout' && outcome.error.retryAfterSeconds === 1);
    assert.equal(lengths(r), 0);
  });

  it("on a clock and timers of its own (the simulator's), the TTL fires when that timer does, re-armed for the earliest deadline", () => {
    let now = 1000;
    const armed: Array<{ callback: () => void; at: number; live: boolean }> = [];
    const timers: FlowTimers = {
      set: (callback, delayMs) => {
        const timer = { callback, at: now + delayMs, live: true };
        armed.push(timer);
        return timer;
      },
      clear: (handle) => {
        (handle as { live: boolean }).live = false;
      },
    };
    const control = new FlowControl<{ model: string }, string>(
      { saturated: () => true, route: () => 'picked', release: () => undefined },
      { maxQueued: 10, maxQueuedBytes: 1000 },
      undefined,
      () => now,
      timers,
    );
    const outcomes: string[] = [];
    const listen = (name: string, queued: QueuedRequest<{ model: string }, string>): void =>
      queued.listen((o) => outcomes.push(o.kind === 'failed' ? `${name}:${o.error.kind}` : name));
    listen('slow', control.enqueue('p', { model: 'm' }, { priority: 0, tenant: 't', bytes: 1, ttlMs: 500 }));
    listen('quick', control.enqueue('p', { model: 'm' }, { priority: 0, tenant: 't', bytes: 1, ttlMs: 100 }));
    assert.deepEqual(
      armed.map((t) => [t.at, t.live]),
      [
        [1500, false],
        [1100, true],
      ],
      'one timer, for the earliest deadline',
    );
    now = 1100;
    armed[1].callback();
    assert.deepEqual(outcomes, ['quick:queue_timeout']);
    assert.equal(control.size, 1);
    assert.deepEqual(armed.at(-1)?.at, 1500, 're-armed for the one still waiting');
    now = 1500;
    armed[armed.length - 1].callback();
    assert.deepEqual(outcomes, ['quick:queue_timeout', 'slow:queue_timeout']);
    assert.equal(control.size, 0);
  });

  it('a cancelled request leaves the queue at once, and the next one takes the free replica', () => {
    const r = routing();
    const running = routed(r.admit({ model: 'chat' }, facts()));
    const log: string[] = [];
    const gone = waiter(r, 'gone', log);
    waiter(r, 'next', log);
    gone.queued.cancel();
    assert.equal(lengths(r), 1);
    r.release(running);
    assert.deepEqual(log, ['next']);
    assert.equal(lengths(r), 0);
  });

  it('a new request queues behind those already waiting, even when a replica just freed up', () => {
    const r = routing();
    const running = routed(r.admit({ model: 'chat' }, facts()));
    const log: string[] = [];
    waiter(r, 'early', log);
    r.release(running);
    assert.deepEqual(log, ['early']);
    const late = r.admit({ model: 'chat' }, facts());
    assert.ok(late instanceof QueuedRequest, 'the replica is busy with the early one');
  });

  it("the pool's InferenceObjectives order the queue, and a changed objective applies to the next requests", () => {
    const table = (priority: number): ObjectiveIndex =>
      indexObjectives(
        [
          { id: 'ns/batch', name: 'batch-objective', pool: 'p', priority, models: ['batch'] },
          { id: 'ns/urgent', name: 'urgent', pool: 'p', priority: 20, models: [] },
        ],
        new Set(['p']),
      ).index;
    let objectives = table(0);
    // priorityByModel is empty here: the objective naming `batch` decides its priority.
    const r = routing({ priorityByModel: {}, defaultPriority: 5 }, 1, () => objectives);
    const running = routed(r.admit({ model: 'chat' }, facts()));
    const log: string[] = [];
    waiter(r, 'batch1', log, 'batch');
    waiter(r, 'chat1', log, 'chat');
    waiter(r, 'named', log, 'batch', { ...facts(), objective: 'urgent' });
    r.release(running);
    assert.deepEqual(log, ['named'], 'the header names the highest objective');
    objectives = table(9);
    waiter(r, 'batch2', log, 'batch');
    waiter(r, 'chat2', log, 'chat');
    // Already queued requests keep the priority they came with; batch2 came after the change.
    for (let i = 0; i < 4; i++) r.release(running);
    assert.deepEqual(log, ['named', 'batch2', 'chat1', 'chat2', 'batch1']);
  });
});

describe('flow-control metrics: tenant labels', () => {
  it('names the first tenants seen and counts every other one as other, so a client cannot mint series', () => {
    const labels = new TenantLabels(2);
    assert.deepEqual(
      ['a', 'b', 'c', 'a', OTHER_TENANT, 'd', 'b'].map((t) => labels.of(t)),
      ['a', 'b', OTHER_TENANT, 'a', OTHER_TENANT, OTHER_TENANT, 'b'],
    );
  });
});
