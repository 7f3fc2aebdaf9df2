// RequestTracer on the OpenTelemetry API: one SERVER span per request (per ext_proc stream),
// child of the client's span when its `traceparent` reaches us in the request headers Envoy
// forwards. Attributes follow the GenAI semantic conventions where they name the figure
// (gen_ai.*), plus ours under `llm_extproc.`; attempts are span events. Names and figures only:
// nothing here ever reads a body.

import { ROOT_CONTEXT, SpanKind, SpanStatusCode, trace } from '@opentelemetry/api';
import type { Attributes, Span, TextMapGetter, TextMapPropagator, TextMapSetter, Tracer } from '@opentelemetry/api';
import { isCancellation } from '../errors/catalog.js';
import { splitHostPort } from '../util/host-port.js';
import type {
  HeaderLookup,
  RequestTrace,
  RequestTracer,
  TracedFigures,
  TracedPick,
  TracedRequest,
  TracedResult,
  UpstreamTraceHeaders,
} from './request-trace.js';

/** The attribute names we write (docs/observability.md lists them). */
export const ATTR = {
  operation: 'gen_ai.operation.name',
  requestModel: 'gen_ai.request.model',
  inputTokens: 'gen_ai.usage.input_tokens',
  outputTokens: 'gen_ai.usage.output_tokens',
  cachedTokens: 'gen_ai.usage.cache_read.input_tokens',
  timeToFirstToken: 'gen_ai.server.time_to_first_token',
  timePerOutputToken: 'gen_ai.server.time_per_output_token',
  errorType: 'error.type',
  serverAddress: 'server.address',
  serverPort: 'server.port',
  method: 'http.request.method',
  path: 'url.path',
  status: 'http.response.status_code',
  requestId: 'llm_extproc.request_id',
  pool: 'llm_extproc.pool',
  picked: 'llm_extproc.endpoint.picked',
  fallbacks: 'llm_extproc.endpoint.fallbacks',
  served: 'llm_extproc.endpoint.served',
  score: 'llm_extproc.pick.score',
  inFlight: 'llm_extproc.pick.in_flight',
  waiting: 'llm_extproc.pick.waiting',
  running: 'llm_extproc.pick.running',
  kvCacheUsage: 'llm_extproc.pick.kv_cache_usage',
  queued: 'llm_extproc.queued',
  attempts: 'llm_extproc.attempts',
  result: 'llm_extproc.result',
  answer: 'llm_extproc.answer',
  verdict: 'llm_extproc.verdict',
  attemptEndpoint: 'llm_extproc.attempt.endpoint',
  attemptPool: 'llm_extproc.attempt.pool',
  attemptOutcome: 'llm_extproc.attempt.outcome',
  attemptReason: 'llm_extproc.attempt.reason',
} as const;

/** The span's name until the model is known; then `{operation} {model}` as the GenAI conventions name it. */
const SPAN_NAME = 'llm_extproc.request';
export const ATTEMPT_EVENT = 'llm_extproc.attempt';
const QUEUED_EVENT = 'llm_extproc.queued';

const GETTER: TextMapGetter<HeaderLookup> = {
  // Only the propagator's own headers are ever asked for; there is no list of all of them.
  keys: () => [],
  get: (lookup, key) => lookup(key.toLowerCase()),
};

type Carrier = Record<string, string>;

const SETTER: TextMapSetter<Carrier> = {
  set: (carrier, key, value) => {
    carrier[key.toLowerCase()] = value;
  },
};

export interface OtelRequestTracerOptions {
  /** Hand the model server our span's context (tracing.propagateToUpstream). Default true. */
  readonly propagateToUpstream?: boolean;
}

export class OtelRequestTracer implements RequestTracer {
  private readonly propagateToUpstream: boolean;

  constructor(
    private readonly tracer: Tracer,
    private readonly propagator: TextMapPropagator,
    options: OtelRequestTracerOptions = {},
  ) {
    this.propagateToUpstream = options.propagateToUpstream ?? true;
  }

  start(headers: HeaderLookup, request: TracedRequest): RequestTrace | undefined {
    const parent = this.propagator.extract(ROOT_CONTEXT, headers, GETTER);
    const span = this.tracer.startSpan(
      SPAN_NAME,
      {
        kind: SpanKind.SERVER,
        attributes: { [ATTR.method]: request.method, [ATTR.path]: request.path, [ATTR.requestId]: request.requestId },
      },
      parent,
    );
    // Not sampled: the span records nothing, and the request path is told nothing more.
    if (!span.isRecording()) return undefined;
    return new OtelRequestTrace(span, this.propagateToUpstream ? this.upstreamHeaders(span, headers) : undefined);
  }

