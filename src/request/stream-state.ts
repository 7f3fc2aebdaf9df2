// The states of one ext_proc stream and what a transition returns; stream-machine.ts moves
// between them. Each state carries exactly the data it needs. No I/O.

import type { ModelRewrites } from '../picker/model-rewrite.js';
import type { DestinationFormat } from '../config/config.js';
import type { Endpoint } from '../endpoints/model.js';
import type { AttemptFailure } from '../endpoints/passive-health.js';
import { GatewayError } from '../errors/gateway-error.js';
import type { SseInspector } from '../inspect/sse-inspector.js';
import type { UsageChunkFilter } from '../inspect/usage-chunk-filter.js';
import type { TokenUsage } from '../inspect/usage.js';
import type { ProcessingResponse } from '../extproc/messages.js';
import { immediateError } from './decision-replies.js';
import type { RequestResult } from './request-result.js';
import type { BodyCollector } from './body-collector.js';
import type { QueuedRoute, RoutedRequest, Routing } from '../routing/routing.js';
import type { ServedModels } from '../routing/served-models.js';
import type { RequestRule, ResponseRule } from './delivery-rules.js';
import type { InferenceRequest } from './openai-request.js';
import type { UpstreamTraceHeaders } from '../tracing/request-trace.js';

export interface MachineContext {
  readonly routing: Routing;
  /** What GET /v1/models lists. */
  readonly models: ServedModels;
  readonly maxRequestBodyBytes: number;
  /** Bodies we hold ourselves to validate (JSON answers in full-duplex mode) stop being held past this. */
  readonly maxInspectedBodyBytes: number;
  readonly destinationFormat: DestinationFormat;
  /** This replica's `listen.peerAddress`, written into each pick's metadata; absent = none written. */
  readonly replica?: string;
  /** Whether streams of requests routed to this pool get `stream_options.include_usage` added when they lack it. */
  readonly injectsStreamUsage: (pool: string) => boolean;
  /** Weighted model rewrite (picker/model-rewrite.ts); empty = none. */
  readonly modelRewrites: ModelRewrites;
  /** Flow control's request headers; absent = flow control is off everywhere (no header is read). */
  readonly flowHeaders?: { readonly tenant: string; readonly priority: string; readonly objective: string };
  /** This stream's span context for the model server (tracing on, sampled, propagateToUpstream); absent otherwise. */
  readonly upstreamTrace?: UpstreamTraceHeaders;
}

/** Reads one request header (lower-case name); undefined when absent. */
export type HeaderLookup = (name: string) => string | undefined;

/** What the request headers told us, read once (request-phase.ts); fixed for the life of the stream. */
export interface RequestFacts {
  /** What the bodies' delivery, as Envoy announced it on this stream, means to us (delivery-rules.ts). */
  readonly requestRule: RequestRule;
  readonly responseRule: ResponseRule;
  readonly method: string;
  readonly path: string;
  readonly requestId: string;
  /** Any other header, for who needs one (a trace's context, a scorer keyed on a header). */
  readonly header: HeaderLookup;
  /** The gateway's subset hint, when it sent one. */
  readonly subset: ReadonlySet<string> | undefined;
  /** The request's declared `content-length`, when it has one. */
  readonly contentLength: number | undefined;
  /** Flow control's tenant, priority-class and objective headers, when it reads them. */
  readonly tenant?: string;
  readonly priorityClass?: string;
  readonly objective?: string;
}

/** A whole request body that is read and ready to go, once it has a pick. */
export interface ReadRequest {
  readonly request: RequestFacts;
  /** How many body messages Envoy sent (STREAMED answers each one). */
  readonly pieces: number;
  readonly body: Buffer;
  readonly inference: InferenceRequest;
  readonly trailersFollow: boolean;
  /** The body with its `model` rewritten (and the model it names), when a rewrite applies. */
  readonly rewrite: { readonly model: string; readonly body: Buffer } | undefined;
}

/** A request on its way to (or back from) the model servers. */
export interface Exchange {
  readonly request: RequestFacts;
  /** Absent when Envoy answered before we routed (its own limits, timeouts). */
  readonly routed: RoutedRequest | undefined;
  readonly model: string | undefined;
  /**
   * The replica that served when nobody reports it (no `upstream.address`, no `-served` metadata):
   * certain only when Envoy could reach no other — one address handed over, or one picked.
   * Undefined otherwise: a guess would credit a replica that may have refused the connection.
   */
  readonly servedUnlessReported?: Endpoint;
  /** We added `stream_options.include_usage` to the request: the usage-only chunk is ours to remove. */
  readonly usageInjected?: boolean;
  /** Size of the request body as the client sent it. */
  readonly requestBytes?: number;
}

