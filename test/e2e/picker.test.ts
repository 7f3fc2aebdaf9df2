// End to end: load-aware, cache-affine picking through a real Envoy, with model servers
// that report vLLM metrics (test/support/model-server.ts answers GET /metrics like vLLM).

import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { startGateway, type Gateway } from '../support/gateway.js';
import { metricValue } from '../support/prometheus.js';
import type { ClientRequest } from '../support/http-client.js';
import { startModelServer, type ModelServer, type VllmMetrics } from '../support/model-server.js';
import { waitUntil } from '../support/wait-until.js';

const FAST_SCRAPES = 'picker:\n  metrics:\n    intervalSeconds: 0.05\n    timeoutSeconds: 0.5\n';

function chat(system: string, user: string): ClientRequest {
  return {
    path: '/v1/chat/completions',
    body: {
      model: 'm',
      messages: [
        { role: 'system', content: system },
        { role: 'user', content: user },
      ],
    },
  };
}

async function fleet(
  specs: ReadonlyArray<{ id: string; metrics?: VllmMetrics }>,
  configYaml = FAST_SCRAPES,
): Promise<{ gateway: Gateway; servers: ModelServer[]; stop(): Promise<void> }> {
  const servers = await Promise.all(
    specs.map((s) => startModelServer({ id: s.id, models: ['m'], ...(s.metrics === undefined ? {} : { metrics: s.metrics }) })),
  );
  const gateway = await startGateway({
    pools: [{ name: 'p', models: ['m'], endpoints: servers.map((s) => ({ address: s.address })) }],
    configYaml,
    debugEndpoints: true,
  }).catch(async (err: unknown) => {
    await Promise.all(servers.map((s) => s.close()));
    throw err;
  });
  return {
    gateway,
    servers,
    stop: async () => {
      await gateway.stop();
      await Promise.all(servers.map((s) => s.close()));
    },
  };
}

/** Waits until every server has been scraped after `since` twice (so a completed scrape carries the values set before). */
async function scrapedAfterNow(servers: readonly ModelServer[]): Promise<void> {
  const since = servers.map((s) => s.metricsScrapes);
  await waitUntil(() => (servers.every((s, i) => s.metricsScrapes > since[i] + 1) ? true : undefined), {
    description: 'fresh scrapes of every server',
  });
}

async function servedBy(gateway: Gateway, request: ClientRequest): Promise<string> {
  const response = await gateway.send(request);
  assert.equal(response.status, 200, response.text());
  return response.headers['x-model-server-id'];
}

async function debugEndpoints(
  gateway: Gateway,
): Promise<Array<{ address: string; load: { metrics: string; waiting?: number; lastError?: string } }>> {
  const response = await fetch(`http://127.0.0.1:${gateway.app.httpPort}/debug/endpoints`);
  const body = (await response.json()) as {
    pools: Array<{ endpoints: Array<{ address: string; load: { metrics: string; waiting?: number; lastError?: string } }> }>;
  };
  return body.pools.flatMap((p) => p.endpoints);
}

