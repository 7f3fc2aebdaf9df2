// The `spec.poolRef` of llm-d's and the Inference Extension's per-pool kinds (InferenceObjective,
// InferenceModelRewrite): which InferencePool an object belongs to. Pure.

import type { WatchedObject } from './pod-pools.js';
import { field } from './list-watch.js';

/**
 * What poolRef defaults to (the CRDs set these defaults; an old object may lack them), and the only
 * group and kind we accept: llm-d's router (llm-d-router ebab687) takes an object only when
 * `poolRef.group` is its `--pool-group`, whose one supported value is this group, and llm-d
 * publishes no InferencePool of its own (`llm-d.ai`).
 */
const POOL_GROUP = 'inference.networking.k8s.io';
const POOL_KIND = 'InferencePool';

export interface PoolOwned {
  /** `namespace/name` of the object, for logs. */
  readonly id: string;
  readonly name: string;
  /** The pool, named as the source names InferencePool pools: `namespace/name` (same namespace as the object). */
  readonly pool: string;
  readonly spec: unknown;
}

/** The object's identity and pool, or why it cannot be used (`kind` names it in the message). */
export function poolOwned(object: WatchedObject, kind: string): PoolOwned | string {
  const name = object.metadata?.name;
  const namespace = object.metadata?.namespace;
  if (name === undefined || namespace === undefined) return `${kind} without name or namespace`;
  const id = `${namespace}/${name}`;
  const spec = field(object, 'spec');
  const poolRef = field(spec, 'poolRef');
  const poolName = field(poolRef, 'name');
  if (typeof poolName !== 'string' || poolName === '') return `${kind} ${id} has no spec.poolRef.name; ignoring it`;
  const group = field(poolRef, 'group') ?? POOL_GROUP;
  const refKind = field(poolRef, 'kind') ?? POOL_KIND;
  if (group !== POOL_GROUP || refKind !== POOL_KIND) {
    return `${kind} ${id} refers to kind ${JSON.stringify(refKind)} in group ${JSON.stringify(group)}, not an InferencePool; ignoring it`;
  }
  return { id, name, pool: `${namespace}/${poolName}`, spec };
}
