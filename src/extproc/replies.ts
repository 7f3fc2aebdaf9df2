// Builders for ext_proc replies by what they do to the HTTP request (answer it, change headers,
// replace or stream a body), whatever we decided. Pure: values in, ProcessingResponse values out.
// The constant "continue" replies live in constant-replies.ts (framed once, reply-frames.ts); the
// replies that carry our own decisions (the pick, our errors) in request/decision-replies.ts.

import type { BodySendMode, HeaderMutation, ProcessingResponse } from './messages.js';
import { headerMutation } from './message-fields.js';

/** Envoy's limit for one `streamed_response` chunk in FULL_DUPLEX_STREAMED mode. */
const MAX_STREAMED_CHUNK_BYTES = 64 * 1024;

export function immediateJson(body: unknown, details: string): ProcessingResponse {
  const bytes = Buffer.from(JSON.stringify(body));
  return {
    immediate_response: {
      status: { code: 200 },
      headers: headerMutation([
        ['content-type', 'application/json'],
        ['content-length', String(bytes.length)],
      ]),
      body: bytes,
      details,
    },
  };
}

export function responseHeadersReply(
  mutation?: HeaderMutation,
  bufferBody?: Extract<BodySendMode, 'BUFFERED' | 'BUFFERED_PARTIAL'>,
): ProcessingResponse {
  return {
    response_headers: { response: mutation === undefined ? {} : { header_mutation: mutation } },
    ...(bufferBody === undefined ? {} : { mode_override: { response_body_mode: bufferBody } }),
  };
}

/**
 * A response-headers reply that also sets one header on the response (the other headers it sets or
 * removes are kept). A new object: the reply given may be a shared constant.
 */
export function withResponseHeader(reply: ProcessingResponse, key: string, value: string): ProcessingResponse {
  const headers = reply.response_headers;
  if (headers === undefined) return reply;
  const common = headers.response ?? {};
  const mutation = common.header_mutation ?? {};
  const added = headerMutation([[key, value]]).set_headers ?? [];
  return {
    ...reply,
    response_headers: {
      ...headers,
      response: { ...common, header_mutation: { ...mutation, set_headers: [...(mutation.set_headers ?? []), ...added] } },
    },
  };
}

/** Replace the body chunk in flight (STREAMED and BUFFERED modes). */
export function replaceBodyChunk(direction: 'request' | 'response', body: Buffer): ProcessingResponse {
  const reply = { response: { body_mutation: { body } } };
  return direction === 'request' ? { request_body: reply } : { response_body: reply };
}

/**
 * FULL_DUPLEX_STREAMED: the body goes back to Envoy as `streamed_response` chunks of at most
 * 64 KiB; the last one carries `end_of_stream` when the body ends here (no trailers follow).
 */
export function streamedBody(direction: 'request' | 'response', body: Buffer, endOfStream: boolean): ProcessingResponse[] {
  const replies: ProcessingResponse[] = [];
  let offset = 0;
  do {
    const end = Math.min(body.length, offset + MAX_STREAMED_CHUNK_BYTES);
    const last = end >= body.length;
    const reply = {
      response: { body_mutation: { streamed_response: { body: body.subarray(offset, end), end_of_stream: last && endOfStream } } },
    };
    replies.push(direction === 'request' ? { request_body: reply } : { response_body: reply });
    offset = end;
  } while (offset < body.length);
  return replies;
}

export function streamedChunks(direction: 'request' | 'response', chunks: readonly Buffer[], endOfStream: boolean): ProcessingResponse[] {
  if (chunks.length === 0) return endOfStream ? streamedBody(direction, Buffer.alloc(0), true) : [];
  return chunks.flatMap((chunk, i) => streamedBody(direction, chunk, endOfStream && i === chunks.length - 1));
}
