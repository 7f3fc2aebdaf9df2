// The gRPC server: serves the given streaming methods and grpc.health.v1 on one listener, through
// one of two transports with the same behaviour —
//   native   our own HTTP/2 (http2/) on net/tls sockets (native-transport.ts), the default: the
//            least CPU per message, and it takes any :authority (Istio's `outbound|…` too);
//   grpc-js  @grpc/grpc-js's server (grpc-js-transport.ts), the conservative fallback.
// Both drive each call through the same BidiCall interface (bidi-call.ts) and answer health from
// the same HealthService; they only move bytes. Nothing here knows what the messages mean.
// grpc-js is imported only when chosen: a native server never loads it (test/e2e/lazy-loading.test.ts).
import { startNativeServer } from './native-transport.js';
import type { GrpcServerOptions, RunningGrpcServer } from './server-options.js';

export type { HealthSource } from './health-service.js';
export type { AnyBidiMethod, GrpcServerOptions, GrpcTransport, RunningGrpcServer } from './server-options.js';

export async function startGrpcServer(opts: GrpcServerOptions): Promise<RunningGrpcServer> {
  switch (opts.transport ?? 'native') {
    case 'grpc-js': {
      const { startGrpcJsServer } = await import('./grpc-js-transport.js');
      return startGrpcJsServer(opts);
    }
    case 'native':
      return startNativeServer(opts);
  }
}
