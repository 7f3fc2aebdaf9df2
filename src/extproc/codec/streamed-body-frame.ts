// FULL_DUPLEX_STREAMED sends a long body back to Envoy in replies of up to 64 KiB that carry the
// body's own bytes and nothing else. Encoded like any reply, each chunk was copied twice on its way
// out (into the encoder's scratch, then out of it into the frame): 2 MiB of copies and a megabyte of
// short-lived Buffers per 1 MiB prompt, on the message the client waits on. Here such a reply is
// framed as pieces around the body instead: the gRPC prefix and every tag and length before the
// body in one small Buffer, then a view of the body itself, then the end_of_stream field. The
// transport writes the pieces in order, so the bytes on the wire are the encoder's, unchanged
// (test/unit/extproc/streamed-body-frame.test.ts compares them).
// Pure: a reply in, pieces out.

import { FRAME_HEADER_BYTES } from '../../grpc/framing.js';
import type { ProcessingResponse, StreamedBodyResponse } from '../messages.js';

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
 * The reply's body and end flag when it is exactly a streamed body (ProcessingResponse.request_body
 * or response_body → response → body_mutation → streamed_response, with body and end_of_stream only);
 * undefined for any other reply, which the encoder frames as usual.
 */
export function streamedBodyReply(reply: ProcessingResponse): StreamedBodyReply | undefined {
  const field = reply.request_body != null ? 3 : reply.response_body != null ? 4 : undefined;
  if (field === undefined || !onlySet(reply, ['response', field === 3 ? 'request_body' : 'response_body'])) return undefined;
  const bodyResponse = field === 3 ? reply.request_body : reply.response_body;
  const common = bodyResponse?.response;
  if (bodyResponse == null || common == null || !onlySet(bodyResponse, ['response']) || !onlySet(common, ['body_mutation']))
    return undefined;
  const mutation = common.body_mutation;
  if (mutation == null || !onlySet(mutation, ['mutation', 'streamed_response'])) return undefined;
  const streamed: StreamedBodyResponse | undefined = mutation.streamed_response;
  if (streamed == null || streamed.body == null || !onlySet(streamed, ['body', 'end_of_stream'])) return undefined;
  return { field, body: streamed.body, endOfStream: streamed.end_of_stream ?? undefined };
}

function varintBytes(value: number): number {
  let bytes = 1;
  for (let v = value; v >= 0x80; v = Math.floor(v / 128)) bytes++;
  return bytes;
}

/** Tag bytes (field << 3 | wire type 2, length-delimited): one byte for every field number here. */
const LEN = 2;
const tag = (field: number): number => (field << 3) | LEN;

/**
 * The reply as a length-prefixed gRPC message in pieces: [prefix and tags, body, end_of_stream]
 * (the last left out when the flag is unset). The body piece is the caller's Buffer itself: it must
 * not change until written.
 */
export function framedStreamedBody(reply: StreamedBodyReply): Buffer[] {
  const n = reply.body.length;
  const tail = reply.endOfStream === undefined ? 0 : 2; // tag (field 2, varint) and the flag
  const streamed = 1 + varintBytes(n) + n + tail; // StreamedBodyResponse: body = 1, end_of_stream = 2
  const mutation = 1 + varintBytes(streamed) + streamed; // BodyMutation: streamed_response = 3
  const common = 1 + varintBytes(mutation) + mutation; // CommonResponse: body_mutation = 3
  const bodyResponse = 1 + varintBytes(common) + common; // BodyResponse: response = 1
  const message = 1 + varintBytes(bodyResponse) + bodyResponse; // ProcessingResponse: request_body = 3 / response_body = 4
  const head = Buffer.allocUnsafe(FRAME_HEADER_BYTES + message - n - tail);
  head[0] = 0; // uncompressed
  head.writeUInt32BE(message, 1);
  let pos = FRAME_HEADER_BYTES;
  const put = (field: number, length: number): void => {
    head[pos++] = tag(field);
    for (let v = length; ; v = Math.floor(v / 128)) {
      if (v < 0x80) {
        head[pos++] = v;
        break;
      }
      head[pos++] = (v % 128) | 0x80;
    }
  };
  put(reply.field, bodyResponse);
  put(1, common);
  put(3, mutation);
  put(3, streamed);
  put(1, n);
  if (tail === 0) return [head, reply.body];
  return [head, reply.body, Buffer.from([(2 << 3) | 0, reply.endOfStream === true ? 1 : 0])];
}
