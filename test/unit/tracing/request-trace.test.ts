// Traces as the request path writes them: one span per ext_proc stream, driven with plain ext_proc
// messages through the real processor, routing and OTel tracer, exported to the SDK's in-memory
// exporter. The client's traceparent is continued, the pick, attempts, figures and result land as
// attributes and events, the prompt and the answer never do.
import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { pino } from 'pino';
import { SpanKind, SpanStatusCode } from '@opentelemetry/api';
import { W3CTraceContextPropagator } from '@opentelemetry/core';
import { InMemorySpanExporter, ParentBasedSampler, AlwaysOffSampler, SimpleSpanProcessor, TracerProvider } from '@opentelemetry/sdk-trace';
import type { ReadableSpan, Sampler } from '@opentelemetry/sdk-trace';
import { EndpointStore } from '../../../src/endpoints/store.js';
import type { Clock } from '../../../src/endpoints/store.js';
import type { ObservedPool } from '../../../src/endpoints/model.js';
import { Metrics } from '../../../src/metrics/metrics.js';
import { LoadTracker } from '../../../src/picker/load-tracker.js';
import { recordScrape, recordScrapeFailure } from '../../../src/picker/signals.js';
import { RequestProcessor } from '../../../src/request/request-processor.js';
import type { ProcessorDeps } from '../../../src/request/request-processor.js';
import { StoreRouting } from '../../../src/routing/routing.js';
import { ServedModels } from '../../../src/routing/served-models.js';
import { composeSinks } from '../../../src/request/outcome-sink.js';
import { healthSink } from '../../../src/outcomes/health-sink.js';
import { logSink } from '../../../src/outcomes/log-sink.js';
import { metricsSink } from '../../../src/outcomes/metrics-sink.js';
import { traceSink } from '../../../src/outcomes/trace-sink.js';
import { ATTEMPT_EVENT, ATTR, OtelRequestTracer } from '../../../src/tracing/otel-request-trace.js';
import { MAX_TRACED_PATH } from '../../../src/tracing/request-trace.js';
import { LogThrottle } from '../../../src/util/log-throttle.js';
import type { ProcessingResponse } from '../../../src/extproc/messages.js';
import { DESTINATION_HEADER } from '../../../src/extproc/protocol-names.js';
import { requestBody, requestHeaders, responseBody, responseHeaders } from '../../support/envoy-messages.js';
import type { ReplyAttributes } from '../../support/envoy-messages.js';

const MODEL = 'llama-3-8b';
const A = '10.0.0.1:8000';
const B = '10.0.0.2:8000';
const frozen: Clock = { now: () => 0, setTimer: () => ({ cancel: () => undefined }) };
const FLEET: ObservedPool[] = [
  {
    name: 'llama',
    models: [MODEL],
    endpoints: [A, B].map((address) => ({ id: address, address, state: 'Ready' as const, reason: '' })),
  },
];

const CLIENT_TRACE = '4bf92f3577b34da6a3ce929d0e0e4736';
const CLIENT_SPAN = '00f067aa0ba902b7';
const PROMPT = 'the secret prompt: purple elephants at dawn';
const ANSWER = 'the secret answer: forty-two kumquats';

function harness(sampler?: Sampler, propagateToUpstream?: boolean) {
  const store = new EndpointStore(['static'], { threshold: 3, baseMs: 10_000, maxMs: 60_000 }, frozen);
  store.replaceAll('static', FLEET);
  store.markSynced('static');
  const load = new LoadTracker();
  const routing = new StoreRouting(store, load, { fallbacks: 1, random: () => 0 });
  const exporter = new InMemorySpanExporter();
  const provider = new TracerProvider({
    spanProcessors: [new SimpleSpanProcessor({ exporter })],
    ...(sampler === undefined ? {} : { sampler }),
  });
  const tracer = new OtelRequestTracer(
    provider.getTracer('test'),
    new W3CTraceContextPropagator(),
    propagateToUpstream === undefined ? {} : { propagateToUpstream },
  );
  const metrics = new Metrics({ processMetrics: false });
  const logger = pino({ level: 'silent' });
  // The sinks as app.ts composes them, with tracing on and off.
  const sinks = [metricsSink(metrics), logSink(logger, new LogThrottle()), healthSink({ store })];
  const deps: ProcessorDeps = {
    routing,
    models: new ServedModels(store, undefined),
    outcomes: composeSinks(sinks),
    logger,
    maxRequestBodyBytes: 1 << 20,
    maxInspectedBodyBytes: 1 << 20,
  };
  const traced = composeSinks([sinks[0], traceSink(load.board), ...sinks.slice(1)]);
  const processor = () => new RequestProcessor({ ...deps, outcomes: traced, tracer });
  /** The same processor with tracing off. */
  const untraced = () => new RequestProcessor(deps);
  return { exporter, processor, untraced, board: load.board };
}

