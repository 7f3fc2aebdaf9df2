// Encoder for envoy.service.ext_proc.v3.ProcessingResponse, our reply to every ext_proc message:
// the only one at run time. It writes the fields of messages.ts's ProcessingResponse in field-number
// order, a field iff its value is neither undefined nor null (explicit defaults included), map
// entries in key order and oneof discriminator properties ignored: the bytes protobufjs writes for
// the same object (test/unit/extproc/codec.test.ts checks it against protobufjs as an oracle).

import { WIRE_LEN, WIRE_VARINT } from '../../grpc/protobuf-wire.js';
import type { Writer } from '../../grpc/protobuf-wire.js';
import type {
  BodyMutation,
  CommonResponse,
  CommonResponseStatus,
  HeaderMutation,
  HeaderValue,
  HeaderValueOption,
  ImmediateResponse,
  ProcessingMode,
  ProcessingResponse,
  ProtoStruct,
  ProtoValue,
  StreamedBodyResponse,
  TrailersResponse,
} from '../messages.js';
import { BODY_SEND_MODES, HEADER_SEND_MODES } from '../messages.js';

const COMMON_STATUS: Readonly<Record<CommonResponseStatus, number>> = { CONTINUE: 0, CONTINUE_AND_REPLACE: 1 };
const HEADER_SEND_MODE = enumNumbers(HEADER_SEND_MODES);
const BODY_SEND_MODE = enumNumbers(BODY_SEND_MODES);

/** Each name's enum number: its place in the list. */
function enumNumbers<T extends string>(names: readonly T[]): Readonly<Record<T, number>> {
  return Object.fromEntries(names.map((name, number) => [name, number])) as Record<T, number>;
}

export function encodeProcessingResponse(w: Writer, m: ProcessingResponse): void {
  if (m.request_headers != null) message(w, 1, m.request_headers, encodeHeadersOrBodyResponse);
  if (m.response_headers != null) message(w, 2, m.response_headers, encodeHeadersOrBodyResponse);
  if (m.request_body != null) message(w, 3, m.request_body, encodeHeadersOrBodyResponse);
  if (m.response_body != null) message(w, 4, m.response_body, encodeHeadersOrBodyResponse);
  if (m.request_trailers != null) message(w, 5, m.request_trailers, encodeTrailersResponse);
  if (m.response_trailers != null) message(w, 6, m.response_trailers, encodeTrailersResponse);
  if (m.immediate_response != null) message(w, 7, m.immediate_response, encodeImmediateResponse);
  if (m.dynamic_metadata != null) message(w, 8, m.dynamic_metadata, encodeStruct);
  if (m.mode_override != null) message(w, 9, m.mode_override, encodeProcessingMode);
}

/** HeadersResponse and BodyResponse: { CommonResponse response = 1 }. */
function encodeHeadersOrBodyResponse(w: Writer, m: { response?: CommonResponse }): void {
  if (m.response != null) message(w, 1, m.response, encodeCommonResponse);
}

function encodeTrailersResponse(w: Writer, m: TrailersResponse): void {
  if (m.header_mutation != null) message(w, 1, m.header_mutation, encodeHeaderMutation);
}

function encodeCommonResponse(w: Writer, m: CommonResponse): void {
  if (m.status != null) varintField(w, 1, COMMON_STATUS[m.status]);
  if (m.header_mutation != null) message(w, 2, m.header_mutation, encodeHeaderMutation);
  if (m.body_mutation != null) message(w, 3, m.body_mutation, encodeBodyMutation);
  if (m.clear_route_cache != null) w.bool(5, m.clear_route_cache);
}

function encodeHeaderMutation(w: Writer, m: HeaderMutation): void {
  if (m.set_headers != null) for (const option of m.set_headers) message(w, 1, option, encodeHeaderValueOption);
  if (m.remove_headers != null) for (const name of m.remove_headers) w.string(2, name);
}

function encodeHeaderValueOption(w: Writer, m: HeaderValueOption): void {
  if (m.header != null) message(w, 1, m.header, encodeHeaderValue);
  if (m.append != null) message(w, 2, m.append, encodeBoolValue);
}

function encodeBoolValue(w: Writer, m: { value: boolean }): void {
  if (m.value != null) w.bool(1, m.value);
}

