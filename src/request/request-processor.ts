// One processor per ext_proc stream (= one HTTP request through Envoy). It owns the stream's
// state, runs each message through the pure state machine (stream-machine.ts), and turns what the
// machine learnt — the pick, per-replica attempts, the request's result and its figures — into
// outcomes, handed in exactly one place (apply) to the outcome sinks app.ts composes (metrics,
// traces, logs, passive health: src/outcomes/). It never does I/O: the gRPC edge sends the replies
// it returns.

import { ModelRewrites } from '../picker/model-rewrite.js';
import type { Logger } from 'pino';
import type { DestinationFormat } from '../config/config.js';
import type { ProcessingRequest, ProcessingResponse } from '../extproc/messages.js';
import { withResponseHeader } from '../extproc/replies.js';
import type { Endpoint } from '../endpoints/model.js';
import type { LaterReplies, StreamEnd, StreamProcessor } from '../extproc/stream-processor.js';
import { tracedPath } from '../tracing/request-trace.js';
import { BODY_FAILURE_KINDS } from '../inspect/verdict.js';
import type { RequestTrace, RequestTracer } from '../tracing/request-trace.js';
import { ResponseClock } from './response-clock.js';
import type { QueueOutcome } from '../routing/flow-control.js';
import type { QueuedRoute, RoutedRequest, Routing } from '../routing/routing.js';
import type { ServedModels } from '../routing/served-models.js';
import { dispatched } from './request-phase.js';
import { onMessage, onStreamEnd } from './stream-machine.js';
import { factsOf } from './stream-state.js';
import type { Finished, MachineContext, RequestFacts, Step, StreamState } from './stream-state.js';
import type { AnswerFigures, OutcomeSink } from './outcome-sink.js';

const NO_REWRITES = new ModelRewrites();

export interface ProcessorDeps {
  readonly routing: Routing;
  /** Which models are served here: GET /v1/models, and which model names may label an outcome. */
  readonly models: ServedModels;
  /** Hears every outcome of the stream (app.ts composes the sinks). */
  readonly outcomes: OutcomeSink;
  /** For our own faults only (what happens to requests is the sinks'). */
  readonly logger: Logger;
  readonly maxRequestBodyBytes: number;
  /** JSON answers larger than this are not held for validation; they pass through. */
  readonly maxInspectedBodyBytes: number;
  /** `list` (override_host) unless the gateway reads exactly one address. */
  readonly destinationFormat?: DestinationFormat;
  /** This replica's `listen.peerAddress`: written into each pick's metadata, so its access-log entries find it. */
  readonly replica?: string;
  /** Pools whose streaming requests get `stream_options.include_usage` added when they lack it. Default none. */
  readonly injectsStreamUsage?: (pool: string) => boolean;
  /** Weighted model rewrite rules (config `routing.modelRewrites`); absent = none. */
  readonly modelRewrites?: ModelRewrites;
  /** Flow control's request headers; absent = flow control is off (requests never wait). */
  readonly flowHeaders?: { readonly tenant: string; readonly priority: string; readonly objective: string };
  /** Tracing on: one span per stream. Absent = off, and nothing is traced or called. */
  readonly tracer?: RequestTracer;
}

const NEVER = (): boolean => false;

export class RequestProcessor implements StreamProcessor {
  private state: StreamState = { kind: 'AwaitingRequestHeaders' };
  /** Per stream; gains the span's upstream headers when a trace starts. */
  private context: MachineContext;
  /** What the sinks read about this request with each outcome. */
  private readonly record: {
    routed: RoutedRequest | undefined;
    trace: RequestTrace | undefined;
    model: string | undefined;
    requestBytes: number | undefined;
  } = { routed: undefined, trace: undefined, model: undefined, requestBytes: undefined };
  private finished = false;
  private reportedOutsidePick = false;
  /** When the request was routed (TTFT starts there; re-routing keeps the first pick). */
  private pickedAt: number | undefined;
  /** Made when an SSE answer starts streaming: JSON answers and errors never need one. */
  private clock: ResponseClock | undefined;
  private startedAt: number | undefined;
  /** Response body bytes Envoy gave us (llm-d's response size): reported only with a whole answer's figures. */
  private responseBytes = 0;
  /** While the request waits in a queue: its place, and the messages Envoy sent meanwhile. */
  private queued: QueuedRoute | undefined;
  private held: ProcessingRequest[] | undefined;

