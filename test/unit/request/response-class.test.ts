// classifyResponse: who answered (Envoy, another filter, the model server, or not known until the
// body is read) and whether it was good, from the response headers and Envoy's attributes alone.

import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { classifyErrorText, classifyResponse } from '../../../src/request/response-class.js';
import type { ResponseFacts } from '../../../src/request/response-facts.js';

const LIMIT = 1024;

/** A model server's 200 with Envoy's attributes, as our shipped configs ask for them. */
function facts(overrides: Partial<ResponseFacts> = {}): ResponseFacts {
  return {
    status: 200,
    contentType: 'application/json',
    compressed: false,
    contentLength: 100,
    hasContentLength: true,
    ours: false,
    codeDetails: 'via_upstream',
    flags: 0,
    servedAddress: '10.0.0.1:8000',
    endOfStream: false,
    ...overrides,
  };
}

const UF = 0x20;

describe('classifyResponse', () => {
  const cases: ReadonlyArray<{ readonly name: string; readonly facts: Partial<ResponseFacts>; readonly expected: unknown }> = [
    {
      name: "Envoy's connect failure (code details)",
      facts: { status: 503, contentType: 'text/plain', codeDetails: 'upstream_reset_before_response_started{remote_connection_failure}' },
      expected: { kind: 'envoy-failure', failure: { kind: 'upstream_connect_failed', detail: 'connection failed' } },
    },
    {
      name: "Envoy's connect failure (flags only)",
      facts: { status: 503, contentType: 'text/plain', codeDetails: undefined, flags: UF },
      expected: { kind: 'envoy-failure', failure: { kind: 'upstream_connect_failed', detail: 'connection failed' } },
    },
    {
      name: "another filter's 403",
      facts: { status: 403, contentType: 'text/plain', codeDetails: 'ext_authz_denied' },
      expected: { kind: 'other-filter', result: 'local_reply_403' },
    },
    {
      name: 'a 503 in plain text with no attributes: its text decides',
      facts: { status: 503, contentType: 'text/plain', codeDetails: undefined, flags: undefined },
      expected: { kind: 'unexplained' },
    },
    {
      name: 'a 413 in plain text with no attributes (Envoy buffer limit?)',
      facts: { status: 413, contentType: 'text/plain', codeDetails: undefined, flags: undefined },
      expected: { kind: 'unexplained' },
    },
    {
      name: 'our own error passing back (x-llm-extproc-error-code) is never unexplained',
      facts: { status: 503, contentType: 'text/plain', codeDetails: undefined, flags: undefined, ours: true },
      expected: {
        kind: 'upstream-error-replaced',
        failure: 'bad_response',
        status: undefined,
        message: 'the model server answered 503 with a non-JSON body (text/plain)',
        upstreamStatus: 503,
      },
    },
    { name: 'a 200 without a body', facts: { endOfStream: true }, expected: { kind: 'headers-only', result: 'ok', failure: undefined } },
    {
      name: 'a 500 without a body',
      facts: { status: 500, endOfStream: true },
      expected: { kind: 'headers-only', result: 'upstream_500', failure: 'bad_response' },
    },
    {
      name: "a 429 JSON error: the request's fault, passed on",
      facts: { status: 429 },
      expected: { kind: 'upstream-error', result: 'upstream_429', failure: undefined },
    },
    {
      name: "a 500 JSON error: the replica's, passed on",
      facts: { status: 500 },
      expected: { kind: 'upstream-error', result: 'upstream_500', failure: 'bad_response' },
    },
    {
      name: 'a 404 in HTML: replaced, keeping its status',
      facts: { status: 404, contentType: 'text/html' },
      expected: {
        kind: 'upstream-error-replaced',
        failure: undefined,
        status: 404,
        message: 'the model server answered 404 with a non-JSON body (text/html)',
        upstreamStatus: 404,
      },
    },
    { name: 'an SSE stream', facts: { contentType: 'text/event-stream' }, expected: { kind: 'answer', body: 'sse' } },
    { name: 'a JSON answer small enough to hold', facts: {}, expected: { kind: 'answer', body: 'json' } },
    { name: 'a JSON answer too large to hold', facts: { contentLength: LIMIT + 1 }, expected: { kind: 'answer', body: 'opaque' } },
    { name: 'a compressed JSON answer', facts: { compressed: true }, expected: { kind: 'answer', body: 'opaque' } },
    {
      name: 'a compressed stream',
      facts: { contentType: 'text/event-stream', compressed: true },
      expected: { kind: 'answer', body: 'opaque' },
    },
    { name: 'an image', facts: { contentType: 'image/png' }, expected: { kind: 'answer', body: 'opaque' } },
  ];
  for (const c of cases) {
    it(c.name, () => {
      assert.deepEqual(classifyResponse(facts(c.facts), LIMIT), c.expected);
    });
  }
});

describe('classifyErrorText', () => {
  it("tells Envoy's text from the model server's", () => {
    assert.deepEqual(classifyErrorText(503, 'no healthy upstream'), {
      kind: 'envoy-failure',
      failure: { kind: 'no_healthy_upstream', detail: 'no healthy host in the Envoy cluster' },
    });
    assert.deepEqual(classifyErrorText(500, 'Internal Server Error'), {
      kind: 'upstream-error-replaced',
      failure: 'bad_response',
      status: undefined,
      message: 'the model server answered 500 with a non-JSON body',
      upstreamStatus: 500,
    });
    assert.equal(classifyErrorText(502, '').kind, 'upstream-error-replaced', 'no text: nothing says it was Envoy');
  });
});
