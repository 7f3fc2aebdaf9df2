// Wiring only: config → logger → metrics → endpoint store + source → routing → gRPC and HTTP
// servers. Returns a handle so main.ts, the demo and the tests start the same program.

import { ModelRewrites } from './picker/model-rewrite.js';
import type { RewriteRule } from './picker/model-rewrite.js';
import type { Logger } from 'pino';
import { readFile } from 'node:fs/promises';
import { ConfigError } from './config/config.js';
import type { Config } from './config/config.js';
import type { EndpointSource } from './endpoints/model.js';
import { BrokenStreamCheck } from './endpoints/broken-stream-check.js';
import { probeReplica } from './endpoints/replica-probe.js';
import { StaticFileSource } from './endpoints/static-source.js';
import { NO_OBJECTIVES } from './endpoints/inference-objectives.js';
import type { ObjectiveIndex } from './endpoints/inference-objectives.js';
import { EndpointStore } from './endpoints/store.js';
import { startExtProcServer } from './extproc/server.js';
import type { HealthSource } from './grpc/server.js';
import { RequestProcessor } from './request/request-processor.js';
import { StoreRouting } from './routing/routing.js';
import { ServedModels } from './routing/served-models.js';
import { composeSinks } from './request/outcome-sink.js';
import { healthSink } from './outcomes/health-sink.js';
import { judgedBreaks } from './outcomes/judged-breaks.js';
import { StreamEndReports } from './outcomes/stream-end-reports.js';
import { dispatchEntries } from './extproc/access-log-routing.js';
import type { AccessLogForwarder } from './extproc/access-log-forwarder.js';
import { logSink } from './outcomes/log-sink.js';
import { metricsSink } from './outcomes/metrics-sink.js';
import { traceSink } from './outcomes/trace-sink.js';
import { openTlsIdentity } from './grpc/tls-identity.js';
import { startOpsServer } from './ops/ops-server.js';
import { Metrics } from './metrics/metrics.js';
import { LatencyTracker, SLOW_REPLICA } from './picker/latency-tracker.js';
import { poolLoads } from './metrics/gie-metrics.js';
import { FlowMetrics } from './metrics/flow-metrics.js';
import { SessionMetrics } from './metrics/session-metrics.js';
import { parseSessionKeys, SessionAffinity } from './routing/sessions.js';
import { LoadTracker } from './picker/load-tracker.js';
import { MetricsScraper } from './picker/scraper.js';
import { flowControlAnywhere, metricsFormatFor, poolSettings, preciseFor } from './picker/settings.js';
import type { RunningPrecise } from './kv-cache/start-precise.js';
import { SignalBoard } from './picker/signals.js';
import type { RequestResult } from './request/request-result.js';
import { LogThrottle } from './util/log-throttle.js';
import type { ReadGarbageObserver } from './util/external-garbage.js';
import { startTracingIfOn } from './tracing/start-tracing.js';

export interface RunningApp {
  /** Bound gRPC address (`host:port` or `unix:///path`). */
  readonly grpcAddress: string;
  readonly httpPort: number;
  readonly store: EndpointStore;
  readonly metrics: Metrics;
  /** Serving = synced and not draining (what gRPC health and /readyz report). */
  readonly health: HealthSource;
  stop(): Promise<void>;
}

export interface StartAppOptions {
  metrics?: Metrics;
  /** false: no ops HTTP server (a cluster worker; the primary serves /metrics and /readyz). Default true. */
  opsServer?: boolean;
  /** Told the size of every read from Envoy and the end of every stream (the process's scavenge trigger: process-settings.ts). */
  readGarbage?: ReadGarbageObserver;
}

