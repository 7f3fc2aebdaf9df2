// A user who presses "stop" is not an outage. Through a real Envoy under our configuration and
// under Istio's, 50 clients each read 5 events of a stream and hang up: Envoy's access log says the
// client left (DC), the 50 requests are the cancellation cancelled_mid_stream, nothing lands in any
// error series, no replica is blamed, the log says "request cancelled" with no warning, the spans
// a real OpenTelemetry Collector receives carry the same result and no error, and none of the
// chart's alert expressions (as helm template renders them, evaluated as Prometheus would) is true.
// A model server killed mid-stream still is a failure: stream_broken, replica_dead, and
// LlmExtprocMidStreamFailures pending at once and firing after its for:.

import assert from 'node:assert/strict';
import { mkdtemp, rm } from 'node:fs/promises';
import http2 from 'node:http2';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, it } from 'node:test';
import { pino } from 'pino';
import type { GatewayProfileName } from '../../tools/envoy-config/gateway-profiles.js';
import { CANCELLATION_KINDS } from '../../src/errors/catalog.js';
import { renderedRules } from '../support/chart-rules.js';
import type { ChartRule } from '../support/chart-rules.js';
import { freePort } from '../support/free-ports.js';
import { startActiveActiveBed, type ActiveActiveBed } from '../support/active-active-bed.js';
import { startGateway, type Gateway } from '../support/gateway.js';
import { send, type ClientRequest } from '../support/http-client.js';
import { privateLoopbackHost } from '../support/loopback.js';
import { OtelCollector } from '../support/otel-collector.js';
import { startModelServer } from '../support/model-server.js';
import { metricValue, samples, scrapeMetrics } from '../support/prometheus.js';
import { alertState, evaluateRule, timeline } from '../support/rule-evaluator.js';
import type { Timeline } from '../support/rule-evaluator.js';
import { waitUntil } from '../support/wait-until.js';

const CLIENTS = 50;

/** pino's levels: info 30, warn 40. */
const INFO = 30;
/** OTLP's span status code ERROR. */
const SPAN_STATUS_ERROR = 2;

interface LogLine {
  readonly level: number;
  readonly msg: string;
  readonly result?: string;
}
const EVENTS_READ = 5;

const chat: ClientRequest = {
  path: '/v1/chat/completions',
  body: { model: 'm', stream: true, messages: [{ role: 'user', content: 'hi' }] },
};

/** The chart's rules as `helm template` renders them with values.yaml's thresholds (rendered once). */
let rendered: Promise<ChartRule[]> | undefined;
function shippedRules(): Promise<ChartRule[]> {
  return (rendered ??= renderedRules());
}

/** Prometheus scrapes llm-extproc every 15 s (the chart's ServiceMonitor interval). */
const SCRAPE_INTERVAL = 15;

/**
 * Prometheus's view of an episode: a scrape before it, one after it, then `quietFor` seconds of
 * scrapes in which nothing more happens (the time an alert's `for:` and its range play out).
 */
function episode(base: string, now: string, quietFor: number): Timeline {
  return timeline([samples(base), samples(now)], SCRAPE_INTERVAL, quietFor);
}

/** The alerts whose expression is true at any evaluation of the timeline (pending or firing). */
async function alertsTrue(on: Timeline): Promise<string[]> {
  return (await shippedRules())
    .filter((rule) => rule.alert && on.some((scrape) => evaluateRule(rule.expr, on, scrape.at).length > 0))
    .map((rule) => rule.name);
}

/** Sum of every sample of a series whose result is an error (anything but ok and the cancellations). */
function errorRequests(text: string): number {
  return samples(text)
    .filter((s) => s.name === 'llm_extproc_requests_total' && !/^(ok|cancelled_.*)$/.test(s.labels.get('result') ?? ''))
    .reduce((sum, s) => sum + s.value, 0);
}

