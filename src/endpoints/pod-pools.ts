// The pods of one pool as the list-watch loop keeps them (a classified projection, not the whole
// V1Pod, sorted by name) and the pool's view built from them: an unchanged pool keeps its
// ObservedPool object, so the store reuses its view of it.

import { isIPv6 } from 'node:net';
import type { ObservedEndpoint, ObservedPool } from './model.js';
import { classifyPod } from './pod-state.js';
import type { PodFacts } from './pod-state.js';
import type { Collection, LoopChange, LoopDeps } from './list-watch.js';
import { ListWatchLoop } from './list-watch.js';
import { ACTIVE_PORTS_ANNOTATIONS, ENGINE_TYPE_LABELS } from './pod-keys.js';

/** Resolved pool: from the config file or from an InferencePool. */
export interface PoolDefinition {
  readonly name: string;
  readonly namespace: string;
  readonly selector: Readonly<Record<string, string>>;
  readonly targetPort: number;
  readonly models: readonly string[];
}

/** What we need of any watched object; pods additionally satisfy `PodFacts`. */
export interface WatchedObject {
  readonly metadata?: {
    readonly name?: string;
    readonly namespace?: string;
    readonly resourceVersion?: string;
    readonly creationTimestamp?: string;
    readonly annotations?: Readonly<Record<string, string>>;
    readonly labels?: Readonly<Record<string, string>>;
  };
}

type PodObject = WatchedObject & PodFacts & { readonly status?: { readonly podIP?: string | null } | null };

/** What a pod loop keeps of each pod: its classification and IP, not the whole object. */
export interface PodEntry {
  readonly id: string;
  readonly ip: string;
  readonly state: ObservedEndpoint['state'];
  readonly reason: string;
  /** The ports the pod says it serves on (llm-d's active-ports annotation); undefined = every port. */
  readonly activePorts?: readonly number[];
  /** The pod's engine-type label (which metrics flavour it speaks), if it has one. */
  readonly engine?: string;
}

export function projectPod(object: unknown, namespace: string): PodEntry | undefined {
  const pod = object as PodObject;
  const name = pod.metadata?.name;
  if (name === undefined) return undefined;
  const { state, reason } = classifyPod(pod);
  const entry: PodEntry = { id: `${pod.metadata?.namespace ?? namespace}/${name}`, ip: pod.status?.podIP ?? '', state, reason };
  const ports = firstKey(pod.metadata?.annotations, ACTIVE_PORTS_ANNOTATIONS);
  const engine = firstKey(pod.metadata?.labels, ENGINE_TYPE_LABELS);
  if (ports === undefined && engine === undefined) return entry;
  return { ...entry, ...(ports === undefined ? {} : { activePorts: parsePorts(ports) }), ...(engine === undefined ? {} : { engine }) };
}

/** The value of the first of `keys` present (llm-d's key before the Inference Extension's alias). */
function firstKey(map: Readonly<Record<string, string>> | undefined, keys: readonly string[]): string | undefined {
  if (map === undefined) return undefined;
  for (const key of keys) if (Object.hasOwn(map, key)) return map[key];
  return undefined;
}

/** `"8000, 8001"` → [8000, 8001]; entries that are not port numbers are ignored, as llm-d does. */
function parsePorts(value: string): number[] {
  const ports: number[] = [];
  for (const piece of value.split(',')) {
    const port = Number(piece.trim());
    if (Number.isInteger(port) && port > 0 && port <= 65535) ports.push(port);
  }
  return ports;
}

/** Plain code-point order: a stable total order, and far cheaper than localeCompare at thousands of pods. */
export function compareNames(a: string, b: string): number {
  return a < b ? -1 : a > b ? 1 : 0;
}

