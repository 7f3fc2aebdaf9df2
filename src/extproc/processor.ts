// One processor per ext_proc stream (= one HTTP request through Envoy). It walks explicit phases,
// returns the replies for each message and never does I/O itself: the gRPC edge sends what it
// returns. Outcomes (success/failure per endpoint) are recorded exactly once, and only when known.

import type { Logger } from 'pino';
import type { Endpoint } from '../endpoints/model.js';
import type { AttemptFailure } from '../endpoints/passive-health.js';
import { classifyEnvoyReply, isEnvoyLocalReply } from '../errors/envoy-reply.js';
import { GatewayError } from '../errors/gateway-error.js';
import { renderError, renderSseErrorEvent } from '../errors/render.js';
import type { ErrorKind } from '../errors/catalog.js';
import { inspectJsonBody } from '../inspect/json-body.js';
import { isJsonContentType, isSseContentType } from '../inspect/content-type.js';
import { SseInspector } from '../inspect/sse-inspector.js';
import type { BodyVerdict } from '../inspect/verdict.js';
import type { Routing } from './routing.js';
import type { RoutedRequest } from './routing.js';
import type { CommonResponse, HttpBody, HttpHeaders, ProcessingRequest, ProcessingResponse, ProtoStruct } from './messages.js';
import { CONTINUE_REQUEST_BODY, CONTINUE_REQUEST_HEADERS, CONTINUE_RESPONSE_BODY, CONTINUE_RESPONSE_HEADERS } from './constant-replies.js';
import { readInferenceRequest } from './openai-request.js';
import { DESTINATION_HEADER, DESTINATION_METADATA_NAMESPACE, ERROR_HEADER } from './protocol-names.js';
import type { StreamEnd, StreamProcessor } from './processor-contract.js';
import { attributeNumber, attributeString, headerLookup, headerMutation, metadataNamespaces } from './wire-values.js';

export interface ProcessorMetrics {
  requestStarted(): void;
  requestEnded(): void;
  requestFinished(model: string, result: string): void;
  attempt(pool: string, endpoint: string, outcome: 'success' | 'failure', reason: string): void;
  messageHandled(message: string, seconds: number): void;
  servedOutsidePick(): void;
}

export interface ProcessorDeps {
  readonly routing: Routing;
  readonly metrics: ProcessorMetrics;
  readonly logger: Logger;
  readonly maxRequestBodyBytes: number;
  /** JSON answers declaring a larger content-length are not held for validation; they pass through. */
  readonly maxInspectedBodyBytes: number;
}

type Phase =
  | 'request_headers'
  | 'request_body'
  | 'response_headers'
  | 'response_sse'
  | 'response_json'
  | 'response_other'
  | 'response_local_text'
  | 'done';

type ResponseKind = 'sse' | 'json' | 'other';

/** Metrics label for requests whose model is absent or not served here. */
const UNKNOWN_MODEL = '(unknown)';

export class RequestProcessor implements StreamProcessor {
  private phase: Phase = 'request_headers';
  private method = '';
  private path = '';
  private requestId = '';
  private model = UNKNOWN_MODEL;
  private requestBody: Buffer[] = [];
  private requestBodyBytes = 0;
  private routed: RoutedRequest | undefined;
  private servedBy: Endpoint | undefined;
  private responseStatus = 0;
  private sse: SseInspector | undefined;
  /** A JSON answer larger than Envoy's buffer: it passes through without validation. */
  private jsonTooLargeToHold = false;
  /** Outcome to record when a passed-through body ends (e.g. an upstream JSON 5xx is a failure). */
  private pendingOutcome: { failure: AttemptFailure | undefined; result: string } | undefined;
  private finished = false;
  private reportedOutsidePick = false;

  constructor(private readonly deps: ProcessorDeps) {
    deps.metrics.requestStarted();
  }

  process(request: ProcessingRequest): ProcessingResponse[] {
    const started = process.hrtime.bigint();
    const kind = request.request ?? 'unknown';
    try {
      return this.dispatch(request);
    } finally {
      this.deps.metrics.messageHandled(kind, Number(process.hrtime.bigint() - started) / 1e9);
    }
  }

