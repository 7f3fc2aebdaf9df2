// Our codec (src/extproc/codec/, the only one the server runs) against the reflection codec as the
// oracle (protobufjs through @grpc/proto-loader with PROTO_LOADER_OPTIONS): every ProcessingRequest
// decodes to the same plain object, every ProcessingResponse encodes to the same bytes; where
// protobufjs strays from proto3 (two members of one oneof) ours follows proto3, and it is total:
// unknown, unused and mistyped fields are skipped, only bytes that are no message at all fail.
// Checked by examples for each case we read and by property tests over generated messages,
// unknown fields, merged messages and arbitrary bytes.

import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import fc from 'fast-check';
import { decodeProcessingRequest } from '../../../src/extproc/codec/decode-request.js';
import { encodeProcessingResponse } from '../../../src/extproc/codec/encode-response.js';
import { MalformedMessage, Writer } from '../../../src/grpc/protobuf-wire.js';
import { encodeReply } from '../../../src/extproc/reply-frames.js';
import type { ProcessingRequest, ProcessingResponse } from '../../../src/extproc/messages.js';
import { CONTINUE_RESPONSE_BODY } from '../../../src/extproc/constant-replies.js';
import { loadWireDefinitions } from '../../support/proto-definitions.js';

const wire = loadWireDefinitions();
const EXT_PROC = 'envoy.service.ext_proc.v3';

interface ReflectionType {
  serialize(value: object): Buffer;
  deserialize(bytes: Buffer): object;
}

function reflectionType(name: string): ReflectionType {
  const def = wire.packageDefinition[name] as unknown as Partial<ReflectionType> | undefined;
  assert.ok(def?.serialize !== undefined && def.deserialize !== undefined, `${name} is a message type`);
  return def as ReflectionType;
}

const requestType = reflectionType(`${EXT_PROC}.ProcessingRequest`);
const responseType = reflectionType(`${EXT_PROC}.ProcessingResponse`);

function fastEncode(value: ProcessingResponse): Buffer {
  const w = new Writer();
  encodeProcessingResponse(w, value);
  return w.finish();
}

/** Our decoder: the decoded value, or 'malformed' for bytes that are no protobuf message. */
function fastDecodeOnly(bytes: Buffer): ProcessingRequest | 'malformed' {
  try {
    return decodeProcessingRequest(bytes);
  } catch (err) {
    if (err instanceof MalformedMessage) return 'malformed';
    throw err;
  }
}

const REQUEST_MEMBERS = ['request_headers', 'response_headers', 'request_body', 'response_body', 'request_trailers', 'response_trailers'];

// ── arbitraries (the plain shapes of messages.ts; replies hold only the fields we send) ─────────

const text = fc.string({ unit: 'grapheme', maxLength: 12 });
const anyText = fc.oneof(text, fc.string({ unit: 'binary', maxLength: 8 }));
const bytes = fc.uint8Array({ maxLength: 40 }).map((a) => Buffer.from(a));
const key = anyText.filter((k) => k !== '__proto__');

const protoValue = fc.letrec<{ value: object; struct: object }>((tie) => ({
  value: fc.oneof(
    { depthSize: 'small', withCrossShrink: true },
    fc.constant({}),
    fc.constant({ nullValue: 'NULL_VALUE' }),
    fc.double().map((numberValue) => ({ numberValue })),
    anyText.map((stringValue) => ({ stringValue })),
    fc.boolean().map((boolValue) => ({ boolValue })),
    tie('struct').map((structValue) => ({ structValue })),
    fc.array(tie('value'), { maxLength: 3 }).map((values) => ({ listValue: values.length > 0 ? { values } : {} })),
  ),
  struct: fc.oneof(
    { depthSize: 'small' },
    fc.constant({}),
    fc.dictionary(key, tie('value'), { maxKeys: 3, minKeys: 1 }).map((fields) => ({ fields })),
  ),
}));
const struct = protoValue.struct;
const structMap = fc.dictionary(key, struct, { minKeys: 1, maxKeys: 3 });

