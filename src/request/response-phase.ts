// The response phase of one stream: response headers (a switch over what classifyResponse makes of
// them: Envoy's own failure, another filter's answer, the model server's), the body as the stream's
// delivery rule says (passed, held for validation, streamed and watched: delivery-rules.ts), and
// trailers. Transitions of the state machine (stream-machine.ts); pure.

import { GatewayError } from '../errors/gateway-error.js';
import { renderSseErrorEvent } from '../errors/render.js';
import { inspectJsonBody } from '../inspect/json-body.js';
import { SseInspector } from '../inspect/sse-inspector.js';
import { UsageChunkFilter } from '../inspect/usage-chunk-filter.js';
import { findUsage } from '../inspect/usage.js';
import type { BodyVerdict } from '../inspect/verdict.js';
import { CLEAR_RESPONSE_BODY_CHUNK, CONTINUE_RESPONSE_BODY, CONTINUE_RESPONSE_HEADERS } from '../extproc/constant-replies.js';
import type { HttpBody, ProcessingRequest, ProcessingResponse } from '../extproc/messages.js';
import { replaceBodyChunk, responseHeadersReply, streamedBody, streamedChunks } from '../extproc/replies.js';
import { immediateError } from './decision-replies.js';
import { responseFacts } from './response-facts.js';
import type { ResponseFacts } from './response-facts.js';
import { factsOf } from './stream-state.js';
import type { BodyWatch, Exchange, MachineContext, PendingOutcome, Served, StreamState, StepBuilder } from './stream-state.js';
import { RESPONSE_RULES, unhandled } from './delivery-rules.js';
import type { ResponseRule } from './delivery-rules.js';
import { classifyErrorText, classifyResponse } from './response-class.js';
import type { ResponseClass } from './response-class.js';
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
  const rule = exchange.request.responseRule;
  const answer = classifyResponse(facts, ctx.maxInspectedBodyBytes);
  switch (answer.kind) {
    case 'envoy-failure':
      replaceWithEnvoyFailure(out, exchange, answer.failure.kind, answer.failure.detail, facts.servedAddress);
      return;
    case 'other-filter': {
      // Its status and body are the message.
      const served: Served = { exchange, servedBy: undefined, status: facts.status };
      out.finish(exchange.request, exchange, answer.result, served);
      passHeaders(out, rule, facts.endOfStream, undefined, { kind: 'Streaming', served, watch: { kind: 'opaque' }, pending: undefined });
      return;
    }
    case 'unexplained':
      readErrorText(out, exchange, facts);
      return;
    default:
      break;
  }

  const servedBy = resolveServedBy(out, exchange, facts.servedAddress);
  blameSkipped(out, exchange, servedBy);
  const served: Served = { exchange, servedBy, status: facts.status };
  switch (answer.kind) {
    case 'headers-only':
      settle(out, served, answer.failure, answer.result);
      out.reply(CONTINUE_RESPONSE_HEADERS);
      return;
    case 'upstream-error':
      passHeaders(
        out,
        rule,
        false,
        { result: answer.result, failure: answer.failure, judged: true },
        { kind: 'Streaming', served, watch: { kind: 'opaque' }, pending: undefined },
      );
      return;
    case 'upstream-error-replaced':
      replaceUpstreamError(out, served, answer);
      return;
    case 'answer':
      watchAnswer(out, served, facts, rule, answer.body);
      return;
    default:
      unhandled(answer);
  }
}

