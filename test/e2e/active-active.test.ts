// End to end: three llm-extproc processes behind one real Envoy whose ext_proc cluster lists all
// three, as a gateway spreads ext_proc streams over the chart's replicas. Each process has its own
// in-flight view and its own copy of the endpoint cache (one static endpoints file); nothing is
// shared between them. What must hold anyway: a shared prompt lands on one model server whichever
// process picked, removing a model server moves only the prefixes it owned, a killed process costs
// only the requests the fail mode gives up, and the three report the same pool.
//
// Model-server metric scrapes are off (`picker.metrics.enabled: false`): their timing would differ
// between the processes and could decide a pick. Requests go one at a time, so every process sees
// no load of its own at pick time and the rendezvous owner of a prefix is the pick.

import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { startActiveActiveBed, type ActiveActiveBed } from '../support/active-active-bed.js';
import { assertCatalogError } from '../support/catalog-assert.js';
import { type ExtprocProcess } from '../support/extproc-process.js';
import { metricValue, scrapeMetrics } from '../support/prometheus.js';
import { send, type ClientRequest, type ClientResponse } from '../support/http-client.js';
import { type ModelServer } from '../support/model-server.js';
import { waitUntil } from '../support/wait-until.js';

const MODEL = 'chat';
/** Envoy's gRPC health check of each llm-extproc: how fast a dead process leaves the rotation. */
const HEALTH_CHECK_INTERVAL_MS = 100;

/** A 2 KB+ system prompt per tenant: well over one cache block, so affinity applies. */
function systemPrompt(tenant: number): string {
  return `Tenant ${tenant}: you are the support assistant of shop number ${tenant}; quote the returns policy and keep answers short. `
    .repeat(24)
    .slice(0, 2200);
}

function chat(tenant: number, turn: number): ClientRequest {
  return {
    path: '/v1/chat/completions',
    body: {
      model: MODEL,
      messages: [
        { role: 'system', content: systemPrompt(tenant) },
        { role: 'user', content: `question ${turn}: where is order ${10_000 + turn}?` },
      ],
    },
  };
}

interface Bed extends Omit<ActiveActiveBed, 'writePools'> {
  writePools(endpoints: readonly ModelServer[]): Promise<void>;
}

async function startBed(): Promise<Bed> {
  const bed = await startActiveActiveBed({ name: 'active-active', model: MODEL, healthCheckIntervalMs: HEALTH_CHECK_INTERVAL_MS });
  return { ...bed, writePools: (endpoints) => bed.writePools(endpoints.map((s) => ({ address: s.address }))) };
}

async function okRequests(picker: ExtprocProcess): Promise<number> {
  return metricValue(await scrapeMetrics(picker.httpPort), 'llm_extproc_requests_total', { model: MODEL, result: 'ok' });
}

async function servedBy(bed: Bed, request: ClientRequest): Promise<string> {
  const response = await send(bed.port, request);
  assert.equal(response.status, 200, response.text());
  return response.headers['x-model-server-id'];
}

/** Endpoints by state as one process's metrics report them, e.g. `Ready=3`. */
async function poolView(picker: ExtprocProcess): Promise<string> {
  const text = await scrapeMetrics(picker.httpPort);
  return ['Ready', 'NotReady', 'Draining', 'Quarantined']
    .map((state) => `${state}=${metricValue(text, 'llm_extproc_endpoints', { pool: 'pool', state })}`)
    .join(' ');
}