  constructor(
    private readonly deps: ProcessorDeps,
    private readonly later?: LaterReplies,
  ) {
    this.context = {
      routing: deps.routing,
      models: deps.models,
      maxRequestBodyBytes: deps.maxRequestBodyBytes,
      maxInspectedBodyBytes: deps.maxInspectedBodyBytes,
      destinationFormat: deps.destinationFormat ?? 'list',
      ...(deps.replica === undefined ? {} : { replica: deps.replica }),
      injectsStreamUsage: deps.injectsStreamUsage ?? NEVER,
      modelRewrites: deps.modelRewrites ?? NO_REWRITES,
      ...(deps.flowHeaders === undefined || later === undefined ? {} : { flowHeaders: deps.flowHeaders }),
    };
    deps.outcomes.opened();
  }

  /** When the stream opened (performance.now()): its duration, when it closes. */
  private readonly openedAt = performance.now();

  process(request: ProcessingRequest): ProcessingResponse[] {
    if (request.observability_mode === true) return []; // observability mode expects no replies
    if (this.state.kind === 'Queued') {
      // Answered in order once the request leaves the queue (trailers after a full-duplex body).
      (this.held ??= []).push(request);
      return [];
    }
    const started = performance.now();
    const first = this.startedAt === undefined;
    this.startedAt ??= started;
    try {
      const before = this.state;
      const step = onMessage(this.context, this.state, request);
      // The request headers, as the machine read them (once): the request's trace starts from them,
      // before any outcome of this first step is recorded.
      if (first && this.deps.tracer !== undefined) this.startTrace(this.deps.tracer, factsOf(step.state));
      const bodyBytes = request.response_body?.body?.length ?? 0;
      this.responseBytes += bodyBytes;
      // The chunk was fed to the inspector of the state it arrived in: its content events so far.
      if (before.kind === 'Streaming' && before.watch.kind === 'sse') {
        const clock = (this.clock ??= new ResponseClock(this.pickedAt));
        clock.contentSeen(before.watch.inspector.contentEvents, started);
        if (bodyBytes > 0) clock.chunkSeen(started);
      }
      return this.apply(step, started);
    } finally {
      this.deps.outcomes.handled(request.request ?? 'unknown', (performance.now() - started) / 1e3);
    }
  }

  finish(end: StreamEnd): void {
    if (this.finished) return;
    this.finished = true;
    // A client that hangs up leaves the queue at once (or gives back a pick not delivered yet).
    this.queued?.cancel();
    this.apply(onStreamEnd(this.state, end), performance.now());
    if (this.record.routed !== undefined) this.deps.routing.release(this.record.routed);
    this.deps.outcomes.closed(this.record, {
      releasedModel: this.record.routed !== undefined && this.pickedAt !== undefined ? this.record.routed.model : undefined,
      code: statusOf(end),
      seconds: (performance.now() - this.openedAt) / 1e3,
    });
  }

  /** From the request's headers as the machine read them: the client's trace context, the method, path and request id. */
  private startTrace(tracer: RequestTracer, request: RequestFacts | undefined): void {
    if (request === undefined) return;
    const trace = tracer.start(request.header, { method: request.method, path: tracedPath(request.path), requestId: request.requestId });
    this.record.trace = trace;
    const upstreamTrace = trace?.upstreamHeaders;
    if (upstreamTrace !== undefined) this.context = { ...this.context, upstreamTrace };
  }