async function createSource(
  config: Config,
  logger: Logger,
  metrics: Metrics,
  objectivesChanged: ((index: ObjectiveIndex) => void) | undefined,
  rewritesChanged: (rules: readonly RewriteRule[]) => void,
): Promise<EndpointSource> {
  if (config.source.kind === 'static') {
    return new StaticFileSource(config.source.path, logger.child({ component: 'static-source' }), {
      loaded: () => metrics.sourceRefreshed('static'),
      reloadFailed: () => metrics.sourceError('static'),
    });
  }
  // Loaded on demand: a static deployment never pays for the Kubernetes client.
  const { KubernetesSource } = await import('./endpoints/kubernetes-source.js');
  return new KubernetesSource(config.source.kubernetes, {
    logger: logger.child({ component: 'kubernetes-source' }),
    observer: {
      watchRestarted: (resource, reason) => metrics.watchRestarted(resource, reason),
      listed: () => metrics.sourceRefreshed('kubernetes'),
      eventReceived: () => metrics.sourceRefreshed('kubernetes'),
    },
    ...(objectivesChanged === undefined ? {} : { objectivesChanged }),
    rewritesChanged,
  });
}

/**
 * How long a stream that broke half-way waits for Envoy's access-log entry before it is recorded as
 * `stream_broken` without it. Envoy sends the entry when the HTTP stream ends, unbuffered in our
 * configs; the wait only delays when the result is recorded, never the client.
 */
const STREAM_END_WAIT_MS = 3000;

