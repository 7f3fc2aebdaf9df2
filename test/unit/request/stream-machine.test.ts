// The state machine's transitions, driven directly (request/stream-machine.ts: onMessage and
// onStreamEnd), one table per body mode: from each state, a message gives the next state, the
// replies for Envoy (summarised) and what the step learnt. The routing behind it is the real one
// (store, picker, load tracker), with one ready replica so every pick is the same.
import { ModelRewrites } from '../../../src/picker/model-rewrite.js';
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { EndpointStore } from '../../../src/endpoints/store.js';
import type { BodySendMode, ProcessingRequest, ProcessingResponse } from '../../../src/extproc/messages.js';
import { LoadTracker } from '../../../src/picker/load-tracker.js';
import { StoreRouting } from '../../../src/routing/routing.js';
import { ServedModels } from '../../../src/routing/served-models.js';
import { onMessage, onStreamEnd } from '../../../src/request/stream-machine.js';
import type { MachineContext, Step, StreamState } from '../../../src/request/stream-state.js';
import {
  requestBody,
  requestHeaders as envoyRequestHeaders,
  responseBody,
  responseHeaders as envoyResponseHeaders,
} from '../../support/envoy-messages.js';

const MODEL = 'llama-3-8b';
const A = '10.0.0.1:8000';

function context(): MachineContext {
  const store = new EndpointStore(['static'], { threshold: 2, baseMs: 10_000, maxMs: 60_000 });
  store.replaceAll('static', [{ name: 'llama', models: [MODEL], endpoints: [{ id: A, address: A, state: 'Ready', reason: '' }] }]);
  store.markSynced('static');
  return {
    routing: new StoreRouting(store, new LoadTracker(), { fallbacks: 0, random: () => 0 }),
    models: new ServedModels(store, undefined),
    maxRequestBodyBytes: 1024 * 1024,
    maxInspectedBodyBytes: 1024 * 1024,
    destinationFormat: 'list',
    injectsStreamUsage: () => false,
    modelRewrites: new ModelRewrites([{ matches: [{ model: { value: 'alias' } }], targets: [{ modelRewrite: MODEL }] }]),
  };
}

const POST_CHAT = { ':method': 'POST', ':path': '/v1/chat/completions', 'x-request-id': 'r-1' };

function requestHeaders(requestMode: BodySendMode, responseMode: BodySendMode, early = false): ProcessingRequest {
  return envoyRequestHeaders(POST_CHAT, false, {
    request_body_mode: requestMode,
    response_body_mode: responseMode,
    send_body_without_waiting_for_header_response: early,
  });
}

const BODY = JSON.stringify({ model: MODEL, messages: [{ role: 'user', content: 'hi' }] });
const responseHeaders = (status: number, contentType: string): ProcessingRequest =>
  envoyResponseHeaders(status, { 'content-type': contentType }, null);

/** A reply in a few words: its oneof member, then what it does. */
function summary(reply: ProcessingResponse): string {
  const member = (Object.keys(reply) as Array<keyof ProcessingResponse>).find(
    (k) => k !== 'response' && k !== 'dynamic_metadata' && k !== 'mode_override',
  );
  const parts: string[] = [String(member)];
  type Common = { response?: { body_mutation?: { body?: Buffer; streamed_response?: { body?: Buffer; end_of_stream?: boolean } } } };
  const response = member === undefined ? undefined : (reply[member] as Common | undefined)?.response;
  if (reply.dynamic_metadata !== undefined) parts.push('route');
  if (reply.mode_override !== undefined) parts.push(`mode ${JSON.stringify(reply.mode_override)}`);
  if (response?.body_mutation?.streamed_response !== undefined) {
    const streamed = response.body_mutation.streamed_response;
    parts.push(`streamed ${streamed.body?.length ?? 0}B${streamed.end_of_stream === true ? ' end' : ''}`);
  } else if (response?.body_mutation?.body !== undefined) {
    parts.push(`replace ${response.body_mutation.body.length}B`);
  }
  if (member === 'immediate_response') parts.push(String(reply.immediate_response?.status.code));
  return parts.join(' ');
}

interface Row {
  readonly message: ProcessingRequest;
  readonly state: StreamState['kind'];
  readonly replies: readonly string[];
}

/** Runs the rows in order from a fresh stream; checks each step, returns the last state and every step. */
function run(rows: readonly Row[]): { state: StreamState; steps: Step[] } {
  const ctx = context();
  let state: StreamState = { kind: 'AwaitingRequestHeaders' };
  const steps: Step[] = [];
  for (const [i, row] of rows.entries()) {
    const step = onMessage(ctx, state, row.message);
    assert.equal(step.state.kind, row.state, `row ${i} (${row.message.request}): next state`);
    assert.deepEqual(step.replies.map(summary), row.replies, `row ${i} (${row.message.request}): replies`);
    steps.push(step);
    state = step.state;
  }
  return { state, steps };
}

const routedAt = (steps: Step[]): number => steps.findIndex((s) => s.notices.some((n) => n.kind === 'routed'));

