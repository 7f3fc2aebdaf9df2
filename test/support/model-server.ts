// A local OpenAI-compatible model server for end-to-end tests, with switchable faults.
//
// Healthy answers come from ./openai-replies.ts and are deterministic, and every byte written is
// recorded per request, so a test can compare what the model server sent with what reached the
// client. Faults reproduce what real model servers do to a proxy: drop the connection before
// answering, reset mid-stream, hang, emit an error event, forget the [DONE], answer HTML, cut a JSON
// body short, or stop accepting connections altogether.
//
// Faults apply to the inference endpoints only (POST /v1/chat/completions, /v1/completions,
// /v1/embeddings, /v1/responses); GET /health and GET /v1/models always answer normally, so a
// health check or model listing never consumes a one-shot fault.
//
// GET /metrics answers like vLLM's Prometheus endpoint with load values the test sets
// (setMetrics), or fails on command. Scrapes are counted in `metricsScrapes`, not recorded in
// `requests`, so a picker scraping in the background never disturbs a test's request log.

import { randomBytes } from 'node:crypto';
import { buffer } from 'node:stream/consumers';
import { STATUS_CODES, createServer } from 'node:http';
import type { IncomingHttpHeaders, IncomingMessage, OutgoingHttpHeaders, ServerResponse } from 'node:http';
import type { AddressInfo, Socket } from 'node:net';
import { setTimeout as delay } from 'node:timers/promises';
import { apiKindOf, jsonReply, modelsReply, openAIError, parseInferenceRequest, sseErrorEvent, streamReply } from './openai-replies.js';
import type { InferenceRequest, SseErrorSpec } from './openai-replies.js';

/** How the server answers inference requests. `afterEvents` counts SSE events (or JSON halves). */
export type Behavior =
  /**
   * Normal answer; `eventDelayMs` spaces SSE events (default: only the write round-trip).
   * `firstEventDelayMs`: a stream's headers go out at once, its first event this long after
   * (a prefill before the first token). Streams carry a usage chunk only when the request asked
   * for one (`stream_options.include_usage`), as vLLM's do.
   */
  | { readonly kind: 'ok'; readonly eventDelayMs?: number; readonly firstEventDelayMs?: number }
  /** Normal answer, `delayMs` between SSE events (JSON bodies: between four slices). */
  | { readonly kind: 'slow-chunks'; readonly delayMs: number }
  /**
   * Always SSE: `events` chat chunks, each carrying `bytesPerEvent` fresh random bytes (base64),
   * `gapMs` apart, then the terminator: a long answer whose every byte is unpredictable.
   */
  | { readonly kind: 'paced-random-sse'; readonly events: number; readonly gapMs: number; readonly bytesPerEvent: number }
  /** Read the request, then drop the connection (FIN; `rst: true` sends a TCP reset instead). */
  | { readonly kind: 'close-before-headers'; readonly rst?: boolean }
  /** 200 headers and `afterEvents` (default 2) events, then a TCP reset. Non-stream: half the JSON. */
  | { readonly kind: 'reset-mid-stream'; readonly afterEvents?: number }
  /** Never answer; the connection stays open until close()/refuse() or the client gives up. */
  | { readonly kind: 'hang' }
  /**
   * Always SSE: 200 headers and `afterEvents` (default 1) events, then waits for `release` before
   * the rest and the terminator: the test decides when the stream finishes, no timing involved.
   */
  | { readonly kind: 'paused-stream'; readonly release: Promise<void>; readonly afterEvents?: number }
  /** 200 headers and `afterEvents` (default 1) events, then silence. Non-stream: half the JSON. */
  | { readonly kind: 'hang-after-headers'; readonly afterEvents?: number }
  /**
   * Always SSE: `afterEvents` (default 2) events, an error event, then the terminator when
   * `thenDone` (default true), and a normal end.
   */
  | { readonly kind: 'sse-error-event'; readonly afterEvents?: number; readonly error?: SseErrorSpec; readonly thenDone?: boolean }
  /** Always SSE: `afterEvents` (default: all) events, then a normal end without the terminator. */
  | { readonly kind: 'sse-no-terminator'; readonly afterEvents?: number }
  /** 502 text/html `<html>Bad Gateway</html>`, like a proxy in front of a dead server. */
  | { readonly kind: 'html-502' }
  /** OpenAI JSON error body with `status` (default 500). */
  | {
      readonly kind: 'json-error';
      readonly status?: number;
      readonly message?: string;
      readonly type?: string;
      readonly code?: string | number | null;
    }
  /** 200 application/json, chunked, only the first `keepBytes` (default: half) of the JSON, then a normal end. */
  | { readonly kind: 'truncated-json'; readonly keepBytes?: number }
  /** Any status and body. */
  | {
      readonly kind: 'status';
      readonly status: number;
      readonly body?: string | Buffer;
      readonly contentType?: string;
      readonly headers?: Readonly<Record<string, string>>;
    };

