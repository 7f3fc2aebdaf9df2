// Flow control end to end, through real Envoy: under our profile (buffered bodies, ext_proc message
// timer) and the istio profile (full duplex, no message timer). A pool whose one replica takes one
// request at a time (picker.flowControl.saturation.maxInFlight: 1) is saturated while a request
// runs; the test decides when each answer finishes (paused streams), so the order in which queued
// requests reach the model server is what the queue decided, not timing. The TTL: under our
// profile the timed TTL, below Envoy's message timer, answers first; under istio's the full-duplex
// TTL applies (its shorter timed TTL would have answered sooner).
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { assertCatalogError, type ErrorBody } from '../support/catalog-assert.js';
import { arrivals, HeldAnswers, queueLength, waitForQueue } from '../support/flow-helpers.js';
import { startGateway, type Gateway } from '../support/gateway.js';
import { metricValue, waitForMetric } from '../support/prometheus.js';
import type { ClientRequest, ClientResponse } from '../support/http-client.js';
import { startModelServer, type ModelServer } from '../support/model-server.js';
import { waitUntil } from '../support/wait-until.js';
import type { GatewayProfileName } from '../../tools/envoy-config/gateway-profiles.js';

const TENANT = 'x-llm-d-inference-fairness-id';
/** The name llm-d's header replaced, still read when only it is sent. */
const LEGACY_TENANT = 'x-gateway-inference-fairness-id';
const DROPPED_REASON = 'x-llm-d-request-dropped-reason';

function chat(tenant: string, extra: Partial<ClientRequest> = {}): ClientRequest {
  return {
    path: '/v1/chat/completions',
    headers: { [TENANT]: tenant },
    body: { model: 'm', stream: true, messages: [{ role: 'user', content: 'hi' }] },
    ...extra,
  };
}

interface TtlCase {
  readonly ttlSeconds: number;
  readonly timedTtlSeconds: number;
  /** Envoy's ext_proc message timer for our profile (ms); istio's profile runs none in full duplex. */
  readonly messageTimeoutMs?: number;
  /** The TTL this profile's body mode must apply. */
  readonly expectedTtlMs: number;
}

const PROFILES: ReadonlyArray<{ name: string; profile: GatewayProfileName | undefined; ttl: TtlCase }> = [
  {
    name: 'our profile (buffered, message timer)',
    profile: undefined,
    // Buffered: the timed TTL, below the 3 s message timer (which would answer 504 instead).
    ttl: { ttlSeconds: 60, timedTtlSeconds: 1.5, messageTimeoutMs: 3000, expectedTtlMs: 1500 },
  },
  {
    name: 'istio profile (full duplex, no message timer)',
    profile: 'istio',
    // Full duplex: the full-duplex TTL, not the shorter timed one.
    ttl: { ttlSeconds: 1.5, timedTtlSeconds: 0.3, expectedTtlMs: 1500 },
  },
];

/** One replica behind a gateway with flow control on, saturated while one request runs. */
async function flowGateway(
  server: ModelServer,
  profile: GatewayProfileName | undefined,
  ttl: Omit<TtlCase, 'expectedTtlMs'>,
): Promise<Gateway> {
  return startGateway({
    pools: [
      { name: 'p', models: ['m'], endpoints: [{ address: server.address }] },
      // A model whose only replica is still starting: nothing could serve it.
      { name: 'starting', models: ['cold'], endpoints: [{ address: '127.0.0.1:9', state: 'Starting' }] },
    ],
    configYaml: [
      'picker:',
      '  pools:',
      '    p: { metricsFormat: none }',
      '  flowControl:',
      '    enabled: true',
      `    ttlSeconds: ${ttl.ttlSeconds}`,
      `    timedTtlSeconds: ${ttl.timedTtlSeconds}`,
      '    saturation: { maxInFlight: 1 }',
      '    priorityByHeaderValue: { sheddable: -1 }',
      '',
    ].join('\n'),
    ...(profile === undefined ? { envoy: { messageTimeoutMs: ttl.messageTimeoutMs ?? 1000 } } : { profile }),
  });
}

