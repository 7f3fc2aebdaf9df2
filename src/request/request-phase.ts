// The request phase of one stream: request headers (read once into RequestFacts), the request body
// (held and answered as the stream's delivery rule says: delivery-rules.ts), trailers, and the pick.
// Transitions of the state machine (stream-machine.ts); pure.

import { GatewayError } from '../errors/gateway-error.js';
import {
  ASK_FOR_BUFFERED_REQUEST_BODY,
  CLEAR_REQUEST_BODY_CHUNK,
  CONTINUE_REQUEST_BODY,
  CONTINUE_REQUEST_HEADERS,
} from '../extproc/constant-replies.js';
import type { HeaderMap, HttpBody, ProcessingRequest, ProcessingResponse } from '../extproc/messages.js';
import { readInferenceRequest } from './openai-request.js';
import type { InferenceRequest } from './openai-request.js';
import { canAskForStreamUsage, withStreamUsage } from './usage-injection.js';
import { LEGACY_HEADER_ALIASES, MODEL_NAME_REWRITE_HEADER, SUBSET_HINT_KEY, SUBSET_HINT_NAMESPACE } from '../extproc/protocol-names.js';
import { immediateJson, replaceBodyChunk, streamedBody } from '../extproc/replies.js';
import { withModel } from './model-in-body.js';
import { routingReply, routingReplyWithChanges } from './decision-replies.js';
import type { RoutedRequest } from '../routing/routing.js';
import { pathOnly } from './stream-state.js';
import { StepBuilder } from './stream-state.js';
import type { MachineContext, ReadRequest, RequestFacts, Step, StreamState } from './stream-state.js';
import { QueuedRequest } from '../routing/flow-control.js';
import type { QueueOutcome } from '../routing/flow-control.js';
import type { QueuedRoute } from '../routing/routing.js';
import { streamModes } from '../extproc/body-modes.js';
import { REQUEST_RULES, RESPONSE_RULES, unhandled } from './delivery-rules.js';
import { headerValue, metadataValue } from '../extproc/message-fields.js';
import { BodyCollector } from './body-collector.js';
import { protocolViolation } from './stream-state.js';

const LEGACY_MODEL_NAME_REWRITE_HEADER = LEGACY_HEADER_ALIASES.get(MODEL_NAME_REWRITE_HEADER) ?? MODEL_NAME_REWRITE_HEADER;

// ── request path ────────────────────────────────────────────────────────────────────────────

