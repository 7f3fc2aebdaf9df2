// gRPC on @grpc/grpc-js (the only module that talks to it), selectable with `listen.transport:
// grpc-js` as the conservative fallback. The served methods keep their own codec: grpc-js gets
// each method's decode and encode as the method's (de)serializers, so the bytes on the wire are the
// native transport's. It translates grpc-js call events into the BidiCall interface (bidi-call.ts)
// and answers health from the shared HealthService; what to answer is decided there.
import cluster from 'node:cluster';
import type { EventEmitter } from 'node:events';
import { constants as h2constants } from 'node:http2';
import type { IncomingHttpHeaders, ServerHttp2Session, ServerHttp2Stream } from 'node:http2';
import { Server as NetServer } from 'node:net';
import { performance } from 'node:perf_hooks';
import { Server, ServerCredentials, status as GrpcStatus } from '@grpc/grpc-js';
import type {
  ChannelOptions,
  MethodDefinition,
  ServerDuplexStream,
  ServerErrorResponse,
  ServerUnaryCall,
  ServerWritableStream,
  ServiceDefinition,
  sendUnaryData,
} from '@grpc/grpc-js';
import type { Logger } from 'pino';
import { serviceOf } from './bidi-call.js';
import type { CallErrorCode } from './bidi-call.js';
import { FRAME_HEADER_BYTES, joinedFrame } from './framing.js';
import {
  decodeHealthCheckRequest,
  decodeHealthCheckResponse,
  encodeHealthCheckRequest,
  encodeHealthCheckResponse,
  HEALTH_SERVICE_NAME,
} from './health-messages.js';
import type { HealthCheckRequest, HealthCheckResponse } from './health-messages.js';
import { HealthService } from './health-service.js';
import { GRPC_STATUS, statusTrailers } from './status.js';
import { openCalls } from './listener.js';
import { dialAddress, parseAddress, removeStaleSocket } from './listen-address.js';
import type { AnyBidiMethod, GrpcServerOptions, RunningGrpcServer } from './server-options.js';
import type { TlsIdentitySource } from './tls-identity.js';
import { RAPID_RESET_EXPLANATION, RapidResetCount } from '../http2/abuse-limits.js';
import { protocolEventReporter } from './protocol-events.js';
import type { ProtocolEventReport } from './protocol-events.js';
import type { ReadGarbageObserver } from '../util/external-garbage.js';
import { clientVerificationOptions, secureContextOptions } from './tls-identity.js';
import {
  KEEPALIVE_INTERVAL_MS,
  KEEPALIVE_TIMEOUT_MS,
  MAX_CONCURRENT_STREAMS,
  MAX_RECEIVE_MESSAGE_BYTES,
  RELEASE_FLUSH_MS,
} from './transport-settings.js';

/**
 * Server channel options, chosen for Envoy as the (only) client:
 * - Envoy keeps one long-lived HTTP/2 connection per worker and may ping it while idle. grpc-js
 *   does not enforce a ping policy today, so the two ping options only state the intent (never
 *   GOAWAY a pinging Envoy) and keep it if enforcement arrives.
 * - Every HTTP request is a stream on the same few connections, capped as on the other transports
 *   (Envoy opens another connection past the cap).
 * grpc-js already leaves http2 session memory unbounded by default, which large bodies need.
 */
const GRPC_SERVER_OPTIONS: Readonly<ChannelOptions> = Object.freeze({
  'grpc.keepalive_permit_without_calls': 1,
  'grpc.http2.min_ping_interval_without_data_ms': 5_000,
  'grpc.keepalive_time_ms': KEEPALIVE_INTERVAL_MS,
  'grpc.keepalive_timeout_ms': KEEPALIVE_TIMEOUT_MS,
  'grpc.max_concurrent_streams': MAX_CONCURRENT_STREAMS,
  'grpc.max_receive_message_length': MAX_RECEIVE_MESSAGE_BYTES,
  'grpc.max_send_message_length': -1,
});

