// The life of one request through Envoy, as a typed state machine shared by every body mode.
// Each state carries exactly the data it needs; `onMessage` and `onStreamEnd` are transitions
// from (state, input) to the next state, the replies for Envoy and the outcomes learnt — no I/O,
// no clocks, no logging. The processor (processor.ts) feeds messages in, sends the replies and
// records the outcomes in one place. The routing dependency is the only call out: it picks.

import type { Endpoint } from '../endpoints/model.js';
import type { AttemptFailure } from '../endpoints/passive-health.js';
import type { ErrorKind } from '../errors/catalog.js';
import { classifyEnvoyReply, isEnvoyLocalReply } from '../errors/envoy-reply.js';
import { GatewayError } from '../errors/gateway-error.js';
import { renderSseErrorEvent } from '../errors/render.js';
import { isJsonContentType, isSseContentType } from '../inspect/content-type.js';
import { inspectJsonBody } from '../inspect/json-body.js';
import { SseInspector } from '../inspect/sse-inspector.js';
import type { BodyVerdict } from '../inspect/verdict.js';
import {
  ASK_FOR_BUFFERED_REQUEST_BODY,
  CONTINUE_REQUEST_BODY,
  CONTINUE_REQUEST_HEADERS,
  CONTINUE_RESPONSE_BODY,
  CONTINUE_RESPONSE_HEADERS,
} from '../extproc/constant-replies.js';
import type { HttpBody, ProcessingRequest, ProcessingResponse } from '../extproc/messages.js';
import { readInferenceRequest } from './openai-request.js';
import type { StreamEnd } from '../extproc/stream-processor.js';
import { SUBSET_HINT_KEY, SUBSET_HINT_NAMESPACE } from '../extproc/protocol-names.js';
import { immediateJson, replaceBodyChunk, responseHeadersReply, streamedBody, streamedChunks } from '../extproc/replies.js';
import { immediateError, routingReply } from './decision-replies.js';
import { localReplyResult, upstreamStatusResult } from './request-result.js';
import type { RequestResult } from './request-result.js';
import { envoyReplyFacts, responseFacts } from './response-facts.js';
import type { ResponseFacts } from './response-facts.js';
import type { RoutedRequest } from './routing.js';
import { StepBuilder, exchangeOf, pathOnly, requestOf } from './stream-state.js';
import type { BodyWatch, Exchange, MachineContext, PendingOutcome, RequestFacts, Served, Step, StreamState } from './stream-state.js';
import { streamModes } from '../extproc/body-modes.js';
import type { StreamModes } from '../extproc/body-modes.js';
import { headerMutation, headerValue, metadataValue } from '../extproc/message-fields.js';
import { retainedPiece } from '../util/retained-piece.js';

/** Bytes of an unexplained error body we read to classify it; Envoy's texts are far shorter. */
const ERROR_TEXT_BYTES = 4096;

// ── transitions ─────────────────────────────────────────────────────────────────────────────

export function onMessage(ctx: MachineContext, state: StreamState, message: ProcessingRequest): Step {
  const out = new StepBuilder(state);
  switch (message.request) {
    case 'request_headers':
      requestHeaders(ctx, out, state, message);
      break;
    case 'request_body':
      requestBody(ctx, out, state, message.request_body ?? {});
      break;
    case 'request_trailers':
      requestTrailers(ctx, out, state);
      break;
    case 'response_headers':
      responseHeaders(ctx, out, state, message);
      break;
    case 'response_body':
      responseBody(ctx, out, state, message.response_body ?? {});
      break;
    case 'response_trailers':
      responseTrailers(out, state);
      break;
    default:
      throw new GatewayError('internal_error', `ext_proc message of unknown type ${String(message.request)}`);
  }
  return out.build();
}

