// A user who presses "stop" is not an outage. Through a real Envoy under our configuration and
// under Istio's, 50 clients each read 5 events of a stream and hang up: the 50 requests are the
// cancellation cancelled_mid_stream, nothing lands in any error series, no replica is blamed, and
// none of the chart's alert expressions is true. A model server killed mid-stream still is a
// failure: stream_broken, replica_dead, and LlmExtprocMidStreamFailures' expression is true.

import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, it } from 'node:test';
import { parse as parseYaml } from 'yaml';
import { repoRoot } from '../../scripts/repo-root.js';
import type { GatewayProfileName } from '../../tools/envoy-config/gateway-profiles.js';
import { startGateway, type Gateway } from '../support/gateway.js';
import type { ClientRequest } from '../support/http-client.js';
import { privateLoopbackHost } from '../support/loopback.js';
import { startModelServer } from '../support/model-server.js';
import { metricValue, samples } from '../support/prometheus.js';
import { evaluateRule } from '../support/rule-evaluator.js';
import { waitUntil } from '../support/wait-until.js';

const CLIENTS = 50;
const EVENTS_READ = 5;

const chat: ClientRequest = {
  path: '/v1/chat/completions',
  body: { model: 'm', stream: true, messages: [{ role: 'user', content: 'hi' }] },
};

/** The chart's rules as shipped: each alert's (and recording rule's) expression with values.yaml's thresholds. */
function shippedRules(): Array<{ name: string; alert: boolean; expr: string }> {
  const chart = join(repoRoot(), 'charts', 'llm-extproc');
  const values = (parseYaml(readFileSync(join(chart, 'values.yaml'), 'utf8')) as { metrics: { prometheusRule: Record<string, unknown> } })
    .metrics.prometheusRule;
  const template = readFileSync(join(chart, 'templates', 'prometheusrule.yaml'), 'utf8');
  return [...template.matchAll(/- (alert|record): ([\w:]+)\n\s+expr: (\|\n(?: {12,}\S.*\n)+|.*\n)/g)].map((m) => ({
    name: m[2] ?? '',
    alert: m[1] === 'alert',
    expr: (m[3] ?? '').replace(/^\|\n/, '').replace(/\{\{ \$r\.(\w+) \}\}/g, (_, key: string) => String(values[key])),
  }));
}

/** The alerts whose expression returns a sample, between the two scrapes. */
function firingAlerts(base: string, now: string): string[] {
  const scrapes = { base: samples(base), now: samples(now) };
  return shippedRules()
    .filter((rule) => rule.alert && evaluateRule(rule.expr, scrapes).length > 0)
    .map((rule) => rule.name);
}

/** Sum of every sample of a series whose result is an error (anything but ok and the cancellations). */
function errorRequests(text: string): number {
  return samples(text)
    .filter((s) => s.name === 'llm_extproc_requests_total' && !/^(ok|cancelled_.*)$/.test(s.labels.get('result') ?? ''))
    .reduce((sum, s) => sum + s.value, 0);
}

/** One client: reads `EVENTS_READ` events of the stream, then hangs up (a "stop generating" button). */
async function readAndLeave(gateway: Gateway): Promise<{ status: number; events: number; text: string }> {
  const hangUp = new AbortController();
  let events = 0;
  const response = await gateway.send({
    ...chat,
    signal: hangUp.signal,
    onData: (chunk) => {
      events += chunk.toString('utf8').split('data: ').length - 1;
      if (events >= EVENTS_READ) hangUp.abort();
    },
  });
  return { status: response.status, events, text: response.status === 200 ? '' : response.text() };
}

const PROFILES: ReadonlyArray<GatewayProfileName | undefined> = [undefined, 'istio'];

