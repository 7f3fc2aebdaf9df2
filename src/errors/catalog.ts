// The error catalog: every failure a client can see from this gateway, with its HTTP status,
// OpenAI-style type, stable machine code, retry advice and how it reaches the client.
// It is the single source for the renderer (render.ts) and for docs/errors.md (docs.ts), so a
// new kind is added here once and shows up everywhere.

/**
 * All error kinds. `kind` is our internal name; `code` (in the entry) is the wire contract.
 * They are equal today, but the code is what clients match on, so never rename a code.
 */
export const ERROR_KINDS = [
  // The client's request is wrong.
  'invalid_json',
  'missing_body',
  'missing_model',
  'invalid_model',
  'body_too_large',
  'method_not_allowed',
  'route_not_found',
  'model_not_found',
  // No replica could take the request (decided by us or by Envoy before any byte was sent).
  'no_ready_replica',
  'upstream_connect_failed',
  'all_replicas_failed',
  'no_healthy_upstream',
  'overloaded',
  'pool_overloaded',
  // Flow control (the pool is saturated: docs/picking.md, Flow control).
  'shed',
  'pool_saturated',
  'queue_timeout',
  'gateway_misconfigured',
  'gateway_unavailable',
  // The replica took the request but the answer went wrong.
  'upstream_timeout',
  'upstream_reset',
  'upstream_error',
  'truncated_response',
  'stream_incomplete',
  'stream_broken',
  'upstream_error_event',
  // Our own bug.
  'internal_error',
] as const;

export type ErrorKind = (typeof ERROR_KINDS)[number];

/**
 * OpenAI-style `error.type` values. We reuse OpenAI's names where OpenAI has the same situation
 * (every 4xx is `invalid_request_error` there, 500 is `server_error`) so SDKs and dashboards
 * that switch on them keep working, and add three for conditions only a gateway has.
 */
export const ERROR_TYPES = [
  'invalid_request_error',
  'service_unavailable_error',
  'timeout_error',
  'upstream_error',
  'server_error',
] as const;

export type ErrorType = (typeof ERROR_TYPES)[number];

/**
 * How an error reaches the client:
 * - `response`: a complete JSON error response replaces whatever would have been sent.
 * - `sse-event`: the status line (200) is already out; a `data: {"error":...}` event is appended
 *   to the event stream before it ends.
 * - `connection-reset`: nothing can be sent any more; Envoy resets the client's stream. We only
 *   record it.
 * - `passthrough`: the model server's own error reaches the client untouched; we only record it.
 */
export const ERROR_DELIVERIES = ['response', 'sse-event', 'connection-reset', 'passthrough'] as const;

export type ErrorDelivery = (typeof ERROR_DELIVERIES)[number];

export interface CatalogEntry {
  readonly kind: ErrorKind;
  /** HTTP status of the rendered response. For `sse-event`/`connection-reset`/`passthrough` the
   * client already has its status line; this is the status we record for the outcome. */
  readonly status: number;
  readonly type: ErrorType;
  /** Stable machine code sent as `error.code` and in the `x-llm-extproc-error` header. */
  readonly code: string;
  /** Short human title for docs and logs. */
  readonly title: string;
  /** Whether repeating the same request later can succeed. */
  readonly retryable: boolean;
  /** Default `Retry-After`; the renderer can override it per request (see no-ready-replica.ts). */
  readonly retryAfterSeconds?: number;
  readonly delivery: ErrorDelivery;
  /** When it happens. */
  readonly cause: string;
  /** What the user should do. */
  readonly action: string;
}

type EntrySpec = Omit<CatalogEntry, 'kind' | 'code'>;

