// The replies that carry nothing but "continue". They are most of what we send (one per streamed
// chunk), so they are frozen singletons whose wire bytes `wire.ts` encodes once, not per message.

import type { ProcessingResponse } from './messages.js';

export const CONTINUE_REQUEST_HEADERS: ProcessingResponse = Object.freeze({
  request_headers: Object.freeze({ response: Object.freeze({}) }),
});
export const CONTINUE_REQUEST_BODY: ProcessingResponse = Object.freeze({ request_body: Object.freeze({ response: Object.freeze({}) }) });
export const CONTINUE_RESPONSE_HEADERS: ProcessingResponse = Object.freeze({
  response_headers: Object.freeze({ response: Object.freeze({}) }),
});
export const CONTINUE_RESPONSE_BODY: ProcessingResponse = Object.freeze({ response_body: Object.freeze({ response: Object.freeze({}) }) });

export const CONSTANT_REPLIES: readonly ProcessingResponse[] = [
  CONTINUE_REQUEST_HEADERS,
  CONTINUE_REQUEST_BODY,
  CONTINUE_RESPONSE_HEADERS,
  CONTINUE_RESPONSE_BODY,
];
