// The per-stream processor driven with plain ext_proc messages, over the real routing, store,
// load tracker and metrics: what Envoy is told to do at each phase, what the client ends up
// reading, and what gets recorded about each endpoint.
import { describe, it } from 'node:test';
import type { DestinationFormat } from '../../../src/config/config.js';
import assert from 'node:assert/strict';
import { pino } from 'pino';
import { EndpointStore } from '../../../src/endpoints/store.js';
import type { Clock } from '../../../src/endpoints/store.js';
import type { EndpointState, ObservedEndpoint, ObservedPool } from '../../../src/endpoints/model.js';
import { GatewayError } from '../../../src/errors/gateway-error.js';
import { LogThrottle } from '../../../src/util/log-throttle.js';
import { RequestProcessor } from '../../../src/request/request-processor.js';
import { StoreRouting } from '../../../src/routing/routing.js';
import { ServedModels } from '../../../src/routing/served-models.js';
import { composeSinks } from '../../../src/request/outcome-sink.js';
import type { OutcomeSink } from '../../../src/request/outcome-sink.js';
import { healthSink } from '../../../src/outcomes/health-sink.js';
import { judgedBreaks } from '../../../src/outcomes/judged-breaks.js';
import { StreamEndReports } from '../../../src/outcomes/stream-end-reports.js';
import { RESPONSE_FLAGS } from '../../../src/errors/envoy-response-flags.js';
import { logSink } from '../../../src/outcomes/log-sink.js';
import { metricsSink } from '../../../src/outcomes/metrics-sink.js';
import type { HeaderMutation, ProcessingRequest, ProcessingResponse, ProtoStruct } from '../../../src/extproc/messages.js';
import { Metrics } from '../../../src/metrics/metrics.js';
import { LoadTracker } from '../../../src/picker/load-tracker.js';
import { requestBody, requestHeaders, responseBody, responseHeaders as envoyResponseHeaders } from '../../support/envoy-messages.js';
import type { ReplyAttributes } from '../../support/envoy-messages.js';
import { assertSameBytes, sequencedText } from '../../support/sequenced-bytes.js';
import { registryValue } from '../../support/prometheus.js';
import { waitUntil } from '../../support/wait-until.js';

// ── fixtures ──────────────────────────────────────────────────────────────────────────────────

const MODEL = 'llama-3-8b';
const A = '10.0.0.1:8000';
const B = '10.0.0.2:8000';
const C = '10.0.0.3:8000';
const LIMIT = 64 * 1024;
const T0 = Date.UTC(2025, 0, 1);

/** Time stands still: quarantines last for the whole test. */
const frozenClock: Clock = { now: () => T0, setTimer: () => ({ cancel: () => undefined }) };

function ready(address: string): ObservedEndpoint {
  return { id: address, address, state: 'Ready', reason: '' };
}

const FLEET: ObservedPool[] = [
  { name: 'llama', models: [MODEL], endpoints: [ready(A), ready(B), ready(C)] },
  {
    name: 'phi',
    models: ['phi-3'],
    endpoints: [{ id: 'phi-0', address: '10.0.1.1:8000', state: 'Starting', reason: 'ContainerCreating' }],
  },
];

interface Harness {
  store: EndpointStore;
  load: LoadTracker;
  metrics: Metrics;
  outcomes: OutcomeSink;
  processor(): RequestProcessor;
}

/** The sinks app.ts composes, on this test's metrics and store (no tracing, no active checks). */
function outcomeSinks(metrics: Metrics, store: EndpointStore): OutcomeSink {
  return composeSinks([metricsSink(metrics), logSink(pino({ level: 'silent' }), new LogThrottle()), healthSink({ store })]);
}

function harness(
  options: {
    fleet?: ObservedPool[];
    fallbacks?: number;
    threshold?: number;
    pool?: string;
    destinationFormat?: DestinationFormat;
    injectsStreamUsage?: boolean;
    /** Envoy's access-log entries of broken streams; absent = breaks are not judged. */
    streamEnds?: StreamEndReports;
    /** How long a break waits for its entry. */
    waitMs?: number;
  } = {},
): Harness {
  const store = new EndpointStore(['static'], { threshold: options.threshold ?? 2, baseMs: 10_000, maxMs: 60_000 }, frozenClock);
  store.replaceAll('static', options.fleet ?? FLEET);
  store.markSynced('static');
  const load = new LoadTracker();
  // random() = 0 for every endpoint: equal loads keep configuration order, so primaries are predictable.
  const routing = new StoreRouting(store, load, {
    fallbacks: options.fallbacks ?? 2,
    random: () => 0,
    ...(options.pool === undefined ? {} : { pool: options.pool }),
  });
  const metrics = new Metrics({ processMetrics: false });
  const logger = pino({ level: 'silent' });
  const reports = options.streamEnds;
  const outcomes =
    reports === undefined
      ? outcomeSinks(metrics, store)
      : judgedBreaks(outcomeSinks(metrics, store), {
          reports,
          waitMs: options.waitMs ?? 60_000,
          judged: (signal) => metrics.midStreamBreakJudged(signal),
        });
  return {
    store,
    load,
    metrics,
    outcomes,
    processor: () =>
      new RequestProcessor({
        routing,
        models: new ServedModels(store, options.pool),
        outcomes,
        logger,
        maxRequestBodyBytes: LIMIT,
        maxInspectedBodyBytes: LIMIT,
        destinationFormat: options.destinationFormat ?? 'list',
        injectsStreamUsage: () => options.injectsStreamUsage === true,
      }),
  };
}

// ── message builders (shapes of messages.ts; values in raw_value like Envoy sends them) ────────

const POST_CHAT = { ':method': 'POST', ':path': '/v1/chat/completions', 'content-type': 'application/json', 'x-request-id': 'req-1' };

const VIA_UPSTREAM: ReplyAttributes = { details: 'via_upstream', flags: 0, upstream: A };

/** `attrs: null` sends no attributes at all (a filter configured without response_attributes). */
function responseHeaders(
  status: number,
  pairs: Record<string, string>,
  attrs: ReplyAttributes | null = VIA_UPSTREAM,
  endOfStream = false,
): ProcessingRequest {
  return envoyResponseHeaders(status, pairs, attrs, endOfStream);
}

const SSE = { 'content-type': 'text/event-stream' };
const DUPLEX = { request_body_mode: 'FULL_DUPLEX_STREAMED', response_body_mode: 'FULL_DUPLEX_STREAMED' } as const;
const JSON_TYPE = { 'content-type': 'application/json' };
const CHUNK = 'data: {"choices":[{"delta":{"content":"Hel"}}]}\n\n';
const DONE = 'data: [DONE]\n\n';

// Envoy's UF+URX local reply after every attempt was refused.
const UF = 0x20;
const URX = 0x8000;
const ALL_REFUSED: ReplyAttributes = {
  details: 'upstream_reset_before_response_started{remote_connection_failure|delayed_connect_error:_Connection_refused}',
  flags: UF | URX,
  upstream: C,
};

// ── reading replies ─────────────────────────────────────────────────────────────────────────

/** Sends one message and returns the single reply Envoy must get. */
function send(processor: RequestProcessor, message: ProcessingRequest): ProcessingResponse {
  const replies = processor.process(message);
  assert.equal(replies.length, 1, `exactly one reply to ${message.request ?? '?'}`);
  return replies[0];
}

/** Header mutation as a plain map, checking every value is overwrite-only raw_value (what Envoy reads). */
function setHeaders(mutation: HeaderMutation | undefined): Record<string, string> {
  const out: Record<string, string> = {};
  for (const option of mutation?.set_headers ?? []) {
    assert.equal(option.header.value, undefined, `${option.header.key}: only raw_value may be set`);
    assert.ok(option.header.raw_value instanceof Buffer, `${option.header.key}: raw_value is bytes`);
    assert.deepEqual(option.append, { value: false }, `${option.header.key}: overwrite, never append`);
    out[option.header.key] = option.header.raw_value.toString('latin1');
  }
  return out;
}

interface ErrorBody {
  error: { message: string; type: string; code: string; param: null; request_id?: string; [key: string]: unknown };
}

function errorBody(body: Buffer | undefined): ErrorBody {
  assert.ok(body !== undefined, 'a body is set');
  const parsed = JSON.parse(body.toString('utf8')) as ErrorBody;
  assert.equal(typeof parsed.error.message, 'string');
  return parsed;
}

/** An immediate response as the client sees it. */
function immediate(reply: ProcessingResponse): {
  status: number;
  headers: Record<string, string>;
  body: Buffer;
  details: string | undefined;
} {
  const im = reply.immediate_response;
  assert.ok(im !== undefined, `expected an immediate response, got ${JSON.stringify(Object.keys(reply))}`);
  assert.ok(im.body !== undefined);
  return { status: im.status.code, headers: setHeaders(im.headers), body: im.body, details: im.details };
}

const attempts = (metrics: Metrics, labels: Record<string, string>): Promise<number> =>
  registryValue(metrics.registry, 'llm_extproc_upstream_attempts_total', labels);
const requests = (metrics: Metrics, labels: Record<string, string>): Promise<number> =>
  registryValue(metrics.registry, 'llm_extproc_requests_total', labels);

function stateOf(h: Harness, address: string): EndpointState | undefined {
  return h.store.endpointsAt(address)[0]?.state;
}

/** Headers + body for `model`; returns the body reply. */
function route(
  processor: RequestProcessor,
  body: object = { model: MODEL, messages: [{ role: 'user', content: 'hi' }] },
): ProcessingResponse {
  assert.deepEqual(send(processor, requestHeaders(POST_CHAT)), { request_headers: { response: {} } });
  return send(processor, requestBody(body));
}

// ── request path ────────────────────────────────────────────────────────────────────────────

