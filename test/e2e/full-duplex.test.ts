// The processor under FULL_DUPLEX_STREAMED, the mode the InferencePool gateways configure (Istio,
// kgateway, Envoy AI Gateway): no response attributes, no mode override, trailers sent. Through a
// real Envoy whose ext_proc filter is rewritten to that shape.

import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { CATALOG, type ErrorKind } from '../../src/errors/catalog.js';
import { startGateway, type Gateway } from '../support/gateway.js';
import { metricValue } from '../support/prometheus.js';
import type { ClientResponse } from '../support/http-client.js';
import { startModelServer, type ModelServer } from '../support/model-server.js';
import { waitUntil } from '../support/wait-until.js';
import { assertSameBytes, sequencedText } from '../support/sequenced-bytes.js';

const RAW_ENVOY_TEXT = /upstream connect error|disconnect\/reset before headers|no healthy upstream|upstream request timeout/i;

/** The InferencePool gateways send no response attributes: take ours away from the full-duplex config. */
function withoutResponseAttributes(config: Record<string, unknown>): Record<string, unknown> {
  const copy = structuredClone(config);
  const listeners = (
    copy.static_resources as {
      listeners: Array<{
        filter_chains: Array<{
          filters: Array<{ typed_config: { http_filters: Array<{ name: string; typed_config: Record<string, unknown> }> } }>;
        }>;
      }>;
    }
  ).listeners;
  for (const listener of listeners) {
    for (const filter of listener.filter_chains[0].filters[0].typed_config.http_filters) {
      if (filter.name === 'envoy.filters.http.ext_proc') delete filter.typed_config.response_attributes;
    }
  }
  return copy;
}

function assertCatalogError(response: ClientResponse, kind: ErrorKind): void {
  const text = response.text();
  assert.doesNotMatch(text, RAW_ENVOY_TEXT, `raw Envoy text reached the client: ${text}`);
  assert.equal(response.status, CATALOG[kind].status, `${kind}: status (body ${text})`);
  assert.match(response.headers['content-type'] ?? '', /^application\/json/);
  assert.equal((JSON.parse(text) as { error: { code: string } }).error.code, CATALOG[kind].code);
}

