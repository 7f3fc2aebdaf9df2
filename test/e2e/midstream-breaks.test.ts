// A response stream that breaks half-way, through a real Envoy: was it the replica that died, or
// the client that left? The ext_proc stream ends the same way; Envoy's access-log entry tells. A
// break on the model server's side gets its replica checked: a dead one is quarantined and gets
// nothing more. One whose client hung up is a cancellation: no check, the replica stays Ready.
// /metrics says which happened.

import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { startGateway, type Gateway } from '../support/gateway.js';
import { metricValue } from '../support/prometheus.js';
import type { ClientRequest } from '../support/http-client.js';
import { privateLoopbackHost } from '../support/loopback.js';
import { startModelServer } from '../support/model-server.js';
import { waitUntil } from '../support/wait-until.js';

const CHAT = '/v1/chat/completions';

function chat(stream: boolean): ClientRequest {
  return { path: CHAT, body: { model: 'm', stream, messages: [{ role: 'user', content: 'hi' }] } };
}

describe('mid-stream breaks: dead replica or departed client (real Envoy)', () => {
  it('a model server killed mid-stream is quarantined at once and gets no new requests', async (t) => {
    // The victim lives on this process's own loopback address, so its port stays ours while it is down.
    const victim = await startModelServer({
      id: 'victim',
      host: privateLoopbackHost(),
      models: ['m'],
      behavior: { kind: 'hang-after-headers', afterEvents: 2 },
    });
    const survivor = await startModelServer({ id: 'survivor', models: ['m'] });
    let gateway: Gateway | undefined;
    try {
      gateway = await startGateway({
        // Only the victim is Ready at first, so the stream surely goes to it.
        pools: [
          {
            name: 'p',
            models: ['m'],
            endpoints: [{ address: victim.address }, { address: survivor.address, state: 'Starting', reason: 'loading' }],
          },
        ],
        // A single broken stream must be enough: the streak threshold stays out of reach.
        configYaml: 'quarantine:\n  consecutiveFailures: 1000\n  baseSeconds: 600\n  maxSeconds: 600\n',
      });
      const gw = gateway;
      let killedAt = 0;
      const response = await gw.send({
        ...chat(true),
        onData: () => {
          if (killedAt !== 0) return;
          killedAt = Date.now();
          // Bytes reached the client; now the model server process "dies": listener gone, connections dropped.
          void victim.refuse();
        },
      });
      assert.equal(response.status, 200);
      assert.notEqual(response.error, undefined, 'the client sees a broken stream');
      await waitUntil(() => (gw.app.store.endpointsAt(victim.address)[0]?.state === 'Quarantined' ? true : undefined), {
        description: 'the dead replica quarantined',
      });
      t.diagnostic(`quarantined ${Date.now() - killedAt} ms after the kill`);
      assert.match(
        gw.app.store.endpointsAt(victim.address)[0]?.reason ?? '',
        /a broken stream\) and the replica then failed its health check/,
      );
      const metrics = await gw.metricsText();
      assert.equal(metricValue(metrics, 'llm_extproc_midstream_breaks_total', { verdict: 'replica_dead' }), 1);
      assert.equal(metricValue(metrics, 'llm_extproc_midstream_breaks_total', { verdict: 'replica_alive' }), 0);
      assert.equal(metricValue(metrics, 'llm_extproc_endpoint_quarantines_total', { endpoint: victim.address }), 1);
      assert.equal(metricValue(metrics, 'llm_extproc_requests_total', { model: 'm', result: 'stream_broken' }), 1);

      // The model server comes back on the same address, and the survivor finishes loading: new
      // requests go to the survivor only, because the victim stays quarantined for its backoff.
      await victim.resume();
      await gw.writePools([{ name: 'p', models: ['m'], endpoints: [{ address: victim.address }, { address: survivor.address }] }]);
      await waitUntil(() => (gw.app.store.endpointsAt(survivor.address)[0]?.state === 'Ready' ? true : undefined), {
        description: 'survivor Ready',
      });
      const victimRequests = victim.requests.length;
      for (let i = 0; i < 10; i++) {
        const next = await gw.send(chat(i % 2 === 0));
        assert.equal(next.status, 200, next.text());
        assert.equal(next.headers['x-model-server-id'], 'survivor');
      }
      assert.equal(victim.requests.length, victimRequests, 'nothing was sent to the quarantined replica');
    } finally {
      await gateway?.stop();
      await Promise.all([victim.close(), survivor.close()]);
    }
  });

  it('a client hanging up mid-stream leaves its replica Ready (not even checked), and /metrics says the client left', async () => {
    const server = await startModelServer({ id: 'alive', models: ['m'], behavior: { kind: 'hang-after-headers', afterEvents: 2 } });
    let gateway: Gateway | undefined;
    try {
      gateway = await startGateway({
        pools: [{ name: 'p', models: ['m'], endpoints: [{ address: server.address }] }],
        configYaml: 'quarantine:\n  consecutiveFailures: 1\n  baseSeconds: 600\n  maxSeconds: 600\n',
      });
      const gw = gateway;
      const hangUp = new AbortController();
      const response = await gw.send({ ...chat(true), signal: hangUp.signal, onData: () => hangUp.abort() });
      assert.equal(response.status, 200);
      assert.notEqual(response.error, undefined, 'the client hung up before the end');
      assert.equal(await server.requests[0]?.response.settled, 'client-closed', 'the model server saw the client side go away');
      const metrics = await waitUntil(
        async () => {
          const text = await gw.metricsText();
          return metricValue(text, 'llm_extproc_requests_total', { result: 'cancelled_mid_stream' }) === 1 ? text : undefined;
        },
        { description: 'the break attributed to the client' },
      );
      assert.equal(metricValue(metrics, 'llm_extproc_midstream_break_signals_total', { signal: 'access_log_client' }), 1);
      assert.equal(metricValue(metrics, 'llm_extproc_midstream_breaks_total'), 0, 'nothing pointed at the replica: no check');
      assert.equal(metricValue(metrics, 'llm_extproc_endpoint_quarantines_total', { endpoint: server.address }), 0);
      assert.equal(gw.app.store.endpointsAt(server.address)[0]?.state, 'Ready', 'even with a quarantine threshold of 1');
      server.setBehavior({ kind: 'ok' });
      const next = await gw.send(chat(true));
      assert.equal(next.status, 200);
      assert.equal(next.error, undefined);
      assert.match(next.text(), /data: \[DONE\]/);
    } finally {
      await gateway?.stop();
      await server.close();
    }
  });
});
