// The Gateway API Inference Extension's metric names, so that its Grafana dashboard, alerts and
// HPA examples work against llm-extproc unchanged: the `inference_objective_*` request series and
// the `inference_pool_*` pool series of its endpoint picker (EPP), with the labels and units of
// its metrics documentation (site-src/guides/metrics-and-observability.md; the list is
// transcribed in test/unit/metrics/gie-metrics.test.ts). They repeat figures our own series already have
// (llm_extproc_requests_total, gen_ai_*), under the other project's names.
//
// Labels: `model_name` is the model the client asked for; `target_model_name` is the model the
// request was sent as: a model rewrite's target (picker/model-rewrite.ts), else the same name. Pool series are
// labelled `name` (the pool's name as our other series show it) and, per pod, `model_server_pod`
// (the pod's name; the address for static endpoints). Recording a request is a few kept-cell
// writes, like the other per-request series (counter-cells.ts, counting-histogram.ts).

import { Counter, Gauge } from 'prom-client';
import type { Registry } from 'prom-client';
import type { EndpointView } from '../endpoints/model.js';
import type { SignalBoard } from '../picker/signals.js';
import { CounterCells } from './counter-cells.js';
import type { CounterCell } from './counter-cells.js';
import { CountingHistogram } from './counting-histogram.js';
import type { CountingChild } from './counting-histogram.js';

/** One replica's load as its model server last reported it (fresh reports only). */
export interface PodLoad {
  readonly pod: string;
  readonly waiting: number;
  /** Requests in the model server's running batch. */
  readonly running: number;
  /** 0..1; undefined when the server does not report it. */
  readonly kvCacheUsage: number | undefined;
}

/** What the pool series show of one pool, read when /metrics is scraped. */
export interface PoolLoads {
  readonly name: string;
  readonly readyPods: number;
  /** Ready replicas with a fresh load report. */
  readonly pods: readonly PodLoad[];
}

/** Each pool's ready replicas and the fresh load reports among them: what the pool series show (app.ts reads it per scrape). */
export function poolLoads(view: EndpointView, board: SignalBoard): PoolLoads[] {
  const out: PoolLoads[] = [];
  for (const pool of view.pools.values()) {
    let readyPods = 0;
    const pods: PodLoad[] = [];
    for (const endpoint of pool.endpoints) {
      if (endpoint.state !== 'Ready') continue;
      readyPods++;
      const load = endpoint.address === '' ? undefined : board.peek(endpoint.address)?.usableLoad();
      // `namespace/pod` for Kubernetes: the pod's name, as the Inference Extension labels it.
      if (load !== undefined)
        pods.push({
          pod: endpoint.id.slice(endpoint.id.indexOf('/') + 1),
          waiting: load.waiting,
          running: load.running,
          kvCacheUsage: load.kvCacheUsage,
        });
    }
    out.push({ name: pool.name, readyPods, pods });
  }
  return out;
}

// The EPP's bucket boundaries (pkg/epp/metrics/metrics.go), so its dashboards' quantiles read alike.
const GIE_DURATION_BUCKETS = [
  0.005, 0.025, 0.05, 0.1, 0.2, 0.4, 0.6, 0.8, 1, 1.25, 1.5, 2, 3, 4, 5, 6, 8, 10, 15, 20, 30, 45, 60, 120, 180, 240, 300, 360, 480, 600,
  900, 1200, 1800, 2700, 3600,
];
export const GIE_INPUT_TOKEN_BUCKETS = [
  1, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384, 32778, 65536, 131072, 262144, 524288, 1048576,
];
const GIE_OUTPUT_TOKEN_BUCKETS = [1, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192];

const OBJECTIVE_LABELS = ['model_name', 'target_model_name'];

/** The kept series of one model. */
interface ModelSeries {
  readonly model: string;
  /** Requests routed to the model and not finished; shown once the model was routed to. */
  running: number;
  routedOnce: boolean;
  readonly requests: CounterCell;
  errors?: CounterCell;
  duration?: CountingChild;
  inputTokens?: CountingChild;
  outputTokens?: CountingChild;
}

export class GieMetrics {
  private readonly requestCells = new CounterCells(OBJECTIVE_LABELS);
  private readonly errorCells = new CounterCells(OBJECTIVE_LABELS);
  private readonly duration: CountingHistogram;
  private readonly inputTokens: CountingHistogram;
  private readonly outputTokens: CountingHistogram;
  /** By `model`, and by `model\u0000target` for rewritten requests. */
  private readonly byModel = new Map<string, ModelSeries>();
  private pools: () => Iterable<PoolLoads> = () => [];

