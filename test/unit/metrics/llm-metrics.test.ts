// The per-request LLM figures are recorded through kept series (CountingHistogram, CounterCells)
// instead of prom-client's labelled calls: a scrape must show exactly what those labelled calls
// would have shown, for any requests and any endpoints leaving in between.

import assert from 'node:assert/strict';
import { it } from 'node:test';
import fc from 'fast-check';
import { AggregatorRegistry, Counter, Histogram, Registry } from 'prom-client';
import {
  DURATION_BUCKETS,
  ENDPOINT_LABELS,
  LlmMetrics,
  MODEL_LABELS,
  PER_TOKEN_BUCKETS,
  TOKEN_BUCKETS,
  TTFT_BUCKETS,
} from '../../../src/metrics/llm-metrics.js';
import type { LlmFigures } from '../../../src/metrics/llm-metrics.js';

/** The same series written the plain prom-client way: labelled observe()/inc()/remove(). */
class Reference {
  private readonly endpointLabels = new Map<string, Record<string, string>[]>();
  private readonly h: Record<'usage' | 'duration' | 'ttft' | 'tpot' | 'itl', Histogram>;
  private readonly tokens: Counter;
  private readonly withoutUsage: Counter;

  constructor(registry: Registry) {
    const registers = [registry];
    const histogram = (name: string, help: string, labelNames: string[], buckets: number[]) =>
      new Histogram({ name, help, labelNames, buckets, registers });
    this.h = {
      usage: histogram(
        'gen_ai_client_token_usage',
        'Tokens per request by type (input, output), as the model server reported them (GenAI semantic conventions).',
        [...MODEL_LABELS, 'gen_ai_token_type'],
        TOKEN_BUCKETS,
      ),
      duration: histogram(
        'gen_ai_client_operation_duration_seconds',
        'Request duration, from its first ext_proc message to the end of the answer, for answered requests (GenAI semantic conventions).',
        MODEL_LABELS,
        DURATION_BUCKETS,
      ),
      ttft: histogram(
        'gen_ai_server_time_to_first_token_seconds',
        'Streams: time from the pick to the first content event reaching llm-extproc (GenAI semantic conventions).',
        ENDPOINT_LABELS,
        TTFT_BUCKETS,
      ),
      tpot: histogram(
        'gen_ai_server_time_per_output_token_seconds',
        'Streams with usage: generation time after the first token, per output token after the first (GenAI semantic conventions).',
        ENDPOINT_LABELS,
        PER_TOKEN_BUCKETS,
      ),
      itl: histogram(
        'llm_extproc_inter_token_latency_seconds',
        'Streams: mean gap between content events after the first, per request (no usage needed).',
        ENDPOINT_LABELS,
        PER_TOKEN_BUCKETS,
      ),
    };
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
    this.h.duration.observe(model, f.duration);
    if (f.usage === undefined) this.withoutUsage.inc({ model: f.model, pool: f.pool, answer: f.answer });
    else {
      this.h.usage.observe({ ...model, gen_ai_token_type: 'input' }, f.usage.input);
      this.h.usage.observe({ ...model, gen_ai_token_type: 'output' }, f.usage.output);
      this.tokens.inc({ model: f.model, pool: f.pool, type: 'input' }, f.usage.input);
      this.tokens.inc({ model: f.model, pool: f.pool, type: 'output' }, f.usage.output);
      if (f.usage.cached !== undefined) this.tokens.inc({ model: f.model, pool: f.pool, type: 'cached' }, f.usage.cached);
    }
    const labels = { ...model, endpoint: f.endpoint };
    if (f.timeToFirstToken !== undefined || f.interTokenLatency !== undefined || f.timePerOutputToken !== undefined) {
      this.endpointLabels.set(f.endpoint, [...(this.endpointLabels.get(f.endpoint) ?? []), labels]);
    }
    if (f.timeToFirstToken !== undefined) this.h.ttft.observe(labels, f.timeToFirstToken);
    if (f.interTokenLatency !== undefined) this.h.itl.observe(labels, f.interTokenLatency);
    if (f.timePerOutputToken !== undefined) this.h.tpot.observe(labels, f.timePerOutputToken);
  }

  keepEndpoints(present: (address: string) => boolean): void {
    for (const [address, all] of this.endpointLabels) {
      if (present(address)) continue;
      for (const labels of all) for (const h of [this.h.ttft, this.h.itl, this.h.tpot]) h.remove(labels);
      this.endpointLabels.delete(address);
    }
  }
}

const seconds = fc.oneof(fc.constantFrom(0, 0.01, 0.1, 1, 2.5), fc.double({ min: 0, max: 100, noNaN: true }));
const optionalSeconds = fc.option(seconds, { nil: undefined });
const tokens = fc.oneof(fc.constantFrom(0, 1, 4, 1024), fc.integer({ min: 0, max: 100_000 }));
const figures: fc.Arbitrary<LlmFigures> = fc.record({
  model: fc.constantFrom('llama', 'qwen'),
  pool: fc.constantFrom('p', 'q'),
  endpoint: fc.constantFrom('10.0.0.1:8000', '10.0.0.2:8000', '10.0.0.3:8000'),
  operation: fc.constantFrom('chat', 'text_completion', 'embeddings'),
  answer: fc.constantFrom('stream' as const, 'json' as const),
  usage: fc.option(fc.record({ input: tokens, output: tokens, cached: fc.option(tokens, { nil: undefined }) }), { nil: undefined }),
  duration: seconds,
  timeToFirstToken: optionalSeconds,
  interTokenLatency: optionalSeconds,
  timePerOutputToken: optionalSeconds,
});
/** A request's figures, an endpoint view that keeps only some addresses, or a scrape. */
const step = fc.oneof(
  { weight: 6, arbitrary: figures.map((f) => ({ kind: 'record' as const, f })) },
  {
    weight: 1,
    arbitrary: fc.subarray(['10.0.0.1:8000', '10.0.0.2:8000', '10.0.0.3:8000']).map((kept) => ({ kind: 'view' as const, kept })),
  },
  { weight: 1, arbitrary: fc.constant({ kind: 'scrape' as const }) },
);

it('property: the kept series expose exactly what labelled prom-client calls expose, endpoint removal included', async () => {
  await fc.assert(
    fc.asyncProperty(fc.array(step, { maxLength: 40 }), async (steps) => {
      const ours = new Registry();
      const theirs = new Registry();
      const metrics = new LlmMetrics(ours);
      const reference = new Reference(theirs);
      for (const s of steps) {
        if (s.kind === 'record') {
          metrics.record(s.f);
          reference.record(s.f);
        } else if (s.kind === 'view') {
          metrics.keepEndpoints((address) => s.kept.includes(address));
          reference.keepEndpoints((address) => s.kept.includes(address));
        } else assert.equal(await ours.metrics(), await theirs.metrics());
      }
      assert.equal(await ours.metrics(), await theirs.metrics());
      // What the cluster aggregator sums from every worker (two workers here).
      const sumOfTwo = async (registry: Registry) =>
        await AggregatorRegistry.aggregate([await registry.getMetricsAsJSON(), await registry.getMetricsAsJSON()]).metrics();
      assert.equal(await sumOfTwo(ours), await sumOfTwo(theirs));
    }),
    { numRuns: 200 },
  );
});
