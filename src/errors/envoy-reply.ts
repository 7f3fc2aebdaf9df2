// Classification of Envoy's own local replies (connect failure, no healthy upstream, timeout...)
// into catalog kinds. Envoy hands them to ext_proc as ordinary response headers, so we must tell
// them apart from the model server's answers. Evidence, strongest first:
//   1. `response.code_details` (a fixed vocabulary in envoy/stream_info/stream_info.h, plus the
//      router's `upstream_reset_before_response_started{<reset reason>|<transport failure>}`);
//   2. the `response.flags` bitmask (envoy-response-flags.ts);
//   3. the plain-text body Envoy writes — a last resort when the attributes are not configured.
// The tables below are exported so docs/errors.md is generated from the same data.

import type { ErrorKind } from './catalog.js';
import { hasResponseFlag } from './envoy-response-flags.js';
import type { ResponseFlagName } from './envoy-response-flags.js';

export { RESPONSE_FLAGS, responseFlagNames } from './envoy-response-flags.js';
export type { ResponseFlagName } from './envoy-response-flags.js';

export interface EnvoyReplyFacts {
  /** HTTP status of the response as Envoy passes it to ext_proc. */
  status: number;
  /** Envoy attribute `response.code_details`. */
  codeDetails?: string;
  /** Envoy attribute `response.flags` (bitmask). */
  flags?: number;
  /** Response body as text; consulted only when the attributes give no answer. */
  bodyText?: string;
}

export interface EnvoyReplyClass {
  kind: ErrorKind;
  /** Short human phrase for messages and logs, e.g. "connection refused"; never Envoy's raw text. */
  detail: string;
}

/** `response.code_details` of a response that came from the upstream. */
export const VIA_UPSTREAM = 'via_upstream';

/** Exact `response.code_details` values of local replies, and what they mean for clients. */
export const CODE_DETAIL_KINDS: Readonly<Record<string, EnvoyReplyClass>> = {
  no_healthy_upstream: { kind: 'no_healthy_upstream', detail: 'no healthy host in the Envoy cluster' },
  response_timeout: { kind: 'upstream_timeout', detail: 'no response within the route timeout' },
  upstream_per_try_timeout: { kind: 'upstream_timeout', detail: 'no response within the per-try timeout' },
  upstream_per_try_idle_timeout: { kind: 'upstream_timeout', detail: 'model server idle longer than the per-try idle timeout' },
  upstream_max_stream_duration_reached: { kind: 'upstream_timeout', detail: 'upstream max stream duration reached' },
  stream_idle_timeout: { kind: 'upstream_timeout', detail: 'stream idle timeout' },
  maintenance_mode: { kind: 'overloaded', detail: 'Envoy cluster in maintenance mode' },
  drop_overload: { kind: 'overloaded', detail: 'Envoy dropped the request (drop_overload)' },
  unconditional_drop_overload: { kind: 'overloaded', detail: 'Envoy drops all traffic (drop_overload at 100%)' },
  overload: { kind: 'overloaded', detail: 'Envoy overload manager rejected the request' },
  request_payload_too_large: { kind: 'body_too_large', detail: "request body exceeds Envoy's buffer limit" },
  route_not_found: { kind: 'route_not_found', detail: 'no Envoy route matches the path' },
  route_configuration_not_found: { kind: 'route_not_found', detail: 'Envoy has no route configuration' },
  cluster_not_found: { kind: 'gateway_misconfigured', detail: "the route's Envoy cluster does not exist" },
};

/** Prefix of `response.code_details` set by the ext_proc filter when llm-extproc fails. */
export const EXT_PROC_ERROR_PREFIX = 'ext_proc_error';

/** Base of `response.code_details` when the upstream failed before any response header. */
export const EARLY_UPSTREAM_RESET = 'upstream_reset_before_response_started';
/** Base of `response.code_details` when the upstream failed after headers went downstream. */
export const LATE_UPSTREAM_RESET = 'upstream_reset_after_response_started';

const CONNECT_FAILURE: EnvoyReplyClass = { kind: 'upstream_connect_failed', detail: 'connection failed' };

