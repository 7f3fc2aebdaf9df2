// InferenceObjectives (llm-d.ai/v1alpha2, and inference.networking.x-k8s.io/v1alpha2, the Gateway
// API Inference Extension's alpha kind that llm-d took over) as flow-control priorities per pool. Pure: parses what the list-watch
// loop hands over and builds the table routing reads; the watch itself is kubernetes-source.ts.
//
// The API (v1alpha2, as of GIE v1.0.1) has two spec fields: `priority` (optional integer, higher is
// more important, negative allowed) and `poolRef` (group default inference.networking.k8s.io, kind
// default InferencePool, name; the pool is in the objective's namespace). It names no model: the
// EPP associates a request with an objective only through the `x-gateway-inference-objective`
// header, whose value is the objective's metadata.name. We do the same, and additionally let an
// objective name the models it applies to through the annotation InferencePools use for their
// served models, so requests without the header get their model's objective.

import type { WatchedObject } from './pod-pools.js';
import { field } from './list-watch.js';
import { annotatedModels } from './inference-pools.js';
import { poolOwned } from './pool-ref.js';

/** llm-d's group (llm-d.ai/v1alpha2), and the Inference Extension's, now its deprecated alias: same fields. */
export const INFERENCE_OBJECTIVE_KINDS = {
  current: { group: 'llm-d.ai', version: 'v1alpha2', plural: 'inferenceobjectives' },
  legacy: { group: 'inference.networking.x-k8s.io', version: 'v1alpha2', plural: 'inferenceobjectives' },
} as const;

/** One objective, reduced to what flow control uses. */
export interface ObjectiveDefinition {
  /** `namespace/name`, for logs. */
  readonly id: string;
  readonly name: string;
  /** The pool it belongs to, named as the source names InferencePool pools: `namespace/name`. */
  readonly pool: string;
  /** Undefined when the objective sets none: the request's priority then comes from the next rule. */
  readonly priority: number | undefined;
  /** From the models annotation; empty = applies only to requests naming it in the header. */
  readonly models: readonly string[];
}

/** Turns an InferenceObjective into a definition, or says why it cannot be used. */
export function parseInferenceObjective(object: WatchedObject, modelsAnnotation: string): ObjectiveDefinition | string {
  const owned = poolOwned(object, 'InferenceObjective');
  if (typeof owned === 'string') return owned;
  const { id, name, pool, spec } = owned;
  const priority = field(spec, 'priority');
  if (priority !== undefined && (typeof priority !== 'number' || !Number.isSafeInteger(priority))) {
    return `InferenceObjective ${id} has a spec.priority that is not an integer; ignoring it`;
  }
  return { id, name, pool, priority, models: annotatedModels(object, modelsAnnotation) };
}

/** The objectives of one pool that set a priority. */
export interface PoolObjectives {
  /** Objective name (the header's value) → priority. */
  readonly byName: ReadonlyMap<string, number>;
  /** Model → priority of the objective naming it in the models annotation. */
  readonly byModel: ReadonlyMap<string, number>;
}

/** Pool name → its objectives. Immutable: replaced whole when an objective or the pool set changes. */
export type ObjectiveIndex = ReadonlyMap<string, PoolObjectives>;

export const NO_OBJECTIVES: ObjectiveIndex = new Map();

export interface IndexedObjectives {
  readonly index: ObjectiveIndex;
  /** Objectives (or one model of one) left out: of a pool we do not serve, or a model another objective of the pool already claims. */
  readonly ignored: ReadonlyArray<{ readonly id: string; readonly why: 'other-pool' | 'model-claimed'; readonly reason: string }>;
}

/**
 * The priority table of the pools we serve. Objectives of other pools are left out (the EPP of
 * each pool reads only its own). Two objectives of one pool naming the same model: the one whose
 * name sorts first applies, so the outcome does not depend on the order events arrived in.
 */
export function indexObjectives(objectives: Iterable<ObjectiveDefinition>, servedPools: ReadonlySet<string>): IndexedObjectives {
  const sorted = [...objectives].sort((a, b) => (a.id < b.id ? -1 : a.id > b.id ? 1 : 0));
  const pools = new Map<string, { byName: Map<string, number>; byModel: Map<string, number>; claimedBy: Map<string, string> }>();
  const ignored: Array<IndexedObjectives['ignored'][number]> = [];
  for (const objective of sorted) {
    if (!servedPools.has(objective.pool)) {
      ignored.push({ id: objective.id, why: 'other-pool', reason: `its pool ${objective.pool} is not one we serve` });
      continue;
    }
    if (objective.priority === undefined) continue;
    let pool = pools.get(objective.pool);
    if (pool === undefined) pools.set(objective.pool, (pool = { byName: new Map(), byModel: new Map(), claimedBy: new Map() }));
    pool.byName.set(objective.name, objective.priority);
    for (const model of objective.models) {
      const owner = pool.claimedBy.get(model);
      if (owner !== undefined) {
        ignored.push({
          id: objective.id,
          why: 'model-claimed',
          reason: `model ${model} already has the objective ${owner} in pool ${objective.pool}`,
        });
        continue;
      }
      pool.claimedBy.set(model, objective.id);
      pool.byModel.set(model, objective.priority);
    }
  }
  const index = new Map<string, PoolObjectives>();
  for (const [name, { byName, byModel }] of pools) index.set(name, { byName, byModel });
  return { index, ignored };
}