/** The stream ended (Envoy half-closed, cancelled, failed, or we released it at shutdown). */
export function onStreamEnd(state: StreamState, end: StreamEnd): Step {
  const out = new StepBuilder({ kind: 'Done' });
  if (state.kind === 'Done') return out.build();
  const request = requestOf(state);
  if (end.kind === 'released') {
    out.finish(request, exchangeOf(state), 'released_at_shutdown');
    return out.build();
  }
  switch (state.kind) {
    case 'AwaitingRequestHeaders':
    case 'CollectingRequestBody':
      out.finish(request, undefined, 'cancelled_before_routing');
      break;
    case 'AwaitingResponse':
    case 'ReadingErrorText':
      out.finish(request, state.exchange, state.exchange.routed === undefined ? 'cancelled_before_routing' : 'cancelled_before_response');
      break;
    case 'HoldingJson':
      brokenMidStream(out, state.served);
      break;
    case 'Streaming':
      if (state.pending === undefined) break; // already recorded (another filter's answer)
      if (state.watch.kind === 'json-copy' && state.watch.envoyStreamsRest) {
        // Larger than Envoy's buffer: Envoy streamed the rest without us and we cannot tell a
        // clean end from a reset. Neither success nor failure is recorded for the replica.
        out.finish(request, state.served.exchange, 'unverified', state.served);
        break;
      }
      brokenMidStream(out, state.served);
      break;
  }
  return out.build();
}

/**
 * Envoy gives no end_of_stream when the upstream resets mid-body; a client hanging up looks the
 * same. Either way the attempt failed; the processor decides (actively) whether the replica died.
 */
function brokenMidStream(out: StepBuilder, served: Served): void {
  if (served.servedBy !== undefined) out.attempt(served.servedBy, 'bad_response', 'stream_broken');
  out.finish(served.exchange.request, served.exchange, 'stream_broken', served, true);
}

// ── request path ────────────────────────────────────────────────────────────────────────────

function requestHeaders(ctx: MachineContext, out: StepBuilder, state: StreamState, message: ProcessingRequest): void {
  if (state.kind !== 'AwaitingRequestHeaders') throw protocolViolation('request headers', state);
  const headers = message.request_headers?.headers;
  const request: RequestFacts = {
    modes: streamModes(message.protocol_config),
    method: headerValue(headers, ':method') ?? '',
    path: headerValue(headers, ':path') ?? '',
    requestId: headerValue(headers, 'x-request-id') ?? '',
    subset: subsetHint(message),
  };
  const path = pathOnly(request.path);
  if (message.request_headers?.end_of_stream === true) {
    if (request.method === 'GET' && path === '/v1/models') {
      try {
        out.reply(immediateJson(ctx.routing.modelList(), 'llm_extproc_models'));
        out.finish(request, undefined, 'ok');
      } catch (err) {
        out.reject(request, GatewayError.from(err));
      }
      return;
    }
    const err =
      request.method !== 'POST'
        ? new GatewayError(
            'method_not_allowed',
            `${request.method} is not supported on ${path}; inference requests are POSTs with a JSON body`,
          )
        : new GatewayError('missing_body', `POST ${path} has no body; send an OpenAI-style JSON request with a "model" field`);
    out.reject(request, err);
    return;
  }
  const declaredLength = Number(headerValue(headers, 'content-length') ?? '0');
  if (declaredLength > ctx.maxRequestBodyBytes) {
    out.reject(request, tooLarge(ctx, declaredLength));
    return;
  }
  const delivery = request.modes.request;
  if (delivery === 'envoy-buffers') out.reply(CONTINUE_REQUEST_HEADERS);
  else if (delivery === 'ask-for-buffered') out.reply(ASK_FOR_BUFFERED_REQUEST_BODY);
  // collect-*: the header reply waits for the body, because it carries the routing.
  out.become({
    kind: 'CollectingRequestBody',
    request,
    chunks: [],
    bytes: 0,
    headersAnswered: delivery === 'envoy-buffers' || delivery === 'ask-for-buffered',
  });
}

function requestBody(ctx: MachineContext, out: StepBuilder, state: StreamState, message: HttpBody): void {
  if (state.kind !== 'CollectingRequestBody') {
    // Only full duplex sends body after we routed when trailers... never; anything else is a bug.
    throw protocolViolation('request body', state);
  }
  const chunk = message.body ?? Buffer.alloc(0);
  state.bytes += chunk.length;
  if (state.bytes > ctx.maxRequestBodyBytes) {
    out.reject(state.request, tooLarge(ctx, state.bytes));
    return;
  }
  state.chunks.push(retainedPiece(chunk));
  const end = message.end_of_stream === true;
  if (!state.headersAnswered) {
    // We collect: nothing is answered until the body is whole.
    if (end) route(ctx, out, state, false);
    return;
  }
  // Envoy buffered the body for us: this one message is all of it (trailers may still follow).
  route(ctx, out, state, false, !end);
}

