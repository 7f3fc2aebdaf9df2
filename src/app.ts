// Wiring only: config → logger → metrics → endpoint store + source → routing → gRPC and HTTP
// servers. Returns a handle so main.ts, the demo and the tests start the same program.

import type { Logger } from 'pino';
import type { Config } from './config/config.js';
import type { EndpointSource } from './endpoints/model.js';
import { BrokenStreamCheck } from './endpoints/broken-stream-check.js';
import { probeReplica } from './endpoints/replica-probe.js';
import { StaticFileSource } from './endpoints/static-source.js';
import { EndpointStore } from './endpoints/store.js';
import { startGrpcServer } from './extproc/grpc-server.js';
import type { HealthSource } from './extproc/grpc-server.js';
import { RequestProcessor } from './extproc/processor.js';
import { StoreRouting } from './extproc/routing.js';
import { openTlsIdentity } from './extproc/tls-identity.js';
import { startOpsServer } from './http/ops-server.js';
import { Metrics } from './metrics/metrics.js';
import { LoadTracker } from './picker/load-tracker.js';

export interface RunningApp {
  /** Bound gRPC address (`host:port` or `unix:///path`). */
  readonly grpcAddress: string;
  readonly httpPort: number;
  readonly store: EndpointStore;
  readonly metrics: Metrics;
  stop(): Promise<void>;
}

async function createSource(config: Config, logger: Logger, metrics: Metrics): Promise<EndpointSource> {
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
  });
}

export async function startApp(config: Config, logger: Logger, options: { metrics?: Metrics } = {}): Promise<RunningApp> {
  const metrics = options.metrics ?? new Metrics();
  const source = await createSource(config, logger, metrics);
  const store = new EndpointStore([source.name], config.quarantine);
  store.subscribe({
    viewChanged: (view) => metrics.endpointView(view),
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
  const routing = new StoreRouting(store, new LoadTracker(), {
    fallbacks: config.routing.fallbacks,
    ...(config.routing.pool === undefined ? {} : { pool: config.routing.pool }),
  });
  const requestLogger = logger.child({ component: 'extproc' });
  const tls = config.listen.tls === undefined ? undefined : await openTlsIdentity(config.listen.tls, logger.child({ component: 'grpc-tls' }));
  const grpc = await startGrpcServer({
    address: config.listen.grpc,
    logger: requestLogger,
    health,
    ...(tls === undefined ? {} : { tls }),
    processorFactory: () =>
      new RequestProcessor({
        routing,
        metrics,
        logger: requestLogger,
        maxRequestBodyBytes: config.routing.maxRequestBodyBytes,
        maxInspectedBodyBytes: config.routing.maxInspectedBodyBytes,
        destinationFormat: config.routing.destinationFormat,
        onMidStreamBreak: (endpoint) => void brokenStreams.suspect(endpoint.address),
      }),
  });
  const ops = await startOpsServer(config.listen.http, { registry: metrics.registry, isReady: () => health.isServing(), view: () => store.view() });
  // The source starts last: the servers answer NOT_SERVING until its first complete view arrives.
  try {
    await source.start(store);
  } catch (err) {
    await grpc.shutdown(0);
    await ops.close();
    throw err;
  }
  logger.info({ grpc: grpc.address, http: ops.port, source: source.name }, 'llm-extproc started');

  let stopping: Promise<void> | undefined;
  return {
    grpcAddress: grpc.address,
    httpPort: ops.port,
    store,
    metrics,
    stop: () =>
      (stopping ??= (async () => {
        draining = true;
        for (const listener of drainListeners) listener();
        if (config.shutdownDrainMs > 0) {
          logger.info({ drainMs: config.shutdownDrainMs }, 'draining: health says NOT_SERVING, still answering');
          await new Promise((resolve) => setTimeout(resolve, config.shutdownDrainMs));
        }
        await grpc.shutdown(config.shutdownGraceMs);
        await source.stop();
        await ops.close();
        store.stop();
      })()),
  };
}
