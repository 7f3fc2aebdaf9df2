// The gRPC edge on our own HTTP/2 connection (h2/connection.ts) over plain `net`/`tls` sockets
// (`listen.transport: native`, the default). gRPC over HTTP/2 is small for what we serve: a POST
// per call, `content-type: application/grpc`, length-prefixed messages in DATA frames
// (grpc-framing.ts), a status in trailers. This module routes each stream to the Process call
// (process-call.ts) or the health service (health-service.ts), decodes and encodes with the
// hot-path codec (wire.ts), and keeps the connections healthy; it decides nothing about what to
// answer.
import { createServer as createNetServer } from 'node:net';
import type { Server as NetServer, Socket } from 'node:net';
import { createServer as createTlsServer } from 'node:tls';
import type { Server as TlsServer } from 'node:tls';
import type { GrpcServerOptions, RunningGrpcServer } from './server.js';
import { GRPC_STATUS, statusTrailers } from './status.js';
import { H2Connection } from '../http2/connection.js';
import type { H2Stream, StreamClose } from '../http2/connection.js';
import { ErrorCode } from '../http2/frames.js';
import { encodeHeaderBlock } from '../http2/hpack.js';
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

export async function startDirectServer(opts: GrpcServerOptions): Promise<RunningGrpcServer> {
  const logger = opts.logger.child({ component: 'grpc-server' });
  const definitions = loadWireDefinitions();
  const processMethod = definitions.externalProcessor.Process;
  const frameReply = replyFramer(processMethod.responseSerialize);
  const health = new HealthService(opts.health);
  const context = processCallContext(opts, logger);
  const connections = new Set<H2Connection>();
  let stopping = false;

  const serveProcess = (stream: H2Stream): void => {
    const call = new GrpcCall(stream);
    const processCall: ProcessCall = new ProcessCall(
      {
        write: (reply) => call.write(frameReply(reply)),
        // Nothing to do: the connection stopped reading Envoy when its write backed up.
        pauseUntilDrain: () => undefined,
        endOk: () => call.end(GRPC_STATUS.OK),
        endError: (code, details) => call.end(GRPC_STATUS[code], details),
      },
      context,
    );
    if (processCall.isFinished) return; // ended with INTERNAL; what Envoy still sends is dropped
    const input = new ProcessInput(processCall, processMethod.requestDeserialize, logger);
    stream.handlers = {
      onData: (chunk) => input.data(chunk),
      // Told after the whole read it came in: an END_STREAM that came with a RST_STREAM (Envoy's
      // abrupt close) has already closed the stream as reset and never gets here.
      onEnd: () => {
        if (input.ended()) processCall.halfClosed();
      },
      onClose: (close) => {
        const failure = streamFailure(close);
        if (failure === undefined) processCall.cancelled();
        else processCall.transportFailed(failure, logger);
      },
    };
  };

  const serveHealth = (stream: H2Stream, method: 'Check' | 'Watch'): void => {
    const call = new HealthCall(method, health, definitions.health, new GrpcCall(stream));
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

  const onStream = (stream: H2Stream, headers: Fields): void => {
    let method: string | undefined;
    let path: string | undefined;
    let contentType: string | undefined;
    for (const [name, value] of headers) {
      if (name === ':method') method = value;
      else if (name === ':path') path = value;
      else if (name === 'content-type') contentType = value;
    }
    if (method !== 'POST') {
      refuse(stream, 405, GRPC_STATUS.UNIMPLEMENTED, 'gRPC requires POST');
      return;
    }
    if (!isGrpcContentType(contentType)) {
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
        new GrpcCall(stream).end(GRPC_STATUS.UNIMPLEMENTED, `unknown method ${path ?? ''}`);
    }
  };

  const onProtocolEvent = (event: string, details: Record<string, unknown>): void => logger.debug(details, `HTTP/2 ${event}`);

  const serveConnection = (socket: Socket): void => {
    if (stopping) {
      socket.destroy();
      return;
    }
    const connection: H2Connection = new H2Connection(socket, {
      streamWindow: STREAM_WINDOW_BYTES,
      connectionWindow: CONNECTION_WINDOW_BYTES,
      maxHeaderListBytes: MAX_HEADER_LIST_BYTES,
      maxConcurrentStreams: MAX_CONCURRENT_STREAMS,
      onStream,
      onProtocolEvent,
      ...(opts.onTurnaround === undefined ? {} : { onTurnaround: opts.onTurnaround }),
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
      : createTlsServer({ ...secureContextOptions(tls.current()), ALPNProtocols: ['h2'] }, serveConnection);
  // Only new TLS handshakes see a replaced pair; open connections and their streams carry on.
  const unsubscribeTls =
    tls === undefined ? () => {} : tls.onChange((identity) => (server as TlsServer).setSecureContext(secureContextOptions(identity)));
  server.on('tlsClientError', (err) => logger.debug({ err }, 'TLS handshake failed'));
  return bindEdge(server, {
    address: opts.address,
    transport: 'native',
    tls,
    unsubscribeTls,
    connections: connections,
    openStreams: context.openStreams,
    logger,
    onShutdown: () => {
      stopping = true;
      health.stopServing();
    },
  });
}

/** A peer's reset other than CANCEL, or our own reset: the stream failed rather than being cancelled. */
function streamFailure(close: StreamClose): Error | undefined {
  if (close.kind === 'reset' && close.code !== ErrorCode.CANCEL && close.code !== ErrorCode.NO_ERROR) {
    return new Error(`stream reset by the peer (HTTP/2 error code ${close.code})`);
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

  constructor(private readonly stream: H2Stream) {}

  /** False when the connection's write buffer is full. */
  write(frame: Buffer): boolean {
    const stream = this.stream;
    if (this.ended || stream.closed) return true;
    if (!stream.headersSent) stream.respond(RESPONSE_HEADERS);
    return stream.write(frame);
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

/** A plain HTTP refusal for what is not a gRPC call at all (wrong method or content type). */
function refuse(stream: H2Stream, httpStatus: number, grpcStatus: number, message: string): void {
  stream.respond(
    encodeHeaderBlock([
      [':status', String(httpStatus)],
      ['content-type', 'text/plain; charset=utf-8'],
      ...statusFields(grpcStatus, message),
    ]),
  );
  stream.write(Buffer.from(message, 'utf8'));
  stream.end();
}