void describe('state machine, request phase, per request body mode', () => {
  void it('BUFFERED (envoy-buffers): continue the headers, route in the reply to the one body message', () => {
    const { steps } = run([
      { message: requestHeaders('BUFFERED', 'STREAMED'), state: 'CollectingRequestBody', replies: ['request_headers'] },
      { message: requestBody(BODY, true), state: 'AwaitingResponse', replies: ['request_body route'] },
    ]);
    assert.equal(routedAt(steps), 1);
  });

  void it('STREAMED without early bodies (ask-for-buffered): ask Envoy to buffer, then as BUFFERED', () => {
    run([
      {
        message: requestHeaders('STREAMED', 'STREAMED'),
        state: 'CollectingRequestBody',
        replies: ['request_headers mode {"request_body_mode":"BUFFERED"}'],
      },
      { message: requestBody(BODY, true), state: 'AwaitingResponse', replies: ['request_body route'] },
    ]);
  });

  void it('STREAMED with early bodies (collect-streamed): hold the header reply until the body ends, then answer headers and each chunk', () => {
    const half = Math.floor(BODY.length / 2);
    const { steps } = run([
      { message: requestHeaders('STREAMED', 'STREAMED', true), state: 'CollectingRequestBody', replies: [] },
      { message: requestBody(BODY.slice(0, half), false), state: 'CollectingRequestBody', replies: [] },
      {
        message: requestBody(BODY.slice(half), true),
        state: 'AwaitingResponse',
        replies: ['request_headers route', 'request_body', 'request_body'],
      },
    ]);
    assert.equal(routedAt(steps), 2);
  });

  void it('FULL_DUPLEX_STREAMED (collect-duplex): hold the header reply until the body ends, then route and stream the body back whole', () => {
    const half = Math.floor(BODY.length / 2);
    run([
      { message: requestHeaders('FULL_DUPLEX_STREAMED', 'FULL_DUPLEX_STREAMED'), state: 'CollectingRequestBody', replies: [] },
      { message: requestBody(BODY.slice(0, half), false), state: 'CollectingRequestBody', replies: [] },
      {
        message: requestBody(BODY.slice(half), true),
        state: 'AwaitingResponse',
        // Collected into one buffer: it goes back in chunks of up to 64 KiB, not in the pieces it came in.
        replies: ['request_headers route', `request_body streamed ${BODY.length}B end`],
      },
    ]);
  });

  void it('any mode: a body over the limit or without a model is answered by us, and the stream is done', () => {
    run([
      { message: requestHeaders('BUFFERED', 'STREAMED'), state: 'CollectingRequestBody', replies: ['request_headers'] },
      { message: requestBody('{"messages":[]}', true), state: 'Done', replies: ['immediate_response 400'] },
    ]);
  });
});

const REQUEST = (requestMode: BodySendMode, responseMode: BodySendMode): Row[] => [
  {
    message: requestHeaders(requestMode, responseMode),
    state: 'CollectingRequestBody',
    replies: requestMode === 'FULL_DUPLEX_STREAMED' ? [] : ['request_headers'],
  },
  {
    message: requestBody(BODY, true),
    state: 'AwaitingResponse',
    replies:
      requestMode === 'FULL_DUPLEX_STREAMED'
        ? ['request_headers route', `request_body streamed ${BODY.length}B end`]
        : ['request_body route'],
  },
];

const SSE = 'data: {"choices":[{"delta":{"content":"hi"}}]}\n\ndata: [DONE]\n\n';
const JSON_ANSWER = JSON.stringify({ id: 'x', object: 'chat.completion', choices: [{ message: { role: 'assistant', content: 'hi' } }] });

void describe('state machine, model rewrite', () => {
  /** The body the model server receives for `body` sent with `headers`, and the model the pick was for. */
  function sentBody(body: string, headers: Record<string, string> = {}): { sent: string; model: string | undefined } {
    const ctx = context();
    const opened = onMessage(
      ctx,
      { kind: 'AwaitingRequestHeaders' },
      envoyRequestHeaders({ ...POST_CHAT, ...headers }, false, { request_body_mode: 'BUFFERED', response_body_mode: 'STREAMED' }),
    );
    const step = onMessage(ctx, opened.state, requestBody(body, true));
    const reply = step.replies[0]?.request_body?.response?.body_mutation?.body;
    const routed = step.notices.find((n) => n.kind === 'routed');
    return { sent: reply === undefined ? body : reply.toString(), model: routed?.kind === 'routed' ? routed.routed.model : undefined };
  }

  void it("a rule's target is what is routed on and sent, the rest of the body untouched", () => {
    const body = '{"model" : "alias", "messages":[{"role":"user","content":"hi"}]}';
    assert.deepEqual(sentBody(body), { sent: body.replace('"alias"', `"${MODEL}"`), model: MODEL });
  });

  void it('x-llm-d-model-name-rewrite and its old name x-gateway-model-name-rewrite name the model to send', () => {
    const body = '{"model":"whatever","messages":[]}';
    for (const header of ['x-llm-d-model-name-rewrite', 'x-gateway-model-name-rewrite']) {
      assert.deepEqual(sentBody(body, { [header]: MODEL }), { sent: `{"model":"${MODEL}","messages":[]}`, model: MODEL }, header);
    }
  });
});

