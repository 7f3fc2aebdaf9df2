// The endpoint model every other module shares: what a model-server replica is, which states it
// can be in, and the immutable view of all pools that the picker reads.

/**
 * Lifecycle states of one model-server replica. Only `Ready` is routable.
 * `Quarantined` is our own passive-health verdict layered on top of a Ready pod.
 */
export const ENDPOINT_STATES = ['Pending', 'Starting', 'NotReady', 'CrashLoop', 'Ready', 'Quarantined', 'Terminating', 'Gone'] as const;

export type EndpointState = (typeof ENDPOINT_STATES)[number];

/** What a source knows about a replica: its own view, before passive health is applied. */
export interface ObservedEndpoint {
  /** Stable identity within the pool: `namespace/pod` for Kubernetes, the address for static files. */
  readonly id: string;
  /** `ip:port` Envoy connects to; empty when the pod has no IP yet. */
  readonly address: string;
  /** Source-side state; never `Quarantined` (only the store sets that). */
  readonly state: Exclude<EndpointState, 'Quarantined'>;
  /** Short human reason taken from the source, e.g. `ContainerCreating` or `readiness probe failing`. */
  readonly reason: string;
  /** The engine the pod's `llm-d.ai/engine-type` label names, if any: its metrics flavour over the pool's. */
  readonly engine?: string;
}

/** A replica as the rest of the program sees it, after passive health. */
export interface Endpoint extends Omit<ObservedEndpoint, 'state'> {
  readonly pool: string;
  readonly state: EndpointState;
}

/** A pool as a source reports it: which models it serves and its replicas. */
export interface ObservedPool {
  readonly name: string;
  readonly models: readonly string[];
  readonly endpoints: readonly ObservedEndpoint[];
}

export interface PoolView {
  readonly name: string;
  readonly models: readonly string[];
  readonly endpoints: readonly Endpoint[];
}

/** Immutable snapshot of the whole cache, replaced on every change (unchanged pools keep their PoolView); cheap to read on the hot path. */
export interface EndpointView {
  readonly pools: ReadonlyMap<string, PoolView>;
  /** model name → pools that serve it, in configuration order. */
  readonly poolsByModel: ReadonlyMap<string, readonly PoolView[]>;
  /** Bumped on every change; lets callers notice a new view cheaply. */
  readonly version: number;
}

export function isRoutable(endpoint: Pick<Endpoint, 'state' | 'address'>): boolean {
  return endpoint.state === 'Ready' && endpoint.address !== '';
}

/**
 * A source feeds the store. It calls `replaceAll` with its complete view whenever it changes, and
 * `markSynced` once its first complete view is in. Whole-view replacement stays cheap at ten
 * thousand pods because a source passes the same (immutable) ObservedPool object again for a pool
 * that did not change, and the store reuses its view of such a pool instead of rebuilding it.
 */
export interface EndpointSink {
  replaceAll(source: string, pools: readonly ObservedPool[]): void;
  markSynced(source: string): void;
}

/** A running source; `stop` ends its watches and timers. */
export interface EndpointSource {
  readonly name: string;
  start(sink: EndpointSink): Promise<void> | void;
  stop(): Promise<void> | void;
}