describe('three llm-extproc processes behind one Envoy (active-active)', () => {
  let bed: Bed;
  before(async () => {
    bed = await startBed();
  });
  after(async () => {
    await bed.stop();
  });

  it('report the same pool', async () => {
    const views = await Promise.all(bed.pickers.map(poolView));
    assert.deepEqual(views, Array(3).fill('Ready=3 NotReady=0 Draining=0 Quarantined=0'));
  });

  it('send requests sharing a 2 KB system prompt to one model server, whichever process picked', async () => {
    const before = await Promise.all(bed.pickers.map(okRequests));
    const served = new Map<string, number>();
    for (let turn = 0; turn < 30; turn++) {
      const id = await servedBy(bed, chat(0, turn));
      served.set(id, (served.get(id) ?? 0) + 1);
    }
    assert.equal(served.size, 1, `one shared prompt went to ${JSON.stringify([...served])}`);
    // Counters reach /metrics when a stream ends, which the client may see first.
    const picked = await waitUntil(
      async () => {
        const now = await Promise.all(bed.pickers.map(okRequests));
        const delta = now.map((n, i) => n - before[i]);
        return delta.reduce((a, b) => a + b, 0) === 30 ? delta : undefined;
      },
      { description: 'the 30 requests counted by the three processes' },
    );
    assert.ok(
      picked.every((n) => n > 0),
      `each process must have picked some of them: ${picked.join(', ')}`,
    );
  });

  it('move only the prefixes of a removed model server', async () => {
    // Distinct tenants until every server owns at least one (the owners follow the servers' ports).
    const owner = new Map<number, string>();
    for (let tenant = 1; tenant <= 60 && new Set(owner.values()).size < 3; tenant++)
      owner.set(tenant, await servedBy(bed, chat(tenant, 0)));
    assert.equal(new Set(owner.values()).size, 3, `60 tenants did not reach all three servers: ${JSON.stringify([...owner])}`);
    const removed = bed.servers[1];
    const remaining = bed.servers.filter((s) => s !== removed);
    await bed.writePools(remaining);
    await waitUntil(
      async () => {
        const views = await Promise.all(bed.pickers.map(poolView));
        return views.every((v) => v === 'Ready=2 NotReady=0 Draining=0 Quarantined=0') ? true : undefined;
      },
      { description: 'every process sees the server removed' },
    );
    for (const [tenant, was] of owner) {
      const now = await servedBy(bed, chat(tenant, 1));
      if (was === removed.id) assert.notEqual(now, removed.id, `tenant ${tenant} still went to the removed server`);
      else assert.equal(now, was, `tenant ${tenant} moved from ${was} to ${now}, though ${was} is still in the pool`);
    }
    await bed.writePools(bed.servers);
    await waitUntil(
      async () => {
        const views = await Promise.all(bed.pickers.map(poolView));
        return views.every((v) => v === 'Ready=3 NotReady=0 Draining=0 Quarantined=0') ? true : undefined;
      },
      { description: 'every process sees the server back' },
    );
  });

  it('lose only the requests the fail mode gives up when one process is killed under sequential load', async (t) => {
    // failure_mode_allow is false (renderGatewayConfig). The request in flight on the killed
    // process fails, either way with nothing raw: if the victim had already let the answer's
    // headers through, the client sees the stream cut; if Envoy was still waiting for its answer to
    // the response headers when it died, Envoy answers itself, which our local reply makes
    // gateway_unavailable JSON (which of the two depends on where the kill lands). Until Envoy's health check marks the process down, Envoy still opens
    // one stream in three to it: those fail at once with 503 gateway_unavailable (catalog JSON).
    // After that, none fails.
    interface Outcome {
      readonly startedAt: bigint;
      readonly response: ClientResponse;
    }
    const victim = bed.pickers[2];
    const inFlight = async (picker: ExtprocProcess): Promise<number> =>
      metricValue(await scrapeMetrics(picker.httpPort), 'llm_extproc_in_flight_requests');
    // Paused answers until the victim holds one (the test decides, no timing): then kill it.
    let cut: ClientResponse | undefined;
    let killedAt = 0n;
    for (let attempt = 0; cut === undefined; attempt++) {
      assert.ok(attempt < 6, 'Envoy never gave the victim a stream in 6 requests');
      let release = (): void => undefined;
      const gate = new Promise<void>((resolve) => (release = resolve));
      for (const server of bed.servers) server.setBehavior({ kind: 'paused-stream', release: gate });
      const pending = send(bed.port, { ...chat(7, attempt), body: { ...(chat(7, attempt).body as object), stream: true } });
      const holders = await waitUntil(
        async () => {
          const counts = await Promise.all(bed.pickers.map(inFlight));
          return counts.reduce((a, b) => a + b, 0) === 1 ? counts : undefined;
        },
        { description: 'the paused request held by one process' },
      );
      if (holders[2] === 1) {
        killedAt = process.hrtime.bigint();
        await victim.kill();
      }
      release();
      const response = await pending;
      if (holders[2] === 1) cut = response;
      else assert.equal(response.status, 200, response.text());
    }
    for (const server of bed.servers) server.setBehavior({ kind: 'ok' });
    // A cut stream, or else exactly the catalog's gateway_unavailable (status, type, code, JSON).
    if (cut.error === undefined) assertCatalogError(cut, 'gateway_unavailable');

    let markedDownAt: bigint | undefined;
    const outcomes: Outcome[] = [];
    const watch = bed.envoy
      .waitForStat('cluster.llm_extproc.membership_healthy', (v) => v === 2)
      .then(() => {
        markedDownAt = process.hrtime.bigint();
      });
    let afterMarkedDown = 0;
    while (afterMarkedDown < 30) {
      const startedAt = process.hrtime.bigint();
      outcomes.push({ startedAt, response: await send(bed.port, chat(outcomes.length % 5, outcomes.length)) });
      if (markedDownAt !== undefined && startedAt > markedDownAt) afterMarkedDown++;
    }
    await watch;
    const downAt = markedDownAt ?? killedAt;
    const failed = outcomes.filter((o) => o.response.status !== 200);
    for (const f of failed) assertCatalogError(f.response, 'gateway_unavailable');
    assert.equal(failed.filter((f) => f.startedAt > downAt).length, 0, 'a request failed after Envoy had taken the dead process out');
    const inWindow = outcomes.filter((o) => o.startedAt <= downAt).length;
    const bound = Math.ceil(inWindow / 3);
    t.diagnostic(
      `killed: 1 in-flight request cut; then ${failed.length} of ${inWindow} requests in the ${Number((downAt - killedAt) / 1_000_000n)} ms before the health check took the process out failed (bound ${bound}); 0 of ${outcomes.length - inWindow} after`,
    );
    assert.ok(failed.length <= bound, `${failed.length} failed of ${inWindow} sent before the health check saw the kill (bound ${bound})`);
    // The two survivors still agree on the pool.
    const views = await Promise.all(bed.pickers.slice(0, 2).map(poolView));
    assert.deepEqual(views, Array(2).fill('Ready=3 NotReady=0 Draining=0 Quarantined=0'));
  });
});
