// The operations HTTP server: /metrics (Prometheus), /healthz (liveness), /readyz (readiness:
// the endpoint cache has its first full view), /debug/endpoints (the cache as JSON; only when the
// caller hands a view, i.e. `listen.debugEndpoints` is on).

import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import type { EndpointView } from '../endpoints/model.js';
import { errorMessage } from '../util/error-message.js';
import { splitHostPort } from '../util/host-port.js';

/** What /metrics needs of a registry: one process's Registry, or an aggregate over cluster workers. */
export interface MetricsSource {
  readonly contentType: string;
  metrics(): Promise<string>;
}

export interface OpsServerDeps {
  readonly registry: MetricsSource;
  readonly isReady: () => boolean;
  /**
   * The cache as /debug/endpoints shows it: a view, or one already rendered by viewAsJson (cluster
   * primary). Absent: /debug/endpoints is not served (404), as with `listen.debugEndpoints` off.
   */
  readonly view?: () => EndpointView | { readonly rendered: unknown };
  /** Load signals of one address (in-flight count, model-server report) for /debug/endpoints. */
  readonly signals?: (address: string) => unknown;
}

export interface RunningOpsServer {
  readonly port: number;
  close(): Promise<void>;
}

function json(status: number, body: unknown): { status: number; type: string; body: string } {
  return { status, type: 'application/json', body: JSON.stringify(body) };
}

export function viewAsJson(view: EndpointView, signals?: (address: string) => unknown): unknown {
  return {
    version: view.version,
    pools: [...view.pools.values()].map((pool) => ({
      name: pool.name,
      models: pool.models,
      endpoints: pool.endpoints.map((e) => ({
        id: e.id,
        address: e.address,
        state: e.state,
        reason: e.reason,
        ...(signals === undefined || e.address === '' ? {} : { load: signals(e.address) }),
      })),
    })),
  };
}

export async function startOpsServer(address: string, deps: OpsServerDeps): Promise<RunningOpsServer> {
  const server: Server = createServer((req, res) => {
    const path = (req.url ?? '/').split('?')[0];
    void (async () => {
      let reply: { status: number; type: string; body: string };
      if (req.method !== 'GET' && req.method !== 'HEAD') reply = json(405, { error: 'method not allowed' });
      else if (path === '/metrics') reply = { status: 200, type: deps.registry.contentType, body: await deps.registry.metrics() };
      else if (path === '/healthz') reply = json(200, { status: 'ok' });
      else if (path === '/readyz')
        reply = deps.isReady()
          ? json(200, { status: 'ready' })
          : json(503, { status: 'not ready', reason: 'endpoint cache has not completed its first sync' });
      else if (path === '/debug/endpoints' && deps.view !== undefined) {
        const view = deps.view();
        reply = json(200, 'rendered' in view ? view.rendered : viewAsJson(view, deps.signals));
      } else reply = json(404, { error: 'not found' });
      res.writeHead(reply.status, { 'content-type': reply.type, 'cache-control': 'no-store' });
      res.end(req.method === 'HEAD' ? undefined : reply.body);
    })().catch((err: unknown) => {
      res.writeHead(500, { 'content-type': 'application/json' });
      res.end(JSON.stringify({ error: errorMessage(err) }));
    });
  });
  const { host, port } = splitHostPort(address);
  await new Promise<void>((resolve, reject) => {
    // Worded as the gRPC listener words it, so main.ts reports either in one line.
    server.once('error', (err) => reject(new Error(`cannot listen on ${address}: ${err.message}`, { cause: err })));
    server.listen(port, host, () => resolve());
  });
  return {
    port: (server.address() as AddressInfo).port,
    close: () =>
      new Promise<void>((resolve) => {
        server.closeAllConnections();
        server.close(() => resolve());
      }),
  };
}