  finish(end: StreamEnd): void {
    if (this.finished) return;
    this.finished = true;
    if (this.phase !== 'done') this.endWithoutCompletion(end);
    if (this.routed !== undefined) this.deps.routing.release(this.routed);
    this.deps.metrics.requestEnded();
  }

  private dispatch(request: ProcessingRequest): ProcessingResponse[] {
    if (request.observability_mode === true) return []; // observability mode expects no replies
    switch (request.request) {
      case 'request_headers':
        return [this.onRequestHeaders(request.request_headers ?? {})];
      case 'request_body':
        return [this.onRequestBody(request.request_body ?? {})];
      case 'response_headers':
        return [this.onResponseHeaders(request.response_headers ?? {}, request.attributes)];
      case 'response_body':
        return [this.onResponseBody(request.response_body ?? {})];
      case 'request_trailers':
        return [{ request_trailers: {} }];
      case 'response_trailers':
        return [{ response_trailers: {} }];
      default:
        throw new GatewayError('internal_error', `ext_proc message of unknown type ${String(request.request)}`);
    }
  }

  // ── request path ────────────────────────────────────────────────────────────────────────────

  private onRequestHeaders(message: HttpHeaders): ProcessingResponse {
    this.expectPhase('request_headers');
    const headers = headerLookup(message.headers);
    this.method = headers.get(':method') ?? '';
    this.path = headers.get(':path') ?? '';
    this.requestId = headers.get('x-request-id') ?? '';
    if (message.end_of_stream === true) {
      if (this.method === 'GET' && pathOnly(this.path) === '/v1/models') {
        try {
          return this.immediateSuccess(this.deps.routing.modelList());
        } catch (err) {
          return this.reject(GatewayError.from(err));
        }
      }
      if (this.method !== 'POST') return this.reject(new GatewayError('method_not_allowed', `${this.method} is not supported on ${pathOnly(this.path)}; inference requests are POSTs with a JSON body`));
      return this.reject(new GatewayError('missing_body', `POST ${pathOnly(this.path)} has no body; send an OpenAI-style JSON request with a "model" field`));
    }
    const declaredLength = Number(headers.get('content-length') ?? '0');
    if (declaredLength > this.deps.maxRequestBodyBytes) return this.reject(this.tooLarge(declaredLength));
    this.phase = 'request_body';
    return CONTINUE_REQUEST_HEADERS;
  }

  private onRequestBody(message: HttpBody): ProcessingResponse {
    this.expectPhase('request_body');
    const chunk = message.body ?? Buffer.alloc(0);
    this.requestBodyBytes += chunk.length;
    if (this.requestBodyBytes > this.deps.maxRequestBodyBytes) return this.reject(this.tooLarge(this.requestBodyBytes));
    this.requestBody.push(chunk);
    // Envoy sends the whole body in one message in BUFFERED mode; tolerate chunks all the same.
    if (message.end_of_stream !== true) return CONTINUE_REQUEST_BODY;
    const body = this.requestBody.length === 1 ? chunk : Buffer.concat(this.requestBody);
    this.requestBody = [];
    try {
      const inference = readInferenceRequest(body);
      this.model = inference.model;
      this.routed = this.deps.routing.route({ model: inference.model });
    } catch (err) {
      return this.reject(GatewayError.from(err));
    }
    this.phase = 'response_headers';
    // The metadata carries the whole list (override_host reads it first and walks it on retries);
    // the header carries the primary alone, which ORIGINAL_DST clusters and the Gateway API
    // Inference Extension protocol expect.
    return {
      request_body: {
        response: { header_mutation: headerMutation([[DESTINATION_HEADER, this.routed.destinations[0] ?? '']]) },
      },
      dynamic_metadata: metadataFor(this.routed.destinations.join(',')),
    };
  }

  // ── response path ───────────────────────────────────────────────────────────────────────────