function requestTrailers(ctx: MachineContext, out: StepBuilder, state: StreamState): void {
  if (state.kind === 'CollectingRequestBody' && !state.headersAnswered) {
    // Trailers end a collected body: route, answer headers and body, then the trailers.
    route(ctx, out, state, true);
    if (out.state.kind !== 'Done') out.reply({ request_trailers: {} });
    return;
  }
  out.reply({ request_trailers: {} });
}

/**
 * The body is whole: read the model, pick, and hand the pick to Envoy in the reply the mode
 * allows — the body reply when Envoy buffered, else the held header reply followed by the body.
 */
function route(
  ctx: MachineContext,
  out: StepBuilder,
  state: Extract<StreamState, { kind: 'CollectingRequestBody' }>,
  trailersFollow: boolean,
  mayBePartial = false,
): void {
  const request = state.request;
  const body = state.chunks.length === 1 ? state.chunks[0] : Buffer.concat(state.chunks);
  let routed: RoutedRequest;
  let model: string | undefined;
  try {
    const inference = readInferenceRequest(body);
    model = inference.model;
    routed = ctx.routing.route({
      model,
      promptBlocks: inference.promptBlocks,
      ...(request.subset === undefined ? {} : { subset: request.subset }),
    });
  } catch (thrown) {
    const err = GatewayError.from(thrown);
    if (mayBePartial && err.kind === 'invalid_json') {
      // BUFFERED_PARTIAL hands over what fits in Envoy's buffer: this is the first part of a larger body.
      out.reject(
        request,
        new GatewayError(
          'body_too_large',
          `request body is larger than Envoy's buffer for this request (received the first ${body.length} bytes); raise the listener's per_connection_buffer_limit_bytes above routing.maxRequestBodyBytes`,
          {
            details: { limit_bytes: ctx.maxRequestBodyBytes },
          },
        ),
        model,
      );
      return;
    }
    out.reject(request, err, model);
    return;
  }
  out.notice({ kind: 'routed', routed });
  switch (request.modes.request) {
    case 'envoy-buffers':
    case 'ask-for-buffered':
      out.reply(routingReply('request_body', routed.destinations, ctx.destinationFormat));
      break;
    case 'collect-streamed':
      out.reply(routingReply('request_headers', routed.destinations, ctx.destinationFormat));
      for (let i = 0; i < state.chunks.length; i++) out.reply(CONTINUE_REQUEST_BODY);
      break;
    case 'collect-duplex':
      out.reply(routingReply('request_headers', routed.destinations, ctx.destinationFormat));
      out.replies(streamedChunks('request', state.chunks, !trailersFollow));
      break;
  }
  const onlyPossible = ctx.destinationFormat === 'single' || routed.endpoints.length === 1 ? routed.endpoints[0] : undefined;
  out.become({
    kind: 'AwaitingResponse',
    exchange: { request, routed, model, ...(onlyPossible === undefined ? {} : { servedUnlessReported: onlyPossible }) },
  });
}

// ── response path ───────────────────────────────────────────────────────────────────────────

