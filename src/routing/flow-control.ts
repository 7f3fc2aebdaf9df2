// Flow control: while every candidate of a pool is saturated (picker/saturation.ts), its requests
// wait here instead of piling onto busy replicas, in the pool's bounded queue (flow-queue.ts:
// highest priority first, fair between tenants). The clock, the timer and the wake-ups live here;
// the order lives in the queue.
//
// State machine of one request (docs/errors.md, docs/picking.md#flow-control-waiting-instead-of-piling-on):
//   admitted ──(pool has room, nobody waiting)──────────────▶ routed at once (the fast path)
//   admitted ──(saturated, priority < 0)────────────────────▶ rejected: 429 shed
//   admitted ──(saturated, queue full: size or bytes)───────▶ rejected: 429 pool_saturated
//   admitted ──(saturated, or others already waiting)───────▶ queued
//   queued   ──(woken: a request finished, a fresh scrape,
//               a view change; its pool has room, its turn)─▶ dispatched: picked then, usual fallbacks
//   queued   ──(its TTL passed)─────────────────────────────▶ rejected: 429 queue_timeout
//   queued   ──(its client hung up: ext_proc stream ended)──▶ gone, slot freed at once
//
// Each llm-extproc replica queues only its own requests: fairness holds among the requests one
// replica sees, and N replicas each let their own share through (docs/picking.md, shown by
// `npm run simulate`'s saturated multi-tenant scenario in docs/benchmarks.md).

import { GatewayError } from '../errors/gateway-error.js';
import { FlowQueue } from './flow-queue.js';
import type { QueueEntry } from './flow-queue.js';

/** What flow control knows of a request: its model (for error messages); the rest is routing's. */
interface Routable {
  readonly model: string;
}

/** What flow control needs from routing, for a request that waited. */
export interface FlowHost<R extends Routable, P> {
  /** Whether the request's pools are saturated now (false when they cannot be resolved: dispatch then answers why). */
  saturated(request: R): boolean;
  /** Picks for the request now, charging its load; throws GatewayError. */
  route(request: R): P;
  /** Gives back the load of a pick nobody will use. */
  release(routed: P): void;
}

export interface FlowObserver {
  queued(pool: string, priority: number, tenant: string): void;
  /** Left the queue: dispatched, expired (TTL), cancelled (client gone) or failed (dispatch found no replica). */
  left(pool: string, priority: number, tenant: string, how: 'dispatched' | 'expired' | 'cancelled' | 'failed', waitSeconds: number): void;
  rejected(pool: string, priority: number, tenant: string, reason: 'shed' | 'pool_saturated'): void;
}

export interface FlowLimits {
  readonly maxQueued: number;
  readonly maxQueuedBytes: number;
}

/** One request's facts for flow control (resolved by routing from config). */
export interface FlowFacts {
  readonly priority: number;
  readonly tenant: string;
  readonly bytes: number;
  readonly ttlMs: number;
}

export type QueueOutcome<P> = { readonly kind: 'routed'; readonly routed: P } | { readonly kind: 'failed'; readonly error: GatewayError };

/** A request waiting in a pool's queue; its stream listens for the outcome and cancels when it ends. */
export class QueuedRequest<R extends Routable = Routable, P = unknown> {
  private listener: ((outcome: QueueOutcome<P>) => void) | undefined;
  private outcome: QueueOutcome<P> | undefined;
  private delivered = false;
  entry: QueueEntry<QueuedRequest<R, P>> | undefined;

  constructor(
    private readonly control: FlowControl<R, P>,
    readonly pool: string,
    readonly request: R,
  ) {}

  /** Set once by the stream; hears the outcome exactly once (at once when it is already known). */
  listen(listener: (outcome: QueueOutcome<P>) => void): void {
    this.listener = listener;
    if (this.outcome !== undefined) queueMicrotask(() => this.deliver());
  }

  /** The stream ended: leave the queue (or give back a pick that was not delivered yet). */
  cancel(): void {
    if (this.outcome === undefined) {
      this.control.cancel(this);
      return;
    }
    if (!this.delivered && this.outcome.kind === 'routed') this.control.host.release(this.outcome.routed);
    this.delivered = true;
  }

  /** Called by the control once. */
  settle(outcome: QueueOutcome<P>): void {
    if (this.outcome !== undefined) return;
    this.outcome = outcome;
    if (this.listener !== undefined) this.deliver();
  }

  private deliver(): void {
    const outcome = this.outcome;
    const listener = this.listener;
    if (this.delivered || outcome === undefined || listener === undefined) return;
    this.delivered = true;
    listener(outcome);
  }
}

const QUEUE_TIMEOUT_RETRY_AFTER_SECONDS = 1;

/** How the TTL timer is armed: Node's timers, or a simulation's virtual clock (scripts/simulate). */
export interface FlowTimers {
  set(callback: () => void, delayMs: number): unknown;
  clear(handle: unknown): void;
}

const NODE_TIMERS: FlowTimers = {
  set: (callback, delayMs) => setTimeout(callback, delayMs).unref(),
  clear: (handle) => clearTimeout(handle as NodeJS.Timeout),
};

export class FlowControl<R extends Routable, P> {
  private readonly queues = new Map<string, FlowQueue<QueuedRequest<R, P>>>();
  private waiting = 0;
  private timer: unknown;
  private timerAt = Number.POSITIVE_INFINITY;
  private waking = false;

  constructor(
    readonly host: FlowHost<R, P>,
    private readonly limits: FlowLimits,
    private readonly observer: FlowObserver | undefined,
    private readonly now: () => number = () => performance.now(),
    private readonly timers: FlowTimers = NODE_TIMERS,
  ) {}

  /** Requests waiting now, over all pools. */
  get size(): number {
    return this.waiting;
  }

