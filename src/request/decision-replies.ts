// The replies that carry our own decisions: where the request goes (the endpoint-picker protocol's
// destination header and `envoy.lb` metadata) and our structured errors. Pure: values in,
// ProcessingResponse values out; the protocol-level builders are in extproc/replies.ts.

import type { DestinationFormat } from '../config/config.js';
import type { GatewayError } from '../errors/gateway-error.js';
import { renderError } from '../errors/render.js';
import { reusedReply } from '../extproc/constant-replies.js';
import type { ProcessingResponse } from '../extproc/messages.js';
import { headerMutation, metadataNamespaces } from '../extproc/message-fields.js';
import { DESTINATION_HEADER, DESTINATION_METADATA_NAMESPACE, REPLICA_KEY } from '../extproc/protocol-names.js';
import type { UpstreamTraceHeaders } from '../tracing/request-trace.js';

/**
 * Answer the client ourselves. Envoy honours this at any point before the response headers
 * reached the client — on the request path and on the response path alike — so it is our one
 * way to replace an answer, whatever the body mode. `details` becomes Envoy's
 * `response.code_details`, which our shipped local-reply mappers use to leave our answers alone.
 */
export function immediateError(err: GatewayError, requestId: string, statusOverride?: number): ProcessingResponse {
  const rendered = renderError(err, requestId === '' ? {} : { requestId });
  return {
    immediate_response: {
      status: { code: statusOverride ?? rendered.status },
      headers: headerMutation(rendered.headers),
      body: rendered.body,
      details: `llm_extproc_${err.kind}`,
    },
  };
}

/**
 * Routing replies by phase and destination format, then by each destination address in order
 * (the addresses are the store's own strings, so no key is built per request); the reply sits
 * under REPLY at the end of its path. Bounded: pod churn can mint many lists.
 */
type ReplyTree = Map<string | typeof REPLY, ReplyTree | ProcessingResponse>;
const REPLY = Symbol('reply');
const ROUTING_REPLIES = new Map<string, ReplyTree>();
const MAX_ROUTING_REPLIES = 4096;
let routingReplies = 0;

/**
 * Hands Envoy our pick, in the reply to the request headers or to the request body: the primary
 * in the destination header (which ORIGINAL_DST clusters and header-based overrides parse as one
 * address), and in the `envoy.lb` metadata override_host reads the whole list (first is primary,
 * the rest are walked on retries) unless the gateway reads exactly one address (`single`). A
 * destination list repeats from request to request, so each reply is built once and reused
 * (and reply-frames.ts frames it once).
 */
export function routingReply(
  phase: 'request_headers' | 'request_body',
  destinations: readonly string[],
  format: DestinationFormat,
  replica?: string,
): ProcessingResponse {
  const used = format === 'list' ? destinations.length : Math.min(1, destinations.length);
  const root = phase === 'request_headers' ? format : format === 'list' ? 'list body' : 'single body';
  let top = ROUTING_REPLIES.get(root);
  if (top === undefined) ROUTING_REPLIES.set(root, (top = newReplyTree()));
  // One replica per process in production; the tests start several in one.
  let level = top.get(replica ?? '') as ReplyTree | undefined;
  if (level === undefined) top.set(replica ?? '', (level = newReplyTree()));
  for (let i = 0; i < used; i++) {
    let next = level.get(destinations[i]) as ReplyTree | undefined;
    if (next === undefined) level.set(destinations[i], (next = newReplyTree()));
    level = next;
  }
  const known = level.get(REPLY) as ProcessingResponse | undefined;
  if (known !== undefined) return known;
  if (routingReplies >= MAX_ROUTING_REPLIES) {
    ROUTING_REPLIES.clear(); // `level` is no longer reachable: this one reply is simply not kept
    routingReplies = 0;
    return buildRoutingReply(phase, destinations, format, replica);
  }
  const reply = reusedReply(buildRoutingReply(phase, destinations, format, replica));
  level.set(REPLY, reply);
  routingReplies++;
  return reply;
}

/** What a request's own routing reply changes besides the destination. */
export interface RequestChanges {
  /** The new body (usage injection), in the body reply where Envoy buffered it. */
  readonly body?: Buffer;
  /** The new body's length, when the request declared one. */
  readonly contentLength?: number;
  /** Our span's trace context for the model server, over the client's. */
  readonly trace?: UpstreamTraceHeaders;
  /** This replica's `listen.peerAddress`, for the stream's metadata (see buildRoutingReply). */
  readonly replica?: string;
}

/**
 * The routing reply for a request we change on its way (a new body, our trace context). Built per
 * request, never reused: what it carries is the request's own.
 */
export function routingReplyWithChanges(
  phase: 'request_headers' | 'request_body',
  destinations: readonly string[],
  format: DestinationFormat,
  changes: RequestChanges,
): ProcessingResponse {
  const reply = buildRoutingReply(phase, destinations, format, changes.replica);
  const common = phase === 'request_headers' ? reply.request_headers?.response : reply.request_body?.response;
  if (common === undefined) return reply;
  if (changes.contentLength !== undefined || changes.trace !== undefined) {
    const set: Array<readonly [string, string]> = [[DESTINATION_HEADER, destinations[0] ?? '']];
    if (changes.contentLength !== undefined) set.push(['content-length', String(changes.contentLength)]);
    if (changes.trace !== undefined) set.push(...changes.trace.set);
    common.header_mutation = headerMutation(set, changes.trace?.remove);
  }
  if (changes.body !== undefined) common.body_mutation = { body: changes.body };
  return reply;
}

function newReplyTree(): ReplyTree {
  return new Map<string | typeof REPLY, ReplyTree | ProcessingResponse>();
}

/**
 * `replica`: this replica's `listen.peerAddress`, written beside the pick so Envoy's access-log
 * entry of the stream names the replica that holds it (extproc/access-log-routing.ts).
 */
function buildRoutingReply(
  phase: 'request_headers' | 'request_body',
  destinations: readonly string[],
  format: DestinationFormat,
  replica: string | undefined,
): ProcessingResponse {
  const primary = destinations[0] ?? '';
  const response = { response: { header_mutation: headerMutation([[DESTINATION_HEADER, primary]]) } };
  const metadataValue = format === 'list' ? destinations.join(',') : primary;
  const lb: Record<string, string> = { [DESTINATION_HEADER]: metadataValue };
  if (replica !== undefined) lb[REPLICA_KEY] = replica;
  const dynamic_metadata = metadataNamespaces({ [DESTINATION_METADATA_NAMESPACE]: lb });
  return phase === 'request_headers' ? { request_headers: response, dynamic_metadata } : { request_body: response, dynamic_metadata };
}
