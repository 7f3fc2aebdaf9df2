// The replies that carry nothing but "continue". They are most of what we send (one per streamed
// chunk), so they are frozen singletons whose bytes reply-frames.ts encodes once, not per message.

import type { ProcessingResponse } from './messages.js';

export const CONTINUE_REQUEST_HEADERS: ProcessingResponse = Object.freeze({
  request_headers: Object.freeze({ response: Object.freeze({}) }),
});
export const CONTINUE_REQUEST_BODY: ProcessingResponse = Object.freeze({ request_body: Object.freeze({ response: Object.freeze({}) }) });
export const CONTINUE_RESPONSE_HEADERS: ProcessingResponse = Object.freeze({
  response_headers: Object.freeze({ response: Object.freeze({}) }),
});
export const CONTINUE_RESPONSE_BODY: ProcessingResponse = Object.freeze({ response_body: Object.freeze({ response: Object.freeze({}) }) });

/** Continue, and have Envoy buffer the request body for us (STREAMED or NONE request bodies). */
export const ASK_FOR_BUFFERED_REQUEST_BODY: ProcessingResponse = Object.freeze({
  request_headers: Object.freeze({ response: Object.freeze({}) }),
  mode_override: Object.freeze({ request_body_mode: 'BUFFERED' }),
});

/** Drop the body chunk in flight (STREAMED mode: its bytes went out earlier, or are held back). */
export const CLEAR_REQUEST_BODY_CHUNK: ProcessingResponse = Object.freeze({
  request_body: Object.freeze({ response: Object.freeze({ body_mutation: Object.freeze({ clear_body: true }) }) }),
});
export const CLEAR_RESPONSE_BODY_CHUNK: ProcessingResponse = Object.freeze({
  response_body: Object.freeze({ response: Object.freeze({ body_mutation: Object.freeze({ clear_body: true }) }) }),
});

export const CONSTANT_REPLIES: readonly ProcessingResponse[] = [
  CONTINUE_REQUEST_HEADERS,
  CONTINUE_REQUEST_BODY,
  CONTINUE_RESPONSE_HEADERS,
  CONTINUE_RESPONSE_BODY,
  ASK_FOR_BUFFERED_REQUEST_BODY,
  CLEAR_REQUEST_BODY_CHUNK,
  CLEAR_RESPONSE_BODY_CHUNK,
];

/**
 * Replies built once, never changed, and sent many times: the constants above, and those that are
 * not constant but repeat (the routing reply of one destination list). reply-frames.ts encodes and
 * frames each of them once, the first time it is sent.
 */
const REUSED_REPLIES = new WeakSet<ProcessingResponse>(CONSTANT_REPLIES);

/** Marks a reply as built once and sent many times; it must never change afterwards. */
export function reusedReply(reply: ProcessingResponse): ProcessingResponse {
  REUSED_REPLIES.add(reply);
  return reply;
}

export function isReusedReply(reply: ProcessingResponse): boolean {
  return REUSED_REPLIES.has(reply);
}
