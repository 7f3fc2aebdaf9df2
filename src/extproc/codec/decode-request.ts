// Hand-written decoder for envoy.service.ext_proc.v3.ProcessingRequest, the message Envoy sends
// for every header block and body chunk. It builds the same plain objects the reflection codec
// builds with PROTO_LOADER_OPTIONS (snake_case names; enums as names; bytes as Buffer views; a
// field is present iff it was on the wire; oneofs named by a discriminator property; Struct/Value
// with protobufjs's camelCase names) without protobufjs's intermediate message objects and
// generic toObject conversion. Field numbers are those of proto/ (pinned by proto-contract.test).
// Anything it does not decode exactly like the reflection codec throws Unsupported; see
// test/unit/fast-codec.test.ts for the equivalence checks.

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
  BodySendMode,
} from '../messages.js';
import { ERROR_CODE_HEADER } from '../../errors/render.js';
import {
  DESTINATION_HEADER,
  DESTINATION_METADATA_NAMESPACE,
  SERVED_ENDPOINT_KEY,
  SUBSET_HINT_KEY,
  SUBSET_HINT_NAMESPACE,
} from '../protocol-names.js';
import { Reader, StringTable, Unsupported, WIRE_FIXED64, WIRE_LEN, WIRE_VARINT } from '../../grpc/protobuf-wire.js';

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
  ERROR_CODE_HEADER,
  DESTINATION_HEADER,
  DESTINATION_METADATA_NAMESPACE,
  SERVED_ENDPOINT_KEY,
  SUBSET_HINT_KEY,
  SUBSET_HINT_NAMESPACE,
]);

const BODY_SEND_MODES: readonly BodySendMode[] = ['NONE', 'STREAMED', 'BUFFERED', 'BUFFERED_PARTIAL', 'FULL_DUPLEX_STREAMED', 'GRPC'];

export function decodeProcessingRequest(buf: Buffer): ProcessingRequest {
  const r = new Reader(buf);
  const end = buf.length;
  const out: ProcessingRequest = {};
  while (r.pos < end) {
    const tag = r.uint32(end);
    const field = tag >>> 3;
    const wireType = tag & 7;
    switch (field) {
      case 2:
      case 3:
      case 6:
      case 7:
      case 4:
      case 5: {
        expectWire(wireType, WIRE_LEN);
        const kind = REQUEST_FIELDS[field] as RequestKind;
        // Two different oneof members on the wire: protobufjs keeps both; leave that to it.
        if (out.request !== undefined && out.request !== kind) throw new Unsupported('two members of oneof request');
        const stop = r.lengthEnd(end);
        out.request = kind;
        if (field <= 3) out[kind as 'request_headers'] = decodeHttpHeaders(r, stop);
        else if (field <= 5) out[kind as 'request_body'] = decodeHttpBody(r, stop);
        else out[kind as 'request_trailers'] = decodeHttpTrailers(r, stop);
        break;
      }
      case 8:
        expectWire(wireType, WIRE_LEN);
        out.metadata_context = decodeMetadata(r, r.lengthEnd(end));
        break;
      case 9:
        expectWire(wireType, WIRE_LEN);
        out.attributes ??= {};
        decodeStructMapEntry(r, r.lengthEnd(end), out.attributes);
        break;
      case 10:
        expectWire(wireType, WIRE_VARINT);
        out.observability_mode = r.bool(end);
        break;
      case 11:
        expectWire(wireType, WIRE_LEN);
        out.protocol_config = decodeProtocolConfiguration(r, r.lengthEnd(end));
        break;
      default:
        r.skip(wireType, end);
    }
  }
  return out;
}

function expectWire(actual: number, expected: number): void {
  // protobufjs decodes by field number whatever the wire type says; mismatches go to it.
  if (actual !== expected) throw new Unsupported('unexpected wire type');
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
        skipUnknown(r, tag, end, 3);
    }
  }
  return out;
}

