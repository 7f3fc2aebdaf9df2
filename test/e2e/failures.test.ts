// End to end: every catalog entry reachable through the data path, produced through a real
// Envoy by real (misbehaving) model servers, and the outcome accounting behind them.

import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import { after, before, describe, it } from 'node:test';
import { CATALOG, ERROR_KINDS, type ErrorKind } from '../../src/errors/catalog.js';
import { startGateway, type Gateway } from '../support/gateway.js';
import { metricValue, waitForMetric } from '../support/prometheus.js';
import type { ClientRequest, ClientResponse } from '../support/http-client.js';
import { assertAppendedErrorEvent, assertCatalogError as assertCatalogAnswer } from '../support/catalog-assert.js';
import type { ErrorBody } from '../support/catalog-assert.js';
import { privateLoopbackHost } from '../support/loopback.js';
import { startModelServer, type Behavior, type ModelServer } from '../support/model-server.js';
import { waitUntil } from '../support/wait-until.js';

const CHAT = '/v1/chat/completions';

/** A chat request with its own x-request-id, which every error body must quote back. */
function chat(model: string, extra: Record<string, unknown> = {}): ClientRequest {
  return { path: CHAT, headers: { 'x-request-id': randomUUID() }, body: { model, messages: [{ role: 'user', content: 'hi' }], ...extra } };
}

/**
 * One replica reporting a long queue (10 waiting: past flow control's default queueDepth of 5)
 * behind a gateway with flow control on; returns once its report is scraped.
 */
async function saturatedPool(id: string, flowYaml: string, messageTimeoutMs?: number): Promise<{ s: ModelServer; gateway: Gateway }> {
  const s = await startModelServer({ id, models: ['m'], metrics: { waiting: 10, running: 8 } });
  const gateway = await startGateway({
    pools: [{ name: 'p', models: ['m'], endpoints: [{ address: s.address }] }],
    configYaml: `picker:\n  metrics:\n    intervalSeconds: 0.05\n  flowControl:\n    enabled: true\n${flowYaml}`,
    ...(messageTimeoutMs === undefined ? {} : { envoy: { messageTimeoutMs } }),
  });
  await waitForMetric(() => gateway.metricsText(), 'llm_extproc_endpoint_load_reports', { state: 'fresh' }, 1, 'the load report');
  return { s, gateway };
}

/** The shared checks (catalog-assert.ts: status, JSON, code, type, headers, request_id), and Retry-After where the catalog has one. */
function assertCatalogError(response: ClientResponse, kind: ErrorKind): ErrorBody {
  const body = assertCatalogAnswer(response, kind);
  if (CATALOG[kind].retryAfterSeconds !== undefined || kind === 'no_ready_replica')
    assert.match(response.headers['retry-after'] ?? '', /^\d+$/);
  return body;
}

/** Kinds a client cannot get through our shipped configuration, and why; the rest are tested below. */
const NOT_REACHABLE: Partial<Record<ErrorKind, string>> = {
  route_not_found: 'our route matches every path; only a custom Envoy route table can produce NR',
  gateway_misconfigured: 'needs an Envoy config whose route names a missing cluster',
  internal_error: 'a bug in our processor; Envoy then answers 500, which our mapper renders as gateway_unavailable',
};

/**
 * Kinds some test in this file produces and asserts, declared when the test is defined (not when
 * it runs), so the coverage check does not depend on which tests ran before it.
 */
const covered = new Set<ErrorKind>();
function covers(kind: ErrorKind, title: string): string {
  covered.add(kind);
  return title;
}