// Written as a Record keyed by kind so the compiler rejects a kind without an entry.
const SPECS: Record<ErrorKind, EntrySpec> = {
  invalid_json: {
    status: 400,
    type: 'invalid_request_error',
    title: 'Request body is not valid JSON',
    retryable: false,
    delivery: 'response',
    cause: 'The request body of a completion request could not be parsed as a JSON object.',
    action: 'Send a JSON object body (OpenAI request format) with `content-type: application/json`.',
  },
  missing_body: {
    status: 400,
    type: 'invalid_request_error',
    title: 'Request body is missing',
    retryable: false,
    delivery: 'response',
    cause: 'A POST to a completion endpoint arrived without a body.',
    action: 'Send the OpenAI request as a JSON body.',
  },
  missing_model: {
    status: 400,
    type: 'invalid_request_error',
    title: 'Request has no `model` field',
    retryable: false,
    delivery: 'response',
    cause: 'The JSON body has no `model` field, so the gateway cannot pick a model server.',
    action: 'Add `"model": "<name>"`; `GET /v1/models` lists the names served here.',
  },
  invalid_model: {
    status: 400,
    type: 'invalid_request_error',
    title: '`model` is not a non-empty string',
    retryable: false,
    delivery: 'response',
    cause: 'The `model` field is present but is not a non-empty string (number, object, empty string...).',
    action: 'Set `model` to the model name as a string.',
  },
  body_too_large: {
    status: 413,
    type: 'invalid_request_error',
    title: 'Request body too large',
    retryable: false,
    delivery: 'response',
    cause: "The request body exceeds the size the gateway reads to find the model (or Envoy's buffer limit).",
    action: 'Shorten the request (prompt, images, tools) or ask the operator to raise the limit.',
  },
  method_not_allowed: {
    status: 405,
    type: 'invalid_request_error',
    title: 'Method not allowed',
    retryable: false,
    delivery: 'response',
    cause: 'A completion endpoint was called with a method other than POST.',
    action: 'Use POST for completion endpoints.',
  },
  route_not_found: {
    status: 404,
    type: 'invalid_request_error',
    title: 'No route for this path',
    retryable: false,
    delivery: 'response',
    cause: 'Envoy has no route for the request path (Envoy `route_not_found`, flag NR).',
    action: 'Check the URL: OpenAI paths look like `/v1/chat/completions`.',
  },
  model_not_found: {
    status: 404,
    type: 'invalid_request_error',
    title: 'Model not found',
    retryable: false,
    delivery: 'response',
    cause: 'No configured pool serves the requested model name.',
    action: 'Check the model name (case matters); `GET /v1/models` lists the names served here.',
  },
  no_ready_replica: {
    status: 503,
    type: 'service_unavailable_error',
    title: 'No ready replica for the model',
    retryable: true,
    retryAfterSeconds: 5,
    delivery: 'response',
    cause:
      'The model is configured but none of its replicas is Ready (all are pending, starting, not ready, ' +
      'crash-looping, quarantined or terminating). `error.replicas` counts replicas per state and the ' +
      'message names the reasons; Retry-After depends on them (starting replicas take longer).',
    action:
      'Retry after the Retry-After delay. If it persists, the operator should look at the pods ' +
      '(`kubectl describe pod`): `crash_loop` and `pending` counts point at the cause.',
  },
  upstream_connect_failed: {
    status: 503,
    type: 'service_unavailable_error',
    title: 'Could not connect to the model server',
    retryable: true,
    retryAfterSeconds: 1,
    delivery: 'response',
    cause:
      'The one replica the gateway could try refused or failed the connection (Envoy flag UF). ' +
      'The replica is quarantined after repeated failures.',
    action: 'Retry; other replicas are used once this one is quarantined.',
  },
  all_replicas_failed: {
    status: 503,
    type: 'service_unavailable_error',
    title: 'Every attempted replica failed to connect',
    retryable: true,
    retryAfterSeconds: 5,
    delivery: 'response',
    cause:
      'The primary replica and every fallback failed to connect (Envoy flags UF+URX): the replicas are ' +
      'probably restarting or the network path to them is broken.',
    action: 'Retry after the Retry-After delay; if it persists the operator should check the model server pods.',
  },
  no_healthy_upstream: {
    status: 503,
    type: 'service_unavailable_error',
    title: 'Envoy has no healthy upstream host',
    retryable: true,
    retryAfterSeconds: 5,
    delivery: 'response',
    cause: "Envoy's cluster had no healthy host for the request (Envoy `no_healthy_upstream`, flag UH).",
    action: "Retry after the Retry-After delay; the operator should check the cluster's hosts and health checks.",
  },
  overloaded: {
    status: 503,
    type: 'service_unavailable_error',
    title: 'Gateway is shedding load',
    retryable: true,
    retryAfterSeconds: 2,
    delivery: 'response',
    cause:
      'Envoy refused the request to protect the model servers: circuit breaker overflow (flag UO), ' +
      'drop_overload, overload manager or maintenance mode.',
    action: 'Retry with backoff after the Retry-After delay, or lower request concurrency.',
  },
  pool_overloaded: {
    status: 429,
    type: 'service_unavailable_error',
    title: 'Every replica of the model has a full queue',
    retryable: true,
    retryAfterSeconds: 2,
    delivery: 'response',
    cause:
      "Load shedding: every ready replica of the model reports at least its pool's `maxQueueDepth` " +
      'requests waiting (model-server metrics), so a new request would only wait in a queue. ' +
      '`error.pools` names the pools and `error.shortest_queue` the shortest queue seen.',
    action: 'Retry with backoff after the Retry-After delay, or lower request concurrency; the operator may add replicas.',
  },
  shed: {
    status: 429,
    type: 'service_unavailable_error',
    title: 'Sheddable request refused while the pool is saturated',
    retryable: true,
    retryAfterSeconds: 1,
    delivery: 'response',
    cause:
      'Flow control: every replica of the pool is saturated (queue depth, KV-cache use or in-flight limit of ' +
      '`picker.flowControl.saturation`) and the request has a negative priority (sheddable: from ' +
      '`picker.flowControl.priorityByModel` or `priorityByHeaderValue`, or the `spec.priority` of an InferenceObjective), ' +
      'so it is refused at once instead of waiting. ' +
      '`error.pool` names the pool and `error.priority` the priority.',
    action: 'Retry after the Retry-After delay; sheddable traffic passes again as soon as the pool is not saturated.',
  },
  pool_saturated: {
    status: 429,
    type: 'service_unavailable_error',
    title: "The saturated pool's wait queue is full",
    retryable: true,
    retryAfterSeconds: 2,
    delivery: 'response',
    cause:
      "Flow control: every replica of the pool is saturated and the pool's wait queue already holds " +
      '`picker.flowControl.maxQueued` requests (or `maxQueuedBytes` of request bodies). `error.pool` names the pool ' +
      'and `error.queued` the requests waiting.',
    action:
      'Retry with backoff after the Retry-After delay, or lower request concurrency; the operator may add replicas or raise the queue bounds.',
  },
  queue_timeout: {
    status: 429,
    type: 'service_unavailable_error',
    title: 'The request waited its whole TTL in the queue',
    retryable: true,
    retryAfterSeconds: 1,
    delivery: 'response',
    cause:
      "Flow control: the request waited in the saturated pool's queue for its whole TTL (`picker.flowControl.ttlSeconds` " +
      'in full-duplex body modes, `timedTtlSeconds` where Envoy runs an ext_proc message timer) and no replica had room. ' +
      '`error.waited_ms` says how long it waited.',
    action: 'Retry after the Retry-After delay; if it persists, the pool needs more replicas or the traffic a lower priority.',
  },
  gateway_misconfigured: {
    status: 503,
    type: 'server_error',
    title: 'Gateway route points at a missing cluster',
    retryable: false,
    delivery: 'response',
    cause: 'The matched route names an Envoy cluster that does not exist (Envoy `cluster_not_found`, flag NC).',
    action: 'Operator: fix the Envoy route/cluster configuration.',
  },
  gateway_unavailable: {
    status: 503,
    type: 'service_unavailable_error',
    title: 'Routing service unavailable',
    retryable: true,
    retryAfterSeconds: 5,
    delivery: 'response',
    cause:
      'Envoy could not reach llm-extproc or it failed/timed out (Envoy `ext_proc_error_*`). Rendered by the ' +
      '`local_reply_config` mapper in our Envoy configuration, since llm-extproc cannot answer for itself.',
    action: 'Retry after the Retry-After delay; the operator should check the llm-extproc pods and their logs.',
  },
  upstream_timeout: {
    status: 504,
    type: 'timeout_error',
    title: 'Model server did not answer in time',
    retryable: true,
    delivery: 'response',
    cause:
      'No response headers arrived within the route or per-try timeout (Envoy flag UT, ' +
      '`response_timeout`/`upstream_per_try_timeout`).',
    action: 'Retry, ideally with `stream: true` or a smaller `max_tokens`; the operator may raise the route timeout.',
  },
  upstream_reset: {
    status: 502,
    type: 'upstream_error',
    title: 'Model server reset the request',
    retryable: true,
    delivery: 'response',
    cause:
      'The connection or stream to the model server was closed or reset before any response header ' +
      '(Envoy flags UR/UC/LR/UPE): the server crashed, restarted or ran out of memory.',
    action: 'Retry; if it repeats for the same request, the request may crash the model server (report it).',
  },
  upstream_error: {
    status: 502,
    type: 'upstream_error',
    title: 'Model server returned a non-JSON error',
    retryable: true,
    delivery: 'response',
    cause:
      'The model server answered with an error status and a body that is not JSON (HTML, plain text). ' +
      'The gateway wraps it; `error.upstream_status` keeps its status. A JSON error from the model ' +
      'server is passed through untouched and is not this kind.',
    action: 'Retry; if it persists the operator should read the model server logs.',
  },
  truncated_response: {
    status: 502,
    type: 'upstream_error',
    title: 'Response body is not valid JSON',
    retryable: true,
    delivery: 'response',
    cause: 'A non-streaming response ended but its body is not valid JSON (cut short or garbled).',
    action: 'Retry the request.',
  },
  stream_incomplete: {
    status: 502,
    type: 'upstream_error',
    title: 'Stream ended without its terminator',
    retryable: true,
    delivery: 'sse-event',
    cause:
      'A streaming response ended cleanly at the transport level but without `data: [DONE]` (or a ' +
      'terminal Responses API event). The status (200) was already sent, so an SSE error event is ' +
      'appended at the end; OpenAI SDKs raise it as an APIError.',
    action: 'Treat the output received so far as partial and retry the request.',
  },
  stream_broken: {
    status: 502,
    type: 'upstream_error',
    title: 'Stream reset mid-response',
    retryable: true,
    delivery: 'connection-reset',
    cause:
      "The model server's side ended the response stream after its headers were sent (Envoy's access log flags an " +
      'upstream reset, connection close or timeout, or, without that log, nothing explained the break). Nothing can be ' +
      "appended: Envoy resets the client's stream, and the gateway only records the failure. If Envoy still held the " +
      'headers, the client gets its `upstream_reset` (or `upstream_timeout`) reply instead, and that is the result. A break ' +
      'that Envoy logs as the client leaving is `cancelled_mid_stream`, not this.',
    action: 'Treat the output received so far as partial and retry the request.',
  },
  upstream_error_event: {
    status: 502,
    type: 'upstream_error',
    title: 'Model server sent an error event',
    retryable: false,
    delivery: 'passthrough',
    cause:
      'The model server sent an error inside the event stream (`data: {"error":...}`, `event: error`, ' +
      '`response.failed`). It is passed through untouched and recorded as a failed request.',
    action: 'Read the error message from the event; whether a retry helps depends on it.',
  },
  internal_error: {
    status: 500,
    type: 'server_error',
    title: 'Internal gateway error',
    retryable: true,
    delivery: 'response',
    cause: 'An unexpected failure inside llm-extproc (a bug). Details are in the llm-extproc logs, never in the response.',
    action: 'Retry; report it to the operator with the request id if it repeats.',
  },
};

