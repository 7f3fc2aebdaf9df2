// Typed recorders over one prom-client Registry (never the global default registry, so tests can
// run several servers in one process). Metric names follow Prometheus conventions: a
// `llm_extproc_` prefix, base units (seconds, bytes), `_total` for counters.

import { Counter, Gauge, Histogram, Registry, collectDefaultMetrics } from 'prom-client';
import { ENDPOINT_STATES } from '../endpoints/model.js';
import type { EndpointView, PoolView } from '../endpoints/model.js';
import type { BreakVerdict } from '../endpoints/replica-probe.js';
import { CANCELLATION_KINDS, isCancellation } from '../errors/catalog.js';
import type { CancellationKind, ErrorKind } from '../errors/catalog.js';
import { CounterCells } from './counter-cells.js';
import { CountingHistogram } from './counting-histogram.js';
import { EventLoopDelayMetric } from './event-loop-delay.js';
import { GieMetrics } from './gie-metrics.js';
import type { PoolLoads } from './gie-metrics.js';
import { ModelRewriteDecisions, registerLlmdTwins } from './llm-d-metrics.js';
import { LlmdSeries } from './llm-d-series.js';
import { LlmMetrics } from './llm-metrics.js';
import { TraceMetrics } from './trace-metrics.js';
import type { LlmFigures } from './llm-metrics.js';

export type AttemptOutcome = 'success' | 'failure';

/**
 * The results the chart's rules select by name (charts/llm-extproc/templates/prometheusrule.yaml):
 * their llm_extproc_requests_total series exist at 0 for every served model, because Prometheus's
 * increase() and rate() see nothing of a series' first sample, so the first broken stream of a
 * model would trip no alert if its series were created by it. Only these: models × 9 series, not
 * models × every code (the error-ratio alert's catch-all needs 10 minutes of errors anyway).
 */
export const ALERTED_RESULTS: readonly string[] = [
  'no_ready_replica',
  'stream_broken',
  'stream_incomplete',
  'truncated_response',
  'upstream_error_event',
  ...CANCELLATION_KINDS,
] satisfies ReadonlyArray<ErrorKind | CancellationKind>;

export class Metrics {
  readonly registry = new Registry();

  // Counted on every request: the counts gather in cells and reach the counters when collected.
  private readonly requestCells = new CounterCells(['model', 'result']);
  private readonly attemptCells = new CounterCells(['endpoint', 'pool', 'outcome', 'reason']);
  private readonly streamCells = new CounterCells(['code']);
  /** One entry per mid-stream break on a replica with peers: counted as the per-request counters are. */
  private readonly forwardCells = new CounterCells(['outcome']);
  /** Models whose ALERTED_RESULTS series exist. */
  private readonly modelsSeen = new Set<string>();
  private openStreams = 0;

  private readonly requests: Counter<'model' | 'result'> = new Counter({
    name: 'llm_extproc_requests_total',
    help: 'Requests seen, by model and result (ok, the error code the client received, or a cancellation such as cancelled_mid_stream: docs/errors.md).',
    labelNames: ['model', 'result'] as const,
    registers: [this.registry],
    collect: () => this.requestCells.flushTo(this.requests),
  });

  private readonly attempts: Counter<'pool' | 'endpoint' | 'outcome' | 'reason'> = new Counter({
    name: 'llm_extproc_upstream_attempts_total',
    help: 'Attempts against model-server endpoints, by outcome and failure reason.',
    labelNames: ['pool', 'endpoint', 'outcome', 'reason'] as const,
    registers: [this.registry],
    collect: () => this.attemptCells.flushTo(this.attempts),
  });

  private readonly quarantines = new Counter({
    name: 'llm_extproc_endpoint_quarantines_total',
    help: 'Times an endpoint was quarantined by passive health.',
    labelNames: ['pool', 'endpoint'] as const,
    registers: [this.registry],
  });

  private readonly demotions = new Counter({
    name: 'llm_extproc_slow_replica_demotions_total',
    help: 'Times a Ready endpoint was demoted by the latency signal as much slower than its pool (reason slow_replica: its recent TTFT or TPOT at picker.latency.outlierFactor × the pool median or more).',
    labelNames: ['pool', 'endpoint'] as const,
    registers: [this.registry],
  });

