// The per-request LLM figures as Prometheus series: the OpenTelemetry GenAI semantic conventions
// in their Prometheus form (`gen_ai.client.token.usage` → `gen_ai_client_token_usage`, attribute
// `gen_ai.request.model` → label `gen_ai_request_model`, unit seconds as a `_seconds` suffix), with
// the buckets the conventions recommend, plus our own counters of tokens by type and of answers
// that reported no usage. Recorded once per answered request, never per chunk, through series
// found once per (operation, model, pool, endpoint) and kept (`CountingHistogram`, `CounterCells`).
//
// Labels: operation and model on all; `pool` on all; `endpoint` only on the latency histograms
// (what the "replica slower than its pool" alert needs), whose series go when the endpoint does.

import { Counter } from 'prom-client';
import type { Registry } from 'prom-client';
import type { TokenUsage } from '../inspect/usage.js';
import { CounterCells } from './counter-cells.js';
import type { CounterCell } from './counter-cells.js';
import { CountingHistogram } from './counting-histogram.js';
import type { CountingChild, HeldObservations } from './counting-histogram.js';

/** What one answered request cost and how its output was paced, times in seconds (request-processor.ts builds it as AnswerFigures; outcomes/metrics-sink.ts records it). */
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
  /** Streams only: the request's first ext_proc message → first content event (llm-d's TTFT: the client's whole wait). */
  readonly timeToFirstTokenFromStart?: number | undefined;
  /** Streams only: mean gap between content events after the first. */
  readonly interTokenLatency: number | undefined;
  /** Streams with usage: generation time after the first token, per output token after the first. */
  readonly timePerOutputToken: number | undefined;
  /** Bytes of every response body chunk Envoy gave us (the model server's answer, before any change of ours). */
  readonly responseBytes?: number | undefined;
  /** Streams only: each gap between consecutive non-empty body chunks, in seconds (llm-d's ITL), held per request. */
  readonly chunkGaps?: HeldObservations | undefined;
}

// Bucket boundaries from the GenAI metrics conventions (semantic-conventions gen-ai-metrics.md).
export const TOKEN_BUCKETS = [1, 4, 16, 64, 256, 1024, 4096, 16384, 65536, 262144, 1048576, 4194304, 16777216, 67108864];
export const DURATION_BUCKETS = [0.01, 0.02, 0.04, 0.08, 0.16, 0.32, 0.64, 1.28, 2.56, 5.12, 10.24, 20.48, 40.96, 81.92];
export const TTFT_BUCKETS = [0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1, 2.5, 5, 7.5, 10];
export const PER_TOKEN_BUCKETS = [0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1, 2.5];

export const MODEL_LABELS = ['gen_ai_operation_name', 'gen_ai_request_model', 'pool'];
export const ENDPOINT_LABELS = [...MODEL_LABELS, 'endpoint'];

/** The latency series of one (operation, model, pool, endpoint), each made on its first use. */
interface EndpointSeries {
  timeToFirstToken?: CountingChild;
  interTokenLatency?: CountingChild;
  timePerOutputToken?: CountingChild;
}

/**
 * The series of one (operation, model, pool), found once and kept: recording a request is then a
 * few nested Map lookups and array writes, not prom-client's label validation and hashing. Each is
 * made on its first use, so a series appears exactly when prom-client would have shown it.
 */
interface ModelSeries {
  readonly operation: string;
  readonly model: string;
  readonly pool: string;
  duration?: CountingChild;
  inputTokenUsage?: CountingChild;
  outputTokenUsage?: CountingChild;
  inputTokens?: CounterCell;
  outputTokens?: CounterCell;
  cachedTokens?: CounterCell;
  streamWithoutUsage?: CounterCell;
  jsonWithoutUsage?: CounterCell;
  readonly endpoints: Map<string, EndpointSeries>;
}

export class LlmMetrics {
  private readonly tokenUsage: CountingHistogram;
  private readonly duration: CountingHistogram;
  private readonly timeToFirstToken: CountingHistogram;
  private readonly timePerOutputToken: CountingHistogram;
  private readonly interTokenLatency: CountingHistogram;
  private readonly tokenCells = new CounterCells(['model', 'pool', 'type']);
  private readonly withoutUsageCells = new CounterCells(['model', 'pool', 'answer']);
  /** operation → model → pool → its series. */
  private readonly byOperation = new Map<string, Map<string, Map<string, ModelSeries>>>();