function buildCatalog(): Readonly<Record<ErrorKind, CatalogEntry>> {
  const out = {} as Record<ErrorKind, CatalogEntry>;
  for (const kind of ERROR_KINDS) {
    out[kind] = Object.freeze({ kind, code: kind, ...SPECS[kind] });
  }
  return Object.freeze(out);
}

export const CATALOG: Readonly<Record<ErrorKind, CatalogEntry>> = buildCatalog();

export function catalogEntry(kind: ErrorKind): CatalogEntry {
  return CATALOG[kind];
}

export function isErrorKind(value: unknown): value is ErrorKind {
  return typeof value === 'string' && (ERROR_KINDS as readonly string[]).includes(value);
}

/**
 * Results that are not errors: the request ended before its answer was complete, and nothing points
 * at a model server or at us. They label `llm_extproc_requests_total{result}` and log lines like the
 * error codes, but no error series, error ratio or alert counts them, and the replica that served
 * keeps a clean record. No client sees them: whoever ended the request is gone.
 */
export const CANCELLATION_KINDS = [
  'cancelled_before_routing',
  'cancelled_in_queue',
  'cancelled_before_response',
  'cancelled_mid_stream',
] as const;

export type CancellationKind = (typeof CANCELLATION_KINDS)[number];

export interface CancellationEntry {
  readonly kind: CancellationKind;
  readonly title: string;
  /** What is known when it is recorded (and what is not). */
  readonly cause: string;
}