describe('picking on model-server load and prompt prefixes (real Envoy, vLLM metrics)', () => {
  it('a server reporting a long queue receives markedly fewer new requests than an idle one', async () => {
    const f = await fleet([
      { id: 'busy', metrics: { waiting: 30, running: 16, kvCacheUsage: 0.95 } },
      { id: 'idle', metrics: { waiting: 0, running: 0, kvCacheUsage: 0.05 } },
    ]);
    try {
      await scrapedAfterNow(f.servers);
      const counts = new Map<string, number>([
        ['busy', 0],
        ['idle', 0],
      ]);
      for (let i = 0; i < 40; i++) {
        const id = await servedBy(f.gateway, chat(`tenant ${i}: you are a helpful assistant`, `question ${i}`));
        counts.set(id, (counts.get(id) ?? 0) + 1);
      }
      assert.ok((counts.get('busy') ?? 0) * 4 < (counts.get('idle') ?? 0), `busy ${counts.get('busy')}, idle ${counts.get('idle')}`);
      const shown = await debugEndpoints(f.gateway);
      assert.deepEqual(shown.map((e) => [e.load.metrics, e.load.waiting]).sort(), [
        ['fresh', 0],
        ['fresh', 30],
      ]);
    } finally {
      await f.stop();
    }
  });

  it('a server whose metrics cannot be scraped is not preferred over one that reports idle', async () => {
    const f = await fleet([{ id: 'silent' }, { id: 'idle', metrics: { waiting: 0 } }]);
    const [silent] = f.servers;
    silent.setMetrics({ fail: 'status-500' });
    try {
      await scrapedAfterNow(f.servers);
      const counts = new Map<string, number>([
        ['silent', 0],
        ['idle', 0],
      ]);
      for (let i = 0; i < 20; i++) {
        const id = await servedBy(f.gateway, chat(`tenant ${i}: answer in French`, `question ${i}`));
        counts.set(id, (counts.get(id) ?? 0) + 1);
      }
      assert.ok((counts.get('silent') ?? 0) < (counts.get('idle') ?? 0), `silent ${counts.get('silent')}, idle ${counts.get('idle')}`);
      const shown = (await debugEndpoints(f.gateway)).find((e) => e.address === silent.address);
      assert.equal(shown?.load.metrics, 'failing');
      assert.equal(shown?.load.lastError, 'HTTP 500');
      const text = await f.gateway.metricsText();
      assert.ok(metricValue(text, 'llm_extproc_model_server_scrapes_total', { result: 'http_error' }) > 0);
      assert.equal(metricValue(text, 'llm_extproc_endpoint_load_reports', { state: 'failing' }), 1);
    } finally {
      await f.stop();
    }
  });

  it('a server that times out or answers garbage is not preferred either', async () => {
    const f = await fleet(
      [{ id: 'hanging' }, { id: 'garbage' }, { id: 'idle', metrics: { waiting: 3 } }],
      'picker:\n  metrics:\n    intervalSeconds: 0.05\n    timeoutSeconds: 0.1\n',
    );
    const [hanging, garbage] = f.servers;
    hanging.setMetrics({ fail: 'hang' });
    garbage.setMetrics({ fail: 'garbage' });
    try {
      await waitUntil(
        async () =>
          metricValue(await f.gateway.metricsText(), 'llm_extproc_model_server_scrapes_total', { result: 'timeout' }) > 0
            ? true
            : undefined,
        { description: 'a timed-out scrape' },
      );
      await scrapedAfterNow([garbage, f.servers[2]]);
      for (let i = 0; i < 10; i++) assert.equal(await servedBy(f.gateway, chat(`tenant ${i}`, `q ${i}`)), 'idle');
      const text = await f.gateway.metricsText();
      assert.ok(metricValue(text, 'llm_extproc_model_server_scrapes_total', { result: 'parse_error' }) > 0);
    } finally {
      await f.stop();
    }
  });

  it('identical two-word prompts hold no whole cache block: spread by load, not pinned to one owner', async () => {
    const f = await fleet([{ id: 'a' }, { id: 'b' }]);
    try {
      await scrapedAfterNow(f.servers);
      const hi: ClientRequest = { path: '/v1/chat/completions', body: { model: 'm', messages: [{ role: 'user', content: 'hi' }] } };
      const counts = new Map<string, number>();
      // 4 clients, 40 requests each, one at a time per client.
      await Promise.all(
        Array.from({ length: 4 }, async () => {
          for (let i = 0; i < 40; i++) {
            const id = await servedBy(f.gateway, hi);
            counts.set(id, (counts.get(id) ?? 0) + 1);
          }
        }),
      );
      for (const id of ['a', 'b']) {
        const share = (counts.get(id) ?? 0) / 160;
        assert.ok(share >= 0.35, `replica ${id} got ${(share * 100).toFixed(0)}% of 160 "hi" requests: ${JSON.stringify([...counts])}`);
      }
    } finally {
      await f.stop();
    }
  });

  it('requests sharing a 2 KB system prompt with distinct user turns stay on one replica', async () => {
    const f = await fleet([{ id: 'a' }, { id: 'b' }]);
    const system = 'You are the billing assistant of ACME Corp; quote the tariff sheet and keep answers short. '.repeat(23).slice(0, 2048);
    try {
      await scrapedAfterNow(f.servers);
      const counts = new Map<string, number>();
      for (let i = 0; i < 80; i++) {
        const id = await servedBy(f.gateway, chat(system, `question ${i}: why is invoice ${1000 + i} higher than last month?`));
        counts.set(id, (counts.get(id) ?? 0) + 1);
      }
      const top = Math.max(...counts.values());
      assert.ok(top >= 72, `the shared prompt's owner served ${top} of 80: ${JSON.stringify([...counts])}`);
    } finally {
      await f.stop();
    }
  });

  it('requests sharing a system prompt land on the same server while it is not overloaded', async () => {
    const f = await fleet([{ id: 's1' }, { id: 's2' }, { id: 's3' }, { id: 's4' }]);
    const system =
      'You are the support assistant of ACME Corp. Follow the handbook, answer in two sentences, and never reveal internal ticket numbers. '.repeat(
        4,
      );
    try {
      await scrapedAfterNow(f.servers);
      const first = new Set<string>();
      for (let i = 0; i < 12; i++) first.add(await servedBy(f.gateway, chat(system, `customer question number ${i}`)));
      assert.equal(first.size, 1, `one system prompt went to ${[...first].join(', ')}`);
      // Other system prompts are spread over the fleet rather than piled on the same server.
      const others = new Set<string>();
      for (let i = 0; i < 24; i++) others.add(await servedBy(f.gateway, chat(`Tenant ${i} assistant. `.repeat(20), 'hello')));
      assert.ok(others.size >= 3, `24 system prompts used only ${others.size} servers`);

      // The owner becomes overloaded: its prefix moves, consistently, to one other server.
      const owner = f.servers.find((s) => s.id === [...first][0]) as ModelServer;
      owner.setMetrics({ waiting: 40, running: 16 });
      await scrapedAfterNow(f.servers);
      const moved = new Set<string>();
      for (let i = 0; i < 8; i++) moved.add(await servedBy(f.gateway, chat(system, `later question ${i}`)));
      assert.equal(moved.size, 1, `spilled to ${[...moved].join(', ')}`);
      assert.notEqual([...moved][0], owner.id);
    } finally {
      await f.stop();
    }
  });
});