export type BehaviorKind = Behavior['kind'];

/** How a response ended, from the server's side. */
export type ResponseOutcome =
  /** The response was written completely and ended. */
  | 'ended'
  /** The server reset the connection on purpose (reset-mid-stream, close-before-headers with rst). */
  | 'reset'
  /** The server closed the connection on purpose without answering (close-before-headers). */
  | 'closed'
  /** close() or refuse() tore the connection down while the response was unfinished. */
  | 'server-closed'
  /** The client (or Envoy) went away before the response was finished. */
  | 'client-closed';

export interface RecordedResponse {
  /** undefined until headers are written (and forever for hang / close-before-headers). */
  status: number | undefined;
  headers: OutgoingHttpHeaders;
  /** Each write, in order. */
  readonly chunks: Buffer[];
  /** All body bytes written so far (the concatenation of `chunks`). */
  body: Buffer;
  outcome: ResponseOutcome | undefined;
  /** Resolves once the response is over, however it ended. */
  readonly settled: Promise<ResponseOutcome>;
}

export interface RecordedRequest {
  /** 0-based arrival order on this server. */
  readonly seq: number;
  readonly method: string;
  /** Path including any query string. */
  readonly path: string;
  readonly headers: IncomingHttpHeaders;
  /** Raw request body. */
  readonly body: Buffer;
  /** The behaviour that answered it (`ok` for /health and /v1/models). */
  readonly behavior: Behavior;
  readonly response: RecordedResponse;
}

export interface StartModelServerOptions {
  /** Shows up in `x-model-server-id`, `system_fingerprint` and the reply text. */
  readonly id: string;
  /** Default 127.0.0.1; e2e tests may use other loopback addresses (127.0.0.2, ...). */
  readonly host?: string;
  /** Default 0 (any free port). */
  readonly port?: number;
  /** Listed by GET /v1/models; the first is used when a request has no `model`. Default ['test-model']. */
  readonly models?: readonly string[];
  readonly behavior?: Behavior;
  /** What GET /metrics reports (default: idle). */
  readonly metrics?: MetricsBehavior;
}

/** The load a fake vLLM server reports on GET /metrics. */
export interface VllmMetrics {
  readonly waiting?: number;
  readonly running?: number;
  /** 0..1 */
  readonly kvCacheUsage?: number;
  readonly runningAdapters?: readonly string[];
  readonly waitingAdapters?: readonly string[];
  readonly maxAdapters?: number;
}

/** How GET /metrics answers: vLLM text with these values, or a failure. */
export type MetricsBehavior = VllmMetrics | { readonly fail: 'status-500' | 'garbage' | 'hang' };

/** vLLM's exposition of the values (names, help, labels and types as vLLM 0.32's: test/e2e/vllm-drift.test.ts). */
export function vllmMetricsText(model: string, m: VllmMetrics): string {
  const label = `engine="0",model_name="${model}"`;
  const lines = [
    '# HELP vllm:num_requests_running Number of requests in model execution batches.',
    '# TYPE vllm:num_requests_running gauge',
    `vllm:num_requests_running{${label}} ${(m.running ?? 0).toFixed(1)}`,
    '# HELP vllm:num_requests_waiting Number of requests waiting to be processed.',
    '# TYPE vllm:num_requests_waiting gauge',
    `vllm:num_requests_waiting{${label}} ${(m.waiting ?? 0).toFixed(1)}`,
    '# HELP vllm:kv_cache_usage_perc KV-cache usage. 1 means 100 percent usage.',
    '# TYPE vllm:kv_cache_usage_perc gauge',
    `vllm:kv_cache_usage_perc{${label}} ${m.kvCacheUsage ?? 0}`,
  ];
  if (m.runningAdapters !== undefined || m.waitingAdapters !== undefined) {
    lines.push(
      '# HELP vllm:lora_requests_info Running stats on lora requests.',
      '# TYPE vllm:lora_requests_info gauge',
      `vllm:lora_requests_info{max_lora="${m.maxAdapters ?? 4}",running_lora_adapters="${(m.runningAdapters ?? []).join(',')}",waiting_lora_adapters="${(m.waitingAdapters ?? []).join(',')}"} 1.7e+09`,
    );
  }
  return `${lines.join('\n')}\n`;
}