function responseHeaders(ctx: MachineContext, out: StepBuilder, state: StreamState, message: ProcessingRequest): void {
  const exchange = exchangeForResponse(state);
  const facts = responseFacts(message, message.response_headers ?? {});
  const modes = exchange.request.modes;

  const replyFacts = envoyReplyFacts(facts);
  const local = classifyEnvoyReply(replyFacts);
  if (local !== undefined) {
    replaceWithEnvoyFailure(out, exchange, local.kind, local.detail, facts.servedAddress);
    return;
  }
  if (isEnvoyLocalReply(replyFacts)) {
    // Another filter's deliberate answer (401, 403, 429...): its status and body are the message.
    const served: Served = { exchange, servedBy: undefined, status: facts.status };
    out.finish(exchange.request, exchange, localReplyResult(facts.status), served);
    passHeaders(out, modes.response, facts.endOfStream, undefined, {
      kind: 'Streaming',
      served,
      watch: { kind: 'opaque' },
      pending: undefined,
    });
    return;
  }
  if (
    facts.codeDetails === undefined &&
    (facts.status >= 500 || facts.status === 413) &&
    !isJsonContentType(facts.contentType) &&
    !facts.ours
  ) {
    // No attributes tell who answered: Envoy's own replies (5xx, and 413 when a BUFFERED body
    // outgrows its buffer) are short plain text; read it first.
    readErrorText(out, exchange, facts);
    return;
  }

  const servedBy = resolveServedBy(out, exchange, facts.servedAddress);
  blameSkipped(out, exchange, servedBy);
  const served: Served = { exchange, servedBy, status: facts.status };

  if (facts.endOfStream) {
    settle(out, served, facts.status < 500 ? undefined : 'bad_response', facts.status < 400 ? 'ok' : upstreamStatusResult(facts.status));
    out.reply(CONTINUE_RESPONSE_HEADERS);
    return;
  }
  if (facts.status >= 400) {
    // A 4xx says the request was wrong, not that the replica is unhealthy.
    const failure: AttemptFailure | undefined = facts.status >= 500 ? 'bad_response' : undefined;
    if (isJsonContentType(facts.contentType)) {
      // The model server's own structured error: pass it through untouched.
      passHeaders(
        out,
        modes.response,
        false,
        { result: upstreamStatusResult(facts.status), failure, judged: true },
        { kind: 'Streaming', served, watch: { kind: 'opaque' }, pending: undefined },
      );
      return;
    }
    const err = new GatewayError(
      'upstream_error',
      `the model server answered ${facts.status} with a non-JSON body (${facts.contentType || 'no content type'})`,
      {
        details: { upstream_status: facts.status },
      },
    );
    settle(out, served, failure, err.kind);
    out.reply(immediateError(err, exchange.request.requestId, facts.status < 500 ? facts.status : undefined));
    return;
  }

  if (modes.response === 'none') {
    // Envoy sends us no body: the answer cannot be judged.
    out.finish(exchange.request, exchange, 'unverified', served);
    out.reply(CONTINUE_RESPONSE_HEADERS);
    return;
  }
  const ok: PendingOutcome = { result: 'ok', failure: undefined, judged: true };
  if (!facts.compressed && isSseContentType(facts.contentType)) {
    // We may append an error event at the end, so a fixed content-length cannot stay.
    const mutation = facts.hasContentLength ? headerMutation([], ['content-length']) : undefined;
    out.reply(mutation === undefined ? CONTINUE_RESPONSE_HEADERS : responseHeadersReply(mutation));
    out.become({ kind: 'Streaming', served, watch: { kind: 'sse', inspector: new SseInspector() }, pending: ok });
    return;
  }
  const inspectableJson =
    !facts.compressed &&
    isJsonContentType(facts.contentType) &&
    !(facts.contentLength !== undefined && facts.contentLength > ctx.maxInspectedBodyBytes);
  if (inspectableJson) {
    switch (modes.response) {
      case 'streamed':
        // Ask Envoy to hold headers and body until the body is complete (needs allow_mode_override),
        // so a broken body can still become a clean 502.
        out.reply(responseHeadersReply(undefined, 'BUFFERED_PARTIAL'));
        out.become({ kind: 'Streaming', served, watch: { kind: 'envoy-held-json' }, pending: ok });
        return;
      case 'buffered':
        out.reply(CONTINUE_RESPONSE_HEADERS);
        out.become({ kind: 'Streaming', served, watch: { kind: 'envoy-held-json' }, pending: ok });
        return;
      case 'duplex':
        // Nobody holds it for us: we hold the header reply and the body until it is judged.
        out.become({ kind: 'HoldingJson', served, chunks: [], bytes: 0 });
        return;
    }
  }
  // Compressed, other media types, JSON too large to hold: watched for the end only. An answer
  // that reaches its end_of_stream was delivered whole by the model server.
  out.reply(CONTINUE_RESPONSE_HEADERS);
  out.become({ kind: 'Streaming', served, watch: { kind: 'opaque' }, pending: ok });
}

