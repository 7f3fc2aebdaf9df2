// gRPC on our own HTTP/2 connection (http2/) over plain `net`/`tls` sockets (`listen.transport:
// native`, the default). gRPC over HTTP/2 is small for what we serve: a POST per call,
// `content-type: application/grpc`, length-prefixed messages in DATA frames (framing.ts), a status
// in trailers. This module routes each stream by :path to a served method (through the BidiCall
// interface, bidi-call.ts) or the health service (health-service.ts), keeps the connections
// healthy, and turns the connection's read-to-write timing into the turnaround metric; it decides
// nothing about what to answer.
import { createServer as createNetServer } from 'node:net';
import type { Server as NetServer, Socket } from 'node:net';
import type { Server as TlsServer } from 'node:tls';
import { Http2Connection } from '../http2/connection.js';
import type { ProtocolEventKind } from '../http2/connection.js';
import type { Http2Stream, StreamClose } from '../http2/stream.js';
import { ErrorCode } from '../http2/frames.js';
import { encodeHeaderBlock } from '../http2/hpack-encoder.js';
import type { FramedMessage } from './framing.js';
import { HealthCall } from './health-call.js';
import { protocolEventReporter } from './protocol-events.js';
import { HEALTH_SERVICE_NAME } from './health-messages.js';
import { HealthService } from './health-service.js';
import { bindListener, isGrpcContentType, startKeepalive } from './listener.js';
import { MessageInput } from './message-input.js';
import { PeerResetError, serviceOf } from './bidi-call.js';
import type { AnyBidiMethod, GrpcServerOptions, RunningGrpcServer } from './server-options.js';
import { GRPC_STATUS, statusTrailers } from './status.js';
import { clientVerificationOptions, secureContextOptions } from './tls-identity.js';
import { CONNECTION_WINDOW_BYTES, MAX_CONCURRENT_STREAMS, MAX_HEADER_LIST_BYTES, STREAM_WINDOW_BYTES } from './transport-settings.js';

const CHECK_PATH = `/${HEALTH_SERVICE_NAME}/Check`;
const WATCH_PATH = `/${HEALTH_SERVICE_NAME}/Watch`;

type Fields = ReadonlyArray<readonly [string, string]>;
const RESPONSE_FIELDS: Fields = [
  [':status', '200'],
  ['content-type', 'application/grpc'],
];
const RESPONSE_HEADERS = encodeHeaderBlock(RESPONSE_FIELDS);
const OK_TRAILERS = encodeHeaderBlock(statusFields(GRPC_STATUS.OK));

function statusFields(code: number, message?: string): Fields {
  return Object.entries(statusTrailers(code, message));
}

