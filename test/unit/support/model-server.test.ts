// Exercises the fake model server directly (no Envoy): healthy OpenAI answers, byte-exact
// recording, SSE framing, and every fault as a plain HTTP client observes it.

import assert from 'node:assert/strict';
import { Agent } from 'node:http';
import { describe, it } from 'node:test';
import type { TestContext } from 'node:test';
import { startModelServer } from '../../support/model-server.js';
import type { ModelServer, StartModelServerOptions } from '../../support/model-server.js';
import { replyText, streamReply, parseInferenceRequest } from '../../support/openai-replies.js';
import { rawRequest } from '../../support/raw-http.js';
import { waitUntil } from '../../support/wait-until.js';
import type { RawResponse } from '../../support/raw-http.js';

const CHAT_PATH = '/v1/chat/completions';
const PROMPT = 'Tell me about the weather in Lisbon today please';

async function serverFor(t: TestContext, opts: Partial<StartModelServerOptions> = {}): Promise<ModelServer> {
  const server = await startModelServer({ id: 'ms-a', ...opts });
  t.after(() => server.close());
  return server;
}

function chatBody(extra: Record<string, unknown> = {}): Record<string, unknown> {
  return { model: 'llama-test', messages: [{ role: 'user', content: PROMPT }], ...extra };
}

function post(server: ModelServer, path: string, body: Record<string, unknown> | string, timeoutMs?: number): Promise<RawResponse> {
  return rawRequest({ url: `http://${server.address}${path}`, method: 'POST', body, ...(timeoutMs === undefined ? {} : { timeoutMs }) });
}

interface SseEvent {
  readonly event: string | undefined;
  readonly data: string;
}

/** Splits an SSE body into events; asserts the framing (every event ends in a blank line). */
function parseSse(body: Buffer): SseEvent[] {
  const text = body.toString('utf8');
  assert.ok(text === '' || text.endsWith('\n\n'), `SSE body must end with a blank line: ${JSON.stringify(text.slice(-40))}`);
  return text
    .split('\n\n')
    .filter((block) => block !== '')
    .map((block) => {
      const lines = block.split('\n');
      const eventLine = lines.find((l) => l.startsWith('event: '));
      const dataLines = lines.filter((l) => l.startsWith('data: '));
      assert.equal(dataLines.length, 1, `one data line per event: ${block}`);
      return { event: eventLine?.slice('event: '.length), data: (dataLines[0] ?? '').slice('data: '.length) };
    });
}

function asRecord(v: unknown): Record<string, unknown> {
  assert.ok(typeof v === 'object' && v !== null && !Array.isArray(v), `expected an object, got ${JSON.stringify(v)}`);
  return v as Record<string, unknown>;
}

function parseJson(body: Buffer): Record<string, unknown> {
  return asRecord(JSON.parse(body.toString('utf8')));
}

/** Content of a chat chunk's delta, or '' when it has none. */
function chatDelta(data: string): string {
  const choices = parseJson(Buffer.from(data))['choices'];
  assert.ok(Array.isArray(choices));
  const first = choices[0] === undefined ? {} : asRecord(choices[0]);
  const delta = first['delta'] === undefined ? {} : asRecord(first['delta']);
  return typeof delta['content'] === 'string' ? delta['content'] : '';
}

