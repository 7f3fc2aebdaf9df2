// `npm run bench:processing`: CPU time per request (and per streamed chunk) of our own processing
// path, without the HTTP/2 transport: decode each ext_proc message, run it through the stream's
// BidiCall<ProcessingRequest> and RequestProcessor (real routing, store, load tracker and the outcome sinks, as
// app.ts wires them), encode and frame every reply. The messages have the shapes Envoy 1.40 sends
// in `npm run bench`'s setup (request BUFFERED, response STREAMED, response attributes, an empty
// metadata_context on every message), encoded by the reflection codec.
//
// `--concurrency` streams are in flight at once and advanced round-robin, one message each, as
// they are under load. CPU time (process.cpuUsage), not wall time, so figures hold up on a shared
// machine; each round is reported and the median summarised. `--against DIR` loads a second build
// (another checkout's compiled `dist/`) into the same process and runs both in every round, in
// alternating order, so the comparison holds up while other work shares the machine.
// Flags: --requests N (per round, default 2000), --rounds N (30), --concurrency N (16),
// --streams N (per round, 20), --events N (SSE events per stream, 64), --against DIR.

import { join } from 'node:path';
import { pathToFileURL } from 'node:url';
import { pino } from 'pino';
import type { ProcessingRequest, ProcessingResponse } from '../src/extproc/messages.js';
import type { BidiCall } from '../src/grpc/bidi-call.js';
import { envoyAttributes, headerMap } from '../test/support/envoy-messages.js';
import { loadWireDefinitions } from '../test/support/proto-definitions.js';
import type * as Store from '../src/endpoints/store.js';
import type * as Call from '../src/extproc/process-service.js';
import type * as Processor from '../src/request/request-processor.js';
import type { ProcessorDeps } from '../src/request/request-processor.js';
import type * as OutcomeSinkModule from '../src/request/outcome-sink.js';
import type * as ServedModelsModule from '../src/routing/served-models.js';
import type * as MetricsSink from '../src/outcomes/metrics-sink.js';
import type * as LogSink from '../src/outcomes/log-sink.js';
import type * as HealthSink from '../src/outcomes/health-sink.js';
import type * as Routing from '../src/routing/routing.js';
import type * as MetricsModule from '../src/metrics/metrics.js';
import type * as Load from '../src/picker/load-tracker.js';
import type { RequestResult } from '../src/request/request-result.js';
import { LogThrottle } from '../src/util/log-throttle.js';
import { parseScriptOptions } from './script-options.js';

const { values } = parseScriptOptions(import.meta.url, {
  options: {
    requests: { type: 'string', default: '2000' },
    rounds: { type: 'string', default: '30' },
    concurrency: { type: 'string', default: '16' },
    streams: { type: 'string', default: '20' },
    events: { type: 'string', default: '64' },
    against: { type: 'string' },
  },
});
const requests = Number(values.requests);
const rounds = Number(values.rounds);
const concurrency = Number(values.concurrency);
const streams = Number(values.streams);
const events = Number(values.events);

// ── the server side, wired as app.ts and the native transport wire it ─────────────────────────

/** One build's modules: this script's own, or another build's compiled `dist/` (`--against`). */
async function loadModules(dist: string | undefined) {
  const url = (path: string): string =>
    dist === undefined ? new URL(`../src/${path}`, import.meta.url).href : pathToFileURL(join(dist, 'src', path)).href;
  const load = <T>(path: string): Promise<T> => import(url(path)) as Promise<T>;
  // Builds before src/routing/ (e.g. 42815f8) kept routing in request/.
  const routing = await load<typeof Routing>('routing/routing.js').catch(() => load<typeof Routing>('request/routing.js'));
  return {
    ...(await load<typeof Store>('endpoints/store.js')),
    ...(await load<typeof Call>('extproc/process-service.js')),
    ...(await load<typeof Processor>('request/request-processor.js')),
    ...routing,
    ...(await load<typeof MetricsModule>('metrics/metrics.js')),
    ...(await load<typeof Load>('picker/load-tracker.js')),
    // Builds before the outcome sinks (e.g. 42815f8) took metrics and a logger instead: undefined there.
    sinks: await Promise.all([
      load<typeof OutcomeSinkModule>('request/outcome-sink.js'),
      load<typeof ServedModelsModule>('routing/served-models.js'),
      load<typeof MetricsSink>('outcomes/metrics-sink.js'),
      load<typeof LogSink>('outcomes/log-sink.js'),
      load<typeof HealthSink>('outcomes/health-sink.js'),
    ]).then(
      ([sink, served, metrics, log, health]) => ({ ...sink, ...served, ...metrics, ...log, ...health }),
      () => undefined,
    ),
  };
}

