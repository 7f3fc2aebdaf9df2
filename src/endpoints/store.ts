// The endpoint store: the single owner of endpoint state. Sources write their observed pools here,
// the data path reports attempt outcomes here (passive health), and everyone else reads immutable
// views. Nothing else mutates endpoint state.

import type { AttemptFailure, QuarantinePolicy } from './passive-health.js';
import { PassiveHealth } from './passive-health.js';
import type { Endpoint, EndpointSink, EndpointView, ObservedEndpoint, ObservedPool, PoolView } from './model.js';

export interface Clock {
  now(): number;
  setTimer(callback: () => void, delayMs: number): { cancel(): void };
}

const systemClock: Clock = {
  now: () => Date.now(),
  setTimer(callback, delayMs) {
    const timer = setTimeout(callback, delayMs);
    timer.unref();
    return { cancel: () => clearTimeout(timer) };
  },
};

export interface StoreEvents {
  /** A new view was published. */
  viewChanged?(view: EndpointView): void;
  /** Every source that was registered has delivered its first complete view. */
  synced?(): void;
  quarantined?(endpoint: Endpoint, reason: string): void;
  released?(endpoint: Endpoint): void;
}

const EMPTY_VIEW: EndpointView = { pools: new Map(), poolsByModel: new Map(), version: 0 };

export class EndpointStore implements EndpointSink {
  private readonly observed = new Map<string, readonly ObservedPool[]>();
  private readonly pendingSync: Set<string>;
  private readonly health: PassiveHealth;
  private current: EndpointView = EMPTY_VIEW;
  private releaseTimer: { cancel(): void } | undefined;
  private readonly listeners = new Set<StoreEvents>();
  /**
   * Views of pools built while no endpoint was quarantined, by the ObservedPool they came from.
   * Sources hand back the same ObservedPool object for a pool that did not change, so a change in
   * one pool of ten thousand pods rebuilds only that pool's view.
   */
  private poolViews = new WeakMap<ObservedPool, PoolView>();
  /**
   * Each replica's Endpoint as last built without quarantine, by the ObservedEndpoint it came from.
   * Sources keep the ObservedEndpoint of a pod that did not change, so rebuilding a pool for one
   * changed pod allocates one Endpoint, not one per pod: at thousands of pods per pool those copies
   * were most of a change's CPU time and garbage. Views stay immutable; an unchanged replica is
   * simply the same object in consecutive views.
   */
  private endpointViews = new WeakMap<ObservedEndpoint, Endpoint>();
  /** Whether the current view may hold Quarantined endpoints (it was built during a quarantine). */
  private currentHasQuarantine = false;

  /** `sources` names every source that must sync before the store counts as synced. */
  constructor(
    sources: readonly string[],
    policy: QuarantinePolicy,
    private readonly clock: Clock = systemClock,
  ) {
    this.pendingSync = new Set(sources);
    this.health = new PassiveHealth(policy);
  }

  view(): EndpointView {
    return this.current;
  }

  isSynced(): boolean {
    return this.pendingSync.size === 0;
  }

  subscribe(events: StoreEvents): () => void {
    this.listeners.add(events);
    return () => this.listeners.delete(events);
  }

  replaceAll(source: string, pools: readonly ObservedPool[]): void {
    this.observed.set(source, pools);
    this.rebuild();
  }

  markSynced(source: string): void {
    if (!this.pendingSync.delete(source) || this.pendingSync.size > 0) return;
    for (const listener of this.listeners) listener.synced?.();
  }

  /** The endpoint at `address` answered well: clear its failure streak. */
  recordSuccess(address: string): void {
    if (this.health.recordSuccess(address)) this.rebuild();
  }

  /** The endpoint at `address` failed an attempt; may quarantine it. */
  recordFailure(address: string, failure: AttemptFailure): void {
    const now = this.clock.now();
    if (!this.health.recordFailure(address, failure, now)) return;
    this.rebuild();
    const reason = this.health.status(address, now)?.reason ?? failure;
    this.announceQuarantine(address, reason);
  }

  /** Only Ready endpoints can be quarantined; a failure on a NotReady one changes nothing visible. */
  private announceQuarantine(address: string, reason: string): void {
    for (const endpoint of this.endpointsAt(address)) {
      if (endpoint.state !== 'Quarantined') continue;
      for (const listener of this.listeners) listener.quarantined?.(endpoint, reason);
    }
  }

  /**
   * An active check found the replica at `address` dead: quarantine it at once (see
   * broken-stream-check.ts). Only a Ready endpoint shows the change.
   */
  quarantineNow(address: string, cause: 'failed_check'): void {
    const now = this.clock.now();
    if (!this.health.quarantineNow(address, now)) return;
    this.rebuild();
    const reason = this.health.status(address, now)?.reason ?? cause;
    this.announceQuarantine(address, reason);
  }