function headers(extra: Record<string, string> = {}): Record<string, string> {
  return { ':method': 'POST', ':path': '/v1/chat/completions?x=1', 'content-type': 'application/json', 'x-request-id': 'req-7', ...extra };
}

const served = (upstream: string): ReplyAttributes => ({ details: 'via_upstream', flags: 0, upstream });
const chunk = (text: string) => `data: ${JSON.stringify({ choices: [{ delta: { content: text } }] })}\n\n`;
const usage = `data: ${JSON.stringify({ choices: [], usage: { prompt_tokens: 11, completion_tokens: 3, prompt_tokens_details: { cached_tokens: 8 } } })}\n\n`;

/** One streamed chat request answered in full by `upstream`. */
function streamedRequest(p: RequestProcessor, requestHeaderPairs: Record<string, string>, upstream = A): void {
  p.process(requestHeaders(requestHeaderPairs));
  p.process(
    requestBody({ model: MODEL, stream: true, stream_options: { include_usage: true }, messages: [{ role: 'user', content: PROMPT }] }),
  );
  p.process(responseHeaders(200, { 'content-type': 'text/event-stream' }, served(upstream)));
  p.process(responseBody(chunk(ANSWER.slice(0, 10)), false));
  p.process(responseBody(chunk(ANSWER.slice(10)), false));
  p.process(responseBody(usage + 'data: [DONE]\n\n', true));
  p.finish({ kind: 'half-closed' });
}

function onlySpan(exporter: InMemorySpanExporter): ReadableSpan {
  const spans = exporter.getFinishedSpans();
  assert.equal(spans.length, 1, 'one span per request');
  return spans[0];
}

