// The checks every error answer must pass, whatever produced it: catalog status, JSON body with
// the catalog's code and type, our error header, and never Envoy's plain text.

import assert from 'node:assert/strict';
import { CATALOG, type ErrorKind } from '../../src/errors/catalog.js';
import { DROPPED_REASON_BY_KIND, DROPPED_REASON_HEADER } from '../../src/errors/dropped-reason.js';
import type { ClientResponse } from './http-client.js';

export const RAW_ENVOY_TEXT =
  /upstream connect error|disconnect\/reset before headers|no healthy upstream|upstream request timeout|Payload Too Large/i;

export interface ErrorBody {
  error: { message: string; type: string; code: string; request_id?: string };
}

/** Asserts `response` is the catalog answer for one of `kinds` and returns its body and kind. */
export function assertCatalogError(response: ClientResponse, ...kinds: ErrorKind[]): ErrorBody & { kind: ErrorKind } {
  const text = response.text();
  assert.doesNotMatch(text, RAW_ENVOY_TEXT, `raw Envoy text reached the client: ${text}`);
  assert.match(response.headers['content-type'] ?? '', /^application\/json/, `content-type of ${response.status} ${text}`);
  let body: ErrorBody;
  try {
    body = JSON.parse(text) as ErrorBody;
  } catch {
    assert.fail(`not JSON (status ${response.status}): ${text}`);
  }
  const kind = kinds.find((k) => CATALOG[k].code === body.error?.code);
  assert.ok(kind !== undefined, `expected one of ${kinds.join(', ')}, got status ${response.status} ${text}`);
  const entry = CATALOG[kind];
  assert.equal(response.status, entry.status, `${kind}: status (body ${text})`);
  assert.equal(body.error.type, entry.type);
  assert.equal(response.headers['x-llm-extproc-error'], entry.code);
  // llm-d's reason for a drop, on exactly the kinds that are drops (absent on the others).
  assert.equal(response.headers[DROPPED_REASON_HEADER], DROPPED_REASON_BY_KIND[kind], `${kind}: ${DROPPED_REASON_HEADER}`);
  assert.ok(body.error.message.length > 10, 'a message that explains');
  // The id a user quotes to an operator: the one the client sent, else the one the gateway made
  // (Envoy's local replies too: their mappers put %REQ(X-REQUEST-ID)% there).
  if (response.sentRequestId !== undefined)
    assert.equal(body.error.request_id, response.sentRequestId, `${kind}: request_id (body ${text})`);
  // None sent: the gateway's own id, substituted (a `%` would be Envoy's format string left as is).
  else assert.match(body.error.request_id ?? '', /^[^%\s]+$/, `${kind}: a request_id (body ${text})`);
  return { ...body, kind };
}

/**
 * Asserts that a stream the model server ended without its terminator reached the client whole
 * (`sent`, unchanged) with our catalog error event for `kind` appended; returns that event.
 */
export function assertAppendedErrorEvent(response: ClientResponse, sent: Buffer, kind: ErrorKind): ErrorBody {
  assert.equal(response.status, 200);
  assert.deepEqual(response.body.subarray(0, sent.length), sent, 'everything the model server sent arrives unchanged');
  const appended = response.body.subarray(sent.length).toString('utf8');
  assert.match(appended, /^\n*data: \{"error":/);
  const event = JSON.parse(appended.trim().replace(/^data: /, '')) as ErrorBody;
  assert.equal(event.error.code, CATALOG[kind].code);
  assert.equal(event.error.type, CATALOG[kind].type);
  return event;
}
