// Edge cases found in review, each through a real Envoy: shutdown in the middle of a stream,
// compressed answers, answers larger than we may hold, and a cluster that lacks our picks.

import assert from 'node:assert/strict';
import { gzipSync } from 'node:zlib';
import { describe, it } from 'node:test';
import { startGateway } from '../support/gateway.js';
import { metricValue } from '../support/prometheus.js';
import { startModelServer } from '../support/model-server.js';
import { waitUntil } from '../support/wait-until.js';

const CHAT = '/v1/chat/completions';
const chat = (extra: Record<string, unknown> = {}) => ({
  path: CHAT,
  body: { model: 'm', messages: [{ role: 'user', content: 'a long answer please' }], ...extra },
});

describe('edge cases through a real Envoy', () => {
  it('a stream still running at shutdown is handed back to Envoy and reaches the client complete', async () => {
    const s = await startModelServer({ id: 'slow', models: ['m'], behavior: { kind: 'slow-chunks', delayMs: 40 } });
    const gateway = await startGateway({
      pools: [{ name: 'p', models: ['m'], endpoints: [{ address: s.address }] }],
      configYaml: 'shutdownGraceSeconds: 0.1\n',
    });
    try {
      let stopping: Promise<void> | undefined;
      const response = await gateway.send({
        ...chat({ stream: true }),
        onData: () => {
          stopping ??= gateway.app.stop(); // shut llm-extproc down while the answer is streaming
        },
      });
      await stopping;
      assert.equal(response.error, undefined, 'the client connection was not cut');
      assert.equal(response.status, 200);
      const served = s.requests.at(-1)!;
      await served.response.settled;
      assert.deepEqual(response.body, served.response.body, 'every byte arrived, [DONE] included');
      assert.ok(response.text().endsWith('data: [DONE]\n\n'));
      assert.equal(metricValue(await gateway.metricsText(), 'llm_extproc_requests_total', { result: 'released_at_shutdown' }), 1);
    } finally {
      await gateway.stop();
      await s.close();
    }
  });

  it('a gzip-compressed JSON answer passes through untouched and counts as a success', async () => {
    const body = gzipSync(Buffer.from(JSON.stringify({ id: 'x', object: 'chat.completion', choices: [] })));
    const s = await startModelServer({
      id: 'gz',
      models: ['m'],
      behavior: { kind: 'status', status: 200, body, contentType: 'application/json', headers: { 'content-encoding': 'gzip' } },
    });
    const gateway = await startGateway({ pools: [{ name: 'p', models: ['m'], endpoints: [{ address: s.address }] }] });
    try {
      const response = await gateway.send({ ...chat(), headers: { 'accept-encoding': 'gzip' } });
      assert.equal(response.status, 200);
      assert.equal(response.headers['content-encoding'], 'gzip');
      assert.deepEqual(response.body, body);
      await waitUntil(
        async () =>
          metricValue(await gateway.metricsText(), 'llm_extproc_upstream_attempts_total', { outcome: 'success' }) === 1 ? true : undefined,
        {
          description: 'a recorded success',
        },
      );
    } finally {
      await gateway.stop();
      await s.close();
    }
  });

  it('a JSON answer larger than we may hold passes through and counts as a success', async () => {
    const big = Buffer.from(JSON.stringify({ object: 'list', data: [{ embedding: Array.from({ length: 2000 }, (_, i) => i / 7) }] }));
    const s = await startModelServer({
      id: 'big',
      models: ['m'],
      behavior: { kind: 'status', status: 200, body: big, contentType: 'application/json' },
    });
    const gateway = await startGateway({
      pools: [{ name: 'p', models: ['m'], endpoints: [{ address: s.address }] }],
      configYaml: 'routing:\n  maxInspectedBodyBytes: 4096\n',
    });
    try {
      assert.ok(big.length > 4096);
      const response = await gateway.send({ path: '/v1/embeddings', body: { model: 'm', input: 'x' } });
      assert.equal(response.status, 200);
      assert.deepEqual(response.body, big);
      await waitUntil(
        async () =>
          metricValue(await gateway.metricsText(), 'llm_extproc_requests_total', { model: 'm', result: 'ok' }) === 1 ? true : undefined,
        {
          description: 'the request recorded as ok',
        },
      );
    } finally {
      await gateway.stop();
      await s.close();
    }
  });

  it('when Envoy lacks our picks and its fallback policy answers, nothing is blamed on the replica we picked', async () => {
    const picked = await startModelServer({ id: 'picked', models: ['m'] });
    const stranger = await startModelServer({ id: 'stranger', models: ['m'], behavior: { kind: 'close-before-headers' } });
    const gateway = await startGateway({
      pools: [{ name: 'p', models: ['m'], endpoints: [{ address: picked.address }] }],
      backendAddresses: [stranger.address], // the cluster knows only a host we never pick
      configYaml: 'quarantine:\n  consecutiveFailures: 1\n',
    });
    try {
      for (let i = 0; i < 3; i++) {
        const response = await gateway.send(chat());
        assert.match(response.headers['content-type'] ?? '', /^application\/json/);
        assert.equal((response.json() as { error: { code: string } }).error.code, 'upstream_reset');
      }
      assert.equal(picked.requests.length, 0);
      assert.equal(
        gateway.app.store.endpointsAt(picked.address)[0]?.state,
        'Ready',
        'the replica we picked is not quarantined for another host',
      );
      const metrics = await gateway.metricsText();
      assert.equal(metricValue(metrics, 'llm_extproc_upstream_attempts_total', { endpoint: picked.address }), 0);
      assert.equal(metricValue(metrics, 'llm_extproc_served_outside_pick_total'), 3);
    } finally {
      await gateway.stop();
      await Promise.all([picked.close(), stranger.close()]);
    }
  });
});

