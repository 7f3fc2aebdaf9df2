// grpc.health.v1's two messages, hand-coded (proto/grpc/health/v1/health.proto; pinned by
// test/unit/proto-contract.test.ts): HealthCheckRequest { string service = 1 } and
// HealthCheckResponse { ServingStatus status = 1 }. Decoded as protobufjs would with
// PROTO_LOADER_OPTIONS: "" and UNKNOWN (the zero values) are absent fields.
import { Reader, WIRE_LEN, WIRE_VARINT, Writer } from './protobuf-wire.js';

export const HEALTH_SERVICE_NAME = 'grpc.health.v1.Health';

export type ServingStatus = 'UNKNOWN' | 'SERVING' | 'NOT_SERVING' | 'SERVICE_UNKNOWN';

export interface HealthCheckRequest {
  service?: string;
}

export interface HealthCheckResponse {
  status?: ServingStatus;
}

const STATUSES: readonly ServingStatus[] = ['UNKNOWN', 'SERVING', 'NOT_SERVING', 'SERVICE_UNKNOWN'];
// One scratch writer: encoding is synchronous, never interleaved.
const writer = new Writer();

export function decodeHealthCheckRequest(bytes: Buffer): HealthCheckRequest {
  const r = new Reader(bytes);
  const out: HealthCheckRequest = {};
  while (r.pos < bytes.length) {
    const tag = r.uint32(bytes.length);
    if (tag === ((1 << 3) | WIRE_LEN)) {
      const service = r.string(bytes.length);
      if (service === '') delete out.service;
      else out.service = service;
    } else {
      r.skip(tag & 7, bytes.length);
    }
  }
  return out;
}

export function encodeHealthCheckResponse(response: HealthCheckResponse): Buffer {
  const w = writer;
  w.reset();
  const n = response.status === undefined ? 0 : STATUSES.indexOf(response.status);
  if (n > 0) {
    w.tag(1, WIRE_VARINT);
    w.uint32(n);
  }
  return w.finish();
}

/** For test clients: the response from its bytes. */
export function decodeHealthCheckResponse(bytes: Buffer): HealthCheckResponse {
  const r = new Reader(bytes);
  const out: HealthCheckResponse = {};
  while (r.pos < bytes.length) {
    const tag = r.uint32(bytes.length);
    if (tag === ((1 << 3) | WIRE_VARINT)) {
      const status = STATUSES[r.low32(bytes.length)];
      if (status === undefined || status === 'UNKNOWN') delete out.status;
      else out.status = status;
    } else {
      r.skip(tag & 7, bytes.length);
    }
  }
  return out;
}

/** For test clients: the request's bytes. */
export function encodeHealthCheckRequest(request: HealthCheckRequest): Buffer {
  const w = writer;
  w.reset();
  if (request.service !== undefined && request.service !== '') w.string(1, request.service);
  return w.finish();
}
