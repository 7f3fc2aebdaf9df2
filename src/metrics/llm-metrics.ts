// The per-request LLM figures as Prometheus series: the OpenTelemetry GenAI semantic conventions
// in their Prometheus form (`gen_ai.client.token.usage` → `gen_ai_client_token_usage`, attribute
// `gen_ai.request.model` → label `gen_ai_request_model`, unit seconds as a `_seconds` suffix), with
// the buckets the conventions recommend, plus our own counters of tokens by type and of answers
// that reported no usage. Recorded once per answered request, never per chunk.
//
// Labels: operation and model on all; `pool` on all; `endpoint` only on the latency histograms
// (what the "replica slower than its pool" alert needs), whose series go when the endpoint does.

import { Counter, Histogram } from 'prom-client';
import type { Registry } from 'prom-client';
import type { TokenUsage } from '../inspect/usage.js';

/** What one answered request cost and how its output was paced, times in seconds (request-processor.ts builds it). */
export interface LlmFigures {
  readonly model: string;
  readonly pool: string;
  readonly endpoint: string;
  /** GenAI operation: chat, text_completion, embeddings, responses, other. */
  readonly operation: string;
  readonly answer: 'stream' | 'json';
  /** Undefined when the answer reported none: counted as such, never as zero tokens. */
  readonly usage: TokenUsage | undefined;
  /** First ext_proc message of the request → the end of its answer. */
  readonly duration: number;
  /** Streams only: pick → first content event. */
  readonly timeToFirstToken: number | undefined;
  /** Streams only: mean gap between content events after the first. */
  readonly interTokenLatency: number | undefined;
  /** Streams with usage: generation time after the first token, per output token after the first. */
  readonly timePerOutputToken: number | undefined;
}

// Bucket boundaries from the GenAI metrics conventions (semantic-conventions gen-ai-metrics.md).
const TOKEN_BUCKETS = [1, 4, 16, 64, 256, 1024, 4096, 16384, 65536, 262144, 1048576, 4194304, 16777216, 67108864];
const DURATION_BUCKETS = [0.01, 0.02, 0.04, 0.08, 0.16, 0.32, 0.64, 1.28, 2.56, 5.12, 10.24, 20.48, 40.96, 81.92];
const TTFT_BUCKETS = [0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1, 2.5, 5, 7.5, 10];
const PER_TOKEN_BUCKETS = [0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1, 2.5];

const MODEL_LABELS = ['gen_ai_operation_name', 'gen_ai_request_model', 'pool'] as const;
const ENDPOINT_LABELS = ['gen_ai_operation_name', 'gen_ai_request_model', 'pool', 'endpoint'] as const;
type EndpointLabels = Record<(typeof ENDPOINT_LABELS)[number], string>;

export class LlmMetrics {
  private readonly tokenUsage: Histogram<(typeof MODEL_LABELS)[number] | 'gen_ai_token_type'>;
  private readonly duration: Histogram<(typeof MODEL_LABELS)[number]>;
  private readonly timeToFirstToken: Histogram<(typeof ENDPOINT_LABELS)[number]>;
  private readonly timePerOutputToken: Histogram<(typeof ENDPOINT_LABELS)[number]>;
  private readonly interTokenLatency: Histogram<(typeof ENDPOINT_LABELS)[number]>;
  private readonly tokens: Counter<'model' | 'pool' | 'type'>;
  private readonly withoutUsage: Counter<'model' | 'pool' | 'answer'>;
  /** Label sets of the endpoint-labelled series, by endpoint address, to remove them when it goes. */
  private readonly endpointSeries = new Map<string, Map<string, EndpointLabels>>();