describe('every failure is explained (real Envoy, misbehaving model servers)', () => {
  const servers = new Map<string, ModelServer>();
  let gateway: Gateway;

  /** `refuses`: it will stop listening while listed; it lives on our own loopback address (loopback.ts). */
  async function server(id: string, behavior: Behavior, refuses = false): Promise<ModelServer> {
    const s = await startModelServer({ id, models: [id], behavior, ...(refuses ? { host: privateLoopbackHost() } : {}) });
    servers.set(id, s);
    return s;
  }

  before(async () => {
    const good = await server('good', { kind: 'ok' });
    const refuseOne = await server('refuse-one', { kind: 'ok' }, true);
    const refuseA = await server('refuse-a', { kind: 'ok' }, true);
    const refuseB = await server('refuse-b', { kind: 'ok' }, true);
    const hang = await server('hang', { kind: 'hang' });
    const close = await server('close', { kind: 'close-before-headers' });
    const html = await server('html', { kind: 'html-502' });
    const truncated = await server('truncated', { kind: 'truncated-json' });
    const noTerminator = await server('no-terminator', { kind: 'sse-no-terminator' });
    const errorEvent = await server('error-event', { kind: 'sse-error-event' });
    gateway = await startGateway({
      pools: [
        { name: 'good', models: ['good'], endpoints: [{ address: good.address }] },
        { name: 'refuse-one', models: ['refuse-one'], endpoints: [{ address: refuseOne.address }] },
        { name: 'refuse-all', models: ['refuse-all'], endpoints: [{ address: refuseA.address }, { address: refuseB.address }] },
        { name: 'hang', models: ['hang'], endpoints: [{ address: hang.address }] },
        { name: 'close', models: ['close'], endpoints: [{ address: close.address }] },
        { name: 'html', models: ['html'], endpoints: [{ address: html.address }] },
        { name: 'truncated', models: ['truncated'], endpoints: [{ address: truncated.address }] },
        { name: 'no-terminator', models: ['no-terminator'], endpoints: [{ address: noTerminator.address }] },
        { name: 'error-event', models: ['error-event'], endpoints: [{ address: errorEvent.address }] },
        {
          name: 'starting',
          models: ['starting'],
          endpoints: [
            { address: '127.0.0.1:1', state: 'Starting', reason: 'ContainerCreating' },
            { address: '127.0.0.1:2', state: 'Terminating', reason: 'pod is being deleted' },
          ],
        },
      ],
      // High quarantine threshold: this suite is about answers, not passive health.
      configYaml: 'routing:\n  maxRequestBodyBytes: 65536\nquarantine:\n  consecutiveFailures: 1000\n',
      envoy: { routeTimeoutSeconds: 2 },
    });
    // Their ports stay free of other listeners: nobody else binds our private loopback address.
    await Promise.all([refuseOne.refuse(), refuseA.refuse(), refuseB.refuse()]);
  });

  after(async () => {
    await gateway?.stop();
    await Promise.all([...servers.values()].map((s) => s.close()));
  });

  const cases: Array<{ kind: ErrorKind; request: () => ClientRequest; check?: (body: ErrorBody) => void }> = [
    { kind: 'invalid_json', request: () => ({ path: CHAT, body: '{"model": "good", "messages": [' }) },
    { kind: 'missing_body', request: () => ({ method: 'POST', path: CHAT, body: '' }) },
    { kind: 'missing_model', request: () => ({ path: CHAT, body: { messages: [] } }) },
    { kind: 'invalid_model', request: () => ({ path: CHAT, body: { model: ['good'] } }) },
    { kind: 'method_not_allowed', request: () => ({ method: 'GET', path: CHAT }) },
    { kind: 'body_too_large', request: () => ({ path: CHAT, body: { model: 'good', pad: 'x'.repeat(70_000) } }) },
    {
      kind: 'model_not_found',
      request: () => chat('gpt-17'),
      check: (body) => assert.match(body.error.message, /gpt-17/),
    },
    {
      kind: 'no_ready_replica',
      request: () => chat('starting'),
      check: (body) =>
        assert.equal(
          body.error.message,
          'model starting has no ready replica: 2 pods — 1 starting (ContainerCreating), 1 terminating (pod is being deleted). Retry in about 15 s.',
        ),
    },
    { kind: 'upstream_connect_failed', request: () => chat('refuse-one') },
    { kind: 'all_replicas_failed', request: () => chat('refuse-all'), check: (body) => assert.match(body.error.message, /all 2 replicas/) },
    { kind: 'upstream_timeout', request: () => chat('hang') },
    { kind: 'upstream_reset', request: () => chat('close') },
    {
      kind: 'upstream_error',
      request: () => chat('html'),
      check: (body) => assert.equal((body.error as unknown as { upstream_status: number }).upstream_status, 502),
    },
    { kind: 'truncated_response', request: () => chat('truncated') },
  ];

  for (const c of cases) {
    it(covers(c.kind, `${c.kind}: ${CATALOG[c.kind].status} ${CATALOG[c.kind].code}`), async () => {
      const response = await gateway.send(c.request());
      const body = assertCatalogError(response, c.kind);
      c.check?.(body);
    });
  }

  it("body_too_large also for a chunked body beyond Envoy's buffer (Envoy's own 413, explained)", async () => {
    const big = Buffer.from(JSON.stringify({ model: 'good', pad: 'x'.repeat(300_000) }));
    const response = await gateway.send({ path: CHAT, body: big, headers: { 'transfer-encoding': 'chunked' } });
    assertCatalogError(response, 'body_too_large');
  });

  it(covers('stream_incomplete', 'stream_incomplete: an SSE stream that ends without [DONE] gets an appended error event'), async () => {
    const response = await gateway.send(chat('no-terminator', { stream: true }));
    const served = servers.get('no-terminator')!.requests.at(-1)!;
    await served.response.settled;
    assertAppendedErrorEvent(response, served.response.body, 'stream_incomplete');
  });

  it(
    covers(
      'upstream_error_event',
      'upstream_error_event: an error event inside the stream passes through untouched and counts as a failure',
    ),
    async () => {
      const response = await gateway.send(chat('error-event', { stream: true }));
      assert.equal(response.status, 200);
      const served = servers.get('error-event')!.requests.at(-1)!;
      await served.response.settled;
      assert.deepEqual(response.body, served.response.body, 'the upstream error event reaches the client as sent');
      assert.match(response.text(), /"error"/);
      await waitUntil(
        async () =>
          metricValue(await gateway.metricsText(), 'llm_extproc_upstream_attempts_total', {
            endpoint: servers.get('error-event')!.address,
            outcome: 'failure',
            reason: 'upstream_error_event',
          }) === 1
            ? true
            : undefined,
        { description: 'the error event counted as a failed attempt' },
      );
    },
  );
});