export function requestHeaders(ctx: MachineContext, out: StepBuilder, state: StreamState, message: ProcessingRequest): void {
  if (state.kind !== 'AwaitingRequestHeaders') throw protocolViolation('request headers', state);
  const headers = message.request_headers?.headers;
  const modes = streamModes(message.protocol_config);
  const request: RequestFacts = {
    requestRule: REQUEST_RULES[modes.request],
    responseRule: RESPONSE_RULES[modes.response],
    method: headerValue(headers, ':method') ?? '',
    path: headerValue(headers, ':path') ?? '',
    requestId: headerValue(headers, 'x-request-id') ?? '',
    header: (name) => headerValue(headers, name),
    subset: subsetHint(message),
    contentLength: declaredLength(headerValue(headers, 'content-length')),
    ...flowHeaders(ctx, headers),
  };
  const path = pathOnly(request.path);
  if (message.request_headers?.end_of_stream === true) {
    if (request.method === 'GET' && path === '/v1/models') {
      try {
        out.reply(immediateJson(ctx.models.list(), 'llm_extproc_models'));
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
  if ((request.contentLength ?? 0) > ctx.maxRequestBodyBytes) {
    out.reject(request, tooLarge(ctx, request.contentLength ?? 0));
    return;
  }
  const rule = request.requestRule;
  switch (rule.headers) {
    case 'continue':
      out.reply(CONTINUE_REQUEST_HEADERS);
      break;
    case 'ask-for-buffered':
      out.reply(ASK_FOR_BUFFERED_REQUEST_BODY);
      break;
    case 'hold':
      break; // the header reply waits for the body, because it carries the routing
    default:
      unhandled(rule.headers);
  }
  out.become({
    kind: 'CollectingRequestBody',
    request,
    body: new BodyCollector(request.contentLength, ctx.maxRequestBodyBytes),
    headersAnswered: rule.headers !== 'hold',
  });
}

export function requestBody(ctx: MachineContext, out: StepBuilder, state: StreamState, message: HttpBody): void {
  if (state.kind !== 'CollectingRequestBody') {
    // Only full duplex sends body after we routed when trailers... never; anything else is a bug.
    throw protocolViolation('request body', state);
  }
  const chunk = message.body ?? Buffer.alloc(0);
  if (state.body.bytes + chunk.length > ctx.maxRequestBodyBytes) {
    out.reject(state.request, tooLarge(ctx, state.body.bytes + chunk.length));
    return;
  }
  state.body.add(chunk);
  const end = message.end_of_stream === true;
  if (!state.headersAnswered) {
    // We collect: nothing is answered until the body is whole.
    if (end) route(ctx, out, state, false);
    return;
  }
  // Envoy buffered the body for us: this one message is all of it (trailers may still follow).
  route(ctx, out, state, false, !end);
}

export function requestTrailers(ctx: MachineContext, out: StepBuilder, state: StreamState): void {
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
  const body = state.body.body();
  let admitted: RoutedRequest | QueuedRoute;
  let model: string | undefined;
  let inference: InferenceRequest;
  let rewrite: ReadRequest['rewrite'];
  try {
    inference = readInferenceRequest(body, ctx.routing.promptLimit);
    model = inference.model;
    rewrite = rewriteOf(ctx, request, body, model);
    const routeRequest = {
      model: rewrite?.model ?? model,
      prompt: inference.prompt,
      ...(inference.source === undefined ? {} : { source: inference.source }),
      bodyBytes: body.length,
      subset: request.subset,
      header: request.header,
    };
    admitted =
      ctx.flowHeaders === undefined
        ? ctx.routing.route(routeRequest)
        : ctx.routing.admit(routeRequest, {
            tenant: request.tenant,
            priorityClass: request.priorityClass,
            objective: request.objective,
            bytes: body.length,
            timed: request.requestRule.timed,
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
  const read: ReadRequest = { request, pieces: state.body.pieces, body, inference, trailersFollow, rewrite };
  if (admitted instanceof QueuedRequest) {
    // Nothing is answered while the request waits: Envoy holds it (and its message timer runs, in
    // buffered and streamed modes: the TTL stays below it).
    out.notice({ kind: 'queued', queued: admitted });
    out.become({ kind: 'Queued', read, queued: admitted });
    return;
  }
  forward(ctx, out, read, admitted);
}

/** The outcome of a wait in a queue: the pick (then on as any routed request), or the error to answer. */
export function dispatched(ctx: MachineContext, state: StreamState, outcome: QueueOutcome<RoutedRequest>): Step {
  const out = new StepBuilder(state);
  if (state.kind !== 'Queued') return out.build(); // the stream ended meanwhile
  if (outcome.kind === 'failed') out.reject(state.read.request, outcome.error, state.read.inference.model);
  else forward(ctx, out, state.read, outcome.routed);
  return out.build();
}

/** Hands the pick to Envoy in the reply the mode allows, and waits for the response. */
function forward(ctx: MachineContext, out: StepBuilder, read: ReadRequest, routed: RoutedRequest): void {
  const { request, body, inference, trailersFollow } = read;
  out.notice({ kind: 'routed', routed, model: inference.model, bytes: body.length });
  const primary = routed.endpoints[0];
  const sent = read.rewrite?.body ?? body;
  const withUsage =
    primary !== undefined && canAskForStreamUsage(pathOnly(request.path)) && ctx.injectsStreamUsage(primary.pool)
      ? withStreamUsage(sent, inference)
      : undefined;
  const rewritten = withUsage ?? read.rewrite?.body;
  if (rewritten === undefined) passBody(ctx, out, read, routed, trailersFollow);
  else passRewrittenBody(ctx, out, read, routed, rewritten, trailersFollow);
  const onlyPossible = ctx.destinationFormat === 'single' || routed.endpoints.length === 1 ? routed.endpoints[0] : undefined;
  out.become({
    kind: 'AwaitingResponse',
    exchange: {
      request,
      routed,
      model: inference.model,
      requestBytes: body.length,
      // Every field always present: one object shape for every exchange keeps the reads of it monomorphic.
      servedUnlessReported: onlyPossible,
      usageInjected: withUsage !== undefined,
    },
  });
}

/** The tenant, priority and objective headers, read only where flow control is on. */
function flowHeaders(ctx: MachineContext, headers: HeaderMap | undefined): { tenant?: string; priorityClass?: string; objective?: string } {
  if (ctx.flowHeaders === undefined) return {};
  const tenant = headerOrAlias(headers, ctx.flowHeaders.tenant);
  const priorityClass = headerValue(headers, ctx.flowHeaders.priority);
  // An empty objective header name (matching by name off) is applied where priorities are decided (routing/priority.ts).
  const objective = headerOrAlias(headers, ctx.flowHeaders.objective);
  return {
    ...(tenant === undefined ? {} : { tenant }),
    ...(priorityClass === undefined ? {} : { priorityClass }),
    ...(objective === undefined ? {} : { objective }),
  };
}

/**
 * The model this request is sent as, and its body saying so: the model the gateway names in
 * `x-llm-d-model-name-rewrite` (or `x-gateway-model-name-rewrite`), else a weighted rewrite rule's
 * pick. None when the body's `model` cannot be changed in place (then it goes as it came).
 */
function rewriteOf(ctx: MachineContext, request: RequestFacts, body: Buffer, model: string): ReadRequest['rewrite'] {
  const named = request.header(MODEL_NAME_REWRITE_HEADER) ?? request.header(LEGACY_MODEL_NAME_REWRITE_HEADER);
  const target = named !== undefined && named !== '' ? named : ctx.modelRewrites.empty ? undefined : ctx.modelRewrites.targetFor(model);
  if (target === undefined || target === model) return undefined;
  const rewritten = withModel(body, target);
  return rewritten === undefined ? undefined : { model: target, body: rewritten };
}

/** A header by its llm-d name, or by the `x-gateway-*` name it replaced when only that one is sent. */
function headerOrAlias(headers: HeaderMap | undefined, name: string): string | undefined {
  const value = headerValue(headers, name);
  if (value !== undefined) return value;
  const legacy = LEGACY_HEADER_ALIASES.get(name);
  return legacy === undefined ? undefined : headerValue(headers, legacy);
}

/** The pick in the reply the mode allows; the body goes on unchanged. */
function passBody(ctx: MachineContext, out: StepBuilder, state: ReadRequest, routed: RoutedRequest, trailersFollow: boolean): void {
  const rule = state.request.requestRule;
  switch (rule.body) {
    case 'body-reply':
      out.reply(pickReply(ctx, 'request_body', routed));
      break;
    case 'answer-each-chunk':
      out.reply(pickReply(ctx, 'request_headers', routed));
      for (let i = 0; i < state.pieces; i++) out.reply(CONTINUE_REQUEST_BODY);
      break;
    case 'send-back':
      out.reply(pickReply(ctx, 'request_headers', routed));
      // The body is one buffer now: it goes back in chunks of at most 64 KiB, whatever sizes it came in.
      out.replies(streamedBody('request', state.body, !trailersFollow));
      break;
    default:
      unhandled(rule.body);
  }
}

/** The shared reply of this destination list, unless our trace context goes along (then the request's own). */
function pickReply(ctx: MachineContext, phase: 'request_headers' | 'request_body', routed: RoutedRequest): ProcessingResponse {
  return ctx.upstreamTrace === undefined
    ? routingReply(phase, routed.destinations, ctx.destinationFormat, ctx.replica)
    : routingReplyWithChanges(phase, routed.destinations, ctx.destinationFormat, {
        trace: ctx.upstreamTrace,
        ...(ctx.replica === undefined ? {} : { replica: ctx.replica }),
      });
}

/**
 * The pick with a changed body: in the body reply where Envoy buffered it; where we collected it,
 * the held header reply carries the new length, and the body goes back as the new bytes (the
 * first chunk's reply carries them all and the others' are emptied, in STREAMED mode).
 */
function passRewrittenBody(
  ctx: MachineContext,
  out: StepBuilder,
  state: ReadRequest,
  routed: RoutedRequest,
  body: Buffer,
  trailersFollow: boolean,
): void {
  const headers = {
    ...(state.request.contentLength === undefined ? {} : { contentLength: body.length }),
    ...(ctx.upstreamTrace === undefined ? {} : { trace: ctx.upstreamTrace }),
    ...(ctx.replica === undefined ? {} : { replica: ctx.replica }),
  };
  const rule = state.request.requestRule;
  switch (rule.body) {
    case 'body-reply':
      out.reply(routingReplyWithChanges('request_body', routed.destinations, ctx.destinationFormat, { body, ...headers }));
      break;
    case 'answer-each-chunk':
      out.reply(routingReplyWithChanges('request_headers', routed.destinations, ctx.destinationFormat, headers));
      for (let i = 0; i < state.pieces; i++) out.reply(i === 0 ? replaceBodyChunk('request', body) : CLEAR_REQUEST_BODY_CHUNK);
      break;
    case 'send-back':
      out.reply(routingReplyWithChanges('request_headers', routed.destinations, ctx.destinationFormat, headers));
      out.replies(streamedBody('request', body, !trailersFollow));
      break;
    default:
      unhandled(rule.body);
  }
}

function declaredLength(value: string | undefined): number | undefined {
  if (value === undefined) return undefined;
  const length = Number(value);
  return Number.isSafeInteger(length) && length >= 0 ? length : undefined;
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
