// Hand-written encoder for envoy.service.ext_proc.v3.ProcessingResponse, our reply to every
// ext_proc message. It writes the bytes protobufjs's fromObject + encode write for the same plain
// object (fields in field-number order, a field written iff its value is neither undefined nor
// null, explicit defaults included, map entries in key order, oneof discriminator properties
// ignored), without building protobufjs message objects. Values it does not take as they are
// (unknown keys, enum names it does not know, strings protobufjs would encode differently,
// numbers that are not plain int32s, fields outside messages.ts) throw Unsupported, and the
// caller then uses the reflection codec. Equivalence: test/unit/fast-codec.test.ts.

import { Unsupported, WIRE_LEN, WIRE_VARINT } from '../../grpc/protobuf-wire.js';
import type { Writer } from '../../grpc/protobuf-wire.js';

type Obj = Record<string, unknown>;

const COMMON_STATUS: Readonly<Record<string, number>> = { CONTINUE: 0, CONTINUE_AND_REPLACE: 1 };
const HEADER_SEND_MODE: Readonly<Record<string, number>> = { DEFAULT: 0, SEND: 1, SKIP: 2 };
const BODY_SEND_MODE: Readonly<Record<string, number>> = {
  NONE: 0,
  STREAMED: 1,
  BUFFERED: 2,
  BUFFERED_PARTIAL: 3,
  FULL_DUPLEX_STREAMED: 4,
  GRPC: 5,
};
const APPEND_ACTION: Readonly<Record<string, number>> = {
  APPEND_IF_EXISTS_OR_ADD: 0,
  ADD_IF_ABSENT: 1,
  OVERWRITE_IF_EXISTS_OR_ADD: 2,
  OVERWRITE_IF_EXISTS: 3,
};

export function encodeProcessingResponse(w: Writer, value: unknown): void {
  const m = obj(value);
  onlyKeys(m, RESPONSE_KEYS);
  optMessage(w, 1, m.request_headers, encodeHeadersOrBodyResponse);
  optMessage(w, 2, m.response_headers, encodeHeadersOrBodyResponse);
  optMessage(w, 3, m.request_body, encodeHeadersOrBodyResponse);
  optMessage(w, 4, m.response_body, encodeHeadersOrBodyResponse);
  optMessage(w, 5, m.request_trailers, encodeTrailersResponse);
  optMessage(w, 6, m.response_trailers, encodeTrailersResponse);
  optMessage(w, 7, m.immediate_response, encodeImmediateResponse);
  optMessage(w, 8, m.dynamic_metadata, encodeStruct);
  optMessage(w, 9, m.mode_override, encodeProcessingMode);
  // 10 override_message_timeout (Duration, int64) and 11 streamed_immediate_response: reflection.
  if (m.override_message_timeout != null || m.streamed_immediate_response != null) throw new Unsupported('field outside the fast path');
  optBool(w, 12, m.request_drain);
}

const RESPONSE_KEYS = new Set([
  'response',
  'request_headers',
  'response_headers',
  'request_body',
  'response_body',
  'request_trailers',
  'response_trailers',
  'immediate_response',
  'dynamic_metadata',
  'mode_override',
  'override_message_timeout',
  'streamed_immediate_response',
  'request_drain',
]);

/** HeadersResponse and BodyResponse: { CommonResponse response = 1 }. */
function encodeHeadersOrBodyResponse(w: Writer, m: Obj): void {
  onlyKeys(m, RESPONSE_ONLY);
  optMessage(w, 1, m.response, encodeCommonResponse);
}
const RESPONSE_ONLY = new Set(['response']);

function encodeTrailersResponse(w: Writer, m: Obj): void {
  onlyKeys(m, TRAILERS_RESPONSE_KEYS);
  optMessage(w, 1, m.header_mutation, encodeHeaderMutation);
}
const TRAILERS_RESPONSE_KEYS = new Set(['header_mutation']);

function encodeCommonResponse(w: Writer, m: Obj): void {
  onlyKeys(m, COMMON_RESPONSE_KEYS);
  optEnum(w, 1, m.status, COMMON_STATUS);
  optMessage(w, 2, m.header_mutation, encodeHeaderMutation);
  optMessage(w, 3, m.body_mutation, encodeBodyMutation);
  optMessage(w, 4, m.trailers, encodeHeaderMap);
  optBool(w, 5, m.clear_route_cache);
}
const COMMON_RESPONSE_KEYS = new Set(['status', 'header_mutation', 'body_mutation', 'trailers', 'clear_route_cache']);