const headerValue = fc.record({ key: anyText, value: anyText, raw_value: bytes }, { requiredKeys: [] });
const headerMap = fc.oneof(
  fc.constant({}),
  fc.array(headerValue, { minLength: 1, maxLength: 4 }).map((headers) => ({ headers })),
);
const httpHeaders = fc.record({ headers: headerMap, attributes: structMap, end_of_stream: fc.boolean() }, { requiredKeys: [] });
const httpBody = fc.record(
  { body: bytes, end_of_stream: fc.boolean(), end_of_stream_without_message: fc.boolean(), grpc_message_compressed: fc.boolean() },
  { requiredKeys: [] },
);
const httpTrailers = fc.record({ trailers: headerMap }, { requiredKeys: [] });
const bodyMode = fc.constantFrom('NONE', 'STREAMED', 'BUFFERED', 'BUFFERED_PARTIAL', 'FULL_DUPLEX_STREAMED', 'GRPC');
const protocolConfig = fc.record(
  { request_body_mode: bodyMode, response_body_mode: bodyMode, send_body_without_waiting_for_header_response: fc.boolean() },
  { requiredKeys: [] },
);
const requestMember = fc.oneof(
  httpHeaders.map((v) => ({ request_headers: v })),
  httpHeaders.map((v) => ({ response_headers: v })),
  httpBody.map((v) => ({ request_body: v })),
  httpBody.map((v) => ({ response_body: v })),
  httpTrailers.map((v) => ({ request_trailers: v })),
  httpTrailers.map((v) => ({ response_trailers: v })),
  fc.constant({}),
);
const processingRequest = fc
  .tuple(
    requestMember,
    fc.record(
      {
        metadata_context: fc.record({ filter_metadata: structMap }, { requiredKeys: [] }),
        attributes: structMap,
        observability_mode: fc.boolean(),
        protocol_config: protocolConfig,
      },
      { requiredKeys: [] },
    ),
  )
  .map(([member, rest]) => ({ ...member, ...rest }));

const headerValueOption = fc.record(
  {
    header: headerValue,
    append: fc.record({ value: fc.boolean() }),
  },
  { requiredKeys: [] },
);
const headerMutation = fc.record(
  { set_headers: fc.array(headerValueOption, { maxLength: 3 }), remove_headers: fc.array(anyText, { maxLength: 3 }) },
  { requiredKeys: [] },
);
const streamedBody = fc.record(
  { body: bytes, end_of_stream: fc.boolean(), end_of_stream_without_message: fc.boolean(), grpc_message_compressed: fc.boolean() },
  { requiredKeys: [] },
);
const bodyMutation = fc.oneof(
  fc.constant({}),
  bytes.map((body) => ({ mutation: 'body', body })),
  fc.boolean().map((clear_body) => ({ mutation: 'clear_body', clear_body })),
  streamedBody.map((streamed_response) => ({ mutation: 'streamed_response', streamed_response })),
);
const commonResponse = fc.record(
  {
    status: fc.constantFrom('CONTINUE', 'CONTINUE_AND_REPLACE'),
    header_mutation: headerMutation,
    body_mutation: bodyMutation,
    clear_route_cache: fc.boolean(),
  },
  { requiredKeys: [] },
);
const headersResponse = fc.record({ response: commonResponse }, { requiredKeys: [] });
const trailersResponse = fc.record({ header_mutation: headerMutation }, { requiredKeys: [] });
const immediateResponse = fc.record(
  {
    status: fc.record({ code: fc.integer({ min: 0, max: 999 }) }),
    headers: headerMutation,
    body: bytes,
    details: anyText,
  },
  { requiredKeys: ['status'] },
);
const headerMode = fc.constantFrom('DEFAULT', 'SEND', 'SKIP');
const processingMode = fc.record(
  {
    request_header_mode: headerMode,
    response_header_mode: headerMode,
    request_body_mode: bodyMode,
    response_body_mode: bodyMode,
    request_trailer_mode: headerMode,
    response_trailer_mode: headerMode,
  },
  { requiredKeys: [] },
);
const responseMember = fc.oneof(
  headersResponse.map((v) => ({ response: 'request_headers', request_headers: v })),
  headersResponse.map((v) => ({ response: 'response_headers', response_headers: v })),
  headersResponse.map((v) => ({ response: 'request_body', request_body: v })),
  headersResponse.map((v) => ({ response: 'response_body', response_body: v })),
  trailersResponse.map((v) => ({ response: 'request_trailers', request_trailers: v })),
  trailersResponse.map((v) => ({ response: 'response_trailers', response_trailers: v })),
  immediateResponse.map((v) => ({ response: 'immediate_response', immediate_response: v })),
  fc.constant({}),
);
const processingResponse = fc
  .tuple(responseMember, fc.record({ dynamic_metadata: struct, mode_override: processingMode }, { requiredKeys: [] }))
  .map(([member, rest]) => ({ ...member, ...rest }));