/** A model server's answer with a body: how it is watched (and held, where it must be whole) until its end. */
function watchAnswer(out: StepBuilder, served: Served, facts: ResponseFacts, rule: ResponseRule, body: 'sse' | 'json' | 'opaque'): void {
  const exchange = served.exchange;
  if (rule.body === 'never') {
    // Envoy sends us no body: the answer cannot be judged.
    out.finish(exchange.request, exchange, 'unverified', served);
    out.reply(CONTINUE_RESPONSE_HEADERS);
    return;
  }
  const ok: PendingOutcome = { result: 'ok', failure: undefined, judged: true };
  switch (body) {
    case 'sse': {
      // We may append an error event at the end, so a fixed content-length cannot stay.
      const mutation = facts.hasContentLength ? headerMutation([], ['content-length']) : undefined;
      out.reply(mutation === undefined ? CONTINUE_RESPONSE_HEADERS : responseHeadersReply(mutation));
      const filter = exchange.usageInjected === true ? new UsageChunkFilter() : undefined;
      out.become({ kind: 'Streaming', served, watch: { kind: 'sse', inspector: new SseInspector(), filter }, pending: ok });
      return;
    }
    case 'json':
      switch (rule.hold) {
        case 'ask-envoy':
          // Ask Envoy to hold headers and body until the body is complete (needs allow_mode_override),
          // so a broken body can still become a clean 502.
          out.reply(responseHeadersReply(undefined, 'BUFFERED_PARTIAL'));
          out.become({ kind: 'Streaming', served, watch: { kind: 'envoy-held-json' }, pending: ok });
          return;
        case 'envoy-holds':
          out.reply(CONTINUE_RESPONSE_HEADERS);
          out.become({ kind: 'Streaming', served, watch: { kind: 'envoy-held-json' }, pending: ok });
          return;
        case 'we-hold':
          // Nobody holds it for us: we hold the header reply and the body until it is judged.
          out.become({ kind: 'HoldingJson', served, chunks: [], bytes: 0 });
          return;
        case 'nothing-to-hold':
          break; // no body reaches us (handled above)
        default:
          unhandled(rule.hold);
      }
      break;
    case 'opaque':
      break;
    default:
      unhandled(body);
  }
  // Compressed, other media types, JSON too large to hold: watched for the end only. An answer
  // that reaches its end_of_stream was delivered whole by the model server.
  out.reply(CONTINUE_RESPONSE_HEADERS);
  out.become({ kind: 'Streaming', served, watch: { kind: 'opaque' }, pending: ok });
}

/** The model server's error in something other than JSON, replaced with our upstream_error JSON. */
function replaceUpstreamError(out: StepBuilder, served: Served, answer: Extract<ResponseClass, { kind: 'upstream-error-replaced' }>): void {
  const err = new GatewayError('upstream_error', answer.message, { details: { upstream_status: answer.upstreamStatus } });
  settle(out, served, answer.failure, err.kind);
  out.reply(immediateError(err, served.exchange.request.requestId, answer.status));
}

/** Answer headers and continue with `next`; `pending` becomes the next state's outcome. */
function passHeaders(
  out: StepBuilder,
  rule: ResponseRule,
  endOfStream: boolean,
  pending: PendingOutcome | undefined,
  next: Extract<StreamState, { kind: 'Streaming' }>,
): void {
  out.reply(CONTINUE_RESPONSE_HEADERS);
  if (endOfStream || rule.body === 'never') {
    if (pending !== undefined) settle(out, next.served, pending.failure, pending.result);
    out.become({ kind: 'Done', request: next.served.exchange.request });
    return;
  }
  out.become({ ...next, pending });
}

function readErrorText(out: StepBuilder, exchange: Exchange, facts: ResponseFacts): void {
  const rule = exchange.request.responseRule;
  if (facts.endOfStream) {
    // No body to read: say what we can without Envoy's text.
    decideErrorText(out, exchange, facts.status, '');
    return;
  }
  switch (rule.hold) {
    case 'ask-envoy':
      out.reply(responseHeadersReply(undefined, 'BUFFERED'));
      break;
    case 'envoy-holds':
      out.reply(CONTINUE_RESPONSE_HEADERS);
      break;
    case 'we-hold':
      break; // the header reply waits; the answer will be replaced anyway
    case 'nothing-to-hold':
      decideErrorText(out, exchange, facts.status, '');
      return;
    default:
      unhandled(rule.hold);
  }
  out.become({ kind: 'ReadingErrorText', exchange, status: facts.status, chunks: [], bytes: 0 });
}