function encodeHeaderMutation(w: Writer, m: Obj): void {
  onlyKeys(m, HEADER_MUTATION_KEYS);
  for (const option of list(m.set_headers)) message(w, 1, option, encodeHeaderValueOption);
  for (const name of list(m.remove_headers)) w.string(2, str(name));
}
const HEADER_MUTATION_KEYS = new Set(['set_headers', 'remove_headers']);

function encodeHeaderValueOption(w: Writer, m: Obj): void {
  onlyKeys(m, HEADER_VALUE_OPTION_KEYS);
  optMessage(w, 1, m.header, encodeHeaderValue);
  optMessage(w, 2, m.append, encodeBoolValue);
  optEnum(w, 3, m.append_action, APPEND_ACTION);
  optBool(w, 4, m.keep_empty_value);
}
const HEADER_VALUE_OPTION_KEYS = new Set(['header', 'append', 'append_action', 'keep_empty_value']);

function encodeBoolValue(w: Writer, m: Obj): void {
  onlyKeys(m, VALUE_ONLY);
  optBool(w, 1, m.value);
}
const VALUE_ONLY = new Set(['value']);

function encodeHeaderValue(w: Writer, m: Obj): void {
  onlyKeys(m, HEADER_VALUE_KEYS);
  if (m.key != null) w.string(1, str(m.key));
  if (m.value != null) w.string(2, str(m.value));
  optBytes(w, 3, m.raw_value);
}
const HEADER_VALUE_KEYS = new Set(['key', 'value', 'raw_value']);

function encodeHeaderMap(w: Writer, m: Obj): void {
  onlyKeys(m, HEADERS_ONLY);
  for (const header of list(m.headers)) message(w, 1, header, encodeHeaderValue);
}
const HEADERS_ONLY = new Set(['headers']);

function encodeBodyMutation(w: Writer, m: Obj): void {
  onlyKeys(m, BODY_MUTATION_KEYS);
  optBytes(w, 1, m.body);
  optBool(w, 2, m.clear_body);
  optMessage(w, 3, m.streamed_response, encodeStreamedBodyResponse);
}
const BODY_MUTATION_KEYS = new Set(['mutation', 'body', 'clear_body', 'streamed_response']);

function encodeStreamedBodyResponse(w: Writer, m: Obj): void {
  onlyKeys(m, STREAMED_BODY_KEYS);
  optBytes(w, 1, m.body);
  optBool(w, 2, m.end_of_stream);
  optBool(w, 3, m.end_of_stream_without_message);
  optBool(w, 4, m.grpc_message_compressed);
}
const STREAMED_BODY_KEYS = new Set(['body', 'end_of_stream', 'end_of_stream_without_message', 'grpc_message_compressed']);

function encodeImmediateResponse(w: Writer, m: Obj): void {
  onlyKeys(m, IMMEDIATE_KEYS);
  optMessage(w, 1, m.status, encodeHttpStatus);
  optMessage(w, 2, m.headers, encodeHeaderMutation);
  optBytes(w, 3, m.body);
  optMessage(w, 4, m.grpc_status, encodeGrpcStatus);
  if (m.details != null) w.string(5, str(m.details));
}
const IMMEDIATE_KEYS = new Set(['status', 'headers', 'body', 'grpc_status', 'details']);

function encodeHttpStatus(w: Writer, m: Obj): void {
  onlyKeys(m, CODE_ONLY);
  // StatusCode names (OK, NotFound, …) are left to reflection; we send numbers.
  if (m.code != null) varintField(w, 1, int32(m.code));
}
const CODE_ONLY = new Set(['code']);

function encodeGrpcStatus(w: Writer, m: Obj): void {
  onlyKeys(m, STATUS_ONLY);
  if (m.status != null) varintField(w, 1, int32(m.status));
}
const STATUS_ONLY = new Set(['status']);

function encodeProcessingMode(w: Writer, m: Obj): void {
  onlyKeys(m, MODE_KEYS);
  optEnum(w, 1, m.request_header_mode, HEADER_SEND_MODE);
  optEnum(w, 2, m.response_header_mode, HEADER_SEND_MODE);
  optEnum(w, 3, m.request_body_mode, BODY_SEND_MODE);
  optEnum(w, 4, m.response_body_mode, BODY_SEND_MODE);
  optEnum(w, 5, m.request_trailer_mode, HEADER_SEND_MODE);
  optEnum(w, 6, m.response_trailer_mode, HEADER_SEND_MODE);
}
const MODE_KEYS = new Set([
  'request_header_mode',
  'response_header_mode',
  'request_body_mode',
  'response_body_mode',
  'request_trailer_mode',
  'response_trailer_mode',
]);

// google.protobuf.Struct / Value / ListValue (protobufjs's camelCase field names) ──────────────

