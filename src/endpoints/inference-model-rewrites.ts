// InferenceModelRewrites (llm-d.ai/v1alpha2; the same kind under inference.networking.x-k8s.io is
// its deprecated alias) as one ordered list of rewrite rules. Pure: parses what the list-watch loop
// hands over; the watch is kubernetes-source.ts, and picker/model-rewrite.ts applies the rules.
//
// The spec (llm-d-router apix/v1alpha2): `poolRef` as every per-pool kind, and `rules[]`, each with
// `matches[].model{type: Exact, value}` (none = every model) and `targets[]{modelRewrite, weight}`.
// llm-d's precedence across objects of one pool: an exact match beats a rule without matches, then
// the oldest object (creationTimestamp) wins, then the first rule in the object. We list the rules
// of older objects first and let the applier take the first exact match, else the first catch-all:
// the same outcome. Rewrites of pools we do not serve are left out (each pool's picker reads its own).

import type { WatchedObject } from './pod-pools.js';
import { field } from './list-watch.js';
import { poolOwned } from './pool-ref.js';

export const INFERENCE_MODEL_REWRITE_KINDS = {
  current: { group: 'llm-d.ai', version: 'v1alpha2', plural: 'inferencemodelrewrites' },
  legacy: { group: 'inference.networking.x-k8s.io', version: 'v1alpha2', plural: 'inferencemodelrewrites' },
} as const;

/** One rule, in the shape picker/model-rewrite.ts takes (llm-d's field names). */
export interface ClusterRewriteRule {
  /** The object's `namespace/name` (the decisions counter's model_rewrite_name). */
  readonly name: string;
  readonly matches: ReadonlyArray<{ readonly model: { readonly value: string } }>;
  readonly targets: ReadonlyArray<{ readonly modelRewrite: string; readonly weight?: number }>;
}

export interface RewriteDefinition {
  readonly id: string;
  readonly pool: string;
  /** metadata.creationTimestamp (RFC 3339); '' when absent, which sorts first. */
  readonly created: string;
  readonly rules: readonly ClusterRewriteRule[];
}

const MAX_WEIGHT = 1_000_000;

/** Turns an InferenceModelRewrite into its rules, or says why it cannot be used (the whole object: half a split is worse than none). */
export function parseInferenceModelRewrite(object: WatchedObject): RewriteDefinition | string {
  const owned = poolOwned(object, 'InferenceModelRewrite');
  if (typeof owned === 'string') return owned;
  const { id, pool, spec } = owned;
  const rules = field(spec, 'rules');
  if (!Array.isArray(rules)) return `InferenceModelRewrite ${id} has no spec.rules; ignoring it`;
  const parsed: ClusterRewriteRule[] = [];
  for (const [i, rule] of rules.entries()) {
    const where = `InferenceModelRewrite ${id} spec.rules[${i}]`;
    const matches = field(rule, 'matches') ?? [];
    const targets = field(rule, 'targets') ?? [];
    if (!Array.isArray(matches) || !Array.isArray(targets)) return `${where} has matches or targets that are not lists; ignoring it`;
    const models: Array<{ model: { value: string } }> = [];
    for (const match of matches) {
      const model = field(match, 'model');
      const value = field(model, 'value');
      const type = field(model, 'type') ?? 'Exact';
      if (typeof value !== 'string' || value === '' || type !== 'Exact')
        return `${where} has a match that is not an Exact model name; ignoring it`;
      models.push({ model: { value } });
    }
    const weighted: Array<{ modelRewrite: string; weight?: number }> = [];
    for (const target of targets) {
      const modelRewrite = field(target, 'modelRewrite');
      const weight = field(target, 'weight');
      if (typeof modelRewrite !== 'string' || modelRewrite === '') return `${where} has a target without modelRewrite; ignoring it`;
      if (weight !== undefined && (typeof weight !== 'number' || !Number.isInteger(weight) || weight < 1 || weight > MAX_WEIGHT)) {
        return `${where} has a target weight outside 1..${MAX_WEIGHT}; ignoring it`;
      }
      weighted.push(weight === undefined ? { modelRewrite } : { modelRewrite, weight });
    }
    // A rule without targets rewrites nothing (the CRD requires one; an old object may lack it).
    if (weighted.length > 0) parsed.push({ name: id, matches: models, targets: weighted });
  }
  const created = object.metadata?.creationTimestamp;
  return { id, pool, created: typeof created === 'string' ? created : '', rules: parsed };
}

/** The rules of the rewrites of the pools we serve, oldest object first (then by id, so event order never matters). */
export function orderRewrites(definitions: Iterable<RewriteDefinition>, servedPools: ReadonlySet<string>): ClusterRewriteRule[] {
  const served = [...definitions].filter((d) => servedPools.has(d.pool));
  served.sort((a, b) => (a.created !== b.created ? (a.created < b.created ? -1 : 1) : a.id < b.id ? -1 : a.id > b.id ? 1 : 0));
  return served.flatMap((d) => d.rules);
}