export async function startApp(config: Config, logger: Logger, options: StartAppOptions = {}): Promise<RunningApp> {
  const metrics = options.metrics ?? new Metrics({ deprecatedNames: config.metrics.deprecatedNames });
  const tracing = await startTracingIfOn(config.tracing, logger, metrics.traces);
  // The InferenceObjectives' priorities as the source last saw them; read per queued request.
  let objectives: ObjectiveIndex = NO_OBJECTIVES;
  const flow = config.picker.flowControl;
  const flowOn = flowControlAnywhere(config.picker);
  // Only flow control reads objectives: without it, no watch (and no RBAC rule needed for one).
  // The config's rewrite rules, then the cluster's InferenceModelRewrites' (config first: llm-d has no config rules to rank them by).
  const modelRewrites = new ModelRewrites(config.routing.modelRewrites, (rule, model, target) =>
    metrics.modelRewrites.decided(rule, model, target),
  );
  const source = await createSource(config, logger, metrics, flowOn ? (index) => (objectives = index) : undefined, (rules) =>
    modelRewrites.replace([...config.routing.modelRewrites, ...rules]),
  );
  const store = new EndpointStore([source.name], config.quarantine);
  const models = new ServedModels(store, config.routing.pool);
  // Flow control hears of what may give a saturated pool room: a new view, a fresh scrape.
  let wakeFlow = (): void => {};
  store.subscribe({
    viewChanged: (view) => {
      metrics.endpointView(view);
      metrics.modelsServed(models.names());
      wakeFlow();
    },
    synced: () => logger.info('endpoint cache synced; serving'),
    quarantined: (endpoint, reason) => {
      metrics.quarantined(endpoint.pool, endpoint.address);
      logger.warn({ pool: endpoint.pool, endpoint: endpoint.address, reason }, 'endpoint quarantined');
    },
    released: (endpoint) => logger.info({ pool: endpoint.pool, endpoint: endpoint.address }, 'endpoint released from quarantine'),
  });

  // Serving = synced and not draining. Draining flips health first, so Envoy-side health checks
  // and readiness probes move traffic away while we keep answering what still arrives.
  let draining = false;
  const drainListeners = new Set<() => void>();
  const health: HealthSource = {
    isServing: () => store.isSynced() && !draining,
    onChange: (listener) => {
      const unsubscribe = store.subscribe({ synced: listener });
      drainListeners.add(listener);
      return () => {
        unsubscribe();
        drainListeners.delete(listener);
      };
    },
  };
  const probeSettings = { path: config.quarantine.checkPath, timeoutMs: config.quarantine.checkTimeoutMs };
  const brokenStreams = new BrokenStreamCheck(store, (address) => probeReplica(address, probeSettings), {
    checked: (address, verdict, detail) => {
      metrics.midStreamBreak(verdict);
      logger.info({ endpoint: address, verdict, detail }, 'checked a replica after a response stream broke');
    },
  });
  // A connect failure or a reset before any response gets the same check: a dead replica costs
  // one failed request, not `consecutiveFailures` of them (the streak still catches a flapping
  // replica that passes its checks).
  const failedConnects = new BrokenStreamCheck(store, (address) => probeReplica(address, probeSettings), {
    checked: (address, verdict, detail) => {
      metrics.failedConnectCheck(verdict);
      logger.info({ endpoint: address, verdict, detail }, 'checked a replica after an attempt failed to connect');
    },
  });
  // One signal cell per endpoint: our in-flight count (load tracker) and the server's own report
  // (scraper), read by the picker on every request.
  const board = new SignalBoard();
  // Recent TTFT/TPOT per endpoint (fed with every streamed answer), published into the same board.
  const latency =
    config.picker.weights.latency > 0
      ? new LatencyTracker(board, config.picker.latency, {
          demoted: (model, pool, address, detail) => {
            metrics.slowReplicaDemoted(pool, address);
            logger.warn({ model, pool, endpoint: address, reason: SLOW_REPLICA, detail }, 'endpoint demoted: much slower than its pool');
          },
          reinstated: (model, pool, address, why) =>
            logger.info({ model, pool, endpoint: address, why }, 'endpoint reinstated: no longer much slower than its pool'),
        })
      : undefined;
  if (latency !== undefined) metrics.reportSlowReplicasFrom(() => latency.demotedByPool());
  const flowMetrics = new FlowMetrics(metrics.registry, config.picker.flowControl.tenantLabels);
  const running = await startPreciseIfOn(config, store, board, metrics, logger);
  const sessions = await sessionsIfOn(config, metrics);
  const routing = new StoreRouting(store, new LoadTracker(board), {
    ...(sessions === undefined ? {} : { sessions }),
    ...(running === undefined ? {} : { precise: running.precise }),
    fallbacks: config.routing.fallbacks,
    ...(config.routing.pool === undefined ? {} : { pool: config.routing.pool }),
    picker: config.picker,
    ...(latency === undefined ? {} : { latency }),
    flowObserver: flowMetrics,
    objectives: () => objectives,
  });
  flowMetrics.reportLengthsFrom(() => routing.queueLengths());
  wakeFlow = () => routing.wake();
  const flowHeaders = flowOn ? { tenant: flow.tenantHeader, priority: flow.priorityHeader, objective: flow.objectiveHeader } : undefined;
  const scraper = new MetricsScraper(
    board,
    () => store.view(),
    {
      intervalMs: config.picker.metrics.intervalMs,
      timeoutMs: config.picker.metrics.timeoutMs,
      staleAfterMs: config.picker.metrics.staleAfterMs,
      concurrency: config.picker.metrics.concurrency,
      path: config.picker.metrics.path,
      formatFor: (pool) => metricsFormatFor(config.picker, pool),
    },
    {
      scraped: (result, seconds) => {
        metrics.scraped(result, seconds);
        routing.wake();
      },
    },
  );
  metrics.reportLoadStatesFrom(function* () {
    for (const cell of board.all()) yield cell.metricsState;
  });
  metrics.reportPoolLoadsFrom(() => poolLoads(store.view(), board));
  const requestLogger = logger.child({ component: 'extproc' });
  // Every outcome of every stream goes to each of these, in this order.
  // A stream broken mid-way reaches them once Envoy's access log said who ended it: a cancellation,
  // or a failure labelled with what the client got (judged-breaks.ts).
  // With listen.peerAddress, each pick names this replica, and the entries Envoy sends to another
  // replica come here through it (extproc/access-log-routing.ts).
  const self = config.listen.peerAddress;
  const streamEnds = new StreamEndReports(undefined, self !== undefined);
  // One throttle per app for the lines about peers (unknown addresses, failed forwarding streams).
  const peerLogs: PeerLogThrottle = new LogThrottle();
  const forwarder = self === undefined ? undefined : await startForwarder(metrics, logger, peerLogs, config.listen.tls !== undefined);
  const outcomes = judgedBreaks(
    composeSinks([
      metricsSink(metrics),
      ...(tracing === undefined ? [] : [traceSink(board)]),
      logSink(requestLogger, new LogThrottle<RequestResult>()),
      healthSink({ store, failedConnects, brokenStreams, ...(latency === undefined ? {} : { latency }) }),
    ]),
    { reports: streamEnds, waitMs: STREAM_END_WAIT_MS, judged: (signal) => metrics.midStreamBreakJudged(signal) },
  );
  const tls =
    config.listen.tls === undefined ? undefined : await openTlsIdentity(config.listen.tls, logger.child({ component: 'grpc-tls' }));
  const usagePools = new Set(config.routing.streamUsagePools);
  const injectsStreamUsage = usagePools.has('*') ? () => true : (pool: string) => usagePools.has(pool);
  const grpc = await startExtProcServer({
    address: config.listen.grpc,
    transport: config.listen.transport,
    // The root logger: the server's own lines get `component: grpc-server` (a child of the
    // request logger would carry `component` twice, which log pipelines reject or collapse).
    logger,
    health,
    ...(tls === undefined ? {} : { tls }),
    onTurnaround: (seconds, replies) => metrics.messageTurnaround(seconds, replies),
    onProtocolEvent: (kind) => metrics.protocolEvent(kind),
    ...(options.readGarbage === undefined ? {} : { readGarbage: options.readGarbage }),
    maxConnections: config.listen.maxConnections,
    idleTimeoutMs: config.listen.idleTimeoutMs,
    accessLog: dispatchEntries({
      judgeHere: (end) => streamEnds.report(end),
      streams: (open) => streamEnds.streams(open),
      self,
      ...(forwarder === undefined ? {} : { forward: (peer: string, wire: Uint8Array) => forwarder.forward(peer, wire) }),
      unknownPeer: (owner) => {
        metrics.accessLogForwarded('unknown_peer');
        const left = peerLogs.admit('unknown_peer', performance.now());
        if (left !== undefined) logger.warn({ owner, suppressed: left }, 'an access-log entry names no host:port replica; judged here');
      },
    }),
    processorFactory: (later) =>
      new RequestProcessor(
        {
          routing,
          models,
          outcomes,
          logger: requestLogger,
          maxRequestBodyBytes: config.routing.maxRequestBodyBytes,
          maxInspectedBodyBytes: config.routing.maxInspectedBodyBytes,
          destinationFormat: config.routing.destinationFormat,
          ...(self === undefined ? {} : { replica: self }),
          injectsStreamUsage,
          modelRewrites,
          ...(flowHeaders === undefined ? {} : { flowHeaders }),
          ...(tracing === undefined ? {} : { tracer: tracing.tracer }),
        },
        later,
      ),
  });
  const ops =
    options.opsServer === false
      ? { port: 0, close: () => Promise.resolve() }
      : await startOpsServer(config.listen.http, {
          registry: metrics.registry,
          isReady: () => health.isServing(),
          ...(config.listen.debugEndpoints
            ? {
                view: () => store.view(),
                signals: (address: string) => {
                  const load = board.snapshot(address);
                  const measured = latency?.snapshot(address, performance.now()) ?? [];
                  return measured.length === 0 ? load : { ...load, latency: measured };
                },
              }
            : {}),
        });
  // The source starts last: the servers answer NOT_SERVING until its first complete view arrives.
  try {
    await source.start(store);
  } catch (err) {
    await running?.stop();
    await grpc.shutdown(0);
    forwarder?.close();
    await ops.close();
    await tracing?.shutdown(0);
    throw err;
  }
  // Scrapes the first synced view at once, then every interval; a view change is picked up at the
  // next cycle, and until then a new endpoint counts as `missing` (never as idle).
  if (config.picker.metrics.enabled) scraper.start();
  logger.info({ grpc: grpc.address, http: ops.port, source: source.name }, 'llm-extproc started');

  let stopping: Promise<void> | undefined;
  return {
    grpcAddress: grpc.address,
    httpPort: ops.port,
    store,
    metrics,
    health,
    stop: () =>
      (stopping ??= (async () => {
        draining = true;
        for (const listener of drainListeners) listener();
        if (config.shutdownDrainMs > 0) {
          logger.info({ drainMs: config.shutdownDrainMs }, 'draining: health says NOT_SERVING, still answering');
          await new Promise((resolve) => setTimeout(resolve, config.shutdownDrainMs));
        }
        await grpc.shutdown(config.shutdownGraceMs);
        forwarder?.close();
        // The streams are done, so every span has ended: send what is queued, within the bound.
        await tracing?.shutdown(config.tracing.shutdownFlushMs);
        await scraper.stop();
        await running?.stop();
        routing.close();
        await source.stop();
        await ops.close();
        store.stop();
        if (options.metrics === undefined) metrics.eventLoopDelay?.stop();
      })()),
  };
}