export async function startGrpcJsServer(opts: GrpcServerOptions): Promise<RunningGrpcServer> {
  const logger = opts.logger.child({ component: 'grpc-server' });
  const health = new HealthService(
    opts.health,
    opts.methods.map((method) => serviceOf(method.path)),
  );
  const server = new Server({
    ...GRPC_SERVER_OPTIONS,
    ...(opts.idleTimeoutMs === undefined ? {} : { 'grpc.max_connection_idle_ms': opts.idleTimeoutMs }),
  });

  for (const method of opts.methods) {
    const name = method.path.slice(method.path.lastIndexOf('/') + 1);
    server.addService(bidiService(method, name, opts.readGarbage), {
      [name]: (call: ServerDuplexStream<unknown, unknown>) => serveBidi(call, method, opts.readGarbage),
    });
  }
  server.addService(HEALTH_SERVICE, {
    Check: (call: ServerUnaryCall<HealthCheckRequest, HealthCheckResponse>, callback: sendUnaryData<HealthCheckResponse>) => {
      const answer = health.check(call.request);
      if (answer.found) callback(null, answer.response);
      else callback({ code: GrpcStatus.NOT_FOUND, details: answer.details });
    },
    Watch: (call: ServerWritableStream<HealthCheckRequest, HealthCheckResponse>) => {
      const watch = health.watch(
        call.request,
        (response) => call.write(response),
        () => call.end(),
      );
      call.on('cancelled', () => watch.stop());
      call.on('error', () => watch.stop());
      call.on('close', () => watch.stop());
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
  const http2Servers = grpcJsHttp2Servers(server);
  checkRequestsBeforeGrpcJs(http2Servers);
  const report = protocolEventReporter<'connection_refused' | 'rapid_reset'>(opts, logger);
  capConnections(http2Servers, opts, report);
  guardRapidResets(http2Servers, report);
  const address = dialAddress(target, port);
  logger.info({ address, tls: opts.tls !== undefined, transport: 'grpc-js' }, 'gRPC server listening');

  let stopping: Promise<void> | undefined;
  return {
    address,
    ...(target.kind === 'tcp' ? { port } : {}),
    shutdown(graceMs: number): Promise<void> {
      health.stopServing();
      stopping ??= shutdownServer(server, opts.methods, graceMs, logger).finally(() => {
        if (credentials instanceof ReloadingServerCredentials) credentials.close();
      });
      return stopping;
    },
  };
}

// ---------------------------------------------------------------------------------------------
// service definitions: our own codecs as grpc-js's (de)serializers

/** A bidirectional-streaming method as grpc-js's service definition of one method. */
function bidiService(method: AnyBidiMethod, name: string, readGarbage: ReadGarbageObserver | undefined): ServiceDefinition {
  const definition: MethodDefinition<unknown, unknown> = {
    path: method.path,
    requestStream: true,
    responseStream: true,
    requestDeserialize:
      readGarbage === undefined
        ? (bytes) => method.decode(bytes)
        : (bytes) => {
            readGarbage.read(bytes.length);
            return method.decode(bytes);
          },
    // grpc-js frames messages itself: the bare message after our prefix (a view; a reply framed in
    // pieces, a long streamed body, is joined first).
    responseSerialize: (reply) => joinedFrame(method.frame(reply)).subarray(FRAME_HEADER_BYTES),
    // A server never encodes requests or decodes its own replies.
    requestSerialize: unusedDirection,
    responseDeserialize: unusedDirection,
  };
  return { [name]: definition };
}

function unusedDirection(): never {
  throw new Error('a gRPC server does not encode requests or decode replies');
}

const HEALTH_SERVICE: ServiceDefinition = {
  Check: healthMethod('Check', false),
  Watch: healthMethod('Watch', true),
};

function healthMethod(name: string, responseStream: boolean): MethodDefinition<HealthCheckRequest, HealthCheckResponse> {
  return {
    path: `/${HEALTH_SERVICE_NAME}/${name}`,
    requestStream: false,
    responseStream,
    requestSerialize: encodeHealthCheckRequest,
    requestDeserialize: decodeHealthCheckRequest,
    responseSerialize: encodeHealthCheckResponse,
    responseDeserialize: decodeHealthCheckResponse,
  };
}

// ---------------------------------------------------------------------------------------------
// a bidirectional-streaming call

function serveBidi(call: ServerDuplexStream<unknown, unknown>, method: AnyBidiMethod, readGarbage: ReadGarbageObserver | undefined): void {
  const bidi = method.start({
    write: (reply) => call.write(reply),
    pauseUntilDrain: () => {
      call.pause();
      call.once('drain', () => {
        if (bidi.open) call.resume();
      });
    },
    endOk: () => call.end(),
    endError: (code, details) => failWith(call, code, details),
  });
  if (bidi.isFinished) return;

  call.on('data', (request: unknown) => bidi.message(request));

  call.on('end', () => {
    if (!bidi.inputEnded()) return;
    // Node reports a peer's RST_STREAM as end-of-input first and as the stream closing a few
    // ticks later (grpc-js then emits 'cancelled'). Waiting one macrotask tells a real
    // half-close from a cancel; a cancel arriving in that window wins.
    setImmediate(() => {
      if (bidi.isFinished || call.cancelled) return;
      bidi.halfClosed();
    });
  });

  call.on('cancelled', () => bidi.cancelled());
  // Our own failWith() also travels through 'error'; the call is finished by then.
  call.on('error', (err: Error) => bidi.transportFailed(err));
  // Safety net so the call ends exactly once even if the transport goes away without telling
  // us why (e.g. a forced shutdown destroying the session).
  call.on('close', () => {
    bidi.cancelled();
    readGarbage?.streamEnded();
  });
}

function failWith(call: ServerDuplexStream<unknown, unknown>, code: CallErrorCode, details: string): void {
  // grpc-js turns an 'error' emitted on a server stream into the call's final status.
  const status: ServerErrorResponse = Object.assign(new Error(details), { code: GrpcStatus[code], details });
  call.emit('error', status);
}

// ---------------------------------------------------------------------------------------------
// what grpc-js does not check: the HTTP method, and a compressed message nobody negotiated

/** The grpc-encoding we hand grpc-js for a call that sent none: no decompressor has this name. */
const NO_ENCODING_SENT = 'none-negotiated';

/**
 * Puts our checks in front of grpc-js's stream handler, so this transport answers as the native one
 * does (native-transport.ts; tests in test/unit/grpc/server.test.ts run both):
 * - gRPC is POST only: any other method gets 405 with grpc-status UNIMPLEMENTED, and never reaches
 *   a method (grpc-js would serve a GET like a POST).
 * - A message flagged compressed on a call that sent no grpc-encoding must fail the call (gRPC's
 *   HTTP/2 protocol: the flag needs an encoding); grpc-js would read it as identity. Such a call
 *   reaches grpc-js with an encoding that names no decompressor, so grpc-js's own check ends it
 *   with UNIMPLEMENTED before the message is decoded; uncompressed messages ignore the encoding.
 * grpc-js has no public hook before its handler: see grpcJsHttp2Servers.
 */
function checkRequestsBeforeGrpcJs(http2Servers: readonly EventEmitter[]): void {
  for (const http2Server of http2Servers) {
    const grpcJsHandlers = http2Server.listeners('stream') as Array<(...args: unknown[]) => void>;
    if (grpcJsHandlers.length === 0) throw new Error('@grpc/grpc-js: no stream handler on its HTTP/2 server (a grpc-js upgrade?)');
    http2Server.removeAllListeners('stream');
    http2Server.on('stream', (stream: ServerHttp2Stream, headers: IncomingHttpHeaders, ...rest: unknown[]) => {
      if (headers[':method'] !== 'POST') {
        refuseNonPost(stream);
        return;
      }
      if (headers['grpc-encoding'] === undefined) headers['grpc-encoding'] = NO_ENCODING_SENT;
      for (const handler of grpcJsHandlers) handler.call(http2Server, stream, headers, ...rest);
    });
  }
}

/**
 * The node:http2 servers grpc-js listens with. grpc-js offers no public hook before its handler nor a
 * connection cap, so this reads its `http2Servers` map; a grpc-js whose internals moved fails here
 * at start, loudly, rather than serving without the checks and the cap.
 */
function grpcJsHttp2Servers(server: Server): EventEmitter[] {
  const internals = (server as unknown as { http2Servers?: unknown }).http2Servers;
  if (!(internals instanceof Map) || internals.size === 0)
    throw new Error('@grpc/grpc-js: its HTTP/2 servers are not where this transport expects them (a grpc-js upgrade?)');
  return [...(internals.keys() as Iterable<EventEmitter>)];
}

/**
 * listen.maxConnections on grpc-js: its HTTP/2 servers are net.Servers underneath (tls.Server for
 * TLS, so handshakes count), and Node closes a socket over `maxConnections` at once and says so
 * ('drop'), as on the native transport.
 */
function capConnections(
  http2Servers: readonly EventEmitter[],
  opts: GrpcServerOptions,
  report: ProtocolEventReport<'connection_refused'>,
): void {
  if (opts.maxConnections === undefined) return;
  for (const http2Server of http2Servers) {
    if (!(http2Server instanceof NetServer)) throw new Error('@grpc/grpc-js: its HTTP/2 server is not a net.Server (a grpc-js upgrade?)');
    http2Server.maxConnections = opts.maxConnections;
    http2Server.on('drop', (peer?: { remoteAddress?: string }) => {
      report('connection_refused', { peer: peer?.remoteAddress, maxConnections: opts.maxConnections });
    });
  }
}

/**
 * Rapid reset and stream churn on grpc-js, counted by the native transport's rule (RapidResetCount
 * in http2/abuse-limits.ts): a stream the peer reset soon after opening it, before any answer of
 * ours (no response headers sent yet: grpc-js sends them with the first reply), whatever DATA it
 * carried. Too many end the connection with GOAWAY ENHANCE_YOUR_CALM and count `rapid_reset`, as
 * on the native transport. node:http2 on Node 20 has no option for this (`streamResetBurst` and
 * `streamResetRate` came later, nodejs/node#54875; Node 20 ignores them), and nghttp2's fixed
 * limit (1,000 resets of any kind, then 33 a second) answers INTERNAL_ERROR and counts nothing;
 * ours trips first (at 500).
 */
function guardRapidResets(http2Servers: readonly EventEmitter[], report: ProtocolEventReport<'rapid_reset'>): void {
  for (const http2Server of http2Servers) {
    http2Server.on('session', (session: ServerHttp2Session) => {
      const resets = new RapidResetCount();
      let ended = false;
      session.on('stream', (stream: ServerHttp2Stream) => {
        resets.opened();
        const opened = performance.now();
        stream.once('close', () => {
          // Our own ends (NO_ERROR) and the streams of a connection going away are no one's resets.
          if (ended || session.destroyed || stream.rstCode === h2constants.NGHTTP2_NO_ERROR) return;
          if (!resets.resetIsTooMany(performance.now() - opened, !stream.headersSent)) return;
          ended = true;
          report('rapid_reset', { peer: session.socket?.remoteAddress });
          session.goaway(h2constants.NGHTTP2_ENHANCE_YOUR_CALM, stream.id ?? 0, Buffer.from(RAPID_RESET_EXPLANATION));
          // GOAWAY first, then the socket: destroying in the same turn could drop the frame unsent.
          setImmediate(() => session.destroy());
        });
      });
    });
  }
}

function refuseNonPost(stream: ServerHttp2Stream): void {
  const message = 'gRPC requires POST';
  stream.on('error', () => undefined); // the peer may be gone already; nothing to do about it
  stream.respond({ ':status': 405, 'content-type': 'text/plain; charset=utf-8', ...statusTrailers(GRPC_STATUS.UNIMPLEMENTED, message) });
  stream.end(message);
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
    super(clientVerificationOptions(source.current()), secureContextOptions(source.current()));
    this.unsubscribe = source.onChange((identity) => this.updateSecureContextOptions(secureContextOptions(identity)));
  }

  close(): void {
    this.unsubscribe();
    this.source.close();
  }

  override _equals(other: ServerCredentials): boolean {
    return other === this;
  }
}

// ---------------------------------------------------------------------------------------------
// binding and shutdown

function bind(server: Server, address: string, credentials: ServerCredentials): Promise<number> {
  return new Promise((resolve, reject) => {
    server.bindAsync(address, credentials, (err, port) => {
      if (err) reject(new Error(`cannot listen on ${address}: ${err.message}`, { cause: err }));
      else resolve(port);
    });
  });
}

async function shutdownServer(server: Server, methods: readonly AnyBidiMethod[], graceMs: number, logger: Logger): Promise<void> {
  for (const method of methods) method.shutdownStarted?.();
  await new Promise<void>((resolve) => {
    let flushTimer: NodeJS.Timeout | undefined;
    const timer = setTimeout(() => {
      logger.warn({ graceMs, streams: openCalls(methods) }, 'gRPC streams still open after the grace period; releasing them');
      for (const method of methods) method.releaseOpenCalls();
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