describe('RequestProcessor: request path', () => {
  it('request headers → CONTINUE, waiting for the body', () => {
    const h = harness();
    const reply = send(h.processor(), requestHeaders(POST_CHAT));
    assert.deepEqual(reply, { request_headers: { response: {} } });
  });

  it('the body picks endpoints: the primary in the destination header, the whole list in envoy.lb metadata', () => {
    const h = harness();
    const p = h.processor();
    send(p, requestHeaders({ ...POST_CHAT, 'x-gateway-destination-endpoint': '6.6.6.6:80' }));
    const reply = send(p, requestBody({ model: MODEL, messages: [] }));
    const expected = `${A},${B},${C}`;
    assert.deepEqual(
      setHeaders(reply.request_body?.response?.header_mutation)['x-gateway-destination-endpoint'],
      A,
      'overwrites what the client sent',
    );
    assert.deepEqual(reply.dynamic_metadata, {
      fields: { 'envoy.lb': { structValue: { fields: { 'x-gateway-destination-endpoint': { stringValue: expected } } } } },
    });
    assert.equal(reply.request_body?.response?.status, undefined, 'CONTINUE: the body goes upstream untouched');
    assert.equal(reply.request_body?.response?.body_mutation, undefined);
    assert.equal(h.load.inFlight(A), 1, 'the primary carries the load');
    assert.equal(h.load.inFlight(B), 0);
  });

  const destinationCases: ReadonlyArray<{ name: string; endpoints: ObservedEndpoint[]; fallbacks: number; expected: string }> = [
    { name: 'one ready endpoint is repeated to fill the retry budget', endpoints: [ready(A)], fallbacks: 2, expected: `${A},${A},${A}` },
    { name: 'two ready endpoints alternate', endpoints: [ready(A), ready(B)], fallbacks: 2, expected: `${A},${B},${A}` },
    { name: 'no fallbacks: the primary only', endpoints: [ready(A), ready(B)], fallbacks: 0, expected: A },
    {
      name: 'not-ready endpoints are never handed out',
      endpoints: [{ ...ready(A), state: 'NotReady', reason: 'probe' }, ready(B)],
      fallbacks: 1,
      expected: `${B},${B}`,
    },
  ];
  for (const c of destinationCases) {
    it(`destinations: ${c.name}`, () => {
      const h = harness({ fleet: [{ name: 'llama', models: [MODEL], endpoints: c.endpoints }], fallbacks: c.fallbacks });
      const reply = route(h.processor());
      assert.equal(
        reply.dynamic_metadata?.fields?.['envoy.lb']?.structValue?.fields?.['x-gateway-destination-endpoint']?.stringValue,
        c.expected,
      );
      assert.equal(setHeaders(reply.request_body?.response?.header_mutation)['x-gateway-destination-endpoint'], c.expected.split(',')[0]);
    });
  }

  it('a second concurrent request goes to the least loaded endpoint first', () => {
    const h = harness();
    const first = route(h.processor());
    const second = route(h.processor());
    const primary = (reply: ProcessingResponse): string | undefined =>
      setHeaders(reply.request_body?.response?.header_mutation)['x-gateway-destination-endpoint']?.split(',')[0];
    assert.equal(primary(first), A);
    assert.equal(primary(second), B);
  });

  it('a buffered body without end_of_stream (trailers follow) is whole: routed at the body step', () => {
    const h = harness();
    const p = h.processor();
    send(p, requestHeaders(POST_CHAT));
    const reply = send(p, requestBody({ model: MODEL, messages: [] }, false));
    assert.equal(setHeaders(reply.request_body?.response?.header_mutation)['x-gateway-destination-endpoint'], A);
    assert.deepEqual(send(p, { request: 'request_trailers', request_trailers: {} }), { request_trailers: {} });
  });

  it("BUFFERED_PARTIAL: a first part of a larger body → 413 naming Envoy's buffer", () => {
    const h = harness();
    const p = h.processor();
    send(p, { ...requestHeaders(POST_CHAT), protocol_config: { request_body_mode: 'BUFFERED_PARTIAL', response_body_mode: 'STREAMED' } });
    const text = JSON.stringify({ model: MODEL, messages: [{ role: 'user', content: 'x'.repeat(100) }] });
    const reply = immediate(send(p, requestBody(text.slice(0, 40), false)));
    assert.equal(reply.status, 413);
    assert.match(errorBody(reply.body).error.message, /larger than Envoy's buffer/);
  });

  const rejections: ReadonlyArray<{
    name: string;
    body: string | object;
    status: number;
    code: string;
    check?: (e: ErrorBody, headers: Record<string, string>) => void;
  }> = [
    {
      name: 'unknown model → 404',
      body: { model: 'gpt-9' },
      status: 404,
      code: 'model_not_found',
      check: (e) => assert.equal(e.error.model, 'gpt-9'),
    },
    {
      name: 'model with no ready replica → 503 with Retry-After by replica state',
      body: { model: 'phi-3' },
      status: 503,
      code: 'no_ready_replica',
      check: (e, headers) => {
        assert.equal(headers['retry-after'], '15', 'a starting replica takes a while');
        assert.deepEqual(e.error.replicas, {
          ready: 0,
          pending: 0,
          starting: 1,
          not_ready: 0,
          crash_loop: 0,
          quarantined: 0,
          terminating: 0,
        });
        assert.match(e.error.message, /ContainerCreating/);
      },
    },
    { name: 'invalid JSON → 400', body: '{"model": "llama-3-8b",', status: 400, code: 'invalid_json' },
    { name: 'JSON array → 400', body: '[]', status: 400, code: 'invalid_json' },
    { name: 'no model → 400', body: { messages: [] }, status: 400, code: 'missing_model', check: (e) => assert.equal(e.error.param, null) },
    { name: 'empty model → 400', body: { model: '' }, status: 400, code: 'invalid_model' },
    { name: 'empty body → 400', body: '', status: 400, code: 'missing_body' },
  ];
  for (const c of rejections) {
    it(`${c.name} as an immediate JSON response`, async () => {
      const h = harness();
      const p = h.processor();
      send(p, requestHeaders(POST_CHAT));
      const reply = immediate(send(p, requestBody(c.body)));
      assert.equal(reply.status, c.status);
      assert.equal(reply.details, `llm_extproc_${c.code}`);
      assert.equal(reply.headers['content-type'], 'application/json');
      assert.equal(reply.headers['content-length'], String(reply.body.length));
      assert.equal(reply.headers['x-llm-extproc-error'], c.code);
      const body = errorBody(reply.body);
      assert.equal(body.error.code, c.code);
      assert.equal(body.error.request_id, 'req-1', 'the request id is echoed for support');
      c.check?.(body, reply.headers);
      assert.equal(await requests(h.metrics, { result: c.code }), 1);
      assert.equal(await registryValue(h.metrics.registry, 'llm_extproc_upstream_attempts_total'), 0, 'nothing went upstream');
      p.finish({ kind: 'half-closed' });
      assert.equal(h.load.inFlight(A), 0);
    });
  }

  it('GET /v1/models with end_of_stream on the headers → 200 model list', async () => {
    const h = harness();
    const reply = immediate(send(h.processor(), requestHeaders({ ':method': 'GET', ':path': '/v1/models?limit=5' }, true)));
    assert.equal(reply.status, 200);
    assert.equal(reply.headers['content-type'], 'application/json');
    assert.equal(reply.headers['content-length'], String(reply.body.length));
    assert.deepEqual(JSON.parse(reply.body.toString()), {
      object: 'list',
      data: [
        { id: MODEL, object: 'model', created: 0, owned_by: 'llm-extproc' },
        { id: 'phi-3', object: 'model', created: 0, owned_by: 'llm-extproc' },
      ],
    });
    assert.equal(await requests(h.metrics, { result: 'ok' }), 1);
  });

  const bodiless: ReadonlyArray<{ method: string; path: string; status: number; code: string }> = [
    { method: 'POST', path: '/v1/chat/completions', status: 400, code: 'missing_body' },
    { method: 'GET', path: '/v1/chat/completions', status: 405, code: 'method_not_allowed' },
    { method: 'DELETE', path: '/v1/models', status: 405, code: 'method_not_allowed' },
  ];
  for (const c of bodiless) {
    it(`${c.method} ${c.path} without a body → ${c.status} ${c.code}`, () => {
      const h = harness();
      const reply = immediate(send(h.processor(), requestHeaders({ ':method': c.method, ':path': c.path }, true)));
      assert.equal(reply.status, c.status);
      assert.equal(errorBody(reply.body).error.code, c.code);
      if (c.status === 405) assert.equal(reply.headers['allow'], 'POST');
    });
  }

  it('content-length over the limit → 413 at the headers step', () => {
    const h = harness();
    const reply = immediate(send(h.processor(), requestHeaders({ ...POST_CHAT, 'content-length': String(LIMIT + 1) })));
    assert.equal(reply.status, 413);
    const body = errorBody(reply.body);
    assert.equal(body.error.code, 'body_too_large');
    assert.equal(body.error.limit_bytes, LIMIT);
    assert.match(body.error.message, new RegExp(`${LIMIT + 1} bytes exceeds the limit of ${LIMIT} bytes`));
  });

  it('content-length at the limit is accepted', () => {
    const h = harness();
    assert.deepEqual(send(h.processor(), requestHeaders({ ...POST_CHAT, 'content-length': String(LIMIT) })), {
      request_headers: { response: {} },
    });
  });

  it('a body that grows past the limit without content-length → 413 at the body step', () => {
    const h = harness();
    const p = h.processor();
    // Full duplex streams the body in chunks; we collect them (no reply) until the limit is passed.
    assert.deepEqual(p.process({ ...requestHeaders(POST_CHAT), protocol_config: DUPLEX }), []);
    assert.deepEqual(p.process(requestBody('x'.repeat(LIMIT), false)), []);
    assert.equal(immediate(send(p, requestBody('y', false))).status, 413);
  });
});

// ── response path ───────────────────────────────────────────────────────────────────────────

describe('RequestProcessor: how streams end (llm-d stream and running series)', () => {
  it("each stream is counted by the gRPC status it closed with, in Go's names; running requests and request sizes by the model asked for and the model sent as", async () => {
    const h = harness();
    const ends = [
      { kind: 'half-closed' },
      { kind: 'released' },
      { kind: 'cancelled' },
      { kind: 'error', error: new Error('oversized message'), code: 'RESOURCE_EXHAUSTED' },
      { kind: 'error', error: new Error('processor threw'), code: 'INTERNAL' },
      { kind: 'error', error: new Error('socket reset') },
    ] as const;
    const open = ends.map(() => {
      const p = h.processor();
      route(p);
      return p;
    });
    const running = { model_name: MODEL, target_model_name: MODEL };
    assert.equal(await registryValue(h.metrics.registry, 'llm_d_epp_request_running', running), ends.length);
    // Each body's size as sent, counted when routed.
    const bodyBytes = Buffer.byteLength(JSON.stringify({ model: MODEL, messages: [{ role: 'user', content: 'hi' }] }));
    assert.equal(await registryValue(h.metrics.registry, 'llm_d_epp_request_size_bytes_sum', running), ends.length * bodyBytes);
    for (const [i, end] of ends.entries()) open[i].finish(end);
    const streams = (code: string): Promise<number> => registryValue(h.metrics.registry, 'llm_d_epp_extproc_streams_total', { code });
    assert.equal(await streams('OK'), 2);
    assert.equal(await streams('Canceled'), 1);
    assert.equal(await streams('ResourceExhausted'), 1);
    assert.equal(await streams('Internal'), 1);
    assert.equal(await streams('Unknown'), 1, 'a transport failure sends no status');
    assert.equal(await registryValue(h.metrics.registry, 'llm_d_epp_extproc_stream_duration_seconds_count'), ends.length);
    assert.equal(await registryValue(h.metrics.registry, 'llm_d_epp_request_running', running), 0);
  });
});

describe("RequestProcessor: llm-d's response size and streaming ITL", () => {
  const asIs = { model_name: MODEL, target_model_name: MODEL };

  it('a whole stream: its body bytes as the model server sent them, and one gap per non-empty chunk after the first', async () => {
    const h = harness();
    const p = h.processor();
    route(p, { model: MODEL, stream: true });
    send(p, responseHeaders(200, SSE));
    const chunks = [CHUNK, CHUNK, CHUNK, DONE];
    const before = performance.now();
    for (const chunk of chunks) send(p, responseBody(chunk, false));
    send(p, responseBody('', true)); // an empty last message is no chunk of the answer (llm-d skips it too)
    const elapsed = (performance.now() - before) / 1e3;
    const value = (name: string): Promise<number> => registryValue(h.metrics.registry, name, asIs);
    assert.equal(await value('llm_d_epp_response_size_bytes_sum'), Buffer.byteLength(chunks.join('')));
    assert.equal(await value('llm_d_epp_response_size_bytes_count'), 1);
    assert.equal(await value('llm_d_epp_request_streaming_itl_seconds_count'), chunks.length - 1);
    const gaps = await value('llm_d_epp_request_streaming_itl_seconds_sum');
    assert.ok(gaps >= 0 && gaps <= elapsed, `the gaps (${gaps} s) lie within the ${elapsed} s the chunks took`);
  });

  it('a JSON answer: its size, no ITL', async () => {
    const h = harness();
    const p = h.processor();
    route(p);
    send(p, responseHeaders(200, JSON_TYPE));
    const body = '{"id":"chatcmpl-1","choices":[]}';
    send(p, responseBody(body, true));
    assert.equal(await registryValue(h.metrics.registry, 'llm_d_epp_response_size_bytes_sum', asIs), Buffer.byteLength(body));
    assert.equal(await registryValue(h.metrics.registry, 'llm_d_epp_request_streaming_itl_seconds_count', asIs), 0);
  });

  it('a stream cancelled or cut short adds to neither (only whole answers count, as for the other request series)', async () => {
    const h = harness();
    const cancelled = h.processor();
    route(cancelled, { model: MODEL, stream: true });
    send(cancelled, responseHeaders(200, SSE));
    send(cancelled, responseBody(CHUNK, false));
    send(cancelled, responseBody(CHUNK, false));
    cancelled.finish({ kind: 'cancelled' });
    const cut = h.processor();
    route(cut, { model: MODEL, stream: true });
    send(cut, responseHeaders(200, SSE));
    send(cut, responseBody(CHUNK, false));
    send(cut, responseBody(CHUNK, true)); // ended without [DONE]: stream_incomplete
    assert.equal(await registryValue(h.metrics.registry, 'llm_d_epp_response_size_bytes_count', asIs), 0);
    assert.equal(await registryValue(h.metrics.registry, 'llm_d_epp_request_streaming_itl_seconds_count', asIs), 0);
  });
});

describe('RequestProcessor: successful responses', () => {
  it('SSE: headers and chunks CONTINUE; [DONE] records a success', async () => {
    const h = harness();
    const p = h.processor();
    route(p, { model: MODEL, stream: true });
    assert.deepEqual(send(p, responseHeaders(200, SSE)), { response_headers: { response: {} } });
    assert.deepEqual(send(p, responseBody(CHUNK, false)), { response_body: { response: {} } });
    assert.deepEqual(send(p, responseBody(DONE, true)), { response_body: { response: {} } });
    assert.equal(await attempts(h.metrics, { endpoint: A, outcome: 'success' }), 1);
    assert.equal(await attempts(h.metrics, { outcome: 'failure' }), 0);
    assert.equal(await requests(h.metrics, { model: MODEL, result: 'ok' }), 1);
    p.finish({ kind: 'half-closed' });
    assert.equal(await requests(h.metrics, {}), 1, 'counted once, not again at finish');
  });

  it('SSE with a content-length: the header is removed (a body may be appended)', () => {
    const h = harness();
    const p = h.processor();
    route(p);
    const reply = send(p, responseHeaders(200, { ...SSE, 'content-length': '120' }));
    assert.deepEqual(reply.response_headers?.response?.header_mutation?.remove_headers, ['content-length']);
  });

  it('SSE split mid-event across chunks still completes', async () => {
    const h = harness();
    const p = h.processor();
    route(p);
    send(p, responseHeaders(200, SSE));
    const whole = CHUNK + DONE;
    for (let i = 0; i < whole.length; i += 5) send(p, responseBody(whole.slice(i, i + 5), false));
    send(p, responseBody('', true));
    assert.equal(await requests(h.metrics, { result: 'ok' }), 1);
  });

  it('JSON 200: the body is held (BUFFERED_PARTIAL) and a valid body is a success', async () => {
    const h = harness();
    const p = h.processor();
    route(p);
    const headersReply = send(p, responseHeaders(200, JSON_TYPE));
    assert.deepEqual(headersReply, { response_headers: { response: {} }, mode_override: { response_body_mode: 'BUFFERED_PARTIAL' } });
    assert.deepEqual(send(p, responseBody('{"id":"chatcmpl-1","choices":[]}', true)), { response_body: { response: {} } });
    assert.equal(await attempts(h.metrics, { endpoint: A, outcome: 'success' }), 1);
  });

  it('JSON that Envoy did not hold (partial chunk first) passes through, and a broken one is never recorded as a success', async () => {
    const h = harness();
    const p = h.processor();
    route(p);
    send(p, responseHeaders(200, JSON_TYPE));
    assert.deepEqual(send(p, responseBody('{"id":"chatcmpl-1","choices":[', false)), { response_body: { response: {} } });
    assert.deepEqual(send(p, responseBody('broken', true)), { response_body: { response: {} } });
    assert.equal(await requests(h.metrics, { result: 'truncated_response' }), 1);
    assert.equal(await attempts(h.metrics, { endpoint: A, outcome: 'failure', reason: 'truncated_response' }), 1);
  });

  it('a response served by a fallback blames the primary (connect failure) and credits the fallback', async () => {
    const h = harness();
    const p = h.processor();
    route(p);
    send(p, responseHeaders(200, JSON_TYPE, { details: 'via_upstream', flags: 0, upstream: B }));
    send(p, responseBody('{"ok":true}', true));
    assert.equal(await attempts(h.metrics, { endpoint: A, outcome: 'failure', reason: 'upstream_connect_failed' }), 1);
    assert.equal(await attempts(h.metrics, { endpoint: B, outcome: 'success' }), 1);
    assert.equal(await attempts(h.metrics, { endpoint: C }), 0, 'the endpoint after the one that served is not touched');
  });

  it('repeated fallback service quarantines the primary after the threshold', () => {
    const h = harness({ threshold: 2 });
    for (let i = 0; i < 2; i++) {
      const p = h.processor();
      route(p);
      send(p, responseHeaders(200, JSON_TYPE, { details: 'via_upstream', flags: 0, upstream: B }));
      send(p, responseBody('{}', true));
      p.finish({ kind: 'half-closed' });
    }
    assert.equal(stateOf(h, A), 'Quarantined');
    assert.equal(stateOf(h, B), 'Ready');
  });

  it('a 204 with end_of_stream on the headers is a success', async () => {
    const h = harness();
    const p = h.processor();
    route(p);
    assert.deepEqual(send(p, responseHeaders(204, {}, VIA_UPSTREAM, true)), { response_headers: { response: {} } });
    assert.equal(await attempts(h.metrics, { endpoint: A, outcome: 'success' }), 1);
  });
});

describe('RequestProcessor: broken responses', () => {
  it('SSE ending without its terminator gets an SSE error event appended to the last chunk', async () => {
    const h = harness();
    const p = h.processor();
    route(p);
    send(p, responseHeaders(200, SSE));
    send(p, responseBody(CHUNK, false));
    const last = 'data: {"choices":[{"delta":{"content":"lo"}}]}\n\n';
    const reply = send(p, responseBody(last, true));
    const body = reply.response_body?.response?.body_mutation?.body;
    assert.ok(body !== undefined, 'the last chunk is replaced');
    const text = body.toString('utf8');
    assert.ok(text.startsWith(last), 'the original chunk is kept');
    const appended = /^data: (\{.*\})\n\n$/.exec(text.slice(last.length));
    assert.ok(appended !== null, `one SSE data event appended: ${JSON.stringify(text.slice(last.length))}`);
    const event = JSON.parse(appended[1]) as ErrorBody;
    assert.equal(event.error.code, 'stream_incomplete');
    assert.equal(event.error.type, 'upstream_error');
    assert.equal(event.error.request_id, 'req-1');
    assert.equal(reply.response_body?.response?.header_mutation, undefined, 'status line already sent: no header changes');
    assert.equal(await attempts(h.metrics, { endpoint: A, outcome: 'failure', reason: 'stream_incomplete' }), 1);
    assert.equal(await requests(h.metrics, { result: 'stream_incomplete' }), 1);
    assert.equal(stateOf(h, A), 'Ready', 'a bad answer does not quarantine');
  });

  it('SSE whose last chunk lacks the blank line gets the event on a fresh event boundary', () => {
    const h = harness();
    const p = h.processor();
    route(p);
    send(p, responseHeaders(200, SSE));
    const reply = send(p, responseBody('data: {"x":1}', true));
    const text = reply.response_body?.response?.body_mutation?.body?.toString('utf8') ?? '';
    assert.match(text, /^data: \{"x":1\}\n\ndata: \{"error":\{.*"code":"stream_incomplete".*\}\}\n\n$/);
  });

  it('an upstream SSE error event passes through untouched and counts as a failure', async () => {
    const h = harness();
    const p = h.processor();
    route(p);
    send(p, responseHeaders(200, SSE));
    const reply = send(p, responseBody('data: {"error":{"message":"CUDA out of memory","code":500}}\n\n', true));
    assert.deepEqual(reply, { response_body: { response: {} } });
    assert.equal(await attempts(h.metrics, { endpoint: A, outcome: 'failure', reason: 'upstream_error_event' }), 1);
  });

  it('truncated JSON → :status 502 and a truncated_response JSON body', async () => {
    const h = harness();
    const p = h.processor();
    route(p);
    send(p, responseHeaders(200, JSON_TYPE));
    const reply = immediate(send(p, responseBody('{"id":"chatcmpl-1","choices":[{"message":{"content":"Hel', true)));
    assert.equal(reply.status, 502);
    assert.equal(reply.headers['content-type'], 'application/json');
    assert.equal(reply.headers['content-length'], String(reply.body.length));
    const parsed = errorBody(reply.body);
    assert.equal(parsed.error.code, 'truncated_response');
    assert.match(parsed.error.message, /inside a JSON string/);
    assert.equal(await attempts(h.metrics, { endpoint: A, outcome: 'failure', reason: 'truncated_response' }), 1);
  });

  it('upstream 502 text/html → an immediate JSON upstream_error in place of the answer', async () => {
    const h = harness();
    const p = h.processor();
    route(p);
    const reply = immediate(send(p, responseHeaders(502, { 'content-type': 'text/html', 'transfer-encoding': 'chunked' })));
    assert.equal(reply.status, 502);
    assert.equal(reply.headers['content-type'], 'application/json');
    assert.equal(reply.details, 'llm_extproc_upstream_error');
    const body = errorBody(reply.body);
    assert.equal(body.error.code, 'upstream_error');
    assert.equal(body.error.upstream_status, 502);
    assert.match(body.error.message, /text\/html/);
    assert.equal(await attempts(h.metrics, { endpoint: A, outcome: 'failure', reason: 'upstream_error' }), 1);
  });

  it('upstream 404 text/plain keeps its status but gets a JSON body; the replica is not blamed', async () => {
    const h = harness();
    const p = h.processor();
    route(p);
    const reply = immediate(send(p, responseHeaders(404, { 'content-type': 'text/plain' })));
    assert.equal(reply.status, 404);
    assert.equal(errorBody(reply.body).error.code, 'upstream_error');
    assert.equal(await attempts(h.metrics, { endpoint: A, outcome: 'failure' }), 0);
  });

  it('upstream 500 JSON passes through and counts as a failure when its body ends', async () => {
    const h = harness();
    const p = h.processor();
    route(p);
    assert.deepEqual(send(p, responseHeaders(500, JSON_TYPE)), { response_headers: { response: {} } });
    assert.equal(await requests(h.metrics, {}), 0, 'not decided before the body ends');
    assert.deepEqual(send(p, responseBody('{"error":{"message":"boom"}}', true)), { response_body: { response: {} } });
    assert.equal(await attempts(h.metrics, { endpoint: A, outcome: 'failure', reason: 'upstream_500' }), 1);
    assert.equal(await requests(h.metrics, { result: 'upstream_500' }), 1);
    assert.equal(stateOf(h, A), 'Ready');
  });

  it('upstream 400 JSON passes through and does not blame the replica', async () => {
    const h = harness();
    const p = h.processor();
    route(p);
    send(p, responseHeaders(400, JSON_TYPE));
    send(p, responseBody('{"error":{"message":"max_tokens too large"}}', true));
    assert.equal(await attempts(h.metrics, { endpoint: A, outcome: 'failure' }), 0);
    assert.equal(await requests(h.metrics, { result: 'upstream_400' }), 1);
  });
});

describe('RequestProcessor: Envoy local replies', () => {
  it('every replica refused (UF+URX) → all_replicas_failed JSON, every endpoint blamed', async () => {
    const h = harness();
    const p = h.processor();
    route(p);
    const reply = immediate(send(p, responseHeaders(503, { 'content-type': 'text/plain' }, ALL_REFUSED)));
    assert.equal(reply.status, 503);
    assert.equal(reply.headers['retry-after'], '5');
    const body = errorBody(reply.body);
    assert.equal(body.error.code, 'all_replicas_failed');
    assert.equal(body.error.replicas_tried, 3);
    assert.equal(body.error.model, MODEL);
    assert.match(body.error.message, /connection refused/);
    for (const address of [A, B, C])
      assert.equal(await attempts(h.metrics, { endpoint: address, outcome: 'failure', reason: 'all_replicas_failed' }), 1, address);
    assert.equal(await requests(h.metrics, { result: 'all_replicas_failed' }), 1);
  });

  it('after the threshold the refused endpoints are quarantined and the next request gets no_ready_replica', () => {
    const h = harness({ threshold: 2 });
    for (let i = 0; i < 2; i++) {
      const p = h.processor();
      route(p);
      send(p, responseHeaders(503, { 'content-type': 'text/plain' }, ALL_REFUSED));
      p.finish({ kind: 'half-closed' });
    }
    assert.deepEqual(
      [A, B, C].map((a) => stateOf(h, a)),
      ['Quarantined', 'Quarantined', 'Quarantined'],
    );
    const p = h.processor();
    send(p, requestHeaders(POST_CHAT));
    const reply = immediate(send(p, requestBody({ model: MODEL })));
    assert.equal(reply.status, 503);
    assert.equal(reply.headers['retry-after'], '5');
    const body = errorBody(reply.body);
    assert.equal(body.error.code, 'no_ready_replica');
    assert.equal((body.error.replicas as Record<string, number>).quarantined, 3);
  });

  it('a single replica that refused → upstream_connect_failed', async () => {
    const h = harness({ fleet: [{ name: 'llama', models: [MODEL], endpoints: [ready(A)] }] });
    const p = h.processor();
    route(p);
    const body = errorBody(immediate(send(p, responseHeaders(503, {}, { ...ALL_REFUSED, upstream: A }))).body);
    assert.equal(body.error.code, 'upstream_connect_failed');
    assert.equal(body.error.replicas_tried, 1);
    assert.equal(await attempts(h.metrics, { endpoint: A, outcome: 'failure' }), 1);
  });

  it('one refused attempt without retries (UF, no URX) blames only the endpoint Envoy tried', async () => {
    const h = harness();
    const p = h.processor();
    route(p);
    const reply = immediate(send(p, responseHeaders(503, {}, { details: ALL_REFUSED.details, flags: UF, upstream: A })));
    assert.equal(errorBody(reply.body).error.code, 'upstream_connect_failed');
    assert.equal(await attempts(h.metrics, { endpoint: A, outcome: 'failure' }), 1);
    assert.equal(await attempts(h.metrics, { endpoint: B, outcome: 'failure' }), 0);
    assert.equal(await attempts(h.metrics, { endpoint: C, outcome: 'failure' }), 0);
  });

  it("without attributes, a plain-text 503 is buffered, then classified from Envoy's text", async () => {
    const h = harness();
    const p = h.processor();
    route(p);
    const headersReply = send(p, responseHeaders(503, { 'content-type': 'text/plain' }, null));
    assert.deepEqual(headersReply, { response_headers: { response: {} }, mode_override: { response_body_mode: 'BUFFERED' } });
    const text =
      'upstream connect error or disconnect/reset before headers. retried and the latest reset reason: remote connection failure, transport failure reason: delayed connect error: 111';
    const reply = immediate(send(p, responseBody(text, true)));
    assert.equal(reply.status, 503);
    assert.equal(errorBody(reply.body).error.code, 'all_replicas_failed');
    assert.equal(await attempts(h.metrics, { outcome: 'failure', reason: 'all_replicas_failed' }), 3);
  });

  it('an upstream timeout → 504 upstream_timeout; the replica is not quarantined for it', async () => {
    const h = harness({ threshold: 1 });
    const p = h.processor();
    route(p);
    const reply = immediate(
      send(p, responseHeaders(504, { 'content-type': 'text/plain' }, { details: 'upstream_per_try_timeout', flags: 0x4, upstream: A })),
    );
    assert.equal(reply.status, 504);
    assert.equal(errorBody(reply.body).error.code, 'upstream_timeout');
    assert.equal(await attempts(h.metrics, { endpoint: A, outcome: 'failure', reason: 'upstream_timeout' }), 1);
    assert.equal(stateOf(h, A), 'Ready');
  });

  it('an upstream reset before headers → 502 upstream_reset and a reset strike for that replica', () => {
    const h = harness({ threshold: 1 });
    const p = h.processor();
    route(p);
    const reply = immediate(
      send(
        p,
        responseHeaders(503, {}, { details: 'upstream_reset_before_response_started{connection_termination}', flags: 0x40, upstream: A }),
      ),
    );
    assert.equal(reply.status, 502);
    assert.equal(errorBody(reply.body).error.code, 'upstream_reset');
    assert.equal(stateOf(h, A), 'Quarantined');
  });

  it("another filter's deliberate reply (403) passes through; no replica is blamed", async () => {
    const h = harness();
    const p = h.processor();
    route(p);
    const reply = send(p, responseHeaders(403, { 'content-type': 'text/plain' }, { details: 'ext_authz_denied', flags: 0x1000 }));
    assert.deepEqual(reply, { response_headers: { response: {} } });
    assert.equal(await registryValue(h.metrics.registry, 'llm_extproc_upstream_attempts_total'), 0);
    assert.equal(await requests(h.metrics, { result: 'local_reply_403' }), 1);
  });
});

describe('RequestProcessor: stream end and bookkeeping', () => {
  it('a stream cancelled mid-response is a stream_broken failure, never a success', async () => {
    const h = harness();
    const p = h.processor();
    route(p);
    send(p, responseHeaders(200, SSE));
    send(p, responseBody(CHUNK, false));
    p.finish({ kind: 'cancelled' });
    assert.equal(await attempts(h.metrics, { endpoint: A, outcome: 'failure', reason: 'stream_broken' }), 1);
    assert.equal(await attempts(h.metrics, { outcome: 'success' }), 0);
    assert.equal(await requests(h.metrics, { result: 'stream_broken' }), 1);
    assert.equal(stateOf(h, A), 'Ready', 'a broken stream may be the client hanging up: no quarantine');
  });

  /** Envoy's access log, streaming to us. */
  function listeningReports(): StreamEndReports {
    const reports = new StreamEndReports();
    reports.streams(1);
    return reports;
  }

  /** A stream broken after its first chunk; Envoy's entry (if any) comes with `flags` and `status`. */
  function breakStream(h: Harness): void {
    const p = h.processor();
    route(p);
    send(p, responseHeaders(200, SSE));
    send(p, responseBody(CHUNK, false));
    p.finish({ kind: 'cancelled' });
  }

  async function signals(h: Harness, signal: string): Promise<number> {
    return registryValue(h.metrics.registry, 'llm_extproc_midstream_break_signals_total', { signal });
  }

  it("Envoy's entry says the client left (DC): the cancellation cancelled_mid_stream, no attempt, no error, replica clean", async () => {
    const reports = listeningReports();
    const h = harness({ threshold: 1, streamEnds: reports });
    breakStream(h);
    reports.report({ requestId: 'req-1', status: 200, flags: RESPONSE_FLAGS.DC, codeDetails: 'via_upstream' });
    await waitUntil(async () => ((await requests(h.metrics, { result: 'cancelled_mid_stream' })) === 1 ? true : undefined), {
      description: 'the break judged',
    });
    assert.equal(await requests(h.metrics, { result: 'stream_broken' }), 0);
    assert.equal(await registryValue(h.metrics.registry, 'llm_extproc_upstream_attempts_total'), 0, 'neither failure nor success');
    assert.equal(await registryValue(h.metrics.registry, 'inference_objective_request_error_total'), 0);
    assert.equal(await registryValue(h.metrics.registry, 'inference_objective_request_total'), 1);
    assert.equal(stateOf(h, A), 'Ready', 'even with a threshold of one failure');
    assert.equal(await registryValue(h.metrics.registry, 'llm_extproc_in_flight_requests'), 0);
    assert.equal(await signals(h, 'access_log_client'), 1);
  });

  it('an HTTP/2 client that reset its stream (DR) is a cancellation too', async () => {
    const reports = listeningReports();
    const h = harness({ streamEnds: reports });
    reports.report({ requestId: 'req-1', status: 200, flags: RESPONSE_FLAGS.DR, codeDetails: 'via_upstream' });
    breakStream(h);
    await waitUntil(async () => ((await requests(h.metrics, { result: 'cancelled_mid_stream' })) === 1 ? true : undefined), {
      description: 'the entry that came first, used',
    });
  });

  it('the model server reset the stream (UC, the client had the headers): stream_broken, a failed attempt and an error, even with DC', async () => {
    const reports = listeningReports();
    const h = harness({ streamEnds: reports });
    breakStream(h);
    reports.report({
      requestId: 'req-1',
      status: 200,
      flags: RESPONSE_FLAGS.UC | RESPONSE_FLAGS.DC,
      codeDetails: 'upstream_reset_after_response_started{connection_termination}',
    });
    await waitUntil(async () => ((await requests(h.metrics, { result: 'stream_broken' })) === 1 ? true : undefined), {
      description: 'the break judged',
    });
    assert.equal(await attempts(h.metrics, { endpoint: A, outcome: 'failure', reason: 'stream_broken' }), 1);
    assert.equal(await registryValue(h.metrics.registry, 'inference_objective_request_error_total'), 1);
    assert.equal(await signals(h, 'access_log_upstream'), 1);
  });

  it("Envoy answered with its own 502 (it still held the headers): the result is that reply's code, upstream_reset", async () => {
    const reports = listeningReports();
    const h = harness({ streamEnds: reports });
    breakStream(h);
    reports.report({
      requestId: 'req-1',
      status: 502,
      flags: RESPONSE_FLAGS.UR,
      codeDetails: 'upstream_reset_after_response_started{remote_reset}',
    });
    await waitUntil(async () => ((await requests(h.metrics, { result: 'upstream_reset' })) === 1 ? true : undefined), {
      description: 'the break judged',
    });
    assert.equal(await requests(h.metrics, { result: 'stream_broken' }), 0);
    assert.equal(await attempts(h.metrics, { endpoint: A, outcome: 'failure', reason: 'stream_broken' }), 1, "still the replica's failure");
  });

  it('a broken stream is recorded (result, attempt, end) only once its entry came', async () => {
    const reports = listeningReports();
    const h = harness({ streamEnds: reports });
    breakStream(h);
    assert.equal(await requests(h.metrics, {}), 0, 'no result before the entry');
    assert.equal(await registryValue(h.metrics.registry, 'llm_extproc_in_flight_requests'), 1, 'the stream is open until judged');
    reports.report({ requestId: 'req-1', status: 200, flags: RESPONSE_FLAGS.DC, codeDetails: 'via_upstream' });
    await waitUntil(async () => ((await requests(h.metrics, {})) === 1 ? true : undefined), { description: 'the break judged' });
    assert.equal(await requests(h.metrics, { result: 'cancelled_mid_stream' }), 1);
    assert.equal(await registryValue(h.metrics.registry, 'llm_extproc_in_flight_requests'), 0);
  });

  it('no entry in time: stream_broken as without the access log, counted under signal none', async () => {
    const h = harness({ streamEnds: listeningReports(), waitMs: 20 });
    breakStream(h);
    await waitUntil(async () => ((await requests(h.metrics, { result: 'stream_broken' })) === 1 ? true : undefined), {
      description: 'the wait over',
    });
    assert.equal(await signals(h, 'none'), 1);
    assert.equal(await attempts(h.metrics, { endpoint: A, outcome: 'failure', reason: 'stream_broken' }), 1);
  });

  it('no Envoy streams its access log to us: stream_broken at once, nobody waits', async () => {
    const h = harness({ streamEnds: new StreamEndReports() });
    breakStream(h);
    assert.equal(await requests(h.metrics, { result: 'stream_broken' }), 1);
    assert.equal(await signals(h, 'none'), 1);
  });

  const cancellations: ReadonlyArray<{ name: string; steps: (p: RequestProcessor) => void; result: string }> = [
    { name: 'before routing', steps: (p) => send(p, requestHeaders(POST_CHAT)), result: 'cancelled_before_routing' },
    { name: 'while waiting for the response', steps: (p) => route(p), result: 'cancelled_before_response' },
  ];
  for (const c of cancellations) {
    it(`a stream cancelled ${c.name} records ${c.result} and no attempt`, async () => {
      const h = harness();
      const p = h.processor();
      c.steps(p);
      p.finish({ kind: 'cancelled' });
      assert.equal(await requests(h.metrics, { result: c.result }), 1);
      assert.equal(await registryValue(h.metrics.registry, 'llm_extproc_upstream_attempts_total'), 0);
    });
  }

  it('load is held until finish, and finish twice is harmless', async () => {
    const h = harness();
    const p = h.processor();
    assert.equal(await registryValue(h.metrics.registry, 'llm_extproc_in_flight_requests'), 1);
    route(p);
    send(p, responseHeaders(200, SSE));
    send(p, responseBody(DONE, true));
    assert.equal(h.load.inFlight(A), 1, 'the slot is held until the stream ends');
    p.finish({ kind: 'half-closed' });
    p.finish({ kind: 'cancelled' });
    assert.equal(h.load.inFlight(A), 0);
    assert.equal(await registryValue(h.metrics.registry, 'llm_extproc_in_flight_requests'), 0, 'not negative');
    assert.equal(await requests(h.metrics, {}), 1);
    assert.equal(await attempts(h.metrics, {}), 1, 'the success is not followed by a stream_broken');
  });

  it('a rejected request releases nothing it never took', () => {
    const h = harness();
    const busy = h.processor();
    route(busy);
    const p = h.processor();
    send(p, requestHeaders(POST_CHAT));
    immediate(send(p, requestBody({ model: 'gpt-9' })));
    p.finish({ kind: 'half-closed' });
    assert.equal(h.load.inFlight(A), 1, 'the other request still holds its slot');
  });

  it('observability mode expects no replies', () => {
    const h = harness();
    assert.deepEqual(h.processor().process({ ...requestHeaders(POST_CHAT), observability_mode: true }), []);
  });

  it('trailers are acknowledged with a reply of their own kind', () => {
    const h = harness();
    const p = h.processor();
    assert.deepEqual(p.process({ request: 'request_trailers', request_trailers: {} }), [{ request_trailers: {} }]);
    assert.deepEqual(p.process({ request: 'response_trailers', response_trailers: {} }), [{ response_trailers: {} }]);
  });

  it('unknown model names do not become metric labels (bounded cardinality)', async () => {
    const h = harness();
    for (let i = 0; i < 20; i++) {
      const p = h.processor();
      send(p, requestHeaders(POST_CHAT));
      send(p, requestBody({ model: `random-${i}` }));
      p.finish({ kind: 'half-closed' });
    }
    const data = await h.metrics.registry.getSingleMetric('llm_extproc_requests_total')?.get();
    const models = new Set(data?.values.map((v) => v.labels.model));
    assert.ok(models.size <= 1, `model labels: ${[...models].join(', ')}`);
  });
});

describe('RequestProcessor: protocol violations throw', () => {
  const violations: ReadonlyArray<{ name: string; before: ProcessingRequest[]; message: ProcessingRequest }> = [
    { name: 'a request body before the request headers', before: [], message: requestBody({ model: MODEL }) },
    { name: 'request headers twice', before: [requestHeaders(POST_CHAT)], message: requestHeaders(POST_CHAT) },
    {
      name: 'a request body after routing',
      before: [requestHeaders(POST_CHAT), requestBody({ model: MODEL })],
      message: requestBody({ model: MODEL }),
    },
    {
      name: 'a request body after the response started',
      before: [requestHeaders(POST_CHAT), requestBody({ model: MODEL }), responseHeaders(200, SSE)],
      message: requestBody('x'),
    },
    { name: 'a message of unknown type', before: [], message: {} },
  ];
  for (const c of violations) {
    it(c.name, () => {
      const h = harness();
      const p = h.processor();
      for (const message of c.before) p.process(message);
      assert.throws(
        () => p.process(c.message),
        (err: unknown) => err instanceof GatewayError && err.kind === 'internal_error',
      );
    });
  }

  it('a response body before any request headers', () => {
    const h = harness();
    assert.throws(() => h.processor().process(responseBody('x', true)), GatewayError);
  });
});

describe('RequestProcessor: answers we cannot or need not verify', () => {
  it('a whole JSON answer above maxInspectedBodyBytes (no content-length) is still validated: Envoy held all of it', async () => {
    const h = harness();
    const p = h.processor();
    route(p);
    send(p, responseHeaders(200, JSON_TYPE));
    const truncated = '{"data":"' + 'x'.repeat(LIMIT + 10);
    const reply = immediate(send(p, responseBody(truncated, true)));
    assert.equal(reply.status, 502);
    assert.equal(await attempts(h.metrics, { endpoint: A, outcome: 'failure', reason: 'truncated_response' }), 1);
  });

  it('a JSON answer declaring a content-length above the limit passes through and counts when it ends', async () => {
    const h = harness();
    const p = h.processor();
    route(p);
    const headersReply = send(p, responseHeaders(200, { ...JSON_TYPE, 'content-length': String(LIMIT + 1) }));
    assert.equal(headersReply.mode_override, undefined, 'not held');
    send(p, responseBody('{"partial":', false));
    send(p, responseBody('true}', true));
    assert.equal(await attempts(h.metrics, { endpoint: A, outcome: 'success' }), 1);
  });

  it("a JSON answer larger than Envoy's buffer that then ends without end_of_stream is unverified: neither success nor failure", async () => {
    const h = harness();
    const p = h.processor();
    route(p);
    send(p, responseHeaders(200, JSON_TYPE));
    send(p, responseBody('{"data":[1,2,3', false)); // BUFFERED_PARTIAL: the part Envoy could hold
    p.finish({ kind: 'half-closed' });
    assert.equal(await requests(h.metrics, { model: MODEL, result: 'unverified' }), 1);
    assert.equal(await attempts(h.metrics, {}), 0);
    assert.equal(h.load.inFlight(A), 0);
  });

  it('a compressed answer is not inspected (appending plain text would corrupt it)', async () => {
    const h = harness();
    const p = h.processor();
    route(p);
    assert.equal(
      send(p, responseHeaders(200, { ...SSE, 'content-encoding': 'gzip' })).response_headers?.response?.header_mutation,
      undefined,
    );
    const last = send(p, responseBody(Buffer.from([0x1f, 0x8b, 0x08, 0x00]), true));
    assert.equal(last.response_body?.response?.body_mutation, undefined, 'nothing appended');
    assert.equal(await attempts(h.metrics, { endpoint: A, outcome: 'success' }), 1);
  });

  it('a stream released at shutdown records neither success nor failure', async () => {
    const h = harness();
    const p = h.processor();
    route(p);
    send(p, responseHeaders(200, SSE));
    send(p, responseBody(CHUNK, false));
    p.finish({ kind: 'released' });
    assert.equal(await requests(h.metrics, { model: MODEL, result: 'released_at_shutdown' }), 1);
    assert.equal(await attempts(h.metrics, {}), 0);
  });

  it('requests for models we do not serve are labelled (unknown), so clients cannot mint series', async () => {
    const h = harness();
    for (const model of ['gpt-1', 'gpt-2', 'x'.repeat(10_000)]) {
      const p = h.processor();
      send(p, requestHeaders(POST_CHAT));
      send(p, requestBody({ model }));
    }
    assert.equal(await requests(h.metrics, { model: '(unknown)', result: 'model_not_found' }), 3);
    assert.doesNotMatch(await h.metrics.registry.metrics(), /gpt-1/);
  });
});

// ── every body mode ─────────────────────────────────────────────────────────────────────────

function withModes(message: ProcessingRequest, request: string, response: string, early = false): ProcessingRequest {
  return {
    ...message,
    protocol_config: {
      request_body_mode: request as 'BUFFERED',
      response_body_mode: response as 'BUFFERED',
      ...(early ? { send_body_without_waiting_for_header_response: true } : {}),
    },
  };
}

function streamedChunk(reply: ProcessingResponse, direction: 'request_body' | 'response_body'): { body: Buffer; end: boolean } {
  const streamed = reply[direction]?.response?.body_mutation?.streamed_response;
  assert.ok(streamed !== undefined, `expected a streamed_response, got ${JSON.stringify(reply)}`);
  return { body: streamed.body ?? Buffer.alloc(0), end: streamed.end_of_stream === true };
}

function metadataDestination(reply: ProcessingResponse): string | undefined {
  return reply.dynamic_metadata?.fields?.['envoy.lb']?.structValue?.fields?.['x-gateway-destination-endpoint']?.stringValue;
}

describe('RequestProcessor: full duplex', () => {
  it('holds the header reply until the body ended, then answers headers (routing) and streams the body back', () => {
    const h = harness();
    const p = h.processor();
    assert.deepEqual(p.process(withModes(requestHeaders(POST_CHAT), 'FULL_DUPLEX_STREAMED', 'FULL_DUPLEX_STREAMED')), []);
    const text = JSON.stringify({ model: MODEL, messages: [{ role: 'user', content: 'hi' }] });
    assert.deepEqual(p.process(requestBody(text.slice(0, 10), false)), []);
    assert.deepEqual(p.process(requestBody(text.slice(10, 20), false)), []);
    const replies = p.process(requestBody(text.slice(20), true));
    assert.equal(setHeaders(replies[0].request_headers?.response?.header_mutation)['x-gateway-destination-endpoint'], A);
    assert.equal(metadataDestination(replies[0]), `${A},${B},${C}`);
    const chunks = replies.slice(1).map((r) => streamedChunk(r, 'request_body'));
    assert.equal(Buffer.concat(chunks.map((c) => c.body)).toString(), text, 'the body goes back unchanged');
    assert.deepEqual(
      chunks.map((c) => c.end),
      [true],
      'the pieces collected go back as one chunk (up to 64 KiB), which ends the stream',
    );
  });

  it('splits a body chunk larger than 64 KiB into streamed chunks Envoy accepts', () => {
    const h = harness({});
    const p = new RequestProcessor({
      routing: new StoreRouting(h.store, h.load, { fallbacks: 0, random: () => 0 }),
      models: new ServedModels(h.store, undefined),
      outcomes: h.outcomes,
      logger: pino({ level: 'silent' }),
      maxRequestBodyBytes: 1 << 20,
      maxInspectedBodyBytes: LIMIT,
    });
    p.process(withModes(requestHeaders(POST_CHAT), 'FULL_DUPLEX_STREAMED', 'FULL_DUPLEX_STREAMED'));
    // Sequence-numbered text, in three body messages of different sizes (one above 64 KiB): the
    // streamed chunks must give back exactly these bytes, in order.
    const text = Buffer.from(JSON.stringify({ model: MODEL, messages: [{ role: 'user', content: sequencedText(300_000) }] }));
    const cuts = [0, 100_000, 100_017, text.length];
    const replies = cuts
      .slice(1)
      .flatMap((end, i) => p.process(requestBody(text.subarray(cuts[i], end).toString('latin1'), i === cuts.length - 2)));
    const chunks = replies.slice(1).map((r) => streamedChunk(r, 'request_body'));
    assert.ok(chunks.length >= 5);
    assert.ok(chunks.every((c) => c.body.length <= 64 * 1024));
    assert.deepEqual(
      chunks.map((c) => c.end),
      chunks.map((_, i) => i === chunks.length - 1),
    );
    assertSameBytes(Buffer.concat(chunks.map((c) => c.body)), text, 'the body streamed back');
  });

  it('request trailers end a collected body: headers, body (no end_of_stream), then the trailers reply', () => {
    const h = harness();
    const p = h.processor();
    p.process(withModes(requestHeaders(POST_CHAT), 'FULL_DUPLEX_STREAMED', 'FULL_DUPLEX_STREAMED'));
    assert.deepEqual(p.process(requestBody({ model: MODEL }, false)), []);
    const replies = p.process({ request: 'request_trailers', request_trailers: {} });
    assert.ok(replies[0].request_headers !== undefined);
    assert.equal(streamedChunk(replies[1], 'request_body').end, false);
    assert.deepEqual(replies.at(-1), { request_trailers: {} });
  });

  it('SSE passes chunk by chunk as streamed_response; a missing terminator appends the error event to the last chunk', async () => {
    const h = harness();
    const p = h.processor();
    p.process(withModes(requestHeaders(POST_CHAT), 'FULL_DUPLEX_STREAMED', 'FULL_DUPLEX_STREAMED'));
    p.process(requestBody({ model: MODEL, stream: true }));
    assert.deepEqual(send(p, responseHeaders(200, SSE, null)), { response_headers: { response: {} } });
    assert.deepEqual(streamedChunk(send(p, responseBody(CHUNK, false)), 'response_body'), { body: Buffer.from(CHUNK), end: false });
    const last = streamedChunk(send(p, responseBody(CHUNK, true)), 'response_body');
    assert.ok(last.end);
    assert.ok(last.body.toString().startsWith(CHUNK));
    assert.match(last.body.toString(), /"code":"stream_incomplete"/);
    assert.equal(await requests(h.metrics, { result: 'stream_incomplete' }), 1);
  });

  it('JSON is held whole (headers and body), then released unchanged when valid', async () => {
    const h = harness({ destinationFormat: 'single' });
    const p = h.processor();
    p.process(withModes(requestHeaders(POST_CHAT), 'FULL_DUPLEX_STREAMED', 'FULL_DUPLEX_STREAMED'));
    p.process(requestBody({ model: MODEL }));
    assert.deepEqual(p.process(responseHeaders(200, JSON_TYPE, null)), [], 'the header reply waits for the body');
    assert.deepEqual(p.process(responseBody('{"ok":', false)), []);
    const replies = p.process(responseBody('true}', true));
    assert.deepEqual(replies[0], { response_headers: { response: {} } });
    assert.equal(Buffer.concat(replies.slice(1).map((r) => streamedChunk(r, 'response_body').body)).toString(), '{"ok":true}');
    assert.equal(await attempts(h.metrics, { endpoint: A, outcome: 'success' }), 1, 'with one address handed over, the replica is known');
  });

  it('a truncated JSON answer held in full duplex becomes an immediate 502', () => {
    const h = harness();
    const p = h.processor();
    p.process(withModes(requestHeaders(POST_CHAT), 'FULL_DUPLEX_STREAMED', 'FULL_DUPLEX_STREAMED'));
    p.process(requestBody({ model: MODEL }));
    p.process(responseHeaders(200, JSON_TYPE, null));
    const reply = immediate(send(p, responseBody('{"choices":[{"message":', true)));
    assert.equal(reply.status, 502);
    assert.equal(errorBody(reply.body).error.code, 'truncated_response');
  });

  it('JSON larger than we may hold is released as it comes and counted when it ends', async () => {
    const h = harness();
    const p = h.processor();
    p.process(withModes(requestHeaders(POST_CHAT), 'FULL_DUPLEX_STREAMED', 'FULL_DUPLEX_STREAMED'));
    p.process(requestBody({ model: MODEL }));
    p.process(responseHeaders(200, JSON_TYPE, null));
    const flushed = p.process(responseBody('{"data":"' + 'x'.repeat(LIMIT), false));
    assert.deepEqual(flushed[0], { response_headers: { response: {} } });
    assert.equal(streamedChunk(flushed[1], 'response_body').end, false);
    assert.equal(streamedChunk(send(p, responseBody('"}', true)), 'response_body').end, true);
    assert.equal(await requests(h.metrics, { result: 'ok' }), 1);
  });

  for (const format of ['single', 'list'] as const) {
    it(`without attributes, Envoy's plain-text local reply is read from the body and replaced (${format})`, async () => {
      const h = harness({ destinationFormat: format });
      const p = h.processor();
      p.process(withModes(requestHeaders(POST_CHAT), 'FULL_DUPLEX_STREAMED', 'FULL_DUPLEX_STREAMED'));
      p.process(requestBody({ model: MODEL }));
      assert.deepEqual(p.process(responseHeaders(503, { 'content-type': 'text/plain' }, null)), []);
      const reply = immediate(
        send(
          p,
          responseBody(
            'upstream connect error or disconnect/reset before headers. reset reason: remote connection failure, transport failure reason: delayed connect error: 111',
            true,
          ),
        ),
      );
      assert.equal(reply.status, 503);
      assert.equal(errorBody(reply.body).error.code, 'upstream_connect_failed');
      // single: Envoy could only have tried our one address. list: a fallback may have been the one
      // that failed, so nobody is blamed on a guess.
      assert.equal(await attempts(h.metrics, { endpoint: A, outcome: 'failure' }), format === 'single' ? 1 : 0);
      assert.equal(await attempts(h.metrics, { outcome: 'failure' }), format === 'single' ? 1 : 0);
    });
  }

  it('without attributes and with fallbacks, a good answer credits no replica on a guess', async () => {
    const h = harness();
    const p = h.processor();
    p.process(withModes(requestHeaders(POST_CHAT), 'FULL_DUPLEX_STREAMED', 'FULL_DUPLEX_STREAMED'));
    p.process(requestBody({ model: MODEL, stream: true }));
    p.process(responseHeaders(200, SSE, null));
    p.process(responseBody(CHUNK + DONE, true));
    assert.equal(await requests(h.metrics, { result: 'ok' }), 1);
    assert.equal(await attempts(h.metrics, {}), 0);
  });

  it("the served endpoint comes from the gateway's -served metadata when there are no attributes", async () => {
    const h = harness();
    const p = h.processor();
    p.process(withModes(requestHeaders(POST_CHAT), 'FULL_DUPLEX_STREAMED', 'FULL_DUPLEX_STREAMED'));
    p.process(requestBody({ model: MODEL, stream: true }));
    const headers = responseHeaders(200, SSE, null);
    headers.metadata_context = {
      filter_metadata: { 'envoy.lb': { fields: { 'x-gateway-destination-endpoint-served': { stringValue: B } } } },
    };
    p.process(headers);
    p.process(responseBody(CHUNK + DONE, true));
    assert.equal(
      await attempts(h.metrics, { endpoint: A, outcome: 'failure', reason: 'upstream_connect_failed' }),
      1,
      'the primary was skipped',
    );
    assert.equal(await attempts(h.metrics, { endpoint: B, outcome: 'success' }), 1);
  });
});

describe('RequestProcessor: response trailers end the body', () => {
  it('full-duplex JSON ended by trailers is judged, released without end_of_stream, then the trailers are answered', async () => {
    const h = harness();
    const p = h.processor();
    p.process(withModes(requestHeaders(POST_CHAT), 'FULL_DUPLEX_STREAMED', 'FULL_DUPLEX_STREAMED'));
    p.process(requestBody({ model: MODEL }));
    p.process(responseHeaders(200, JSON_TYPE, null));
    p.process(responseBody('{"ok":true}', false));
    const replies = p.process({ request: 'response_trailers', response_trailers: {} });
    assert.deepEqual(replies[0], { response_headers: { response: {} } });
    assert.deepEqual(streamedChunk(replies[1], 'response_body'), { body: Buffer.from('{"ok":true}'), end: false });
    assert.deepEqual(replies[2], { response_trailers: {} });
    assert.equal(await requests(h.metrics, { result: 'ok' }), 1);
  });

  it('an SSE stream ended by trailers without its terminator is recorded as incomplete', async () => {
    const h = harness();
    const p = h.processor();
    route(p);
    send(p, responseHeaders(200, SSE));
    send(p, responseBody(CHUNK, false));
    assert.deepEqual(send(p, { request: 'response_trailers', response_trailers: {} }), { response_trailers: {} });
    assert.equal(await attempts(h.metrics, { endpoint: A, outcome: 'failure', reason: 'stream_incomplete' }), 1);
  });
});

describe('RequestProcessor: other body modes', () => {
  it('STREAMED request bodies without early sending: the header reply asks Envoy to buffer', () => {
    const h = harness();
    const p = h.processor();
    assert.deepEqual(send(p, withModes(requestHeaders(POST_CHAT), 'STREAMED', 'STREAMED')), {
      request_headers: { response: {} },
      mode_override: { request_body_mode: 'BUFFERED' },
    });
    const reply = send(p, requestBody({ model: MODEL }));
    assert.equal(setHeaders(reply.request_body?.response?.header_mutation)['x-gateway-destination-endpoint'], A);
  });

  it('STREAMED with early bodies: headers answered after the body, then one CONTINUE per chunk', () => {
    const h = harness();
    const p = h.processor();
    assert.deepEqual(p.process(withModes(requestHeaders(POST_CHAT), 'STREAMED', 'STREAMED', true)), []);
    const text = JSON.stringify({ model: MODEL });
    assert.deepEqual(p.process(requestBody(text.slice(0, 4), false)), []);
    const replies = p.process(requestBody(text.slice(4), true));
    assert.equal(replies.length, 3);
    assert.ok(replies[0].request_headers?.response?.header_mutation !== undefined);
    assert.deepEqual(replies.slice(1), [{ request_body: { response: {} } }, { request_body: { response: {} } }]);
  });

  it('BUFFERED responses: JSON validated when Envoy delivers it whole, no mode override', () => {
    const h = harness();
    const p = h.processor();
    send(p, withModes(requestHeaders(POST_CHAT), 'BUFFERED', 'BUFFERED'));
    send(p, requestBody({ model: MODEL }));
    assert.deepEqual(send(p, responseHeaders(200, JSON_TYPE, null)), { response_headers: { response: {} } });
    assert.equal(immediate(send(p, responseBody('{"broken":', true))).status, 502);
  });

  it('response body mode NONE: the answer cannot be judged and is recorded as unverified', async () => {
    const h = harness();
    const p = h.processor();
    send(p, withModes(requestHeaders(POST_CHAT), 'BUFFERED', 'NONE'));
    send(p, requestBody({ model: MODEL }));
    assert.deepEqual(send(p, responseHeaders(200, JSON_TYPE, null)), { response_headers: { response: {} } });
    assert.equal(await requests(h.metrics, { result: 'unverified' }), 1);
    assert.equal(await attempts(h.metrics, {}), 0);
  });
});

describe('RequestProcessor: destination format, subset hint and pool scope', () => {
  function subsetMessage(message: ProcessingRequest, subset: ProtoStruct['fields'] extends infer F ? F : never): ProcessingRequest {
    return { ...message, metadata_context: { filter_metadata: { 'envoy.lb.subset_hint': { fields: subset } } } };
  }

  it('single: exactly one ip:port in both header and metadata', () => {
    const h = harness({ destinationFormat: 'single' });
    const p = h.processor();
    send(p, requestHeaders(POST_CHAT));
    const reply = send(p, requestBody({ model: MODEL }));
    assert.equal(setHeaders(reply.request_body?.response?.header_mutation)['x-gateway-destination-endpoint'], A);
    assert.equal(metadataDestination(reply), A);
  });

  it('a subset hint (comma string) limits the pick to its endpoints', () => {
    const h = harness();
    const p = h.processor();
    send(p, subsetMessage(requestHeaders(POST_CHAT), { 'x-gateway-destination-endpoint-subset': { stringValue: `${C}, ${B}` } }));
    const reply = send(p, requestBody({ model: MODEL }));
    assert.equal(setHeaders(reply.request_body?.response?.header_mutation)['x-gateway-destination-endpoint'], B);
    assert.equal(metadataDestination(reply), `${B},${C},${B}`);
  });

  it('a subset hint as a list value is honoured too', () => {
    const h = harness();
    const p = h.processor();
    send(
      p,
      subsetMessage(requestHeaders(POST_CHAT), {
        'x-gateway-destination-endpoint-subset': { listValue: { values: [{ stringValue: C }] } },
      }),
    );
    const reply = send(p, requestBody({ model: MODEL }));
    assert.equal(metadataDestination(reply), `${C},${C},${C}`);
  });

  for (const [name, subset] of [
    ['an empty subset hint', { stringValue: '' }],
    ['a hint naming only unready or unknown endpoints', { stringValue: '10.0.1.1:8000,10.9.9.9:1' }],
  ] as const) {
    it(`${name} → 503 no_ready_replica JSON`, () => {
      const h = harness();
      const p = h.processor();
      send(p, subsetMessage(requestHeaders(POST_CHAT), { 'x-gateway-destination-endpoint-subset': subset }));
      const reply = immediate(send(p, requestBody({ model: MODEL })));
      assert.equal(reply.status, 503);
      assert.equal(errorBody(reply.body).error.code, 'no_ready_replica');
      assert.match(errorBody(reply.body).error.message, /subset hint/);
    });
  }

  it('pool scope: a model of another pool is not found here; the scoped pool routes', () => {
    const h = harness({ pool: 'llama' });
    const other = h.processor();
    send(other, requestHeaders(POST_CHAT));
    const reply = immediate(send(other, requestBody({ model: 'phi-3' })));
    assert.equal(reply.status, 404);
    assert.match(errorBody(reply.body).error.message, /not served by the pool llama/);
    const p = h.processor();
    send(p, requestHeaders(POST_CHAT));
    assert.equal(
      setHeaders(send(p, requestBody({ model: MODEL })).request_body?.response?.header_mutation)['x-gateway-destination-endpoint'],
      A,
    );
  });

  it('pool scope on a pool that lists no models serves any model name (an InferencePool without our annotation)', () => {
    const h = harness({ pool: 'ns/pool', fleet: [{ name: 'ns/pool', models: [], endpoints: [ready(A)] }] });
    const p = h.processor();
    send(p, requestHeaders(POST_CHAT));
    assert.equal(
      setHeaders(send(p, requestBody({ model: 'anything' })).request_body?.response?.header_mutation)['x-gateway-destination-endpoint'],
      A,
    );
  });

  it('pool scope on a pool that does not exist → 503 naming the pool', () => {
    const h = harness({ pool: 'missing' });
    const p = h.processor();
    send(p, requestHeaders(POST_CHAT));
    const reply = immediate(send(p, requestBody({ model: MODEL })));
    assert.equal(reply.status, 503);
    assert.match(errorBody(reply.body).error.message, /pool missing/);
  });
});

/** Holds the thread for `ms`: paces the messages a test feeds, like a model server pacing its tokens. */
function pause(ms: number): void {
  Atomics.wait(new Int32Array(new SharedArrayBuffer(4)), 0, 0, ms);
}

async function histogram(metrics: Metrics, name: string, labels: Record<string, string> = {}): Promise<{ count: number; sum: number }> {
  return {
    count: await registryValue(metrics.registry, `${name}_count`, labels),
    sum: await registryValue(metrics.registry, `${name}_sum`, labels),
  };
}

describe('RequestProcessor: LLM figures', () => {
  const usageChunk = (prompt: number, completion: number, cached: number): string =>
    `data: ${JSON.stringify({ choices: [], usage: { prompt_tokens: prompt, completion_tokens: completion, prompt_tokens_details: { cached_tokens: cached } } })}\n\n`;

  it('a paced stream with usage: tokens by type, TTFT from the pick, inter-token latency and TPOT', async () => {
    const h = harness();
    const p = h.processor();
    route(p, { model: MODEL, stream: true, stream_options: { include_usage: true } });
    send(p, responseHeaders(200, SSE));
    pause(60);
    send(p, responseBody(CHUNK, false));
    pause(40);
    send(p, responseBody(CHUNK, false));
    pause(40);
    send(p, responseBody(CHUNK + usageChunk(12, 3, 8), false));
    send(p, responseBody(DONE, true));
    const labels = { gen_ai_request_model: MODEL, pool: 'llama', endpoint: A };
    const ttft = await histogram(h.metrics, 'gen_ai_server_time_to_first_token_seconds', labels);
    assert.equal(ttft.count, 1);
    assert.ok(ttft.sum >= 0.06, `TTFT ${ttft.sum} s covers the 60 ms before the first content`);
    const itl = await histogram(h.metrics, 'llm_extproc_inter_token_latency_seconds', labels);
    assert.equal(itl.count, 1);
    assert.ok(itl.sum >= 0.04, `inter-token latency ${itl.sum} s: two gaps of 40 ms`);
    const tpot = await histogram(h.metrics, 'gen_ai_server_time_per_output_token_seconds', labels);
    assert.ok(tpot.count === 1 && tpot.sum >= 0.04, 'generation time over the two tokens after the first');
    assert.equal(await registryValue(h.metrics.registry, 'llm_extproc_tokens_total', { type: 'input' }), 12);
    assert.equal(await registryValue(h.metrics.registry, 'llm_extproc_tokens_total', { type: 'output' }), 3);
    assert.equal(await registryValue(h.metrics.registry, 'llm_extproc_tokens_total', { type: 'cached' }), 8);
    const output = await histogram(h.metrics, 'gen_ai_client_token_usage', { gen_ai_token_type: 'output', gen_ai_operation_name: 'chat' });
    assert.deepEqual(output, { count: 1, sum: 3 });
    assert.equal(await registryValue(h.metrics.registry, 'llm_extproc_answers_without_usage_total'), 0);
    assert.equal((await histogram(h.metrics, 'gen_ai_client_operation_duration_seconds')).count, 1);
  });

  it('a stream without usage is counted as such, never as zero tokens; a JSON answer gives its usage', async () => {
    const h = harness();
    const p = h.processor();
    route(p, { model: MODEL, stream: true });
    send(p, responseHeaders(200, SSE));
    send(p, responseBody(CHUNK + DONE, true));
    assert.equal(await registryValue(h.metrics.registry, 'llm_extproc_answers_without_usage_total', { answer: 'stream', model: MODEL }), 1);
    assert.equal(await registryValue(h.metrics.registry, 'llm_extproc_tokens_total'), 0);
    assert.equal((await histogram(h.metrics, 'gen_ai_client_token_usage')).count, 0);
    assert.equal((await histogram(h.metrics, 'gen_ai_server_time_to_first_token_seconds')).count, 1, 'TTFT needs no usage');
    const q = h.processor();
    route(q);
    send(q, responseHeaders(200, JSON_TYPE));
    const answer = { choices: [{ message: { content: 'hi' } }], usage: { prompt_tokens: 5, completion_tokens: 2, total_tokens: 7 } };
    send(q, responseBody(JSON.stringify(answer), true));
    assert.equal(await registryValue(h.metrics.registry, 'llm_extproc_tokens_total', { type: 'input' }), 5);
    assert.equal(await registryValue(h.metrics.registry, 'llm_extproc_tokens_total', { type: 'output' }), 2);
    assert.equal((await histogram(h.metrics, 'gen_ai_server_time_to_first_token_seconds')).count, 1, 'no TTFT for a JSON answer');
  });

  it('a failed answer adds no figures (errors are counted by result)', async () => {
    const h = harness();
    const p = h.processor();
    route(p, { model: MODEL, stream: true });
    send(p, responseHeaders(200, SSE));
    send(p, responseBody('data: {"error":{"message":"boom"}}\n\n' + DONE, true));
    assert.equal((await histogram(h.metrics, 'gen_ai_client_operation_duration_seconds')).count, 0);
    assert.equal(await registryValue(h.metrics.registry, 'llm_extproc_answers_without_usage_total'), 0);
  });

  it('usage injection on: the body asks for usage, the client never sees the usage chunk, the tokens are counted', async () => {
    const h = harness({ injectsStreamUsage: true });
    const p = h.processor();
    assert.deepEqual(send(p, requestHeaders(POST_CHAT)), { request_headers: { response: {} } });
    const reply = send(p, requestBody({ model: MODEL, stream: true }));
    const sent = reply.request_body?.response?.body_mutation?.body;
    assert.ok(sent !== undefined, 'the body is replaced');
    assert.equal(Buffer.from(sent).toString(), `{"model":"${MODEL}","stream":true,"stream_options":{"include_usage":true}}`);
    send(p, responseHeaders(200, SSE));
    assert.deepEqual(send(p, responseBody(CHUNK, false)), { response_body: { response: {} } });
    const last = send(p, responseBody(usageChunk(4, 1, 0) + DONE, true));
    const body = last.response_body?.response?.body_mutation?.body;
    assert.equal(body === undefined ? undefined : Buffer.from(body).toString(), DONE, 'the usage chunk is taken out');
    assert.equal(await registryValue(h.metrics.registry, 'llm_extproc_tokens_total', { type: 'input' }), 4);
    assert.equal(await requests(h.metrics, { result: 'ok' }), 1);
  });
});