  private onResponseHeaders(message: HttpHeaders, attributes: Record<string, ProtoStruct> | undefined): ProcessingResponse {
    if (this.phase !== 'response_headers') {
      // Envoy's own reply to a request we never routed (e.g. our immediate response is not re-processed,
      // but a 413 from Envoy's buffer limit can arrive here while we wait for the body).
      this.phase = 'response_headers';
    }
    const headers = headerLookup(message.headers);
    const status = Number(headers.get(':status') ?? '0');
    this.responseStatus = status;
    const codeDetails = attributeString(attributes, 'response.code_details');
    const flags = attributeNumber(attributes, 'response.flags');
    const upstreamAddress = attributeString(attributes, 'upstream.address');
    const contentType = headers.get('content-type') ?? '';

    const facts = { status, codeDetails, flags };
    const local = classifyEnvoyReply(facts);
    if (local !== undefined) return this.replaceEnvoyReply(local.kind, local.detail, upstreamAddress);
    if (isEnvoyLocalReply(facts)) {
      // Another filter's deliberate answer (401, 403, 429...): its status and body are the message.
      this.finishRequest(`local_reply_${status}`);
      return CONTINUE_RESPONSE_HEADERS;
    }
    if (codeDetails === undefined && status >= 500 && !isJsonContentType(contentType) && headers.get(ERROR_HEADER) === undefined) {
      // No attributes to tell who answered: read the (small, plain-text) body before deciding.
      this.phase = 'response_local_text';
      return { response_headers: { response: {} }, mode_override: { response_body_mode: 'BUFFERED' } };
    }
    this.servedBy = this.resolveServedBy(upstreamAddress);
    this.blameSkippedEndpoints();

    if (message.end_of_stream === true) {
      this.settle(status < 500 ? undefined : 'bad_response', status < 400 ? 'ok' : `upstream_${status}`);
      return CONTINUE_RESPONSE_HEADERS;
    }
    if (status >= 400) return this.onUpstreamErrorStatus(status, contentType);
    const kind = this.responseKind(headers, contentType);
    switch (kind) {
      case 'sse':
        this.sse = new SseInspector();
        this.phase = 'response_sse';
        // We may append an error event at the end, so a fixed content-length cannot stay.
        return headers.has('content-length') ? { response_headers: { response: { header_mutation: headerMutation([], ['content-length']) } } } : CONTINUE_RESPONSE_HEADERS;
      case 'json':
        this.phase = 'response_json';
        // Hold the headers until the body is complete so a broken body can still become a clean 502.
        return { response_headers: { response: {} }, mode_override: { response_body_mode: 'BUFFERED_PARTIAL' } };
      case 'other':
        this.phase = 'response_other';
        return CONTINUE_RESPONSE_HEADERS;
    }
  }

  /**
   * How to watch this answer. A compressed body cannot be inspected (and appending plain text to
   * it would corrupt it), and a JSON body larger than we may hold is passed through: both are
   * watched only for their end.
   */
  private responseKind(headers: ReadonlyMap<string, string>, contentType: string): ResponseKind {
    const encoding = (headers.get('content-encoding') ?? 'identity').trim().toLowerCase();
    if (encoding !== '' && encoding !== 'identity') return 'other';
    if (isSseContentType(contentType)) return 'sse';
    if (!isJsonContentType(contentType)) return 'other';
    const length = Number(headers.get('content-length') ?? NaN);
    return Number.isFinite(length) && length > this.deps.maxInspectedBodyBytes ? 'other' : 'json';
  }

  private onUpstreamErrorStatus(status: number, contentType: string): ProcessingResponse {
    // A 4xx says the request was wrong, not that the replica is unhealthy.
    const failure: AttemptFailure | undefined = status >= 500 ? 'bad_response' : undefined;
    if (isJsonContentType(contentType)) {
      // The model server's own structured error: pass it through untouched.
      this.phase = 'response_other';
      this.pendingOutcome = { failure, result: `upstream_${status}` };
      return CONTINUE_RESPONSE_HEADERS;
    }
    const err = new GatewayError('upstream_error', `the model server answered ${status} with a non-JSON body (${contentType || 'no content type'})`, {
      details: { upstream_status: status },
    });
    this.settle(failure, err.kind);
    return this.replaceResponse(err, status < 500 ? status : undefined);
  }

