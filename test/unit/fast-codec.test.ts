// The hot-path codec (src/extproc/codec/) must be indistinguishable from the reflection codec
// (protobufjs through @grpc/proto-loader with PROTO_LOADER_OPTIONS): every ProcessingRequest
// decodes to the same plain object, every ProcessingResponse encodes to the same bytes, and what
// the fast path leaves alone goes to reflection. Checked by examples for each case we read and by
// property tests over generated messages, unknown fields, merged messages and arbitrary bytes.

import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import fc from 'fast-check';
import { decodeProcessingRequest } from '../../src/extproc/codec/decode-request.js';
import { encodeProcessingResponse } from '../../src/extproc/codec/encode-response.js';
import { Unsupported, Writer } from '../../src/grpc/protobuf-wire.js';
import type { ProcessingRequest, ProcessingResponse } from '../../src/extproc/messages.js';
import { CONTINUE_RESPONSE_BODY } from '../../src/extproc/constant-replies.js';
import { loadWireDefinitions } from '../support/proto-definitions.js';

const wire = loadWireDefinitions();
const Process = wire.externalProcessor.Process;
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

/** What the reflection codec makes of `bytes`: the decoded object, or the error it throws. */
function reflectionDecode(bytes: Buffer): { value: object } | { error: true } {
  try {
    return { value: requestType.deserialize(bytes) };
  } catch {
    return { error: true };
  }
}

function fastEncode(value: unknown): Buffer {
  const w = new Writer();
  encodeProcessingResponse(w, value);
  return w.finish();
}

/** The fast decoder alone (no fallback): decoded value, or 'unsupported'. */
function fastDecodeOnly(bytes: Buffer): ProcessingRequest | 'unsupported' {
  try {
    return decodeProcessingRequest(bytes);
  } catch (err) {
    if (err instanceof Unsupported) return 'unsupported';
    throw err;
  }
}

// ── arbitraries (the plain shapes of messages.ts) ─────────────────────────────────────────────

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
    append: fc.record({ value: fc.boolean() }, { requiredKeys: [] }),
    append_action: fc.constantFrom('APPEND_IF_EXISTS_OR_ADD', 'ADD_IF_ABSENT', 'OVERWRITE_IF_EXISTS_OR_ADD', 'OVERWRITE_IF_EXISTS', 2),
    keep_empty_value: fc.boolean(),
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
    status: fc.constantFrom('CONTINUE', 'CONTINUE_AND_REPLACE', 0, 1),
    header_mutation: headerMutation,
    body_mutation: bodyMutation,
    trailers: headerMap,
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
    grpc_status: fc.record({ status: fc.integer({ min: 0, max: 16 }) }, { requiredKeys: [] }),
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
  .tuple(
    responseMember,
    fc.record({ dynamic_metadata: struct, mode_override: processingMode, request_drain: fc.boolean() }, { requiredKeys: [] }),
  )
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

  void it('property: merged messages (two concatenated encodings) decode like reflection, or go to it', () => {
    fc.assert(
      fc.property(processingRequest, processingRequest, (a, b) => {
        const onWire = Buffer.concat([requestType.serialize(a), requestType.serialize(b)]);
        const fast = fastDecodeOnly(onWire);
        const reflection = reflectionDecode(onWire);
        if (fast === 'unsupported') return; // the wrapped codec then returns exactly `reflection`
        assert.ok('value' in reflection, 'the fast path accepted what reflection rejects');
        assert.deepStrictEqual(fast, reflection.value);
      }),
      { numRuns: 300 },
    );
  });

  void it("property: arbitrary or truncated bytes give what the reflection codec gives (value or error) through the server's deserializer", () => {
    const truncated = fc.tuple(processingRequest, fc.nat()).map(([m, cut]) => {
      const full = requestType.serialize(m);
      return full.subarray(0, full.length === 0 ? 0 : cut % full.length);
    });
    const random = fc.uint8Array({ maxLength: 64 }).map((a) => Buffer.from(a));
    fc.assert(
      fc.property(fc.oneof(truncated, random), (onWire) => {
        const reflection = reflectionDecode(onWire);
        let served: { value: object } | { error: true };
        try {
          served = { value: Process.requestDeserialize(onWire) };
        } catch {
          served = { error: true };
        }
        assert.deepStrictEqual(served, reflection);
      }),
      { numRuns: 800 },
    );
  });

  void it('leaves typed_filter_metadata (google.protobuf.Any) and two oneof members to reflection, which the server then uses', () => {
    const withAny = requestType.serialize({
      metadata_context: { typed_filter_metadata: { k: { type_url: 'type.googleapis.com/x', value: Buffer.from([1]) } } },
    });
    assert.equal(fastDecodeOnly(withAny), 'unsupported');
    const before = wire.codecCounters.fallbackDecodes;
    assert.deepStrictEqual(Process.requestDeserialize(withAny), requestType.deserialize(withAny));
    assert.equal(wire.codecCounters.fallbackDecodes, before + 1);

    const twoMembers = Buffer.concat([
      requestType.serialize({ request_body: { end_of_stream: true } }),
      requestType.serialize({ request_headers: {} }),
    ]);
    assert.equal(fastDecodeOnly(twoMembers), 'unsupported');
    assert.deepStrictEqual(Process.requestDeserialize(twoMembers), requestType.deserialize(twoMembers));
  });
});

describe('fast ProcessingResponse encoder', () => {
  void it("property: any reply in the shapes of messages.ts encodes to the reflection codec's exact bytes", () => {
    fc.assert(
      fc.property(processingResponse, (reply) => {
        let fast: Buffer | 'unsupported';
        try {
          fast = fastEncode(reply);
        } catch (err) {
          if (!(err instanceof Unsupported)) throw err;
          fast = 'unsupported';
        }
        const reflection = responseType.serialize(reply);
        if (fast === 'unsupported') {
          // Only strings protobufjs encodes its own way (lone surrogates) may be left to it.
          assert.match(JSON.stringify(reply), /\\ud[89a-f][0-9a-f]{2}/i);
        } else {
          assert.deepStrictEqual(fast, reflection);
        }
        assert.deepStrictEqual(Process.responseSerialize(reply as ProcessingResponse), reflection);
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

  void it('leaves fields outside the fast path to reflection: Duration, streamed immediate replies, status names, unknown keys', () => {
    const cases: object[] = [
      { request_headers: { response: {} }, override_message_timeout: { seconds: '5', nanos: 0 } },
      { streamed_immediate_response: { body_response: { body: Buffer.from('x'), end_of_stream: true } } },
      { immediate_response: { status: { code: 'NotFound' } } },
      { request_body: { response: { clear_route_cache: 1 } } },
      { immediate_response: { status: { code: -1 } } },
      { request_headers: { response: {}, not_a_field: true } },
    ];
    for (const reply of cases) {
      assert.throws(() => fastEncode(reply), Unsupported, JSON.stringify(reply));
      const before = wire.codecCounters.fallbackEncodes;
      assert.deepStrictEqual(Process.responseSerialize(reply as ProcessingResponse), responseType.serialize(reply));
      assert.equal(wire.codecCounters.fallbackEncodes, before + 1);
    }
  });

  void it('the cached constant replies still win over both codecs', () => {
    assert.deepStrictEqual(Process.responseSerialize(CONTINUE_RESPONSE_BODY), responseType.serialize({ response_body: { response: {} } }));
  });
});