// ── raw wire helpers for unknown fields ───────────────────────────────────────────────────────

function varint(n: number): number[] {
  const out: number[] = [];
  let v = n;
  while (v >= 0x80) {
    out.push((v % 0x80) | 0x80);
    v = Math.floor(v / 0x80);
  }
  out.push(v);
  return out;
}

/** One field on the wire: number, wire type (0, 1, 2, 5) and a payload seed. */
const unknownField = (numbers: fc.Arbitrary<number>): fc.Arbitrary<Buffer> =>
  fc
    .tuple(numbers, fc.constantFrom(0, 1, 2, 5), fc.uint8Array({ maxLength: 10 }), fc.nat({ max: 2 ** 31 }))
    .map(([field, wireType, payload, n]) => {
      const tag = varint(field * 8 + wireType);
      if (wireType === 0) return Buffer.from([...tag, ...varint(n)]);
      if (wireType === 1) return Buffer.from([...tag, ...Buffer.alloc(8, n & 0xff)]);
      if (wireType === 5) return Buffer.from([...tag, ...Buffer.alloc(4, n & 0xff)]);
      return Buffer.from([...tag, ...varint(payload.length), ...payload]);
    });

function lengthDelimited(field: number, content: Buffer): Buffer {
  return Buffer.concat([Buffer.from([...varint(field * 8 + 2), ...varint(content.length)]), content]);
}

const HTTP_BODY_TYPE = reflectionType(`${EXT_PROC}.HttpBody`);
const HTTP_HEADERS_TYPE = reflectionType(`${EXT_PROC}.HttpHeaders`);

// ── tests ─────────────────────────────────────────────────────────────────────────────────────

