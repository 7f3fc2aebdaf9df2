// Flow control end to end, through real Envoy: under our profile (buffered bodies, ext_proc message
// timer) and the istio profile (full duplex, no message timer). A pool whose one replica takes one
// request at a time (picker.flowControl.saturation.maxInFlight: 1) is saturated while a request
// runs; the test decides when each answer finishes (paused streams), so the order in which queued
// requests reach the model server is what the queue decided, not timing.
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { arrivals, HeldAnswers, queueLength, waitForQueue } from '../support/flow-helpers.js';
import { metricValue, startGateway, type Gateway } from '../support/gateway.js';
import type { ClientRequest, ClientResponse } from '../support/http-client.js';
import { startModelServer, type ModelServer } from '../support/model-server.js';
import { waitUntil } from '../support/wait-until.js';
import type { GatewayProfileName } from '../../tools/envoy-config/gateway-profiles.js';

const TENANT = 'x-llm-d-inference-fairness-id';

function chat(tenant: string, extra: Partial<ClientRequest> = {}): ClientRequest {
  return {
    path: '/v1/chat/completions',
    headers: { [TENANT]: tenant },
    body: { model: 'm', stream: true, messages: [{ role: 'user', content: 'hi' }] },
    ...extra,
  };
}

const PROFILES: ReadonlyArray<{ name: string; profile: GatewayProfileName | undefined }> = [
  { name: 'our profile (buffered, message timer)', profile: undefined },
  { name: 'istio profile (full duplex, no message timer)', profile: 'istio' },
];

for (const { name, profile } of PROFILES) {
  describe(`flow control through Envoy, ${name}`, () => {
    let server: ModelServer;
    let gateway: Gateway;
    let held: HeldAnswers;

    before(async () => {
      server = await startModelServer({ id: 'only', models: ['m'] });
      held = new HeldAnswers(server);
      gateway = await startGateway({
        pools: [{ name: 'p', models: ['m'], endpoints: [{ address: server.address }] }],
        configYaml: [
          'picker:',
          '  pools:',
          '    p: { metricsFormat: none }',
          '  flowControl:',
          '    enabled: true',
          '    ttlSeconds: 60',
          // Below the message timer we give our profile's Envoy (10 s), far above this test's waits.
          '    timedTtlSeconds: 8',
          '    saturation: { maxInFlight: 1 }',
          '',
        ].join('\n'),
        ...(profile === undefined ? { envoy: { messageTimeoutMs: 10_000 } } : { profile }),
      });
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
      for (let i = 0; i < INTERACTIVE; i++) responses.push(gateway.send(chat('interactive')));
      await waitForQueue(gateway, INTERACTIVE, { tenant: 'interactive' });
      assert.equal(server.requests.length, 1, 'nothing reached the busy replica while it was saturated');

      // Each finished answer lets exactly the next request through.
      for (let k = 1; k <= FLOOD + INTERACTIVE; k++) {
        held.releaseNext();
        await arrivals(server, k + 1);
      }
      held.releaseNext();
      const order = server.requests.slice(1).map((r) => r.headers[TENANT]);
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
}