describe('FULL_DUPLEX_STREAMED without response attributes (the InferencePool gateways)', () => {
  let good: ModelServer;
  let faulty: ModelServer;
  let refusing: ModelServer;
  let gateway: Gateway;

  before(async () => {
    good = await startModelServer({ id: 'good', models: ['m'] });
    faulty = await startModelServer({ id: 'faulty', models: ['f'] });
    refusing = await startModelServer({ id: 'refusing', models: ['r'] });
    await refusing.refuse();
    gateway = await startGateway({
      pools: [
        { name: 'good', models: ['m'], endpoints: [{ address: good.address }] },
        { name: 'faulty', models: ['f'], endpoints: [{ address: faulty.address }] },
        { name: 'refusing', models: ['r'], endpoints: [{ address: refusing.address }] },
      ],
      configYaml: 'quarantine:\n  consecutiveFailures: 100\n',
      envoy: { bodyModes: 'full-duplex' },
      transformEnvoyConfig: withoutResponseAttributes,
    });
  });

  after(async () => {
    await gateway.stop();
    await Promise.all([good.close(), faulty.close(), refusing.close()]);
  });

  it('routes a JSON request and passes the answer byte-identical', async () => {
    const response = await gateway.send({
      path: '/v1/chat/completions',
      body: { model: 'm', messages: [{ role: 'user', content: 'hello there' }] },
    });
    assert.equal(response.status, 200, response.text());
    assert.deepEqual(response.body, good.lastResponseBody());
    assert.equal(good.requests.at(-1)?.headers['x-gateway-destination-endpoint'], good.address);
  });

  it('passes an SSE stream byte-identical and records it as ok', async () => {
    const response = await gateway.send({
      path: '/v1/chat/completions',
      body: { model: 'm', stream: true, messages: [{ role: 'user', content: 'stream please' }] },
    });
    assert.equal(response.status, 200);
    assert.deepEqual(response.body, good.lastResponseBody());
    assert.match(response.text(), /data: \[DONE\]/);
  });

  it('a 5 MB request body reaches the model server byte-identical', async () => {
    // Every 16 bytes name their own offset: a chunk lost, repeated or moved changes the digest.
    const content = sequencedText(5 * 1024 * 1024);
    const body = Buffer.from(JSON.stringify({ model: 'm', messages: [{ role: 'user', content }] }));
    const response = await gateway.send({ path: '/v1/chat/completions', body, headers: { 'content-type': 'application/json' } });
    assert.equal(response.status, 200, response.text().slice(0, 300));
    assertSameBytes(good.requests.at(-1)?.body ?? Buffer.alloc(0), body, 'the body the model server got');
  });

  it('an unknown model → 404 catalog JSON', async () => {
    assertCatalogError(await gateway.send({ path: '/v1/chat/completions', body: { model: 'nope', messages: [] } }), 'model_not_found');
  });

  it('a truncated JSON answer becomes a clean 502', async () => {
    faulty.nextBehavior({ kind: 'truncated-json' });
    assertCatalogError(await gateway.send({ path: '/v1/chat/completions', body: { model: 'f', messages: [] } }), 'truncated_response');
  });

  it('an SSE stream without its terminator gets the appended error event', async () => {
    faulty.nextBehavior({ kind: 'sse-no-terminator' });
    const response = await gateway.send({ path: '/v1/chat/completions', body: { model: 'f', stream: true, messages: [] } });
    assert.equal(response.status, 200);
    const sent = faulty.lastResponseBody();
    assert.ok(response.body.subarray(0, sent.length).equals(sent), 'what the server sent passes first, unchanged');
    assert.match(response.body.subarray(sent.length).toString(), /"code":"stream_incomplete"/);
  });

  it("a refused connection → catalog JSON read from Envoy's text, never the text itself", async () => {
    const response = await gateway.send({ path: '/v1/chat/completions', body: { model: 'r', messages: [] } });
    assert.doesNotMatch(response.text(), RAW_ENVOY_TEXT);
    assert.match(response.headers['content-type'] ?? '', /^application\/json/);
    assert.equal(response.status, 503);
    const code = (response.json() as { error: { code: string } }).error.code;
    assert.ok(code === CATALOG.upstream_connect_failed.code || code === CATALOG.all_replicas_failed.code, code);
  });

  it('a stream reset half-way is a failed attempt of the replica that served it', async () => {
    // The model server sends two events and stalls; its connection is reset once bytes reached the
    // client, so the break is half-way for certain (a reset sent with the events can beat the
    // headers to the client, which then gets a 502 instead).
    faulty.nextBehavior({ kind: 'hang-after-headers', afterEvents: 2 });
    let reset = false;
    const response = await gateway.send({
      path: '/v1/chat/completions',
      body: { model: 'f', stream: true, messages: [] },
      onData: () => {
        if (reset) return;
        reset = true;
        faulty.resetConnections();
      },
    });
    assert.equal(response.status, 200);
    assert.ok(response.error !== undefined, 'the client sees its response end before the body did');
    const sent = faulty.requests.at(-1)!.response.body;
    assert.ok(response.body.length > 0, 'bytes had reached the client');
    assertSameBytes(
      response.body,
      sent.subarray(0, response.body.length),
      'what the client got: a part of what the server sent, unchanged, nothing appended',
    );
    await waitUntil(
      async () =>
        metricValue(await gateway.metricsText(), 'llm_extproc_requests_total', { model: 'f', result: 'stream_broken' }) >= 1
          ? true
          : undefined,
      {
        description: 'stream_broken recorded',
      },
    );
    assert.equal(
      metricValue(await gateway.metricsText(), 'llm_extproc_upstream_attempts_total', {
        endpoint: faulty.address,
        outcome: 'success',
        reason: 'ok',
      }),
      0,
    );
  });
});
