// End to end: the per-request LLM figures and opt-in stream usage injection through a real
// Envoy, under our own configuration and the configurations Istio and Envoy AI Gateway generate
// for an InferencePool (their body modes differ: buffered, streamed, full duplex). The model
// server sends a usage chunk only when the request asks for one, as vLLM does.
//
// Per profile, two gateways in front of the same model server: one with `routing.streamUsagePools`
// naming the pool, one without. The same streamed request through both must reach the client
// byte for byte the same (the usage chunk we asked for is taken out again), while only the first
// has the tokens in /metrics. A server that waits before its first event shows that wait as a
// lower bound of the time to first token.

import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import type { GatewayProfileName } from '../../tools/envoy-config/gateway-profiles.js';
import { startGateway, type Gateway } from '../support/gateway.js';
import { metricValue, waitForMetric } from '../support/prometheus.js';
import type { ClientRequest } from '../support/http-client.js';
import { startModelServer, type ModelServer } from '../support/model-server.js';

const MODEL = 'figures-model';
const POOL = 'figures-pool';
const CHAT = '/v1/chat/completions';
const FIRST_TOKEN_WAIT_MS = 300;

function streamedChat(content: string, extra: Record<string, unknown> = {}): ClientRequest {
  return { path: CHAT, body: { model: MODEL, stream: true, messages: [{ role: 'user', content }], ...extra } };
}

interface Usage {
  readonly prompt_tokens: number;
  readonly completion_tokens: number;
}

/** The usage the model server reported in the stream it wrote (its usage-only chunk), if any. */
function usageSent(body: Buffer): Usage | undefined {
  let usage: Usage | undefined;
  for (const line of body.toString('utf8').split('\n')) {
    if (!line.startsWith('data: {')) continue;
    const chunk = JSON.parse(line.slice('data: '.length)) as { usage?: Usage | null };
    if (chunk.usage != null) usage = chunk.usage;
  }
  return usage;
}

const PROFILES: readonly { readonly title: string; readonly profile: GatewayProfileName | undefined }[] = [
  { title: 'our default configuration', profile: undefined },
  { title: 'the istio profile', profile: 'istio' },
  { title: 'the aigw profile (full duplex)', profile: 'aigw' },
];