/** Answer headers and continue with `next`; `pending` becomes the next state's outcome. */
function passHeaders(
  out: StepBuilder,
  delivery: StreamModes['response'],
  endOfStream: boolean,
  pending: PendingOutcome | undefined,
  next: Extract<StreamState, { kind: 'Streaming' }>,
): void {
  out.reply(CONTINUE_RESPONSE_HEADERS);
  if (endOfStream || delivery === 'none') {
    if (pending !== undefined) settle(out, next.served, pending.failure, pending.result);
    out.become({ kind: 'Done', request: next.served.exchange.request });
    return;
  }
  out.become({ ...next, pending });
}

function readErrorText(out: StepBuilder, exchange: Exchange, facts: ResponseFacts): void {
  const delivery = exchange.request.modes.response;
  if (facts.endOfStream || delivery === 'none') {
    // No body to read: say what we can without Envoy's text.
    decideErrorText(out, exchange, facts.status, '');
    return;
  }
  if (delivery === 'streamed') out.reply(responseHeadersReply(undefined, 'BUFFERED'));
  else if (delivery === 'buffered') out.reply(CONTINUE_RESPONSE_HEADERS);
  // duplex: the header reply waits; the answer will be replaced anyway.
  out.become({ kind: 'ReadingErrorText', exchange, status: facts.status, chunks: [], bytes: 0 });
}

function decideErrorText(out: StepBuilder, exchange: Exchange, status: number, text: string): void {
  const local = text === '' ? undefined : classifyEnvoyReply({ status, bodyText: text });
  if (local !== undefined) {
    replaceWithEnvoyFailure(out, exchange, local.kind, local.detail, undefined);
    return;
  }
  const servedBy = resolveServedBy(out, exchange, undefined);
  const served: Served = { exchange, servedBy, status };
  const err = new GatewayError('upstream_error', `the model server answered ${status} with a non-JSON body`, {
    details: { upstream_status: status },
  });
  settle(out, served, 'bad_response', err.kind);
  out.reply(immediateError(err, exchange.request.requestId));
}

function responseBody(ctx: MachineContext, out: StepBuilder, state: StreamState, message: HttpBody): void {
  const chunk = message.body ?? Buffer.alloc(0);
  const end = message.end_of_stream === true;
  switch (state.kind) {
    case 'ReadingErrorText': {
      if (state.bytes < ERROR_TEXT_BYTES) {
        state.chunks.push(retainedPiece(chunk));
        state.bytes += chunk.length;
      }
      // Streamed/buffered modes deliver it whole; in duplex we decide at its end or once we have enough.
      if (end || state.bytes >= ERROR_TEXT_BYTES || state.exchange.request.modes.response !== 'duplex') {
        const text = Buffer.concat(state.chunks).toString('utf8', 0, Math.min(state.bytes, ERROR_TEXT_BYTES));
        decideErrorText(out, state.exchange, state.status, text);
      }
      return;
    }
    case 'HoldingJson':
      holdJson(ctx, out, state, chunk, end);
      return;
    case 'Streaming':
      streamBody(ctx, out, state, chunk, end);
      return;
    case 'Done':
      // Nothing left to decide: never hold the body up.
      passChunk(out, modeOf(state), chunk, end);
      return;
    default:
      throw protocolViolation('response body', state);
  }
}

function holdJson(
  ctx: MachineContext,
  out: StepBuilder,
  state: Extract<StreamState, { kind: 'HoldingJson' }>,
  chunk: Buffer,
  end: boolean,
): void {
  state.chunks.push(retainedPiece(chunk));
  state.bytes += chunk.length;
  if (!end && state.bytes <= ctx.maxInspectedBodyBytes) return;
  if (!end) {
    // Larger than we hold: let it go as it comes, watched for its end only.
    out.reply(CONTINUE_RESPONSE_HEADERS);
    out.replies(streamedChunks('response', state.chunks, false));
    out.become({
      kind: 'Streaming',
      served: state.served,
      watch: { kind: 'opaque' },
      pending: { result: 'ok', failure: undefined, judged: true },
    });
    return;
  }
  const body = Buffer.concat(state.chunks);
  judgeJson(out, state.served, body, () => [CONTINUE_RESPONSE_HEADERS, ...streamedChunks('response', state.chunks, true)]);
}

/** A whole JSON answer that has not reached the client yet: pass it, or replace it with a clean 502. */
function judgeJson(out: StepBuilder, served: Served, body: Buffer, pass: () => ProcessingResponse[]): void {
  const verdict: BodyVerdict = inspectJsonBody(body);
  if (verdict.ok) {
    settle(out, served, undefined, 'ok');
    out.replies(pass());
    return;
  }
  replaceTruncatedJson(out, served, verdict.detail);
}