describe('failures that need a gateway of their own', () => {
  it(covers('no_healthy_upstream', 'no_healthy_upstream: Envoy has no host for the backends cluster'), async () => {
    const s = await startModelServer({ id: 'lonely', models: ['m'] });
    const gateway = await startGateway({
      pools: [{ name: 'p', models: ['m'], endpoints: [{ address: s.address }] }],
      backendAddresses: [],
    });
    try {
      assertCatalogError(await gateway.send(chat('m')), 'no_healthy_upstream');
      assert.equal(s.requests.length, 0);
    } finally {
      await gateway.stop();
      await s.close();
    }
  });

  it(covers('overloaded', 'overloaded: the circuit breaker is full'), async () => {
    const s = await startModelServer({ id: 'busy', models: ['m'], behavior: { kind: 'hang' } });
    const gateway = await startGateway({
      pools: [{ name: 'p', models: ['m'], endpoints: [{ address: s.address }] }],
      envoy: { maxConcurrentRequests: 1 },
    });
    try {
      // One request in flight fills the breaker (max requests = 1).
      const inFlight = [gateway.send({ ...chat('m'), timeoutMs: 60_000 })];
      await s.onRequest();
      assertCatalogError(await gateway.send(chat('m')), 'overloaded');
      await s.close();
      await Promise.allSettled(inFlight);
    } finally {
      await gateway.stop();
      await s.close();
    }
  });

  it(covers('pool_overloaded', 'pool_overloaded: every replica reports a queue at the pool limit (load shedding)'), async () => {
    const a = await startModelServer({ id: 'full-a', models: ['m'], metrics: { waiting: 12, running: 8 } });
    const b = await startModelServer({ id: 'full-b', models: ['m'], metrics: { waiting: 10, running: 8 } });
    const gateway = await startGateway({
      pools: [{ name: 'p', models: ['m'], endpoints: [{ address: a.address }, { address: b.address }] }],
      configYaml: 'picker:\n  metrics:\n    intervalSeconds: 0.05\n  pools:\n    p:\n      maxQueueDepth: 10\n',
    });
    const fresh = async (): Promise<true | undefined> =>
      metricValue(await gateway.metricsText(), 'llm_extproc_endpoint_load_reports', { state: 'fresh' }) === 2 ? true : undefined;
    try {
      await waitUntil(fresh, { description: 'both load reports scraped' });
      const body = assertCatalogError(await gateway.send(chat('m')), 'pool_overloaded') as ErrorBody & {
        error: { pools: string[]; shortest_queue: number };
      };
      assert.deepEqual(body.error.pools, ['p']);
      assert.equal(body.error.shortest_queue, 10);
      assert.equal(a.requests.length + b.requests.length, 0, 'shed before reaching any model server');
      // One replica drains its queue: requests flow again, to it.
      b.setMetrics({ waiting: 2, running: 8 });
      const scrapes = b.metricsScrapes;
      await waitUntil(() => (b.metricsScrapes > scrapes + 1 ? true : undefined), { description: 'a new scrape of b' });
      const response = await gateway.send(chat('m'));
      assert.equal(response.status, 200, response.text());
      assert.equal(response.headers['x-model-server-id'], 'full-b');
    } finally {
      await gateway.stop();
      await Promise.all([a.close(), b.close()]);
    }
  });

  it(
    covers('shed', 'shed: a sheddable request gets 429 with Retry-After while the pool is saturated, and passes when it is not'),
    async () => {
      const { s, gateway } = await saturatedPool('busy', '    priorityByHeaderValue: { sheddable: -1 }\n');
      const sheddable = (): ClientRequest => ({ ...chat('m'), headers: { 'x-llm-extproc-priority': 'sheddable' } });
      try {
        const response = await gateway.send(sheddable());
        assertCatalogError(response, 'shed');
        assert.equal(response.status, 429);
        assert.equal(response.headers['retry-after'], '1');
        assert.equal(s.requests.length, 0, 'refused before reaching the model server');
        // The replica's queue drains (below picker.flowControl.saturation.queueDepth): sheddable traffic passes.
        s.setMetrics({ waiting: 0, running: 2 });
        const scrapes = s.metricsScrapes;
        await waitUntil(() => (s.metricsScrapes > scrapes + 1 ? true : undefined), { description: 'a new scrape' });
        const passed = await gateway.send(sheddable());
        assert.equal(passed.status, 200, passed.text());
      } finally {
        await gateway.stop();
        await s.close();
      }
    },
  );

  it(
    covers(
      'queue_timeout',
      covers(
        'pool_saturated',
        "pool_saturated and queue_timeout: a full wait queue refuses at once; a queued request gets 429 after its TTL, before Envoy's message timer",
      ),
    ),
    async () => {
      // Buffered bodies: Envoy's ext_proc message timer (3 s) runs while the request waits; the TTL stays below it.
      const { s, gateway } = await saturatedPool('busy-2', '    maxQueued: 1\n    timedTtlSeconds: 1.5\n', 3000);
      try {
        const waiting = gateway.send(chat('m'));
        await waitForMetric(() => gateway.metricsText(), 'llm_extproc_flow_queue_length', { pool: 'p' }, 1, 'one request queued');
        const refused = await gateway.send(chat('m'));
        const full = assertCatalogError(refused, 'pool_saturated') as ErrorBody & { error: { pool: string; queued: number } };
        assert.equal(refused.status, 429);
        assert.equal(refused.headers['retry-after'], '2');
        assert.deepEqual([full.error.pool, full.error.queued], ['p', 1]);
        const timedOut = await waiting;
        const body = assertCatalogError(timedOut, 'queue_timeout') as ErrorBody & { error: { waited_ms: number } };
        assert.equal(timedOut.status, 429);
        assert.equal(timedOut.headers['retry-after'], '1');
        assert.ok(body.error.waited_ms >= 1500, `waited ${body.error.waited_ms} ms`);
        assert.equal(s.requests.length, 0, 'nothing reached the saturated replica');
        assert.equal(metricValue(await gateway.metricsText(), 'llm_extproc_flow_requests_total', { event: 'expired' }), 1);
      } finally {
        await gateway.stop();
        await s.close();
      }
    },
  );

  it(covers('gateway_unavailable', 'gateway_unavailable: llm-extproc itself is down, and Envoy still answers in JSON'), async () => {
    const s = await startModelServer({ id: 'orphan', models: ['m'] });
    const gateway = await startGateway({ pools: [{ name: 'p', models: ['m'], endpoints: [{ address: s.address }] }] });
    try {
      await gateway.app.stop();
      assertCatalogError(await gateway.send(chat('m')), 'gateway_unavailable');
      assert.equal(s.requests.length, 0, 'fail closed: nothing is routed without us');
    } finally {
      await gateway.stop();
      await s.close();
    }
  });
});