/** One client: reads `EVENTS_READ` events of the stream, then hangs up (a "stop generating" button). */
async function readAndLeave(gateway: Pick<Gateway, 'send'>): Promise<{ status: number; events: number; text: string }> {
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

const H2_CLIENTS = 10;

/** A stream long enough that every client leaves before its end. */
const LONG_STREAM = { kind: 'paced-random-sse', events: 200, gapMs: 50, bytesPerEvent: 40 } as const;

/** The metrics text once `count` requests are recorded as cancelled_mid_stream. */
function cancellationsRecorded(gateway: Gateway, count: number): Promise<string> {
  return waitUntil(
    async () => {
      const text = await gateway.metricsText();
      return metricValue(text, 'llm_extproc_requests_total', { result: 'cancelled_mid_stream' }) === count ? text : undefined;
    },
    { description: `${count} cancellations recorded`, timeoutMs: 60_000 },
  );
}

/** One HTTP/2 stream on `session`: reads `EVENTS_READ` events, then resets the stream (CANCEL). */
function readAndReset(session: http2.ClientHttp2Session): Promise<number> {
  return new Promise((resolve, reject) => {
    const stream = session.request({ ':method': 'POST', ':path': chat.path, 'content-type': 'application/json' });
    let events = 0;
    stream.on('data', (chunk: Buffer) => {
      events += chunk.toString('utf8').split('data: ').length - 1;
      if (events >= EVENTS_READ && !stream.closed) {
        stream.close(http2.constants.NGHTTP2_CANCEL);
        resolve(events);
      }
    });
    stream.on('error', reject);
    stream.on('end', () => resolve(events));
    stream.end(JSON.stringify(chat.body));
  });
}

const PROFILES: ReadonlyArray<GatewayProfileName | undefined> = [undefined, 'istio'];

for (const profile of PROFILES) {
  void describe(`cancellations through a real Envoy (${profile ?? 'our configuration'})`, () => {
    void it(`${CLIENTS} clients that each read ${EVENTS_READ} events and leave: ${CLIENTS} cancellations, no error, no alert, no warning, unerrored spans`, async () => {
      const dir = await mkdtemp(join(tmpdir(), 'llm-extproc-cancellations-'));
      const collector = await OtelCollector.start(dir, await freePort());
      const logs: LogLine[] = [];
      const server = await startModelServer({
        id: 'alive',
        models: ['m'],
        behavior: LONG_STREAM,
      });
      let gateway: Gateway | undefined;
      try {
        gateway = await startGateway({
          // 50 streams at once on a shared 2-core machine: Envoy's 1 s wait for a reply (our
          // configuration's) is not what this test is about.
          ...(profile === undefined ? { envoy: { messageTimeoutMs: 5000 } } : { profile }),
          pools: [{ name: 'p', models: ['m'], endpoints: [{ address: server.address }] }],
          // One failure would be enough to quarantine: any blame on the replica would show.
          configYaml: [
            'quarantine:\n  consecutiveFailures: 1\n  baseSeconds: 600\n  maxSeconds: 600',
            `tracing:\n  enabled: true\n  endpoint: ${collector.tracesUrl}\n  scheduledDelaySeconds: 0.1\n`,
          ].join('\n'),
          // Debug: the lines the failure-log throttle keeps below info count too.
          logger: pino({ level: 'debug' }, { write: (line: string) => void logs.push(JSON.parse(line) as LogLine) }),
        });
        const gw = gateway;
        const base = await gw.metricsText();
        const clients = await Promise.all(Array.from({ length: CLIENTS }, () => readAndLeave(gw)));
        for (const client of clients) {
          assert.equal(client.status, 200, client.text);
          assert.ok(client.events >= EVENTS_READ, `a client read ${client.events} events`);
        }
        const now = await cancellationsRecorded(gw, CLIENTS);
        assert.equal(
          metricValue(now, 'llm_extproc_midstream_break_signals_total', { signal: 'access_log_client' }),
          CLIENTS,
          "every break judged by Envoy's access log (DC: the client left)",
        );
        assert.equal(metricValue(now, 'llm_extproc_midstream_breaks_total'), 0, 'no replica checked: nothing points at it');
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
        assert.deepEqual(await alertsTrue(episode(base, now, 600)), [], 'no alert expression is true in the 10 minutes after');
        const cancelledRate = (await shippedRules()).find((r) => r.name === 'llm_extproc:requests_cancelled:rate5m');
        assert.ok(cancelledRate !== undefined);
        // The series was there at 0 before the first client came: Prometheus sees all 50.
        const rate = evaluateRule(cancelledRate.expr, episode(base, now, 0));
        assert.deepEqual(
          rate.map((p) => [p.labels.get('model'), p.labels.get('result'), Math.round(p.value * 300)]).sort(),
          CANCELLATION_KINDS.map((kind) => ['m', kind, kind === 'cancelled_mid_stream' ? CLIENTS : 0]).sort(),
          'the quiet cancellation rate counts them (the other cancellations at 0)',
        );
        // The log: one "request cancelled" per client (the first at info, the throttle puts the
        // rest at debug), and no warning or error line at all.
        const cancelled = await waitUntil(
          () => {
            const lines = logs.filter((l) => l.msg === 'request cancelled');
            return lines.length === CLIENTS ? lines : undefined;
          },
          { description: `${CLIENTS} "request cancelled" lines` },
        );
        assert.deepEqual([...new Set(cancelled.map((l) => l.result))], ['cancelled_mid_stream']);
        assert.ok(
          cancelled.some((l) => l.level === INFO),
          'a "request cancelled" line at info',
        );
        assert.ok(
          cancelled.every((l) => l.level <= INFO),
          'none above info',
        );
        const warnings = logs.filter((l) => l.level > INFO);
        assert.deepEqual(
          warnings.map((l) => l.msg),
          [],
          `no warning or error line: ${JSON.stringify(warnings)}`,
        );
        assert.equal(logs.filter((l) => l.msg === 'request failed').length, 0);
        // The trace sink says what the metrics say: 50 spans with the cancellation, none an error.
        const spans = await waitUntil(
          async () => {
            const ours = (await collector.spans()).filter((span) => span.attributes['llm_extproc.result'] !== undefined);
            return ours.length >= CLIENTS ? ours : undefined;
          },
          { description: `${CLIENTS} spans exported`, timeoutMs: 30_000 },
        );
        assert.deepEqual([...new Set(spans.map((span) => span.attributes['llm_extproc.result']?.stringValue))], ['cancelled_mid_stream']);
        assert.equal(spans.filter((span) => span.status.code === SPAN_STATUS_ERROR).length, 0, 'no span status ERROR');
      } finally {
        await gateway?.stop();
        await server.close();
        await collector.stop();
        await rm(dir, { recursive: true, force: true });
      }
    });

    void it('HTTP/2 clients that reset their stream (RST_STREAM CANCEL) after 5 events: cancellations too (Envoy flags DR)', async () => {
      const server = await startModelServer({
        id: 'alive-h2',
        models: ['m'],
        behavior: LONG_STREAM,
      });
      let gateway: Gateway | undefined;
      try {
        gateway = await startGateway({
          ...(profile === undefined ? {} : { profile }),
          pools: [{ name: 'p', models: ['m'], endpoints: [{ address: server.address }] }],
        });
        const gw = gateway;
        const session = http2.connect(`http://127.0.0.1:${gw.port}`);
        try {
          const events = await Promise.all(Array.from({ length: H2_CLIENTS }, () => readAndReset(session)));
          for (const read of events) assert.ok(read >= EVENTS_READ, `a client read ${read} events`);
        } finally {
          session.close();
        }
        const now = await cancellationsRecorded(gw, H2_CLIENTS);
        assert.equal(errorRequests(now), 0, 'no request counted as an error');
        assert.equal(metricValue(now, 'llm_extproc_midstream_break_signals_total', { signal: 'access_log_client' }), H2_CLIENTS);
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
            // The replica check runs once the break is recorded: wait for both.
            return metricValue(text, 'llm_extproc_requests_total', { result: 'stream_broken' }) === 1 &&
              metricValue(text, 'llm_extproc_midstream_breaks_total', { verdict: 'replica_dead' }) === 1
              ? text
              : undefined;
          },
          { description: 'the break recorded and its replica checked' },
        );
        assert.equal(
          metricValue(now, 'llm_extproc_midstream_break_signals_total', { signal: 'access_log_upstream' }),
          1,
          "Envoy's access log put the end on the model server's side",
        );
        assert.equal(metricValue(now, 'llm_extproc_midstream_breaks_total', { verdict: 'replica_dead' }), 1);
        assert.equal(metricValue(now, 'llm_extproc_requests_total', { result: 'cancelled_mid_stream' }), 0);
        assert.equal(metricValue(now, 'inference_objective_request_error_total'), 1);
        assert.equal(metricValue(now, 'llm_extproc_upstream_attempts_total', { outcome: 'failure' }), 1);
        const midStream = (await shippedRules()).find((r) => r.name === 'LlmExtprocMidStreamFailures');
        assert.ok(midStream !== undefined);
        // stream_broken was there at 0 before the break, so Prometheus sees this first one: the
        // alert is pending at the next scrape and fires once its for: (values.yaml) has passed.
        assert.equal(alertState(midStream, episode(base, now, 0)), 'pending', 'the mid-stream alert expression is true');
        assert.equal(alertState(midStream, episode(base, now, midStream.forSeconds)), 'firing');
      } finally {
        await gateway?.stop();
        await victim.close();
      }
    });
  });
}