function replaceTruncatedJson(out: StepBuilder, served: Served, detail: string): void {
  const err = new GatewayError('truncated_response', `the model server's JSON answer was cut short: ${detail}`);
  settle(out, served, 'bad_response', err.kind);
  out.reply(immediateError(err, served.exchange.request.requestId));
}

function streamBody(
  ctx: MachineContext,
  out: StepBuilder,
  state: Extract<StreamState, { kind: 'Streaming' }>,
  chunk: Buffer,
  end: boolean,
): void {
  const delivery = state.served.exchange.request.modes.response;
  const watch = state.watch;
  switch (watch.kind) {
    case 'sse': {
      watch.inspector.feed(chunk);
      if (!end) {
        passChunk(out, delivery, chunk, false);
        return;
      }
      const verdict = watch.inspector.finish();
      if (verdict.ok) {
        settle(out, state.served, undefined, 'ok');
        passChunk(out, delivery, chunk, true);
        return;
      }
      settle(out, state.served, 'bad_response', verdict.kind);
      if (verdict.kind !== 'stream_incomplete') {
        passChunk(out, delivery, chunk, true); // the client already saw the upstream's error event
        return;
      }
      const err = new GatewayError('stream_incomplete', `the model server ended the stream without its terminator: ${verdict.detail}`);
      const requestId = state.served.exchange.request.requestId;
      const body = Buffer.concat([chunk, renderSseErrorEvent(err, watch.inspector.lastBytes, requestId === '' ? {} : { requestId })]);
      out.replies(delivery === 'duplex' ? streamedBody('response', body, true) : [replaceBodyChunk('response', body)]);
      return;
    }
    case 'envoy-held-json': {
      if (end) {
        // Envoy still holds the headers, so status and body can both change here.
        judgeJson(out, state.served, chunk, () => [CONTINUE_RESPONSE_BODY]);
        return;
      }
      // A first part without end_of_stream: larger than Envoy's buffer (its headers have gone out
      // and Envoy streams the rest without us), or our mode override was not honoured.
      const copy: BodyWatch = {
        kind: 'json-copy',
        chunks: [],
        bytes: 0,
        overflow: false,
        envoyStreamsRest: delivery === 'buffered' || delivery === 'streamed',
      };
      copyJson(ctx, copy, chunk);
      passChunk(out, delivery, chunk, false);
      out.become({ ...state, watch: copy });
      return;
    }
    case 'json-copy': {
      copyJson(ctx, watch, chunk);
      passChunk(out, delivery, chunk, end);
      if (!end) return;
      if (watch.overflow) {
        settle(out, state.served, undefined, 'ok'); // delivered whole, too large to judge its JSON
        return;
      }
      // Too late to change what the client gets, but never record a broken answer as a success.
      const verdict = inspectJsonBody(Buffer.concat(watch.chunks));
      if (verdict.ok) settle(out, state.served, undefined, 'ok');
      else settle(out, state.served, 'bad_response', 'truncated_response');
      return;
    }
    case 'opaque':
      passChunk(out, delivery, chunk, end);
      if (end) endPending(out, state);
      return;
  }
}

function copyJson(ctx: MachineContext, watch: Extract<BodyWatch, { kind: 'json-copy' }>, chunk: Buffer): void {
  if (watch.overflow) return;
  watch.bytes += chunk.length;
  if (watch.bytes > ctx.maxInspectedBodyBytes) {
    watch.overflow = true;
    watch.chunks.length = 0;
    return;
  }
  watch.chunks.push(retainedPiece(chunk));
}

function endPending(out: StepBuilder, state: Extract<StreamState, { kind: 'Streaming' }>): void {
  const pending = state.pending;
  if (pending === undefined) {
    out.become({ kind: 'Done', request: state.served.exchange.request });
    return;
  }
  if (pending.judged) settle(out, state.served, pending.failure, pending.result);
  else out.finish(state.served.exchange.request, state.served.exchange, pending.result, state.served);
}