for (const { name, profile, ttl } of PROFILES) {
  describe(`flow control through Envoy, ${name}`, () => {
    let server: ModelServer;
    let gateway: Gateway;
    let held: HeldAnswers;

    before(async () => {
      server = await startModelServer({ id: 'only', models: ['m'] });
      held = new HeldAnswers(server);
      // Below the message timer we give our profile's Envoy (10 s), far above this test's waits.
      gateway = await flowGateway(server, profile, { ttlSeconds: 60, timedTtlSeconds: 8, messageTimeoutMs: 10_000 });
    });

    after(async () => {
      await gateway?.stop();
      await server?.close();
    });

    it('a flooding tenant does not hold up an interactive tenant: the queue takes the tenants in turn', async () => {
      const FLOOD = 10;
      const INTERACTIVE = 3;
      held.hold(1 + FLOOD + INTERACTIVE);
      const responses: Array<Promise<ClientResponse>> = [gateway.send(chat('batch'))];
      await arrivals(server, 1);
      // The replica is busy: the flood queues first, then the interactive requests.
      for (let i = 0; i < FLOOD; i++) responses.push(gateway.send(chat('batch')));
      await waitForQueue(gateway, FLOOD, { tenant: 'batch' });
      // The interactive tenant names itself by the header's old name, which is still honoured.
      const interactive = (): ClientRequest => chat('interactive', { headers: { [LEGACY_TENANT]: 'interactive' } });
      for (let i = 0; i < INTERACTIVE; i++) responses.push(gateway.send(interactive()));
      await waitForQueue(gateway, INTERACTIVE, { tenant: 'interactive' });
      assert.equal(server.requests.length, 1, 'nothing reached the busy replica while it was saturated');

      // Each finished answer lets exactly the next request through.
      for (let k = 1; k <= FLOOD + INTERACTIVE; k++) {
        held.releaseNext();
        await arrivals(server, k + 1);
      }
      held.releaseNext();
      const order = server.requests.slice(1).map((r) => r.headers[TENANT] ?? r.headers[LEGACY_TENANT]);
      // Round robin between the two tenants: the interactive requests are the 2nd, 4th and 6th
      // dispatched, while the flood's last one waits for the 13th.
      assert.deepEqual(order, [
        'batch',
        'interactive',
        'batch',
        'interactive',
        'batch',
        'interactive',
        ...Array<string>(FLOOD - INTERACTIVE).fill('batch'),
      ]);
      for (const response of await Promise.all(responses)) assert.equal(response.status, 200, response.text());
      const metrics = await gateway.metricsText();
      assert.equal(metricValue(metrics, 'llm_extproc_flow_requests_total', { tenant: 'batch', event: 'dispatched' }), FLOOD);
      assert.equal(metricValue(metrics, 'llm_extproc_flow_requests_total', { tenant: 'interactive', event: 'dispatched' }), INTERACTIVE);
      assert.equal(await queueLength(gateway), 0);
    });

    it('a sheddable request gets 429 shed JSON with Retry-After while the pool is saturated, and passes when it is not', async () => {
      const before = server.requests.length;
      const sheddable = (): ClientRequest => chat('s', { headers: { [TENANT]: 's', 'x-llm-extproc-priority': 'sheddable' } });
      held.hold(2);
      const running = gateway.send(chat('a'));
      await arrivals(server, before + 1);
      const refused = await gateway.send(sheddable());
      assertCatalogError(refused, 'shed');
      assert.equal(refused.status, 429);
      assert.equal(refused.headers[DROPPED_REASON], 'rejected-saturated');
      assert.equal(refused.headers['retry-after'], '1');
      assert.equal(server.requests.length, before + 1, 'refused before reaching the model server');
      held.releaseNext();
      assert.equal((await running).status, 200);
      // Its ext_proc stream ends (and gives its in-flight slot back) after the client has the answer.
      await waitForMetric(() => gateway.metricsText(), 'llm_extproc_in_flight_requests', {}, 0, 'the answered stream ended');
      // The replica is free: sheddable traffic passes (its answer is the second held one).
      const passing = gateway.send(sheddable());
      await arrivals(server, before + 2);
      held.releaseNext();
      const passed = await passing;
      assert.equal(passed.status, 200, passed.text());
    });

    it("a model without a ready replica gets 503 with llm-d's rejected-no-endpoints reason", async () => {
      const refused = await gateway.send({ ...chat('a'), body: { model: 'cold', messages: [{ role: 'user', content: 'hi' }] } });
      assertCatalogError(refused, 'no_ready_replica');
      assert.equal(refused.status, 503);
      assert.equal(refused.headers[DROPPED_REASON], 'rejected-no-endpoints');
    });

    it('a client that hangs up while queued leaves the queue at once, and never reaches the model server', async () => {
      const before = server.requests.length;
      held.hold(2);
      const running = gateway.send(chat('a'));
      await arrivals(server, before + 1);
      const aborter = new AbortController();
      const leaving = gateway.send(chat('b', { signal: aborter.signal })).then(
        () => 'answered',
        () => 'aborted',
      );
      await waitForQueue(gateway, 1, { tenant: 'b' });
      aborter.abort();
      assert.equal(await leaving, 'aborted');
      await waitUntil(
        async () =>
          metricValue(await gateway.metricsText(), 'llm_extproc_flow_requests_total', { tenant: 'b', event: 'cancelled' }) === 1
            ? true
            : undefined,
        { description: 'the queued request cancelled' },
      );
      assert.equal(await queueLength(gateway), 0, 'its slot is free');
      // The next request takes the replica as soon as it is free.
      const next = gateway.send(chat('c'));
      await waitForQueue(gateway, 1, { tenant: 'c' });
      held.releaseNext();
      await arrivals(server, before + 2);
      held.releaseNext();
      assert.equal((await running).status, 200);
      assert.equal((await next).status, 200);
      assert.deepEqual(
        server.requests.slice(before).map((r) => r.headers[TENANT]),
        ['a', 'c'],
      );
    });
  });

  describe(`flow control's TTL through Envoy, ${name}`, () => {
    let server: ModelServer;
    let gateway: Gateway;
    let held: HeldAnswers;

    before(async () => {
      server = await startModelServer({ id: 'ttl', models: ['m'] });
      held = new HeldAnswers(server);
      gateway = await flowGateway(server, profile, ttl);
    });

    after(async () => {
      await gateway?.stop();
      await server?.close();
    });

    const timer = ttl.messageTimeoutMs === undefined ? '' : `, before Envoy's ${ttl.messageTimeoutMs} ms message timer`;
    it(`a request queued past its ${ttl.expectedTtlMs} ms TTL gets 429 queue_timeout JSON with Retry-After${timer}`, async () => {
      held.hold(1);
      const running = gateway.send(chat('a'));
      await arrivals(server, 1);
      const sent = performance.now();
      const response = await gateway.send(chat('b'));
      const elapsed = performance.now() - sent;
      const { error } = assertCatalogError(response, 'queue_timeout');
      const waited = (error as ErrorBody['error'] & { waited_ms?: number }).waited_ms ?? 0;
      assert.equal(response.status, 429);
      assert.equal(response.headers['retry-after'], '1');
      assert.equal(response.headers[DROPPED_REASON], 'rejected-ttl-expired');
      assert.ok(waited >= ttl.expectedTtlMs, `waited ${waited} ms`);
      if (ttl.messageTimeoutMs !== undefined) assert.ok(elapsed < ttl.messageTimeoutMs, `answered after ${Math.round(elapsed)} ms`);
      assert.equal(server.requests.length, 1, 'the expired request never reached the busy replica');
      assert.equal(metricValue(await gateway.metricsText(), 'llm_extproc_flow_requests_total', { tenant: 'b', event: 'expired' }), 1);
      held.releaseNext();
      assert.equal((await running).status, 200);
    });
  });
}
