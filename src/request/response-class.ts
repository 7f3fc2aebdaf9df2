// Who answered, and was it good? Decided once per response, here, from what its headers and
// Envoy's attributes say (response-facts.ts), with Envoy's own replies told apart by the evidence
// tables of errors/envoy-reply.ts. Pure. The response phase is a switch over the class; which of
// our picks is credited or blamed for it is attribution.ts's.

import type { AttemptFailure } from '../endpoints/passive-health.js';
import { classifyEnvoyReply, isEnvoyLocalReply } from '../errors/envoy-reply.js';
import type { EnvoyReplyClass } from '../errors/envoy-reply.js';
import { isJsonContentType, isSseContentType } from '../inspect/content-type.js';
import { localReplyResult, upstreamStatusResult } from './request-result.js';
import type { RequestResult } from './request-result.js';
import { envoyReplyFacts } from './response-facts.js';
import type { ResponseFacts } from './response-facts.js';

export type ResponseClass =
  /** Envoy's own failure (it could not connect, the upstream reset, a timeout…): we answer with its catalog error. */
  | { readonly kind: 'envoy-failure'; readonly failure: EnvoyReplyClass }
  /** Another filter's deliberate answer (401, 403, 429…): its status and body are the message; no replica is judged. */
  | { readonly kind: 'other-filter'; readonly result: RequestResult }
  /**
   * A 5xx (or a 413) with no attribute to tell who wrote it, and not JSON: Envoy's own replies look
   * like this (short plain text), so its body decides (classifyErrorText).
   */
  | { readonly kind: 'unexplained' }
  /** The model server's answer without a body: judged now, and passed on. */
  | { readonly kind: 'headers-only'; readonly result: RequestResult; readonly failure: AttemptFailure | undefined }
  /** The model server's own structured (JSON) error: passed on untouched. A 4xx says the request was wrong, not the replica. */
  | { readonly kind: 'upstream-error'; readonly result: RequestResult; readonly failure: AttemptFailure | undefined }
  /** The model server answered an error in something other than JSON: replaced with our upstream_error JSON. */
  | {
      readonly kind: 'upstream-error-replaced';
      readonly failure: AttemptFailure | undefined;
      /** The status to answer with; undefined = upstream_error's own (502). */
      readonly status: number | undefined;
      readonly message: string;
      readonly upstreamStatus: number;
    }
  /**
   * The model server's answer, with a body to watch and judge at its end: an SSE stream, a JSON
   * document small enough to hold whole, or anything else (compressed, other media types, JSON
   * too large to hold), watched for its end only.
   */
  | { readonly kind: 'answer'; readonly body: 'sse' | 'json' | 'opaque' };

// The classes of every good answer, built once: classifying one allocates nothing.
const UNEXPLAINED: ResponseClass = { kind: 'unexplained' };
const SSE: ResponseClass = { kind: 'answer', body: 'sse' };
const JSON_ANSWER: ResponseClass = { kind: 'answer', body: 'json' };
const OPAQUE: ResponseClass = { kind: 'answer', body: 'opaque' };
const NO_BODY: ResponseClass = { kind: 'headers-only', result: 'ok', failure: undefined };

export function classifyResponse(facts: ResponseFacts, maxInspectedBodyBytes: number): ResponseClass {
  const evidence = envoyReplyFacts(facts);
  const local = classifyEnvoyReply(evidence);
  if (local !== undefined) return { kind: 'envoy-failure', failure: local };
  if (isEnvoyLocalReply(evidence)) return { kind: 'other-filter', result: localReplyResult(facts.status) };
  const status = facts.status;
  const json = isJsonContentType(facts.contentType);
  if (facts.codeDetails === undefined && (status >= 500 || status === 413) && !json && !facts.ours) return UNEXPLAINED;
  // A 4xx says the request was wrong, not that the replica is unhealthy.
  const failure: AttemptFailure | undefined = status >= 500 ? 'bad_response' : undefined;
  if (facts.endOfStream) return status < 400 ? NO_BODY : { kind: 'headers-only', result: upstreamStatusResult(status), failure };
  if (status >= 400) {
    if (json) return { kind: 'upstream-error', result: upstreamStatusResult(status), failure };
    return {
      kind: 'upstream-error-replaced',
      failure,
      status: status < 500 ? status : undefined,
      message: `the model server answered ${status} with a non-JSON body (${facts.contentType || 'no content type'})`,
      upstreamStatus: status,
    };
  }
  if (!facts.compressed && isSseContentType(facts.contentType)) return SSE;
  const whole = json && !facts.compressed && !(facts.contentLength !== undefined && facts.contentLength > maxInspectedBodyBytes);
  return whole ? JSON_ANSWER : OPAQUE;
}

/** An unexplained error's body (its first bytes) read: Envoy's own text, or the model server's. */
export function classifyErrorText(
  status: number,
  text: string,
): Extract<ResponseClass, { kind: 'envoy-failure' | 'upstream-error-replaced' }> {
  const local = text === '' ? undefined : classifyEnvoyReply({ status, bodyText: text });
  if (local !== undefined) return { kind: 'envoy-failure', failure: local };
  return {
    kind: 'upstream-error-replaced',
    failure: 'bad_response',
    status: undefined,
    message: `the model server answered ${status} with a non-JSON body`,
    upstreamStatus: status,
  };
}
