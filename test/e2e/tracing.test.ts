// End to end: OpenTelemetry traces through a real Envoy, received by a real OpenTelemetry
// Collector (OTLP/HTTP receiver, file exporter writing OTLP JSON) that this test starts. Each
// request carries the client's own `traceparent`; the collector's file must hold exactly one span
// per request, in the client's trace and parented to the client's span, with the GenAI and
// llm_extproc attributes, and none of the prompt's (or the answer's) text; the model server must
// receive a traceparent naming our span (as the collector got it) as its parent, so its own spans
// join the trace — and with tracing off, the client's traceparent untouched. Then the collector is
// frozen and later killed mid-run: every request still succeeds as fast as before, the export
// queue never holds more than tracing.maxQueueSize spans, and the lost spans are counted.

import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { freePort } from '../support/free-ports.js';
import { startGateway, type Gateway } from '../support/gateway.js';
import { metricValue } from '../support/prometheus.js';
import type { ClientRequest } from '../support/http-client.js';
import { startModelServer, type ModelServer, type RecordedRequest } from '../support/model-server.js';
import { OtelCollector } from '../support/otel-collector.js';
import type { CollectedSpan, OtlpValue } from '../support/otel-collector.js';
import { waitUntil } from '../support/wait-until.js';

const MODEL = 'traced-model';
const POOL = 'traced-pool';
const MAX_QUEUE = 8;
/** Long, so that a request path that waited for an export would show it plainly. */
const EXPORT_TIMEOUT_SECONDS = 10;
const SECRET_WORDS = ['zanzibar', 'quokka', 'marmalade'];

interface ClientTrace {
  readonly traceId: string;
  readonly spanId: string;
}

function newClientTrace(): ClientTrace {
  return { traceId: randomBytes(16).toString('hex'), spanId: randomBytes(8).toString('hex') };
}

function tracedChat(trace: ClientTrace, n: number): ClientRequest {
  return {
    path: '/v1/chat/completions',
    headers: { traceparent: `00-${trace.traceId}-${trace.spanId}-01`, tracestate: 'client=e2e' },
    body: {
      model: MODEL,
      stream: true,
      stream_options: { include_usage: true },
      messages: [{ role: 'user', content: `${SECRET_WORDS.join(' ')} request ${n}` }],
    },
  };
}

function str(value: OtlpValue | undefined): string | undefined {
  return value?.stringValue;
}

function num(value: OtlpValue | undefined): number | undefined {
  if (value?.intValue !== undefined) return Number(value.intValue);
  return value?.doubleValue;
}

async function timed(gateway: Gateway, request: ClientRequest): Promise<number> {
  const started = performance.now();
  const res = await gateway.send(request);
  const ms = performance.now() - started;
  assert.equal(res.status, 200, res.text());
  for (const word of SECRET_WORDS) assert.ok(res.text().includes(word), 'the answer echoes the prompt (so the file check covers it)');
  return ms;
}

/** One request header as the model server got it ('' when absent). */
function header(request: RecordedRequest, name: string): string {
  const value = request.headers[name];
  return Array.isArray(value) ? value.join(',') : (value ?? '');
}

/** The first test's client traces and the spans the collector got for them (the next test reads both). */
const CLIENT_TRACES: ClientTrace[] = [];
const SPANS: CollectedSpan[] = [];

function median(values: readonly number[]): number {
  const sorted = [...values].sort((a, b) => a - b);
  return sorted[Math.floor(sorted.length / 2)];
}