  private onResponseBody(message: HttpBody): ProcessingResponse {
    const chunk = message.body ?? Buffer.alloc(0);
    const end = message.end_of_stream === true;
    switch (this.phase) {
      case 'response_sse':
        return this.onSseChunk(chunk, end);
      case 'response_json':
        return this.onJsonChunk(chunk, end);
      case 'response_local_text':
        return this.onLocalReplyText(chunk);
      case 'response_other':
        if (end) {
          const outcome = this.pendingOutcome ?? { failure: undefined, result: 'ok' };
          this.settle(outcome.failure, outcome.result);
        }
        return CONTINUE_RESPONSE_BODY;
      case 'done':
        // We already answered (or replaced the answer); Envoy may still stream the rest.
        return CONTINUE_RESPONSE_BODY;
      default:
        throw new GatewayError('internal_error', `ext_proc protocol violation: response body in phase ${this.phase}`);
    }
  }

  private onSseChunk(chunk: Buffer, end: boolean): ProcessingResponse {
    const sse = this.sse as SseInspector;
    sse.feed(chunk);
    if (!end) return CONTINUE_RESPONSE_BODY;
    const verdict = sse.finish();
    if (verdict.ok) {
      this.settle(undefined, 'ok');
      return CONTINUE_RESPONSE_BODY;
    }
    this.settle('bad_response', verdict.kind);
    if (verdict.kind !== 'stream_incomplete') return CONTINUE_RESPONSE_BODY; // the client already saw the upstream's error event
    const err = new GatewayError('stream_incomplete', `the model server ended the stream without its terminator: ${verdict.detail}`);
    const body = Buffer.concat([chunk, renderSseErrorEvent(err, sse.lastBytes, this.renderOptions())]);
    return { response_body: { response: { body_mutation: { body } } } };
  }

  /**
   * BUFFERED_PARTIAL: an answer that fits Envoy's buffer arrives whole, in one message with
   * end_of_stream, and is validated. A larger one arrives as a first part without end_of_stream:
   * its headers have gone out and Envoy streams the rest, so it passes through unverified.
   */
  private onJsonChunk(chunk: Buffer, end: boolean): ProcessingResponse {
    if (!end) {
      this.jsonTooLargeToHold = true;
      return CONTINUE_RESPONSE_BODY;
    }
    const verdict: BodyVerdict = this.jsonTooLargeToHold ? { ok: true } : inspectJsonBody(chunk);
    if (verdict.ok) {
      this.settle(undefined, 'ok');
      return CONTINUE_RESPONSE_BODY;
    }
    const err = new GatewayError('truncated_response', `the model server's JSON answer was cut short: ${verdict.detail}`);
    this.settle('bad_response', err.kind);
    // Envoy still holds the headers (BUFFERED_PARTIAL), so status and body can both change here.
    return { response_body: { response: this.errorReplacement(err) } };
  }

  private onLocalReplyText(chunk: Buffer): ProcessingResponse {
    const facts = { status: this.responseStatus, bodyText: chunk.toString('utf8', 0, Math.min(chunk.length, 2048)) };
    const local = classifyEnvoyReply(facts);
    const err =
      local !== undefined
        ? this.failureFromEnvoy(local.kind, local.detail, undefined)
        : new GatewayError('upstream_error', `the model server answered ${facts.status} with a non-JSON body`, { details: { upstream_status: facts.status } });
    if (local === undefined) {
      this.servedBy = this.resolveServedBy(undefined);
      this.settle('bad_response', err.kind);
    }
    return { response_body: { response: this.errorReplacement(err) } };
  }

  /** Envoy answered for the upstream (connect failure, timeout, overflow...): explain it in JSON. */
  private replaceEnvoyReply(kind: ErrorKind, detail: string, upstreamAddress: string | undefined): ProcessingResponse {
    return this.replaceResponse(this.failureFromEnvoy(kind, detail, upstreamAddress));
  }