for (const { title, profile } of PROFILES) {
  void describe(`LLM figures and stream usage injection behind ${title}`, () => {
    let server: ModelServer;
    let injecting: Gateway;
    let plain: Gateway;
    const pools = (): { name: string; models: string[]; endpoints: { address: string }[] }[] => [
      { name: POOL, models: [MODEL], endpoints: [{ address: server.address }] },
    ];

    before(async () => {
      server = await startModelServer({ id: 'figures', models: [MODEL], metrics: { waiting: 3, running: 1, kvCacheUsage: 0.25 } });
      injecting = await startGateway({ pools: pools(), profile, configYaml: `routing:\n  streamUsagePools: [${POOL}]\n` });
      plain = await startGateway({ pools: pools(), profile });
    });

    after(async () => {
      await injecting?.stop();
      await plain?.stop();
      await server?.close();
    });

    void it('the client gets the same bytes with usage injection as without, and the injected gateway counts the tokens', async () => {
      server.requests.length = 0;
      const viaInjecting = await injecting.send(streamedChat('count my tokens, please'));
      const viaPlain = await plain.send(streamedChat('count my tokens, please'));
      assert.equal(viaInjecting.status, 200, viaInjecting.text());
      assert.equal(viaPlain.status, 200, viaPlain.text());

      const [asked, unasked] = server.requests.filter((r) => r.path === CHAT);
      const askedBody = JSON.parse(asked.body.toString('utf8')) as { stream_options?: { include_usage?: boolean } };
      assert.equal(askedBody.stream_options?.include_usage, true, 'the injecting gateway asked the model server for usage');
      assert.equal(unasked.body.toString('utf8').includes('stream_options'), false, 'the plain gateway sent the body as it came');
      const sent = usageSent(asked.response.body);
      assert.ok(sent !== undefined && sent.completion_tokens > 0, 'the model server sent a usage chunk because it was asked');
      assert.equal(usageSent(unasked.response.body), undefined, 'and none when it was not');

      assert.equal(viaInjecting.body.toString('utf8'), viaPlain.body.toString('utf8'));
      assert.ok(viaInjecting.body.equals(viaPlain.body), 'byte-identical streams');
      assert.ok(viaInjecting.body.equals(unasked.response.body), 'exactly what the model server sends unasked');

      const labels = { model: MODEL, pool: POOL };
      await waitForMetric(() => injecting.metricsText(), 'llm_extproc_tokens_total', { ...labels, type: 'input' }, sent.prompt_tokens);
      await waitForMetric(() => injecting.metricsText(), 'llm_extproc_tokens_total', { ...labels, type: 'output' }, sent.completion_tokens);
      const usageLabels = { gen_ai_operation_name: 'chat', gen_ai_request_model: MODEL, pool: POOL };
      assert.equal(
        metricValue(await injecting.metricsText(), 'gen_ai_client_token_usage_sum', { ...usageLabels, gen_ai_token_type: 'output' }),
        sent.completion_tokens,
      );
      // The same tokens under the Gateway API Inference Extension's names.
      const objective = { model_name: MODEL, target_model_name: MODEL };
      const text = await injecting.metricsText();
      assert.equal(metricValue(text, 'inference_objective_input_tokens_sum', objective), sent.prompt_tokens);
      assert.equal(metricValue(text, 'inference_objective_output_tokens_sum', objective), sent.completion_tokens);
      assert.equal(metricValue(text, 'inference_objective_request_total', objective), 1);
      // llm-d's canonical name for the same figure (llm-d-metrics.ts).
      assert.equal(metricValue(text, 'llm_d_epp_request_total', objective), 1);
      // Without injection the stream carried no usage: counted as such, never as zero tokens.
      await waitForMetric(() => plain.metricsText(), 'llm_extproc_answers_without_usage_total', { ...labels, answer: 'stream' }, 1);
      assert.equal(metricValue(await plain.metricsText(), 'llm_extproc_tokens_total', labels), 0);
    });

    void it("the Inference Extension's pool series show the pool's ready pods and the load its model server reports", async () => {
      await waitForMetric(() => plain.metricsText(), 'inference_pool_average_queue_size', { name: POOL }, 3);
      const text = await plain.metricsText();
      assert.equal(metricValue(text, 'inference_pool_ready_pods', { name: POOL }), 1);
      assert.equal(metricValue(text, 'llm_d_epp_ready_endpoints', { name: POOL }), 1);
      assert.equal(metricValue(text, 'inference_pool_average_kv_cache_utilization', { name: POOL }), 0.25);
      // Static endpoints have no pod: the address stands for it.
      assert.equal(metricValue(text, 'inference_pool_per_pod_queue_size', { name: POOL, model_server_pod: server.address }), 3);
    });

    void it('a client that asks for usage itself still gets its usage chunk', async () => {
      server.requests.length = 0;
      const res = await injecting.send(streamedChat('and mine', { stream_options: { include_usage: true } }));
      assert.equal(res.status, 200, res.text());
      const written = server.requests.filter((r) => r.path === CHAT)[0].response.body;
      assert.ok(res.body.equals(written), 'the stream is passed as the model server wrote it');
      assert.ok(usageSent(res.body) !== undefined);
    });

    void it(`a server that waits ${FIRST_TOKEN_WAIT_MS} ms before its first token shows a time to first token of at least that`, async () => {
      const ttft = 'gen_ai_server_time_to_first_token_seconds';
      const labels = { gen_ai_operation_name: 'chat', gen_ai_request_model: MODEL, pool: POOL, endpoint: server.address };
      const earlier = await plain.metricsText();
      const countBefore = metricValue(earlier, `${ttft}_count`, labels);
      const sumBefore = metricValue(earlier, `${ttft}_sum`, labels);
      const fastBefore = metricValue(earlier, `${ttft}_bucket`, { ...labels, le: '0.25' });
      server.nextBehavior({ kind: 'ok', firstEventDelayMs: FIRST_TOKEN_WAIT_MS });
      const res = await plain.send(streamedChat('take your time'));
      assert.equal(res.status, 200, res.text());
      await waitForMetric(() => plain.metricsText(), `${ttft}_count`, labels, countBefore + 1);
      const text = await plain.metricsText();
      // Buckets are cumulative: the new observation is in none up to 0.25 s, so it lies above it;
      // the sum grew by that one observation, which is at least the server's wait.
      assert.equal(metricValue(text, `${ttft}_bucket`, { ...labels, le: '0.25' }), fastBefore);
      assert.equal(metricValue(text, `${ttft}_bucket`, { ...labels, le: '+Inf' }), countBefore + 1);
      assert.ok(metricValue(text, `${ttft}_sum`, labels) - sumBefore >= FIRST_TOKEN_WAIT_MS / 1e3);
    });
  });
}
