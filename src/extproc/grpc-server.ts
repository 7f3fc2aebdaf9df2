// The gRPC edge: the only module that talks to @grpc/grpc-js. It serves Envoy's ext_proc
// stream and the standard gRPC health service. The Process loop makes no decisions: it feeds
// each message to the stream's processor, writes what comes back in order, and reports how the
// stream ended. Everything about *what* to answer lives behind StreamProcessor.
import cluster from 'node:cluster';
import { connect } from 'node:net';
import { lstatSync, unlinkSync } from 'node:fs';
import { resolve as resolvePath } from 'node:path';
import { Server, ServerCredentials, status as GrpcStatus } from '@grpc/grpc-js';
import type {
  ChannelOptions,
  ServerDuplexStream,
  ServerErrorResponse,
  ServerUnaryCall,
  ServerWritableStream,
  sendUnaryData,
} from '@grpc/grpc-js';
import type { Logger } from 'pino';
import type { ProcessingRequest, ProcessingResponse } from './messages.js';
import type { ProcessorFactory, StreamEnd, StreamProcessor } from './processor-contract.js';
import type { TlsIdentity, TlsIdentitySource } from './tls-identity.js';
import { EXT_PROC_SERVICE_NAME, loadWireDefinitions } from './wire.js';
import type { HealthCheckRequest, HealthCheckResponse, ServingStatus } from './wire.js';
import { splitHostPort } from '../util/host-port.js';

export interface HealthSource {
  isServing(): boolean;
  /** Calls `listener` whenever isServing() may have changed; returns the unsubscribe function. */
  onChange(listener: () => void): () => void;
}

export interface GrpcServerOptions {
  /** "host:port" ("0.0.0.0:0" picks a free port) or "unix:///abs/path.sock" / "unix:rel/path.sock". */
  address: string;
  processorFactory: ProcessorFactory;
  health: HealthSource;
  logger: Logger;
  /** Told about every stream that ends in error (processor threw, transport failure). */
  onStreamError?: (err: Error) => void;
  /**
   * Serve TLS with this identity (a standalone Deployment that gateways reach over the network);
   * absent = plaintext h2c (sidecar over loopback or a Unix socket). Replacements apply to new
   * connections; open connections and their streams carry on with the certificate they began with.
   */
  tls?: TlsIdentitySource;
}

export interface RunningGrpcServer {
  /** What a client dials: "host:PORT" with the real port, or "unix:///abs/path.sock". */
  address: string;
  /** The bound TCP port; absent for unix sockets. */
  port?: number;
  /**
   * Stop accepting streams and let open ones finish for up to graceMs. Streams still open then
   * are released: ended with status OK, so Envoy completes each HTTP response without us instead
   * of failing it. Idempotent.
   */
  shutdown(graceMs: number): Promise<void>;
}

const MiB = 1024 * 1024;

/**
 * Server channel options, chosen for Envoy as the (only) client:
 * - Envoy keeps one long-lived HTTP/2 connection per worker and may ping it while idle. grpc-js
 *   does not enforce a ping policy today, so the two ping options only state the intent (never
 *   GOAWAY a pinging Envoy) and keep it if enforcement arrives.
 * - Our own keepalive pings find dead peers so their streams end (processors get `cancelled`).
 * - Every HTTP request is a stream on the same few connections: no concurrency cap.
 * - A buffered body arrives as a single message; Envoy's buffer limit is the real cap (our
 *   configs keep it at or below 64 MiB), this only has to stay well above it plus headers and
 *   attributes. Hitting it would fail the stream with an opaque RESOURCE_EXHAUSTED.
 * grpc-js already leaves http2 session memory unbounded by default, which large bodies need.
 */
export const GRPC_SERVER_OPTIONS: Readonly<ChannelOptions> = Object.freeze({
  'grpc.keepalive_permit_without_calls': 1,
  'grpc.http2.min_ping_interval_without_data_ms': 5_000,
  'grpc.keepalive_time_ms': 30_000,
  'grpc.keepalive_timeout_ms': 10_000,
  'grpc.max_concurrent_streams': 2 ** 31 - 1,
  'grpc.max_receive_message_length': 128 * MiB,
  'grpc.max_send_message_length': -1,
});

/**
 * Health service names. `liveness`: the process answers (SERVING until shutdown starts).
 * `readiness`, "" and the ext_proc service name: ready to route (synced and not draining). The
 * inference extension's endpoint-picker protocol asks for `liveness` and `readiness`; Envoy's gRPC
 * health check and most probes ask for "" or the service name.
 */
