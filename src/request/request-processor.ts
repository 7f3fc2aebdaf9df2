// One processor per ext_proc stream (= one HTTP request through Envoy). It owns the stream's
// state, runs each message through the pure state machine (stream-machine.ts), and records what
// the machine learnt — per-replica attempts and the request's result — in exactly one place.
// It never does I/O: the gRPC edge sends the replies it returns.

import type { Logger } from 'pino';
import type { DestinationFormat } from '../config/config.js';
import type { Endpoint } from '../endpoints/model.js';
import type { AttemptFailure } from '../endpoints/passive-health.js';
import type { ProcessingRequest, ProcessingResponse } from '../extproc/messages.js';
import type { LaterReplies, StreamEnd, StreamProcessor } from '../extproc/stream-processor.js';
import type { LlmFigures } from '../metrics/llm-metrics.js';
import type { RequestResult } from './request-result.js';
import type { LogThrottle } from '../util/log-throttle.js';
import { tracedPath } from '../tracing/request-trace.js';
import { BODY_FAILURE_KINDS } from '../inspect/verdict.js';
import type { RequestTrace, RequestTracer } from '../tracing/request-trace.js';
import { headerValue } from '../extproc/message-fields.js';
import { ResponseClock } from './response-clock.js';
import type { QueueOutcome } from '../routing/flow-control.js';
import type { QueuedRoute, RoutedRequest, Routing } from '../routing/routing.js';
import { dispatched } from './request-phase.js';
import { onMessage, onStreamEnd } from './stream-machine.js';
import type { Finished, MachineContext, Step, StreamState } from './stream-state.js';

export interface ProcessorMetrics {
  requestStarted(): void;
  requestEnded(): void;
  requestFinished(model: string, result: RequestResult): void;
  attempt(pool: string, endpoint: string, outcome: 'success' | 'failure', reason: string): void;
  messageHandled(message: string, seconds: number): void;
  servedOutsidePick(): void;
  /** The LLM figures of a request answered well by a model server (once per such request). */
  requestFigures(figures: LlmFigures): void;
  /** The request was routed to this (served) model: it runs until requestReleased. */
  requestRouted(model: string): void;
  requestReleased(model: string): void;
}

export interface ProcessorDeps {
  readonly routing: Routing;
  readonly metrics: ProcessorMetrics;
  readonly logger: Logger;
  /**
   * Shared by every stream: at most one 'request failed' line per result per interval at info
   * (the rest at debug; all of them are counted in llm_extproc_requests_total). A peer that opens
   * and drops streams by the thousand must not write as many lines.
   */
  readonly failureLog: LogThrottle<RequestResult>;
  readonly maxRequestBodyBytes: number;
  /** JSON answers larger than this are not held for validation; they pass through. */
  readonly maxInspectedBodyBytes: number;
  /** `list` (override_host) unless the gateway reads exactly one address. */
  readonly destinationFormat?: DestinationFormat;
  /**
   * Told about a response stream that broke before its end with no explanation: the replica may
   * have died, or the client may have left. Whoever listens checks the replica actively.
   */
  readonly onMidStreamBreak?: (endpoint: Endpoint) => void;
  /**
   * Told about an attempt that could not connect, or was reset before any response: the replica
   * may be dead. Whoever listens checks it actively, so that one failed request (not a streak of
   * `quarantine.consecutiveFailures`) is enough to take a dead replica out, also behind gateways
   * that cannot fall back to another replica.
   */
  readonly onFailedConnect?: (endpoint: Endpoint) => void;
  /** Pools whose streaming requests get `stream_options.include_usage` added when they lack it. Default none. */
  readonly injectsStreamUsage?: (pool: string) => boolean;
  /** Flow control's request headers; absent = flow control is off (requests never wait). */
  readonly flowHeaders?: { readonly tenant: string; readonly priority: string; readonly objective: string };
  /** Tracing on: one span per stream. Absent = off, and nothing is traced or called. */
  readonly tracer?: RequestTracer;
}