const MODEL = 'bench-model';
const ENDPOINTS = ['127.0.0.1:41949', '127.0.0.1:41950', '127.0.0.1:41951'];

interface Server {
  readonly name: string;
  openCall(): BidiCall<ProcessingRequest>;
  decode(bytes: Buffer): ProcessingRequest;
  encodeRequest(message: ProcessingRequest): Buffer;
}

async function server(name: string, dist: string | undefined): Promise<Server> {
  const m = await loadModules(dist);
  const store = new m.EndpointStore(['static'], { threshold: 3, baseMs: 10_000, maxMs: 60_000 });
  store.replaceAll('static', [
    { name: 'bench', models: [MODEL], endpoints: ENDPOINTS.map((address) => ({ id: address, address, state: 'Ready', reason: '' })) },
  ]);
  store.markSynced('static');
  const routing = new m.StoreRouting(store, new m.LoadTracker(), { fallbacks: 2 });
  const metrics = new m.Metrics();
  // Production logs at info to stdout; here to /dev/null (a request that succeeds logs nothing).
  const logger = pino({ level: 'info' }, pino.destination({ dest: '/dev/null', sync: true })).child({ component: 'extproc' });
  // As app.ts: one throttle for every stream's failure lines (an older build, --against, ignores it).
  const failureLog = new LogThrottle<RequestResult>();
  const limits = { maxRequestBodyBytes: 1024 * 1024, maxInspectedBodyBytes: 1024 * 1024, destinationFormat: 'list' } as const;
  // As app.ts composes them (tracing off, no latency signal: the routing here is least in-flight).
  const sinks = m.sinks;
  const deps: ProcessorDeps =
    sinks === undefined
      ? ({ routing, metrics, logger, failureLog, ...limits } as unknown as ProcessorDeps)
      : {
          routing,
          models: new sinks.ServedModels(store, undefined),
          outcomes: sinks.composeSinks([sinks.metricsSink(metrics), sinks.logSink(logger, failureLog), sinks.healthSink({ store })]),
          logger,
          ...limits,
        };
  const process = m.processMethod({ processorFactory: () => new m.RequestProcessor(deps), logger });
  const sink = {
    write: (reply: ProcessingResponse) => {
      sentBytes += process.frame(reply).length;
      return true;
    },
    pauseUntilDrain: () => undefined,
    endOk: () => undefined,
    endError: (code: string, details: string) => {
      throw new Error(`stream ended with ${code}: ${details}`);
    },
  };
  return {
    name,
    openCall: () => process.start(sink),
    decode: (bytes) => process.decode(bytes),
    encodeRequest: (message) => requestType.serialize(message),
  };
}

// Envoy's side of the wire: the test oracle encodes what Envoy would send.
const requestType = loadWireDefinitions().packageDefinition['envoy.service.ext_proc.v3.ProcessingRequest'] as unknown as {
  serialize(value: object): Buffer;
};
let sentBytes = 0;
const servers = [await server('this build', undefined)];
if (values.against !== undefined) servers.push(await server(values.against, values.against));
const encode = (message: ProcessingRequest): Buffer => servers[0].encodeRequest(message);