void describe('model server: healthy answers', () => {
  void it('answers chat JSON with its id, the requested model, and records exact bytes', async (t) => {
    const server = await serverFor(t);
    const sent = JSON.stringify(chatBody());
    const res = await post(server, CHAT_PATH, sent);

    assert.equal(res.status, 200);
    assert.equal(res.error, undefined);
    assert.equal(res.headers['x-model-server-id'], 'ms-a');
    assert.equal(res.headers['content-type'], 'application/json');
    const json = parseJson(res.body);
    assert.equal(json['object'], 'chat.completion');
    assert.equal(json['model'], 'llama-test');
    assert.equal(json['system_fingerprint'], 'ms-a');
    const choice = asRecord((json['choices'] as unknown[])[0]);
    assert.equal(asRecord(choice['message'])['content'], replyText('ms-a', 'llama-test', PROMPT));

    assert.equal(server.requests.length, 1);
    const rec = server.requests[0];
    assert.ok(rec);
    assert.equal(rec.method, 'POST');
    assert.equal(rec.path, CHAT_PATH);
    assert.deepEqual(rec.body, Buffer.from(sent));
    assert.equal(rec.behavior.kind, 'ok');
    assert.equal(await rec.response.settled, 'ended');
    assert.equal(rec.response.status, 200);
    assert.deepEqual(rec.response.body, res.body);
    assert.deepEqual(server.lastResponseBody(), res.body);
  });

  void it('is deterministic per id+model+prompt and differs across ids', async (t) => {
    const a = await serverFor(t, { id: 'ms-a' });
    const b = await serverFor(t, { id: 'ms-b' });
    const first = await post(a, CHAT_PATH, chatBody());
    const again = await post(a, CHAT_PATH, chatBody());
    const other = await post(b, CHAT_PATH, chatBody());
    assert.deepEqual(first.body, again.body);
    assert.notDeepEqual(first.body, other.body);
    assert.equal(other.headers['x-model-server-id'], 'ms-b');
    assert.match(other.body.toString(), /ms-b/);
  });

  void it('streams chat as separate SSE chunk writes ending in [DONE]', async (t) => {
    const server = await serverFor(t);
    const res = await post(server, CHAT_PATH, chatBody({ stream: true, stream_options: { include_usage: true } }));

    assert.equal(res.status, 200);
    assert.equal(res.error, undefined);
    assert.equal(res.headers['content-type'], 'text/event-stream; charset=utf-8');
    assert.equal(res.headers['x-model-server-id'], 'ms-a');
    assert.equal(res.headers['transfer-encoding'], 'chunked');
    const events = parseSse(res.body);
    assert.equal(events.at(-1)?.data, '[DONE]');
    const chunks = events.slice(0, -1).map((e) => parseJson(Buffer.from(e.data)));
    assert.ok(chunks.length >= 5, `expected several chunks, got ${chunks.length}`);
    for (const c of chunks) {
      assert.equal(c['object'], 'chat.completion.chunk');
      assert.equal(c['model'], 'llama-test');
    }
    // As vLLM: the fingerprint only on the last chunk, here the usage chunk; the finish on the last token's.
    assert.deepEqual(
      chunks.map((c) => c['system_fingerprint']),
      [...chunks.slice(1).map(() => undefined), 'ms-a'],
    );
    assert.ok(chunks.at(-1)?.['usage'] !== undefined, 'usage chunk requested via stream_options');
    assert.equal(asRecord((chunks.at(-2)?.['choices'] as unknown[])[0])['finish_reason'], 'stop');
    assert.equal(
      events.map((e) => chatDelta(e.data === '[DONE]' ? '{"choices":[]}' : e.data)).join(''),
      replyText('ms-a', 'llama-test', PROMPT),
    );

    const rec = server.requests[0];
    assert.ok(rec);
    await rec.response.settled;
    assert.deepEqual(rec.response.body, res.body);
    assert.equal(rec.response.chunks.length, events.length, 'one write per SSE event');
  });

  void it('serves completions, embeddings and responses in their own shapes', async (t) => {
    const server = await serverFor(t);
    const completion = parseJson((await post(server, '/v1/completions', { model: 'm1', prompt: 'hi there' })).body);
    assert.equal(completion['object'], 'text_completion');
    assert.equal(asRecord((completion['choices'] as unknown[])[0])['text'], replyText('ms-a', 'm1', 'hi there'));

    const embeddings = parseJson((await post(server, '/v1/embeddings', { model: 'emb', input: ['a', 'b'] })).body);
    assert.equal(embeddings['model'], 'emb');
    const data = embeddings['data'] as unknown[];
    assert.equal(data.length, 2);
    assert.ok((asRecord(data[0])['embedding'] as unknown[]).every((x) => typeof x === 'number'));

    const response = parseJson((await post(server, '/v1/responses', { model: 'm2', input: 'hello' })).body);
    assert.equal(response['object'], 'response');
    assert.equal(response['status'], 'completed');
    assert.match(JSON.stringify(response['output']), new RegExp(replyText('ms-a', 'm2', 'hello').replace(/[.()]/g, '\\$&')));
  });

  void it('streams completions with text chunks and the Responses API with typed events', async (t) => {
    const server = await serverFor(t);
    const comp = parseSse((await post(server, '/v1/completions', { model: 'm1', prompt: 'go', stream: true })).body);
    assert.equal(comp.at(-1)?.data, '[DONE]');
    assert.ok(comp.slice(0, -1).every((e) => parseJson(Buffer.from(e.data))['object'] === 'text_completion'));

    const resp = parseSse((await post(server, '/v1/responses', { model: 'm2', input: 'go', stream: true })).body);
    assert.equal(resp[0]?.event, 'response.created');
    assert.equal(resp.at(-1)?.event, 'response.completed');
    assert.ok(
      resp.every((e) => e.data !== '[DONE]'),
      'the Responses API has no [DONE]',
    );
    const text = resp
      .filter((e) => e.event === 'response.output_text.delta')
      .map((e) => parseJson(Buffer.from(e.data))['delta'])
      .join('');
    assert.equal(text, replyText('ms-a', 'm2', 'go'));
  });

  void it('lists its models, answers /health, rejects bad JSON and unknown paths', async (t) => {
    const server = await serverFor(t, { models: ['alpha', 'beta'] });
    const models = parseJson((await rawRequest({ url: `http://${server.address}/v1/models` })).body);
    assert.deepEqual(
      (models['data'] as unknown[]).map((m) => asRecord(m)['id']),
      ['alpha', 'beta'],
    );
    const health = await rawRequest({ url: `http://${server.address}/health` });
    assert.equal(health.status, 200);
    assert.equal(health.headers['content-type'], undefined, "vLLM's /health has no body and no content-type");

    const bad = await post(server, CHAT_PATH, '{not json');
    assert.equal(bad.status, 400);
    assert.equal(asRecord(parseJson(bad.body)['error'])['type'], 'Bad Request');

    const missing = await post(server, '/v2/nothing', chatBody());
    assert.equal(missing.status, 404);
    assert.deepEqual(parseJson(missing.body), { detail: 'Not Found' });

    const noModel = parseJson((await post(server, CHAT_PATH, { messages: [] })).body);
    assert.equal(noModel['model'], 'alpha', 'defaults to the first served model');
  });

  void it('keeps connections alive and binds other loopback addresses', async (t) => {
    const server = await serverFor(t, { host: '127.0.0.2' });
    assert.equal(server.host, '127.0.0.2');
    assert.equal(server.address, `127.0.0.2:${server.port}`);
    const agent = new Agent({ keepAlive: true, maxSockets: 1 });
    t.after(() => agent.destroy());
    const url = `http://${server.address}${CHAT_PATH}`;
    const one = await rawRequest({ url, body: chatBody(), agent });
    const two = await rawRequest({ url, body: chatBody(), agent });
    assert.equal(one.status, 200);
    assert.equal(two.status, 200);
    assert.equal(one.localPort, two.localPort, 'second request reused the connection');
  });

  void it('onRequest resolves with the next request', async (t) => {
    const server = await serverFor(t);
    const next = server.onRequest();
    const res = await post(server, CHAT_PATH, chatBody());
    const rec = await next;
    assert.equal(rec.seq, 0);
    assert.equal(rec.headers['content-type'], 'application/json');
    assert.equal(res.status, 200);
  });
});

