// The outcome of inspecting a complete response body. Pure data: the processor decides what to
// send (an appended SSE event, a replacement response) and what to record.

/** What inspecting a complete body can find wrong with it (each one a catalog error kind). */
export const BODY_FAILURE_KINDS = ['stream_incomplete', 'upstream_error_event', 'truncated_response'] as const;

export type BodyFailureKind = (typeof BODY_FAILURE_KINDS)[number];

export type BodyVerdict =
  | { ok: true }
  | {
      ok: false;
      kind: BodyFailureKind;
      /** Short phrase for messages and logs, e.g. "body ended after 812 bytes inside a JSON object". */
      detail: string;
    };

export const OK_VERDICT: BodyVerdict = Object.freeze({ ok: true as const });
