// FULL_DUPLEX_STREAMED sends a long body back to Envoy in replies of up to 64 KiB that carry the
// body's own bytes and nothing else. Encoded like any reply, each chunk was copied twice on its way
// out (into the encoder's scratch, then out of it into the frame): 2 MiB of copies and a megabyte of
// short-lived Buffers per 1 MiB prompt, on the message the client waits on. Here such a reply is
// framed as pieces around the body instead: the gRPC prefix and every tag and length before the
// body in one small Buffer, then a view of the body itself, then the end_of_stream field. The
// transport sends the pieces in order, so the bytes on the wire are the encoder's, unchanged
// (test/unit/extproc/streamed-body-frame.test.ts compares them).
// Pure: a reply in, pieces out.

import { varintSize, WIRE_LEN, WIRE_VARINT } from '../../grpc/protobuf-wire.js';
import type { Writer } from '../../grpc/protobuf-wire.js';
import type { ProcessingResponse } from '../messages.js';

/** A streamed-body reply in its only shape here: the body, and whether it ends the stream. */
export interface StreamedBodyReply {
  /** ProcessingResponse's field: request_body (3) or response_body (4). */
  readonly field: 3 | 4;
  readonly body: Buffer;
  readonly endOfStream: boolean | undefined;
}

/**
 * True when `value` has no field set (neither undefined nor null) other than `allowed`. Oneof
 * discriminators (`response`, `mutation`) are allowed by the callers: the encoder ignores them too.
 */
function onlySet(value: object, allowed: readonly string[]): boolean {
  for (const [key, field] of Object.entries(value)) if (field != null && !allowed.includes(key)) return false;
  return true;
}

/**
 * The reply's body and end flag when it is exactly a streamed body of at least `minBytes`
 * (ProcessingResponse.request_body or response_body → response → body_mutation →
 * streamed_response, with body and end_of_stream only); undefined for any other reply, which the
 * encoder frames as usual. The body's size is looked at first: a short chunk (an SSE event) costs
 * a few property reads, not the shape check.
 */
export function streamedBodyReply(reply: ProcessingResponse, minBytes: number): StreamedBodyReply | undefined {
  const bodyResponse = reply.request_body ?? reply.response_body;
  const common = bodyResponse?.response;
  const mutation = common?.body_mutation;
  const streamed = mutation?.streamed_response;
  const body = streamed?.body;
  if (bodyResponse == null || common == null || mutation == null || streamed == null || body == null || body.length < minBytes)
    return undefined;
  const field = reply.request_body != null ? 3 : 4;
  const exact =
    onlySet(reply, ['response', field === 3 ? 'request_body' : 'response_body']) &&
    onlySet(bodyResponse, ['response']) &&
    onlySet(common, ['body_mutation']) &&
    onlySet(mutation, ['mutation', 'streamed_response']) &&
    onlySet(streamed, ['body', 'end_of_stream']);
  return exact ? { field, body, endOfStream: streamed.end_of_stream ?? undefined } : undefined;
}

/** The end_of_stream field (2, varint) after the body: shared, never written into. */
const END_OF_STREAM = { true: Buffer.from([(2 << 3) | WIRE_VARINT, 1]), false: Buffer.from([(2 << 3) | WIRE_VARINT, 0]) } as const;

/**
 * The reply as a length-prefixed gRPC message in pieces: [prefix and tags, body, end_of_stream]
 * (the last left out when the flag is unset), the first written with `writer` (the callers' scratch).
 * The body piece is the caller's Buffer itself: it must not change until written.
 */
export function framedStreamedBody(writer: Writer, reply: StreamedBodyReply): Buffer[] {
  const n = reply.body.length;
  const tail = reply.endOfStream === undefined ? 0 : END_OF_STREAM.true.length;
  const streamed = 1 + varintSize(n) + n + tail; // StreamedBodyResponse: body = 1, end_of_stream = 2
  const mutation = 1 + varintSize(streamed) + streamed; // BodyMutation: streamed_response = 3
  const common = 1 + varintSize(mutation) + mutation; // CommonResponse: body_mutation = 3
  const bodyResponse = 1 + varintSize(common) + common; // BodyResponse: response = 1
  const message = 1 + varintSize(bodyResponse) + bodyResponse; // ProcessingResponse: request_body = 3 / response_body = 4
  writer.reset();
  for (const [field, length] of [
    [reply.field, bodyResponse],
    [1, common],
    [3, mutation],
    [3, streamed],
    [1, n],
  ] as const) {
    writer.tag(field, WIRE_LEN);
    writer.uint32(length);
  }
  const head = writer.finishFramed();
  head.writeUInt32BE(message, 1); // the prefix counts the whole message, not only the bytes before the body
  if (reply.endOfStream === undefined) return [head, reply.body];
  return [head, reply.body, reply.endOfStream ? END_OF_STREAM.true : END_OF_STREAM.false];
}
