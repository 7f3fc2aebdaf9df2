// The ext_proc gRPC server: the Process method (process-service.ts) on a gRPC server (grpc/), one
// StreamProcessor per stream from the factory, and Envoy's access-log service when asked. What the
// app and the tests start.
import { startGrpcServer } from '../grpc/server.js';
import type { GrpcServerOptions, RunningGrpcServer } from '../grpc/server.js';
import { accessLogMethod } from './access-log-service.js';
import type { AccessLogListener } from './access-log-service.js';
import { processMethod } from './process-service.js';
import type { ProcessServiceOptions } from './process-service.js';

export interface ExtProcServerOptions extends Omit<GrpcServerOptions, 'methods'> {
  processorFactory: ProcessServiceOptions['processorFactory'];
  /** Told about every stream that ends in error (processor threw, transport failure). */
  onStreamError?: (err: Error) => void;
  /** Serve Envoy's gRPC access-log service too, handing its entries here (access-log-service.ts). */
  accessLog?: AccessLogListener;
}

export function startExtProcServer(opts: ExtProcServerOptions): Promise<RunningGrpcServer> {
  const { processorFactory, onStreamError, accessLog, ...grpc } = opts;
  const process = processMethod({
    processorFactory,
    logger: opts.logger.child({ component: 'grpc-server' }),
    ...(onStreamError === undefined ? {} : { onStreamError }),
  });
  return startGrpcServer({ ...grpc, methods: accessLog === undefined ? [process] : [process, accessLogMethod(accessLog)] });
}