function decideErrorText(out: StepBuilder, exchange: Exchange, status: number, text: string): void {
  const answer = classifyErrorText(status, text);
  if (answer.kind === 'envoy-failure') {
    replaceWithEnvoyFailure(out, exchange, answer.failure.kind, answer.failure.detail, undefined);
    return;
  }
  replaceUpstreamError(out, { exchange, servedBy: resolveServedBy(out, exchange, undefined), status }, answer);
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
      // Where Envoy holds it, it arrives whole; where we hold it, we decide at its end or once we have enough.
      if (end || state.bytes >= ERROR_TEXT_BYTES || state.exchange.request.responseRule.hold !== 'we-hold') {
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
      passChunk(out, ruleOf(state), chunk, end);
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
  const rule = state.served.exchange.request.responseRule;
  const watch = state.watch;
  switch (watch.kind) {
    case 'sse': {
      watch.inspector.feed(chunk);
      const filter = watch.filter;
      if (!end) {
        if (filter === undefined) passChunk(out, rule, chunk, false);
        else passFiltered(out, rule, chunk, filter.push(chunk, false), false);
        return;
      }
      const verdict = watch.inspector.finish();
      out.answered('stream', watch.inspector.usage);
      const last = filter === undefined ? chunk : filter.push(chunk, true);
      if (verdict.ok || verdict.kind !== 'stream_incomplete') {
        if (verdict.ok) settle(out, state.served, undefined, 'ok');
        else settle(out, state.served, 'bad_response', verdict.kind); // the client already saw the upstream's error event
        if (filter === undefined) passChunk(out, rule, chunk, true);
        else passFiltered(out, rule, chunk, last, true);
        return;
      }
      settle(out, state.served, 'bad_response', verdict.kind);
      const err = new GatewayError('stream_incomplete', `the model server ended the stream without its terminator: ${verdict.detail}`);
      const requestId = state.served.exchange.request.requestId;
      const body = Buffer.concat([last, renderSseErrorEvent(err, watch.inspector.lastBytes, requestId === '' ? {} : { requestId })]);
      replaceChunk(out, rule, body);
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
        envoyStreamsRest: rule.chunks === 'envoy-forwards',
      };
      copyJson(ctx, copy, chunk);
      passChunk(out, rule, chunk, false);
      out.become({ ...state, watch: copy });
      return;
    }
    case 'json-copy': {
      copyJson(ctx, watch, chunk);
      passChunk(out, rule, chunk, end);
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
      passChunk(out, rule, chunk, end);
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
  const request = factsOf(state);
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

/** Pass a body chunk on unchanged, as the delivery requires. */
function passChunk(out: StepBuilder, rule: ResponseRule, chunk: Buffer, end: boolean): void {
  switch (rule.chunks) {
    case 'we-send':
      out.replies(streamedBody('response', chunk, end));
      return;
    case 'envoy-forwards':
      out.reply(CONTINUE_RESPONSE_BODY); // the frozen constant: its wire bytes are encoded once
      return;
    default:
      unhandled(rule.chunks);
  }
}

/** The chunk in flight replaced by `body` (the stream's last: an error event appended). */
function replaceChunk(out: StepBuilder, rule: ResponseRule, body: Buffer): void {
  switch (rule.chunks) {
    case 'we-send':
      out.replies(streamedBody('response', body, true));
      return;
    case 'envoy-forwards':
      out.reply(replaceBodyChunk('response', body));
      return;
    default:
      unhandled(rule.chunks);
  }
}

/**
 * Pass what a filter made of a chunk: where we send the body ourselves, the bytes go back
 * themselves (nothing while the filter holds them all); otherwise each chunk's reply replaces it
 * (emptied when all is held).
 */
function passFiltered(out: StepBuilder, rule: ResponseRule, chunk: Buffer, bytes: Buffer, end: boolean): void {
  switch (rule.chunks) {
    case 'we-send':
      if (bytes.length > 0 || end) out.replies(streamedBody('response', bytes, end));
      return;
    case 'envoy-forwards':
      if (bytes === chunk) out.reply(CONTINUE_RESPONSE_BODY);
      else out.reply(bytes.length === 0 ? CLEAR_RESPONSE_BODY_CHUNK : replaceBodyChunk('response', bytes));
      return;
    default:
      unhandled(rule.chunks);
  }
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

/** The response rule of a stream in any state (a stream done before its headers: Envoy's default, streamed). */
function ruleOf(state: StreamState): ResponseRule {
  const request = factsOf(state);
  return request?.responseRule ?? RESPONSE_RULES.streamed;
}