  constructor(registry: Registry) {
    const registers = [registry];
    this.tokenUsage = new Histogram({
      name: 'gen_ai_client_token_usage',
      help: 'Tokens per request by type (input, output), as the model server reported them (GenAI semantic conventions).',
      labelNames: [...MODEL_LABELS, 'gen_ai_token_type'],
      buckets: TOKEN_BUCKETS,
      registers,
    });
    this.duration = new Histogram({
      name: 'gen_ai_client_operation_duration_seconds',
      help: 'Request duration, from its first ext_proc message to the end of the answer, for answered requests (GenAI semantic conventions).',
      labelNames: MODEL_LABELS,
      buckets: DURATION_BUCKETS,
      registers,
    });
    this.timeToFirstToken = new Histogram({
      name: 'gen_ai_server_time_to_first_token_seconds',
      help: 'Streams: time from the pick to the first content event reaching llm-extproc (GenAI semantic conventions).',
      labelNames: ENDPOINT_LABELS,
      buckets: TTFT_BUCKETS,
      registers,
    });
    this.timePerOutputToken = new Histogram({
      name: 'gen_ai_server_time_per_output_token_seconds',
      help: 'Streams with usage: generation time after the first token, per output token after the first (GenAI semantic conventions).',
      labelNames: ENDPOINT_LABELS,
      buckets: PER_TOKEN_BUCKETS,
      registers,
    });
    this.interTokenLatency = new Histogram({
      name: 'llm_extproc_inter_token_latency_seconds',
      help: 'Streams: mean gap between content events after the first, per request (no usage needed).',
      labelNames: ENDPOINT_LABELS,
      buckets: PER_TOKEN_BUCKETS,
      registers,
    });
    this.tokens = new Counter({
      name: 'llm_extproc_tokens_total',
      help: 'Tokens the model servers reported, by type: input, output, and cached (input tokens served from the prefix cache).',
      labelNames: ['model', 'pool', 'type'],
      registers,
    });
    this.withoutUsage = new Counter({
      name: 'llm_extproc_answers_without_usage_total',
      help: 'Answered requests whose answer reported no token usage (streams without stream_options.include_usage), by answer kind.',
      labelNames: ['model', 'pool', 'answer'],
      registers,
    });
  }

  record(f: LlmFigures): void {
    const model = { gen_ai_operation_name: f.operation, gen_ai_request_model: f.model, pool: f.pool };
    this.duration.observe(model, f.duration);
    const usage = f.usage;
    if (usage === undefined) {
      this.withoutUsage.inc({ model: f.model, pool: f.pool, answer: f.answer });
    } else {
      this.tokenUsage.observe({ ...model, gen_ai_token_type: 'input' }, usage.input);
      this.tokenUsage.observe({ ...model, gen_ai_token_type: 'output' }, usage.output);
      this.tokens.inc({ model: f.model, pool: f.pool, type: 'input' }, usage.input);
      this.tokens.inc({ model: f.model, pool: f.pool, type: 'output' }, usage.output);
      if (usage.cached !== undefined) this.tokens.inc({ model: f.model, pool: f.pool, type: 'cached' }, usage.cached);
    }
    if (f.timeToFirstToken === undefined && f.interTokenLatency === undefined && f.timePerOutputToken === undefined) return;
    const labels: EndpointLabels = { ...model, endpoint: f.endpoint };
    this.remember(labels);
    if (f.timeToFirstToken !== undefined) this.timeToFirstToken.observe(labels, f.timeToFirstToken);
    if (f.interTokenLatency !== undefined) this.interTokenLatency.observe(labels, f.interTokenLatency);
    if (f.timePerOutputToken !== undefined) this.timePerOutputToken.observe(labels, f.timePerOutputToken);
  }

  /** Drops the series of endpoints that are not in `present` (pod IPs churn with every rollout). */
  keepEndpoints(present: (address: string) => boolean): void {
    for (const [address, series] of this.endpointSeries) {
      if (present(address)) continue;
      for (const labels of series.values()) {
        this.timeToFirstToken.remove(labels);
        this.interTokenLatency.remove(labels);
        this.timePerOutputToken.remove(labels);
      }
      this.endpointSeries.delete(address);
    }
  }

  private remember(labels: EndpointLabels): void {
    let series = this.endpointSeries.get(labels.endpoint);
    if (series === undefined) this.endpointSeries.set(labels.endpoint, (series = new Map<string, EndpointLabels>()));
    const key = `${labels.gen_ai_operation_name}\u0000${labels.gen_ai_request_model}\u0000${labels.pool}`;
    if (!series.has(key)) series.set(key, labels);
  }
}