/**
 * Envoy's stream reset reasons (Http::Utility::resetReasonToString, spaces as `_`, lower-cased)
 * → kind. The connect failures are refined by the transport failure reason and by URX.
 * `connection_failure` is the pre-1.2x name of the two connection-failure reasons.
 */
export const RESET_REASON_KINDS: Readonly<Record<string, EnvoyReplyClass>> = {
  remote_connection_failure: CONNECT_FAILURE,
  local_connection_failure: CONNECT_FAILURE,
  connection_failure: CONNECT_FAILURE,
  connection_timeout: { kind: 'upstream_connect_failed', detail: 'connection timed out' },
  connection_termination: { kind: 'upstream_reset', detail: 'connection closed before the response started' },
  remote_reset: { kind: 'upstream_reset', detail: 'the model server reset the stream' },
  remote_refused_stream_reset: { kind: 'upstream_reset', detail: 'the model server refused the stream' },
  remote_error_with_connect_request: { kind: 'upstream_reset', detail: 'the model server rejected the CONNECT request' },
  local_reset: { kind: 'upstream_reset', detail: 'the gateway reset the upstream stream' },
  local_refused_stream_reset: { kind: 'upstream_reset', detail: 'the gateway refused the upstream stream' },
  protocol_error: { kind: 'upstream_reset', detail: 'HTTP protocol error from the model server' },
  overflow: { kind: 'overloaded', detail: 'circuit breaker open (too many pending requests or connections)' },
  overload_manager_reset: { kind: 'overloaded', detail: 'Envoy overload manager reset the stream' },
};

export interface FlagRule extends EnvoyReplyClass {
  /** All of these flags must be set. */
  readonly flags: readonly ResponseFlagName[];
  /**
   * Flags that Envoy also sets on responses that did come from the upstream (URX after retries on
   * 5xx, UO when a retry is blocked by a circuit breaker) only count together with a 503.
   */
  readonly only503?: boolean;
}

/** Used only when `code_details` is missing or unknown. First match wins. */
export const FLAG_RULES: readonly FlagRule[] = [
  { flags: ['UF', 'URX'], kind: 'all_replicas_failed', detail: 'every attempted replica failed to connect' },
  { flags: ['UF'], kind: 'upstream_connect_failed', detail: 'connection failed' },
  { flags: ['UH'], kind: 'no_healthy_upstream', detail: 'no healthy host in the Envoy cluster' },
  { flags: ['UT'], kind: 'upstream_timeout', detail: 'no response within the timeout' },
  { flags: ['UMSDR'], kind: 'upstream_timeout', detail: 'upstream max stream duration reached' },
  { flags: ['SI'], kind: 'upstream_timeout', detail: 'stream idle timeout' },
  { flags: ['UC'], kind: 'upstream_reset', detail: 'connection closed before the response started' },
  { flags: ['UR'], kind: 'upstream_reset', detail: 'the model server reset the stream' },
  { flags: ['LR'], kind: 'upstream_reset', detail: 'the gateway reset the upstream stream' },
  { flags: ['UPE'], kind: 'upstream_reset', detail: 'HTTP protocol error from the model server' },
  { flags: ['UO'], kind: 'overloaded', detail: 'circuit breaker open', only503: true },
  { flags: ['DO'], kind: 'overloaded', detail: 'Envoy dropped the request (drop_overload)' },
  { flags: ['UDO'], kind: 'overloaded', detail: 'Envoy drops all traffic (drop_overload at 100%)' },
  { flags: ['OM'], kind: 'overloaded', detail: 'Envoy overload manager rejected the request' },
  { flags: ['NR'], kind: 'route_not_found', detail: 'no Envoy route matches the path' },
  { flags: ['NC'], kind: 'gateway_misconfigured', detail: "the route's Envoy cluster does not exist" },
];