const CANCELLATION_SPECS: Record<CancellationKind, Omit<CancellationEntry, 'kind'>> = {
  cancelled_before_routing: {
    title: 'Ended before it was routed',
    cause: 'The ext_proc stream ended before the request body reached us: the client hung up while sending it.',
  },
  cancelled_in_queue: {
    title: 'Ended while it waited in a queue',
    cause: 'The client hung up while the request waited in a saturated pool’s queue (flow control); it left the queue at once.',
  },
  cancelled_before_response: {
    title: 'Ended before the response started',
    cause:
      'The stream ended after the pick and before any response headers: the client hung up while the model server prepared its answer.',
  },
  cancelled_mid_stream: {
    title: 'Stream ended mid-response by the client',
    cause:
      "A response stream ended before its end, and Envoy's access-log entry of it says the downstream ended it " +
      '(DC: the client closed its connection; DR: it reset its HTTP/2 stream) with no upstream reset or timeout: a ' +
      '"stop generating" button, a closed tab, a client timeout, or a network break on the client\'s side. Only where ' +
      'the gateway streams its access log to llm-extproc (docs/gateways.md); without it such a break is `stream_broken`.',
  },
};

export const CANCELLATIONS: Readonly<Record<CancellationKind, CancellationEntry>> = Object.freeze(
  Object.fromEntries(CANCELLATION_KINDS.map((kind) => [kind, Object.freeze({ kind, ...CANCELLATION_SPECS[kind] })])) as Record<
    CancellationKind,
    CancellationEntry
  >,
);

const CANCELLATION_SET: ReadonlySet<string> = new Set(CANCELLATION_KINDS);

/** Whether a request's result is a cancellation (not an error): for metrics and logs. */
export function isCancellation(result: string): result is CancellationKind {
  return CANCELLATION_SET.has(result);
}
