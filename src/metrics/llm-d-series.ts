// llm-d's request and pool series that have no Inference Extension twin to rename
// (llm-d-metrics.ts renames the ones that do): names, types, labels and buckets from llm-d-router's
// pkg/epp/metrics (docs/metrics.md at ebab687). Each is fed by the same call that records the
// request's other series (metrics.ts), from figures already measured for it (llm-metrics.ts's
// LlmFigures): no second clock and no second parse. So each counts only answers a model server gave
// in full (result ok): a failed, cut-short or cancelled answer adds nothing to any of them, where
// llm-d observes its response size at end of stream and its chunk gaps as they come. The request
// labels are `model_name` (the model asked for) and `target_model_name` (the model it was sent as);
// llm-d's `fairness_id` and `priority` are not carried (docs/gateways.md says so).

import { Gauge } from 'prom-client';
import type { Registry } from 'prom-client';
import { CountingHistogram, HeldObservations, sortedBounds } from './counting-histogram.js';
import type { CountingChild } from './counting-histogram.js';
import { GIE_INPUT_TOKEN_BUCKETS } from './gie-metrics.js';
import type { PoolLoads } from './gie-metrics.js';
import type { LlmFigures } from './llm-metrics.js';

const NTPOT_BUCKETS = [0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1, 2, 5, 10];
const TTFT_BUCKETS = [0.005, 0.025, 0.05, 0.1, 0.2, 0.4, 0.6, 0.8, 1, 1.25, 1.5, 2, 3, 4, 5, 6, 8, 10, 15, 20, 30, 45, 60, 120];
const STREAMING_TPOT_BUCKETS = [0.0005, 0.00205, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.125, 0.15, 0.2, 0.3, 0.4, 0.5, 0.6, 0.8, 1, 2];

const STREAMING_ITL_BUCKETS = [0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.15, 0.2, 0.3, 0.5, 0.75, 1, 2];
const STREAMING_ITL_BOUNDS = sortedBounds(STREAMING_ITL_BUCKETS);

/** 64 bytes to 1 GiB, doubling. */
const REQUEST_SIZE_BUCKETS = Array.from({ length: 25 }, (_, i) => 64 * 2 ** i);
/** llm-d's, 32778 (not 32768) included: the same boundaries make the same series. */
const RESPONSE_SIZE_BUCKETS = [1, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384, 32778, 65536];

/**
 * Where one streamed answer's gaps between body chunks are held (llm_d_epp_request_streaming_itl_seconds'
 * bounds) until the answer is known to be whole: one per stream, none per chunk.
 */
export function chunkGapTally(): HeldObservations {
  return new HeldObservations(STREAMING_ITL_BOUNDS);
}

const MODEL_LABELS = ['model_name', 'target_model_name'];

/** The kept llm-d series of one (model asked for, model sent as). */
interface ModelSeries {
  readonly model: string;
  readonly target: string;
  running: number;
  requestSize?: CountingChild;
  responseSize?: CountingChild;
  cachedTokens?: CountingChild;
  ntpot?: CountingChild;
  ttftStreaming?: CountingChild;
  ttftJson?: CountingChild;
  streamingTpot?: CountingChild;
  streamingItl?: CountingChild;
}

/** Mean and sample standard deviation (n − 1, at least 1: llm-d's formula) of some numbers. */
function spread(values: readonly number[]): { readonly mean: number; readonly stdDev: number } {
  let sum = 0;
  for (const v of values) sum += v;
  const mean = sum / values.length;
  let squares = 0;
  for (const v of values) squares += (v - mean) * (v - mean);
  return { mean, stdDev: Math.sqrt(squares / Math.max(1, values.length - 1)) };
}

export class LlmdSeries {
  private readonly byModel = new Map<string, ModelSeries>();
  private readonly requestSize: CountingHistogram;
  private readonly cachedTokens: CountingHistogram;
  private readonly ntpot: CountingHistogram;
  private readonly ttft: CountingHistogram;
  private readonly streamingTpot: CountingHistogram;
  private readonly responseSize: CountingHistogram;
  private readonly streamingItl: CountingHistogram;
  private pools: () => Iterable<PoolLoads> = () => [];

  constructor(registry: Registry) {
    const registers = [registry];
    this.requestSize = new CountingHistogram(
      {
        name: 'llm_d_epp_request_size_bytes',
        help: 'Request body size as the client sent it, per routed request, counted when it is routed (llm-d name).',
        buckets: REQUEST_SIZE_BUCKETS,
        registers,
      },
      MODEL_LABELS,
    );
    this.cachedTokens = new CountingHistogram(
      {
        name: 'llm_d_epp_request_cached_tokens',
        help: 'Prompt tokens the model server reported as read from its prefix cache, per answered request that reported them (llm-d name).',
        buckets: GIE_INPUT_TOKEN_BUCKETS,
        registers,
      },
      MODEL_LABELS,
    );
    this.ntpot = new CountingHistogram(
      {
        name: 'llm_d_epp_request_ntpot_seconds',
        help: 'Request duration divided by its output tokens, per answered request that reported usage (llm-d name).',
        buckets: NTPOT_BUCKETS,
        registers,
      },
      MODEL_LABELS,
    );
    this.ttft = new CountingHistogram(
      {
        name: 'llm_d_epp_request_ttft_seconds',
        help: "Time to first token from the request's first ext_proc message: to the first content event of a stream (streaming=true), the whole duration of a JSON answer (streaming=false) (llm-d name).",
        buckets: TTFT_BUCKETS,
        registers,
      },
      [...MODEL_LABELS, 'streaming'],
    );
    this.streamingTpot = new CountingHistogram(
      {
        name: 'llm_d_epp_request_streaming_tpot_seconds',
        help: 'Streams with usage: generation time after the first token, per output token after the first (llm-d name).',
        buckets: STREAMING_TPOT_BUCKETS,
        registers,
      },
      MODEL_LABELS,
    );
    this.responseSize = new CountingHistogram(
      {
        name: 'llm_d_epp_response_size_bytes',
        help: 'Response body size as the model server sent it (every body chunk Envoy gave us), per answered request (llm-d name).',
        buckets: RESPONSE_SIZE_BUCKETS,
        registers,
      },
      MODEL_LABELS,
    );
    this.streamingItl = new CountingHistogram(
      {
        name: 'llm_d_epp_request_streaming_itl_seconds',
        help: 'Streams: each gap between consecutive non-empty response body chunks, of answered requests (llm-d name).',
        buckets: STREAMING_ITL_BUCKETS,
        registers,
      },
      MODEL_LABELS,
    );
    const running: Gauge<string> = new Gauge({
      name: 'llm_d_epp_request_running',
      help: 'Requests routed and not finished yet, by the model asked for and the model sent as (llm-d name).',
      labelNames: MODEL_LABELS,
      registers,
      aggregator: 'sum',
      collect: () => {
        for (const m of this.byModel.values()) running.set({ model_name: m.model, target_model_name: m.target }, m.running);
      },
    });
    this.registerPoolSpread(registers);
  }

