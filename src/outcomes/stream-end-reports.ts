// Envoy's word on how an HTTP stream ended (its access-log entry, src/extproc/access-log-service.ts),
// kept by request id until the stream's processor asks for it: an entry can arrive before or after
// our ext_proc stream ends. And what such an entry means for a stream that broke half-way.

import type { ErrorKind } from '../errors/catalog.js';
import { hasResponseFlag } from '../errors/envoy-response-flags.js';
import type { ResponseFlagName } from '../errors/envoy-response-flags.js';
import { localReplyKind } from '../errors/local-reply-rules.js';

/** One access-log entry's facts (the shape access-log-service.ts decodes). */
export interface EnvoyStreamEnd {
  readonly requestId: string;
  /** The status the client was answered. */
  readonly status: number | undefined;
  /** Response flags as Envoy's legacy bitmask (errors/envoy-response-flags.ts). */
  readonly flags: number;
  readonly codeDetails: string;
}

/** Who ended a stream that broke half-way, by Envoy's entry. */
export type BreakCause =
  /** The client (or the network on its side) went: DC or DR, and nothing on the upstream side. */
  | { readonly by: 'client' }
  /** The upstream side: `result` is the code the client got (Envoy's own reply's, or the cut stream's). */
  | { readonly by: 'upstream'; readonly result: ErrorKind };

/** Flags that put the end on the model server's side (or on Envoy's timers), whatever the client did. */
const UPSTREAM_SIDE: readonly ResponseFlagName[] = ['UR', 'UC', 'LR', 'UPE', 'UT', 'SI', 'UMSDR', 'DT', 'OM', 'UO'];
const CLIENT_SIDE: readonly ResponseFlagName[] = ['DC', 'DR'];

/**
 * What Envoy's entry says of a broken stream whose upstream answered `upstreamStatus`. A status other
 * than the upstream's means Envoy replaced the response with its own reply (it still held the headers
 * when the upstream broke off): the client got that reply's code (local-reply-rules.ts). Otherwise
 * the client got the headers and then a reset: `stream_broken`.
 */
export function breakCause(end: EnvoyStreamEnd, upstreamStatus: number | undefined): BreakCause {
  const upstreamSide = UPSTREAM_SIDE.some((flag) => hasResponseFlag(end.flags, flag));
  if (!upstreamSide && CLIENT_SIDE.some((flag) => hasResponseFlag(end.flags, flag))) return { by: 'client' };
  const replaced = end.status !== undefined && upstreamStatus !== undefined && end.status !== upstreamStatus;
  return { by: 'upstream', result: replaced ? localReplyKind(end.flags) : 'stream_broken' };
}

/** How long an entry waits for its stream, and how many wait at most (the oldest go first). */
const KEEP_MS = 10_000;
const MAX_KEPT = 10_000;

export class StreamEndReports {
  private readonly kept = new Map<string, { readonly end: EnvoyStreamEnd; readonly at: number }>();
  private readonly waiting = new Map<string, (end: EnvoyStreamEnd | undefined) => void>();
  private openStreams = 0;

  /**
   * `fromPeers`: peers forward us the entries of our streams (listen.peerAddress), so an entry can
   * come while no Envoy streams its access log to this replica itself.
   */
  constructor(
    private readonly now: () => number = () => performance.now(),
    private readonly fromPeers = false,
  ) {}

  /** Whether an entry can come (some Envoy streams its access log to us, or peers forward them): else nobody should wait. */
  get listening(): boolean {
    return this.fromPeers || this.openStreams > 0;
  }

  streams(open: number): void {
    this.openStreams = open;
  }

  report(end: EnvoyStreamEnd): void {
    if (end.requestId === '') return;
    const waiter = this.waiting.get(end.requestId);
    if (waiter !== undefined) {
      this.waiting.delete(end.requestId);
      waiter(end);
      return;
    }
    const now = this.now();
    this.kept.set(end.requestId, { end, at: now });
    // Entries of streams that never broke for us (a flag on a request we answered ourselves) age out.
    for (const [id, { at }] of this.kept) {
      if (this.kept.size <= MAX_KEPT && now - at < KEEP_MS) break;
      this.kept.delete(id);
    }
  }

  /** The entry of `requestId`, when it arrives within `timeoutMs`; else undefined. */
  waitFor(requestId: string, timeoutMs: number): Promise<EnvoyStreamEnd | undefined> {
    const kept = this.kept.get(requestId);
    if (kept !== undefined) {
      this.kept.delete(requestId);
      return Promise.resolve(kept.end);
    }
    return new Promise((resolve) => {
      const timer = setTimeout(() => {
        this.waiting.delete(requestId);
        resolve(undefined);
      }, timeoutMs);
      this.waiting.set(requestId, (end) => {
        clearTimeout(timer);
        resolve(end);
      });
    });
  }
}