describe('safe retries and outcome accounting', () => {
  it('a refusing primary falls back to a healthy replica, is counted as failed, fails its check and is quarantined at once', async () => {
    const healthy = await startModelServer({ id: 'healthy', models: ['m'] });
    const refusing = await startModelServer({ id: 'refusing', host: privateLoopbackHost(), models: ['m'] });
    const gateway = await startGateway({
      pools: [{ name: 'p', models: ['m'], endpoints: [{ address: healthy.address }, { address: refusing.address }] }],
      // Quarantine is under test (the streak of 2 is not what triggers it: the check after the first
      // refusal is): no metrics scraping (a refused scrape would already keep the
      // refusing replica from being primary) and no prefix affinity (every request has one prompt).
      configYaml:
        'quarantine:\n  consecutiveFailures: 2\n  baseSeconds: 600\n  maxSeconds: 600\npicker:\n  metrics:\n    enabled: false\n  weights:\n    prefix: 0\n',
    }).catch(async (err: unknown) => {
      await Promise.all([healthy.close(), refusing.close()]);
      throw err;
    });
    await refusing.refuse();
    try {
      // The picker breaks ties at random, so the refusing replica is primary about half the time;
      // keep going until it was (200 requests make a miss impossible in practice).
      for (let i = 0; i < 200; i++) {
        const response = await gateway.send(chat('m'));
        assert.equal(response.status, 200, response.text());
        assert.equal(response.headers['x-model-server-id'], 'healthy');
        if (gateway.app.store.endpointsAt(refusing.address)[0]?.state === 'Quarantined') break;
      }
      const endpoint = gateway.app.store.endpointsAt(refusing.address)[0];
      assert.equal(endpoint?.state, 'Quarantined');
      assert.match(endpoint?.reason ?? '', /the replica then failed its health check/);
      const metrics = await gateway.metricsText();
      assert.equal(
        metricValue(metrics, 'llm_extproc_upstream_attempts_total', {
          endpoint: refusing.address,
          outcome: 'failure',
          reason: 'upstream_connect_failed',
        }),
        1,
      );
      assert.equal(metricValue(metrics, 'llm_extproc_upstream_attempts_total', { endpoint: refusing.address, outcome: 'success' }), 0);
      assert.equal(metricValue(metrics, 'llm_extproc_endpoint_quarantines_total', { endpoint: refusing.address }), 1);
      assert.equal(metricValue(metrics, 'llm_extproc_endpoints', { pool: 'p', state: 'Quarantined' }), 1);
      // Quarantined: no longer handed to Envoy at all, so no more failed attempts pile up.
      for (let i = 0; i < 10; i++) assert.equal((await gateway.send(chat('m'))).status, 200);
      const after = await gateway.metricsText();
      assert.equal(metricValue(after, 'llm_extproc_upstream_attempts_total', { endpoint: refusing.address, outcome: 'failure' }), 1);
      assert.equal(metricValue(after, 'llm_extproc_failed_connect_checks_total', { verdict: 'replica_dead' }), 1);
    } finally {
      await gateway.stop();
      await Promise.all([healthy.close(), refusing.close()]);
    }
  });

  it(
    covers('stream_broken', 'a stream reset half-way is a failure of the endpoint that served it, and is never retried elsewhere'),
    async () => {
      const a = await startModelServer({ id: 'a', models: ['m'], behavior: { kind: 'hang-after-headers', afterEvents: 2 } });
      const b = await startModelServer({ id: 'b', models: ['m'], behavior: { kind: 'hang-after-headers', afterEvents: 2 } });
      const gateway = await startGateway({
        pools: [{ name: 'p', models: ['m'], endpoints: [{ address: a.address }, { address: b.address }] }],
      });
      try {
        let resetDone = false;
        const response = await gateway.send({
          ...chat('m', { stream: true }),
          onData: () => {
            if (resetDone) return;
            resetDone = true;
            // Bytes reached the client: now the serving replica dies.
            for (const s of [a, b]) if (s.requests.length > 0) s.resetConnections();
          },
        });
        const served = a.requests.length > 0 ? a : b;
        const other = served === a ? b : a;
        assert.equal(response.status, 200);
        assert.ok(response.body.length > 0, 'the client had received part of the stream');
        assert.notEqual(response.error, undefined, 'the client sees a broken stream, not a complete one');
        assert.equal(other.requests.length, 0, 'never retried onto another replica after bytes reached the client');
        assert.equal(served.requests.length, 1, 'not retried on the same replica either');
        await waitForMetric(
          () => gateway.metricsText(),
          'llm_extproc_upstream_attempts_total',
          { endpoint: served.address, outcome: 'failure', reason: 'stream_broken' },
          1,
          'the broken stream counted as a failure',
        );
        const metrics = await gateway.metricsText();
        assert.equal(metricValue(metrics, 'llm_extproc_upstream_attempts_total', { outcome: 'success' }), 0, 'never recorded as a success');
        assert.equal(metricValue(metrics, 'llm_extproc_requests_total', { model: 'm', result: 'stream_broken' }), 1);
      } finally {
        await gateway.stop();
        await Promise.all([a.close(), b.close()]);
      }
    },
  );
});