  private failureFromEnvoy(kind: ErrorKind, detail: string, upstreamAddress: string | undefined): GatewayError {
    const routed = this.routed;
    const tried = routed?.endpoints ?? [];
    switch (kind) {
      case 'upstream_connect_failed':
      case 'all_replicas_failed': {
        // UF+URX: Envoy walked our whole list (retries never leave it), so every replica in it
        // failed to connect. UF alone: one attempt, at the host Envoy names.
        const last = this.resolveServedBy(upstreamAddress);
        const outsidePick = last === undefined && upstreamAddress !== undefined && upstreamAddress !== '';
        const failed = outsidePick ? [] : kind === 'all_replicas_failed' ? tried : [last].filter((e): e is Endpoint => e !== undefined);
        for (const endpoint of failed) this.recordAttempt(endpoint, 'connect_failure', kind);
        this.finishRequest(kind);
        if (outsidePick) {
          return new GatewayError(kind, `Envoy sent the request for model ${this.model} to a host outside our pick, and it failed to connect: ${detail}`, {
            details: { model: this.model },
          });
        }
        const effective: ErrorKind = failed.length > 1 ? 'all_replicas_failed' : 'upstream_connect_failed';
        const what = failed.length > 1 ? `all ${failed.length} replicas tried for model ${this.model} failed` : `the replica for model ${this.model} could not be reached`;
        return new GatewayError(effective, `${what}: ${detail}`, { details: { model: this.model, replicas_tried: failed.length } });
      }
      case 'upstream_reset':
      case 'upstream_timeout': {
        const endpoint = this.resolveServedBy(upstreamAddress);
        this.servedBy = endpoint;
        this.blameSkippedEndpoints();
        if (endpoint !== undefined) this.recordAttempt(endpoint, kind === 'upstream_timeout' ? 'timeout' : 'reset', kind);
        this.finishRequest(kind);
        const what = kind === 'upstream_timeout' ? 'did not answer in time' : 'closed the connection before answering';
        return new GatewayError(kind, `the replica serving model ${this.model} ${what}: ${detail}`, { details: { model: this.model } });
      }
      default:
        this.finishRequest(kind);
        return new GatewayError(kind, `${detail} (model ${this.model})`, { details: { model: this.model } });
    }
  }

  /** Stream ended before we saw the end of the response: never a success. */
  private endWithoutCompletion(end: StreamEnd): void {
    if (end.kind === 'released') {
      // We let go of the stream at shutdown; Envoy finishes the response without us.
      this.finishRequest('released_at_shutdown');
      return;
    }
    if (this.phase === 'response_json' && this.jsonTooLargeToHold) {
      // Larger than Envoy's buffer: Envoy streamed the rest without us and we cannot tell a clean
      // end from a reset. Neither success nor failure is recorded for the replica.
      this.finishRequest('unverified');
      return;
    }
    const responseStarted = this.phase === 'response_sse' || this.phase === 'response_json' || this.phase === 'response_other';
    if (responseStarted && this.servedBy !== undefined) {
      // Envoy gives no end_of_stream when the upstream resets mid-body; the client connection is
      // reset too, and nothing can be appended. A client hanging up looks the same, so this counts
      // as a failed attempt, and an active check of the replica decides whether to quarantine it.
      const brokenBy = this.servedBy;
      this.settle('bad_response', 'stream_broken');
      if (end.kind !== 'error') this.deps.routing.suspectBrokenStream(brokenBy);
      this.deps.logger.warn({ model: this.model, endpoint: this.servedBy.address, end: end.kind, requestId: this.requestId }, 'response stream broke before it completed');
      return;
    }
    const result = this.routed === undefined ? 'cancelled_before_routing' : 'cancelled_before_response';
    this.finishRequest(result);
  }

  // ── outcome accounting ──────────────────────────────────────────────────────────────────────

  /** Records the served endpoint's outcome and the request's result, once. */
  private settle(failure: AttemptFailure | undefined, result: string): void {
    if (this.phase === 'done') return;
    const endpoint = this.servedBy;
    if (endpoint !== undefined) this.recordAttempt(endpoint, failure, result);
    this.finishRequest(result);
  }

  private recordAttempt(endpoint: Endpoint, failure: AttemptFailure | undefined, reason: string): void {
    if (failure === undefined) {
      this.deps.routing.recordSuccess(endpoint);
      this.deps.metrics.attempt(endpoint.pool, endpoint.address, 'success', 'ok');
    } else {
      this.deps.routing.recordFailure(endpoint, failure);
      this.deps.metrics.attempt(endpoint.pool, endpoint.address, 'failure', reason);
    }
  }

  private finishRequest(result: string): void {
    if (this.phase === 'done') return;
    this.phase = 'done';
    // Label only models we serve: a client must not be able to mint metric series at will.
    this.deps.metrics.requestFinished(this.deps.routing.servesModel(this.model) ? this.model : UNKNOWN_MODEL, result);
    if (result !== 'ok') this.deps.logger.info({ model: this.model, result, status: this.responseStatus, endpoint: this.servedBy?.address, path: pathOnly(this.path), requestId: this.requestId }, 'request failed');
  }

