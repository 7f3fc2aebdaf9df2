// Multi-core mode (`--workers N`): node:cluster workers each run the whole app (gRPC server,
// endpoint source and store, load tracker, processor) and share the gRPC listener; the primary
// only forks, restarts, aggregates and shuts down.
//
// Why whole-app workers: each ext_proc message's cost is HTTP/2 framing, protobuf and our
// processing on the thread that owns the connection; none of it can be handed to a worker thread
// without copying the message across. Envoy keeps one HTTP/2 connection to us per Envoy worker
// (more when a connection reaches its stream limit), and the primary hands each new connection to
// the next worker in turn, so the load spreads at connection granularity.
// Each worker keeps its own view of the endpoint cache and its own in-flight load, exactly like
// separate replicas behind the same Envoy: picking is consistent across workers in the same way
// it is across replicas.
//
// The primary serves the ops HTTP endpoints: /metrics sums the workers' registries (prom-client's
// AggregatorRegistry), /readyz is ready when every worker is serving, /debug/endpoints shows the
// first worker's cache. SIGTERM/SIGINT: every worker drains and stops as a single process would,
// then the primary exits.

import cluster from 'node:cluster';
import type { Worker } from 'node:cluster';
import type { Logger } from 'pino';
import { AggregatorRegistry } from 'prom-client';
import type { RunningApp } from './app.js';
import type { Config } from './config/config.js';
import { parseAddress, removeStaleSocket } from './grpc/listen-address.js';
import { startOpsServer, viewAsJson } from './ops/ops-server.js';

/** Messages between primary and workers (over cluster IPC). */
type WorkerMessage =
  | { readonly llmExtproc: 'started'; readonly grpcAddress: string }
  | { readonly llmExtproc: 'serving'; readonly serving: boolean }
  | { readonly llmExtproc: 'view'; readonly rendered: unknown };
type PrimaryMessage = { readonly llmExtproc: 'shutdown' };

function isWorkerMessage(value: unknown): value is WorkerMessage {
  return typeof value === 'object' && value !== null && typeof (value as { llmExtproc?: unknown }).llmExtproc === 'string';
}

/** After a worker crash, wait this long before forking its replacement (no hot crash loop). */
const RESTART_DELAY_MS = 1_000;

interface Slot {
  readonly index: number;
  worker: Worker | undefined;
  started: boolean;
  serving: boolean;
  view: unknown;
}

export interface RunningPrimary {
  /** Drain and stop every worker, then the ops server. */
  stop(): Promise<void>;
}