void describe('model server: faults', () => {
  void it('close-before-headers drops the connection after reading the request', async (t) => {
    const server = await serverFor(t);
    server.setBehavior({ kind: 'close-before-headers' });
    await assert.rejects(post(server, CHAT_PATH, chatBody()), (err: NodeJS.ErrnoException) => {
      assert.ok(['ECONNRESET', 'ERR_STREAM_PREMATURE_CLOSE'].includes(err.code ?? '') || /socket hang up/.test(err.message), String(err));
      return true;
    });
    const rec = server.requests[0];
    assert.ok(rec);
    assert.deepEqual(rec.body, Buffer.from(JSON.stringify(chatBody())), 'request was read before closing');
    assert.equal(await rec.response.settled, 'closed');
    assert.equal(rec.response.status, undefined);

    server.setBehavior({ kind: 'close-before-headers', rst: true });
    await assert.rejects(post(server, CHAT_PATH, chatBody()), { code: 'ECONNRESET' });
    assert.equal(await server.requests[1]?.response.settled, 'reset');
  });

  void it('reset-mid-stream sends headers and N events, then the client sees a reset', async (t) => {
    const server = await serverFor(t);
    server.setBehavior({ kind: 'reset-mid-stream', afterEvents: 3 });
    const res = await post(server, CHAT_PATH, chatBody({ stream: true }));
    assert.equal(res.status, 200);
    assert.equal(res.headers['content-type'], 'text/event-stream; charset=utf-8');
    assert.ok(res.error, 'client must observe the reset as an error');
    assert.equal(res.error.code, 'ECONNRESET');

    const rec = server.requests[0];
    assert.ok(rec);
    assert.equal(await rec.response.settled, 'reset');
    const parsed = parseInferenceRequest('chat', rec.body, 'x');
    assert.ok(!('error' in parsed));
    const expected = streamReply('ms-a', parsed).events.slice(0, 3).join('');
    assert.equal(rec.response.body.toString(), expected);
    assert.deepEqual(res.body, rec.response.body, 'client got exactly the bytes sent before the reset');
  });

  void it('reset-mid-stream on a JSON request cuts the body after the headers', async (t) => {
    const server = await serverFor(t);
    server.setBehavior({ kind: 'reset-mid-stream' });
    const res = await post(server, CHAT_PATH, chatBody());
    assert.equal(res.status, 200);
    assert.ok(res.error);
    assert.ok(Number(res.headers['content-length']) > res.body.length);
    assert.deepEqual(res.body, server.requests[0]?.response.body);
  });

  void it('hang never answers: a client timeout fires, and close() is prompt', async (t) => {
    const server = await serverFor(t);
    server.setBehavior({ kind: 'hang' });
    await assert.rejects(post(server, CHAT_PATH, chatBody(), 150), { code: 'ETIMEDOUT' });
    assert.equal(await server.requests[0]?.response.settled, 'client-closed');

    // A hung request with the client still waiting: close() must tear it down, not wait for it.
    const nextRequest = server.onRequest();
    const clientFails = assert.rejects(post(server, CHAT_PATH, chatBody()));
    const rec = await nextRequest;
    await server.close();
    assert.equal(await rec.response.settled, 'server-closed');
    await clientFails;
  });

  void it('hang-after-headers sends headers and an event, then goes silent', async (t) => {
    const server = await serverFor(t);
    server.setBehavior({ kind: 'hang-after-headers', afterEvents: 1 });
    const res = await post(server, CHAT_PATH, chatBody({ stream: true }), 150);
    assert.equal(res.status, 200);
    assert.equal(res.error?.code, 'ETIMEDOUT');
    assert.equal(parseSse(res.body).length, 1);
    assert.deepEqual(res.body, server.requests[0]?.response.body);
  });

  void it('sse-error-event emits an OpenAI error event mid-stream, with or without [DONE]', async (t) => {
    const server = await serverFor(t);
    server.setBehavior({
      kind: 'sse-error-event',
      afterEvents: 2,
      error: { message: 'CUDA out of memory', type: 'server_error', code: 503 },
    });
    const withDone = parseSse((await post(server, CHAT_PATH, chatBody({ stream: true }))).body);
    assert.equal(withDone.length, 4);
    assert.deepEqual(parseJson(Buffer.from(withDone[2]?.data ?? '')), {
      error: { message: 'CUDA out of memory', type: 'server_error', param: null, code: 503 },
    });
    assert.equal(withDone[3]?.data, '[DONE]');

    server.setBehavior({ kind: 'sse-error-event', afterEvents: 1, thenDone: false });
    const noDone = await post(server, CHAT_PATH, chatBody({ stream: true }));
    assert.equal(noDone.error, undefined, 'the stream still ends normally');
    const events = parseSse(noDone.body);
    assert.equal(events.length, 2);
    assert.ok(asRecord(parseJson(Buffer.from(events[1]?.data ?? ''))['error']));

    const resp = parseSse((await post(server, '/v1/responses', { model: 'm', input: 'x', stream: true })).body);
    assert.equal(resp.at(-1)?.event, 'error');
  });

  void it('sse-no-terminator ends the stream normally without [DONE]', async (t) => {
    const server = await serverFor(t);
    server.setBehavior({ kind: 'sse-no-terminator' });
    const res = await post(server, CHAT_PATH, chatBody({ stream: true }));
    assert.equal(res.error, undefined);
    const events = parseSse(res.body);
    assert.ok(events.length > 2);
    assert.ok(events.every((e) => e.data !== '[DONE]'));
    assert.equal(events.map((e) => chatDelta(e.data)).join(''), replyText('ms-a', 'llama-test', PROMPT));
    assert.equal(await server.requests[0]?.response.settled, 'ended');
  });

  void it('html-502, json-error and status answer with the configured status and body', async (t) => {
    const server = await serverFor(t);
    server.setBehavior({ kind: 'html-502' });
    const html = await post(server, CHAT_PATH, chatBody());
    assert.equal(html.status, 502);
    assert.equal(html.headers['content-type'], 'text/html');
    assert.equal(html.body.toString(), '<html>Bad Gateway</html>');
    assert.equal(html.headers['x-model-server-id'], 'ms-a');

    server.setBehavior({
      kind: 'json-error',
      status: 400,
      message: 'context too long',
      type: 'invalid_request_error',
      code: 'context_length_exceeded',
    });
    const jsonErr = await post(server, CHAT_PATH, chatBody());
    assert.equal(jsonErr.status, 400);
    assert.deepEqual(parseJson(jsonErr.body), {
      error: { message: 'context too long', type: 'invalid_request_error', param: null, code: 'context_length_exceeded' },
    });

    server.setBehavior({ kind: 'status', status: 429, body: 'slow down', headers: { 'retry-after': '3' } });
    const custom = await post(server, CHAT_PATH, chatBody());
    assert.equal(custom.status, 429);
    assert.equal(custom.body.toString(), 'slow down');
    assert.equal(custom.headers['retry-after'], '3');
    assert.equal(custom.headers['content-type'], 'text/plain');
  });

  void it('truncated-json ends a chunked 200 in the middle of the JSON object', async (t) => {
    const server = await serverFor(t);
    const full = await post(server, CHAT_PATH, chatBody());
    server.setBehavior({ kind: 'truncated-json' });
    const cut = await post(server, CHAT_PATH, chatBody());
    assert.equal(cut.status, 200);
    assert.equal(cut.error, undefined, 'the body ends normally');
    assert.equal(cut.headers['transfer-encoding'], 'chunked');
    assert.equal(cut.headers['content-length'], undefined);
    assert.ok(cut.body.length > 0 && cut.body.length < full.body.length);
    assert.deepEqual(cut.body, full.body.subarray(0, cut.body.length));
    assert.throws(() => JSON.parse(cut.body.toString()) as unknown, SyntaxError);
  });

  void it('slow-chunks spaces SSE events and slices JSON bodies', async (t) => {
    const server = await serverFor(t);
    server.setBehavior({ kind: 'slow-chunks', delayMs: 15 });
    const started = performance.now();
    const res = await post(server, CHAT_PATH, chatBody({ stream: true }));
    const elapsed = performance.now() - started;
    const events = parseSse(res.body);
    assert.equal(events.at(-1)?.data, '[DONE]');
    assert.ok(elapsed >= 15 * (events.length - 1) - 5, `events were spaced (${elapsed.toFixed(0)} ms for ${events.length})`);

    const json = await post(server, CHAT_PATH, chatBody());
    const rec = server.requests[1];
    assert.ok(rec);
    assert.equal(rec.response.chunks.length, 4);
    assert.deepEqual(json.body, rec.response.body);
    assert.equal(parseJson(json.body)['system_fingerprint'], 'ms-a');
  });

  void it('nextBehavior is one-shot, queued, and not consumed by /health', async (t) => {
    const server = await serverFor(t);
    server.nextBehavior({ kind: 'html-502' });
    server.nextBehavior({ kind: 'json-error', status: 503 });
    assert.equal((await rawRequest({ url: `http://${server.address}/health` })).status, 200);
    assert.equal((await post(server, CHAT_PATH, chatBody())).status, 502);
    assert.equal((await post(server, CHAT_PATH, chatBody())).status, 503);
    assert.equal((await post(server, CHAT_PATH, chatBody())).status, 200);
    assert.deepEqual(
      server.requests.map((r) => r.behavior.kind),
      ['ok', 'html-502', 'json-error', 'ok'],
    );
  });

  void it('refuse() makes connects fail with ECONNREFUSED; resume() serves on the same address', async (t) => {
    const server = await serverFor(t);
    const agent = new Agent({ keepAlive: true });
    t.after(() => agent.destroy());
    const url = `http://${server.address}${CHAT_PATH}`;
    assert.equal((await rawRequest({ url, body: chatBody(), agent })).status, 200);

    await server.refuse();
    // refuse() dropped the pooled keep-alive connection; once the client has noticed, a new
    // connect through the same agent is refused too.
    await waitUntil(() => (Object.keys(agent.freeSockets).length === 0 ? true : undefined), {
      description: 'the agent to drop its closed keep-alive socket',
    });
    await assert.rejects(rawRequest({ url, body: chatBody(), agent }), { code: 'ECONNREFUSED' });
    await assert.rejects(post(server, CHAT_PATH, chatBody()), { code: 'ECONNREFUSED' });

    await server.resume();
    const back = await post(server, CHAT_PATH, chatBody());
    assert.equal(back.status, 200);
    assert.equal(back.headers['x-model-server-id'], 'ms-a');
  });
});
