// A response stream that broke half-way is a failure of its replica only if the replica died. Envoy
// ends the ext_proc stream the same way when the upstream resets and when the client leaves, so the
// break is judged by the replica check (endpoints/broken-stream-check.ts) before anyone hears of it:
// this sink holds a broken stream's attempt, result and end until the verdict, then hands them on —
// unchanged (`stream_broken`, a failed attempt) when the replica is dead or out of service, and as
// the cancellation `cancelled_mid_stream` with no attempt at all when it passed the check. Every
// other outcome passes straight through, so the common path pays nothing.

import type { BreakVerdict } from '../endpoints/replica-probe.js';
import type { OutcomeSink, RequestOutcome, RequestRecord } from '../request/outcome-sink.js';
import type { Attempt } from '../request/stream-state.js';

/** Judges one break: resolves with the check's verdict, never rejects. */
export type BreakJudge = (address: string) => Promise<BreakVerdict>;

/** A broken stream's outcomes, held while its replica is checked. */
interface Held {
  readonly attempts: Attempt[];
  outcome?: RequestOutcome;
  /** The stream's end arrived while held: the model it gave back, if any. */
  closed?: { readonly releasedModel: string | undefined };
  judged: boolean;
}

/** The attempt reason the state machine gives a stream that broke (attribution.ts). */
const BROKEN = 'stream_broken';

export function judgedBreaks(inner: OutcomeSink, judge: BreakJudge): OutcomeSink {
  // Per stream, keyed by its record: a stream that never breaks never gets an entry.
  const held = new WeakMap<RequestRecord, Held>();
  const holding = (request: RequestRecord): Held => {
    let entry = held.get(request);
    if (entry === undefined) {
      entry = { attempts: [], judged: false };
      held.set(request, entry);
    }
    return entry;
  };
  const handOn = (request: RequestRecord, entry: Held, verdict: BreakVerdict): void => {
    entry.judged = true;
    const outcome = entry.outcome;
    if (outcome !== undefined) {
      if (verdict === 'replica_alive') {
        // The replica served until the stream ended: neither a failure nor a success of it, and no
        // answer whose figures (latency) could be trusted.
        inner.finished(request, { ...outcome, result: 'cancelled_mid_stream', verdict: undefined, brokenMidStream: undefined });
      } else {
        for (const attempt of entry.attempts) inner.attempt(request, attempt);
        inner.finished(request, outcome);
      }
    }
    if (entry.closed !== undefined) inner.closed(request, entry.closed.releasedModel);
    held.delete(request);
  };
  return {
    ...inner,
    attempt: (request, attempt) => {
      if (attempt.reason === BROKEN) holding(request).attempts.push(attempt);
      else inner.attempt(request, attempt);
    },
    finished: (request, outcome) => {
      const endpoint = outcome.brokenMidStream?.endpoint;
      if (endpoint === undefined) {
        // Not a break, or one whose replica is unknown (nothing to check): as it is.
        const entry = held.get(request);
        if (entry !== undefined) handOn(request, { ...entry, outcome }, 'not_checked');
        else inner.finished(request, outcome);
        return;
      }
      const entry = holding(request);
      entry.outcome = outcome;
      void judge(endpoint.address).then((verdict) => handOn(request, entry, verdict));
    },
    closed: (request, releasedModel) => {
      const entry = held.get(request);
      if (entry === undefined || entry.judged) inner.closed(request, releasedModel);
      else entry.closed = { releasedModel };
    },
  };
}