/** A response that came from an upstream (or at least not from Envoy itself). */
export interface Served {
  readonly exchange: Exchange;
  readonly servedBy: Endpoint | undefined;
  readonly status: number;
}

/** What to record when a body we pass through ends normally. */
export interface PendingOutcome {
  readonly result: RequestResult;
  readonly failure: AttemptFailure | undefined;
  /** False for answers we could not judge: neither success nor failure for the replica. */
  readonly judged: boolean;
}

export type BodyWatch =
  /**
   * An SSE stream: reassembled incrementally, judged at its end. `filter`: we asked for its usage
   * (usage injection), so its usage-only chunk is taken out before the client sees it.
   */
  | { readonly kind: 'sse'; readonly inspector: SseInspector; readonly filter: UsageChunkFilter | undefined }
  /** A JSON answer Envoy holds whole for us (BUFFERED / BUFFERED_PARTIAL); it arrives in one message. */
  | { readonly kind: 'envoy-held-json' }
  /**
   * A JSON answer already on its way to the client: we keep a copy (up to the inspection limit)
   * only to judge it at the end. `envoyStreamsRest`: BUFFERED_PARTIAL sent us its first part and
   * streams the rest without us, so the end never reaches us.
   */
  | { readonly kind: 'json-copy'; readonly chunks: Buffer[]; bytes: number; overflow: boolean; readonly envoyStreamsRest: boolean }
  /** Anything else (compressed, other media types, another filter's answer): watched for its end only. */
  | { readonly kind: 'opaque' };

export type StreamState =
  | { readonly kind: 'AwaitingRequestHeaders' }
  | {
      readonly kind: 'CollectingRequestBody';
      readonly request: RequestFacts;
      readonly body: BodyCollector;
      /** False while we hold the header reply (full duplex, early streamed bodies). */
      readonly headersAnswered: boolean;
    }
  /** Flow control: the pool is saturated and the request waits in its queue for a pick. */
  | { readonly kind: 'Queued'; readonly read: ReadRequest; readonly queued: QueuedRoute }
  | { readonly kind: 'AwaitingResponse'; readonly exchange: Exchange }
  | {
      /** A 5xx with no attributes to tell who wrote it: we read its (small) body before deciding. */
      readonly kind: 'ReadingErrorText';
      readonly exchange: Exchange;
      readonly status: number;
      readonly chunks: Buffer[];
      bytes: number;
    }
  | {
      /** Full duplex: a JSON answer we hold (headers and body) until it is whole and judged. */
      readonly kind: 'HoldingJson';
      readonly served: Served;
      readonly chunks: Buffer[];
      bytes: number;
    }
  | { readonly kind: 'Streaming'; readonly served: Served; readonly watch: BodyWatch; readonly pending: PendingOutcome | undefined }
  /** The result is recorded. A body chunk may still pass (after another filter's answer): `request` says how. */
  | { readonly kind: 'Done'; readonly request?: RequestFacts };

/** One replica's part in the request, known at the moment it is reported. */
export interface Attempt {
  readonly endpoint: Endpoint;
  readonly failure: AttemptFailure | undefined;
  readonly reason: string;
}

/** The request's result, reported exactly once per stream. */
export interface Finished {
  readonly result: RequestResult;
  readonly model: string | undefined;
  readonly status: number | undefined;
  readonly endpoint: string | undefined;
  readonly path: string;
  readonly requestId: string;
  /** A mid-stream break we could not explain (client gone, or the replica died). */
  readonly brokenMidStream: boolean;
  /** How the answer came: a stream of events, or one JSON document; undefined for anything else. */
  readonly answer: 'stream' | 'json' | undefined;
  /** The tokens the answer reported; undefined when it reported none (never read as zero). */
  readonly usage: TokenUsage | undefined;
}

export type Notice =
  /** `model`: the model the request named (before any rewrite); `bytes`: its body's size as the client sent it. */
  | { readonly kind: 'routed'; readonly routed: RoutedRequest; readonly model: string | undefined; readonly bytes: number }
  /** The request waits in a queue: the processor listens for its outcome, and cancels it if the stream ends. */
  | { readonly kind: 'queued'; readonly queued: QueuedRoute }
  | {
      readonly kind: 'served-outside-pick';
      readonly upstream: string;
      readonly picked: readonly string[];
      readonly model: string | undefined;
      readonly requestId: string;
    };

export interface Step {
  readonly state: StreamState;
  readonly replies: ProcessingResponse[];
  readonly attempts: Attempt[];
  readonly finished: Finished | undefined;
  readonly notices: Notice[];
}