const NEVER = (): boolean => false;

/** Metrics label for requests whose model is absent or not served here. */
const UNKNOWN_MODEL = '(unknown)';

export class RequestProcessor implements StreamProcessor {
  private state: StreamState = { kind: 'AwaitingRequestHeaders' };
  /** Per stream; gains the span's upstream headers when a trace starts. */
  private context: MachineContext;
  private routed: RoutedRequest | undefined;
  private finished = false;
  private reportedOutsidePick = false;
  /** When the request was routed (TTFT starts there; re-routing keeps the first pick). */
  private pickedAt: number | undefined;
  /** Made when an SSE answer starts streaming: JSON answers and errors never need one. */
  private clock: ResponseClock | undefined;
  private startedAt: number | undefined;
  /** While the request waits in a queue: its place, and the messages Envoy sent meanwhile. */
  private queued: QueuedRoute | undefined;
  private held: ProcessingRequest[] | undefined;
  /** This request's trace, when tracing is on and it is sampled. */
  private trace: RequestTrace | undefined;

  constructor(
    private readonly deps: ProcessorDeps,
    private readonly later?: LaterReplies,
  ) {
    this.context = {
      routing: deps.routing,
      maxRequestBodyBytes: deps.maxRequestBodyBytes,
      maxInspectedBodyBytes: deps.maxInspectedBodyBytes,
      destinationFormat: deps.destinationFormat ?? 'list',
      injectsStreamUsage: deps.injectsStreamUsage ?? NEVER,
      ...(deps.flowHeaders === undefined || later === undefined ? {} : { flowHeaders: deps.flowHeaders }),
    };
    deps.metrics.requestStarted();
  }

  process(request: ProcessingRequest): ProcessingResponse[] {
    if (request.observability_mode === true) return []; // observability mode expects no replies
    if (this.state.kind === 'Queued') {
      // Answered in order once the request leaves the queue (trailers after a full-duplex body).
      (this.held ??= []).push(request);
      return [];
    }
    const started = performance.now();
    if (this.startedAt === undefined) {
      this.startedAt = started;
      if (this.deps.tracer !== undefined) this.startTrace(this.deps.tracer, request);
    }
    try {
      const before = this.state;
      const step = onMessage(this.context, this.state, request);
      // The chunk was fed to the inspector of the state it arrived in: its content events so far.
      if (before.kind === 'Streaming' && before.watch.kind === 'sse') {
        (this.clock ??= new ResponseClock(this.pickedAt)).contentSeen(before.watch.inspector.contentEvents, started);
      }
      return this.apply(step, started);
    } finally {
      this.deps.metrics.messageHandled(request.request ?? 'unknown', (performance.now() - started) / 1e3);
    }
  }

  finish(end: StreamEnd): void {
    if (this.finished) return;
    this.finished = true;
    // A client that hangs up leaves the queue at once (or gives back a pick not delivered yet).
    this.queued?.cancel();
    this.apply(onStreamEnd(this.state, end), performance.now());
    if (this.routed !== undefined) {
      this.deps.routing.release(this.routed);
      if (this.pickedAt !== undefined) this.deps.metrics.requestReleased(this.routed.model);
    }
    this.deps.metrics.requestEnded();
    this.trace?.end();
  }

  /** From the first message's headers: the client's trace context, the method, path and request id. */
  private startTrace(tracer: RequestTracer, request: ProcessingRequest): void {
    const headers = request.request_headers?.headers;
    if (headers === undefined) return;
    this.trace = tracer.start((name) => headerValue(headers, name), {
      method: headerValue(headers, ':method') ?? '',
      path: tracedPath(headerValue(headers, ':path') ?? ''),
      requestId: headerValue(headers, 'x-request-id') ?? '',
    });
    const upstreamTrace = this.trace?.upstreamHeaders;
    if (upstreamTrace !== undefined) this.context = { ...this.context, upstreamTrace };
  }