for (const profile of PROFILES) {
  void describe(`cancellations through a real Envoy (${profile ?? 'our configuration'})`, () => {
    void it(`${CLIENTS} clients that each read ${EVENTS_READ} events and leave: ${CLIENTS} cancellations, no error, no alert`, async (t) => {
      const server = await startModelServer({
        id: 'alive',
        models: ['m'],
        behavior: { kind: 'paced-random-sse', events: 200, gapMs: 50, bytesPerEvent: 40 },
      });
      let gateway: Gateway | undefined;
      try {
        gateway = await startGateway({
          // 50 streams at once on a shared 2-core machine: Envoy's 1 s wait for a reply (our
          // configuration's) is not what this test is about.
          ...(profile === undefined ? { envoy: { messageTimeoutMs: 5000 } } : { profile }),
          pools: [{ name: 'p', models: ['m'], endpoints: [{ address: server.address }] }],
          // One failure would be enough to quarantine: any blame on the replica would show.
          configYaml: 'quarantine:\n  consecutiveFailures: 1\n  baseSeconds: 600\n  maxSeconds: 600\n',
        });
        const gw = gateway;
        const base = await gw.metricsText();
        const clients = await Promise.all(Array.from({ length: CLIENTS }, () => readAndLeave(gw)));
        for (const client of clients) {
          assert.equal(client.status, 200, client.text);
          assert.ok(client.events >= EVENTS_READ, `a client read ${client.events} events`);
        }
        const now = await waitUntil(
          async () => {
            const text = await gw.metricsText();
            return metricValue(text, 'llm_extproc_requests_total', { result: 'cancelled_mid_stream' }) === CLIENTS ? text : undefined;
          },
          { description: `${CLIENTS} cancellations recorded`, timeoutMs: 60_000 },
        );
        t.diagnostic(
          `checks: ${metricValue(now, 'llm_extproc_midstream_breaks_total', { verdict: 'replica_alive' })} breaks judged replica_alive`,
        );
        assert.equal(metricValue(now, 'llm_extproc_requests_total', { model: 'm', result: 'cancelled_mid_stream' }), CLIENTS);
        assert.equal(errorRequests(now), 0, 'no request counted as an error');
        assert.equal(metricValue(now, 'inference_objective_request_error_total'), 0);
        assert.equal(metricValue(now, 'inference_objective_request_total'), CLIENTS);
        assert.equal(
          metricValue(now, 'llm_extproc_upstream_attempts_total', { outcome: 'failure' }),
          0,
          'no failed attempt of the replica',
        );
        assert.equal(metricValue(now, 'llm_extproc_midstream_breaks_total', { verdict: 'replica_dead' }), 0);
        assert.equal(metricValue(now, 'llm_extproc_endpoint_quarantines_total'), 0);
        assert.equal(gw.app.store.endpointsAt(server.address)[0]?.state, 'Ready', 'with a quarantine threshold of 1');
        assert.deepEqual(firingAlerts(base, now), [], 'no alert expression is true');
        const cancelledRate = shippedRules().find((r) => r.name === 'llm_extproc:requests_cancelled:rate5m');
        assert.ok(cancelledRate !== undefined);
        const rate = evaluateRule(cancelledRate.expr, { base: samples(base), now: samples(now) });
        assert.deepEqual(
          rate.map((p) => [p.labels.get('model'), p.labels.get('result'), Math.round(p.value * 300)]),
          [['m', 'cancelled_mid_stream', CLIENTS]],
          'the quiet cancellation rate counts them',
        );
      } finally {
        await gateway?.stop();
        await server.close();
      }
    });

    void it('a model server killed mid-stream is still stream_broken, replica_dead, and trips the mid-stream alert', async () => {
      // On this process's own loopback address, so its port stays ours while it is down.
      const victim = await startModelServer({
        id: 'victim',
        host: privateLoopbackHost(),
        models: ['m'],
        behavior: { kind: 'hang-after-headers', afterEvents: 2 },
      });
      let gateway: Gateway | undefined;
      try {
        gateway = await startGateway({
          ...(profile === undefined ? {} : { profile }),
          pools: [{ name: 'p', models: ['m'], endpoints: [{ address: victim.address }] }],
          configYaml: 'quarantine:\n  consecutiveFailures: 1000\n  baseSeconds: 600\n  maxSeconds: 600\n',
        });
        const gw = gateway;
        const base = await gw.metricsText();
        let killed = false;
        const response = await gw.send({
          ...chat,
          onData: () => {
            if (killed) return;
            killed = true;
            void victim.refuse();
          },
        });
        assert.equal(response.status, 200);
        assert.notEqual(response.error, undefined, 'the client sees a broken stream');
        const now = await waitUntil(
          async () => {
            const text = await gw.metricsText();
            return metricValue(text, 'llm_extproc_requests_total', { result: 'stream_broken' }) === 1 ? text : undefined;
          },
          { description: 'the break recorded' },
        );
        assert.equal(metricValue(now, 'llm_extproc_midstream_breaks_total', { verdict: 'replica_dead' }), 1);
        assert.equal(metricValue(now, 'llm_extproc_requests_total', { result: 'cancelled_mid_stream' }), 0);
        assert.equal(metricValue(now, 'inference_objective_request_error_total'), 1);
        assert.equal(metricValue(now, 'llm_extproc_upstream_attempts_total', { outcome: 'failure' }), 1);
        assert.ok(firingAlerts(base, now).includes('LlmExtprocMidStreamFailures'), 'the mid-stream alert expression is true');
      } finally {
        await gateway?.stop();
        await victim.close();
      }
    });
  });
}