  private readonly slowReplicas = new Gauge({
    name: 'llm_extproc_slow_replicas',
    help: 'Endpoints currently demoted as much slower than their pool (they take requests only as fallbacks, when no other replica has room in its batch, and an occasional probe).',
    labelNames: ['pool'] as const,
    registers: [this.registry],
    collect: () => {
      this.slowReplicas.reset();
      for (const [pool, count] of this.demotedByPool()) this.slowReplicas.set({ pool }, count);
    },
  });

  private demotedByPool: () => Iterable<[string, number]> = () => [];

  private readonly failedConnectChecks = new Counter({
    name: 'llm_extproc_failed_connect_checks_total',
    help: 'Attempts that could not connect or were reset before a response, by the verdict of the replica check that followed (replica_dead = quarantined at once, replica_alive = the replica answered the check and stays Ready, not_checked = it was no longer Ready).',
    labelNames: ['verdict'] as const,
    registers: [this.registry],
  });

  private readonly midStreamBreaks = new Counter({
    name: 'llm_extproc_midstream_breaks_total',
    help: 'Response streams that broke half-way, by the verdict of the replica check that followed (replica_dead = quarantined, replica_alive = replica answered, not_checked = replica was no longer Ready).',
    labelNames: ['verdict'] as const,
    registers: [this.registry],
  });

  private readonly midStreamBreakSignals = new Counter({
    name: 'llm_extproc_midstream_break_signals_total',
    help: "Response streams that broke half-way, by what judged them: Envoy's access log said the client left (access_log_client = cancelled_mid_stream) or the model server's side ended it (access_log_upstream), or no entry came (none = stream_broken, as without the access log).",
    labelNames: ['signal'] as const,
    registers: [this.registry],
  });

  private readonly accessLogForwards: Counter<string> = new Counter({
    name: 'llm_extproc_access_log_forwards_total',
    help: "Envoy access-log entries of streams another replica picked (listen.peerAddress), by outcome: sent (written to that replica's StreamAccessLogs stream), unknown_peer (the entry names no host:port; judged here, where nobody waits for it), dropped (that replica's stream was full: it reads slower than entries come, and the break is judged stream_broken there); and forwarding streams to a peer that failed (stream_failed: entries written to it may be lost, and their breaks stay stream_broken).",
    labelNames: ['outcome'] as const,
    registers: [this.registry],
    collect: () => this.forwardCells.flushTo(this.accessLogForwards),
  });

  private readonly endpoints = new Gauge({
    name: 'llm_extproc_endpoints',
    help: 'Endpoints in the cache, by pool and state.',
    labelNames: ['pool', 'state'] as const,
    // Cluster mode: every worker holds the same cache; the primary reports one copy, not the sum.
    aggregator: 'max',
    registers: [this.registry],
  });

  private readonly inFlight: Gauge = new Gauge({
    name: 'llm_extproc_in_flight_requests',
    help: 'ext_proc streams (requests) open now, counted from the stream start, before routing, until the stream ends.',
    registers: [this.registry],
    collect: () => this.inFlight.set(this.openStreams),
  });

  // llm-d's ext_proc stream series (its streams_inflight is the twin of llm_extproc_in_flight_requests).
  private readonly streams: Counter<'code'> = new Counter({
    name: 'llm_d_epp_extproc_streams_total',
    help: "ext_proc streams ended, by the gRPC status they closed with (Go's code names: OK, Canceled, Internal, ResourceExhausted; Unknown = the transport failed) (llm-d name).",
    labelNames: ['code'] as const,
    registers: [this.registry],
    collect: () => this.streamCells.flushTo(this.streams),
  });

  private readonly streamSeconds = new CountingHistogram({
    name: 'llm_d_epp_extproc_stream_duration_seconds',
    help: 'How long ext_proc streams stayed open, from start to end; Envoy opens one per request (llm-d name).',
    buckets: [0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1, 5, 10, 30, 60, 120, 300, 600],
    registers: [this.registry],
  }).child();

  private readonly messageSeconds = new CountingHistogram(
    {
      name: 'llm_extproc_message_processing_seconds',
      help: 'Time spent handling one ext_proc message (our added latency per message), by message type.',
      buckets: [0.00001, 0.000025, 0.00005, 0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.05],
      registers: [this.registry],
    },
    ['message'],
  );

  private readonly turnaround = new CountingHistogram({
    name: 'llm_extproc_message_turnaround_seconds',
    help:
      'Time from the read callback that brought ext_proc messages to the socket write of their replies (decoding, handling, ' +
      'encoding, and waiting for the other messages of the same read); a lower bound of our share of each round trip Envoy ' +
      'waits for (time in the kernel before the read is not in it). Counted once per reply, health replies included; ' +
      'listen.transport native only.',
    buckets: [0.00005, 0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25],
    registers: [this.registry],
  }).child();