function encodeStruct(w: Writer, m: Obj): void {
  onlyKeys(m, FIELDS_ONLY);
  if (m.fields == null) return;
  const fields = obj(m.fields);
  for (const key of Object.keys(fields)) {
    w.tag(1, WIRE_LEN);
    const entry = w.begin();
    w.string(1, str(key));
    message(w, 2, fields[key], encodeValue);
    w.end(entry);
  }
}
const FIELDS_ONLY = new Set(['fields']);

function encodeValue(w: Writer, m: Obj): void {
  onlyKeys(m, VALUE_KEYS);
  if (m.nullValue != null) {
    if (m.nullValue !== 'NULL_VALUE' && m.nullValue !== 0) throw new Unsupported('nullValue');
    varintField(w, 1, 0);
  }
  if (m.numberValue != null) {
    if (typeof m.numberValue !== 'number') throw new Unsupported('numberValue is not a number');
    w.double(2, m.numberValue);
  }
  if (m.stringValue != null) w.string(3, str(m.stringValue));
  optBool(w, 4, m.boolValue);
  optMessage(w, 5, m.structValue, encodeStruct);
  optMessage(w, 6, m.listValue, encodeListValue);
}
const VALUE_KEYS = new Set(['kind', 'nullValue', 'numberValue', 'stringValue', 'boolValue', 'structValue', 'listValue']);

function encodeListValue(w: Writer, m: Obj): void {
  onlyKeys(m, VALUES_ONLY);
  for (const value of list(m.values)) message(w, 1, value, encodeValue);
}
const VALUES_ONLY = new Set(['values']);

// helpers ─────────────────────────────────────────────────────────────────────────────────────

function obj(value: unknown): Obj {
  // Arrays, Buffers and class instances are coerced by fromObject in ways we do not copy.
  if (typeof value !== 'object' || value === null || Array.isArray(value)) throw new Unsupported('not a plain object');
  const proto: unknown = Object.getPrototypeOf(value);
  if (proto !== Object.prototype && proto !== null) throw new Unsupported('not a plain object');
  return value as Obj;
}

function onlyKeys(m: Obj, known: ReadonlySet<string>): void {
  for (const key in m) if (!known.has(key)) throw new Unsupported(`unknown field ${key}`);
}

function optMessage(w: Writer, field: number, value: unknown, encode: (w: Writer, m: Obj) => void): void {
  if (value != null) message(w, field, value, encode);
}

function message(w: Writer, field: number, value: unknown, encode: (w: Writer, m: Obj) => void): void {
  const m = obj(value);
  w.tag(field, WIRE_LEN);
  const start = w.begin();
  encode(w, m);
  w.end(start);
}

function list(value: unknown): readonly unknown[] {
  if (value == null) return [];
  if (!Array.isArray(value)) throw new Unsupported('not an array');
  return value;
}

function str(value: unknown): string {
  // protobufjs writes lone surrogates differently from Buffer's UTF-8 encoder.
  if (typeof value !== 'string' || !isWellFormed(value)) throw new Unsupported('not a well-formed string');
  return value;
}

const isWellFormedImpl = (String.prototype as { isWellFormed?: (this: string) => boolean }).isWellFormed;

function isWellFormed(value: string): boolean {
  if (isWellFormedImpl !== undefined) return isWellFormedImpl.call(value);
  return !/[\uD800-\uDFFF]/.test(value); // conservative: any surrogate goes to reflection
}

function optBool(w: Writer, field: number, value: unknown): void {
  if (value == null) return;
  if (typeof value !== 'boolean') throw new Unsupported('not a boolean');
  w.bool(field, value);
}

function optBytes(w: Writer, field: number, value: unknown): void {
  if (value == null) return;
  if (!(value instanceof Uint8Array)) throw new Unsupported('not bytes');
  w.bytes(field, value);
}

function optEnum(w: Writer, field: number, value: unknown, names: Readonly<Record<string, number>>): void {
  if (value == null) return;
  const n = typeof value === 'string' && Object.hasOwn(names, value) ? names[value] : typeof value === 'number' ? int32(value) : undefined;
  if (n === undefined) throw new Unsupported('enum value');
  varintField(w, field, n);
}

/** Non-negative int32 (negative ones take ten bytes in protobufjs's encoding: reflection). */
function int32(value: unknown): number {
  if (typeof value !== 'number' || !Number.isInteger(value) || value < 0 || value > 0x7fffffff)
    throw new Unsupported('not a non-negative int32');
  return value;
}

function varintField(w: Writer, field: number, value: number): void {
  w.tag(field, WIRE_VARINT);
  w.uint32(value);
}