function responseTrailers(out: StepBuilder, state: StreamState): void {
  // Trailers end the body: judge what we watched, release what we held, then answer them.
  switch (state.kind) {
    case 'ReadingErrorText':
      decideErrorText(out, state.exchange, state.status, Buffer.concat(state.chunks).toString('utf8'));
      return;
    case 'HoldingJson': {
      const verdict = inspectJsonBody(Buffer.concat(state.chunks));
      if (!verdict.ok) {
        replaceTruncatedJson(out, state.served, verdict.detail);
        return;
      }
      settle(out, state.served, undefined, 'ok');
      out.reply(CONTINUE_RESPONSE_HEADERS);
      out.replies(streamedChunks('response', state.chunks, false));
      break;
    }
    case 'Streaming':
      judgeEndedBody(out, state);
      break;
    default:
      break;
  }
  out.reply({ response_trailers: {} });
  const request = state.kind === 'Done' ? state.request : state.kind === 'AwaitingRequestHeaders' ? undefined : requestOf(state);
  out.become(request === undefined ? { kind: 'Done' } : { kind: 'Done', request });
}

/** A watched body ended (by trailers) where nothing can be appended any more: record its verdict. */
function judgeEndedBody(out: StepBuilder, state: Extract<StreamState, { kind: 'Streaming' }>): void {
  const watch = state.watch;
  if (state.pending === undefined) return;
  let verdict: BodyVerdict = { ok: true };
  if (watch.kind === 'sse') verdict = watch.inspector.finish();
  else if (watch.kind === 'json-copy' && !watch.overflow) verdict = inspectJsonBody(Buffer.concat(watch.chunks));
  if (!verdict.ok) settle(out, state.served, 'bad_response', verdict.kind);
  else endPending(out, state);
}

/** Pass a body chunk on unchanged, as the body mode requires. */
function passChunk(out: StepBuilder, delivery: StreamModes['response'], chunk: Buffer, end: boolean): void {
  if (delivery === 'duplex') out.replies(streamedBody('response', chunk, end));
  else out.reply(CONTINUE_RESPONSE_BODY); // the frozen constant: its wire bytes are encoded once
}

// ── Envoy's own failures ────────────────────────────────────────────────────────────────────

function replaceWithEnvoyFailure(
  out: StepBuilder,
  exchange: Exchange,
  kind: ErrorKind,
  detail: string,
  upstreamAddress: string | undefined,
): void {
  const err = failureFromEnvoy(out, exchange, kind, detail, upstreamAddress);
  out.reply(immediateError(err, exchange.request.requestId));
}

function failureFromEnvoy(
  out: StepBuilder,
  exchange: Exchange,
  kind: ErrorKind,
  detail: string,
  upstreamAddress: string | undefined,
): GatewayError {
  const model = exchange.model;
  const modelDetails = model === undefined ? {} : { model };
  const forModel = model === undefined ? '' : ` for model ${model}`;
  switch (kind) {
    case 'upstream_connect_failed':
    case 'all_replicas_failed': {
      // UF+URX: Envoy walked our whole list (retries never leave it), so every replica in it
      // failed to connect. UF alone: one attempt, at the host Envoy names (or our primary).
      const tried = exchange.routed?.endpoints ?? [];
      const last = resolveServedBy(out, exchange, upstreamAddress);
      const outsidePick = last === undefined && upstreamAddress !== undefined && upstreamAddress !== '';
      const failed = outsidePick ? [] : kind === 'all_replicas_failed' ? tried : last === undefined ? [] : [last];
      for (const endpoint of failed) out.attempt(endpoint, 'connect_failure', kind);
      out.finish(exchange.request, exchange, kind, { exchange, servedBy: last, status: 0 });
      if (outsidePick) {
        return new GatewayError(kind, `Envoy sent the request${forModel} to a host outside our pick, and it failed to connect: ${detail}`, {
          details: modelDetails,
        });
      }
      const effective: ErrorKind = failed.length > 1 ? 'all_replicas_failed' : 'upstream_connect_failed';
      const what =
        failed.length > 1 ? `all ${failed.length} replicas tried${forModel} failed` : `the replica${forModel} could not be reached`;
      return new GatewayError(effective, `${what}: ${detail}`, {
        details: { ...modelDetails, replicas_tried: Math.max(1, failed.length) },
      });
    }
    case 'upstream_reset':
    case 'upstream_timeout': {
      const endpoint = resolveServedBy(out, exchange, upstreamAddress);
      blameSkipped(out, exchange, endpoint);
      if (endpoint !== undefined) out.attempt(endpoint, kind === 'upstream_timeout' ? 'timeout' : 'reset', kind);
      out.finish(exchange.request, exchange, kind, { exchange, servedBy: endpoint, status: 0 });
      const what = kind === 'upstream_timeout' ? 'did not answer in time' : 'closed the connection before answering';
      return new GatewayError(kind, `the replica serving${model === undefined ? ' the request' : ` model ${model}`} ${what}: ${detail}`, {
        details: modelDetails,
      });
    }
    default:
      out.finish(exchange.request, exchange, kind, undefined);
      return new GatewayError(kind, model === undefined ? detail : `${detail} (model ${model})`, { details: modelDetails });
  }
}