void describe('state machine, response phase, per response body mode', () => {
  void it('STREAMED, an SSE stream: pass the headers and every chunk, judge the end', () => {
    const { steps } = run([
      ...REQUEST('BUFFERED', 'STREAMED'),
      { message: responseHeaders(200, 'text/event-stream'), state: 'Streaming', replies: ['response_headers'] },
      { message: responseBody(SSE.slice(0, 20), false), state: 'Streaming', replies: ['response_body'] },
      { message: responseBody(SSE.slice(20), true), state: 'Done', replies: ['response_body'] },
    ]);
    assert.equal(steps.at(-1)?.finished?.result, 'ok');
    assert.deepEqual(
      steps.at(-1)?.attempts.map((a) => [a.endpoint.address, a.failure ?? 'ok']),
      [[A, 'ok']],
    );
  });

  void it('STREAMED, a JSON answer: ask Envoy to hold it (BUFFERED_PARTIAL), judge it whole', () => {
    const { steps } = run([
      ...REQUEST('BUFFERED', 'STREAMED'),
      {
        message: responseHeaders(200, 'application/json'),
        state: 'Streaming',
        replies: ['response_headers mode {"response_body_mode":"BUFFERED_PARTIAL"}'],
      },
      { message: responseBody(JSON_ANSWER, true), state: 'Done', replies: ['response_body'] },
    ]);
    assert.equal(steps.at(-1)?.finished?.result, 'ok');
  });

  void it('BUFFERED, a JSON answer: Envoy holds it; the whole body comes in one message, judged at once', () => {
    const { steps } = run([
      ...REQUEST('BUFFERED', 'BUFFERED'),
      { message: responseHeaders(200, 'application/json'), state: 'Streaming', replies: ['response_headers'] },
      { message: responseBody(JSON_ANSWER, true), state: 'Done', replies: ['response_body'] },
    ]);
    assert.equal(steps.at(-1)?.finished?.result, 'ok');
  });

  void it('FULL_DUPLEX_STREAMED, an SSE stream: headers answered, every chunk streamed back by us', () => {
    const { steps } = run([
      ...REQUEST('FULL_DUPLEX_STREAMED', 'FULL_DUPLEX_STREAMED'),
      { message: responseHeaders(200, 'text/event-stream'), state: 'Streaming', replies: ['response_headers'] },
      { message: responseBody(SSE.slice(0, 20), false), state: 'Streaming', replies: ['response_body streamed 20B'] },
      { message: responseBody(SSE.slice(20), true), state: 'Done', replies: [`response_body streamed ${SSE.length - 20}B end`] },
    ]);
    assert.equal(steps.at(-1)?.finished?.result, 'ok');
  });

  void it('FULL_DUPLEX_STREAMED, a JSON answer: nobody holds it for us, so we hold the header reply and the body until it is judged', () => {
    const half = Math.floor(JSON_ANSWER.length / 2);
    const { steps } = run([
      ...REQUEST('FULL_DUPLEX_STREAMED', 'FULL_DUPLEX_STREAMED'),
      { message: responseHeaders(200, 'application/json'), state: 'HoldingJson', replies: [] },
      { message: responseBody(JSON_ANSWER.slice(0, half), false), state: 'HoldingJson', replies: [] },
      {
        message: responseBody(JSON_ANSWER.slice(half), true),
        state: 'Done',
        replies: ['response_headers', `response_body streamed ${half}B`, `response_body streamed ${JSON_ANSWER.length - half}B end`],
      },
    ]);
    assert.equal(steps.at(-1)?.finished?.result, 'ok');
  });

  void it('NONE: the body never comes; the answer passes, settled as unverified at the headers', () => {
    const { steps } = run([
      ...REQUEST('BUFFERED', 'NONE'),
      { message: responseHeaders(200, 'application/json'), state: 'Done', replies: ['response_headers'] },
    ]);
    assert.equal(steps.at(-1)?.finished?.result, 'unverified');
    assert.deepEqual(steps.at(-1)?.attempts, [], 'an unjudged answer credits no replica');
  });

  void it('any mode: the stream ending mid-body is a broken stream, blamed on the replica that served it', () => {
    const { state } = run([
      ...REQUEST('BUFFERED', 'STREAMED'),
      { message: responseHeaders(200, 'text/event-stream'), state: 'Streaming', replies: ['response_headers'] },
      { message: responseBody(SSE.slice(0, 20), false), state: 'Streaming', replies: ['response_body'] },
    ]);
    const end = onStreamEnd(state, { kind: 'cancelled' });
    assert.equal(end.state.kind, 'Done');
    assert.equal(end.finished?.result, 'stream_broken');
    assert.deepEqual(
      end.attempts.map((a) => [a.endpoint.address, a.failure, a.reason]),
      [[A, 'bad_response', 'stream_broken']],
    );
  });
});
