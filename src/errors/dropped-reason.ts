// Why a request was dropped, in the words of llm-d's router: the value of its
// `x-llm-d-request-dropped-reason` response header, so clients and dashboards written against llm-d
// can tell a refusal for want of capacity from one for want of any endpoint. Kinds not listed
// carry no such header (they are not drops: the request was wrong, or reached a model server).

import type { ErrorKind } from './catalog.js';

/** The response header llm-d's router sets on a request it refused or evicted. */
export const DROPPED_REASON_HEADER = 'x-llm-d-request-dropped-reason';

export type DroppedReason = 'rejected-no-endpoints' | 'rejected-saturated' | 'rejected-ttl-expired';

export const DROPPED_REASON_BY_KIND: Readonly<Partial<Record<ErrorKind, DroppedReason>>> = {
  // 503: the pool has nothing that could serve (llm-d: no endpoints).
  no_ready_replica: 'rejected-no-endpoints',
  // 429: capacity exists but is contended (llm-d: flow control refused it).
  pool_overloaded: 'rejected-saturated',
  shed: 'rejected-saturated',
  pool_saturated: 'rejected-saturated',
  // 429: it waited its whole TTL in the queue.
  queue_timeout: 'rejected-ttl-expired',
};