describe('tracing: one span per request', () => {
  it("continues the client's traceparent and tracestate", () => {
    const h = harness();
    streamedRequest(h.processor(), headers({ traceparent: `00-${CLIENT_TRACE}-${CLIENT_SPAN}-01`, tracestate: 'vendor=abc' }));
    const span = onlySpan(h.exporter);
    assert.equal(span.spanContext().traceId, CLIENT_TRACE, 'same trace as the client');
    assert.equal(span.parentSpanContext?.spanId, CLIENT_SPAN, "parented to the client's span");
    assert.equal(span.spanContext().traceState?.get('vendor'), 'abc');
    assert.notEqual(span.spanContext().spanId, CLIENT_SPAN, 'a span of its own');
    assert.equal(span.kind, SpanKind.SERVER);
  });

  it('without a traceparent (or with a malformed one) starts a root span', () => {
    const cases: Record<string, string>[] = [
      {},
      { traceparent: 'not-a-traceparent' },
      { traceparent: `00-${'0'.repeat(32)}-${CLIENT_SPAN}-01` },
    ];
    for (const extra of cases) {
      const h = harness();
      streamedRequest(h.processor(), headers(extra));
      const span = onlySpan(h.exporter);
      assert.equal(span.parentSpanContext, undefined, `${JSON.stringify(extra)}: root`);
      assert.match(span.spanContext().traceId, /^[0-9a-f]{32}$/);
      assert.notEqual(span.spanContext().traceId, '0'.repeat(32));
    }
  });

  it('a client trace not sampled (flags 00) under a parent-based sampler records nothing', () => {
    const h = harness(new ParentBasedSampler({ root: new AlwaysOffSampler() }));
    streamedRequest(h.processor(), headers({ traceparent: `00-${CLIENT_TRACE}-${CLIENT_SPAN}-00` }));
    assert.equal(h.exporter.getFinishedSpans().length, 0);
  });

  it('GenAI and llm_extproc attributes: model, tokens, TTFT, the pick, the attempt, the result', () => {
    const h = harness();
    streamedRequest(h.processor(), headers());
    const span = onlySpan(h.exporter);
    const a = span.attributes;
    assert.equal(span.name, `chat ${MODEL}`);
    assert.equal(a[ATTR.operation], 'chat');
    assert.equal(a[ATTR.requestModel], MODEL);
    assert.equal(a[ATTR.inputTokens], 11);
    assert.equal(a[ATTR.outputTokens], 3);
    assert.equal(a[ATTR.cachedTokens], 8);
    assert.equal(typeof a[ATTR.timeToFirstToken], 'number');
    assert.ok((a[ATTR.timeToFirstToken] as number) >= 0);
    assert.equal(a[ATTR.pool], 'llama');
    assert.equal(a[ATTR.picked], A);
    assert.deepEqual(a[ATTR.fallbacks], [B]);
    assert.equal(typeof a[ATTR.score], 'number');
    assert.equal(a[ATTR.inFlight], 1, 'the primary carries this request when picked');
    assert.equal(a[ATTR.served], A);
    assert.equal(a[ATTR.serverAddress], '10.0.0.1');
    assert.equal(a[ATTR.serverPort], 8000);
    assert.equal(a[ATTR.result], 'ok');
    assert.equal(a[ATTR.verdict], 'ok');
    assert.equal(a[ATTR.answer], 'stream');
    assert.equal(a[ATTR.status], 200);
    assert.equal(a[ATTR.method], 'POST');
    assert.equal(a[ATTR.path], '/v1/chat/completions', 'the path without its query');
    assert.equal(a[ATTR.requestId], 'req-7');
    assert.equal(a[ATTR.attempts], 1);
    assert.equal(span.status.code, SpanStatusCode.OK);
    const attempts = span.events.filter((e) => e.name === ATTEMPT_EVENT);
    assert.deepEqual(
      attempts.map((e) => e.attributes),
      [{ [ATTR.attemptEndpoint]: A, [ATTR.attemptPool]: 'llama', [ATTR.attemptOutcome]: 'success', [ATTR.attemptReason]: 'ok' }],
    );
  });

  it("the pick's load figures come from a fresh report only: a failing scrape's last figures are not shown", () => {
    const h = harness();
    const report = { waiting: 4, running: 2, kvCacheUsage: 0.5, runningAdapters: [], waitingAdapters: [], maxAdapters: undefined };
    for (const address of [A, B]) recordScrape(h.board.cell(address), report, 1);
    streamedRequest(h.processor(), headers());
    const fresh = onlySpan(h.exporter).attributes;
    assert.deepEqual([fresh[ATTR.waiting], fresh[ATTR.running], fresh[ATTR.kvCacheUsage]], [4, 2, 0.5]);
    h.exporter.reset();
    for (const address of [A, B]) recordScrapeFailure(h.board.cell(address), 'connection refused');
    streamedRequest(h.processor(), headers());
    const failing = onlySpan(h.exporter).attributes;
    assert.deepEqual([failing[ATTR.waiting], failing[ATTR.running], failing[ATTR.kvCacheUsage]], [undefined, undefined, undefined]);
    assert.equal(failing[ATTR.inFlight], 1, 'our own count is always known');
  });

  it('a fallback answered: the primary failed to connect, both attempts are events', () => {
    const h = harness();
    streamedRequest(h.processor(), headers(), B);
    const span = onlySpan(h.exporter);
    const attempts = span.events.filter((e) => e.name === ATTEMPT_EVENT).map((e) => e.attributes ?? {});
    assert.deepEqual(
      attempts.map((e) => [e[ATTR.attemptEndpoint], e[ATTR.attemptOutcome], e[ATTR.attemptReason]]),
      [
        [A, 'failure', 'upstream_connect_failed'],
        [B, 'success', 'ok'],
      ],
    );
    assert.equal(span.attributes[ATTR.served], B);
    assert.equal(span.attributes[ATTR.attempts], 2);
  });

  it('a stream that ends without its terminator: the verdict and the error, status ERROR', () => {
    const h = harness();
    const p = h.processor();
    p.process(requestHeaders(headers()));
    p.process(requestBody({ model: MODEL, stream: true, messages: [{ role: 'user', content: PROMPT }] }));
    p.process(responseHeaders(200, { 'content-type': 'text/event-stream' }, served(A)));
    p.process(responseBody(chunk(ANSWER), true));
    p.finish({ kind: 'half-closed' });
    const span = onlySpan(h.exporter);
    assert.equal(span.attributes[ATTR.result], 'stream_incomplete');
    assert.equal(span.attributes[ATTR.verdict], 'stream_incomplete');
    assert.equal(span.attributes[ATTR.errorType], 'stream_incomplete');
    assert.equal(span.status.code, SpanStatusCode.ERROR);
    assert.equal(span.attributes[ATTR.outputTokens], undefined, 'no figures for an answer that failed');
  });

  it('a request we refuse (unknown model) is traced with its error code and no model', () => {
    const h = harness();
    const p = h.processor();
    p.process(requestHeaders(headers()));
    p.process(requestBody({ model: 'no-such-model', messages: [{ role: 'user', content: PROMPT }] }));
    p.finish({ kind: 'half-closed' });
    const span = onlySpan(h.exporter);
    assert.equal(span.attributes[ATTR.result], 'model_not_found');
    assert.equal(span.attributes[ATTR.requestModel], undefined, 'a model we do not serve is not recorded');
    assert.equal(span.name, 'llm_extproc.request');
    assert.equal(span.status.code, SpanStatusCode.ERROR);
  });

  it('neither the prompt nor the answer appears anywhere in the span', () => {
    const h = harness();
    streamedRequest(h.processor(), headers({ traceparent: `00-${CLIENT_TRACE}-${CLIENT_SPAN}-01` }));
    const span = onlySpan(h.exporter);
    const text = JSON.stringify({ name: span.name, attributes: span.attributes, events: span.events, status: span.status });
    for (const secret of ['purple', 'elephants', 'kumquats', 'forty-two', PROMPT, ANSWER])
      assert.ok(!text.includes(secret), `${secret} must not be traced`);
  });
});

