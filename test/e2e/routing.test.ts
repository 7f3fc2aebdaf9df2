// End to end: real Envoy + our server + real model servers, static endpoints file.

import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { startGateway, type Gateway, type StaticPoolSpec } from '../support/gateway.js';
import { metricValue } from '../support/prometheus.js';
import { startModelServer, type ModelServer } from '../support/model-server.js';
import { waitUntil } from '../support/wait-until.js';

const CHAT = '/v1/chat/completions';

describe('routing through a real Envoy (static endpoints)', () => {
  let llamaReady: ModelServer;
  let llamaNotReady: ModelServer;
  let qwen: ModelServer;
  let gateway: Gateway;
  let pools: StaticPoolSpec[];

  before(async () => {
    llamaReady = await startModelServer({ id: 'llama-a', models: ['llama-3-8b'] });
    llamaNotReady = await startModelServer({ id: 'llama-b', models: ['llama-3-8b'] });
    qwen = await startModelServer({ id: 'qwen-a', models: ['qwen-2.5'] });
    pools = [
      {
        name: 'llama',
        models: ['llama-3-8b'],
        endpoints: [
          { address: llamaReady.address },
          { address: llamaNotReady.address, state: 'NotReady', reason: 'readiness probe failing' },
        ],
      },
      { name: 'qwen', models: ['qwen-2.5'], endpoints: [{ address: qwen.address }] },
    ];
    gateway = await startGateway({ pools });
  });

  after(async () => {
    await gateway?.stop();
    await Promise.all([llamaReady, llamaNotReady, qwen].map((s) => s?.close()));
  });

  it('sends each model to a ready endpoint of its own pool, never to a not-ready one', async () => {
    for (let i = 0; i < 12; i++) {
      const llama = await gateway.send({ path: CHAT, body: { model: 'llama-3-8b', messages: [{ role: 'user', content: `hi ${i}` }] } });
      assert.equal(llama.status, 200, llama.text());
      assert.equal(llama.headers['x-model-server-id'], 'llama-a');
      const q = await gateway.send({ path: '/v1/completions', body: { model: 'qwen-2.5', prompt: `hello ${i}` } });
      assert.equal(q.status, 200, q.text());
      assert.equal(q.headers['x-model-server-id'], 'qwen-a');
    }
    assert.equal(llamaNotReady.requests.length, 0, 'the not-ready endpoint must never get a request');
    assert.equal(
      qwen.requests.every((r) => (JSON.parse(r.body.toString()) as { model: string }).model === 'qwen-2.5'),
      true,
    );
  });

  it('delivers a non-streaming JSON answer byte-identical to what the model server sent, and the request body unchanged', async () => {
    const body = Buffer.from('{"model":"llama-3-8b",  "messages":[{"role":"user","content":"héllo ✓"}],"temperature":0.5}');
    const response = await gateway.send({ path: CHAT, body });
    assert.equal(response.status, 200);
    const served = llamaReady.requests.at(-1)!;
    assert.deepEqual(served.body, body, 'request body reached the model server byte-identical');
    assert.deepEqual(response.body, served.response.body, 'response body reached the client byte-identical');
    assert.match(response.headers['content-type'] ?? '', /application\/json/);
  });

  it('delivers an SSE stream byte-identical, ending in [DONE]', async () => {
    const response = await gateway.send({
      path: CHAT,
      body: { model: 'qwen-2.5', stream: true, messages: [{ role: 'user', content: 'stream please' }] },
    });
    assert.equal(response.status, 200);
    assert.match(response.headers['content-type'] ?? '', /text\/event-stream/);
    const served = qwen.requests.at(-1)!;
    await served.response.settled;
    assert.ok(served.response.chunks.length > 2, 'the model server wrote several chunks');
    assert.deepEqual(response.body, served.response.body);
    assert.ok(response.text().endsWith('data: [DONE]\n\n'));
  });

  it('delivers a Responses API stream (ending in response.completed, no [DONE]) untouched and counts it as a success', async () => {
    const response = await gateway.send({ path: '/v1/responses', body: { model: 'qwen-2.5', stream: true, input: 'stream please' } });
    assert.equal(response.status, 200);
    const served = qwen.requests.at(-1)!;
    await served.response.settled;
    assert.deepEqual(response.body, served.response.body, 'nothing appended: the terminal event counts as the end');
    assert.match(response.text(), /response\.completed/);
    await waitUntil(
      async () =>
        metricValue(await gateway.metricsText(), 'llm_extproc_requests_total', { model: 'qwen-2.5', result: 'ok' }) >= 1 ? true : undefined,
      {
        description: 'the stream recorded as ok',
      },
    );
    assert.equal(metricValue(await gateway.metricsText(), 'llm_extproc_requests_total', { result: 'stream_incomplete' }), 0);
  });

  it('answers an unknown model with 404 model_not_found JSON', async () => {
    const response = await gateway.send({ path: CHAT, body: { model: 'gpt-17', messages: [] } });
    assert.equal(response.status, 404);
    assert.match(response.headers['content-type'] ?? '', /^application\/json/);
    const error = (response.json() as { error: Record<string, unknown> }).error;
    assert.equal(error.code, 'model_not_found');
    assert.equal(typeof error.type, 'string');
    assert.match(String(error.message), /gpt-17/);
  });

  it('answers malformed JSON and a missing model with 400 JSON', async () => {
    const cases: Array<[string | object, string]> = [
      ['{"model": "llama-3-8b", "messages": [', 'invalid_json'],
      ['not json at all', 'invalid_json'],
      [{ messages: [{ role: 'user', content: 'x' }] }, 'missing_model'],
      [{ model: 42 }, 'invalid_model'],
    ];
    for (const [body, code] of cases) {
      const response = await gateway.send({ path: CHAT, body });
      assert.equal(response.status, 400, `${JSON.stringify(body)} → ${response.text()}`);
      assert.match(response.headers['content-type'] ?? '', /^application\/json/);
      assert.equal((response.json() as { error: { code: string } }).error.code, code);
    }
  });

  it('lists the served models on GET /v1/models', async () => {
    const response = await gateway.send({ path: '/v1/models' });
    assert.equal(response.status, 200);
    const ids = (response.json() as { data: Array<{ id: string }> }).data.map((m) => m.id);
    assert.deepEqual(ids, ['llama-3-8b', 'qwen-2.5']);
  });

  it('overwrites a client-supplied destination header', async () => {
    const response = await gateway.send({
      path: CHAT,
      body: { model: 'llama-3-8b', messages: [] },
      headers: { 'x-gateway-destination-endpoint': llamaNotReady.address },
    });
    assert.equal(response.status, 200);
    assert.equal(response.headers['x-model-server-id'], 'llama-a');
    assert.equal(llamaNotReady.requests.length, 0);
  });

  it('follows edits of the endpoints file without a restart', async () => {
    const before = gateway.app.store.view().version;
    await gateway.writePools([
      {
        name: 'llama',
        models: ['llama-3-8b'],
        endpoints: [{ address: llamaReady.address, state: 'Terminating', reason: 'drained' }, { address: llamaNotReady.address }],
      },
      pools[1],
    ]);
    await waitUntil(() => (gateway.app.store.view().version > before ? true : undefined), { description: 'endpoints file reload' });
    const servedBefore = llamaReady.requests.length;
    for (let i = 0; i < 6; i++) {
      const response = await gateway.send({ path: CHAT, body: { model: 'llama-3-8b', messages: [] } });
      assert.equal(response.status, 200);
      assert.equal(response.headers['x-model-server-id'], 'llama-b');
    }
    assert.equal(llamaReady.requests.length, servedBefore, 'the endpoint marked terminating got no new request');
  });
});