  /** Our span's context as the propagator writes it: the model server's span becomes our child. */
  private upstreamHeaders(span: Span, headers: HeaderLookup): UpstreamTraceHeaders {
    const carrier: Carrier = {};
    this.propagator.inject(trace.setSpan(ROOT_CONTEXT, span), carrier, SETTER);
    // The propagator writes an empty tracestate when the client's parsed to no entries: W3C says
    // omit the header then, so it is dropped, never sent as `tracestate: ""`.
    const set = Object.entries(carrier).filter(([key, value]) => key !== 'tracestate' || value !== '');
    const forwarded = set.some(([key]) => key === 'tracestate');
    // A client tracestate we did not take on (its traceparent was malformed, or nothing in it
    // parsed) must not ride along with a traceparent of another trace.
    const stale = !forwarded && headers('tracestate') !== undefined;
    return { set, remove: stale ? ['tracestate'] : [] };
  }
}

class OtelRequestTrace implements RequestTrace {
  private attempts = 0;
  private ended = false;

  constructor(
    private readonly span: Span,
    readonly upstreamHeaders: UpstreamTraceHeaders | undefined,
  ) {}

  queued(): void {
    this.span.setAttribute(ATTR.queued, true);
    this.span.addEvent(QUEUED_EVENT);
  }

  picked(pick: TracedPick): void {
    const attributes: Attributes = {
      [ATTR.requestModel]: pick.model,
      [ATTR.pool]: pick.pool,
      [ATTR.picked]: pick.endpoint,
      [ATTR.fallbacks]: [...pick.fallbacks],
    };
    setDefined(attributes, ATTR.score, pick.score);
    setDefined(attributes, ATTR.inFlight, pick.inFlight);
    setDefined(attributes, ATTR.waiting, pick.waiting);
    setDefined(attributes, ATTR.running, pick.running);
    setDefined(attributes, ATTR.kvCacheUsage, pick.kvCacheUsage);
    this.span.setAttributes(attributes);
  }

  attempt(pool: string, endpoint: string, outcome: 'success' | 'failure', reason: string): void {
    this.attempts++;
    this.span.addEvent(ATTEMPT_EVENT, {
      [ATTR.attemptEndpoint]: endpoint,
      [ATTR.attemptPool]: pool,
      [ATTR.attemptOutcome]: outcome,
      [ATTR.attemptReason]: reason,
    });
  }

  figures(figures: TracedFigures): void {
    const attributes: Attributes = {};
    setDefined(attributes, ATTR.inputTokens, figures.usage?.input);
    setDefined(attributes, ATTR.outputTokens, figures.usage?.output);
    setDefined(attributes, ATTR.cachedTokens, figures.usage?.cached);
    setDefined(attributes, ATTR.timeToFirstToken, figures.timeToFirstToken);
    setDefined(attributes, ATTR.timePerOutputToken, figures.timePerOutputToken);
    this.span.setAttributes(attributes);
  }

  finished(result: TracedResult): void {
    const attributes: Attributes = { [ATTR.operation]: result.operation, [ATTR.result]: result.result };
    if (result.model !== undefined) this.span.updateName(`${result.operation} ${result.model}`);
    setDefined(attributes, ATTR.status, result.status);
    setDefined(attributes, ATTR.answer, result.answer);
    setDefined(attributes, ATTR.verdict, result.verdict);
    if (result.endpoint !== undefined) {
      attributes[ATTR.served] = result.endpoint;
      const { host, port } = splitHostPort(result.endpoint);
      attributes[ATTR.serverAddress] = host;
      if (Number.isInteger(port)) attributes[ATTR.serverPort] = port;
    }
    if (result.result === 'ok') this.span.setStatus({ code: SpanStatusCode.OK });
    else if (isCancellation(result.result)) {
      // The client left: no error of ours or of the model server's, so the status stays unset.
    } else {
      attributes[ATTR.errorType] = result.result;
      this.span.setStatus({ code: SpanStatusCode.ERROR, message: result.result });
    }
    this.span.setAttributes(attributes);
  }

  end(): void {
    if (this.ended) return;
    this.ended = true;
    this.span.setAttribute(ATTR.attempts, this.attempts);
    this.span.end();
  }
}

function setDefined(attributes: Attributes, key: string, value: string | number | undefined): void {
  if (value !== undefined) attributes[key] = value;
}
