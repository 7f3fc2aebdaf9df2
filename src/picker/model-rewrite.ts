// Weighted model rewrite (llm-d's InferenceModelRewrite): a request for a model a rule matches is
// sent as one of the rule's target models, chosen by weight — the canary and LoRA-rollout tool
// (`m` → `m-v2` for 10 % of traffic). Rules come in llm-d's shape (`spec.rules` of the CRD:
// `matches[].model.value`, `targets[].modelRewrite` and `weight`), from the config file and from
// the cluster's InferenceModelRewrites (endpoints/inference-model-rewrites.ts orders those).
//
// Precedence is llm-d's: a rule naming the model exactly beats a rule without matches (which
// matches every model); among equals the first in the list wins (the caller lists older objects
// first). The choice among targets is a smooth weighted round robin, not a random draw: every run
// of `total weight` requests follows the weights exactly and the targets interleave, so a 90/10
// split is 90/10 over any window of a hundred requests, on every replica, and no test has to
// allow for chance.

export interface RewriteTarget {
  readonly modelRewrite: string;
  /** Relative weight (llm-d: 1..1,000,000; absent = 1). */
  readonly weight?: number;
}

export interface RewriteRule {
  /** Whose rule it is, for the decisions counter: the InferenceModelRewrite's `namespace/name`; absent = `config`. */
  readonly name?: string;
  /** The model names the rule applies to (exact match, llm-d's only match type); none or empty = every model. */
  readonly matches?: ReadonlyArray<{ readonly model: { readonly value: string; readonly type?: 'Exact' } }>;
  readonly targets: readonly RewriteTarget[];
}

/** One rule's targets and its round-robin state (shared by every model the rule matches). */
class WeightedChoice {
  private readonly weights: number[];
  private readonly current: number[];
  private readonly total: number;

  constructor(
    readonly name: string,
    private readonly targets: readonly string[],
    weights: readonly number[],
  ) {
    this.weights = [...weights];
    this.current = weights.map(() => 0);
    this.total = weights.reduce((a, b) => a + b, 0);
  }

  next(): string {
    const { targets, weights, current } = this;
    if (targets.length === 1) return targets[0];
    let best = 0;
    for (let i = 0; i < current.length; i++) {
      current[i] += weights[i];
      if (current[i] > current[best]) best = i;
    }
    current[best] -= this.total;
    return targets[best];
  }
}

/** Told of every rewrite: which rule sent a request for `model` as `target` (llm-d's model_rewrite_decisions_total). */
export type RewriteDecided = (rule: string, model: string, target: string) => void;

export class ModelRewrites {
  private byModel = new Map<string, WeightedChoice>();
  private anyModel: WeightedChoice | undefined;

  constructor(
    rules: readonly RewriteRule[] = [],
    private readonly decided: RewriteDecided = () => {},
  ) {
    this.replace(rules);
  }

  /** Takes a new rule set at once (a live change: the next request follows it, from a fresh round). */
  replace(rules: readonly RewriteRule[]): void {
    const byModel = new Map<string, WeightedChoice>();
    let anyModel: WeightedChoice | undefined;
    for (const rule of rules) {
      if (rule.targets.length === 0) continue;
      const choice = new WeightedChoice(
        rule.name ?? 'config',
        rule.targets.map((t) => t.modelRewrite),
        rule.targets.map((t) => Math.max(1, t.weight ?? 1)),
      );
      const matches = rule.matches ?? [];
      if (matches.length === 0) anyModel ??= choice;
      for (const match of matches) if (!byModel.has(match.model.value)) byModel.set(match.model.value, choice);
    }
    this.byModel = byModel;
    this.anyModel = anyModel;
  }

  get empty(): boolean {
    return this.byModel.size === 0 && this.anyModel === undefined;
  }

  /** The model to send a request for `model` as, or undefined when no rule matches it. */
  targetFor(model: string): string | undefined {
    const choice = this.byModel.get(model) ?? this.anyModel;
    if (choice === undefined) return undefined;
    const target = choice.next();
    this.decided(choice.name, model, target);
    return target;
  }
}