export interface ModelServer {
  readonly id: string;
  /** `host:port`, the form Envoy clusters and endpoint pickers use. */
  readonly address: string;
  readonly host: string;
  readonly port: number;
  /** Every request received, in order. Tests may clear it (`requests.length = 0`). */
  readonly requests: RecordedRequest[];
  /** Behaviour for subsequent inference requests. */
  setBehavior(b: Behavior): void;
  /** One-shot behaviours, queued: each inference request takes the next one before falling back to setBehavior's. */
  nextBehavior(b: Behavior): void;
  /** What GET /metrics answers from now on. */
  setMetrics(m: MetricsBehavior): void;
  /** GET /metrics requests answered (or failed) so far. */
  readonly metricsScrapes: number;
  /** Resolves with the next request to arrive (after its body is read). */
  onRequest(): Promise<RecordedRequest>;
  /** Exact body bytes written for the most recent request (empty if none). */
  lastResponseBody(): Buffer;
  /** Stops listening and destroys open connections. Idempotent. */
  close(): Promise<void>;
  /** Stops listening (connects get ECONNREFUSED) and drops open connections, like a dead process. */
  refuse(): Promise<void>;
  /** Listens again on the same host:port after refuse(). */
  resume(): Promise<void>;
  /**
   * Sends a TCP reset on every open connection (e.g. mid-stream, once the client saw bytes);
   * `fin`: closes them plainly instead, as the kernel does when the server's process exits.
   */
  resetConnections(how?: 'rst' | 'fin'): void;
}

/** vLLM's (uvicorn's) stream headers: no cache-control; chunked, since there is no length. */
const SSE_HEADERS = { 'content-type': 'text/event-stream; charset=utf-8' } as const;
const JSON_TYPE = 'application/json';
/** vLLM's metrics page (prometheus_client's newer text format version). */
export const METRICS_CONTENT_TYPE = 'text/plain; version=1.0.0; charset=utf-8';

/** The `error.type` vLLM gives an HTTP status (its create_error_response). */
export function vllmErrorType(status: number): string {
  const known: Record<number, string> = {
    400: 'BadRequestError',
    404: 'NotFoundError',
    422: 'UnprocessableEntityError',
    500: 'InternalServerError',
    501: 'NotImplementedError',
    503: 'ServiceUnavailableError',
  };
  return known[status] ?? STATUS_CODES[status] ?? 'InternalServerError';
}
const DEFAULT_SSE_ERROR: SseErrorSpec = { message: 'model server failed while generating', type: 'server_error', code: 500 };

/** Writes through one ServerResponse while recording every byte and the way it ended. */
class RecordingWriter {
  private readonly closed: Promise<void>;
  /** Aborts pending delays when the connection closes, so nothing outlives close(). */
  readonly signal: AbortSignal;

  constructor(
    private readonly res: ServerResponse,
    private readonly record: RecordedResponse,
    private readonly serverId: string,
  ) {
    const aborter = new AbortController();
    this.signal = aborter.signal;
    this.closed = new Promise((resolve) => res.once('close', resolve));
    void this.closed.then(() => aborter.abort());
  }

  head(status: number, headers: OutgoingHttpHeaders): void {
    this.res.writeHead(status, { ...headers, 'x-model-server-id': this.serverId });
    // Headers go out now, not with the first body write, so "headers then silence" is observable.
    this.res.flushHeaders();
    this.record.status = status;
    this.record.headers = this.res.getHeaders();
  }

  private remember(chunk: Buffer): void {
    this.record.chunks.push(chunk);
    this.record.body = Buffer.concat([this.record.body, chunk]);
  }