// ── served endpoint and outcome helpers ─────────────────────────────────────────────────────

/**
 * Which of our picks answered. Envoy's `upstream.address` (or the gateway's `-served` metadata)
 * names the host; without either, only a host Envoy had no alternative to counts. A host we did not pick means Envoy's
 * cluster lacked our picks and chose itself: nothing about that attempt may be blamed on (or
 * credited to) the replicas we picked.
 */
function resolveServedBy(out: StepBuilder, exchange: Exchange, upstreamAddress: string | undefined): Endpoint | undefined {
  const routed = exchange.routed;
  if (routed === undefined) return undefined;
  if (upstreamAddress === undefined || upstreamAddress === '') return exchange.servedUnlessReported;
  const picked = routed.endpoints.find((e) => e.address === upstreamAddress);
  if (picked === undefined) {
    out.notice({
      kind: 'served-outside-pick',
      upstream: upstreamAddress,
      picked: routed.destinations,
      model: exchange.model,
      requestId: exchange.request.requestId,
    });
  }
  return picked;
}

/** If a fallback answered, the replicas before it in our list failed to connect. */
function blameSkipped(out: StepBuilder, exchange: Exchange, servedBy: Endpoint | undefined): void {
  if (servedBy === undefined || exchange.routed === undefined) return;
  for (const endpoint of exchange.routed.endpoints) {
    if (endpoint.address === servedBy.address) break;
    out.attempt(endpoint, 'connect_failure', 'upstream_connect_failed');
  }
}

/** Records the served replica's outcome and the request's result. */
function settle(out: StepBuilder, served: Served, failure: AttemptFailure | undefined, result: RequestResult): void {
  if (served.servedBy !== undefined) out.attempt(served.servedBy, failure, failure === undefined ? 'ok' : result);
  out.finish(served.exchange.request, served.exchange, result, served);
}

function exchangeForResponse(state: StreamState): Exchange {
  switch (state.kind) {
    case 'AwaitingResponse':
      return state.exchange;
    case 'CollectingRequestBody':
      // Envoy answered before the body reached us (its buffer limit, a timeout): nothing was routed.
      return { request: state.request, routed: undefined, model: undefined };
    default:
      throw protocolViolation('response headers', state);
  }
}

function modeOf(state: StreamState): StreamModes['response'] {
  const request = state.kind === 'Done' ? state.request : requestOf(state);
  return request?.modes.response ?? 'streamed';
}

function protocolViolation(what: string, state: StreamState): GatewayError {
  return new GatewayError('internal_error', `ext_proc protocol violation: got ${what} in state ${state.kind}`);
}

function tooLarge(ctx: MachineContext, bytes: number): GatewayError {
  return new GatewayError('body_too_large', `request body of ${bytes} bytes exceeds the limit of ${ctx.maxRequestBodyBytes} bytes`, {
    details: { limit_bytes: ctx.maxRequestBodyBytes },
  });
}

/** `envoy.lb.subset_hint` → `x-gateway-destination-endpoint-subset`: a list or a comma string. */
function subsetHint(message: ProcessingRequest): ReadonlySet<string> | undefined {
  const raw = metadataValue(message.metadata_context?.filter_metadata, SUBSET_HINT_NAMESPACE, SUBSET_HINT_KEY);
  if (raw === undefined) return undefined;
  return new Set(
    raw
      .split(',')
      .map((a) => a.trim())
      .filter((a) => a !== ''),
  );
}