/** Every replica's metrics text, and one sum of a series over them. */
async function scrapeAll(bed: ActiveActiveBed): Promise<string[]> {
  return Promise.all(bed.pickers.map((p) => scrapeMetrics(p.httpPort)));
}
function summed(texts: readonly string[], name: string, labels: Readonly<Record<string, string>> = {}): number {
  return texts.reduce((sum, text) => sum + metricValue(text, name, labels), 0);
}

/** The replicas' metrics once `count` requests are recorded as `result` over all of them. */
function recordedOverReplicas(bed: ActiveActiveBed, result: string, count: number): Promise<string[]> {
  return waitUntil(
    async () => {
      const texts = await scrapeAll(bed);
      return summed(texts, 'llm_extproc_requests_total', { result }) === count ? texts : undefined;
    },
    { description: `${count} ${result} over the replicas`, timeoutMs: 60_000 },
  );
}

// Envoy streams each worker's access log to ONE llm-extproc replica and spreads ext_proc streams
// over all three: most entries reach a replica that never saw their stream. Each replica names
// itself in the pick's metadata (listen.peerAddress); the replica that gets an entry of another's
// stream forwards it there.
void describe('cancellations over three active-active replicas (listen.peerAddress)', () => {
  void it(`${CLIENTS} clients that leave, spread over the replicas: ${CLIENTS} cancellations in all, no error, no unjudged break`, async () => {
    const bed = await startActiveActiveBed({
      name: 'cancellations-replicas',
      model: 'm',
      behavior: LONG_STREAM,
      peerForwarding: true,
      config: { quarantine: { consecutiveFailures: 1, baseSeconds: 600, maxSeconds: 600 } },
    });
    try {
      const client = { send: (req: ClientRequest) => send(bed.port, req) };
      const clients = await Promise.all(Array.from({ length: CLIENTS }, () => readAndLeave(client)));
      for (const c of clients) assert.equal(c.status, 200, c.text);
      const texts = await recordedOverReplicas(bed, 'cancelled_mid_stream', CLIENTS);
      const perReplica = texts.map((t) => metricValue(t, 'llm_extproc_requests_total', { result: 'cancelled_mid_stream' }));
      assert.ok(perReplica.filter((n) => n > 0).length >= 2, `the streams were spread over the replicas: ${perReplica.join(', ')}`);
      assert.equal(summed(texts, 'llm_extproc_midstream_break_signals_total', { signal: 'access_log_client' }), CLIENTS);
      assert.equal(summed(texts, 'llm_extproc_midstream_break_signals_total', { signal: 'none' }), 0, 'every entry met its stream');
      assert.ok(summed(texts, 'llm_extproc_access_log_forwards_total', { outcome: 'sent' }) > 0, 'some entries crossed to their replica');
      assert.equal(summed(texts, 'llm_extproc_access_log_forwards_total', { outcome: 'stream_failed' }), 0);
      assert.equal(summed(texts, 'llm_extproc_access_log_forwards_total', { outcome: 'unknown_peer' }), 0);
      assert.equal(
        texts.map(errorRequests).reduce((a, b) => a + b, 0),
        0,
        'no request counted as an error',
      );
      assert.equal(summed(texts, 'inference_objective_request_error_total'), 0);
      assert.equal(summed(texts, 'llm_extproc_upstream_attempts_total', { outcome: 'failure' }), 0);
      assert.equal(summed(texts, 'llm_extproc_midstream_breaks_total'), 0, 'no replica checked');
      assert.equal(summed(texts, 'llm_extproc_endpoint_quarantines_total'), 0);
    } finally {
      await bed.stop();
    }
  });

  void it('a model server killed mid-stream is still stream_broken and replica_dead, on the replica that picked it', async () => {
    const bed = await startActiveActiveBed({
      name: 'cancellations-replicas-kill',
      model: 'm',
      behavior: { kind: 'hang-after-headers', afterEvents: 2 },
      peerForwarding: true,
      config: { quarantine: { consecutiveFailures: 1000, baseSeconds: 600, maxSeconds: 600 } },
    });
    try {
      const before = await scrapeAll(bed);
      // One stream per replica (Envoy round-robins them); once all three stream (and hang), every
      // model server dies.
      let streaming = 0;
      const responses = await Promise.all(
        bed.servers.map(() => {
          let started = false;
          return send(bed.port, {
            ...chat,
            onData: () => {
              if (started) return;
              started = true;
              if (++streaming === bed.servers.length) for (const server of bed.servers) void server.refuse();
            },
          });
        }),
      );
      for (const response of responses) assert.equal(response.status, 200);
      const texts = await waitUntil(
        async () => {
          const now = await scrapeAll(bed);
          return summed(now, 'llm_extproc_requests_total', { result: 'stream_broken' }) === responses.length &&
            summed(now, 'llm_extproc_midstream_breaks_total', { verdict: 'replica_dead' }) >= 1
            ? now
            : undefined;
        },
        { description: 'the breaks recorded and their replicas checked' },
      );
      assert.equal(summed(texts, 'llm_extproc_midstream_break_signals_total', { signal: 'access_log_upstream' }), responses.length);
      assert.equal(summed(texts, 'llm_extproc_midstream_break_signals_total', { signal: 'none' }), 0);
      assert.equal(summed(texts, 'llm_extproc_requests_total', { result: 'cancelled_mid_stream' }), 0);
      assert.equal(summed(texts, 'inference_objective_request_error_total'), responses.length);
      const alerting = await Promise.all(texts.map((now, i) => alertsTrue(episode(before[i] ?? '', now, 0))));
      assert.ok(
        alerting.some((names) => names.includes('LlmExtprocMidStreamFailures')),
        'the mid-stream alert expression is true where the breaks were recorded',
      );
    } finally {
      await bed.stop();
    }
  });
});
