// llm-d's router names for the series the Gateway API Inference Extension names (gie-metrics.ts):
// llm-d (llm-d/llm-d-router docs/metrics.md) made `llm_d_epp_*` canonical and keeps the
// `inference_objective_*` / `inference_pool_*` names as deprecated twins. Each twin here reads its
// GIE series when /metrics is scraped and shows it under llm-d's name (and label names), so the
// request path writes each figure once whichever names are shown.
//
// Where llm-d's series differ from ours, the docs say so (docs/gateways.md, "llm-d router"): its
// request series add `fairness_id` and `priority` labels and its error counter an `error_code`,
// which these twins do not carry.

import { Counter, Gauge } from 'prom-client';
import type { Metric, MetricObjectWithValues, MetricValue, Registry } from 'prom-client';

interface Twin {
  /** The series it shows: the Inference Extension's name (gie-metrics.ts), or one of our own (`own`). */
  readonly from: string;
  /** Read from our own registry rather than the Inference Extension's (which may be unshown). */
  readonly own?: boolean;
  /** llm-d's canonical name. */
  readonly to: string;
  /** llm-d's label names where they differ from the Inference Extension's. */
  readonly labels?: Readonly<Record<string, string>>;
}

/** Every series gie-metrics.ts provides, under llm-d's name (docs/metrics.md at llm-d-router ebab687). */
const LLM_D_TWINS: readonly Twin[] = [
  { from: 'inference_objective_request_total', to: 'llm_d_epp_request_total' },
  { from: 'inference_objective_request_error_total', to: 'llm_d_epp_request_error_total' },
  { from: 'inference_objective_request_duration_seconds', to: 'llm_d_epp_request_duration_seconds' },
  { from: 'inference_objective_input_tokens', to: 'llm_d_epp_request_input_tokens' },
  { from: 'inference_objective_output_tokens', to: 'llm_d_epp_request_output_tokens' },
  { from: 'inference_pool_average_kv_cache_utilization', to: 'llm_d_epp_average_kv_cache_utilization' },
  { from: 'inference_pool_average_queue_size', to: 'llm_d_epp_average_queue_size' },
  { from: 'inference_pool_ready_pods', to: 'llm_d_epp_ready_endpoints' },
  {
    from: 'inference_pool_per_pod_queue_size',
    to: 'llm_d_epp_per_endpoint_queue_size',
    labels: { model_server_pod: 'model_server_endpoint' },
  },
  // Ours, same meaning: ext_proc streams open now (llm-d: "ext_proc gRPC streams currently open").
  { from: 'llm_extproc_in_flight_requests', to: 'llm_d_epp_extproc_streams_inflight', own: true },
];

type Exported = MetricObjectWithValues<MetricValue<string>>;

/** A series shown under another name: what `source` holds when scraped, renamed. */
class RenamedTwin extends Gauge {
  constructor(
    private readonly source: Metric,
    private readonly twin: Twin,
  ) {
    // The source's label names, renamed: what a registry lists for this series (the dashboard test reads them).
    const labelNames = ((source as unknown as { labelNames?: readonly string[] }).labelNames ?? []).map((l) => twin.labels?.[l] ?? l);
    super({ name: twin.to, help: `llm-d's name for ${twin.from}.`, labelNames, registers: [] });
  }

  override async get(): Promise<Exported> {
    const exported: Exported = await this.source.get();
    const { from, to } = this.twin;
    const renames = this.twin.labels;
    return {
      ...exported,
      name: to,
      help: `${exported.help.replace(/ \(Gateway API Inference Extension name\)\.?$/, '.')} (llm-d name; twin of ${from}).`,
      values: exported.values.map((value) => {
        const metricName = (value as { metricName?: string }).metricName;
        return {
          ...value,
          ...(metricName === undefined ? {} : { metricName: to + metricName.slice(from.length) }),
          ...(renames === undefined ? {} : { labels: renamedLabels(value.labels, renames) }),
        };
      }),
    };
  }

  /** prom-client's Registry prefers this method when rendering text. */
  getForPromString(): Promise<Exported> {
    return this.get();
  }
}

function renamedLabels(labels: MetricValue<string>['labels'], renames: Readonly<Record<string, string>>): MetricValue<string>['labels'] {
  const out: Record<string, string | number> = {};
  for (const [name, value] of Object.entries(labels)) if (value !== undefined) out[renames[name] ?? name] = value;
  return out;
}

/**
 * Registers in `shown` llm-d's twin of every series the table names: the Inference Extension's
 * from `gie`, our own from `shown` itself.
 */
export function registerLlmdTwins(gie: Registry, shown: Registry): void {
  for (const twin of LLM_D_TWINS) {
    const source = (twin.own === true ? shown : gie).getSingleMetric(twin.from);
    if (source === undefined) throw new Error(`llm-d twin: no ${twin.from} to read`);
    shown.registerMetric(new RenamedTwin(source, twin));
  }
}

/** Distinct model names a decisions series takes before it says `other` (llm-d's cap on client-named models). */
const MODEL_NAME_CAP = 1000;

/**
 * llm-d's `llm_d_epp_model_rewrite_decisions_total`: which rewrite sent a request for a model as
 * which target. A rule without matches rewrites any model a client names, so `model_name` is capped
 * as llm-d caps it; rule names and targets come from config and objects, bounded already.
 */
export class ModelRewriteDecisions {
  private readonly counter: Counter<'model_rewrite_name' | 'model_name' | 'target_model'>;
  private readonly models = new Set<string>();

  constructor(registry: Registry) {
    this.counter = new Counter({
      name: 'llm_d_epp_model_rewrite_decisions_total',
      help: "Model-rewrite decisions: requests for model_name sent as target_model by the rewrite model_rewrite_name (an InferenceModelRewrite's namespace/name, or config).",
      labelNames: ['model_rewrite_name', 'model_name', 'target_model'] as const,
      registers: [registry],
    });
  }

  decided(rule: string, model: string, target: string): void {
    if (!this.models.has(model) && this.models.size < MODEL_NAME_CAP) this.models.add(model);
    this.counter.inc({ model_rewrite_name: rule, model_name: this.models.has(model) ? model : 'other', target_model: target });
  }
}