const NONE_LEARNT: Attempt[] = Object.freeze([]) as unknown as Attempt[];
const NONE_TOLD: Notice[] = Object.freeze([]) as unknown as Notice[];

/** Collects what one transition produces: replies, attempts, the result, notices, the next state. */
export class StepBuilder {
  state: StreamState;
  // Most steps (a streamed chunk) learn no attempt and raise no notice: those lists are allocated
  // only when something is added, so the per-chunk path creates as little garbage as possible.
  private readonly out: ProcessingResponse[] = [];
  private learnt: Attempt[] = NONE_LEARNT;
  private told: Notice[] = NONE_TOLD;
  /** Mutable here only: build() fills in the answer, without copying the result. */
  private result: { -readonly [K in keyof Finished]: Finished[K] } | undefined;
  private answer: Finished['answer'];
  private tokens: TokenUsage | undefined;

  constructor(state: StreamState) {
    this.state = state;
  }

  reply(reply: ProcessingResponse): void {
    this.out.push(reply);
  }

  replies(replies: readonly ProcessingResponse[]): void {
    for (const reply of replies) this.out.push(reply);
  }

  become(state: StreamState): void {
    this.state = state;
  }

  attempt(endpoint: Endpoint, failure: AttemptFailure | undefined, reason: string): void {
    if (this.learnt === NONE_LEARNT) this.learnt = [];
    this.learnt.push({ endpoint, failure, reason });
  }

  notice(notice: Notice): void {
    if (this.told === NONE_TOLD) this.told = [];
    this.told.push(notice);
  }

  /** What kind of answer was read to its end, and the usage it reported (before or after finish()). */
  answered(answer: 'stream' | 'json', usage: TokenUsage | undefined): void {
    this.answer = answer;
    this.tokens = usage;
  }

  /** The request's result; the state becomes Done unless the caller moves on (pass-through). */
  finish(
    request: RequestFacts | undefined,
    exchange: Exchange | undefined,
    result: RequestResult,
    served?: Served,
    brokenMidStream = false,
  ): void {
    if (this.result !== undefined) return;
    this.result = {
      result,
      model: exchange?.model,
      status: served?.status === 0 ? undefined : served?.status,
      endpoint: served?.servedBy?.address,
      path: pathOnly(request?.path ?? ''),
      requestId: request?.requestId ?? '',
      brokenMidStream,
      answer: undefined,
      usage: undefined,
    };
    this.state = request === undefined ? { kind: 'Done' } : { kind: 'Done', request };
  }

  /** Answer the client ourselves before anything went upstream. */
  reject(request: RequestFacts, err: GatewayError, model?: string): void {
    this.finish(request, { request, routed: undefined, model }, err.kind);
    this.reply(immediateError(err, request.requestId));
  }

  build(): Step {
    const result = this.result;
    if (result !== undefined && this.answer !== undefined) {
      result.answer = this.answer;
      result.usage = this.tokens;
    }
    return { state: this.state, replies: this.out, attempts: this.learnt, finished: result, notices: this.told };
  }
}

/** The request facts of any state, once the request headers were read. */
export function factsOf(state: StreamState): RequestFacts | undefined {
  return state.kind === 'Done' ? state.request : requestOf(state);
}

/** The request facts of any state that has them. */
export function requestOf(state: Exclude<StreamState, { kind: 'Done' }>): RequestFacts | undefined {
  switch (state.kind) {
    case 'AwaitingRequestHeaders':
      return undefined;
    case 'CollectingRequestBody':
      return state.request;
    case 'Queued':
      return state.read.request;
    case 'AwaitingResponse':
    case 'ReadingErrorText':
      return state.exchange.request;
    case 'HoldingJson':
    case 'Streaming':
      return state.served.exchange.request;
  }
}

export function exchangeOf(state: Exclude<StreamState, { kind: 'Done' }>): Exchange | undefined {
  switch (state.kind) {
    case 'AwaitingRequestHeaders':
    case 'CollectingRequestBody':
    case 'Queued':
      return undefined;
    case 'AwaitingResponse':
    case 'ReadingErrorText':
      return state.exchange;
    case 'HoldingJson':
    case 'Streaming':
      return state.served.exchange;
  }
}

export function pathOnly(path: string): string {
  const q = path.indexOf('?');
  return q === -1 ? path : path.slice(0, q);
}

export function protocolViolation(what: string, state: StreamState): GatewayError {
  return new GatewayError('internal_error', `ext_proc protocol violation: got ${what} in state ${state.kind}`);
}