/** The routing reply (to the buffered request body) of one request; the stream then ends. */
function routingReplyOf(p: RequestProcessor, requestHeaderPairs: Record<string, string>): ProcessingResponse {
  p.process(requestHeaders(requestHeaderPairs));
  const [reply] = p.process(requestBody({ model: MODEL, messages: [{ role: 'user', content: PROMPT }] }));
  p.finish({ kind: 'half-closed' });
  return reply;
}

function setHeaders(reply: ProcessingResponse): Record<string, string> {
  const set = reply.request_body?.response?.header_mutation?.set_headers ?? [];
  return Object.fromEntries(set.map((h) => [h.header?.key ?? '', h.header?.raw_value?.toString('latin1') ?? '']));
}

describe("tracing: the model server's request carries our span's context", () => {
  it("traceparent names our span as the parent, in the client's trace; tracestate goes on", () => {
    const h = harness();
    const reply = routingReplyOf(h.processor(), headers({ traceparent: `00-${CLIENT_TRACE}-${CLIENT_SPAN}-01`, tracestate: 'vendor=abc' }));
    const span = onlySpan(h.exporter);
    const set = setHeaders(reply);
    assert.equal(set.traceparent, `00-${CLIENT_TRACE}-${span.spanContext().spanId}-01`);
    assert.equal(set.tracestate, 'vendor=abc');
    assert.equal(set[DESTINATION_HEADER], A, 'the pick is still in the same mutation');
    assert.equal(reply.request_body?.response?.header_mutation?.remove_headers, undefined);
  });

  it("without a client trace, our root span's context; a malformed traceparent's tracestate is removed", () => {
    const h = harness();
    const reply = routingReplyOf(h.processor(), headers({ traceparent: 'not-a-traceparent', tracestate: 'vendor=abc' }));
    const span = onlySpan(h.exporter);
    const set = setHeaders(reply);
    assert.equal(set.traceparent, `00-${span.spanContext().traceId}-${span.spanContext().spanId}-01`);
    assert.equal(set.tracestate, undefined);
    assert.deepEqual(reply.request_body?.response?.header_mutation?.remove_headers, ['tracestate']);
  });

  it('a long path is recorded cut to MAX_TRACED_PATH characters, still without its query', () => {
    const h = harness();
    const long = '/v1/chat/completions/' + 'x'.repeat(1000);
    streamedRequest(h.processor(), headers({ ':path': `${long}?token=secret` }));
    const recorded = onlySpan(h.exporter).attributes[ATTR.path];
    assert.equal(MAX_TRACED_PATH, 256);
    assert.equal(recorded, long.slice(0, MAX_TRACED_PATH));
  });

  it('a client tracestate with no entry that parses is removed, not sent empty', () => {
    const h = harness();
    const reply = routingReplyOf(
      h.processor(),
      headers({ traceparent: `00-${CLIENT_TRACE}-${CLIENT_SPAN}-01`, tracestate: 'not a list member' }),
    );
    const set = setHeaders(reply);
    assert.equal(set.traceparent, `00-${CLIENT_TRACE}-${onlySpan(h.exporter).spanContext().spanId}-01`);
    assert.equal(Object.hasOwn(set, 'tracestate'), false, JSON.stringify(set));
    assert.deepEqual(reply.request_body?.response?.header_mutation?.remove_headers, ['tracestate']);
  });

  it('propagateToUpstream off, or a request not sampled: the very reply tracing off sends', () => {
    const sampled = headers({ traceparent: `00-${CLIENT_TRACE}-${CLIENT_SPAN}-01`, tracestate: 'vendor=abc' });
    const off = harness(undefined, false);
    const untraced = routingReplyOf(off.untraced(), sampled);
    assert.deepEqual(Object.keys(setHeaders(untraced)), [DESTINATION_HEADER]);
    assert.equal(routingReplyOf(off.processor(), sampled), untraced, 'propagateToUpstream: false');
    assert.equal(off.exporter.getFinishedSpans().length, 1, 'the span is still recorded');
    const unsampled = harness(new ParentBasedSampler({ root: new AlwaysOffSampler() }));
    const notSampled = headers({ traceparent: `00-${CLIENT_TRACE}-${CLIENT_SPAN}-00` });
    assert.equal(routingReplyOf(unsampled.processor(), notSampled), routingReplyOf(unsampled.untraced(), notSampled), 'not sampled');
    assert.equal(unsampled.exporter.getFinishedSpans().length, 0);
  });
});
