// The gRPC edge on @grpc/grpc-js (the only module that talks to it), selectable with
// `listen.transport: grpc-js`. It translates grpc-js call events into the shared Process call
// (process-call.ts) and health service (health-service.ts); what to answer is decided there.
import cluster from 'node:cluster';
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
import type { GrpcServerOptions, RunningGrpcServer } from './server.js';
import { HealthService } from './health-service.js';
import { dialAddress, parseAddress, removeStaleSocket } from './listen-address.js';
import type { ProcessingRequest, ProcessingResponse } from '../extproc/messages.js';
import { ProcessCall, processCallContext } from '../extproc/process-service.js';
import type { ProcessCallContext } from '../extproc/process-service.js';
import type { TlsIdentitySource } from './tls-identity.js';
import { secureContextOptions } from './tls-identity.js';
import {
  KEEPALIVE_INTERVAL_MS,
  KEEPALIVE_TIMEOUT_MS,
  MAX_CONCURRENT_STREAMS,
  MAX_RECEIVE_MESSAGE_BYTES,
  RELEASE_FLUSH_MS,
} from './transport-settings.js';
import { loadWireDefinitions } from '../../test/support/proto-definitions.js';
import type { HealthCheckRequest, HealthCheckResponse } from '../../test/support/proto-definitions.js';

/**
 * Server channel options, chosen for Envoy as the (only) client:
 * - Envoy keeps one long-lived HTTP/2 connection per worker and may ping it while idle. grpc-js
 *   does not enforce a ping policy today, so the two ping options only state the intent (never
 *   GOAWAY a pinging Envoy) and keep it if enforcement arrives.
 * - Every HTTP request is a stream on the same few connections, capped as on the other transports
 *   (Envoy opens another connection past the cap).
 * grpc-js already leaves http2 session memory unbounded by default, which large bodies need.
 */
export const GRPC_SERVER_OPTIONS: Readonly<ChannelOptions> = Object.freeze({
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
  const definitions = loadWireDefinitions();
  const health = new HealthService(opts.health);
  const context = processCallContext(opts, logger);
  const server = new Server({ ...GRPC_SERVER_OPTIONS });

  server.addService(definitions.externalProcessor, {
    Process: (call: ServerDuplexStream<ProcessingRequest, ProcessingResponse>) => serveProcessStream(call, context),
  });
  server.addService(definitions.health, {
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
  const address = dialAddress(target, port);
  logger.info({ address, tls: opts.tls !== undefined, transport: 'grpc-js' }, 'gRPC server listening');

  let stopping: Promise<void> | undefined;
  return {
    address,
    ...(target.kind === 'tcp' ? { port } : {}),
    shutdown(graceMs: number): Promise<void> {
      health.stopServing();
      stopping ??= shutdownServer(server, context.openStreams, graceMs, logger).finally(() => {
        if (credentials instanceof ReloadingServerCredentials) credentials.close();
      });
      return stopping;
    },
  };
}

// ---------------------------------------------------------------------------------------------
// ext_proc Process stream

function serveProcessStream(call: ServerDuplexStream<ProcessingRequest, ProcessingResponse>, context: ProcessCallContext): void {
  const processCall = new ProcessCall(
    {
      write: (reply) => call.write(reply),
      pauseUntilDrain: () => {
        call.pause();
        call.once('drain', () => {
          if (processCall.open) call.resume();
        });
      },
      endOk: () => call.end(),
      endError: (code, details) => failWith(call, code, details),
    },
    context,
  );
  if (processCall.isFinished) return;

  call.on('data', (request: ProcessingRequest) => processCall.message(request));

  call.on('end', () => {
    if (!processCall.open) return;
    processCall.open = false; // Envoy sends nothing more, and we have answered everything it sent
    // Node reports a peer's RST_STREAM as end-of-input first and as the stream closing a few
    // ticks later (grpc-js then emits 'cancelled'). Waiting one macrotask tells a real
    // half-close from a cancel; a cancel arriving in that window wins.
    setImmediate(() => {
      if (processCall.isFinished || call.cancelled) return;
      processCall.halfClosed();
    });
  });

  call.on('cancelled', () => processCall.cancelled());
  // Our own failWith() also travels through 'error'; the call is finished by then.
  call.on('error', (err: Error) => processCall.transportFailed(err, context.logger));
  // Safety net so finish() runs exactly once even if the transport goes away without telling
  // us why (e.g. a forced shutdown destroying the session).
  call.on('close', () => processCall.cancelled());
}

function failWith(
  call: ServerDuplexStream<ProcessingRequest, ProcessingResponse>,
  code: 'INTERNAL' | 'RESOURCE_EXHAUSTED',
  details: string,
): void {
  // grpc-js turns an 'error' emitted on a server stream into the call's final status.
  const status: ServerErrorResponse = Object.assign(new Error(details), { code: GrpcStatus[code], details });
  call.emit('error', status);
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
    super({ requestCert: false }, secureContextOptions(source.current()));
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

async function shutdownServer(server: Server, openStreams: Set<() => void>, graceMs: number, logger: Logger): Promise<void> {
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