  /** Where the pool series come from: the same source as the Inference Extension's (gie-metrics.ts). */
  reportPoolsFrom(pools: () => Iterable<PoolLoads>): void {
    this.pools = pools;
  }

  /** Counted when routed, as llm-d counts its request sizes (after scheduling). */
  routed(model: string, target: string, bytes: number | undefined): void {
    const m = this.seriesOf(model, target);
    m.running++;
    if (bytes !== undefined) (m.requestSize ??= this.requestSize.child(model, target)).observe(bytes);
  }

  released(model: string, target: string): void {
    this.seriesOf(model, target).running--;
  }

  /** An answered request's figures, as measured once for all its series. */
  answered(model: string, target: string, f: LlmFigures): void {
    const m = this.seriesOf(model, target);
    const usage = f.usage;
    if (usage?.cached !== undefined) (m.cachedTokens ??= this.cachedTokens.child(model, target)).observe(usage.cached);
    if (usage !== undefined && usage.output > 0) (m.ntpot ??= this.ntpot.child(model, target)).observe(f.duration / usage.output);
    if (f.answer === 'json') (m.ttftJson ??= this.ttft.child(model, target, 'false')).observe(f.duration);
    else if (f.timeToFirstTokenFromStart !== undefined)
      (m.ttftStreaming ??= this.ttft.child(model, target, 'true')).observe(f.timeToFirstTokenFromStart);
    if (f.timePerOutputToken !== undefined) (m.streamingTpot ??= this.streamingTpot.child(model, target)).observe(f.timePerOutputToken);
    if (f.responseBytes !== undefined) (m.responseSize ??= this.responseSize.child(model, target)).observe(f.responseBytes);
    if (f.chunkGaps !== undefined && f.chunkGaps.count > 0) (m.streamingItl ??= this.streamingItl.child(model, target)).add(f.chunkGaps);
  }

  private seriesOf(model: string, target: string): ModelSeries {
    // Per request: no string built for the usual case, a request sent as the model it named.
    const key = target === model ? model : `${model}\u0000${target}`;
    let m = this.byModel.get(key);
    if (m === undefined) this.byModel.set(key, (m = { model, target, running: 0 }));
    return m;
  }

  /**
   * llm-d's pool spread: mean running requests and the standard deviation of KV-cache use, queue
   * and running requests over a pool's ready replicas with a fresh report (the means of the other
   * two are the renamed Inference Extension series). Read from the pools when scraped.
   */
  private registerPoolSpread(registers: Registry[]): void {
    const gauge = (name: string, help: string): Gauge<string> =>
      // Every worker of a cluster holds the same view of the pools: their average is that one copy.
      new Gauge({ name, help: `${help} (llm-d name).`, labelNames: ['name'], registers, aggregator: 'average', collect: () => collect() });
    const avgRunning = gauge('llm_d_epp_average_running_requests', "Mean requests in the running batch of a pool's ready replicas");
    const sdKv = gauge(
      'llm_d_epp_std_dev_kv_cache_utilization',
      "Standard deviation of KV-cache utilisation (0..1) over a pool's ready replicas that report it",
    );
    const sdQueue = gauge(
      'llm_d_epp_std_dev_queue_size',
      "Standard deviation of the model-server queue length over a pool's ready replicas",
    );
    const sdRunning = gauge('llm_d_epp_std_dev_running_requests', "Standard deviation of running requests over a pool's ready replicas");
    // Whichever of the four is read first recomputes all four, as the Inference Extension's pool series do.
    const collect = (): void => {
      for (const g of [avgRunning, sdKv, sdQueue, sdRunning]) g.reset();
      for (const pool of this.pools()) {
        if (pool.pods.length === 0) continue; // no report: no series, rather than a made-up zero
        const name = { name: pool.name };
        const running = spread(pool.pods.map((p) => p.running));
        avgRunning.set(name, running.mean);
        sdRunning.set(name, running.stdDev);
        sdQueue.set(name, spread(pool.pods.map((p) => p.waiting)).stdDev);
        const kv = pool.pods.flatMap((p) => (p.kvCacheUsage === undefined ? [] : [p.kvCacheUsage]));
        if (kv.length > 0) sdKv.set(name, spread(kv).stdDev);
      }
    };
  }
}