  private readonly outsidePick = new Counter({
    name: 'llm_extproc_served_outside_pick_total',
    help: 'Requests Envoy sent to a host we did not pick (its backends cluster lacked our picks and its fallback policy chose).',
    registers: [this.registry],
  });

  private readonly protocolEvents = new Counter({
    name: 'llm_extproc_grpc_protocol_events_total',
    help: "HTTP/2 events on the gRPC listener, by kind (grpc-js reports only connection_refused and rapid_reset): a peer's protocol errors (connection_error, malformed_request, stream_error, header_list_too_large), refused streams, abuse ended with ENHANCE_YOUR_CALM (rapid_reset, header_flood), handler_error, socket_error; connections closed over listen.maxConnections (connection_refused) or after listen.idleTimeoutSeconds without a stream (idle_closed).",
    labelNames: ['kind'] as const,
    registers: [this.registry],
  });

  private readonly watchRestarts = new Counter({
    name: 'llm_extproc_kubernetes_watch_restarts_total',
    help: 'Kubernetes watch restarts, by resource and reason (gone = 410 relist, dropped, error).',
    labelNames: ['resource', 'reason'] as const,
    registers: [this.registry],
  });

  private readonly sourceErrors = new Counter({
    name: 'llm_extproc_endpoint_source_errors_total',
    help: 'Endpoint source errors that were recovered from (bad static file, failed reload).',
    labelNames: ['source'] as const,
    registers: [this.registry],
  });

  private readonly cacheAge = new Gauge({
    name: 'llm_extproc_endpoint_cache_age_seconds',
    help: 'Seconds since the endpoint source last confirmed its view (list, watch event or file load).',
    labelNames: ['source'] as const,
    aggregator: 'max',
    registers: [this.registry],
    collect: () => this.collectCacheAge(),
  });

  private readonly scrapes = new Counter({
    name: 'llm_extproc_model_server_scrapes_total',
    help: 'Scrapes of model-server metrics endpoints, by result (ok, timeout, http_error, connect_error, parse_error).',
    labelNames: ['result'] as const,
    registers: [this.registry],
  });

  private readonly scrapeSeconds = new Histogram({
    name: 'llm_extproc_model_server_scrape_seconds',
    help: 'Time one model-server metrics scrape took, failed ones included.',
    buckets: [0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5],
    registers: [this.registry],
  });

  private readonly endpointMetricsStates = new Gauge({
    name: 'llm_extproc_endpoint_load_reports',
    help: 'Endpoints by the state of their model-server load report (fresh, missing, failing, stale). Only fresh reports count for picking.',
    labelNames: ['state'] as const,
    registers: [this.registry],
    collect: () => this.collectLoadReports(),
  });

  private loadReportStates: () => Iterable<string> = () => [];

  private readonly lastRefresh = new Map<string, number>();
  /** Label sets used per endpoint address, so they can be removed when the address goes away. */
  private readonly seriesByEndpoint = new Map<string, Map<string, Record<string, string>>>();
  /**
   * Per-pool derived data, by PoolView: the store keeps the same PoolView for a pool that did not
   * change, so with thousands of pods a view change recounts only the pools that changed.
   */
  private readonly poolStateCounts = new WeakMap<PoolView, ReadonlyMap<string, number>>();
  private readonly poolAddresses = new WeakMap<PoolView, ReadonlySet<string>>();
  private readonly messageChildren = new Map<string, { observe(value: number): void }>();

  private readonly llm = new LlmMetrics(this.registry);
  /**
   * The Gateway API Inference Extension's names for the same figures (its dashboards and HPA
   * examples): shown beside llm-d's twins (llm-d-metrics.ts), or kept unshown when the deprecated
   * names are switched off, where the twins still read them.
   */
  private readonly gie: GieMetrics;
  /** llm-d's series without an Inference Extension twin, fed by the same calls (llm-d-series.ts). */
  private readonly llmd = new LlmdSeries(this.registry);
  /** The trace spans' fate (exported, dropped) and the export queue: series present with tracing off too. */
  readonly traces = new TraceMetrics(this.registry);
  /** llm-d's count of model rewrites (no Inference Extension twin: the extension has no rewrite). */
  readonly modelRewrites = new ModelRewriteDecisions(this.registry);

  /** Present with process metrics: a native sampler that a test creating many Metrics can do without. */
  readonly eventLoopDelay: EventLoopDelayMetric | undefined;