  /** The one place where outcomes are recorded: each goes to the sinks. */
  private apply(step: Step, now: number): ProcessingResponse[] {
    if (this.record.routed?.session !== undefined) this.answerSession(step, this.record.routed);
    this.state = step.state;
    const outcomes = this.deps.outcomes;
    for (const notice of step.notices) {
      switch (notice.kind) {
        case 'routed': {
          const first = this.pickedAt === undefined;
          if (first) this.pickedAt = now;
          this.record.routed = notice.routed;
          this.record.model = notice.model !== undefined && this.deps.models.serves(notice.model) ? notice.model : undefined;
          this.record.requestBytes = notice.bytes;
          outcomes.routed(this.record, notice.routed, first);
          break;
        }
        case 'queued':
          this.queued = notice.queued;
          outcomes.queued(this.record);
          notice.queued.listen((outcome) => this.leftQueue(outcome));
          break;
        case 'served-outside-pick':
          if (this.reportedOutsidePick) break;
          this.reportedOutsidePick = true;
          outcomes.servedOutsidePick(this.record, notice);
          break;
      }
    }
    for (const attempt of step.attempts) outcomes.attempt(this.record, attempt);
    const done = step.finished;
    if (done !== undefined) {
      // Label only models we serve: a client must not be able to mint metric series at will.
      const servedModel = done.model !== undefined && this.deps.models.serves(done.model) ? done.model : undefined;
      const sentAs = this.record.routed?.model;
      const targetModel =
        servedModel !== undefined && sentAs !== undefined && sentAs !== done.model && this.deps.models.serves(sentAs) ? sentAs : undefined;
      const broken = done.brokenMidStream ? { endpoint: step.attempts.find((a) => a.reason === 'stream_broken')?.endpoint } : undefined;
      outcomes.finished(this.record, {
        result: done.result,
        model: done.model,
        servedModel,
        targetModel,
        status: done.status,
        endpoint: done.endpoint,
        path: done.path,
        operation: operationOf(done.path),
        requestId: done.requestId,
        answer: done.answer,
        verdict: verdictOf(done),
        brokenMidStream: broken,
        figures: servedModel === undefined ? undefined : this.figuresOf(servedModel, done, now),
        at: now,
      });
    }
    return step.replies;
  }

  /**
   * The request named a session: its response headers carry the token of the replica that served
   * it (else of our primary), which the client sends with its next turn (routing/sessions.ts).
   */
  private answerSession(step: Step, routed: RoutedRequest): void {
    const session = routed.session;
    if (session === undefined) return;
    const at = step.replies.findIndex((reply) => reply.response_headers !== undefined);
    if (at < 0) return;
    const served = servedIn(step.state) ?? servedIn(this.state) ?? routed.endpoints[0];
    step.replies[at] = withResponseHeader(step.replies[at], session.header, session.tokenFor(served));
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
  private figuresOf(model: string, done: Finished, now: number): AnswerFigures | undefined {
    const answer = done.answer;
    const endpoint = done.endpoint === undefined ? undefined : this.record.routed?.endpoints.find((e) => e.address === done.endpoint);
    if (done.result !== 'ok' || answer === undefined || endpoint === undefined) return undefined;
    const times = answer === 'stream' ? (this.clock ?? new ResponseClock(this.pickedAt)).times() : undefined;
    const output = done.usage?.output;
    const generation = times?.generation;
    return {
      model,
      pool: endpoint.pool,
      endpoint: endpoint.address,
      operation: operationOf(done.path),
      answer,
      usage: done.usage,
      duration: (now - (this.startedAt ?? now)) / 1e3,
      timeToFirstToken: times?.timeToFirstToken,
      timeToFirstTokenFromStart:
        times?.timeToFirstToken === undefined || this.pickedAt === undefined || this.startedAt === undefined
          ? undefined
          : times.timeToFirstToken + (this.pickedAt - this.startedAt) / 1e3,
      interTokenLatency: times?.interTokenLatency,
      timePerOutputToken: output !== undefined && output > 1 && generation !== undefined ? generation / (output - 1) : undefined,
      responseBytes: this.responseBytes,
      chunkGaps: times?.chunkGaps,
      // Only answers of the first pick: after a failed attempt the TTFT includes another replica's time.
      firstPick: endpoint === this.record.routed?.endpoints[0],
    };
  }
}

/** The gRPC status a stream closed with, by Go's code names (llm-d's `code` label). */
function statusOf(end: StreamEnd): string {
  switch (end.kind) {
    case 'half-closed':
    case 'released':
      return 'OK';
    case 'cancelled':
      return 'Canceled';
    case 'error':
      return end.code === undefined ? 'Unknown' : end.code === 'RESOURCE_EXHAUSTED' ? 'ResourceExhausted' : 'Internal';
  }
}

/** The replica a response came from, in the states that know it. */
function servedIn(state: StreamState): Endpoint | undefined {
  return state.kind === 'Streaming' || state.kind === 'HoldingJson' ? state.served.servedBy : undefined;
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