  /** The one place where outcomes are recorded. */
  private apply(step: Step, now: number): ProcessingResponse[] {
    this.state = step.state;
    for (const notice of step.notices) {
      if (notice.kind === 'routed') {
        if (this.pickedAt === undefined) {
          this.pickedAt = now;
          this.deps.metrics.requestRouted(notice.routed.model);
        }
        this.routed = notice.routed;
        if (this.trace !== undefined) this.tracePick(this.trace, notice.routed);
      } else if (notice.kind === 'queued') {
        this.queued = notice.queued;
        this.trace?.queued();
        notice.queued.listen((outcome) => this.leftQueue(outcome));
      } else if (!this.reportedOutsidePick) {
        this.reportedOutsidePick = true;
        this.deps.metrics.servedOutsidePick();
        this.deps.logger.warn(
          { model: notice.model, upstream: notice.upstream, picked: notice.picked, requestId: notice.requestId },
          "Envoy sent the request to a host we did not pick: its backends cluster lacks our endpoints (check the cluster's host set)",
        );
      }
    }
    for (const attempt of step.attempts) this.recordAttempt(attempt.endpoint, attempt.failure, attempt.reason);
    const done = step.finished;
    if (done !== undefined) {
      const model = done.model !== undefined && this.deps.routing.servesModel(done.model) ? done.model : UNKNOWN_MODEL;
      // Label only models we serve: a client must not be able to mint metric series at will.
      this.deps.metrics.requestFinished(model, done.result);
      if (model !== UNKNOWN_MODEL) this.recordFigures(model, done, now);
      this.trace?.finished({
        result: done.result,
        model: done.model === undefined || model === UNKNOWN_MODEL ? undefined : model,
        operation: operationOf(done.path),
        status: done.status,
        endpoint: done.endpoint,
        answer: done.answer,
        verdict: verdictOf(done),
      });
      if (done.result === 'ok') {
        // One line per request at debug level (an access log for debugging); nothing is built at info.
        if (this.deps.logger.isLevelEnabled('debug'))
          this.deps.logger.debug(
            { model: done.model, status: done.status, endpoint: done.endpoint, requestId: done.requestId },
            'request served',
          );
      } else {
        const fields = {
          model: done.model,
          result: done.result,
          status: done.status,
          endpoint: done.endpoint,
          path: done.path,
          requestId: done.requestId,
        };
        const suppressed = this.deps.failureLog.admit(done.result, now);
        if (suppressed === undefined) this.deps.logger.debug(fields, 'request failed');
        else this.deps.logger.info(suppressed === 0 ? fields : { ...fields, suppressed }, 'request failed');
      }
      if (done.brokenMidStream) {
        this.deps.logger.warn(
          { model: done.model, endpoint: done.endpoint, requestId: done.requestId },
          'response stream broke before it completed',
        );
        const endpoint = step.attempts.find((a) => a.reason === 'stream_broken')?.endpoint;
        if (endpoint !== undefined) this.deps.onMidStreamBreak?.(endpoint);
      }
    }
    return step.replies;
  }

  /** The wait is over: continue with the pick (or answer the error), then with what Envoy sent meanwhile. */
  private leftQueue(outcome: QueueOutcome<RoutedRequest>): void {
    if (this.finished) return;
    const replies = this.apply(dispatched(this.context, this.state, outcome), performance.now());
    const held = this.held ?? [];
    this.held = undefined;
    try {
      for (const message of held) replies.push(...this.process(message));
    } catch (thrown) {
      this.deps.logger.error({ err: thrown }, 'handling a message held while queued failed');
    }
    this.later?.send(replies);
  }