export const LIVENESS_SERVICE = 'liveness';
export const READINESS_SERVICES: ReadonlySet<string> = new Set(['', 'readiness', EXT_PROC_SERVICE_NAME]);

export async function startGrpcServer(opts: GrpcServerOptions): Promise<RunningGrpcServer> {
  const logger = opts.logger.child({ component: 'grpc-server' });
  const definitions = loadWireDefinitions();
  const watches = new Set<HealthWatch>();
  /** Release functions of the open Process streams. */
  const openStreams = new Set<() => void>();
  const server = new Server({ ...GRPC_SERVER_OPTIONS });
  // Liveness answers for the process, not the cache: it flips only when shutdown begins.
  let alive = true;
  const liveness = new Set<() => void>();
  const readiness = opts.health;
  const healthFor = (service: string): HealthSource | undefined => {
    if (service === LIVENESS_SERVICE) {
      return {
        isServing: () => alive,
        onChange: (listener) => {
          liveness.add(listener);
          return () => liveness.delete(listener);
        },
      };
    }
    return READINESS_SERVICES.has(service) ? readiness : undefined;
  };

  server.addService(definitions.externalProcessor, {
    Process: (call: ServerDuplexStream<ProcessingRequest, ProcessingResponse>) => {
      serveProcessStream(call, opts.processorFactory, logger, opts.onStreamError, openStreams);
    },
  });
  server.addService(definitions.health, {
    Check: (call: ServerUnaryCall<HealthCheckRequest, HealthCheckResponse>, callback: sendUnaryData<HealthCheckResponse>) => {
      answerHealthCheck(call.request, healthFor, callback);
    },
    Watch: (call: ServerWritableStream<HealthCheckRequest, HealthCheckResponse>) => {
      watches.add(new HealthWatch(call, healthFor(call.request.service ?? ''), (watch) => watches.delete(watch)));
    },
  });

  const target = parseAddress(opts.address);
  // Cluster workers share the primary's listening socket (the primary removed a stale file before
  // forking); a worker probing it would find it live and refuse to start.
  if (target.kind === 'unix' && !cluster.isWorker) {
    await removeStaleSocket(target.path, logger);
  }
  const credentials = opts.tls === undefined ? ServerCredentials.createInsecure() : new ReloadingServerCredentials(opts.tls);
  const port = await bind(server, target.kind === 'unix' ? `unix://${target.path}` : opts.address, credentials);
  const address = target.kind === 'unix' ? `unix://${target.path}` : `${target.host}:${port}`;
  logger.info({ address, tls: opts.tls !== undefined }, 'gRPC server listening');

  let stopping: Promise<void> | undefined;
  return {
    address,
    ...(target.kind === 'tcp' ? { port } : {}),
    shutdown(graceMs: number): Promise<void> {
      if (alive) {
        alive = false;
        for (const listener of [...liveness]) listener();
      }
      stopping ??= shutdownServer(server, watches, openStreams, graceMs, logger).finally(() => {
        if (credentials instanceof ReloadingServerCredentials) credentials.close();
      });
      return stopping;
    },
  };
}

// ---------------------------------------------------------------------------------------------
// ext_proc Process stream