  /**
   * Envoy tells us which host answered. Without the attribute we assume our primary. A host we
   * did not pick means Envoy's cluster lacked our picks and its fallback policy chose: nothing
   * about that attempt may be blamed on (or credited to) the replicas we picked.
   */
  private resolveServedBy(upstreamAddress: string | undefined): Endpoint | undefined {
    const endpoints = this.routed?.endpoints ?? [];
    if (upstreamAddress === undefined || upstreamAddress === '') return endpoints[0];
    const picked = endpoints.find((e) => e.address === upstreamAddress);
    if (picked === undefined && this.routed !== undefined && !this.reportedOutsidePick) {
      this.reportedOutsidePick = true;
      this.deps.metrics.servedOutsidePick();
      this.deps.logger.warn(
        { model: this.model, upstream: upstreamAddress, picked: this.routed.destinations, requestId: this.requestId },
        "Envoy sent the request to a host we did not pick: its backends cluster lacks our endpoints (check the cluster's host set)",
      );
    }
    return picked;
  }

  /** If a fallback answered, the replicas before it in our list failed to connect. */
  private blameSkippedEndpoints(): void {
    const endpoints = this.routed?.endpoints ?? [];
    const served = this.servedBy;
    if (served === undefined) return;
    for (const endpoint of endpoints) {
      if (endpoint.address === served.address) break;
      this.recordAttempt(endpoint, 'connect_failure', 'upstream_connect_failed');
    }
  }

  // ── reply builders ──────────────────────────────────────────────────────────────────────────

  private expectPhase(phase: Phase): void {
    if (this.phase !== phase) throw new GatewayError('internal_error', `ext_proc protocol violation: got ${phase.replace('_', ' ')} in phase ${this.phase}`);
  }

  private tooLarge(bytes: number): GatewayError {
    return new GatewayError('body_too_large', `request body of ${bytes} bytes exceeds the limit of ${this.deps.maxRequestBodyBytes} bytes`, {
      details: { limit_bytes: this.deps.maxRequestBodyBytes },
    });
  }

  private renderOptions(): { requestId?: string } {
    return this.requestId === '' ? {} : { requestId: this.requestId };
  }

  /** Answer the client ourselves, before anything went upstream. */
  private reject(err: GatewayError): ProcessingResponse {
    this.finishRequest(err.kind);
    const rendered = renderError(err, this.renderOptions());
    return {
      immediate_response: {
        status: { code: rendered.status },
        headers: headerMutation(rendered.headers),
        body: rendered.body,
        details: `llm_extproc_${err.kind}`,
      },
    };
  }

  private immediateSuccess(body: unknown): ProcessingResponse {
    this.finishRequest('ok');
    const bytes = Buffer.from(JSON.stringify(body));
    return {
      immediate_response: {
        status: { code: 200 },
        headers: headerMutation([['content-type', 'application/json'], ['content-length', String(bytes.length)]]),
        body: bytes,
        details: 'llm_extproc_models',
      },
    };
  }

  /** Replace whatever came back with our JSON error, at the response-headers step. */
  private replaceResponse(err: GatewayError, statusOverride?: number): ProcessingResponse {
    return { response_headers: { response: { ...this.errorReplacement(err, statusOverride), status: 'CONTINUE_AND_REPLACE' } } };
  }

  /** Status, headers and body of our JSON error as a mutation of the response in flight. */
  private errorReplacement(err: GatewayError, statusOverride?: number): CommonResponse {
    const rendered = renderError(err, this.renderOptions());
    return {
      // Our body is plain JSON: no upstream framing or encoding may stay on it.
      header_mutation: headerMutation([[':status', String(statusOverride ?? rendered.status)], ...rendered.headers], ['transfer-encoding', 'content-encoding']),
      body_mutation: { body: rendered.body },
    };
  }
}

function pathOnly(path: string): string {
  const q = path.indexOf('?');
  return q === -1 ? path : path.slice(0, q);
}

function metadataFor(destinations: string): ProtoStruct {
  return metadataNamespaces({ [DESTINATION_METADATA_NAMESPACE]: { [DESTINATION_HEADER]: destinations } });
}