function decodeHeaderMap(r: Reader, end: number): HeaderMap {
  const headers: HeaderValue[] = [];
  while (r.pos < end) {
    const tag = r.uint32(end);
    if (tag === ((1 << 3) | WIRE_LEN)) headers.push(decodeHeaderValue(r, r.lengthEnd(end)));
    else skipUnknown(r, tag, end, 1);
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
        skipUnknown(r, tag, end, 3);
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
        skipUnknown(r, tag, end, 4);
    }
  }
  return out;
}

function decodeHttpTrailers(r: Reader, end: number): HttpTrailers {
  const out: HttpTrailers = {};
  while (r.pos < end) {
    const tag = r.uint32(end);
    if (tag === ((1 << 3) | WIRE_LEN)) out.trailers = decodeHeaderMap(r, r.lengthEnd(end));
    else skipUnknown(r, tag, end, 1);
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
    } else if (tag >>> 3 === 2) {
      throw new Unsupported('typed_filter_metadata (google.protobuf.Any)');
    } else {
      skipUnknown(r, tag, end, 2);
    }
  }
  return out;
}

function decodeProtocolConfiguration(r: Reader, end: number): ProtocolConfiguration {
  const out: ProtocolConfiguration = {};
  while (r.pos < end) {
    const tag = r.uint32(end);
    switch (tag) {
      case (1 << 3) | WIRE_VARINT:
        out.request_body_mode = enumName(BODY_SEND_MODES, r.uint32(end));
        break;
      case (2 << 3) | WIRE_VARINT:
        out.response_body_mode = enumName(BODY_SEND_MODES, r.uint32(end));
        break;
      case (3 << 3) | WIRE_VARINT:
        out.send_body_without_waiting_for_header_response = r.bool(end);
        break;
      default:
        skipUnknown(r, tag, end, 3);
    }
  }
  return out;
}

function enumName<T extends string>(names: readonly T[], value: number): T {
  const name = names[value];
  // proto3 enums are open: protobufjs would hand out the bare number, which our types do not allow.
  if (name === undefined) throw new Unsupported('enum value without a name');
  return name;
}

/** A field this decoder knows with an unexpected wire type goes to reflection; others are skipped. */
function skipUnknown(r: Reader, tag: number, end: number, maxKnownField: number): void {
  const field = tag >>> 3;
  if (field >= 1 && field <= maxKnownField) throw new Unsupported('unexpected wire type');
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
    else skipUnknown(r, tag, end, 2);
  }
  // protobufjs stores null for an entry without a value and then fails in toObject.
  if (value === undefined) throw new Unsupported('map entry without a value');
  setOwn(into, key, value);
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
        else skipUnknown(r, entryTag, entryEnd, 2);
      }
      if (value === undefined) throw new Unsupported('map entry without a value');
      fields ??= {};
      setOwn(fields, key, value);
    } else {
      skipUnknown(r, tag, end, 1);
    }
  }
  return fields === undefined ? {} : { fields };
}

type ValueKind = NonNullable<ProtoValue['kind']>;

function decodeValue(r: Reader, end: number): ProtoValue {
  const out: ProtoValue = {};
  let kind: ValueKind | undefined;
  const member = (next: ValueKind): void => {
    if (kind !== undefined && kind !== next) throw new Unsupported('two members of oneof kind');
    kind = next;
  };
  while (r.pos < end) {
    const tag = r.uint32(end);
    switch (tag) {
      case (1 << 3) | WIRE_VARINT: {
        member('nullValue');
        const n = r.uint32(end);
        if (n !== 0) throw new Unsupported('NullValue without a name');
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
          else skipUnknown(r, listTag, listEnd, 1);
        }
        out.listValue = values.length > 0 ? { values } : {};
        break;
      }
      default:
        skipUnknown(r, tag, end, 6);
    }
  }
  if (kind !== undefined) out.kind = kind;
  return out;
}

/** Map keys come from the peer; protobufjs assigns `__proto__` as a prototype, so leave that key to it. */
function setOwn<T>(into: Record<string, T>, key: string, value: T): void {
  if (key === '__proto__') throw new Unsupported('__proto__ map key');
  into[key] = value;
}