function serveProcessStream(
  call: ServerDuplexStream<ProcessingRequest, ProcessingResponse>,
  processorFactory: ProcessorFactory,
  logger: Logger,
  onStreamError: ((err: Error) => void) | undefined,
  openStreams: Set<() => void>,
): void {
  let processor: StreamProcessor;
  try {
    processor = processorFactory();
  } catch (thrown) {
    const error = asError(thrown);
    logger.error({ err: error }, 'creating the stream processor failed; ending the stream with INTERNAL');
    onStreamError?.(error);
    failWithInternal(call);
    return;
  }

  // `open`: we may still write. Cleared on cancel, error, half-close and failure, never set again.
  let open = true;
  let finished = false;
  const finish = (end: StreamEnd): void => {
    open = false;
    if (finished) return;
    finished = true;
    openStreams.delete(release);
    try {
      processor.finish(end);
    } catch (thrown) {
      logger.error({ err: asError(thrown), end: end.kind }, 'stream processor finish() threw');
    }
  };

  // Shutdown: end the stream with OK. Envoy then stops sending us this request's messages and
  // completes the client's response on its own (cancelling would abort the client's response).
  const release = (): void => {
    if (finished) return;
    finish({ kind: 'released' });
    call.end();
  };
  openStreams.add(release);

  call.on('data', (request: ProcessingRequest) => {
    if (!open) return;
    let responses: ProcessingResponse[];
    try {
      responses = processor.process(request);
    } catch (thrown) {
      const error = asError(thrown);
      logger.error({ err: error, messageKind: request.request }, 'stream processor threw; ending the stream with INTERNAL');
      finish({ kind: 'error', error });
      onStreamError?.(error);
      failWithInternal(call);
      return;
    }
    let roomLeft = true;
    for (const response of responses) {
      roomLeft = call.write(response) && roomLeft;
    }
    if (!roomLeft) {
      // Envoy is not reading our replies fast enough: stop reading its messages until it does.
      call.pause();
      call.once('drain', () => {
        if (open) call.resume();
      });
    }
  });

  call.on('end', () => {
    if (!open) return;
    open = false; // Envoy sends nothing more, and we have answered everything it sent
    // Node reports a peer's RST_STREAM as end-of-input first and as the stream closing a few
    // ticks later (grpc-js then emits 'cancelled'). Waiting one macrotask tells a real
    // half-close from a cancel; a cancel arriving in that window wins.
    setImmediate(() => {
      if (finished || call.cancelled) return;
      finish({ kind: 'half-closed' });
      call.end();
    });
  });

  call.on('cancelled', () => {
    finish({ kind: 'cancelled' });
  });

  call.on('error', (err: Error) => {
    if (finished) return; // our own failWithInternal() also travels through 'error'
    logger.warn({ err }, 'ext_proc stream failed');
    finish({ kind: 'error', error: err });
    onStreamError?.(err);
  });

  // Safety net so finish() runs exactly once even if the transport goes away without telling
  // us why (e.g. a forced shutdown destroying the session).
  call.on('close', () => {
    finish({ kind: 'cancelled' });
  });
}

function failWithInternal(call: ServerDuplexStream<ProcessingRequest, ProcessingResponse>): void {
  // grpc-js turns an 'error' emitted on a server stream into the call's final status. The
  // details stay generic: the cause is in our logs, never in what Envoy may show a client.
  const status: ServerErrorResponse = Object.assign(new Error('ext_proc processor failed'), {
    code: GrpcStatus.INTERNAL,
    details: 'ext_proc processor failed',
  });
  call.emit('error', status);
}

// ---------------------------------------------------------------------------------------------
// grpc.health.v1.Health

function servingStatus(health: HealthSource): ServingStatus {
  return health.isServing() ? 'SERVING' : 'NOT_SERVING';
}

function answerHealthCheck(
  request: HealthCheckRequest,
  healthFor: (service: string) => HealthSource | undefined,
  callback: sendUnaryData<HealthCheckResponse>,
): void {
  const service = request.service ?? '';
  const health = healthFor(service);
  if (health === undefined) {
    callback({ code: GrpcStatus.NOT_FOUND, details: `unknown service "${service}"` });
    return;
  }
  callback(null, { status: servingStatus(health) });
}

/** One Watch call: sends the current status, then every change, until the client goes away. */
class HealthWatch {
  private last: ServingStatus;
  private readonly unsubscribe: () => void;
  private done = false;

  constructor(
    private readonly call: ServerWritableStream<HealthCheckRequest, HealthCheckResponse>,
    private readonly health: HealthSource | undefined,
    private readonly onDone: (watch: HealthWatch) => void,
  ) {
    // Per the health protocol an unknown name is not an error for Watch: the call stays open.
    this.last = health === undefined ? 'SERVICE_UNKNOWN' : servingStatus(health);
    this.unsubscribe = health === undefined ? () => {} : health.onChange(() => this.update());
    call.write({ status: this.last });
    call.on('cancelled', () => this.stop());
    call.on('error', () => this.stop());
    call.on('close', () => this.stop());
  }

  /** Server shutdown: tell the watcher we stop serving, then end the call cleanly. */
  endForShutdown(): void {
    if (this.done) return;
    if (this.last === 'SERVING') this.call.write({ status: 'NOT_SERVING' });
    this.stop();
    this.call.end();
  }

  private update(): void {
    if (this.done || this.health === undefined) return;
    const now = servingStatus(this.health);
    if (now === this.last) return;
    this.last = now;
    this.call.write({ status: now });
  }

  private stop(): void {
    if (this.done) return;
    this.done = true;
    this.unsubscribe();
    this.onDone(this);
  }
}

// ---------------------------------------------------------------------------------------------
// TLS

