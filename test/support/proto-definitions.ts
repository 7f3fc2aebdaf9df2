// The test oracle: our hand-written subset of Envoy's ext_proc protos and gRPC's health proto
// (proto/) loaded with @grpc/proto-loader, whose service definitions are typed with the plain
// message shapes of src/extproc/messages.ts. Test clients encode and decode with it, and the codec
// tests hold our hand-written codecs (the only ones the server runs) against it. The loader options
// fix how messages look in JS (snake_case fields, enums as names, bytes as Buffer, absent fields
// left out, oneofs named by a discriminator property): the shapes our codecs produce.
import { existsSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { loadSync } from '@grpc/proto-loader';
import type { AnyDefinition, MethodDefinition, Options, PackageDefinition, ServiceDefinition } from '@grpc/proto-loader';
import type { ProcessingRequest, ProcessingResponse } from '../../src/extproc/messages.js';

/** Fully-qualified gRPC service names, as they appear in paths and health checks. */
export { EXT_PROC_SERVICE_NAME } from '../../src/extproc/protocol-names.js';
import { EXT_PROC_SERVICE_NAME } from '../../src/extproc/protocol-names.js';
export { HEALTH_SERVICE_NAME } from '../../src/grpc/health-messages.js';
import { HEALTH_SERVICE_NAME } from '../../src/grpc/health-messages.js';
export type { HealthCheckRequest, HealthCheckResponse, ServingStatus } from '../../src/grpc/health-messages.js';
import type { HealthCheckRequest, HealthCheckResponse } from '../../src/grpc/health-messages.js';

/** Entry files, relative to PROTO_ROOT; their imports are resolved from the same root. */
export const PROTO_FILES: readonly string[] = ['envoy/service/ext_proc/v3/external_processor.proto', 'grpc/health/v1/health.proto'];

/**
 * Absolute path of the package's `proto/` folder. Found by walking up from this module, because
 * the module runs from `test/support/` (sources) as well as `dist/test/support/` (compiled).
 */
export const PROTO_ROOT: string = findProtoRoot(dirname(fileURLToPath(import.meta.url)));

export const PROTO_LOADER_OPTIONS: Readonly<Options> = Object.freeze({
  keepCase: true,
  longs: String,
  enums: String,
  defaults: false,
  oneofs: true,
  includeDirs: [PROTO_ROOT],
});

// Type aliases rather than interfaces: grpc-js's addService() wants an index-signature type,
// which object type aliases satisfy and interfaces do not.
export type ExternalProcessorDefinition = {
  Process: MethodDefinition<ProcessingRequest, ProcessingResponse>;
};

export type HealthDefinition = {
  Check: MethodDefinition<HealthCheckRequest, HealthCheckResponse>;
  Watch: MethodDefinition<HealthCheckRequest, HealthCheckResponse>;
};

export interface WireDefinitions {
  /** Everything proto-loader produced, keyed by fully-qualified name (descriptors, for tests). */
  packageDefinition: PackageDefinition;
  externalProcessor: ExternalProcessorDefinition;
  health: HealthDefinition;
}

export function loadWireDefinitions(): WireDefinitions {
  const packageDefinition = loadSync([...PROTO_FILES], { ...PROTO_LOADER_OPTIONS });
  const extProc = serviceDefinition(packageDefinition, EXT_PROC_SERVICE_NAME);
  const health = serviceDefinition(packageDefinition, HEALTH_SERVICE_NAME);
  return {
    packageDefinition,
    externalProcessor: {
      Process: method<ProcessingRequest, ProcessingResponse>(extProc, EXT_PROC_SERVICE_NAME, 'Process', true, true),
    },
    health: {
      Check: method<HealthCheckRequest, HealthCheckResponse>(health, HEALTH_SERVICE_NAME, 'Check', false, false),
      Watch: method<HealthCheckRequest, HealthCheckResponse>(health, HEALTH_SERVICE_NAME, 'Watch', false, true),
    },
  };
}

function findProtoRoot(startDir: string): string {
  let dir = startDir;
  for (;;) {
    if (existsSync(join(dir, 'package.json')) && existsSync(join(dir, 'proto'))) {
      return join(dir, 'proto');
    }
    const parent = dirname(dir);
    if (parent === dir) {
      throw new Error(`cannot find the proto/ folder above ${startDir}`);
    }
    dir = parent;
  }
}

function isServiceDefinition(def: AnyDefinition | undefined): def is ServiceDefinition {
  // Message and enum definitions carry a `format` string; service definitions are method maps.
  return def !== undefined && !('format' in def && typeof def.format === 'string');
}

function serviceDefinition(pkg: PackageDefinition, name: string): ServiceDefinition {
  const def = pkg[name];
  if (!isServiceDefinition(def)) {
    throw new Error(`proto definitions lack the service ${name}`);
  }
  return def;
}

// proto-loader types every message as `object`; the concrete shapes follow from the .proto files
// and PROTO_LOADER_OPTIONS (pinned by test/unit/grpc/server.test.ts and proto-contract.test.ts).
// The runtime checks below make sure we narrow the method we think we are narrowing.
function method<Req, Res>(
  service: ServiceDefinition,
  serviceName: string,
  methodName: string,
  requestStream: boolean,
  responseStream: boolean,
): MethodDefinition<Req, Res> {
  const def = service[methodName];
  const path = `/${serviceName}/${methodName}`;
  if (def === undefined || def.path !== path || def.requestStream !== requestStream || def.responseStream !== responseStream) {
    throw new Error(`proto definitions lack the method ${path} with the expected streaming shape`);
  }
  return def as MethodDefinition<unknown, unknown> as MethodDefinition<Req, Res>;
}