describe('faults after the model server started answering (real Envoy)', () => {
  const behaviors: Record<string, Behavior> = {
    'idle-sse': { kind: 'hang-after-headers', afterEvents: 2 },
    'idle-json': { kind: 'hang-after-headers' },
    'reset-json': { kind: 'reset-mid-stream' },
    'json-500': { kind: 'json-error', status: 500, code: 'out_of_memory', message: 'CUDA out of memory' },
  };
  const servers = new Map<string, ModelServer>();
  let gateway: Gateway;

  function named(id: string): ModelServer {
    const found = servers.get(id);
    assert.ok(found, `model server ${id} started`);
    return found;
  }

  before(async () => {
    for (const [id, behavior] of Object.entries(behaviors)) servers.set(id, await startModelServer({ id, models: [id], behavior }));
    gateway = await startGateway({
      pools: [...servers.values()].map((s) => ({ name: s.id, models: [s.id], endpoints: [{ address: s.address }] })),
      // The route timeout stays out of the way: the stream idle timeout is what ends a hung answer.
      envoy: { routeTimeoutSeconds: 60, streamIdleTimeoutSeconds: 1 },
    });
  });

  after(async () => {
    await gateway?.stop();
    await Promise.all([...servers.values()].map((s) => s.close()));
  });

  async function attempts(endpoint: ModelServer, reason: string): Promise<number> {
    return metricValue(await gateway.metricsText(), 'llm_extproc_upstream_attempts_total', {
      endpoint: endpoint.address,
      outcome: 'failure',
      reason,
    });
  }

  it('headers, two events, then silence: the stream idle timeout ends it; the client sees a broken stream, counted as stream_broken', async () => {
    const server = named('idle-sse');
    const response = await gateway.send(chat('idle-sse', { stream: true }));
    assert.equal(response.status, 200);
    assert.notEqual(response.error, undefined, 'the client sees the stream break, not a clean end');
    const sent = server.requests[0].response;
    assert.ok(sent.body.length > 0);
    assert.deepEqual(response.body, sent.body, 'what was sent arrived unchanged, and nothing else');
    assert.equal(server.requests.length, 1, 'never retried');
    await waitUntil(async () => ((await attempts(server, 'stream_broken')) === 1 ? true : undefined), {
      description: 'the broken stream counted against the replica',
    });
    assert.equal(metricValue(await gateway.metricsText(), 'llm_extproc_requests_total', { model: 'idle-sse', result: 'stream_broken' }), 1);
  });

  it('a JSON answer that stops half-way: the stream idle timeout becomes a 504 upstream_timeout JSON, without the partial body', async () => {
    const server = named('idle-json');
    const response = await gateway.send(chat('idle-json'));
    assertCatalogError(response, 'upstream_timeout');
    assert.ok(server.requests[0].response.body.length > 0, 'the model server had sent part of its JSON');
    assert.doesNotMatch(response.text(), /chatcmpl/, 'no byte of the partial answer reached the client');
    await waitUntil(async () => ((await attempts(server, 'stream_broken')) === 1 ? true : undefined), {
      description: 'the failed answer counted against the replica',
    });
    assert.equal(
      metricValue(await gateway.metricsText(), 'llm_extproc_upstream_attempts_total', { endpoint: server.address, outcome: 'success' }),
      0,
    );
  });

  it('a reset in the middle of a JSON body becomes a 502 upstream_reset JSON, without the partial body', async () => {
    const server = named('reset-json');
    const response = await gateway.send(chat('reset-json'));
    assertCatalogError(response, 'upstream_reset');
    assert.equal(await server.requests[0].response.settled, 'reset');
    assert.doesNotMatch(response.text(), /chatcmpl/, 'no byte of the partial answer reached the client');
    await waitUntil(async () => ((await attempts(server, 'stream_broken')) === 1 ? true : undefined), {
      description: 'the reset counted against the replica',
    });
    // llm-extproc had seen the response headers (Envoy holds them while it buffers the body), so
    // this 502 is Envoy's own local reply (UR, our mapper): the result is still the client's code.
    await waitForMetric(() => gateway.metricsText(), 'llm_extproc_requests_total', { model: 'reset-json', result: 'upstream_reset' }, 1);
    assert.equal(
      metricValue(await gateway.metricsText(), 'llm_extproc_requests_total', { model: 'reset-json', result: 'stream_broken' }),
      0,
    );
  });

  it("an upstream 500 with its own JSON error reaches the client byte for byte and counts as the replica's failure", async () => {
    const server = named('json-500');
    const response = await gateway.send(chat('json-500'));
    assert.equal(response.status, 500);
    assert.equal(response.error, undefined);
    assert.equal(await server.requests[0].response.settled, 'ended');
    assert.deepEqual(response.body, server.requests[0].response.body, "the model server's own error, unchanged");
    assert.equal((response.json() as ErrorBody).error.code, 'out_of_memory');
    assert.equal(response.headers['x-llm-extproc-error'], undefined, 'not replaced by one of ours');
    await waitUntil(async () => ((await attempts(server, 'upstream_500')) === 1 ? true : undefined), {
      description: 'the 500 counted against the replica',
    });
    assert.equal(metricValue(await gateway.metricsText(), 'llm_extproc_requests_total', { model: 'json-500', result: 'upstream_500' }), 1);
  });
});

describe('catalog coverage', () => {
  it('every catalog kind reachable through the data path was produced above', () => {
    const expected = ERROR_KINDS.filter((k) => NOT_REACHABLE[k] === undefined);
    assert.deepEqual([...covered].sort(), [...expected].sort());
  });
});
