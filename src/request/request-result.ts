// The `result` of one request: the value of the `result` label on llm_extproc_requests_total and
// of the `result` field in our logs. A closed set, so dashboards and alerts can rely on it.

import type { CancellationKind, ErrorKind } from '../errors/catalog.js';

export type RequestResult =
  /** The whole answer was seen and was good. */
  | 'ok'
  /** A catalog error we answered with (or appended to a stream). */
  | ErrorKind
  /** The model server's own structured (JSON) error, passed through untouched. */
  | `upstream_${number}`
  /** Another Envoy filter answered (401, 403, 429…); its answer is the message. */
  | `local_reply_${number}`
  /** The answer passed through without inspection and its end could not be judged. */
  | 'unverified'
  /** We let go of the stream at shutdown; Envoy finished the answer without us. */
  | 'released_at_shutdown'
  /** The request ended early and nothing blames a model server or us (catalog.ts, CANCELLATIONS). */
  | CancellationKind
  /** Envoy sent the request upstream without asking us where (the body never reached us). */
  | 'not_routed';

export function upstreamStatusResult(status: number): RequestResult {
  return `upstream_${status}`;
}

export function localReplyResult(status: number): RequestResult {
  return `local_reply_${status}`;
}