/**
 * The forwarder of entries to peers (listen.peerAddress): loaded only then, with grpc-js's client.
 * A failed stream to a peer is counted and logged once per interval, never thrown.
 */
async function startForwarder(metrics: Metrics, logger: Logger, peerLogs: PeerLogThrottle, tls: boolean): Promise<AccessLogForwarder> {
  const { AccessLogForwarder } = await import('./extproc/access-log-forwarder.js');
  return new AccessLogForwarder(
    {
      sent: () => metrics.accessLogForwarded('sent'),
      dropped: (peer) => {
        metrics.accessLogForwarded('dropped');
        const left = peerLogs.admit('dropped', performance.now());
        if (left !== undefined)
          logger.warn(
            { peer, suppressed: left },
            'a peer reads access-log entries slower than they come: this one was dropped (its break is judged stream_broken there)',
          );
      },
      streamFailed: (peer, error) => {
        metrics.accessLogForwarded('stream_failed');
        const left = peerLogs.admit('stream_failed', performance.now());
        if (left !== undefined)
          logger.warn(
            { peer, err: error.message, suppressed: left },
            'could not forward an access-log entry to the replica that picked its stream',
          );
      },
    },
    tls,
  );
}

type PeerLogThrottle = LogThrottle<'unknown_peer' | 'stream_failed' | 'dropped'>;

