// The gRPC edge on node:http2, without grpc-js (`listen.transport: node-http2`, kept to compare
// with our own HTTP/2 connection, direct-transport.ts, which replaced it as the default). gRPC over
// HTTP/2 is small for what we serve: a POST per call, `content-type: application/grpc`,
// length-prefixed messages in DATA frames (grpc-framing.ts), a status in trailers. This module
// routes each stream to the Process call (process-call.ts) or the health service
// (health-service.ts), decodes and encodes with the hot-path codec (wire.ts), and keeps the
// HTTP/2 sessions healthy; it decides nothing about what to answer.
import http2 from 'node:http2';
import type { Http2SecureServer, Http2Server, IncomingHttpHeaders, ServerHttp2Session, ServerHttp2Stream } from 'node:http2';
import type { GrpcServerOptions, RunningGrpcServer } from './server.js';
import { GRPC_STATUS, statusTrailers } from './status.js';
import { HealthCall } from './health-call.js';
import { HealthService } from './health-service.js';
import { secureContextOptions } from './tls-identity.js';
import { ProcessCall, processCallContext } from '../extproc/process-service.js';
import { ProcessInput } from './message-input.js';
import { CONNECTION_WINDOW_BYTES, MAX_CONCURRENT_STREAMS, MAX_HEADER_LIST_BYTES, STREAM_WINDOW_BYTES } from './transport-settings.js';
import { bindEdge, isGrpcContentType, replyFramer, startKeepalive } from './listener.js';
import { EXT_PROC_SERVICE_NAME, HEALTH_SERVICE_NAME, loadWireDefinitions } from '../../test/support/proto-definitions.js';

const PROCESS_PATH = `/${EXT_PROC_SERVICE_NAME}/Process`;
const CHECK_PATH = `/${HEALTH_SERVICE_NAME}/Check`;
const WATCH_PATH = `/${HEALTH_SERVICE_NAME}/Watch`;

/**
 * HTTP/2 settings for Envoy as the only client: every HTTP request is a stream on the same few
 * connections (the same concurrency cap as our own transport), large windows (above), and header
 * limits well above what Envoy's ext_proc client sends, so no request dies on a header-size setting.
 */
const SERVER_OPTIONS: http2.ServerOptions = {
  settings: {
    maxConcurrentStreams: MAX_CONCURRENT_STREAMS,
    initialWindowSize: STREAM_WINDOW_BYTES,
    maxHeaderListSize: MAX_HEADER_LIST_BYTES,
  },
  maxHeaderListPairs: 4096,
  // In MB; nghttp2 refuses new streams (ENHANCE_YOUR_CALM) past it. Large bodies in flight on one
  // connection need far more than the 10 MB default; Envoy's buffer limits are the real bound.
  maxSessionMemory: 64 * 1024,
  // Envoy pings an idle connection; answering pings is nghttp2's job and never refused here.
};

const RESPONSE_HEADERS = { ':status': 200, 'content-type': 'application/grpc' } as const;
const OK_TRAILERS = statusTrailers(GRPC_STATUS.OK);

