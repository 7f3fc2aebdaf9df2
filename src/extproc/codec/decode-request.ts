// Decoder for envoy.service.ext_proc.v3.ProcessingRequest, the message Envoy sends for every header
// block and body chunk: the only one at run time. It builds the plain objects of messages.ts
// (snake_case names; enums as names; bytes as Buffer views; a field is present iff it was on the
// wire; oneofs named by a discriminator property; Struct/Value with protobufjs's camelCase names)
// and is total over what we read, as proto3 parsers are: unknown and unused fields are skipped, as
// are fields with an unexpected wire type and enum numbers we have no name for; of two members of
// one oneof the last wins; a map entry without a value gets the empty one. Only bytes that are not
// a protobuf message at all throw MalformedMessage. Field numbers are those of proto/ (pinned by
// proto-contract.test); test/unit/extproc/codec.test.ts checks it against protobufjs as an oracle.

import type {
  HeaderMap,
  HeaderValue,
  HttpBody,
  HttpHeaders,
  HttpTrailers,
  Metadata,
  ProcessingRequest,
  ProtocolConfiguration,
  ProtoStruct,
  ProtoValue,
} from '../messages.js';
import { BODY_SEND_MODES } from '../messages.js';
import {
  DESTINATION_HEADER,
  DESTINATION_METADATA_NAMESPACE,
  SERVED_ENDPOINT_KEY,
  SUBSET_HINT_KEY,
  SUBSET_HINT_NAMESPACE,
} from '../protocol-names.js';
import { Reader, StringTable, WIRE_FIXED64, WIRE_LEN, WIRE_VARINT } from '../../grpc/protobuf-wire.js';

type RequestKind = NonNullable<ProcessingRequest['request']>;

/** ProcessingRequest oneof `request`, by field number. */
const REQUEST_FIELDS: readonly (RequestKind | undefined)[] = [
  undefined,
  undefined,
  'request_headers',
  'response_headers',
  'request_body',
  'response_body',
  'request_trailers',
  'response_trailers',
];

/**
 * Strings nearly every message carries: the header names Envoy and model servers send, and the
 * attribute, metadata and value strings of Envoy's ext_proc filter. Decoded as shared constants.
 */
const KNOWN_STRINGS = new StringTable([
  ':authority',
  ':method',
  ':path',
  ':scheme',
  ':status',
  'accept',
  'accept-encoding',
  'authorization',
  'cache-control',
  'connection',
  'content-encoding',
  'content-length',
  'content-type',
  'date',
  'host',
  'server',
  'transfer-encoding',
  'user-agent',
  'vary',
  'x-envoy-expected-rq-timeout-ms',
  'x-envoy-internal',
  'x-envoy-upstream-service-time',
  'x-forwarded-for',
  'x-forwarded-proto',
  'x-request-id',
  'application/json',
  'text/event-stream',
  'envoy.filters.http.ext_proc',
  'response.code_details',
  'response.flags',
  'upstream.address',
  'via_upstream',
  // Our error-code header (errors/render.ts), which comes back in response headers.
  'x-llm-extproc-error',
  DESTINATION_HEADER,
  DESTINATION_METADATA_NAMESPACE,
  SERVED_ENDPOINT_KEY,
  SUBSET_HINT_KEY,
  SUBSET_HINT_NAMESPACE,
]);

/** The wire type of each top-level field we read, by field number; anything else is skipped. */
const EXPECTED_WIRE_TYPE: readonly (number | undefined)[] = [
  undefined,
  undefined,
  WIRE_LEN,
  WIRE_LEN,
  WIRE_LEN,
  WIRE_LEN,
  WIRE_LEN,
  WIRE_LEN,
  WIRE_LEN,
  WIRE_LEN,
  WIRE_VARINT,
  WIRE_LEN,
];

export function decodeProcessingRequest(buf: Buffer): ProcessingRequest {
  const r = new Reader(buf);
  const end = buf.length;
  const out: ProcessingRequest = {};
  while (r.pos < end) {
    const tag = r.uint32(end);
    const field = tag >>> 3;
    const wireType = tag & 7;
    if (wireType !== EXPECTED_WIRE_TYPE[field]) {
      r.skip(wireType, end);
      continue;
    }
    switch (field) {
      case 2:
      case 3:
      case 6:
      case 7:
      case 4:
      case 5: {
        const kind = REQUEST_FIELDS[field] as RequestKind;
        // A second member of the oneof replaces the first (proto3: the last one on the wire wins).
        if (out.request !== undefined && out.request !== kind) delete out[out.request];
        const stop = r.lengthEnd(end);
        out.request = kind;
        if (field <= 3) out[kind as 'request_headers'] = decodeHttpHeaders(r, stop);
        else if (field <= 5) out[kind as 'request_body'] = decodeHttpBody(r, stop);
        else out[kind as 'request_trailers'] = decodeHttpTrailers(r, stop);
        break;
      }
      case 8:
        out.metadata_context = decodeMetadata(r, r.lengthEnd(end));
        break;
      case 9:
        out.attributes ??= {};
        decodeStructMapEntry(r, r.lengthEnd(end), out.attributes);
        break;
      case 10:
        out.observability_mode = r.bool(end);
        break;
      case 11:
        out.protocol_config = decodeProtocolConfiguration(r, r.lengthEnd(end));
        break;
      default:
        r.skip(wireType, end);
    }
  }
  return out;
}

