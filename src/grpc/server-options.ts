// What a gRPC server is started with, and what it returns: shared by server.ts and the transports.
import type { Logger } from 'pino';
import type { BidiMethod } from './bidi-call.js';
import type { HealthSource } from './health-service.js';
import type { TlsIdentitySource } from './tls-identity.js';
import type { ReadGarbageObserver } from '../util/external-garbage.js';

export type GrpcTransport = 'native' | 'grpc-js';

/** A served method, whatever its message types (the transports only move its bytes). */
export type AnyBidiMethod = BidiMethod<unknown, unknown>;

export interface GrpcServerOptions {
  /** "host:port" ("0.0.0.0:0" picks a free port) or "unix:///abs/path.sock" / "unix:rel/path.sock". */
  address: string;
  /** The bidirectional-streaming methods served; health answers readiness for their services. */
  methods: readonly AnyBidiMethod[];
  health: HealthSource;
  logger: Logger;
  /**
   * Serve TLS with this identity (a standalone Deployment that gateways reach over the network);
   * absent = plaintext h2c (sidecar over loopback or a Unix socket). Replacements apply to new
   * connections; open connections and their streams carry on with the certificate they began with.
   */
  tls?: TlsIdentitySource;
  /** Which implementation serves the listener (config `listen.transport`); default native. */
  transport?: GrpcTransport;
  /**
   * The native transport only: told at each socket write that answers a read, with the seconds
   * since that read and the number of replies the write carries.
   */
  onTurnaround?: (seconds: number, replies: number) => void;
  /**
   * A peer's HTTP/2 protocol error, a refused stream, a rapid reset (one of a closed set of kinds,
   * `PROTOCOL_EVENT_KINDS` in http2/connection.ts), for a metric. The native transport reports every
   * kind; grpc-js only the listener's (`connection_refused`) and `rapid_reset`.
   */
  onProtocolEvent?: (kind: string) => void;
  /**
   * Told the size of everything read from clients (the native transport each socket read, each a
   * Buffer of its own; grpc-js each message) and the end of every call of the served methods.
   */
  readGarbage?: ReadGarbageObserver;
  /** Most connections held at once (both transports; one more is closed and reported as `connection_refused`). */
  maxConnections?: number;
  /** A connection with no open stream this long is closed gracefully (GOAWAY NO_ERROR); both transports. */
  idleTimeoutMs?: number;
}

export interface RunningGrpcServer {
  /** What a client dials: "host:PORT" with the real port, or "unix:///abs/path.sock". */
  address: string;
  /** The bound TCP port; absent for unix sockets. */
  port?: number;
  /**
   * Stop accepting streams and let open ones finish for up to graceMs. Streams still open then
   * are released (each method decides how; ext_proc's end with status OK, so Envoy completes each
   * HTTP response without us instead of failing it). Idempotent.
   */
  shutdown(graceMs: number): Promise<void>;
}