  /**
   * Lets through whoever of the pool's waiting requests it has room for now; true when some still
   * wait (a new request then queues behind them, whatever the pool's state). O(1) when none wait.
   */
  letThrough(pool: string): boolean {
    if (this.waiting === 0) return false;
    const queue = this.queues.get(pool);
    if (queue === undefined || queue.size === 0) return false;
    this.drain(pool, queue);
    return queue.size > 0;
  }

  /** The pool is saturated (or others wait): the request waits. Throws `shed` (priority < 0) or `pool_saturated` (queue full). */
  enqueue(pool: string, request: R, facts: FlowFacts): QueuedRequest<R, P> {
    let queue = this.queues.get(pool);
    if (facts.priority < 0) {
      this.observer?.rejected(pool, facts.priority, facts.tenant, 'shed');
      throw new GatewayError(
        'shed',
        `the model ${request.model} is saturated (pool ${pool}) and this request's priority (${facts.priority}) is sheddable; retry later`,
        { details: { model: request.model, pool, priority: facts.priority } },
      );
    }
    if (queue === undefined)
      this.queues.set(pool, (queue = new FlowQueue({ maxSize: this.limits.maxQueued, maxBytes: this.limits.maxQueuedBytes })));
    const queued = new QueuedRequest<R, P>(this, pool, request);
    const now = this.now();
    const entry: QueueEntry<QueuedRequest<R, P>> = {
      value: queued,
      priority: facts.priority,
      tenant: facts.tenant,
      bytes: facts.bytes,
      enqueuedAt: now,
      deadline: now + facts.ttlMs,
    };
    if (!queue.enqueue(entry)) {
      this.observer?.rejected(pool, facts.priority, facts.tenant, 'pool_saturated');
      throw new GatewayError(
        'pool_saturated',
        `the model ${request.model} is saturated (pool ${pool}) and its wait queue is full (${queue.size} requests, ${queue.bytes} bytes); retry later`,
        { details: { model: request.model, pool, queued: queue.size } },
      );
    }
    queued.entry = entry;
    this.waiting++;
    this.observer?.queued(pool, facts.priority, facts.tenant);
    if (entry.deadline < this.timerAt) this.arm(entry.deadline);
    return queued;
  }

  /** Something changed that may give a pool room (a request finished, a scrape, a new view). */
  wake(): void {
    if (this.waiting === 0 || this.waking) return;
    // A dispatch can end a stream synchronously (and so wake again): one pass at a time.
    this.waking = true;
    try {
      for (const [pool, queue] of this.queues) if (queue.size > 0) this.drain(pool, queue);
    } finally {
      this.waking = false;
    }
  }

  /** Waiting requests per pool, priority and tenant. */
  *lengths(): Generator<{ readonly pool: string; readonly priority: number; readonly tenant: string; readonly length: number }> {
    for (const [pool, queue] of this.queues) for (const row of queue.lengths()) yield { pool, ...row };
  }

  cancel(queued: QueuedRequest<R, P>): void {
    const entry = queued.entry;
    const queue = this.queues.get(queued.pool);
    if (entry === undefined || queue === undefined || !queue.remove(entry)) return;
    this.waiting--;
    this.observer?.left(queued.pool, entry.priority, entry.tenant, 'cancelled', (this.now() - entry.enqueuedAt) / 1e3);
  }

  /** Stops the timer (shutdown); waiting streams end with their own streams. */
  close(): void {
    if (this.timer !== undefined) this.timers.clear(this.timer);
    this.timer = undefined;
    this.timerAt = Number.POSITIVE_INFINITY;
  }

  /** Dispatches from the head while its pool has room. */
  private drain(pool: string, queue: FlowQueue<QueuedRequest<R, P>>): void {
    for (let head = queue.peek(); head !== undefined; head = queue.peek()) {
      if (this.host.saturated(head.value.request)) return;
      queue.dequeue();
      this.waiting--;
      const waited = (this.now() - head.enqueuedAt) / 1e3;
      let outcome: QueueOutcome<P>;
      try {
        outcome = { kind: 'routed', routed: this.host.route(head.value.request) };
      } catch (thrown) {
        outcome = { kind: 'failed', error: GatewayError.from(thrown) };
      }
      this.observer?.left(pool, head.priority, head.tenant, outcome.kind === 'routed' ? 'dispatched' : 'failed', waited);
      head.value.settle(outcome);
    }
  }

  private arm(at: number): void {
    if (this.timer !== undefined) this.timers.clear(this.timer);
    this.timerAt = at;
    this.timer = this.timers.set(() => this.expire(), Math.max(0, at - this.now()));
  }

  private expire(): void {
    this.timer = undefined;
    this.timerAt = Number.POSITIVE_INFINITY;
    const now = this.now();
    let next = Number.POSITIVE_INFINITY;
    for (const [pool, queue] of this.queues) {
      for (const entry of queue.expire(now)) {
        this.waiting--;
        const waited = (now - entry.enqueuedAt) / 1e3;
        this.observer?.left(pool, entry.priority, entry.tenant, 'expired', waited);
        const model = entry.value.request.model;
        entry.value.settle({
          kind: 'failed',
          error: new GatewayError(
            'queue_timeout',
            `the model ${model} stayed saturated (pool ${pool}) for the ${Math.round(waited * 1000)} ms this request could wait; retry later`,
            { details: { model, pool, waited_ms: Math.round(waited * 1000) }, retryAfterSeconds: QUEUE_TIMEOUT_RETRY_AFTER_SECONDS },
          ),
        });
      }
      next = Math.min(next, queue.earliestDeadline());
    }
    if (next !== Number.POSITIVE_INFINITY) this.arm(next);
  }
}