  constructor(options: { processMetrics?: boolean; deprecatedNames?: boolean } = {}) {
    const processMetrics = options.processMetrics ?? true;
    const gieRegistry = options.deprecatedNames === false ? new Registry() : this.registry;
    this.gie = new GieMetrics(gieRegistry);
    registerLlmdTwins(gieRegistry, this.registry);
    // Includes llm_extproc_nodejs_gc_duration_seconds (GC pauses by kind) and process RSS/CPU.
    if (processMetrics) collectDefaultMetrics({ register: this.registry, prefix: 'llm_extproc_' });
    this.eventLoopDelay = processMetrics ? new EventLoopDelayMetric(this.registry, 'llm_extproc_event_loop_delay_seconds') : undefined;
  }

  /** `target`: the model a rewrite sent it as (the Inference Extension's `target_model_name`); absent = `model`. */
  requestFinished(model: string, result: string, target: string = model): void {
    this.requestCells.add(model, result);
    // A cancellation (the client left) is no error of the model or of its objective.
    this.gie.requestFinished(model, target, result === 'ok' || isCancellation(result));
  }

  /**
   * The models served now (app.ts: on every view change): a model seen for the first time gets its
   * ALERTED_RESULTS series at 0. A model that stops being served keeps them, as it keeps the series
   * its requests made.
   */
  modelsServed(models: Iterable<string>): void {
    for (const model of models) {
      if (this.modelsSeen.has(model)) continue;
      this.modelsSeen.add(model);
      for (const result of ALERTED_RESULTS) this.requestCells.cell(model, result);
    }
  }

  /** A request for `asked` (of `bytes`) was routed as `model` (a model we serve); requestReleased follows when it ends. */
  requestRouted(model: string, asked: string = model, bytes?: number): void {
    this.gie.routed(model);
    this.llmd.routed(asked, model, bytes);
  }

  requestReleased(model: string, asked: string = model): void {
    this.gie.released(model);
    this.llmd.released(asked, model);
  }

  /** Where the per-pool load series come from (app.ts: the endpoint view and the picker's load reports). */
  reportPoolLoadsFrom(pools: () => Iterable<PoolLoads>): void {
    this.gie.reportPoolsFrom(pools);
    this.llmd.reportPoolsFrom(pools);
  }

  attempt(pool: string, endpoint: string, outcome: AttemptOutcome, reason: string): void {
    if (this.attemptCells.add(endpoint, pool, outcome, reason)) {
      this.rememberSeries(endpoint, `a\u0000${pool}\u0000${outcome}\u0000${reason}`, { pool, endpoint, outcome, reason });
    }
  }

  quarantined(pool: string, endpoint: string): void {
    this.quarantines.inc({ pool, endpoint });
    this.rememberSeries(endpoint, `q\u0000${pool}`, { pool, endpoint });
  }

  slowReplicaDemoted(pool: string, endpoint: string): void {
    this.demotions.inc({ pool, endpoint });
    this.rememberSeries(endpoint, `d\u0000${pool}`, { pool, endpoint });
  }

  /** Where the slow-replica gauge reads its counts (the latency tracker). */
  reportSlowReplicasFrom(counts: () => Iterable<[string, number]>): void {
    this.demotedByPool = counts;
  }

  failedConnectCheck(verdict: BreakVerdict): void {
    this.failedConnectChecks.inc({ verdict });
  }

  midStreamBreak(verdict: BreakVerdict): void {
    this.midStreamBreaks.inc({ verdict });
  }

  /** An access-log entry of a stream another replica picked: forwarded to it, or not (extproc/access-log-routing.ts). */
  accessLogForwarded(outcome: 'sent' | 'unknown_peer' | 'stream_failed' | 'dropped'): void {
    this.forwardCells.add(outcome);
  }

  /** A stream broken half-way was judged by `signal` (outcomes/judged-breaks.ts). */
  midStreamBreakJudged(signal: 'access_log_client' | 'access_log_upstream' | 'none'): void {
    this.midStreamBreakSignals.inc({ signal });
  }

  requestStarted(): void {
    this.openStreams++;
  }

  /** A stream ended with the gRPC status `code` (Go's name) after `seconds` open. */
  requestEnded(code: string, seconds: number): void {
    this.openStreams--;
    this.streamCells.add(code);
    this.streamSeconds.observe(seconds);
  }

