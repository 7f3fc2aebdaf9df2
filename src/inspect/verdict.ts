// The outcome of inspecting a complete response body. Pure data: the processor decides what to
// send (an appended SSE event, a replacement response) and what to record.

export type BodyFailureKind = 'stream_incomplete' | 'upstream_error_event' | 'truncated_response';

export type BodyVerdict =
  | { ok: true }
  | {
      ok: false;
      kind: BodyFailureKind;
      /** Short phrase for messages and logs, e.g. "body ended after 812 bytes inside a JSON object". */
      detail: string;
    };

export const OK_VERDICT: BodyVerdict = Object.freeze({ ok: true as const });