function encodeHeaderValue(w: Writer, m: HeaderValue): void {
  if (m.key != null) w.string(1, m.key);
  if (m.value != null) w.string(2, m.value);
  if (m.raw_value != null) w.bytes(3, m.raw_value);
}

function encodeBodyMutation(w: Writer, m: BodyMutation): void {
  if (m.body != null) w.bytes(1, m.body);
  if (m.clear_body != null) w.bool(2, m.clear_body);
  if (m.streamed_response != null) message(w, 3, m.streamed_response, encodeStreamedBodyResponse);
}

function encodeStreamedBodyResponse(w: Writer, m: StreamedBodyResponse): void {
  if (m.body != null) w.bytes(1, m.body);
  if (m.end_of_stream != null) w.bool(2, m.end_of_stream);
  if (m.end_of_stream_without_message != null) w.bool(3, m.end_of_stream_without_message);
  if (m.grpc_message_compressed != null) w.bool(4, m.grpc_message_compressed);
}

function encodeImmediateResponse(w: Writer, m: ImmediateResponse): void {
  if (m.status != null) message(w, 1, m.status, encodeHttpStatus);
  if (m.headers != null) message(w, 2, m.headers, encodeHeaderMutation);
  if (m.body != null) w.bytes(3, m.body);
  if (m.details != null) w.string(5, m.details);
}

function encodeHttpStatus(w: Writer, m: { code: number }): void {
  if (m.code != null) {
    w.tag(1, WIRE_VARINT);
    w.int32(m.code);
  }
}

function encodeProcessingMode(w: Writer, m: ProcessingMode): void {
  if (m.request_header_mode != null) varintField(w, 1, HEADER_SEND_MODE[m.request_header_mode]);
  if (m.response_header_mode != null) varintField(w, 2, HEADER_SEND_MODE[m.response_header_mode]);
  if (m.request_body_mode != null) varintField(w, 3, BODY_SEND_MODE[m.request_body_mode]);
  if (m.response_body_mode != null) varintField(w, 4, BODY_SEND_MODE[m.response_body_mode]);
  if (m.request_trailer_mode != null) varintField(w, 5, HEADER_SEND_MODE[m.request_trailer_mode]);
  if (m.response_trailer_mode != null) varintField(w, 6, HEADER_SEND_MODE[m.response_trailer_mode]);
}

// google.protobuf.Struct / Value / ListValue (protobufjs's camelCase field names) ──────────────

function encodeStruct(w: Writer, m: ProtoStruct): void {
  const fields = m.fields;
  if (fields == null) return;
  for (const key of Object.keys(fields)) {
    w.tag(1, WIRE_LEN);
    const entry = w.begin();
    w.string(1, key);
    message(w, 2, fields[key], encodeValue);
    w.end(entry);
  }
}

function encodeValue(w: Writer, m: ProtoValue): void {
  if (m.nullValue != null) varintField(w, 1, 0);
  if (m.numberValue != null) w.double(2, m.numberValue);
  if (m.stringValue != null) w.string(3, m.stringValue);
  if (m.boolValue != null) w.bool(4, m.boolValue);
  if (m.structValue != null) message(w, 5, m.structValue, encodeStruct);
  if (m.listValue != null) message(w, 6, m.listValue, encodeListValue);
}

function encodeListValue(w: Writer, m: { values?: ProtoValue[] }): void {
  if (m.values != null) for (const value of m.values) message(w, 1, value, encodeValue);
}

// helpers ─────────────────────────────────────────────────────────────────────────────────────

/**
 * A length-delimited sub-message (written even when empty: presence is what it says). The types
 * say it is an object; a value that is not (a processor bug behind a cast) fails its stream, not
 * the wire.
 */
function message<T>(w: Writer, field: number, value: T, encode: (w: Writer, m: T) => void): void {
  if (typeof value !== 'object' || value === null) throw new TypeError(`ProcessingResponse field ${field} is not a message`);
  w.tag(field, WIRE_LEN);
  const start = w.begin();
  encode(w, value);
  w.end(start);
}

function varintField(w: Writer, field: number, value: number): void {
  w.tag(field, WIRE_VARINT);
  w.uint32(value);
}
