// The operations HTTP server: readiness follows the cache, metrics are Prometheus text, the
// debug view shows every endpoint with its state and reason.

import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { EndpointStore } from '../../../src/endpoints/store.js';
import { startOpsServer, type RunningOpsServer } from '../../../src/ops/ops-server.js';
import { Metrics } from '../../../src/metrics/metrics.js';

describe('ops server', () => {
  const store = new EndpointStore(['static'], { threshold: 3, baseMs: 1000, maxMs: 10_000 });
  const metrics = new Metrics({ processMetrics: false });
  store.subscribe({ viewChanged: (view) => metrics.endpointView(view) });
  let server: RunningOpsServer;
  const url = (path: string): string => `http://127.0.0.1:${server.port}${path}`;

  before(async () => {
    server = await startOpsServer('127.0.0.1:0', { registry: metrics.registry, isReady: () => store.isSynced(), view: () => store.view() });
  });
  after(() => server.close());

  it('is live at once, and ready only after the first complete endpoint view', async () => {
    assert.equal((await fetch(url('/healthz'))).status, 200);
    const notReady = await fetch(url('/readyz'));
    assert.equal(notReady.status, 503);
    assert.match(await notReady.text(), /first sync/);
    store.replaceAll('static', [
      {
        name: 'p',
        models: ['m'],
        endpoints: [
          { id: 'a', address: '10.0.0.1:8000', state: 'Ready', reason: '' },
          { id: 'b', address: '', state: 'Starting', reason: 'ContainerCreating' },
        ],
      },
    ]);
    store.markSynced('static');
    assert.equal((await fetch(url('/readyz'))).status, 200);
  });

  it('serves Prometheus metrics with the endpoint gauge', async () => {
    const response = await fetch(url('/metrics'));
    assert.match(response.headers.get('content-type') ?? '', /text\/plain/);
    const text = await response.text();
    assert.match(text, /llm_extproc_endpoints\{pool="p",state="Ready"\} 1/);
    assert.match(text, /llm_extproc_endpoints\{pool="p",state="Starting"\} 1/);
  });

  it('shows the cache on /debug/endpoints', async () => {
    const body = (await (await fetch(url('/debug/endpoints'))).json()) as {
      pools: Array<{ name: string; endpoints: Array<{ id: string; state: string; reason: string }> }>;
    };
    assert.deepEqual(
      body.pools[0].endpoints.map((e) => [e.id, e.state, e.reason]),
      [
        ['a', 'Ready', ''],
        ['b', 'Starting', 'ContainerCreating'],
      ],
    );
  });

  it('without a view (listen.debugEndpoints off) /debug/endpoints is 404 and shows nothing', async () => {
    const bare = await startOpsServer('127.0.0.1:0', { registry: metrics.registry, isReady: () => true });
    try {
      const response = await fetch(`http://127.0.0.1:${bare.port}/debug/endpoints`);
      assert.equal(response.status, 404);
      assert.doesNotMatch(await response.text(), /10\.0\.0\.1/);
    } finally {
      await bare.close();
    }
  });

  it('answers unknown paths and methods with JSON errors', async () => {
    assert.equal((await fetch(url('/nope'))).status, 404);
    assert.equal((await fetch(url('/metrics'), { method: 'POST' })).status, 405);
  });
});
