// What a stream's processor records, in our own terms, and who hears it. The processor
// (request-processor.ts) turns each step of the state machine into these outcomes and hands every
// one to one OutcomeSink: the sinks app.ts composes (src/outcomes/: metrics, traces, logs, passive
// health), each deciding what an outcome means to it. A new observer is a new sink; a new kind of
// outcome is a method here, and tsc then lists every sink that must say what it does with it.

import type { Endpoint } from '../endpoints/model.js';
import type { LlmFigures } from '../metrics/llm-metrics.js';
import type { RoutedRequest } from '../routing/routing.js';
import type { RequestTrace } from '../tracing/request-trace.js';
import type { RequestResult } from './request-result.js';
import type { Attempt, Notice } from './stream-state.js';

/** What is known of a request when an outcome about it is recorded (the processor's, read-only here). */
export interface RequestRecord {
  /** Its trace, when tracing is on and this request is sampled. */
  readonly trace: RequestTrace | undefined;
  /** The pick Envoy was last given. */
  readonly routed: RoutedRequest | undefined;
  /** The model the request named, once routed, when some pool serves it (what may label a series); else undefined. */
  readonly model: string | undefined;
  /** The request body's size as the client sent it, once routed. */
  readonly requestBytes: number | undefined;
}

/** How a stream ended (metrics: llm-d's ext_proc stream series). */
export interface StreamClosed {
  /** The model whose routed request it gave back, if it was routed. */
  readonly releasedModel: string | undefined;
  /**
   * The gRPC status it closed with, named as llm-d names codes (Go's): OK, Canceled, Internal,
   * ResourceExhausted; Unknown for a transport failure, where no status was sent.
   */
  readonly code: string;
  /** From the stream's start to its end. */
  readonly seconds: number;
}

/** Envoy sent the request to a host we did not pick (told once per request). */
export type OutsidePick = Omit<Extract<Notice, { kind: 'served-outside-pick' }>, 'kind'>;

/** The figures of an answer a model server gave in full (what the LLM metrics count), and who gave it. */
export interface AnswerFigures extends LlmFigures {
  /** Served by the primary: its time to first token holds no other replica's time. */
  readonly firstPick: boolean;
}

/** The request's result, reported exactly once per stream. */
export interface RequestOutcome {
  readonly result: RequestResult;
  /** The model the request named, when it named one. */
  readonly model: string | undefined;
  /** `model` when some pool serves it, else undefined: what may label a metric series or a span. */
  readonly servedModel: string | undefined;
  /** The model it was sent as when a rewrite changed `model` and some pool serves it (metrics' `target_model_name`); else undefined. */
  readonly targetModel: string | undefined;
  readonly status: number | undefined;
  /** The replica that served (`ip:port`), when known. */
  readonly endpoint: string | undefined;
  /** The path without its query. */
  readonly path: string;
  readonly operation: string;
  readonly requestId: string;
  /** How the answer came: a stream of events, one JSON document; undefined for anything else. */
  readonly answer: 'stream' | 'json' | undefined;
  /** What inspecting the body found ('ok' or why not), for a trace; undefined when not inspected. */
  readonly verdict: string | undefined;
  /** A response stream broke before its end with no explanation, on this replica (when known). */
  readonly brokenMidStream: { readonly endpoint: Endpoint | undefined } | undefined;
  /** Figures of an answer a model server gave in full (served models only); undefined otherwise. */
  readonly figures: AnswerFigures | undefined;
  /** When it was recorded (performance.now() milliseconds). */
  readonly at: number;
}

/**
 * Hears every outcome of every stream. Sinks are shared by all streams (per-request state rides in
 * the record) and called unbound: each member is a function of its own, never a method using `this`.
 */
export interface OutcomeSink {
  /** A stream opened (before its first message). */
  readonly opened: () => void;
  /** One ext_proc message took `seconds` of our processing. Per message: keep it cheap. */
  readonly handled: (message: string, seconds: number) => void;
  /** Envoy was given a pick; `first` once per request (a request dispatched from a queue is routed once). */
  readonly routed: (request: RequestRecord, routed: RoutedRequest, first: boolean) => void;
  /** The request waits in its pool's queue (flow control). */
  readonly queued: (request: RequestRecord) => void;
  readonly servedOutsidePick: (request: RequestRecord, notice: OutsidePick) => void;
  readonly attempt: (request: RequestRecord, attempt: Attempt) => void;
  readonly finished: (request: RequestRecord, outcome: RequestOutcome) => void;
  /** The stream ended. */
  readonly closed: (request: RequestRecord, closed: StreamClosed) => void;
}

/** What a sink sets a method to when that outcome means nothing to it: the composition skips it. */
export const IGNORED = (): void => undefined;

/** Every method of OutcomeSink, so that composing cannot forget one (a missing key does not compile). */
const EVERY_METHOD: Readonly<Record<keyof OutcomeSink, true>> = {
  opened: true,
  handled: true,
  routed: true,
  queued: true,
  servedOutsidePick: true,
  attempt: true,
  finished: true,
  closed: true,
};

type Listener = (a?: unknown, b?: unknown, c?: unknown) => void;

/**
 * One sink that hands each outcome to every sink that listens to it, in order. Built once (app.ts):
 * a method only one sink listens to is that sink's own function, so the common case costs no
 * extra call; one nobody listens to is IGNORED.
 */
export function composeSinks(sinks: readonly OutcomeSink[]): OutcomeSink {
  const composed: Partial<Record<keyof OutcomeSink, Listener>> = {};
  for (const method of Object.keys(EVERY_METHOD) as Array<keyof OutcomeSink>) {
    const listeners = sinks.map((sink) => sink[method] as Listener).filter((listener) => listener !== IGNORED);
    composed[method] =
      listeners.length === 0
        ? IGNORED
        : listeners.length === 1
          ? listeners[0]
          : (a, b, c) => {
              for (const listener of listeners) listener(a, b, c);
            };
  }
  return composed as OutcomeSink;
}