  /** Finds the endpoints (usually one) behind an address in the current view. */
  endpointsAt(address: string): Endpoint[] {
    const found: Endpoint[] = [];
    for (const pool of this.current.pools.values())
      for (const endpoint of pool.endpoints) if (endpoint.address === address) found.push(endpoint);
    return found;
  }

  stop(): void {
    this.releaseTimer?.cancel();
    this.releaseTimer = undefined;
  }

  private rebuild(): void {
    const now = this.clock.now();
    const previous = this.current;
    const previousHadQuarantine = this.currentHasQuarantine;
    // While nothing is quarantined every endpoint keeps its observed state, and a cached pool view
    // (built under the same condition) is still exact.
    const quarantineActive = this.health.nextRelease(now) !== undefined;
    if (quarantineActive) this.poolViews = new WeakMap();
    const pools = new Map<string, PoolView>();
    const poolsByModel = new Map<string, PoolView[]>();
    for (const sourcePools of this.observed.values()) {
      for (const observedPool of sourcePools) {
        let pool = quarantineActive ? undefined : this.poolViews.get(observedPool);
        if (pool === undefined) {
          pool = this.buildPool(observedPool, quarantineActive ? now : undefined);
          if (!quarantineActive) this.poolViews.set(observedPool, pool);
        }
        pools.set(pool.name, pool);
        for (const model of pool.models) {
          const list = poolsByModel.get(model);
          if (list === undefined) poolsByModel.set(model, [pool]);
          else list.push(pool);
        }
      }
    }
    // Only walk every address when there is health state to prune.
    if (this.health.size > 0) {
      const addresses = new Set<string>();
      for (const pool of pools.values()) for (const e of pool.endpoints) if (e.address !== '') addresses.add(e.address);
      this.health.retainOnly(addresses);
    }
    this.current = { pools, poolsByModel, version: previous.version + 1 };
    this.currentHasQuarantine = quarantineActive;
    if (previousHadQuarantine) this.announceReleases(previous);
    this.scheduleRelease(now);
    for (const listener of this.listeners) listener.viewChanged?.(this.current);
  }

  /** A pool's view; with `now`, Ready endpoints under quarantine become Quarantined. */
  private buildPool(observedPool: ObservedPool, now: number | undefined): PoolView {
    const pool = observedPool.name;
    const endpoints = observedPool.endpoints.map((observed): Endpoint => {
      const quarantine = now !== undefined && observed.state === 'Ready' ? this.health.status(observed.address, now) : undefined;
      if (quarantine !== undefined) return { ...endpointOf(observed, pool), state: 'Quarantined', reason: quarantine.reason };
      let endpoint = this.endpointViews.get(observed);
      // The same ObservedEndpoint object could sit in two pools; the cached copy names one.
      if (endpoint === undefined || endpoint.pool !== pool) {
        endpoint = endpointOf(observed, pool);
        this.endpointViews.set(observed, endpoint);
      }
      return endpoint;
    });
    return { name: pool, models: observedPool.models, endpoints };
  }

  private announceReleases(previous: EndpointView): void {
    const wasQuarantined = new Set<string>();
    for (const pool of previous.pools.values())
      for (const e of pool.endpoints) if (e.state === 'Quarantined') wasQuarantined.add(`${pool.name}\u0000${e.id}`);
    if (wasQuarantined.size === 0) return;
    for (const pool of this.current.pools.values()) {
      for (const endpoint of pool.endpoints) {
        if (endpoint.state === 'Ready' && wasQuarantined.has(`${pool.name}\u0000${endpoint.id}`)) {
          for (const listener of this.listeners) listener.released?.(endpoint);
        }
      }
    }
  }

  /** One timer for the earliest quarantine release; the rebuild it triggers schedules the next. */
  private scheduleRelease(now: number): void {
    this.releaseTimer?.cancel();
    this.releaseTimer = undefined;
    const next = this.health.nextRelease(now);
    if (next === undefined) return;
    this.releaseTimer = this.clock.setTimer(() => this.rebuild(), Math.max(1, next - now));
  }
}

/** The replica as the rest of the program sees it; only the fields of the model, in one shape. */
function endpointOf(observed: ObservedEndpoint, pool: string): Endpoint {
  const endpoint: Endpoint = { id: observed.id, address: observed.address, state: observed.state, reason: observed.reason, pool };
  return observed.engine === undefined ? endpoint : { ...endpoint, engine: observed.engine };
}