// ── Envoy's messages ───────────────────────────────────────────────────────────────────────────

const headers = headerMap;
const responseAttributes = envoyAttributes({ upstream: ENDPOINTS[0], flags: 0, details: 'via_upstream' });
const requestBody = Buffer.from(
  JSON.stringify({ model: MODEL, messages: [{ role: 'user', content: 'Say hello in one short sentence.' }], max_tokens: 32 }),
);
const jsonAnswer = Buffer.from(
  JSON.stringify({
    id: 'chatcmpl-9aa9e7fde0dcf1384e472fb4',
    object: 'chat.completion',
    created: 1700000000,
    model: MODEL,
    system_fingerprint: 'bench-upstream',
    choices: [
      {
        index: 0,
        message: { role: 'assistant', content: `Hello from bench-upstream serving ${MODEL}. You said: Say hello in one short sentence.` },
        logprobs: null,
        finish_reason: 'stop',
      },
    ],
    usage: { prompt_tokens: 6, completion_tokens: 13, total_tokens: 19 },
  }),
);

function requestMessages(requestId: string, stream: boolean): Buffer[] {
  const body = stream ? Buffer.from(JSON.stringify({ ...JSON.parse(requestBody.toString()), stream: true })) : requestBody;
  return [
    encode({
      request_headers: {
        headers: headers({
          ':authority': '127.0.0.1:33821',
          ':path': '/v1/chat/completions',
          ':method': 'POST',
          ':scheme': 'http',
          'content-type': 'application/json',
          'content-length': String(body.length),
          'x-forwarded-proto': 'http',
          'x-request-id': requestId,
        }),
      },
      metadata_context: {},
      protocol_config: { request_body_mode: 'BUFFERED', response_body_mode: 'STREAMED' },
    }),
    encode({ request_body: { body, end_of_stream: true }, metadata_context: {} }),
  ];
}

const DATE = 'Tue, 01 Dec 2026 14:03:37 GMT';

function nonStreamingRequest(requestId: string): Buffer[] {
  return [
    ...requestMessages(requestId, false),
    encode({
      response_headers: {
        headers: headers({
          ':status': '200',
          'content-type': 'application/json',
          'content-length': String(jsonAnswer.length),
          date: DATE,
          connection: 'keep-alive',
          'x-envoy-upstream-service-time': '1',
        }),
      },
      metadata_context: {},
      attributes: responseAttributes,
    }),
    encode({ response_body: { body: jsonAnswer, end_of_stream: true }, metadata_context: {} }),
  ];
}

function sseEvent(index: number): Buffer {
  const event = {
    id: 'chatcmpl-bench-upstream',
    object: 'chat.completion.chunk',
    created: 1700000000,
    model: MODEL,
    system_fingerprint: 'bench-upstream',
    choices: [{ index: 0, delta: { content: `token${index} ` }, logprobs: null, finish_reason: null }],
    bench_sent_ns: '17758284774983',
  };
  return Buffer.from(`data: ${JSON.stringify(event)}\n\n${index === events - 1 ? 'data: [DONE]\n\n' : ''}`);
}

/** Header messages and the SSE chunks (the last with the terminator and end_of_stream). */
function streamingRequest(requestId: string): { head: Buffer[]; chunks: Buffer[] } {
  const head = [
    ...requestMessages(requestId, true),
    encode({
      response_headers: {
        headers: headers({
          ':status': '200',
          'content-type': 'text/event-stream',
          'cache-control': 'no-cache',
          date: DATE,
          connection: 'keep-alive',
          'transfer-encoding': 'chunked',
          'x-envoy-upstream-service-time': '1',
        }),
      },
      metadata_context: {},
      attributes: responseAttributes,
    }),
  ];
  const chunks = Array.from({ length: events }, (_, i) =>
    encode({ response_body: { body: sseEvent(i), end_of_stream: i === events - 1 }, metadata_context: {} }),
  );
  return { head, chunks };
}

// ── driving ────────────────────────────────────────────────────────────────────────────────────