describe('fast ProcessingRequest decoder', () => {
  void it("decodes every oneof case and every field we read into the reflection codec's exact shape", () => {
    const examples: object[] = [
      {
        request_headers: {
          headers: {
            headers: [
              { key: ':path', raw_value: Buffer.from('/v1/chat/completions') },
              { key: 'x-old', value: 'v' },
            ],
          },
          end_of_stream: false,
        },
        attributes: {
          'envoy.filters.http.ext_proc': {
            fields: {
              'request.id': { stringValue: 'abc' },
              'x.n': { numberValue: 1.5 },
              'x.b': { boolValue: true },
              'x.null': { nullValue: 'NULL_VALUE' },
            },
          },
        },
        protocol_config: {
          request_body_mode: 'FULL_DUPLEX_STREAMED',
          response_body_mode: 'STREAMED',
          send_body_without_waiting_for_header_response: true,
        },
        metadata_context: {
          filter_metadata: {
            'envoy.lb': { fields: { subset: { structValue: { fields: { a: { listValue: { values: [{ stringValue: 'x' }, {}] } } } } } } },
          },
        },
      },
      {
        response_headers: { headers: { headers: [{ key: ':status', raw_value: Buffer.from('200') }] }, end_of_stream: true },
        observability_mode: true,
      },
      { request_body: { body: Buffer.from('{"model":"m"}'), end_of_stream: true } },
      { response_body: { body: Buffer.from('data: {}\n\n'), end_of_stream: false } },
      {
        response_body: { body: Buffer.alloc(0), end_of_stream: true, end_of_stream_without_message: true, grpc_message_compressed: false },
      },
      { request_trailers: { trailers: { headers: [{ key: 'x-t', raw_value: Buffer.from('1') }] } } },
      { response_trailers: {} },
      { response_headers: { attributes: { f: { fields: { k: { stringValue: 'deprecated place' } } } } } },
      {},
    ];
    for (const example of examples) {
      const onWire = requestType.serialize(example);
      const expected = requestType.deserialize(onWire);
      assert.deepStrictEqual(fastDecodeOnly(onWire), expected, JSON.stringify(example));
    }
    // And the shape is the one messages.ts promises (spot check of the discriminator and a view).
    const decoded = decodeProcessingRequest(requestType.serialize({ response_body: { body: Buffer.from('chunk'), end_of_stream: true } }));
    assert.equal(decoded.request, 'response_body');
    assert.equal(decoded.response_body?.body?.toString(), 'chunk');
    assert.equal(decoded.response_body?.end_of_stream, true);
  });

  void it('property: any ProcessingRequest the reflection codec encodes decodes identically, without falling back', () => {
    fc.assert(
      fc.property(processingRequest, (message) => {
        const onWire = requestType.serialize(message);
        assert.deepStrictEqual(fastDecodeOnly(onWire), requestType.deserialize(onWire));
      }),
      { numRuns: 500 },
    );
  });

  void it('property: unknown fields are skipped as protobufjs skips them, at the top level and inside nested messages', () => {
    // Field numbers Envoy might add later: outside 1..11 at the top level, outside 1..4 in HttpBody, 1..3 in HttpHeaders.
    const top = unknownField(fc.integer({ min: 12, max: 5000 }));
    const inner = unknownField(fc.integer({ min: 5, max: 300 }));
    fc.assert(
      fc.property(
        processingRequest,
        fc.array(top, { maxLength: 3 }),
        httpBody,
        fc.array(inner, { maxLength: 3 }),
        httpHeaders,
        fc.array(inner, { maxLength: 2 }),
        (message, topUnknown, body, bodyUnknown, headers, headersUnknown) => {
          const onWire = Buffer.concat([
            ...topUnknown.slice(0, 1),
            requestType.serialize(message),
            ...topUnknown.slice(1),
            // The same oneof member as the message or none, so this stays a single-member message.
            ...('request_body' in message ||
            !Object.keys(message).some((k) => k.endsWith('_headers') || k.endsWith('_body') || k.endsWith('_trailers'))
              ? [lengthDelimited(4, Buffer.concat([HTTP_BODY_TYPE.serialize(body), ...bodyUnknown]))]
              : []),
            lengthDelimited(12, Buffer.concat([HTTP_HEADERS_TYPE.serialize(headers), ...headersUnknown])), // unknown top-level field with a message in it
          ]);
          assert.deepStrictEqual(fastDecodeOnly(onWire), requestType.deserialize(onWire));
        },
      ),
      { numRuns: 300 },
    );
  });

  void it('property: merged messages (two concatenated encodings) decode as proto3 merges them: the last oneof member wins', () => {
    fc.assert(
      fc.property(processingRequest, processingRequest, (a, b) => {
        const onWire = Buffer.concat([requestType.serialize(a), requestType.serialize(b)]);
        // What proto3 says: a member of the oneof in `b` replaces a different one in `a`. Without
        // the replaced member on the wire, protobufjs (which would keep both) agrees.
        const bMember = REQUEST_MEMBERS.find((k) => k in b);
        const first = Object.fromEntries(
          Object.entries(a).filter(([k]) => bMember === undefined || !REQUEST_MEMBERS.includes(k) || k === bMember),
        );
        const expected = requestType.deserialize(Buffer.concat([requestType.serialize(first), requestType.serialize(b)]));
        assert.deepStrictEqual(fastDecodeOnly(onWire), expected);
      }),
      { numRuns: 300 },
    );
  });

  void it('property: arbitrary or truncated bytes decode to a value or fail as a malformed message, never otherwise', () => {
    const truncated = fc.tuple(processingRequest, fc.nat()).map(([m, cut]) => {
      const full = requestType.serialize(m);
      return full.subarray(0, full.length === 0 ? 0 : cut % full.length);
    });
    const random = fc.uint8Array({ maxLength: 64 }).map((a) => Buffer.from(a));
    fc.assert(
      fc.property(fc.oneof(truncated, random), (onWire) => {
        const decoded = fastDecodeOnly(onWire);
        // Whatever it decodes is a message in the shapes of messages.ts: it re-encodes and decodes the same.
        if (decoded !== 'malformed') assert.deepStrictEqual(fastDecodeOnly(requestType.serialize(decoded)), decoded);
      }),
      { numRuns: 800 },
    );
  });

  void it('skips typed_filter_metadata (google.protobuf.Any, which we do not read) and keeps the last of two oneof members', () => {
    const withAny = requestType.serialize({
      metadata_context: { typed_filter_metadata: { k: { type_url: 'type.googleapis.com/x', value: Buffer.from([1]) } } },
    });
    assert.deepStrictEqual(fastDecodeOnly(withAny), { metadata_context: {} });

    const twoMembers = Buffer.concat([
      requestType.serialize({ request_body: { end_of_stream: true } }),
      requestType.serialize({ request_headers: {} }),
    ]);
    assert.deepStrictEqual(fastDecodeOnly(twoMembers), { request: 'request_headers', request_headers: {} });
  });

  void it('skips a known field sent with another wire type, drops enum numbers without a name, and gives a map entry without a value the empty one', () => {
    // end_of_stream (HttpBody field 2, a varint) as a length-delimited field, then the real body.
    const mistyped = lengthDelimited(5, Buffer.concat([lengthDelimited(2, Buffer.from('x')), lengthDelimited(1, Buffer.from('ok'))]));
    assert.deepStrictEqual(fastDecodeOnly(mistyped), { request: 'response_body', response_body: { body: Buffer.from('ok') } });
    // protocol_config (11) with request_body_mode (1) = 42, a number Envoy might add later.
    const unknownMode = lengthDelimited(11, Buffer.from([0x08, 42, 0x10, 1]));
    assert.deepStrictEqual(fastDecodeOnly(unknownMode), { protocol_config: { response_body_mode: 'STREAMED' } });
    // attributes (9): a map entry with only its key.
    const keyOnly = lengthDelimited(9, lengthDelimited(1, Buffer.from('envoy.filters.http.ext_proc')));
    assert.deepStrictEqual(fastDecodeOnly(keyOnly), { attributes: { 'envoy.filters.http.ext_proc': {} } });
    // A map key that would be a prototype elsewhere stays an own property.
    const proto = fastDecodeOnly(lengthDelimited(9, lengthDelimited(1, Buffer.from('__proto__'))));
    assert.ok(proto !== 'malformed' && Object.hasOwn(proto.attributes ?? {}, '__proto__'));
    assert.equal(Object.getPrototypeOf(proto.attributes), Object.prototype);
  });
});