/** Envoy's local-reply texts, for documentation; matching is in `classifyByText`. */
export const TEXT_RULES: ReadonlyArray<{ readonly text: string; readonly result: string }> = [
  {
    text: 'upstream connect error or disconnect/reset before headers. reset reason: <reason>, transport failure reason: <why>',
    result: 'by reset reason, as above',
  },
  {
    text: 'upstream connect error or disconnect/reset before headers. retried and the latest reset reason: <connect failure>…',
    result: 'all_replicas_failed',
  },
  { text: 'no healthy upstream', result: 'no_healthy_upstream' },
  { text: 'upstream request timeout', result: 'upstream_timeout' },
  { text: 'upstream max stream duration reached', result: 'upstream_timeout' },
  { text: 'stream timeout', result: 'upstream_timeout' },
  { text: 'maintenance mode', result: 'overloaded' },
  { text: 'Payload Too Large (status 413)', result: 'body_too_large' },
];

/** Envoy replaces whitespace with `_` in details; older versions and access logs may not. */
function normalize(text: string): string {
  return text.trim().replace(/\s+/g, '_').toLowerCase();
}

/** A human phrase for a connect failure from Envoy's transport failure reason (normalised). */
function connectFailureDetail(resetReason: string, transportFailure: string): string {
  const errno = /connect_error:_?(\d+)/.exec(transportFailure)?.[1];
  if (transportFailure.includes('connection_refused') || errno === '111') return 'connection refused';
  if (resetReason === 'connection_timeout' || transportFailure.includes('timed_out') || errno === '110') return 'connection timed out';
  if (transportFailure.includes('no_route_to_host') || errno === '113') return 'no route to host';
  if (transportFailure.includes('network_is_unreachable') || errno === '101') return 'network unreachable';
  if (transportFailure.includes('connection_reset') || errno === '104') return 'connection reset during connect';
  if (transportFailure.includes('tls_error') || transportFailure.includes('ssl')) return 'TLS handshake failed';
  return 'connection failed';
}

/** Reset reason (+ transport failure, + whether retries ran out) → class. */
function classifyReset(reason: string, transportFailure: string, retriesExhausted: boolean): EnvoyReplyClass | undefined {
  const base = RESET_REASON_KINDS[reason];
  if (base === undefined) return undefined;
  if (base.kind !== 'upstream_connect_failed') return base;
  const detail = connectFailureDetail(reason, transportFailure);
  if (retriesExhausted) return { kind: 'all_replicas_failed', detail: `every attempted replica failed to connect (last: ${detail})` };
  return { kind: 'upstream_connect_failed', detail };
}

function extProcDetail(rest: string): string {
  if (rest.includes('timeout')) return 'llm-extproc did not answer within the message timeout';
  const grpc = /grpc_error_(\d+)/.exec(rest)?.[1];
  if (grpc === '14') return 'llm-extproc unreachable (gRPC UNAVAILABLE)';
  if (grpc === '4') return 'llm-extproc call timed out (gRPC DEADLINE_EXCEEDED)';
  if (grpc !== undefined) return `llm-extproc call failed (gRPC status ${grpc})`;
  return 'llm-extproc failed the request';
}

function classifyByDetails(details: string, flags: number): EnvoyReplyClass | undefined {
  const d = normalize(details);
  const exact = CODE_DETAIL_KINDS[d];
  if (exact !== undefined) return exact;
  if (d.startsWith(EXT_PROC_ERROR_PREFIX)) {
    return { kind: 'gateway_unavailable', detail: extProcDetail(d.slice(EXT_PROC_ERROR_PREFIX.length)) };
  }
  const m = /^([a-z0-9_]+)\{(.*)\}$/s.exec(d);
  if (m === null) return undefined;
  const [, base = '', inner = ''] = m;
  if (base === LATE_UPSTREAM_RESET) return { kind: 'stream_broken', detail: 'the model server reset the stream mid-response' };
  if (base !== EARLY_UPSTREAM_RESET) return undefined;
  // `{reason|transport failure[|remote_address:...]}`; some versions separate with `,`.
  const sep = inner.search(/[|,]/);
  const reason = sep === -1 ? inner : inner.slice(0, sep);
  const transport = sep === -1 ? '' : inner.slice(sep + 1);
  return classifyReset(reason, transport, hasResponseFlag(flags, 'URX'));
}