function decodeHttpHeaders(r: Reader, end: number): HttpHeaders {
  const out: HttpHeaders = {};
  while (r.pos < end) {
    const tag = r.uint32(end);
    switch (tag) {
      case (1 << 3) | WIRE_LEN:
        out.headers = decodeHeaderMap(r, r.lengthEnd(end));
        break;
      case (2 << 3) | WIRE_LEN:
        out.attributes ??= {};
        decodeStructMapEntry(r, r.lengthEnd(end), out.attributes);
        break;
      case (3 << 3) | WIRE_VARINT:
        out.end_of_stream = r.bool(end);
        break;
      default:
        skipField(r, tag, end);
    }
  }
  return out;
}

function decodeHeaderMap(r: Reader, end: number): HeaderMap {
  const headers: HeaderValue[] = [];
  while (r.pos < end) {
    const tag = r.uint32(end);
    if (tag === ((1 << 3) | WIRE_LEN)) headers.push(decodeHeaderValue(r, r.lengthEnd(end)));
    else skipField(r, tag, end);
  }
  return headers.length > 0 ? { headers } : {};
}

function decodeHeaderValue(r: Reader, end: number): HeaderValue {
  // `key` is only present when sent, like every other field (the type says required for writers).
  const out = {} as HeaderValue;
  while (r.pos < end) {
    const tag = r.uint32(end);
    switch (tag) {
      case (1 << 3) | WIRE_LEN:
        out.key = r.knownString(end, KNOWN_STRINGS);
        break;
      case (2 << 3) | WIRE_LEN:
        out.value = r.string(end);
        break;
      case (3 << 3) | WIRE_LEN:
        out.raw_value = r.bytes(end);
        break;
      default:
        skipField(r, tag, end);
    }
  }
  return out;
}

function decodeHttpBody(r: Reader, end: number): HttpBody {
  const out: HttpBody = {};
  while (r.pos < end) {
    const tag = r.uint32(end);
    switch (tag) {
      case (1 << 3) | WIRE_LEN:
        out.body = r.bytes(end);
        break;
      case (2 << 3) | WIRE_VARINT:
        out.end_of_stream = r.bool(end);
        break;
      case (3 << 3) | WIRE_VARINT:
        out.end_of_stream_without_message = r.bool(end);
        break;
      case (4 << 3) | WIRE_VARINT:
        out.grpc_message_compressed = r.bool(end);
        break;
      default:
        skipField(r, tag, end);
    }
  }
  return out;
}

function decodeHttpTrailers(r: Reader, end: number): HttpTrailers {
  const out: HttpTrailers = {};
  while (r.pos < end) {
    const tag = r.uint32(end);
    if (tag === ((1 << 3) | WIRE_LEN)) out.trailers = decodeHeaderMap(r, r.lengthEnd(end));
    else skipField(r, tag, end);
  }
  return out;
}

function decodeMetadata(r: Reader, end: number): Metadata {
  const out: Metadata = {};
  while (r.pos < end) {
    const tag = r.uint32(end);
    if (tag === ((1 << 3) | WIRE_LEN)) {
      out.filter_metadata ??= {};
      decodeStructMapEntry(r, r.lengthEnd(end), out.filter_metadata);
    } else {
      // typed_filter_metadata (2, google.protobuf.Any) is not read: we use untyped metadata only.
      skipField(r, tag, end);
    }
  }
  return out;
}

function decodeProtocolConfiguration(r: Reader, end: number): ProtocolConfiguration {
  const out: ProtocolConfiguration = {};
  while (r.pos < end) {
    const tag = r.uint32(end);
    switch (tag) {
      case (1 << 3) | WIRE_VARINT: {
        const mode = BODY_SEND_MODES[r.low32(end)];
        if (mode !== undefined) out.request_body_mode = mode;
        break;
      }
      case (2 << 3) | WIRE_VARINT: {
        const mode = BODY_SEND_MODES[r.low32(end)];
        if (mode !== undefined) out.response_body_mode = mode;
        break;
      }
      case (3 << 3) | WIRE_VARINT:
        out.send_body_without_waiting_for_header_response = r.bool(end);
        break;
      default:
        skipField(r, tag, end);
    }
  }
  return out;
}