  /** Resolves once the bytes are handed to the kernel; rejects if the connection is gone. */
  async write(data: string | Buffer): Promise<void> {
    const chunk = typeof data === 'string' ? Buffer.from(data) : data;
    if (this.res.destroyed) throw new Error('connection closed');
    this.remember(chunk);
    await Promise.race([
      new Promise<void>((resolve, reject) => this.res.write(chunk, (err) => (err ? reject(err) : resolve()))),
      this.closed.then(() => {
        throw new Error('connection closed');
      }),
    ]);
  }

  async end(data?: string | Buffer): Promise<void> {
    if (data !== undefined && data.length > 0) this.remember(typeof data === 'string' ? Buffer.from(data) : data);
    await new Promise<void>((resolve) => {
      this.res.once('finish', resolve);
      this.res.once('close', resolve);
      this.res.end(data);
    });
  }

  /** Sends a complete body with content-length (and no content-type when `contentType` is undefined). */
  async send(status: number, contentType: string | undefined, body: string | Buffer, extra: OutgoingHttpHeaders = {}): Promise<void> {
    const bytes = typeof body === 'string' ? Buffer.from(body) : body;
    this.res.writeHead(status, {
      ...extra,
      ...(contentType === undefined ? {} : { 'content-type': contentType }),
      'content-length': bytes.length,
      'x-model-server-id': this.serverId,
    });
    this.record.status = status;
    this.record.headers = this.res.getHeaders();
    await this.end(bytes);
  }

  async pause(ms: number): Promise<void> {
    if (ms > 0) await delay(ms, undefined, { signal: this.signal });
  }
}

function json(value: unknown): Buffer {
  return Buffer.from(JSON.stringify(value));
}

/** Splits a body into `n` nearly equal slices (for slow JSON bodies). */
function slices(body: Buffer, n: number): Buffer[] {
  const size = Math.ceil(body.length / n);
  const out: Buffer[] = [];
  for (let i = 0; i < body.length; i += size) out.push(body.subarray(i, i + size));
  return out;
}