/** Runs `count` calls of `messages`, `concurrency` at a time, one message per call per turn. */
function drive(target: Server, count: number, messagesOf: (i: number) => readonly Buffer[]): void {
  const slots: { call: BidiCall<ProcessingRequest>; messages: readonly Buffer[]; next: number }[] = [];
  let started = 0;
  let done = 0;
  const start = (): void => {
    const i = started++;
    slots.push({ call: target.openCall(), messages: messagesOf(i), next: 0 });
  };
  while (started < Math.min(concurrency, count)) start();
  while (done < count) {
    for (let s = 0; s < slots.length; s++) {
      const slot = slots[s];
      slot.call.message(target.decode(slot.messages[slot.next++]));
      if (slot.next === slot.messages.length) {
        slot.call.halfClosed();
        done++;
        slots.splice(s--, 1);
        if (started < count) start();
      }
    }
  }
}

function cpuMicros(run: () => void): number {
  const before = process.cpuUsage();
  run();
  const used = process.cpuUsage(before);
  return used.user + used.system;
}

const median = (xs: number[]): number => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)];

const nonStreaming = Array.from({ length: 64 }, (_, i) => nonStreamingRequest(`req-${i}-3ec1-4a3c-8ca9-f1e75fc9c1dc`));
const streamMessages = Array.from({ length: 16 }, (_, i) => {
  const { head, chunks } = streamingRequest(`str-${i}-3ec1-4a3c-8ca9-f1e75fc9c1dc`);
  return [...head, ...chunks];
});

const runRequests = (target: Server, count: number): void => drive(target, count, (i) => nonStreaming[i % nonStreaming.length]);
const runStreams = (target: Server, count: number): void => drive(target, count, (i) => streamMessages[i % streamMessages.length]);

// Warm-up: let the JIT settle on both paths.
for (const target of servers) {
  runRequests(target, 10_000);
  runStreams(target, 100);
}

const perRequest = servers.map((): number[] => []);
const perChunk = servers.map((): number[] => []);
for (let round = 0; round < rounds; round++) {
  // With two builds, each round runs both, in alternating order.
  const order = servers.map((_, i) => i);
  if (round % 2 === 1) order.reverse();
  for (const i of order) {
    const request = cpuMicros(() => runRequests(servers[i], requests)) / requests;
    perRequest[i].push(request);
    // Per chunk: a stream's CPU minus its header messages' share, estimated as one non-streaming
    // request's (the same three messages; the fourth is the JSON body).
    const stream = cpuMicros(() => runStreams(servers[i], streams)) / streams;
    perChunk[i].push((stream - request) / events);
  }
}
const fmt = (xs: number[], digits: number): string => xs.map((x) => x.toFixed(digits)).join(' ');
let report = `Node ${process.version}; ${concurrency} streams in flight; ${requests} requests and ${streams} streams of ${events} events per round\n`;
servers.forEach((target, i) => {
  report +=
    `${target.name}:\n` +
    `  CPU µs per non-streaming request: median ${median(perRequest[i]).toFixed(1)} (rounds: ${fmt(perRequest[i], 1)})\n` +
    `  CPU µs per SSE chunk (approx.):   median ${median(perChunk[i]).toFixed(2)} (rounds: ${fmt(perChunk[i], 2)})\n`;
});
if (servers.length === 2) {
  const ratios = perRequest[0].map((x, r) => x / perRequest[1][r]);
  report += `per request, this build ÷ ${servers[1].name}, round by round: median ${median(ratios).toFixed(2)} (${fmt(ratios, 2)})\n`;
  const chunkRatios = perChunk[0].map((x, r) => x / perChunk[1][r]);
  report += `per chunk, this build ÷ ${servers[1].name}, round by round: median ${median(chunkRatios).toFixed(2)} (${fmt(chunkRatios, 2)})\n`;
}
process.stdout.write(`${report}(replies: ${sentBytes} bytes framed)\n`);