/**
 * A field we do not read: unknown, unused, or one we read sent with another wire type. (An enum
 * number we have no name for is dropped where it is read: proto3 enums are open, our types are not.)
 */
function skipField(r: Reader, tag: number, end: number): void {
  r.skip(tag & 7, end);
}

// google.protobuf.Struct / Value / ListValue ───────────────────────────────────────────────────

/** One map<string, Struct> entry (key = 1, value = 2) into `into`; a repeated key overwrites. */
function decodeStructMapEntry(r: Reader, end: number, into: Record<string, ProtoStruct>): void {
  let key = '';
  let value: ProtoStruct | undefined;
  while (r.pos < end) {
    const tag = r.uint32(end);
    if (tag === ((1 << 3) | WIRE_LEN)) key = r.knownString(end, KNOWN_STRINGS);
    else if (tag === ((2 << 3) | WIRE_LEN)) value = decodeStruct(r, r.lengthEnd(end));
    else skipField(r, tag, end);
  }
  // An entry without a value has the empty one (proto3 map semantics).
  setOwn(into, key, value ?? {});
}

function decodeStruct(r: Reader, end: number): ProtoStruct {
  let fields: Record<string, ProtoValue> | undefined;
  while (r.pos < end) {
    const tag = r.uint32(end);
    if (tag === ((1 << 3) | WIRE_LEN)) {
      const entryEnd = r.lengthEnd(end);
      let key = '';
      let value: ProtoValue | undefined;
      while (r.pos < entryEnd) {
        const entryTag = r.uint32(entryEnd);
        if (entryTag === ((1 << 3) | WIRE_LEN)) key = r.knownString(entryEnd, KNOWN_STRINGS);
        else if (entryTag === ((2 << 3) | WIRE_LEN)) value = decodeValue(r, r.lengthEnd(entryEnd));
        else skipField(r, entryTag, entryEnd);
      }
      fields ??= {};
      setOwn(fields, key, value ?? {});
    } else {
      skipField(r, tag, end);
    }
  }
  return fields === undefined ? {} : { fields };
}

type ValueKind = NonNullable<ProtoValue['kind']>;

function decodeValue(r: Reader, end: number): ProtoValue {
  const out: ProtoValue = {};
  let kind: ValueKind | undefined;
  // A second member of the oneof replaces the first (the last one on the wire wins).
  const member = (next: ValueKind): void => {
    if (kind !== undefined && kind !== next) delete out[kind];
    kind = next;
  };
  while (r.pos < end) {
    const tag = r.uint32(end);
    switch (tag) {
      case (1 << 3) | WIRE_VARINT: {
        member('nullValue');
        r.low32(end); // NullValue has one value; any number means null
        out.nullValue = 'NULL_VALUE';
        break;
      }
      case (2 << 3) | WIRE_FIXED64:
        member('numberValue');
        out.numberValue = r.double(end);
        break;
      case (3 << 3) | WIRE_LEN:
        member('stringValue');
        out.stringValue = r.knownString(end, KNOWN_STRINGS);
        break;
      case (4 << 3) | WIRE_VARINT:
        member('boolValue');
        out.boolValue = r.bool(end);
        break;
      case (5 << 3) | WIRE_LEN:
        member('structValue');
        out.structValue = decodeStruct(r, r.lengthEnd(end));
        break;
      case (6 << 3) | WIRE_LEN: {
        member('listValue');
        const listEnd = r.lengthEnd(end);
        const values: ProtoValue[] = [];
        while (r.pos < listEnd) {
          const listTag = r.uint32(listEnd);
          if (listTag === ((1 << 3) | WIRE_LEN)) values.push(decodeValue(r, r.lengthEnd(listEnd)));
          else skipField(r, listTag, listEnd);
        }
        out.listValue = values.length > 0 ? { values } : {};
        break;
      }
      default:
        skipField(r, tag, end);
    }
  }
  if (kind !== undefined) out.kind = kind;
  return out;
}

/** Map keys come from the peer: `__proto__` becomes an own property, never the object's prototype. */
function setOwn<T>(into: Record<string, T>, key: string, value: T): void {
  if (key === '__proto__') Object.defineProperty(into, key, { value, enumerable: true, writable: true, configurable: true });
  else into[key] = value;
}