  constructor(registry: Registry) {
    const registers = [registry];
    const requests: Counter<string> = new Counter({
      name: 'inference_objective_request_total',
      help: 'Requests by model and target model (Gateway API Inference Extension name).',
      labelNames: OBJECTIVE_LABELS,
      registers,
      collect: () => this.requestCells.flushTo(requests),
    });
    const errors: Counter<string> = new Counter({
      name: 'inference_objective_request_error_total',
      help: 'Requests that ended in an error, by model and target model (Gateway API Inference Extension name).',
      labelNames: OBJECTIVE_LABELS,
      registers,
      collect: () => this.errorCells.flushTo(errors),
    });
    this.duration = new CountingHistogram(
      {
        name: 'inference_objective_request_duration_seconds',
        help: 'Duration of answered requests, from their first ext_proc message to the end of the answer (Gateway API Inference Extension name).',
        buckets: GIE_DURATION_BUCKETS,
        registers,
      },
      OBJECTIVE_LABELS,
    );
    this.inputTokens = new CountingHistogram(
      {
        name: 'inference_objective_input_tokens',
        help: 'Input tokens per answered request that reported usage (Gateway API Inference Extension name).',
        buckets: GIE_INPUT_TOKEN_BUCKETS,
        registers,
      },
      OBJECTIVE_LABELS,
    );
    this.outputTokens = new CountingHistogram(
      {
        name: 'inference_objective_output_tokens',
        help: 'Output tokens per answered request that reported usage (Gateway API Inference Extension name).',
        buckets: GIE_OUTPUT_TOKEN_BUCKETS,
        registers,
      },
      OBJECTIVE_LABELS,
    );
    const running: Gauge<string> = new Gauge({
      name: 'inference_objective_running_requests',
      help: 'Requests routed to a model and not finished yet (Gateway API Inference Extension name).',
      labelNames: ['model_name'],
      registers,
      aggregator: 'sum',
      collect: () => {
        for (const m of this.byModel.values()) if (m.routedOnce) running.set({ model_name: m.model }, m.running);
      },
    });
    // Every worker of a cluster holds the same view of the pools: report one copy, not the sum.
    const readyPods: Gauge<string> = new Gauge({
      name: 'inference_pool_ready_pods',
      help: 'Ready replicas of a pool (Gateway API Inference Extension name).',
      labelNames: ['name'],
      registers,
      aggregator: 'max',
      collect: () => collect(),
    });
    const kvCache: Gauge<string> = new Gauge({
      name: 'inference_pool_average_kv_cache_utilization',
      help: "Mean KV-cache utilisation (0..1) of a pool's ready replicas that report it (Gateway API Inference Extension name).",
      labelNames: ['name'],
      registers,
      aggregator: 'average',
      collect: () => collect(),
    });
    const queue: Gauge<string> = new Gauge({
      name: 'inference_pool_average_queue_size',
      help: "Mean number of requests waiting in the model-server queues of a pool's ready replicas (Gateway API Inference Extension name).",
      labelNames: ['name'],
      registers,
      aggregator: 'average',
      collect: () => collect(),
    });
    const podQueue: Gauge<string> = new Gauge({
      name: 'inference_pool_per_pod_queue_size',
      help: "Requests waiting in each ready replica's model-server queue (Gateway API Inference Extension name).",
      labelNames: ['model_server_pod', 'name'],
      registers,
      aggregator: 'average',
      collect: () => collect(),
    });
    // Each pool gauge recomputes all four when read: whichever is read first (its own scrape, or
    // an llm-d twin reading it: llm-d-metrics.ts) shows the pools as they are now.
    const collect = (): void => this.collectPools(readyPods, kvCache, queue, podQueue);
  }

  /** Where the pool series come from (app.ts: the endpoint view and the scraped load reports). */
  reportPoolsFrom(pools: () => Iterable<PoolLoads>): void {
    this.pools = pools;
  }

  requestFinished(model: string, target: string, ok: boolean): void {
    const m = this.seriesOf(model, target);
    m.requests.add(1);
    if (!ok) (m.errors ??= this.errorCells.cell(model, target)).add(1);
  }

  /** An answered request: its duration in seconds, and the tokens it reported (GIE records only counts above zero). */
  answered(model: string, target: string, seconds: number, input: number | undefined, output: number | undefined): void {
    const m = this.seriesOf(model, target);
    (m.duration ??= this.duration.child(model, target)).observe(seconds);
    if (input !== undefined && input > 0) (m.inputTokens ??= this.inputTokens.child(model, target)).observe(input);
    if (output !== undefined && output > 0) (m.outputTokens ??= this.outputTokens.child(model, target)).observe(output);
  }

  /** The running gauge is per model the request was routed as (`model_name` only, as the Inference Extension has it). */
  routed(model: string): void {
    const m = this.seriesOf(model, model);
    m.running++;
    m.routedOnce = true;
  }

  released(model: string): void {
    this.seriesOf(model, model).running--;
  }

  private seriesOf(model: string, target: string): ModelSeries {
    const key = target === model ? model : `${model}\u0000${target}`;
    let m = this.byModel.get(key);
    if (m === undefined) {
      m = { model, running: 0, routedOnce: false, requests: this.requestCells.cell(model, target) };
      this.byModel.set(key, m);
    }
    return m;
  }

  private collectPools(readyPods: Gauge<string>, kvCache: Gauge<string>, queue: Gauge<string>, podQueue: Gauge<string>): void {
    // From scratch on every scrape: pools and pods that left the view leave the series with them.
    readyPods.reset();
    kvCache.reset();
    queue.reset();
    podQueue.reset();
    for (const pool of this.pools()) {
      const name = pool.name;
      readyPods.set({ name }, pool.readyPods);
      if (pool.pods.length === 0) continue; // no report to average: no series, rather than a made-up zero
      let waiting = 0;
      let kvSum = 0;
      let kvReported = 0;
      for (const pod of pool.pods) {
        waiting += pod.waiting;
        podQueue.set({ model_server_pod: pod.pod, name }, pod.waiting);
        if (pod.kvCacheUsage === undefined) continue;
        kvSum += pod.kvCacheUsage;
        kvReported++;
      }
      queue.set({ name }, waiting / pool.pods.length);
      if (kvReported > 0) kvCache.set({ name }, kvSum / kvReported);
    }
  }
}
