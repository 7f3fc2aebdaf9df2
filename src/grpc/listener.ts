// What both HTTP/2 gRPC transports (our own connection, direct-transport.ts, and node:http2,
// h2-transport.ts) do the same way around their connections: recognise a gRPC content type, bind
// the listener, keep connections alive with pings, and shut down gracefully.
// (`bindEdge` is the common tail of both start functions.)
import cluster from 'node:cluster';
import type { Server, Socket } from 'node:net';
import type { Logger } from 'pino';
import { isReusedReply } from '../extproc/constant-replies.js';
import { frameMessage } from './framing.js';
import type { RunningGrpcServer } from './server.js';
import { dialAddress, parseAddress, removeStaleSocket } from './listen-address.js';
import type { ListenTarget } from './listen-address.js';
import type { ProcessingResponse } from '../extproc/messages.js';
import { asError } from '../extproc/process-service.js';
import type { TlsIdentitySource } from './tls-identity.js';
import { KEEPALIVE_INTERVAL_MS, KEEPALIVE_TIMEOUT_MS, RELEASE_FLUSH_MS } from './transport-settings.js';

/** A connection as shutdown and keepalive see it (an H2Connection or a node:http2 session). */
export interface EdgeConnection {
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

/**
 * Process replies as length-prefixed gRPC messages. A reply built once and sent many times
 * (constant-replies.ts) is framed once, the first time it is sent; every other one is encoded and
 * framed per reply.
 */
export function replyFramer(serialize: (reply: ProcessingResponse) => Buffer): (reply: ProcessingResponse) => Buffer {
  const framed = new WeakMap<ProcessingResponse, Buffer>();
  return (reply) => {
    const cached = framed.get(reply);
    if (cached !== undefined) return cached;
    const bytes = frameMessage(serialize(reply));
    if (isReusedReply(reply)) framed.set(reply, bytes);
    return bytes;
  };
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
  connections: ReadonlySet<EdgeConnection>,
  sockets: Set<Socket>,
  openStreams: Set<() => void>,
  graceMs: number,
  logger: Logger,
): Promise<void> {
  // Stop accepting connections; the callback runs once every connection has closed.
  const closed = new Promise<void>((resolve) => server.close(() => resolve()));
  // GOAWAY: no new streams; each connection closes once its open streams are done.
  for (const connection of connections) connection.close();
  let graceTimer: NodeJS.Timeout | undefined;
  let flushTimer: NodeJS.Timeout | undefined;
  const deadline = new Promise<void>((resolve) => {
    graceTimer = setTimeout(() => {
      if (openStreams.size > 0) {
        logger.warn({ graceMs, streams: openStreams.size }, 'ext_proc streams still open after the grace period; releasing them to Envoy');
      }
      for (const release of [...openStreams]) release();
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

export interface EdgeBinding {
  /** The configured listen address. */
  readonly address: string;
  /** For the log line. */
  readonly transport: string;
  readonly tls: TlsIdentitySource | undefined;
  /** Ends the server's subscription to certificate changes. */
  readonly unsubscribeTls: () => void;
  readonly connections: ReadonlySet<EdgeConnection>;
  readonly openStreams: Set<() => void>;
  readonly logger: Logger;
  /** Runs first on shutdown (refuse new connections, stop serving health). */
  readonly onShutdown: () => void;
}

/** Binds a created server, and returns it as the running gRPC server with its graceful shutdown. */
export async function bindEdge(server: Server, binding: EdgeBinding): Promise<RunningGrpcServer> {
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
      stopped ??= shutdownServer(server, binding.connections, sockets, binding.openStreams, graceMs, logger).finally(() => {
        binding.unsubscribeTls();
        tls?.close();
      });
      return stopped;
    },
  };
}