  /** Figures of a request a model server answered in full (not errors: those are counted by result). */
  private recordFigures(model: string, done: Finished, now: number): void {
    const answer = done.answer;
    const endpoint = done.endpoint === undefined ? undefined : this.routed?.endpoints.find((e) => e.address === done.endpoint);
    if (done.result !== 'ok' || answer === undefined || endpoint === undefined) return;
    const times = answer === 'stream' ? (this.clock ?? new ResponseClock(this.pickedAt)).times() : undefined;
    const output = done.usage?.output;
    const generation = times?.generation;
    const timePerOutputToken = output !== undefined && output > 1 && generation !== undefined ? generation / (output - 1) : undefined;
    // Without usage in the stream, the gap between content events stands in for the time per token.
    // Only answers of the first pick: after a failed attempt the TTFT includes another replica's time.
    if (endpoint === this.routed?.endpoints[0])
      this.deps.routing.recordLatency(
        model,
        endpoint,
        { timeToFirstToken: times?.timeToFirstToken, timePerOutputToken: timePerOutputToken ?? times?.interTokenLatency },
        now,
      );
    this.deps.metrics.requestFigures({
      model,
      pool: endpoint.pool,
      endpoint: endpoint.address,
      operation: operationOf(done.path),
      answer,
      usage: done.usage,
      duration: (now - (this.startedAt ?? now)) / 1e3,
      timeToFirstToken: times?.timeToFirstToken,
      interTokenLatency: times?.interTokenLatency,
      timePerOutputToken,
    });
    this.trace?.figures({
      usage: done.usage,
      timeToFirstToken: times?.timeToFirstToken,
      timePerOutputToken: timePerOutputToken ?? times?.interTokenLatency,
    });
  }

  private tracePick(trace: RequestTrace, routed: RoutedRequest): void {
    const primary = routed.endpoints[0];
    if (primary === undefined) return;
    const signals = this.deps.routing.signalsOf(primary.address);
    // A report that is stale or failing did not count in the pick: the span does not show it as if it had.
    const reported = signals.metrics === 'fresh';
    trace.picked({
      model: routed.model,
      pool: primary.pool,
      endpoint: primary.address,
      fallbacks: routed.endpoints.slice(1).map((e) => e.address),
      score: routed.score,
      inFlight: signals.inFlight,
      waiting: reported ? signals.waiting : undefined,
      running: reported ? signals.running : undefined,
      kvCacheUsage: reported ? signals.kvCacheUsage : undefined,
    });
  }

  private recordAttempt(endpoint: Endpoint, failure: AttemptFailure | undefined, reason: string): void {
    this.trace?.attempt(endpoint.pool, endpoint.address, failure === undefined ? 'success' : 'failure', reason);
    if (failure === undefined) {
      this.deps.routing.recordSuccess(endpoint);
      this.deps.metrics.attempt(endpoint.pool, endpoint.address, 'success', 'ok');
    } else {
      this.deps.routing.recordFailure(endpoint, failure);
      this.deps.metrics.attempt(endpoint.pool, endpoint.address, 'failure', reason);
      if (failure === 'connect_failure' || failure === 'reset') this.deps.onFailedConnect?.(endpoint);
    }
  }
}

/** Results that are a verdict on the answer's body (what inspecting it found, or the stream breaking mid-answer), for a trace. */
const BODY_VERDICTS: ReadonlySet<string> = new Set([...BODY_FAILURE_KINDS, 'stream_broken']);

function verdictOf(done: Finished): string | undefined {
  if (BODY_VERDICTS.has(done.result)) return done.result;
  return done.result === 'ok' && done.answer !== undefined ? 'ok' : undefined;
}

/** The GenAI semantic conventions' operation name of an OpenAI-compatible path. */
function operationOf(path: string): string {
  switch (path) {
    case '/v1/chat/completions':
      return 'chat';
    case '/v1/completions':
      return 'text_completion';
    case '/v1/embeddings':
      return 'embeddings';
    case '/v1/responses':
      return 'responses';
    default:
      return 'other';
  }
}