export async function startNodeHttp2Server(opts: GrpcServerOptions): Promise<RunningGrpcServer> {
  const logger = opts.logger.child({ component: 'grpc-server' });
  const definitions = loadWireDefinitions();
  const processMethod = definitions.externalProcessor.Process;
  const frameReply = replyFramer(processMethod.responseSerialize);
  const health = new HealthService(opts.health);
  const context = processCallContext(opts, logger);
  const sessions = new Set<ServerHttp2Session>();
  let stopping = false;

  const serveProcess = (stream: ServerHttp2Stream): void => {
    const call = new GrpcCall(stream);
    const processCall: ProcessCall = new ProcessCall(
      {
        write: (reply) => call.write(frameReply(reply)),
        pauseUntilDrain: () => {
          if (stream.isPaused()) return; // already waiting for the one 'drain' that resumes it
          stream.pause();
          stream.once('drain', () => {
            if (processCall.open) stream.resume();
          });
        },
        endOk: () => call.end(GRPC_STATUS.OK),
        endError: (code, details) => call.end(GRPC_STATUS[code], details),
      },
      context,
    );
    if (processCall.isFinished) {
      stream.resume(); // the call is over; discard whatever Envoy still sends
      stream.on('error', (err) => logger.debug({ err }, 'ext_proc stream error after the call ended'));
      return;
    }
    const input = new ProcessInput(processCall, processMethod.requestDeserialize, logger);
    // ProcessInput never throws: rethrowing from a 'data' listener would crash the process.
    stream.on('data', (chunk: Buffer) => input.data(chunk));
    stream.on('end', () => {
      if (!input.ended()) return;
      // An Envoy that resets without the graceful close sends END_STREAM and RST_STREAM in one
      // write. Node delivers 'end' first (on a tick) and marks the stream aborted while still
      // handling the same read, so one macrotask later a reset that came with the end of input is
      // known; a reset arriving in a later read follows a real half-close and changes nothing.
      setImmediate(() => {
        if (processCall.isFinished) return;
        if (stream.aborted) processCall.cancelled();
        else processCall.halfClosed();
      });
    });
    stream.on('aborted', () => processCall.cancelled());
    // After a cancel Node also reports the reset as a stream error; the call is finished by then.
    stream.on('error', (err) => processCall.transportFailed(err, logger));
    // Safety net: whatever way the stream goes (session destroyed, keepalive timeout), finish once.
    stream.on('close', () => processCall.cancelled());
  };

  const serveHealth = (stream: ServerHttp2Stream, method: 'Check' | 'Watch'): void => {
    const call = new HealthCall(method, health, definitions.health, new GrpcCall(stream));
    stream.on('data', (chunk: Buffer) => call.data(chunk));
    stream.on('end', () => call.end());
    stream.on('close', () => call.closed());
    stream.on('error', (err) => logger.debug({ err }, 'health call failed'));
  };

  const onStream = (stream: ServerHttp2Stream, headers: IncomingHttpHeaders): void => {
    const path = headers[':path'];
    // Every stream needs an 'error' listener (Node emits a peer's reset as one); the three
    // methods add their own, anything refused here gets this one.
    const ignoreErrors = (): void => void stream.on('error', (err) => logger.debug({ err, path }, 'HTTP/2 stream error'));
    if (headers[':method'] !== 'POST') {
      ignoreErrors();
      refuse(stream, 405, GRPC_STATUS.UNIMPLEMENTED, 'gRPC requires POST');
      return;
    }
    if (!isGrpcContentType(headers['content-type'])) {
      ignoreErrors();
      refuse(stream, 415, GRPC_STATUS.INTERNAL, 'content-type must be application/grpc');
      return;
    }
    switch (path) {
      case PROCESS_PATH:
        serveProcess(stream);
        return;
      case CHECK_PATH:
        serveHealth(stream, 'Check');
        return;
      case WATCH_PATH:
        serveHealth(stream, 'Watch');
        return;
      default:
        ignoreErrors();
        stream.resume(); // discard whatever the client sends
        new GrpcCall(stream).end(GRPC_STATUS.UNIMPLEMENTED, `unknown method ${path ?? ''}`);
    }
  };

  const onSession = (session: ServerHttp2Session): void => {
    sessions.add(session);
    if (stopping) {
      session.close();
      return;
    }
    try {
      session.setLocalWindowSize(CONNECTION_WINDOW_BYTES);
    } catch (err) {
      logger.debug({ err }, 'could not widen the HTTP/2 connection window');
    }
    const keepalive = startKeepalive(
      {
        get closed() {
          return session.closed || session.destroyed;
        },
        ping: (onAck) =>
          session.ping((err) => {
            onAck();
            if (err !== null) logger.debug({ err }, 'keepalive ping failed');
          }),
        destroy: () => session.destroy(),
      },
      logger,
    );
    session.on('close', () => {
      clearInterval(keepalive);
      sessions.delete(session);
    });
    session.on('error', (err) => logger.debug({ err }, 'HTTP/2 session error'));
  };

  const tls = opts.tls;
  const server: Http2Server | Http2SecureServer =
    tls === undefined
      ? http2.createServer(SERVER_OPTIONS)
      : http2.createSecureServer({ ...SERVER_OPTIONS, ...secureContextOptions(tls.current()), allowHTTP1: false });
  // Only new TLS handshakes see a replaced pair; open connections and their streams carry on.
  const unsubscribeTls =
    tls === undefined
      ? () => {}
      : tls.onChange((identity) => (server as Http2SecureServer).setSecureContext(secureContextOptions(identity)));
  server.on('session', onSession);
  server.on('stream', onStream);
  server.on('sessionError', (err) => logger.debug({ err }, 'HTTP/2 session error'));
  return bindEdge(server, {
    address: opts.address,
    transport: 'node-http2',
    tls,
    unsubscribeTls,
    connections: sessions,
    openStreams: context.openStreams,
    logger,
    onShutdown: () => {
      stopping = true;
      health.stopServing();
    },
  });
}

/**
 * The response side of one gRPC call on an HTTP/2 stream: headers go out with the first message
 * (so an error before any message is a trailers-only response, as gRPC expects), the status in
 * trailers. Writes after the stream closed are dropped: the peer is gone.
 */
class GrpcCall {
  private headersSent = false;
  private ended = false;
  private trailers: Record<string, string> = OK_TRAILERS;

  constructor(private readonly stream: ServerHttp2Stream) {}

  /** False when the stream's write buffer is full. */
  write(frame: Buffer): boolean {
    const stream = this.stream;
    if (this.ended || stream.destroyed || stream.closed) return true;
    if (!this.headersSent) {
      this.headersSent = true;
      stream.respond(RESPONSE_HEADERS, { waitForTrailers: true });
      stream.once('wantTrailers', () => this.sendTrailers());
    }
    return stream.write(frame);
  }

  end(code: number, message?: string): void {
    const stream = this.stream;
    if (this.ended || stream.destroyed || stream.closed) return;
    this.ended = true;
    this.trailers = code === GRPC_STATUS.OK && message === undefined ? OK_TRAILERS : statusTrailers(code, message);
    if (this.headersSent) {
      stream.end(); // then 'wantTrailers'
      return;
    }
    stream.respond({ ...RESPONSE_HEADERS, ...this.trailers }, { endStream: true });
  }

  private sendTrailers(): void {
    if (this.stream.destroyed || this.stream.closed) return;
    this.stream.sendTrailers(this.trailers);
  }
}

/** A plain HTTP refusal for what is not a gRPC call at all (wrong method or content type). */
function refuse(stream: ServerHttp2Stream, httpStatus: number, grpcStatus: number, message: string): void {
  stream.resume();
  stream.respond({ ':status': httpStatus, 'content-type': 'text/plain; charset=utf-8', ...statusTrailers(grpcStatus, message) });
  stream.end(message);
}
