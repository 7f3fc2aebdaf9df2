// The fair queue of a saturated pool (src/routing/flow-queue.ts): priority order, round robin between
// tenants inside a priority, FIFO inside a tenant, the size and byte bounds, TTL expiry and removal.
// Property tests drive random sequences of operations against a plain model of what must hold.
import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import fc from 'fast-check';
import { FlowQueue } from '../../../src/routing/flow-queue.js';
import type { QueueEntry } from '../../../src/routing/flow-queue.js';

let serial = 0;
function entry(priority: number, tenant: string, opts: { bytes?: number; at?: number; ttl?: number } = {}): QueueEntry<number> {
  const at = opts.at ?? 0;
  return { value: serial++, priority, tenant, bytes: opts.bytes ?? 1, enqueuedAt: at, deadline: at + (opts.ttl ?? 1000) };
}

function drain<T>(queue: FlowQueue<T>): QueueEntry<T>[] {
  const out: QueueEntry<T>[] = [];
  for (let e = queue.dequeue(); e !== undefined; e = queue.dequeue()) out.push(e);
  return out;
}

const BIG = { maxSize: 10_000, maxBytes: 1e12 };

describe('flow queue', () => {
  it('serves the highest priority first, then takes tenants in turn, FIFO inside each', () => {
    const q = new FlowQueue<number>(BIG);
    const a1 = entry(0, 'a');
    const a2 = entry(0, 'a');
    const a3 = entry(0, 'a');
    const b1 = entry(0, 'b');
    const hi = entry(5, 'z');
    const low = entry(-1, 'a');
    for (const e of [a1, a2, a3, b1, low, hi]) assert.ok(q.enqueue(e));
    assert.equal(q.peek(), hi);
    assert.deepEqual(
      drain(q).map((e) => e.value),
      [hi, a1, b1, a2, a3, low].map((e) => e.value),
    );
    assert.equal(q.size, 0);
    assert.equal(q.bytes, 0);
  });

  it('refuses entries beyond the size bound and beyond the byte bound', () => {
    const q = new FlowQueue<number>({ maxSize: 2, maxBytes: 100 });
    assert.ok(q.enqueue(entry(0, 'a', { bytes: 60 })));
    assert.equal(q.enqueue(entry(0, 'b', { bytes: 41 })), false, 'over the byte bound');
    assert.ok(q.enqueue(entry(0, 'b', { bytes: 40 })));
    assert.equal(q.enqueue(entry(0, 'c', { bytes: 0 })), false, 'over the size bound');
    assert.deepEqual([q.size, q.bytes], [2, 100]);
  });

  it('expires entries at their deadline, and removes a cancelled entry without disturbing the turn', () => {
    const q = new FlowQueue<number>(BIG);
    const short = entry(0, 'a', { ttl: 10 });
    const long = entry(0, 'a', { ttl: 100 });
    const b = entry(0, 'b', { ttl: 100 });
    const c = entry(0, 'c', { ttl: 100 });
    for (const e of [short, long, b, c]) q.enqueue(e);
    assert.equal(q.earliestDeadline(), 10);
    assert.deepEqual(q.expire(9), []);
    assert.deepEqual(q.expire(10), [short]);
    assert.equal(q.earliestDeadline(), 100);
    assert.ok(q.remove(b));
    assert.equal(q.remove(b), false, 'removed once');
    assert.deepEqual(drain(q), [long, c]);
    assert.equal(q.earliestDeadline(), Number.POSITIVE_INFINITY);
  });

  // ── properties ─────────────────────────────────────────────────────────────────────────────

  type Op =
    | { readonly op: 'add'; readonly priority: number; readonly tenant: string; readonly bytes: number; readonly ttl: number }
    | { readonly op: 'take' }
    | { readonly op: 'cancel'; readonly pick: number }
    | { readonly op: 'tick'; readonly ms: number };
  const opArb: fc.Arbitrary<Op> = fc.oneof(
    {
      weight: 5,
      arbitrary: fc.record({
        op: fc.constant('add' as const),
        priority: fc.integer({ min: -1, max: 2 }),
        tenant: fc.constantFrom('a', 'b', 'c', 'd'),
        bytes: fc.integer({ min: 0, max: 50 }),
        ttl: fc.integer({ min: 1, max: 200 }),
      }),
    },
    { weight: 3, arbitrary: fc.constant({ op: 'take' as const }) },
    { weight: 1, arbitrary: fc.record({ op: fc.constant('cancel' as const), pick: fc.nat() }) },
    { weight: 1, arbitrary: fc.record({ op: fc.constant('tick' as const), ms: fc.integer({ min: 1, max: 60 }) }) },
  );

  it('property: every dispatch is of the highest priority waiting and the oldest of its tenant; bounds hold; nothing is lost', () => {
    fc.assert(
      fc.property(fc.array(opArb, { maxLength: 300 }), fc.integer({ min: 1, max: 40 }), (ops, maxSize) => {
        const maxBytes = 400;
        const q = new FlowQueue<number>({ maxSize, maxBytes });
        const waiting: QueueEntry<number>[] = [];
        let now = 0;
        for (const op of ops) {
          if (op.op === 'add') {
            const e = entry(op.priority, op.tenant, { bytes: op.bytes, at: now, ttl: op.ttl });
            const fits = waiting.length < maxSize && waiting.reduce((s, w) => s + w.bytes, 0) + e.bytes <= maxBytes;
            assert.equal(q.enqueue(e), fits);
            if (fits) waiting.push(e);
          } else if (op.op === 'take') {
            const got = q.dequeue();
            if (waiting.length === 0) {
              assert.equal(got, undefined);
              continue;
            }
            assert.ok(got !== undefined);
            const top = Math.max(...waiting.map((w) => w.priority));
            assert.equal(got.priority, top, 'highest priority first');
            const sameTenant = waiting.filter((w) => w.tenant === got.tenant && w.priority === got.priority);
            assert.equal(got, sameTenant[0], 'oldest of its tenant first');
            waiting.splice(waiting.indexOf(got), 1);
          } else if (op.op === 'cancel') {
            if (waiting.length === 0) continue;
            const victim = waiting[op.pick % waiting.length];
            assert.ok(q.remove(victim));
            waiting.splice(waiting.indexOf(victim), 1);
          } else {
            now += op.ms;
            const expired = q.expire(now);
            const due = waiting.filter((w) => w.deadline <= now);
            assert.deepEqual(new Set(expired), new Set(due), 'exactly the entries past their deadline expire');
            for (const e of due) waiting.splice(waiting.indexOf(e), 1);
          }
          assert.equal(q.size, waiting.length);
          assert.equal(
            q.bytes,
            waiting.reduce((s, w) => s + w.bytes, 0),
          );
          assert.ok(q.size <= maxSize && q.bytes <= maxBytes);
        }
        assert.deepEqual(new Set(drain(q)), new Set(waiting), 'what is left comes out');
      }),
    );
  });

  it('property: under contention no tenant starves, and backlogged tenants of a priority get equal shares (±1)', () => {
    fc.assert(
      fc.property(
        // Per tenant how many it floods in; arrivals interleave at random with dispatches.
        fc.array(fc.integer({ min: 1, max: 60 }), { minLength: 2, maxLength: 5 }),
        fc.array(fc.boolean(), { maxLength: 400 }),
        (floods, schedule) => {
          const q = new FlowQueue<number>(BIG);
          const tenants = floods.map((_, i) => `t${i}`);
          const left = [...floods];
          // Start with every tenant backlogged by at least one.
          tenants.forEach((t, i) => {
            q.enqueue(entry(0, t));
            left[i]--;
          });
          const served = new Map<string, number>(tenants.map((t) => [t, 0]));
          const queued = new Map<string, number>(tenants.map((t) => [t, 1]));
          const since = new Map<string, number>(tenants.map((t) => [t, 0]));
          for (const arrive of schedule) {
            if (arrive) {
              const i = left.findIndex((n) => n > 0);
              if (i >= 0) {
                q.enqueue(entry(0, tenants[i]));
                left[i]--;
                queued.set(tenants[i], (queued.get(tenants[i]) ?? 0) + 1);
              }
              continue;
            }
            const got = q.dequeue();
            if (got === undefined) continue;
            served.set(got.tenant, (served.get(got.tenant) ?? 0) + 1);
            queued.set(got.tenant, (queued.get(got.tenant) ?? 0) - 1);
            // Over any stretch where every tenant has something waiting, their dispatches in that
            // stretch stay within one of each other (an idle tenant earns no credit).
            const backlogged = tenants.filter((t) => (queued.get(t) ?? 0) > 0);
            if (backlogged.length === tenants.length) {
              const counts = tenants.map((t) => (served.get(t) ?? 0) - (since.get(t) ?? 0));
              assert.ok(Math.max(...counts) - Math.min(...counts) <= 1, `shares ${counts.join(', ')}`);
            } else {
              for (const t of tenants) since.set(t, served.get(t) ?? 0);
            }
          }
          // No starvation: a waiting tenant is served within one round of the tenants waiting.
          const rest = drain(q);
          const firstOf = new Map<string, number>();
          rest.forEach((e, i) => {
            if (!firstOf.has(e.tenant)) firstOf.set(e.tenant, i);
          });
          for (const at of firstOf.values()) assert.ok(at < tenants.length, `first served at ${at}`);
        },
      ),
    );
  });
});
