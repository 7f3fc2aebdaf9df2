// Loads our hand-written subset of Envoy's ext_proc protos and gRPC's health proto, and hands
// out the service definitions typed with the plain message shapes of `messages.ts`.
// The loader options fix how messages look in JS (snake_case fields, enums as names, bytes as
// Buffer, absent fields left out, oneofs named by a discriminator property), so they live here
// once and every encoder/decoder in the project (server, test clients) uses the same ones.
import { existsSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { loadSync } from '@grpc/proto-loader';
import type { AnyDefinition, MethodDefinition, Options, PackageDefinition, ServiceDefinition } from '@grpc/proto-loader';
import { fastRequestDeserializer, fastResponseSerializer } from '../../src/extproc/codec/fast-codec.js';
import type { CodecCounters } from '../../src/extproc/codec/fast-codec.js';
import { CONSTANT_REPLIES, isReusedReply } from '../../src/extproc/constant-replies.js';
import type { ProcessingRequest, ProcessingResponse } from '../../src/extproc/messages.js';

/** Fully-qualified gRPC service names, as they appear in paths and health checks. */
export { EXT_PROC_SERVICE_NAME } from '../../src/extproc/protocol-names.js';
import { EXT_PROC_SERVICE_NAME } from '../../src/extproc/protocol-names.js';
export const HEALTH_SERVICE_NAME = 'grpc.health.v1.Health';

/** Entry files, relative to PROTO_ROOT; their imports are resolved from the same root. */
export const PROTO_FILES: readonly string[] = ['envoy/service/ext_proc/v3/external_processor.proto', 'grpc/health/v1/health.proto'];

/**
 * Absolute path of the package's `proto/` folder. Found by walking up from this module, because
 * the module runs from `src/extproc/` (sources) as well as `dist/src/extproc/` (compiled).
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

export type ServingStatus = 'UNKNOWN' | 'SERVING' | 'NOT_SERVING' | 'SERVICE_UNKNOWN';

/** grpc.health.v1.HealthCheckRequest as decoded with PROTO_LOADER_OPTIONS ("" is left out). */
export interface HealthCheckRequest {
  service?: string;
}

/** grpc.health.v1.HealthCheckResponse (UNKNOWN, the zero value, decodes as an absent field). */
export interface HealthCheckResponse {
  status?: ServingStatus;
}

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
  /** Messages the hot-path codec left to the reflection codec (see codec/fast-codec.ts). */
  codecCounters: CodecCounters;
  externalProcessor: ExternalProcessorDefinition;
  health: HealthDefinition;
}

export function loadWireDefinitions(): WireDefinitions {
  const packageDefinition = loadSync([...PROTO_FILES], { ...PROTO_LOADER_OPTIONS });
  const extProc = serviceDefinition(packageDefinition, EXT_PROC_SERVICE_NAME);
  const health = serviceDefinition(packageDefinition, HEALTH_SERVICE_NAME);
  const codecCounters: CodecCounters = { fallbackDecodes: 0, fallbackEncodes: 0 };
  return {
    packageDefinition,
    codecCounters,
    externalProcessor: {
      Process: withCachedReplies(
        withFastCodec(method<ProcessingRequest, ProcessingResponse>(extProc, EXT_PROC_SERVICE_NAME, 'Process', true, true), codecCounters),
      ),
    },
    health: {
      Check: method<HealthCheckRequest, HealthCheckResponse>(health, HEALTH_SERVICE_NAME, 'Check', false, false),
      Watch: method<HealthCheckRequest, HealthCheckResponse>(health, HEALTH_SERVICE_NAME, 'Watch', false, true),
    },
  };
}

/**
 * The server's side of Process (decoding Envoy's requests, encoding our replies) goes through the
 * hand-written codec, which hands whatever it does not cover to the reflection codec. The other
 * two directions (used by test clients) stay reflection-only.
 */
function withFastCodec(
  def: MethodDefinition<ProcessingRequest, ProcessingResponse>,
  counters: CodecCounters,
): MethodDefinition<ProcessingRequest, ProcessingResponse> {
  return {
    ...def,
    requestDeserialize: fastRequestDeserializer(def.requestDeserialize, counters),
    responseSerialize: fastResponseSerializer(def.responseSerialize, counters),
  };
}

/**
 * Serializes the constant "continue" replies once, and each reused reply (constant-replies.ts)
 * the first time it is sent; everything else is encoded per message.
 */
function withCachedReplies(
  def: MethodDefinition<ProcessingRequest, ProcessingResponse>,
): MethodDefinition<ProcessingRequest, ProcessingResponse> {
  const serialize = def.responseSerialize;
  const cached = new Map<ProcessingResponse, Buffer>(CONSTANT_REPLIES.map((reply) => [reply, serialize(reply)]));
  const reused = new WeakMap<ProcessingResponse, Buffer>();
  return {
    ...def,
    responseSerialize: (value) => {
      const constant = cached.get(value);
      if (constant !== undefined) return constant;
      if (!isReusedReply(value)) return serialize(value);
      let bytes = reused.get(value);
      if (bytes === undefined) reused.set(value, (bytes = serialize(value)));
      return bytes;
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
// and PROTO_LOADER_OPTIONS (pinned by test/unit/grpc-server.test.ts and proto-contract.test.ts).
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
