// End to end: latency as a picking signal, through a real Envoy. Three model servers stream
// their answers at the same pace until one is made three times slower (prefill and every token):
// it is demoted as much slower than its pool (shown in /debug/endpoints and the metrics), receives
// markedly fewer new requests, and gets its share back once it speeds up (a probe request sees it).
// Assertions are on shares of request counts and on states, never on timings; metrics scraping is
// off, so no scrape timer decides anything.

import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { startGateway } from '../support/gateway.js';
import { metricValue } from '../support/prometheus.js';
import type { Gateway } from '../support/gateway.js';
import type { ClientRequest } from '../support/http-client.js';
import { startModelServer } from '../support/model-server.js';
import type { Behavior, ModelServer } from '../support/model-server.js';
import { waitUntil } from '../support/wait-until.js';

const FAST: Behavior = { kind: 'ok', firstEventDelayMs: 50, eventDelayMs: 15 };
const SLOW: Behavior = { kind: 'ok', firstEventDelayMs: 150, eventDelayMs: 45 };

/**
 * Scraping off; a two-second half-life so that the test's few requests per second move the
 * estimates within seconds (the default is ten), probes as by default.
 */
const CONFIG = 'picker:\n  metrics:\n    enabled: false\n  latency:\n    halfLifeSeconds: 2\n';

/** Concurrent clients: each sends its next request when its previous answer is complete. */
const CLIENTS = 3;

function chat(i: number): ClientRequest {
  return {
    path: '/v1/chat/completions',
    body: { model: 'm', stream: true, messages: [{ role: 'user', content: `question ${i}` }] },
  };
}

interface LatencyEntry {
  readonly state: string;
  readonly reason?: string;
  readonly detail?: string;
}

async function latencyOf(gateway: Gateway, address: string): Promise<LatencyEntry | undefined> {
  const response = await fetch(`http://127.0.0.1:${gateway.app.httpPort}/debug/endpoints`);
  const body = (await response.json()) as {
    pools: Array<{ endpoints: Array<{ address: string; load: { latency?: LatencyEntry[] } }> }>;
  };
  return body.pools.flatMap((p) => p.endpoints).find((e) => e.address === address)?.load.latency?.[0];
}

let sent = 0;

/** Sends `total` streamed requests over CLIENTS clients; returns how many new requests each server received. */
async function traffic(gateway: Gateway, servers: readonly ModelServer[], total: number): Promise<number[]> {
  const before = servers.map((s) => s.requests.length);
  let left = total;
  await Promise.all(
    Array.from({ length: CLIENTS }, async () => {
      while (left > 0) {
        left--;
        const response = await gateway.send(chat(sent++));
        assert.equal(response.status, 200, response.text());
      }
    }),
  );
  return servers.map((s, i) => s.requests.length - before[i]);
}

describe('latency as a picking signal (real Envoy, paced SSE)', () => {
  it('a server made 3× slower gets markedly fewer new requests within seconds, and its share back when it speeds up', async (t) => {
    const servers = await Promise.all(['a', 'b', 'slow'].map((id) => startModelServer({ id, models: ['m'], behavior: FAST })));
    const [a, , c] = servers;
    let gateway: Gateway | undefined;
    try {
      gateway = await startGateway({
        pools: [{ name: 'p', models: ['m'], endpoints: servers.map((s) => ({ address: s.address })) }],
        configYaml: CONFIG,
        debugEndpoints: true,
      });
      const g = gateway;
      // All alike: each takes a fair share.
      const even = await traffic(g, servers, 45);
      assert.ok(
        even.every((n) => n >= 8),
        `equal servers share traffic: ${even.join(', ')}`,
      );

      c.setBehavior(SLOW);
      const slowedAt = sent;
      const slowedClock = performance.now();
      // Demoted after a few of its slow answers (traffic keeps flowing while we wait).
      await waitUntil(
        async () => {
          await traffic(g, servers, 6);
          return (await latencyOf(g, c.address))?.state === 'demoted' ? true : undefined;
        },
        { description: 'the slow server demoted', timeoutMs: 30_000 },
      );
      const demotedAfter = `${sent - slowedAt} requests, ${((performance.now() - slowedClock) / 1000).toFixed(1)} s`;
      const entry = await latencyOf(g, c.address);
      assert.equal(entry?.reason, 'slow_replica');
      assert.match(entry?.detail ?? '', /× slower than its pool \(demoted at 2×\): time per output token .*, time to first token/);
      const text = await g.metricsText();
      assert.equal(metricValue(text, 'llm_extproc_slow_replica_demotions_total', { pool: 'p', endpoint: c.address }), 1);
      assert.equal(metricValue(text, 'llm_extproc_slow_replicas', { pool: 'p' }), 1);
      assert.equal(metricValue(text, 'llm_extproc_slow_replica_demotions_total', { endpoint: a.address }), 0);

      // Demoted: a fair share would be 20 of 60; it gets probes only.
      const demoted = await traffic(g, servers, 60);
      assert.ok(demoted[2] <= 8, `the slow server received ${demoted[2]} of 60 new requests (fair share 20): ${demoted.join(', ')}`);
      assert.ok(demoted[0] >= 20 && demoted[1] >= 20, `the fast servers took the rest: ${demoted.join(', ')}`);

      // It speeds up: the next probe sees it, and it is reinstated.
      c.setBehavior(FAST);
      await waitUntil(
        async () => {
          await traffic(g, servers, 6);
          return (await latencyOf(g, c.address))?.state === 'normal' ? true : undefined;
        },
        { description: 'the recovered server reinstated', timeoutMs: 30_000 },
      );
      const recovered = await traffic(g, servers, 60);
      assert.ok(recovered[2] >= 12, `the recovered server has its share back: ${recovered.join(', ')}`);
      assert.equal(metricValue(await g.metricsText(), 'llm_extproc_slow_replicas', { pool: 'p' }), 0);
      t.diagnostic(
        `demoted after ${demotedAfter} (not asserted); new requests per server (a, b, slow): even ${even.join('/')}, demoted ${demoted.join('/')}, recovered ${recovered.join('/')}`,
      );
    } finally {
      await gateway?.stop();
      await Promise.all(servers.map((s) => s.close()));
    }
  });
});