describe('draining with Envoy health checks', () => {
  it("a draining llm-extproc fails Envoy's gRPC health check yet keeps answering", async () => {
    const s = await startModelServer({ id: 'hc', models: ['m'] });
    const gateway = await startGateway({
      pools: [{ name: 'p', models: ['m'], endpoints: [{ address: s.address }] }],
      configYaml: 'shutdownDrainSeconds: 3\n',
      envoy: { extProcHealthCheckIntervalMs: 100 },
    });
    const healthy = async (): Promise<number> =>
      (await gateway.envoy.stats('cluster\\.llm_extproc\\.membership_healthy'))['cluster.llm_extproc.membership_healthy'] ?? -1;
    try {
      await waitUntil(async () => ((await healthy()) === 1 ? true : undefined), { description: 'Envoy sees llm-extproc SERVING' });
      const stopping = gateway.app.stop();
      await waitUntil(async () => ((await healthy()) === 0 ? true : undefined), {
        description: 'Envoy sees llm-extproc NOT_SERVING while it drains',
      });
      // One replica: Envoy's panic threshold still sends to it, and it still answers while draining.
      const response = await gateway.send(chat());
      assert.equal(response.status, 200);
      assert.equal(response.headers['x-model-server-id'], 'hc');
      await stopping;
    } finally {
      await gateway.stop();
      await s.close();
    }
  });
});

describe('ORIGINAL_DST variant', () => {
  it('routes on the primary in the destination header, with no host set in Envoy', async () => {
    const a = await startModelServer({ id: 'od-a', models: ['m'] });
    const b = await startModelServer({ id: 'od-b', models: ['other'] });
    const gateway = await startGateway({
      pools: [
        { name: 'p', models: ['m'], endpoints: [{ address: a.address }] },
        { name: 'q', models: ['other'], endpoints: [{ address: b.address }] },
      ],
      backends: { kind: 'original_dst' },
      envoy: { maxRetries: 0 },
    });
    try {
      for (let i = 0; i < 3; i++) {
        const response = await gateway.send(chat());
        assert.equal(response.status, 200, response.text());
        assert.equal(response.headers['x-model-server-id'], 'od-a');
      }
      assert.equal(b.requests.length, 0);
    } finally {
      await gateway.stop();
      await Promise.all([a.close(), b.close()]);
    }
  });
});