  constructor(registry: Registry) {
    const registers = [registry];
    this.tokenUsage = new CountingHistogram(
      {
        name: 'gen_ai_client_token_usage',
        help: 'Tokens per request by type (input, output), as the model server reported them (GenAI semantic conventions).',
        buckets: TOKEN_BUCKETS,
        registers,
      },
      [...MODEL_LABELS, 'gen_ai_token_type'],
    );
    this.duration = new CountingHistogram(
      {
        name: 'gen_ai_client_operation_duration_seconds',
        help: 'Request duration, from its first ext_proc message to the end of the answer, for answered requests (GenAI semantic conventions).',
        buckets: DURATION_BUCKETS,
        registers,
      },
      MODEL_LABELS,
    );
    this.timeToFirstToken = new CountingHistogram(
      {
        name: 'gen_ai_server_time_to_first_token_seconds',
        help: 'Streams: time from the pick to the first content event reaching llm-extproc (GenAI semantic conventions).',
        buckets: TTFT_BUCKETS,
        registers,
      },
      ENDPOINT_LABELS,
    );
    this.timePerOutputToken = new CountingHistogram(
      {
        name: 'gen_ai_server_time_per_output_token_seconds',
        help: 'Streams with usage: generation time after the first token, per output token after the first (GenAI semantic conventions).',
        buckets: PER_TOKEN_BUCKETS,
        registers,
      },
      ENDPOINT_LABELS,
    );
    this.interTokenLatency = new CountingHistogram(
      {
        name: 'llm_extproc_inter_token_latency_seconds',
        help: 'Streams: mean gap between content events after the first, per request (no usage needed).',
        buckets: PER_TOKEN_BUCKETS,
        registers,
      },
      ENDPOINT_LABELS,
    );
    const tokens: Counter<string> = new Counter({
      name: 'llm_extproc_tokens_total',
      help: 'Tokens the model servers reported, by type: input, output, and cached (input tokens served from the prefix cache).',
      labelNames: ['model', 'pool', 'type'],
      registers,
      collect: () => this.tokenCells.flushTo(tokens),
    });
    const withoutUsage: Counter<string> = new Counter({
      name: 'llm_extproc_answers_without_usage_total',
      help: 'Answered requests whose answer reported no token usage (streams without stream_options.include_usage), by answer kind.',
      labelNames: ['model', 'pool', 'answer'],
      registers,
      collect: () => this.withoutUsageCells.flushTo(withoutUsage),
    });
  }

  record(f: LlmFigures): void {
    const m = this.seriesOf(f.operation, f.model, f.pool);
    (m.duration ??= this.duration.child(m.operation, m.model, m.pool)).observe(f.duration);
    const usage = f.usage;
    if (usage === undefined) {
      if (f.answer === 'stream') (m.streamWithoutUsage ??= this.withoutUsageCells.cell(m.model, m.pool, 'stream')).add(1);
      else (m.jsonWithoutUsage ??= this.withoutUsageCells.cell(m.model, m.pool, 'json')).add(1);
    } else {
      (m.inputTokenUsage ??= this.tokenUsage.child(m.operation, m.model, m.pool, 'input')).observe(usage.input);
      (m.outputTokenUsage ??= this.tokenUsage.child(m.operation, m.model, m.pool, 'output')).observe(usage.output);
      (m.inputTokens ??= this.tokenCells.cell(m.model, m.pool, 'input')).add(usage.input);
      (m.outputTokens ??= this.tokenCells.cell(m.model, m.pool, 'output')).add(usage.output);
      if (usage.cached !== undefined) (m.cachedTokens ??= this.tokenCells.cell(m.model, m.pool, 'cached')).add(usage.cached);
    }
    if (f.timeToFirstToken === undefined && f.interTokenLatency === undefined && f.timePerOutputToken === undefined) return;
    let e = m.endpoints.get(f.endpoint);
    if (e === undefined) m.endpoints.set(f.endpoint, (e = {}));
    const at = [m.operation, m.model, m.pool, f.endpoint] as const;
    if (f.timeToFirstToken !== undefined) (e.timeToFirstToken ??= this.timeToFirstToken.child(...at)).observe(f.timeToFirstToken);
    if (f.interTokenLatency !== undefined) (e.interTokenLatency ??= this.interTokenLatency.child(...at)).observe(f.interTokenLatency);
    if (f.timePerOutputToken !== undefined) (e.timePerOutputToken ??= this.timePerOutputToken.child(...at)).observe(f.timePerOutputToken);
  }

  /** Drops the series of endpoints that are not in `present` (pod IPs churn with every rollout). */
  keepEndpoints(present: (address: string) => boolean): void {
    for (const byModel of this.byOperation.values()) {
      for (const byPool of byModel.values()) {
        for (const m of byPool.values()) {
          for (const address of m.endpoints.keys()) {
            if (present(address)) continue;
            this.timeToFirstToken.drop(m.operation, m.model, m.pool, address);
            this.interTokenLatency.drop(m.operation, m.model, m.pool, address);
            this.timePerOutputToken.drop(m.operation, m.model, m.pool, address);
            m.endpoints.delete(address);
          }
        }
      }
    }
  }

  private seriesOf(operation: string, model: string, pool: string): ModelSeries {
    let byModel = this.byOperation.get(operation);
    if (byModel === undefined) this.byOperation.set(operation, (byModel = new Map<string, Map<string, ModelSeries>>()));
    let byPool = byModel.get(model);
    if (byPool === undefined) byModel.set(model, (byPool = new Map<string, ModelSeries>()));
    let series = byPool.get(pool);
    if (series === undefined) byPool.set(pool, (series = { operation, model, pool, endpoints: new Map() }));
    return series;
  }
}