export async function startModelServer(opts: StartModelServerOptions): Promise<ModelServer> {
  const id = opts.id;
  const host = opts.host ?? '127.0.0.1';
  const models = opts.models ?? ['test-model'];
  let behavior: Behavior = opts.behavior ?? { kind: 'ok' };
  let metrics: MetricsBehavior = opts.metrics ?? {};
  let metricsScrapes = 0;
  const oneShots: Behavior[] = [];
  const requests: RecordedRequest[] = [];
  const waiters: ((r: RecordedRequest) => void)[] = [];
  const sockets = new Set<Socket>();
  let seq = 0;
  /** Connections close()/refuse() tore down, to tell our teardown from the client leaving. */
  const tornDown = new WeakSet<Socket>();

  const server = createServer({ noDelay: true, requestTimeout: 0 });
  // Idle keep-alive connections stay open until the client closes them: a server-side idle timeout
  // racing Envoy's connection reuse would inject 503s that no test asked for.
  server.keepAliveTimeout = 0;
  server.on('connection', (socket: Socket) => {
    sockets.add(socket);
    socket.once('close', () => sockets.delete(socket));
  });

  const answerInference = async (
    w: RecordingWriter,
    req: IncomingMessage,
    b: Behavior,
    parsed: InferenceRequest,
  ): Promise<'reset' | 'closed' | undefined> => {
    const stream = () => streamReply(id, parsed);
    const jsonBody = () => json(jsonReply(id, parsed));
    const sendEvents = async (events: readonly (string | Buffer)[], gapMs: number): Promise<void> => {
      for (const [i, e] of events.entries()) {
        if (i > 0) await w.pause(gapMs);
        await w.write(e);
      }
    };

    switch (b.kind) {
      case 'ok':
      case 'slow-chunks': {
        const gap = b.kind === 'ok' ? (b.eventDelayMs ?? 0) : b.delayMs;
        if (parsed.stream) {
          const plan = stream();
          w.head(200, SSE_HEADERS);
          if (b.kind === 'ok') await w.pause(b.firstEventDelayMs ?? 0);
          await sendEvents([...plan.events, plan.terminator], gap);
          await w.end();
        } else if (b.kind === 'ok') {
          await w.send(200, JSON_TYPE, jsonBody());
        } else {
          const body = jsonBody();
          w.head(200, { 'content-type': JSON_TYPE, 'content-length': body.length });
          await sendEvents(slices(body, 4), gap);
          await w.end();
        }
        return undefined;
      }
      case 'paced-random-sse': {
        w.head(200, SSE_HEADERS);
        const events = Array.from({ length: b.events }, () => randomChunkEvent(id, parsed.model, b.bytesPerEvent));
        await sendEvents([...events, 'data: [DONE]\n\n'], b.gapMs);
        await w.end();
        return undefined;
      }
      case 'paused-stream': {
        const plan = stream();
        const first = b.afterEvents ?? 1;
        w.head(200, SSE_HEADERS);
        await sendEvents(plan.events.slice(0, first), 0);
        await Promise.race([b.release, new Promise((resolve) => w.signal.addEventListener('abort', resolve, { once: true }))]);
        await sendEvents([...plan.events.slice(first), plan.terminator], 0);
        await w.end();
        return undefined;
      }
      case 'close-before-headers':
        if (b.rst) {
          req.socket.resetAndDestroy();
          return 'reset';
        }
        req.socket.destroy();
        return 'closed';
      case 'reset-mid-stream':
      case 'hang-after-headers': {
        if (parsed.stream) {
          const plan = stream();
          w.head(200, SSE_HEADERS);
          await sendEvents(plan.events.slice(0, b.afterEvents ?? (b.kind === 'reset-mid-stream' ? 2 : 1)), 0);
        } else {
          const body = jsonBody();
          w.head(200, { 'content-type': JSON_TYPE, 'content-length': body.length });
          await w.write(body.subarray(0, Math.floor(body.length / 2)));
        }
        if (b.kind === 'hang-after-headers') return undefined;
        req.socket.resetAndDestroy();
        return 'reset';
      }
      case 'hang':
        return undefined;
      case 'sse-error-event': {
        const plan = stream();
        w.head(200, SSE_HEADERS);
        const events = [
          ...plan.events.slice(0, b.afterEvents ?? 2),
          sseErrorEvent(parsed.kind, b.error ?? DEFAULT_SSE_ERROR),
          ...(b.thenDone === false ? [] : [plan.terminator]),
        ];
        await sendEvents(events, 0);
        await w.end();
        return undefined;
      }
      case 'sse-no-terminator': {
        const plan = stream();
        w.head(200, SSE_HEADERS);
        await sendEvents(plan.events.slice(0, b.afterEvents ?? plan.events.length), 0);
        await w.end();
        return undefined;
      }
      case 'html-502':
        await w.send(502, 'text/html', '<html>Bad Gateway</html>');
        return undefined;
      case 'json-error': {
        const status = b.status ?? 500;
        const body = openAIError(b.message ?? `model server error ${status}`, b.type ?? vllmErrorType(status), b.code ?? status);
        await w.send(status, JSON_TYPE, json(body));
        return undefined;
      }
      case 'truncated-json': {
        const body = jsonBody();
        w.head(200, { 'content-type': JSON_TYPE });
        await w.write(body.subarray(0, b.keepBytes ?? Math.floor(body.length / 2)));
        await w.end();
        return undefined;
      }
      case 'status':
        await w.send(b.status, b.contentType ?? 'text/plain', b.body ?? '', b.headers ?? {});
        return undefined;
    }
  };

  const handle = async (req: IncomingMessage, res: ServerResponse): Promise<void> => {
    const path = req.url ?? '/';
    const method = req.method ?? 'GET';
    const kind = method === 'POST' ? apiKindOf(path) : undefined;
    if (method === 'GET' && path.split('?')[0] === '/metrics') {
      metricsScrapes++;
      const now = metrics;
      if ('fail' in now) {
        if (now.fail === 'hang') return;
        if (now.fail === 'garbage') res.writeHead(200, { 'content-type': 'text/html' }).end('<html>\n<body>maintenance</body>\n</html>\n');
        else res.writeHead(500, { 'content-type': 'text/plain' }).end('metrics unavailable');
        return;
      }
      res.writeHead(200, { 'content-type': METRICS_CONTENT_TYPE }).end(vllmMetricsText(models[0] ?? 'test-model', now));
      return;
    }
    // Decided at arrival, so one-shot faults go to requests in arrival order.
    const chosen: Behavior = kind === undefined ? { kind: 'ok' } : (oneShots.shift() ?? behavior);

    let settle: (o: ResponseOutcome) => void = () => undefined;
    const response: RecordedResponse = {
      status: undefined,
      headers: {},
      chunks: [],
      body: Buffer.alloc(0),
      outcome: undefined,
      settled: new Promise<ResponseOutcome>((resolve) => (settle = resolve)),
    };
    const finish = (o: ResponseOutcome): void => {
      if (response.outcome !== undefined) return;
      response.outcome = o;
      settle(o);
    };
    const socket = req.socket;
    res.once('close', () => finish(res.writableFinished ? 'ended' : tornDown.has(socket) ? 'server-closed' : 'client-closed'));

    const body = await buffer(req).catch(() => Buffer.alloc(0));
    const record: RecordedRequest = { seq: seq++, method, path, headers: req.headers, body, behavior: chosen, response };
    requests.push(record);
    for (const w of waiters.splice(0)) w(record);

    const w = new RecordingWriter(res, response, id);
    try {
      const pathname = path.split('?')[0];
      if (kind !== undefined) {
        const parsed = parseInferenceRequest(kind, body, models[0] ?? 'test-model');
        if ('error' in parsed) {
          // vLLM's request validation (FastAPI's) names its type after the status phrase.
          await w.send(400, JSON_TYPE, json(openAIError(parsed.error, 'Bad Request', 400)));
        } else {
          const how = await answerInference(w, req, chosen, parsed);
          if (how !== undefined) finish(how);
        }
      } else if (method === 'GET' && pathname === '/v1/models') {
        await w.send(200, JSON_TYPE, json(modelsReply(id, models)));
      } else if (method === 'GET' && pathname === '/health') {
        // vLLM answers an empty 200 with no content-type.
        await w.send(200, undefined, '');
      } else {
        // An unknown path is FastAPI's own 404, not an OpenAI error.
        await w.send(404, JSON_TYPE, json({ detail: 'Not Found' }));
      }
    } catch {
      // The connection went away mid-answer; the 'close' listener has recorded how.
    }
  };

  server.on('request', (req: IncomingMessage, res: ServerResponse) => void handle(req, res));

  const listen = (port: number): Promise<number> =>
    new Promise((resolve, reject) => {
      const onError = (err: Error): void => reject(err);
      server.once('error', onError);
      server.listen({ host, port }, () => {
        server.removeListener('error', onError);
        resolve((server.address() as AddressInfo).port);
      });
    });

  const stopListening = async (): Promise<void> => {
    const closed = server.listening ? new Promise<void>((resolve) => server.close(() => resolve())) : Promise.resolve();
    for (const s of sockets) {
      tornDown.add(s);
      s.destroy();
    }
    await closed;
  };

  const port = await listen(opts.port ?? 0);
  let closedForGood = false;

  return {
    id,
    host,
    port,
    address: `${host}:${port}`,
    requests,
    get metricsScrapes() {
      return metricsScrapes;
    },
    setMetrics: (m) => {
      metrics = m;
    },
    setBehavior: (b) => {
      behavior = b;
    },
    nextBehavior: (b) => {
      oneShots.push(b);
    },
    onRequest: () => new Promise((resolve) => waiters.push(resolve)),
    lastResponseBody: () => requests.at(-1)?.response.body ?? Buffer.alloc(0),
    close: async () => {
      closedForGood = true;
      await stopListening();
    },
    refuse: stopListening,
    resetConnections: (how = 'rst') => {
      for (const s of sockets) {
        tornDown.add(s);
        if (how === 'fin') s.destroy();
        else s.resetAndDestroy();
      }
    },
    resume: async () => {
      if (closedForGood) throw new Error(`model server ${id} was closed; start a new one`);
      if (!server.listening) await listen(port);
    },
  };
}

/** One `chat.completion.chunk` SSE event whose content is `bytes` random bytes in base64. */
function randomChunkEvent(serverId: string, model: string, bytes: number): string {
  const chunk = {
    id: `chatcmpl-${serverId}`,
    object: 'chat.completion.chunk',
    created: 1,
    model,
    choices: [{ index: 0, delta: { content: randomBytes(bytes).toString('base64') }, finish_reason: null }],
  };
  return `data: ${JSON.stringify(chunk)}\n\n`;
}
