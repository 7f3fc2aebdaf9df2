// A response stream that broke half-way is a failure only if the model server's side ended it.
// Envoy ends the ext_proc stream the same way when the upstream resets and when the client leaves,
// so this sink holds a broken stream's attempts, result and end until Envoy's access-log entry of
// that stream says who ended it (stream-end-reports.ts), then hands them on:
//   - the client left (DC/DR): the cancellation `cancelled_mid_stream`, no attempt, no figures, no
//     break (so no replica check);
//   - the upstream side: a failure whose result is the code the client got (Envoy's own reply's
//     when it still held the headers, else `stream_broken`), with the replica's failed attempt;
//   - no entry in time (or no Envoy streams its access log to us): unchanged, `stream_broken`, as
//     without this signal. Every break counts under the signal that judged it.
// A replica that died is still checked and taken out of service by the health sink, as before.
// Every other outcome passes straight through, so the common path pays nothing.

import type { OutcomeSink, RequestOutcome, RequestRecord, StreamClosed } from '../request/outcome-sink.js';
import type { Attempt } from '../request/stream-state.js';
import { breakCause } from './stream-end-reports.js';
import type { StreamEndReports } from './stream-end-reports.js';

/** Which signal judged a broken stream: the label of llm_extproc_midstream_break_signals_total. */
export type BreakSignal = 'access_log_client' | 'access_log_upstream' | 'none';

export interface BreakJudging {
  readonly reports: StreamEndReports;
  /** How long a broken stream waits for its entry (Envoy sends it when the HTTP stream ends). */
  readonly waitMs: number;
  readonly judged: (signal: BreakSignal) => void;
}

/** A broken stream's outcomes, held while its entry is awaited. */
interface Held {
  readonly attempts: Attempt[];
  /** The stream's end arrived while held: the model it gave back, if any. */
  closed?: StreamClosed;
  judged: boolean;
}

/** The attempt reason the state machine gives a stream that broke (attribution.ts). */
const BROKEN = 'stream_broken';

export function judgedBreaks(inner: OutcomeSink, { reports, waitMs, judged }: BreakJudging): OutcomeSink {
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
  const handOn = (request: RequestRecord, entry: Held, outcome: RequestOutcome, cancelled: boolean): void => {
    entry.judged = true;
    if (cancelled) {
      // The replica served until the client went: neither its failure nor its success, and no
      // whole answer whose figures (latency) could be trusted.
      inner.finished(request, {
        ...outcome,
        result: 'cancelled_mid_stream',
        verdict: undefined,
        brokenMidStream: undefined,
        figures: undefined,
      });
    } else {
      for (const attempt of entry.attempts) inner.attempt(request, attempt);
      inner.finished(request, outcome);
    }
    if (entry.closed !== undefined) inner.closed(request, entry.closed);
    held.delete(request);
  };
  return {
    ...inner,
    attempt: (request, attempt) => {
      if (attempt.reason === BROKEN) holding(request).attempts.push(attempt);
      else inner.attempt(request, attempt);
    },
    finished: (request, outcome) => {
      const entry = held.get(request) ?? (outcome.brokenMidStream === undefined ? undefined : holding(request));
      if (entry === undefined) {
        inner.finished(request, outcome);
        return;
      }
      if (outcome.brokenMidStream === undefined || !reports.listening) {
        if (outcome.brokenMidStream !== undefined) judged('none');
        handOn(request, entry, outcome, false);
        return;
      }
      void reports.waitFor(outcome.requestId, waitMs).then((end) => {
        if (end === undefined) {
          judged('none');
          handOn(request, entry, outcome, false);
          return;
        }
        const cause = breakCause(end, outcome.status);
        judged(cause.by === 'client' ? 'access_log_client' : 'access_log_upstream');
        if (cause.by === 'client') handOn(request, entry, outcome, true);
        else handOn(request, entry, { ...outcome, result: cause.result, status: end.status ?? outcome.status }, false);
      });
    },
    closed: (request, closed) => {
      const entry = held.get(request);
      if (entry === undefined || entry.judged) inner.closed(request, closed);
      else entry.closed = closed;
    },
  };
}
