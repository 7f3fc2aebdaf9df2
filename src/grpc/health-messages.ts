// grpc.health.v1's two messages, hand-coded (proto/grpc/health/v1/health.proto; pinned by
// test/unit/support/proto-contract.test.ts): HealthCheckRequest { string service = 1 } and
// HealthCheckResponse { ServingStatus status = 1 }, read and written as protobufjs does with
// PROTO_LOADER_OPTIONS: a field is present iff it is on the wire, explicit defaults included.
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
  const service = lastField1(bytes, WIRE_LEN, (r, end) => r.string(end));
  return service === undefined ? {} : { service };
}

/** Field 1 of a one-field message, read with `read` (the last occurrence wins); anything else is skipped. */
function lastField1<T>(bytes: Buffer, wireType: number, read: (r: Reader, end: number) => T): T | undefined {
  const r = new Reader(bytes);
  let value: T | undefined;
  while (r.pos < bytes.length) {
    const tag = r.uint32(bytes.length);
    if (tag === ((1 << 3) | wireType)) value = read(r, bytes.length);
    else r.skip(tag & 7, bytes.length);
  }
  return value;
}

export function encodeHealthCheckResponse(response: HealthCheckResponse): Buffer {
  const w = writer;
  w.reset();
  if (response.status !== undefined) {
    w.tag(1, WIRE_VARINT);
    w.uint32(STATUSES.indexOf(response.status));
  }
  return w.finish();
}

/** For test clients: the response from its bytes. */
export function decodeHealthCheckResponse(bytes: Buffer): HealthCheckResponse {
  const n = lastField1(bytes, WIRE_VARINT, (r, end) => r.low32(end));
  const status = n === undefined ? undefined : STATUSES[n];
  return status === undefined ? {} : { status };
}

/** For test clients: the request's bytes. */
export function encodeHealthCheckRequest(request: HealthCheckRequest): Buffer {
  const w = writer;
  w.reset();
  if (request.service !== undefined) w.string(1, request.service);
  return w.finish();
}