/** First index in the sorted `names` whose name is not below `name`. */
function lowerBound(names: readonly string[], name: string): number {
  let lo = 0;
  let hi = names.length;
  while (lo < hi) {
    const mid = (lo + hi) >>> 1;
    if ((names[mid] ?? '') < name) lo = mid + 1;
    else hi = mid;
  }
  return lo;
}

/**
 * One pool's pods, kept ready to publish: the endpoint of each pod, the pod names in order, and the
 * ObservedPool last published. A watch event re-derives only its own pod's endpoint and marks the
 * pool dirty only when that endpoint really changed (a label or annotation edit does not).
 */
export class PoolWatch {
  readonly loop: ListWatchLoop<PodEntry>;
  private readonly endpoints = new Map<string, ObservedEndpoint>();
  private names: string[] = [];
  private published: ObservedPool | undefined;

  constructor(
    private definition: PoolDefinition,
    collection: Collection<PodEntry>,
    deps: LoopDeps,
    private readonly changed: () => void,
  ) {
    this.loop = new ListWatchLoop(collection, deps, (change) => this.apply(change));
  }

  get def(): PoolDefinition {
    return this.definition;
  }

  /** Takes a new definition with the same namespace and selector (models or port may differ). */
  redefine(next: PoolDefinition): void {
    const portChanged = next.targetPort !== this.definition.targetPort;
    const modelsChanged = next.models.join('\u0000') !== this.definition.models.join('\u0000');
    this.definition = next;
    if (portChanged) this.apply({ kind: 'reset' });
    else if (modelsChanged) this.published = undefined;
  }

  /** The pool as last published, rebuilt only if something changed since. */
  view(): ObservedPool {
    if (this.published === undefined) {
      const endpoints: ObservedEndpoint[] = [];
      for (const name of this.names) {
        const endpoint = this.endpoints.get(name);
        if (endpoint !== undefined) endpoints.push(endpoint);
      }
      this.published = { name: this.definition.name, models: this.definition.models, endpoints };
    }
    return this.published;
  }

  private apply(change: LoopChange): void {
    if (change.kind === 'reset') {
      this.endpoints.clear();
      for (const [name, entry] of this.loop.entries()) this.endpoints.set(name, this.toEndpoint(entry));
      this.names = [...this.endpoints.keys()].sort(compareNames);
    } else if (change.kind === 'delete') {
      if (!this.endpoints.delete(change.name)) return;
      const at = lowerBound(this.names, change.name);
      if (this.names[at] === change.name) this.names.splice(at, 1);
    } else {
      const entry = this.loop.get(change.name);
      if (entry === undefined) return;
      const next = this.toEndpoint(entry);
      const previous = this.endpoints.get(change.name);
      if (previous !== undefined && sameEndpoint(previous, next)) return;
      this.endpoints.set(change.name, next);
      if (previous === undefined) this.names.splice(lowerBound(this.names, change.name), 0, change.name);
    }
    this.published = undefined;
    this.changed();
  }

  private toEndpoint(entry: PodEntry): ObservedEndpoint {
    const port = this.definition.targetPort;
    const inactive = entry.activePorts !== undefined && !entry.activePorts.includes(port);
    return {
      id: entry.id,
      address: entry.ip === '' ? '' : formatAddress(entry.ip, port),
      // A pod that lists its active ports without the pool's takes no traffic on it (llm-d skips that port).
      state: inactive && entry.state === 'Ready' ? 'NotReady' : entry.state,
      reason: inactive && entry.state === 'Ready' ? `port ${port} not in the pod's active-ports annotation` : entry.reason,
      ...(entry.engine === undefined ? {} : { engine: entry.engine }),
    };
  }
}

function sameEndpoint(a: ObservedEndpoint, b: ObservedEndpoint): boolean {
  return a.id === b.id && a.address === b.address && a.state === b.state && a.reason === b.reason && a.engine === b.engine;
}

function formatAddress(ip: string, port: number): string {
  return isIPv6(ip) ? `[${ip}]:${port}` : `${ip}:${port}`;
}