describe('fast ProcessingResponse encoder', () => {
  void it("property: any reply in the shapes of messages.ts encodes to the reflection codec's exact bytes", () => {
    fc.assert(
      fc.property(processingResponse, (reply) => {
        const fast = fastEncode(reply as ProcessingResponse);
        // Lone surrogates are no text: Buffer writes U+FFFD for them, protobufjs its own bytes.
        if (/\\ud[89a-f][0-9a-f]{2}/i.test(JSON.stringify(reply))) return;
        assert.deepStrictEqual(fast, responseType.serialize(reply));
        assert.deepStrictEqual(encodeReply(reply as ProcessingResponse), fast);
      }),
      { numRuns: 500 },
    );
  });

  void it('widens length prefixes for large bodies and deep nesting (bytes still identical)', () => {
    const large: ProcessingResponse = {
      request_body: {
        response: {
          status: 'CONTINUE_AND_REPLACE',
          header_mutation: {
            set_headers: [{ header: { key: 'content-length', raw_value: Buffer.from('300000') }, append: { value: false } }],
            remove_headers: ['x-a'],
          },
          body_mutation: { body: Buffer.alloc(300_000, 0x61) },
        },
      },
      dynamic_metadata: { fields: { ns: { structValue: { fields: { big: { stringValue: 'é'.repeat(20_000) } } } } } },
    };
    assert.deepStrictEqual(fastEncode(large), responseType.serialize(large));
    const streamed: ProcessingResponse = {
      response_body: {
        response: {
          body_mutation: { mutation: 'streamed_response', streamed_response: { body: Buffer.alloc(70_000, 1), end_of_stream: true } },
        },
      },
    };
    assert.deepStrictEqual(fastEncode(streamed), responseType.serialize(streamed));
  });

  void it('writes a negative int32 as protobufjs does (sign-extended to ten bytes)', () => {
    const reply: ProcessingResponse = { immediate_response: { status: { code: -1 } } };
    assert.deepStrictEqual(fastEncode(reply), responseType.serialize(reply));
  });

  void it('the framed constant replies are what the oracle writes', () => {
    assert.deepStrictEqual(encodeReply(CONTINUE_RESPONSE_BODY), responseType.serialize({ response_body: { response: {} } }));
  });
});