/**
 * grpc-js server credentials whose certificate can change while the server runs: grpc-js
 * subscribes to every ServerCredentials and calls `setSecureContext` on its TLS server when the
 * options change (the mechanism behind its own certificate-provider credentials). Only new TLS
 * handshakes see the new pair; established HTTP/2 connections and their streams are untouched.
 * The identity source hands over only validated pairs, so an update never leaves grpc-js without
 * credentials (it would then drop every new connection).
 */
class ReloadingServerCredentials extends ServerCredentials {
  private readonly unsubscribe: () => void;

  constructor(private readonly source: TlsIdentitySource) {
    super({ requestCert: false }, contextOptions(source.current()));
    this.unsubscribe = source.onChange((identity) => this.updateSecureContextOptions(contextOptions(identity)));
  }

  close(): void {
    this.unsubscribe();
    this.source.close();
  }

  override _equals(other: ServerCredentials): boolean {
    return other === this;
  }
}

function contextOptions(identity: TlsIdentity): { cert: Buffer; key: Buffer } {
  return { cert: identity.cert, key: identity.key };
}

// ---------------------------------------------------------------------------------------------
// binding and shutdown

export type ListenTarget = { kind: 'tcp'; host: string } | { kind: 'unix'; path: string };

export function parseAddress(address: string): ListenTarget {
  if (address.startsWith('unix:')) {
    // gRPC naming: "unix:///abs/path" (absolute) or "unix:path" (relative to the cwd).
    const rest = address.startsWith('unix://') ? address.slice('unix://'.length) : address.slice('unix:'.length);
    if (rest === '') throw new Error(`gRPC listen address "${address}" has no socket path`);
    return { kind: 'unix', path: resolvePath(rest) };
  }
  const { host, port } = splitHostPort(address);
  if (host === '' || !Number.isInteger(port) || port > 65535) {
    throw new Error(`gRPC listen address "${address}" is neither host:port nor unix:///path`);
  }
  // Kept in URI form (IPv6 in brackets): it becomes the bound address we report.
  return { kind: 'tcp', host: host.includes(':') ? `[${host}]` : host };
}

function bind(server: Server, address: string, credentials: ServerCredentials): Promise<number> {
  return new Promise((resolve, reject) => {
    server.bindAsync(address, credentials, (err, port) => {
      if (err) reject(new Error(`cannot listen on ${address}: ${err.message}`, { cause: err }));
      else resolve(port);
    });
  });
}

/**
 * A sidecar that crashed leaves its socket file behind in the shared volume, and binding over it
 * fails. Remove it only if nobody answers on it; a live socket means another instance owns it.
 */
export async function removeStaleSocket(path: string, logger: Logger): Promise<void> {
  let isSocket: boolean;
  try {
    isSocket = lstatSync(path).isSocket();
  } catch {
    return; // nothing there
  }
  if (!isSocket) return; // not ours to delete; bind will report the conflict
  const live = await new Promise<boolean>((resolve) => {
    const probe = connect(path);
    probe.once('connect', () => {
      probe.destroy();
      resolve(true);
    });
    probe.once('error', () => resolve(false));
  });
  if (live) throw new Error(`unix socket ${path} is in use by another process`);
  logger.warn({ path }, 'removing stale unix socket');
  unlinkSync(path);
}

/** After releasing the last streams, how long the sessions get to flush those final frames. */
const RELEASE_FLUSH_MS = 500;

async function shutdownServer(
  server: Server,
  watches: Set<HealthWatch>,
  openStreams: Set<() => void>,
  graceMs: number,
  logger: Logger,
): Promise<void> {
  // Watch calls never end on their own; close them so they do not hold the grace period.
  for (const watch of [...watches]) watch.endForShutdown();
  await new Promise<void>((resolve) => {
    let flushTimer: NodeJS.Timeout | undefined;
    const timer = setTimeout(() => {
      logger.warn({ graceMs, streams: openStreams.size }, 'ext_proc streams still open after the grace period; releasing them to Envoy');
      for (const release of [...openStreams]) release();
      flushTimer = setTimeout(() => {
        server.forceShutdown();
        resolve();
      }, RELEASE_FLUSH_MS);
    }, graceMs);
    server.tryShutdown((err) => {
      clearTimeout(timer);
      clearTimeout(flushTimer);
      if (err) {
        logger.warn({ err }, 'graceful gRPC shutdown failed; forcing');
        server.forceShutdown();
      }
      resolve();
    });
  });
  logger.info('gRPC server stopped');
}

function asError(thrown: unknown): Error {
  return thrown instanceof Error ? thrown : new Error(String(thrown));
}
