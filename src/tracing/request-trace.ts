// What the request path tells a trace, in our own terms: request/ talks to this interface and never
// sees an OpenTelemetry type (otel-request-trace.ts maps it onto a span). Every method is called a
// few times per request — when the headers arrive, at the pick, per attempt, at the result — and
// never per body chunk. With tracing off there is no tracer and no trace: nothing is called at all.
//
// Only figures and names cross this interface, never the prompt or the answer. The header values
// that do: the trace context `start` reads, and `:method`, `:path` (query stripped, length capped:
// it is the client's to make long) and `x-request-id`, which become span attributes.

import type { TokenUsage } from '../inspect/usage.js';

/** Reads one request header (lower-case name); undefined when absent. */
export type HeaderLookup = (name: string) => string | undefined;

export interface RequestTracer {
  /**
   * The trace of one request, continuing the client's `traceparent`/`tracestate` when the headers
   * carry them (a new root otherwise). Undefined when this request is not sampled: nothing more is
   * recorded for it.
   */
  start(headers: HeaderLookup, request: TracedRequest): RequestTrace | undefined;
}

/** Longest `url.path` a span carries: a client's path is unbounded, an attribute should not be. */
export const MAX_TRACED_PATH = 256;

/** `:path` as a span records it: without its query (tokens ride there), at most MAX_TRACED_PATH chars. */
export function tracedPath(path: string): string {
  const query = path.indexOf('?');
  return (query === -1 ? path : path.slice(0, query)).slice(0, MAX_TRACED_PATH);
}

/** What the request headers say, fixed for the stream. */
export interface TracedRequest {
  readonly method: string;
  /** The path without its query, capped (tracedPath). */
  readonly path: string;
  readonly requestId: string;
}

/** The pick, as the picker made it. */
export interface TracedPick {
  readonly model: string;
  readonly pool: string;
  /** The primary's `ip:port`. */
  readonly endpoint: string;
  /** The fallbacks after it, in the order Envoy tries them. */
  readonly fallbacks: readonly string[];
  /** The primary's total score in the picker (higher is better); undefined when not scored. */
  readonly score: number | undefined;
  /** The primary's signals when it was picked: our in-flight count (this request included); the server's figures only from a fresh report. */
  readonly inFlight: number | undefined;
  readonly waiting: number | undefined;
  readonly running: number | undefined;
  readonly kvCacheUsage: number | undefined;
}

/** The figures of an answer a model server gave in full (as llm_extproc_* LLM metrics count them). */
export interface TracedFigures {
  readonly usage: TokenUsage | undefined;
  /** Seconds; undefined where not measured. */
  readonly timeToFirstToken: number | undefined;
  readonly timePerOutputToken: number | undefined;
}

/** The request's result, once. */
export interface TracedResult {
  /** The `result` label of llm_extproc_requests_total. */
  readonly result: string;
  readonly model: string | undefined;
  /** The GenAI operation name of the path (chat, text_completion, embeddings, …). */
  readonly operation: string;
  /** The HTTP status the client got, when one came from upstream. */
  readonly status: number | undefined;
  /** The replica that served (`ip:port`), when known. */
  readonly endpoint: string | undefined;
  /** How the answer came: 'stream', 'json', or undefined (not read to its end). */
  readonly answer: 'stream' | 'json' | undefined;
  /** The verdict on the body when it was inspected: 'ok' or why it was not (stream_incomplete…). */
  readonly verdict: string | undefined;
}

/**
 * The trace context the request carries on to the model server: our span's `traceparent` (and
 * `tracestate`) set over the client's, and the client's `tracestate` removed when it belongs to a
 * trace we did not continue (a malformed traceparent).
 */
export interface UpstreamTraceHeaders {
  readonly set: ReadonlyArray<readonly [string, string]>;
  readonly remove: readonly string[];
}

export interface RequestTrace {
  /** Undefined when tracing.propagateToUpstream is off: the client's headers go on unchanged. */
  readonly upstreamHeaders: UpstreamTraceHeaders | undefined;
  /** The request waits in its pool's queue (flow control). */
  queued(): void;
  picked(pick: TracedPick): void;
  /** One replica's part: 'success' or 'failure' and why (its reason is the attempt label of our metrics). */
  attempt(pool: string, endpoint: string, outcome: 'success' | 'failure', reason: string): void;
  figures(figures: TracedFigures): void;
  finished(result: TracedResult): void;
  /** The stream ended: the span ends (and is queued for export). Called once. */
  end(): void;
}
