// The gRPC edge's entry point: serves Envoy's ext_proc Process stream and grpc.health.v1 on one
// listener, through one of three interchangeable transports with the same behaviour —
//   native      our own HTTP/2 connection on net/tls sockets (direct-transport.ts, h2/), the default;
//   node-http2  the same gRPC handling on node:http2 (h2-transport.ts), kept for A/B comparison;
//   grpc-js     @grpc/grpc-js's server (grpc-js-transport.ts), kept for A/B comparison.
// What each stream means (process-call.ts) and what health answers (health-service.ts) are
// shared; the transports only move bytes.
import type { Logger } from 'pino';
import type { ProcessorFactory } from '../extproc/stream-processor.js';
import type { TlsIdentitySource } from './tls-identity.js';
import type { GrpcTransport } from '../config/config.js';
import { DEFAULTS } from '../config/schema.js';
import type { HealthSource } from './health-service.js';
import { startGrpcJsServer } from './grpc-js-transport.js';
import { startDirectServer } from './native-transport.js';
import { startNodeHttp2Server } from './node-http2-transport.js';

export type { HealthSource } from './health-service.js';

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
  /** Which implementation serves the listener (config `listen.transport`); default native. */
  transport?: GrpcTransport;
  /**
   * Our own transport only (`native`): told at each socket write that answers a read, with the
   * seconds since that read and the number of replies the write carries (H2ConnectionOptions).
   */
  onTurnaround?: (seconds: number, replies: number) => void;
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

export function startGrpcServer(opts: GrpcServerOptions): Promise<RunningGrpcServer> {
  switch (opts.transport ?? DEFAULTS.grpcTransport) {
    case 'grpc-js':
      return startGrpcJsServer(opts);
    case 'node-http2':
      return startNodeHttp2Server(opts);
    case 'native':
      return startDirectServer(opts);
  }
}
