// The response phase of one stream: response headers (the upstream's answer or Envoy's own), the
// body in each delivery mode (passed, held for validation, streamed and watched), and trailers.
// Transitions of the state machine (stream-machine.ts); pure.

import type { AttemptFailure } from '../endpoints/passive-health.js';
import { classifyEnvoyReply, isEnvoyLocalReply } from '../errors/envoy-reply.js';
import { GatewayError } from '../errors/gateway-error.js';
import { renderSseErrorEvent } from '../errors/render.js';
import { isJsonContentType, isSseContentType } from '../inspect/content-type.js';
import { inspectJsonBody } from '../inspect/json-body.js';
import { SseInspector } from '../inspect/sse-inspector.js';
import { UsageChunkFilter } from '../inspect/usage-chunk-filter.js';
import { findUsage } from '../inspect/usage.js';
import type { BodyVerdict } from '../inspect/verdict.js';
import { CLEAR_RESPONSE_BODY_CHUNK, CONTINUE_RESPONSE_BODY, CONTINUE_RESPONSE_HEADERS } from '../extproc/constant-replies.js';
import type { HttpBody, ProcessingRequest, ProcessingResponse } from '../extproc/messages.js';
import { replaceBodyChunk, responseHeadersReply, streamedBody, streamedChunks } from '../extproc/replies.js';
import { immediateError } from './decision-replies.js';
import { localReplyResult, upstreamStatusResult } from './request-result.js';
import { envoyReplyFacts, responseFacts } from './response-facts.js';
import type { ResponseFacts } from './response-facts.js';
import { requestOf } from './stream-state.js';
import type { BodyWatch, Exchange, MachineContext, PendingOutcome, Served, StreamState, StepBuilder } from './stream-state.js';
import type { StreamModes } from '../extproc/body-modes.js';
import { headerMutation } from '../extproc/message-fields.js';
import { retainedPiece } from '../util/retained-piece.js';
import { blameSkipped, replaceWithEnvoyFailure, resolveServedBy, settle } from './attribution.js';
import { protocolViolation } from './stream-state.js';

/** Bytes of an unexplained error body we read to classify it; Envoy's texts are far shorter. */
const ERROR_TEXT_BYTES = 4096;

// ── response path ───────────────────────────────────────────────────────────────────────────

export function responseHeaders(ctx: MachineContext, out: StepBuilder, state: StreamState, message: ProcessingRequest): void {
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
    const filter = exchange.usageInjected === true ? new UsageChunkFilter() : undefined;
    out.become({ kind: 'Streaming', served, watch: { kind: 'sse', inspector: new SseInspector(), filter }, pending: ok });
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

export function responseBody(ctx: MachineContext, out: StepBuilder, state: StreamState, message: HttpBody): void {
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
    out.answered('json', findUsage(body));
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
      const filter = watch.filter;
      if (!end) {
        if (filter === undefined) passChunk(out, delivery, chunk, false);
        else passFiltered(out, delivery, chunk, filter.push(chunk, false), false);
        return;
      }
      const verdict = watch.inspector.finish();
      out.answered('stream', watch.inspector.usage);
      const last = filter === undefined ? chunk : filter.push(chunk, true);
      if (verdict.ok || verdict.kind !== 'stream_incomplete') {
        if (verdict.ok) settle(out, state.served, undefined, 'ok');
        else settle(out, state.served, 'bad_response', verdict.kind); // the client already saw the upstream's error event
        if (filter === undefined) passChunk(out, delivery, chunk, true);
        else passFiltered(out, delivery, chunk, last, true);
        return;
      }
      settle(out, state.served, 'bad_response', verdict.kind);
      const err = new GatewayError('stream_incomplete', `the model server ended the stream without its terminator: ${verdict.detail}`);
      const requestId = state.served.exchange.request.requestId;
      const body = Buffer.concat([last, renderSseErrorEvent(err, watch.inspector.lastBytes, requestId === '' ? {} : { requestId })]);
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
      const body = Buffer.concat(watch.chunks);
      const verdict = inspectJsonBody(body);
      if (verdict.ok) {
        out.answered('json', findUsage(body));
        settle(out, state.served, undefined, 'ok');
      } else settle(out, state.served, 'bad_response', 'truncated_response');
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

export function responseTrailers(out: StepBuilder, state: StreamState): void {
  // Trailers end the body: judge what we watched, release what we held, then answer them.
  switch (state.kind) {
    case 'ReadingErrorText':
      decideErrorText(out, state.exchange, state.status, Buffer.concat(state.chunks).toString('utf8'));
      return;
    case 'HoldingJson': {
      const body = Buffer.concat(state.chunks);
      const verdict = inspectJsonBody(body);
      if (!verdict.ok) {
        replaceTruncatedJson(out, state.served, verdict.detail);
        return;
      }
      out.answered('json', findUsage(body));
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
  if (watch.kind === 'sse') {
    verdict = watch.inspector.finish();
    out.answered('stream', watch.inspector.usage);
  } else if (watch.kind === 'json-copy' && !watch.overflow) {
    const body = Buffer.concat(watch.chunks);
    verdict = inspectJsonBody(body);
    if (verdict.ok) out.answered('json', findUsage(body));
  }
  if (!verdict.ok) settle(out, state.served, 'bad_response', verdict.kind);
  else endPending(out, state);
}

/** Pass a body chunk on unchanged, as the body mode requires. */
function passChunk(out: StepBuilder, delivery: StreamModes['response'], chunk: Buffer, end: boolean): void {
  if (delivery === 'duplex') out.replies(streamedBody('response', chunk, end));
  else out.reply(CONTINUE_RESPONSE_BODY); // the frozen constant: its wire bytes are encoded once
}

/**
 * Pass what a filter made of a chunk: in full duplex the bytes go back themselves (nothing while
 * the filter holds them all); otherwise each chunk's reply replaces it (emptied when all is held).
 */
function passFiltered(out: StepBuilder, delivery: StreamModes['response'], chunk: Buffer, bytes: Buffer, end: boolean): void {
  if (delivery === 'duplex') {
    if (bytes.length > 0 || end) out.replies(streamedBody('response', bytes, end));
  } else if (bytes === chunk) out.reply(CONTINUE_RESPONSE_BODY);
  else out.reply(bytes.length === 0 ? CLEAR_RESPONSE_BODY_CHUNK : replaceBodyChunk('response', bytes));
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