/** Session affinity where its scorer is on, with the keys of its key file (read once, at start). */
async function sessionsIfOn(config: Config, metrics: Metrics): Promise<SessionAffinity | undefined> {
  if (!(config.picker.weights.session > 0)) return undefined;
  const settings = config.picker.session;
  let keys: readonly Buffer[] = [];
  if (settings.keyFile !== undefined) {
    const read = parseSessionKeys(await readFile(settings.keyFile, 'utf8'));
    if ('error' in read) throw new ConfigError(`picker.session.keyFile ${settings.keyFile}: ${read.error}`);
    keys = read.keys;
  }
  const observer = new SessionMetrics(metrics.registry);
  const sessions = new SessionAffinity(settings, { keys, observer });
  observer.reportRememberedFrom(() => sessions.remembered);
  return sessions;
}

/**
 * Precise prefix matching when the config asks for it: its modules (and through them the ZMQ,
 * msgpack, tokenizer and template libraries) are loaded only then.
 */
async function startPreciseIfOn(
  config: Config,
  store: EndpointStore,
  board: SignalBoard,
  metrics: Metrics,
  logger: Logger,
): Promise<RunningPrecise | undefined> {
  const settings = config.picker.precise;
  if (settings === undefined || !(config.picker.weights.prefix > 0)) return undefined;
  const [{ startPrecise }, { KvEventsMetrics }] = await Promise.all([
    import('./kv-cache/start-precise.js'),
    import('./metrics/kv-events-metrics.js'),
  ]);
  return startPrecise(
    settings,
    (pool) => poolSettings(config.picker, pool).kvEventsPort,
    () => store.view(),
    (pool) => preciseFor(config.picker, pool),
    (address) => board.peek(address)?.load,
    new KvEventsMetrics(metrics.registry),
    logger,
  );
}