export async function startNativeServer(opts: GrpcServerOptions): Promise<RunningGrpcServer> {
  const readGarbage = opts.readGarbage;
  const logger = opts.logger.child({ component: 'grpc-server' });
  const methods = new Map<string, AnyBidiMethod>(opts.methods.map((method) => [method.path, method]));
  const health = new HealthService(
    opts.health,
    opts.methods.map((method) => serviceOf(method.path)),
  );
  const connections = new Set<Http2Connection>();
  let stopping = false;

  const serveBidi = (stream: Http2Stream, method: AnyBidiMethod): void => {
    const reply = new GrpcCall(stream);
    const call = method.start({
      write: (message) => reply.write(method.frame(message)),
      // Nothing to do: the connection stopped reading the peer when its write backed up.
      pauseUntilDrain: () => undefined,
      endOk: () => reply.end(GRPC_STATUS.OK),
      endError: (code, details) => reply.end(GRPC_STATUS[code], details),
    });
    if (call.isFinished) return; // ended with an error already; what the peer still sends is dropped
    const input = new MessageInput(call, (bytes) => method.decode(bytes), logger);
    stream.handlers = {
      onData: (chunk) => input.data(chunk),
      // Told after the whole read it came in: an END_STREAM that came with a RST_STREAM (Envoy's
      // abrupt close) has already closed the stream as reset and never gets here.
      onEnd: () => {
        if (input.ended()) call.halfClosed();
      },
      onClose: (close) => {
        const failure = streamFailure(close);
        if (failure === undefined) call.cancelled();
        else call.transportFailed(failure);
        readGarbage?.streamEnded();
      },
    };
  };

  const serveHealth = (stream: Http2Stream, method: 'Check' | 'Watch'): void => {
    const call = new HealthCall(method, health, new GrpcCall(stream));
    stream.handlers = {
      onData: (chunk) => call.data(chunk),
      onEnd: () => call.end(),
      onClose: (close) => {
        call.closed();
        const failure = streamFailure(close);
        if (failure !== undefined) logger.debug({ err: failure }, 'health call failed');
      },
    };
  };

  const onStream = (stream: Http2Stream, headers: Fields): void => {
    let httpMethod: string | undefined;
    let path: string | undefined;
    let contentType: string | undefined;
    for (const [name, value] of headers) {
      if (name === ':method') httpMethod = value;
      else if (name === ':path') path = value;
      else if (name === 'content-type') contentType = value;
    }
    if (httpMethod !== 'POST') {
      refuse(stream, 405, GRPC_STATUS.UNIMPLEMENTED, 'gRPC requires POST');
      return;
    }
    if (!isGrpcContentType(contentType)) {
      refuse(stream, 415, GRPC_STATUS.INTERNAL, 'content-type must be application/grpc');
      return;
    }
    const served = path === undefined ? undefined : methods.get(path);
    if (served !== undefined) {
      serveBidi(stream, served);
      return;
    }
    switch (path) {
      case CHECK_PATH:
        serveHealth(stream, 'Check');
        return;
      case WATCH_PATH:
        serveHealth(stream, 'Watch');
        return;
      default:
        new GrpcCall(stream).end(GRPC_STATUS.UNIMPLEMENTED, `unknown method ${path ?? ''}`);
    }
  };

  const onProtocolEvent = protocolEventReporter<ProtocolEventKind | ListenerEventKind>(opts, logger);

  const serveConnection = (socket: Socket): void => {
    if (stopping) {
      socket.destroy();
      return;
    }
    const connection: Http2Connection = new Http2Connection(socket, {
      streamWindow: STREAM_WINDOW_BYTES,
      connectionWindow: CONNECTION_WINDOW_BYTES,
      maxHeaderListBytes: MAX_HEADER_LIST_BYTES,
      maxConcurrentStreams: MAX_CONCURRENT_STREAMS,
      onStream,
      onProtocolEvent,
      // Every DATA write on our streams is one gRPC message (a reply): the connection's
      // read-to-write timing, per write, is the turnaround of the replies it carries.
      ...(opts.onTurnaround === undefined ? {} : { onReadAnswered: opts.onTurnaround }),
      ...(readGarbage === undefined ? {} : { onBytesRead: (bytes: number) => readGarbage.read(bytes) }),
    });
    connections.add(connection);
    const keepalive = startKeepalive(connection, logger);
    connection.onClose(() => {
      clearInterval(keepalive);
      connections.delete(connection);
    });
  };

  const tls = opts.tls;
  const server: NetServer | TlsServer =
    tls === undefined
      ? createNetServer(serveConnection)
      : // Imported only here: a plaintext listener (the sidecar default) never initialises Node's TLS.
        (await import('node:tls')).createServer(
          { ...secureContextOptions(tls.current()), ...clientVerificationOptions(tls.current()), ALPNProtocols: ['h2'] },
          serveConnection,
        );
  // Only new TLS handshakes see a replaced pair; open connections and their streams carry on.
  const unsubscribeTls =
    tls === undefined ? () => {} : tls.onChange((identity) => (server as TlsServer).setSecureContext(secureContextOptions(identity)));
  server.on('tlsClientError', (err) => logger.debug({ err }, 'TLS handshake failed'));
  // Over the cap, Node closes a new socket at once and tells us ('drop'): the peer sees the close.
  if (opts.maxConnections !== undefined) server.maxConnections = opts.maxConnections;
  server.on('drop', (peer?: { remoteAddress?: string }) =>
    onProtocolEvent('connection_refused', { peer: peer?.remoteAddress, maxConnections: opts.maxConnections }),
  );
  const idleSweep = opts.idleTimeoutMs === undefined ? undefined : sweepIdle(connections, opts.idleTimeoutMs, onProtocolEvent);
  return bindListener(server, {
    address: opts.address,
    transport: 'native',
    tls,
    unsubscribeTls,
    connections: connections,
    methods: opts.methods,
    logger,
    onShutdown: () => {
      stopping = true;
      clearInterval(idleSweep);
      health.stopServing();
    },
  });
}