  messageHandled(message: string, seconds: number): void {
    // Hot path (every ext_proc message): resolve the series once per message type.
    let child = this.messageChildren.get(message);
    if (child === undefined) {
      child = this.messageSeconds.child(message);
      this.messageChildren.set(message, child);
    }
    child.observe(seconds);
  }

  /** `replies` replies were written `seconds` after the read that brought their messages. */
  messageTurnaround(seconds: number, replies: number): void {
    this.turnaround.observe(seconds, replies);
  }

  requestFigures(figures: LlmFigures, target: string = figures.model): void {
    this.llm.record(figures);
    this.gie.answered(figures.model, target, figures.duration, figures.usage?.input, figures.usage?.output);
    this.llmd.answered(figures.model, target, figures);
  }

  servedOutsidePick(): void {
    this.outsidePick.inc();
  }

  protocolEvent(kind: string): void {
    this.protocolEvents.inc({ kind });
  }

  watchRestarted(resource: string, reason: string): void {
    this.watchRestarts.inc({ resource, reason });
  }

  sourceError(source: string): void {
    this.sourceErrors.inc({ source });
  }

  scraped(result: string, seconds: number): void {
    this.scrapes.inc({ result });
    this.scrapeSeconds.observe(seconds);
  }

  /** Where the per-endpoint report states come from (the picker's signal board, via app.ts). */
  reportLoadStatesFrom(states: () => Iterable<string>): void {
    this.loadReportStates = states;
  }

  private collectLoadReports(): void {
    const counts = new Map<string, number>([
      ['fresh', 0],
      ['missing', 0],
      ['failing', 0],
      ['stale', 0],
    ]);
    for (const state of this.loadReportStates()) counts.set(state, (counts.get(state) ?? 0) + 1);
    for (const [state, count] of counts) this.endpointMetricsStates.set({ state }, count);
  }

  sourceRefreshed(source: string, at: number = Date.now()): void {
    this.lastRefresh.set(source, at);
  }

  /**
   * Recomputes the per-state gauge from a whole view, so states that emptied drop to zero, and
   * drops the per-endpoint series of addresses that left it: pod IPs churn with every rollout,
   * and series must not pile up for endpoints that no longer exist.
   */
  endpointView(view: EndpointView): void {
    if (this.seriesByEndpoint.size > 0) {
      const pools = [...view.pools.values()];
      for (const [endpoint, series] of this.seriesByEndpoint) {
        if (pools.some((pool) => this.addressesOf(pool).has(endpoint))) continue;
        for (const [key, labels] of series) {
          if (key.startsWith('a')) this.attempts.remove(labels as { pool: string; endpoint: string; outcome: string; reason: string });
          else if (key.startsWith('d')) this.demotions.remove(labels as { pool: string; endpoint: string });
          else this.quarantines.remove(labels as { pool: string; endpoint: string });
        }
        this.seriesByEndpoint.delete(endpoint);
        this.attemptCells.dropFirst(endpoint);
      }
    }
    const pools = [...view.pools.values()];
    this.llm.keepEndpoints((address) => pools.some((pool) => this.addressesOf(pool).has(address)));
    this.endpoints.reset();
    for (const pool of view.pools.values()) {
      for (const [state, count] of this.stateCountsOf(pool)) this.endpoints.set({ pool: pool.name, state }, count);
    }
  }

  private stateCountsOf(pool: PoolView): ReadonlyMap<string, number> {
    let counts = this.poolStateCounts.get(pool);
    if (counts === undefined) {
      const fresh = new Map<string, number>(ENDPOINT_STATES.map((s) => [s, 0]));
      for (const endpoint of pool.endpoints) fresh.set(endpoint.state, (fresh.get(endpoint.state) ?? 0) + 1);
      this.poolStateCounts.set(pool, (counts = fresh));
    }
    return counts;
  }

  private addressesOf(pool: PoolView): ReadonlySet<string> {
    let addresses = this.poolAddresses.get(pool);
    if (addresses === undefined) this.poolAddresses.set(pool, (addresses = new Set(pool.endpoints.map((e) => e.address))));
    return addresses;
  }

  private rememberSeries(endpoint: string, key: string, labels: Record<string, string>): void {
    let series = this.seriesByEndpoint.get(endpoint);
    if (series === undefined) this.seriesByEndpoint.set(endpoint, (series = new Map<string, Record<string, string>>()));
    if (!series.has(key)) series.set(key, labels);
  }

  private collectCacheAge(): void {
    const now = Date.now();
    for (const [source, at] of this.lastRefresh) this.cacheAge.set({ source }, (now - at) / 1000);
  }
}