export async function runPrimary(config: Config, workers: number, logger: Logger): Promise<RunningPrimary> {
  const target = parseAddress(config.listen.grpc);
  if (target.kind === 'unix') await removeStaleSocket(target.path, logger);

  const aggregator = new AggregatorRegistry();
  const slots: Slot[] = Array.from({ length: workers }, (_, index) => ({
    index,
    worker: undefined,
    started: false,
    serving: false,
    view: undefined,
  }));
  let stopping = false;
  let failStart: ((err: Error) => void) | undefined;
  let startedCount = 0;
  let allStarted: (() => void) | undefined;

  const fork = (slot: Slot): void => {
    const worker = cluster.fork({ LLM_EXTPROC_WORKER_INDEX: String(slot.index) });
    slot.worker = worker;
    slot.serving = false;
    worker.on('message', (message: unknown) => {
      if (!isWorkerMessage(message)) return;
      if (message.llmExtproc === 'started') {
        if (!slot.started) {
          slot.started = true;
          startedCount++;
          if (startedCount === workers) allStarted?.();
        }
        logger.info({ worker: slot.index, pid: worker.process.pid, grpc: message.grpcAddress }, 'worker started');
      } else if (message.llmExtproc === 'serving') {
        slot.serving = message.serving;
      } else {
        slot.view = message.rendered;
      }
    });
    worker.on('exit', (code, signal) => {
      if (slot.worker === worker) {
        slot.worker = undefined;
        slot.serving = false;
      }
      if (stopping) return;
      if (!slot.started) {
        failStart?.(new Error(`worker ${slot.index} exited during start (${String(code ?? signal)})`));
        return;
      }
      logger.error({ worker: slot.index, code, signal }, 'worker exited; starting a replacement');
      setTimeout(() => {
        if (!stopping) fork(slot);
      }, RESTART_DELAY_MS).unref();
    });
  };

  await new Promise<void>((resolve, reject) => {
    allStarted = resolve;
    failStart = reject;
    for (const slot of slots) fork(slot);
  }).catch((err: unknown) => {
    stopping = true;
    for (const slot of slots) slot.worker?.kill('SIGKILL');
    throw err;
  });
  failStart = undefined;

  const ops = await startOpsServer(config.listen.http, {
    registry: { contentType: aggregator.contentType, metrics: () => aggregator.clusterMetrics() },
    isReady: () => !stopping && slots.every((slot) => slot.worker !== undefined && slot.serving),
    ...(config.listen.debugEndpoints
      ? { view: () => ({ rendered: slots.find((slot) => slot.view !== undefined)?.view ?? { version: 0, pools: [] } }) }
      : {}),
  });
  logger.info({ workers, http: ops.port, grpc: config.listen.grpc }, 'llm-extproc primary started');

  let stopped: Promise<void> | undefined;
  return {
    stop: () =>
      (stopped ??= (async () => {
        stopping = true;
        const exits = slots.flatMap((slot) => {
          const worker = slot.worker;
          if (worker === undefined || worker.isDead()) return [];
          const exited = new Promise<void>((resolve) => worker.once('exit', () => resolve()));
          const message: PrimaryMessage = { llmExtproc: 'shutdown' };
          try {
            worker.send(message);
          } catch {
            worker.kill('SIGTERM');
          }
          return [exited];
        });
        await Promise.all(exits);
        await ops.close();
      })()),
  };
}

/**
 * Worker side: report start, serving state and the endpoint view to the primary, expose the
 * metrics registry to the primary's aggregation, and stop when the primary says so.
 */
export function attachWorker(app: RunningApp, onShutdownRequest: () => void): void {
  AggregatorRegistry.setRegistries([app.metrics.registry]);
  // Constructing one installs prom-client's worker-side listener that answers the primary.
  new AggregatorRegistry();
  const send = (message: WorkerMessage): void => {
    if (process.connected) process.send?.(message);
  };
  send({ llmExtproc: 'started', grpcAddress: app.grpcAddress });
  let serving = app.health.isServing();
  send({ llmExtproc: 'serving', serving });
  app.health.onChange(() => {
    const now = app.health.isServing();
    if (now === serving) return;
    serving = now;
    send({ llmExtproc: 'serving', serving });
  });
  // Only the first worker's cache is shown by the primary; the others need not send theirs.
  if (process.env.LLM_EXTPROC_WORKER_INDEX === '0') {
    send({ llmExtproc: 'view', rendered: viewAsJson(app.store.view()) });
    app.store.subscribe({ viewChanged: (view) => send({ llmExtproc: 'view', rendered: viewAsJson(view) }) });
  }
  process.on('message', (message: unknown) => {
    if (typeof message === 'object' && message !== null && (message as Partial<PrimaryMessage>).llmExtproc === 'shutdown')
      onShutdownRequest();
  });
}

/** `--workers` / LLM_EXTPROC_WORKERS: a positive integer, or `auto` (one per available CPU). */
export function parseWorkers(text: string | undefined, availableCpus: number): number {
  if (text === undefined || text === '') return 1;
  if (text === 'auto') return Math.max(1, availableCpus);
  const n = Number(text);
  if (!Number.isInteger(n) || n < 1 || n > 256)
    throw new Error(`workers: expected a positive integer or "auto", got ${JSON.stringify(text)}`);
  return n;
}
