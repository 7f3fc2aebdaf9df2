// What the native transport does around its connections: recognise a gRPC content type, bind the
// listener, keep connections alive with pings, and shut down gracefully. (`bindListener` is the
// tail of its start function.)
import cluster from 'node:cluster';
import type { Server, Socket } from 'node:net';
import type { Logger } from 'pino';
import { asError } from '../util/error-message.js';
import { dialAddress, parseAddress, removeStaleSocket } from './listen-address.js';
import type { ListenTarget } from './listen-address.js';
import type { AnyBidiMethod, RunningGrpcServer } from './server-options.js';
import type { TlsIdentitySource } from './tls-identity.js';
import { KEEPALIVE_INTERVAL_MS, KEEPALIVE_TIMEOUT_MS, RELEASE_FLUSH_MS } from './transport-settings.js';

/** A connection as shutdown and keepalive see it. */
export interface ListenerConnection {
  /** Graceful: GOAWAY, then close once the open streams are done. */
  close(): void;
  /** At once. */
  destroy(): void;
}

export interface PingableConnection {
  readonly closed: boolean;
  /** Sends a PING; `onAck` runs when it is answered. False when one is still outstanding. */
  ping(onAck: () => void): boolean;
  destroy(): void;
}

export function isGrpcContentType(contentType: string | undefined): boolean {
  if (contentType === undefined || !contentType.startsWith('application/grpc')) return false;
  const rest = contentType.slice('application/grpc'.length);
  return rest === '' || rest.startsWith('+') || rest.startsWith(';');
}

/** Pings the peer every KEEPALIVE_INTERVAL_MS; a peer that does not answer within KEEPALIVE_TIMEOUT_MS is gone. */
export function startKeepalive(connection: PingableConnection, logger: Logger): NodeJS.Timeout {
  const interval = setInterval(() => {
    if (connection.closed) return;
    const timeout = setTimeout(() => {
      logger.warn('HTTP/2 peer did not answer a keepalive ping; closing the connection');
      connection.destroy();
    }, KEEPALIVE_TIMEOUT_MS);
    timeout.unref();
    // False: the previous ping is still unanswered, and its own timeout decides.
    if (!connection.ping(() => clearTimeout(timeout))) clearTimeout(timeout);
  }, KEEPALIVE_INTERVAL_MS);
  interval.unref();
  return interval;
}

/** Binds `server` to `target`; resolves with the bound TCP port (0 for a Unix socket). */
function listen(server: Server, target: ListenTarget): Promise<number> {
  return new Promise((resolve, reject) => {
    server.once('error', reject);
    const listening = (): void => {
      server.off('error', reject);
      const bound = server.address();
      resolve(typeof bound === 'object' && bound !== null ? bound.port : 0);
    };
    if (target.kind === 'unix') server.listen({ path: target.path }, listening);
    else server.listen({ host: target.host.replace(/^\[|\]$/g, ''), port: target.port }, listening);
  });
}

/**
 * Stops accepting, sends GOAWAY on every connection, lets open streams finish for up to `graceMs`,
 * then releases the rest (ended with OK, so Envoy completes each response without us) and closes.
 */
async function shutdownServer(
  server: Server,
  connections: ReadonlySet<ListenerConnection>,
  sockets: Set<Socket>,
  methods: readonly AnyBidiMethod[],
  graceMs: number,
  logger: Logger,
): Promise<void> {
  // Stop accepting connections; the callback runs once every connection has closed.
  const closed = new Promise<void>((resolve) => server.close(() => resolve()));
  // GOAWAY: no new streams; each connection closes once its open streams are done.
  for (const connection of connections) connection.close();
  for (const method of methods) method.shutdownStarted?.();
  let graceTimer: NodeJS.Timeout | undefined;
  let flushTimer: NodeJS.Timeout | undefined;
  const deadline = new Promise<void>((resolve) => {
    graceTimer = setTimeout(() => {
      const open = openCalls(methods);
      if (open > 0) logger.warn({ graceMs, streams: open }, 'gRPC streams still open after the grace period; releasing them');
      for (const method of methods) method.releaseOpenCalls();
      flushTimer = setTimeout(() => {
        for (const connection of connections) connection.destroy();
        for (const socket of sockets) socket.destroy();
        resolve();
      }, RELEASE_FLUSH_MS);
    }, graceMs);
  });
  await Promise.race([closed, deadline]);
  clearTimeout(graceTimer);
  clearTimeout(flushTimer);
  await closed;
  logger.info('gRPC server stopped');
}

/** Calls still open across the served methods. */
export function openCalls(methods: readonly AnyBidiMethod[]): number {
  let open = 0;
  for (const method of methods) open += method.openCalls;
  return open;
}

export interface ListenerBinding {
  /** The configured listen address. */
  readonly address: string;
  /** For the log line. */
  readonly transport: string;
  readonly tls: TlsIdentitySource | undefined;
  /** Ends the server's subscription to certificate changes. */
  readonly unsubscribeTls: () => void;
  readonly connections: ReadonlySet<ListenerConnection>;
  readonly methods: readonly AnyBidiMethod[];
  readonly logger: Logger;
  /** Runs first on shutdown (refuse new connections, stop serving health). */
  readonly onShutdown: () => void;
}

/** Binds a created server, and returns it as the running gRPC server with its graceful shutdown. */
export async function bindListener(server: Server, binding: ListenerBinding): Promise<RunningGrpcServer> {
  const { tls, logger } = binding;
  // Connections that never became HTTP/2 (a TLS handshake that fails or hangs) would hold
  // server.close() forever: shutdown destroys whatever is left at its deadline.
  const sockets = new Set<Socket>();
  server.on('connection', (socket: Socket) => {
    sockets.add(socket);
    socket.once('close', () => sockets.delete(socket));
  });
  const target = parseAddress(binding.address);
  // Cluster workers share the primary's listening socket (the primary removed a stale file before
  // forking); a worker probing it would find it live and refuse to start.
  if (target.kind === 'unix' && !cluster.isWorker) await removeStaleSocket(target.path, logger);
  let port: number;
  try {
    port = await listen(server, target);
  } catch (err) {
    binding.unsubscribeTls();
    tls?.close();
    throw new Error(`cannot listen on ${binding.address}: ${asError(err).message}`, { cause: err });
  }
  const address = dialAddress(target, port);
  logger.info({ address, tls: tls !== undefined, transport: binding.transport }, 'gRPC server listening');

  let stopped: Promise<void> | undefined;
  return {
    address,
    ...(target.kind === 'tcp' ? { port } : {}),
    shutdown(graceMs: number): Promise<void> {
      binding.onShutdown();
      stopped ??= shutdownServer(server, binding.connections, sockets, binding.methods, graceMs, logger).finally(() => {
        binding.unsubscribeTls();
        tls?.close();
      });
      return stopped;
    },
  };
}