void describe('OpenTelemetry traces through Envoy to a real collector', () => {
  let dir: string;
  let collector: OtelCollector;
  let server: ModelServer;
  let gateway: Gateway;
  const healthyMs: number[] = [];

  before(async () => {
    dir = await mkdtemp(join(tmpdir(), 'llm-extproc-tracing-'));
    collector = await OtelCollector.start(dir, await freePort());
    server = await startModelServer({ id: 'traced', models: [MODEL], metrics: { waiting: 2, running: 1, kvCacheUsage: 0.5 } });
    gateway = await startGateway({
      pools: [{ name: POOL, models: [MODEL], endpoints: [{ address: server.address }] }],
      configYaml: [
        'tracing:',
        '  enabled: true',
        `  endpoint: ${collector.tracesUrl}`,
        `  maxQueueSize: ${MAX_QUEUE}`,
        '  maxExportBatchSize: 4',
        '  scheduledDelaySeconds: 0.1',
        `  exportTimeoutSeconds: ${EXPORT_TIMEOUT_SECONDS}`,
        '  shutdownFlushSeconds: 1',
        '',
      ].join('\n'),
    });
  });

  after(async () => {
    await gateway?.stop();
    await server?.close();
    await collector?.stop();
    await rm(dir, { recursive: true, force: true });
  });

  void it("one span per request, in the client's trace, parented to the client's span, with the GenAI and llm_extproc attributes", async () => {
    const traces = [newClientTrace(), newClientTrace(), newClientTrace(), newClientTrace()];
    CLIENT_TRACES.push(...traces);
    for (const [n, trace] of traces.entries()) healthyMs.push(await timed(gateway, tracedChat(trace, n)));
    const ids = new Set(traces.map((t) => t.traceId));
    const spans = await waitUntil(
      async () => {
        const ours = (await collector.spans()).filter((s) => ids.has(s.traceId));
        return ours.length >= traces.length ? ours : undefined;
      },
      { description: 'the collector wrote a span for every request', timeoutMs: 15_000 },
    );
    assert.equal(spans.length, traces.length, 'exactly one span per request');
    SPANS.push(...spans);
    for (const trace of traces) {
      const span = spans.find((s) => s.traceId === trace.traceId) as CollectedSpan;
      assert.ok(span !== undefined, `a span in trace ${trace.traceId}`);
      assert.equal(span.parentSpanId, trace.spanId, "parented to the client's span");
      assert.equal(span.traceState, 'client=e2e', "the client's tracestate carried on");
      assert.notEqual(span.spanId, trace.spanId);
      assert.equal(span.name, `chat ${MODEL}`);
      const a = span.attributes;
      assert.equal(str(a['gen_ai.operation.name']), 'chat');
      assert.equal(str(a['gen_ai.request.model']), MODEL);
      assert.ok((num(a['gen_ai.usage.input_tokens']) ?? 0) > 0, 'input tokens from the usage chunk');
      assert.ok((num(a['gen_ai.usage.output_tokens']) ?? 0) > 0, 'output tokens from the usage chunk');
      assert.ok((num(a['gen_ai.server.time_to_first_token']) ?? -1) >= 0, 'time to first token');
      assert.equal(str(a['llm_extproc.pool']), POOL);
      assert.equal(str(a['llm_extproc.endpoint.picked']), server.address);
      assert.equal(str(a['llm_extproc.endpoint.served']), server.address);
      assert.equal(typeof num(a['llm_extproc.pick.score']), 'number', 'the chosen endpoint scored');
      assert.equal(str(a['llm_extproc.result']), 'ok');
      assert.equal(str(a['llm_extproc.verdict']), 'ok');
      assert.equal(num(a['http.response.status_code']), 200);
      assert.equal(num(a['llm_extproc.attempts']), 1);
      assert.notEqual(str(a['llm_extproc.request_id']) ?? '', '', "Envoy's x-request-id");
      const attempt = span.events.find((e) => e.name === 'llm_extproc.attempt');
      assert.equal(str(attempt?.attributes['llm_extproc.attempt.outcome']), 'success');
      assert.equal(str(attempt?.attributes['llm_extproc.attempt.endpoint']), server.address);
      assert.equal(span.status.code, 1, 'status OK');
      assert.equal(str(span.resource['service.name']), 'llm-extproc');
    }
  });

  void it("the model server receives our span's context: the client's trace, our span as the parent", () => {
    for (const trace of CLIENT_TRACES) {
      const span = SPANS.find((s) => s.traceId === trace.traceId) as CollectedSpan;
      const received = server.requests.filter((r) => r.path === '/v1/chat/completions' && header(r, 'traceparent').includes(trace.traceId));
      assert.equal(received.length, 1, `one request of trace ${trace.traceId} reached the model server`);
      assert.equal(header(received[0], 'traceparent'), `00-${trace.traceId}-${span.spanId}-01`, 'parent id = our span as collected');
      assert.equal(header(received[0], 'tracestate'), 'client=e2e');
    }
  });

  void it('none of the prompt text (nor the answer, which echoes it) reaches the collector', async () => {
    const text = await collector.fileText();
    assert.ok(text.length > 0);
    for (const word of [...SECRET_WORDS, 'Hello from traced']) assert.ok(!text.includes(word), `"${word}" is in the exported traces`);
  });

  void it('a frozen, then killed collector costs no request and no unbounded memory; lost spans are counted', async (t) => {
    const queueFull = async () =>
      metricValue(await gateway.metricsText(), 'llm_extproc_trace_spans_dropped_total', { reason: 'queue_full' });
    const exportFailed = async () =>
      metricValue(await gateway.metricsText(), 'llm_extproc_trace_spans_dropped_total', { reason: 'export_failed' });
    const queued = async () => metricValue(await gateway.metricsText(), 'llm_extproc_trace_queue_spans');
    assert.equal(await queueFull(), 0);

    // Frozen: the kernel still accepts connections, nothing answers (a stalled collector).
    collector.stall();
    const stalledMs: number[] = [];
    let maxQueued = 0;
    for (let n = 0; n < 30; n++) {
      const trace = newClientTrace();
      stalledMs.push(await timed(gateway, tracedChat(trace, 100 + n)));
      maxQueued = Math.max(maxQueued, await queued());
    }
    assert.ok(maxQueued <= MAX_QUEUE, `the export queue held ${maxQueued} spans (bound ${MAX_QUEUE})`);
    await waitUntil(async () => ((await queueFull()) > 0 ? true : undefined), { description: 'spans dropped for a full queue' });
    const slowest = Math.max(...stalledMs);
    t.diagnostic(
      `healthy median ${median(healthyMs).toFixed(0)} ms; stalled median ${median(stalledMs).toFixed(0)} ms, slowest ${slowest.toFixed(0)} ms; ` +
        `queue peak ${maxQueued}/${MAX_QUEUE}; dropped for a full queue ${await queueFull()}`,
    );
    assert.ok(slowest < (EXPORT_TIMEOUT_SECONDS * 1000) / 2, `a request took ${slowest} ms while the collector was stalled`);
    assert.ok(
      median(stalledMs) < 3 * median(healthyMs) + 100,
      `median ${median(stalledMs)} ms with a stalled collector vs ${median(healthyMs)} ms with a healthy one`,
    );

    // Killed: its connections reset, the pending exports fail and their spans count as lost.
    await collector.kill();
    for (let n = 0; n < 10; n++) {
      await timed(gateway, tracedChat(newClientTrace(), 200 + n));
      assert.ok((await queued()) <= MAX_QUEUE);
    }
    await waitUntil(async () => ((await exportFailed()) > 0 ? true : undefined), {
      description: 'failed exports counted',
      timeoutMs: 30_000,
    });
    assert.equal(metricValue(await gateway.metricsText(), 'llm_extproc_requests_total', { model: MODEL, result: 'ok' }), 44);
    t.diagnostic(`after the kill: ${await exportFailed()} spans lost in failed exports, ${await queueFull()} dropped for a full queue`);

    // Shutdown flushes within its bound even though nothing can receive the spans.
    const stopping = performance.now();
    await gateway.app.stop();
    const stopMs = performance.now() - stopping;
    assert.ok(stopMs < 5000, `stopping took ${stopMs} ms (grace 1 s, flush bound 1 s)`);
    t.diagnostic(`stopped in ${stopMs.toFixed(0)} ms with the collector gone`);
  });
});

void describe("tracing off: the request to the model server keeps the client's trace context", () => {
  let server: ModelServer;
  let gateway: Gateway;

  before(async () => {
    server = await startModelServer({ id: 'untraced', models: [MODEL] });
    gateway = await startGateway({ pools: [{ name: POOL, models: [MODEL], endpoints: [{ address: server.address }] }] });
  });

  after(async () => {
    await gateway?.stop();
    await server?.close();
  });

  void it("the client's traceparent and tracestate reach the model server unchanged", async () => {
    const trace = newClientTrace();
    await timed(gateway, tracedChat(trace, 0));
    const received = server.requests.filter((r) => r.path === '/v1/chat/completions');
    assert.equal(received.length, 1);
    assert.equal(header(received[0], 'traceparent'), `00-${trace.traceId}-${trace.spanId}-01`);
    assert.equal(header(received[0], 'tracestate'), 'client=e2e');
  });
});