/** What the listener itself reports, beside the connections' events. */
type ListenerEventKind = 'connection_refused' | 'idle_closed';

/**
 * Closes connections that had no open stream for `idleTimeoutMs`, gracefully (GOAWAY NO_ERROR, then
 * the socket once the peer read it): a peer that only answers PINGs holds no connection forever.
 * One timer for the listener, checking a few times per timeout: close within 1.25 × the timeout.
 */
function sweepIdle(
  connections: ReadonlySet<Http2Connection>,
  idleTimeoutMs: number,
  report: (kind: ListenerEventKind, details: Record<string, unknown>) => void,
): NodeJS.Timeout {
  const timer = setInterval(
    () => {
      const now = performance.now();
      for (const connection of connections) {
        if (connection.idleMs(now) < idleTimeoutMs || connection.closing) continue;
        report('idle_closed', { idleTimeoutMs });
        connection.close();
      }
    },
    Math.max(10, idleTimeoutMs / 4),
  );
  timer.unref();
  return timer;
}

/** A peer's reset other than CANCEL, or our own reset: the stream failed rather than being cancelled. */
function streamFailure(close: StreamClose): Error | undefined {
  if (close.kind === 'reset' && close.code !== ErrorCode.CANCEL && close.code !== ErrorCode.NO_ERROR) {
    return new PeerResetError(close.code);
  }
  if (close.kind === 'local-reset') return new Error(`stream reset by us (HTTP/2 error code ${close.code})`);
  return undefined;
}

/**
 * The response side of one gRPC call: headers go out with the first message (so an error before
 * any message is a trailers-only response, as gRPC expects), the status in trailers. Writes after
 * the stream closed are dropped: the peer is gone.
 */
class GrpcCall {
  private ended = false;

  constructor(private readonly stream: Http2Stream) {}

  /** False when the connection's write buffer is full. */
  write(frame: FramedMessage): boolean {
    const stream = this.stream;
    if (this.ended || stream.closed) return true;
    if (!stream.headersSent) stream.respond(RESPONSE_HEADERS);
    return Buffer.isBuffer(frame) ? stream.write(frame) : stream.writeParts(frame);
  }

  end(code: number, message?: string): void {
    const stream = this.stream;
    if (this.ended || stream.closed) return;
    this.ended = true;
    const plainOk = code === GRPC_STATUS.OK && message === undefined;
    if (stream.headersSent) {
      stream.end(plainOk ? OK_TRAILERS : encodeHeaderBlock(statusFields(code, message)));
      return;
    }
    stream.respond(encodeHeaderBlock([...RESPONSE_FIELDS, ...statusFields(code, message)]), true);
  }
}

/**
 * Past this much request body, a request that is not a gRPC call is answered at once (and told to
 * stop sending, RST_STREAM NO_ERROR) instead of being read to its end.
 */
const REFUSED_BODY_MAX_BYTES = 64 * 1024;

/**
 * A plain HTTP refusal for what is not a gRPC call at all (wrong method or content type), sent when
 * the request has ended: the ordinary exchange, so the peer's frames that follow are checked by
 * the HTTP/2 rules like any other request's (content-length, trailers) rather than racing an early
 * answer. Its body is read and dropped, up to REFUSED_BODY_MAX_BYTES.
 */
function refuse(stream: Http2Stream, httpStatus: number, grpcStatus: number, message: string): void {
  let bodyBytes = 0;
  const answer = (): void => {
    if (stream.closed || stream.localEnded) return;
    stream.respond(
      encodeHeaderBlock([
        [':status', String(httpStatus)],
        ['content-type', 'text/plain; charset=utf-8'],
        ...statusFields(grpcStatus, message),
      ]),
    );
    stream.write(Buffer.from(message, 'utf8'));
    stream.end();
  };
  stream.handlers = {
    onData: (chunk) => {
      bodyBytes += chunk.length;
      if (bodyBytes > REFUSED_BODY_MAX_BYTES) answer();
    },
    onEnd: answer,
    onClose: () => undefined,
  };
}