function classifyByFlags(flags: number, status: number): EnvoyReplyClass | undefined {
  for (const rule of FLAG_RULES) {
    if (rule.only503 === true && status !== 503) continue;
    if (rule.flags.every((name) => hasResponseFlag(flags, name))) return { kind: rule.kind, detail: rule.detail };
  }
  return undefined;
}

const RESET_TEXT =
  /^upstream connect error or disconnect\/reset before headers\. (retried and the latest )?reset reason: ([^,]+?)(?:, transport failure reason: (.*))?$/s;

function classifyByText(text: string, status: number): EnvoyReplyClass | undefined {
  const t = text.trim();
  // Envoy's buffer-limit reply (a BUFFERED body over the gateway's limit), the one 4xx it makes
  // on its own; behind gateways without attributes (Envoy AI Gateway buffered) only its text tells.
  if (status === 413 && t === 'Payload Too Large')
    return { kind: 'body_too_large', detail: "the request body exceeds the gateway's buffer limit" };
  // Envoy's other local replies are all 5xx; a 2xx/4xx body with these words is somebody's content.
  if (status < 500) return undefined;
  const reset = RESET_TEXT.exec(t);
  if (reset !== null) {
    const [, retried, reason = '', transport = ''] = reset;
    return classifyReset(normalize(reason), normalize(transport), retried !== undefined);
  }
  switch (t.toLowerCase()) {
    case 'no healthy upstream':
      return CODE_DETAIL_KINDS['no_healthy_upstream'];
    case 'upstream request timeout':
      return { kind: 'upstream_timeout', detail: 'no response within the timeout' };
    case 'upstream max stream duration reached':
      return CODE_DETAIL_KINDS['upstream_max_stream_duration_reached'];
    case 'stream timeout':
      return CODE_DETAIL_KINDS['stream_idle_timeout'];
    case 'maintenance mode':
      return CODE_DETAIL_KINDS['maintenance_mode'];
    default:
      return undefined;
  }
}

/** True when the facts show the response came from the upstream (not an Envoy local reply). */
export function isViaUpstream(facts: EnvoyReplyFacts): boolean {
  return facts.codeDetails !== undefined && normalize(facts.codeDetails) === VIA_UPSTREAM;
}

/**
 * True when Envoy's attributes say the response was generated by Envoy itself, whether or not
 * we classify it. Such a response is never "the model server's error", even when unclassified.
 */
export function isEnvoyLocalReply(facts: EnvoyReplyFacts): boolean {
  return facts.codeDetails !== undefined && facts.codeDetails.trim() !== '' && !isViaUpstream(facts);
}

/**
 * The kind of an Envoy local reply, or undefined when the response came from the upstream
 * (`via_upstream`, or no evidence of a local reply) — and also for local replies we do not
 * recognise (other filters' deliberate 401/403/429...), which must keep their own status and body:
 * use `isEnvoyLocalReply` to tell those apart from upstream responses.
 */
export function classifyEnvoyReply(facts: EnvoyReplyFacts): EnvoyReplyClass | undefined {
  if (isViaUpstream(facts)) return undefined;
  const flags = facts.flags !== undefined && Number.isFinite(facts.flags) ? facts.flags : 0;
  if (facts.codeDetails !== undefined && facts.codeDetails.trim() !== '') {
    const byDetails = classifyByDetails(facts.codeDetails, flags);
    if (byDetails !== undefined) return byDetails;
  }
  if (flags !== 0) {
    const byFlags = classifyByFlags(flags, facts.status);
    if (byFlags !== undefined) return byFlags;
  }
  if (facts.bodyText !== undefined && facts.bodyText !== '') return classifyByText(facts.bodyText, facts.status);
  return undefined;
}

/** `UF+URX`-style label of a rule, for docs. */
export function flagRuleLabel(rule: FlagRule): string {
  return rule.flags.join('+') + (rule.only503 === true ? ' (with status 503)' : '');
}
