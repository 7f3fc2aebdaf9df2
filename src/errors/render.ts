// The one place that turns a GatewayError into bytes a client sees: a full JSON response, or an
// SSE error event appended to a stream that already started. Everything a client can read comes
// from the catalog entry, the error's message and its details; `cause` is never read here.

import type { ErrorType } from './catalog.js';
import type { GatewayError } from './gateway-error.js';
import { DROPPED_REASON_BY_KIND, DROPPED_REASON_HEADER } from './dropped-reason.js';

export interface RenderedError {
  status: number;
  /** Lower-case header names (HTTP/2 and Envoy header mutations expect them). */
  headers: ReadonlyArray<readonly [name: string, value: string]>;
  body: Buffer;
}

export interface RenderOptions {
  /** Overrides both the error's and the catalog's Retry-After. */
  retryAfterSeconds?: number;
  /** Echoed as `error.request_id` so users can quote it to operators. */
  requestId?: string;
}

/** Header carrying the error code on every rendered error, so operators can grep access logs. */
export const ERROR_CODE_HEADER = 'x-llm-extproc-error';

/** Keys we own inside `error`; details cannot overwrite them. */
const RESERVED_KEYS: ReadonlySet<string> = new Set(['message', 'type', 'code', 'param', 'request_id']);

export interface ErrorBodyFields {
  message: string;
  type: ErrorType;
  code: string;
  param: null;
  request_id?: string;
  [detail: string]: unknown;
}

/** The object under `error`: OpenAI's four fields first, then our details. */
function errorFields(err: GatewayError, requestId?: string): ErrorBodyFields {
  const entry = err.entry;
  const fields: ErrorBodyFields = { message: err.message, type: entry.type, code: entry.code, param: null };
  if (requestId !== undefined && requestId !== '') fields.request_id = requestId;
  if (err.details !== undefined) {
    for (const [key, value] of Object.entries(err.details)) {
      if (!RESERVED_KEYS.has(key) && value !== undefined) fields[key] = value;
    }
  }
  return fields;
}

/**
 * JSON text of `{"error": {...}}`. Details come from callers and may hold values JSON cannot
 * encode (BigInt, cycles): then we drop the details rather than fail to report the error.
 */
function errorJson(err: GatewayError, requestId?: string): string {
  try {
    return JSON.stringify({ error: errorFields(err, requestId) });
  } catch {
    const entry = err.entry;
    const bare: ErrorBodyFields = { message: err.message, type: entry.type, code: entry.code, param: null };
    if (requestId !== undefined && requestId !== '') bare.request_id = requestId;
    return JSON.stringify({ error: bare });
  }
}

/** Effective Retry-After in whole seconds, or undefined when none applies. */
function retryAfterFor(err: GatewayError, opts?: RenderOptions): number | undefined {
  const seconds = opts?.retryAfterSeconds ?? err.retryAfterSeconds ?? err.entry.retryAfterSeconds;
  if (seconds === undefined || !Number.isFinite(seconds)) return undefined;
  // Retry-After is a non-negative integer of seconds; round up so clients never come back early.
  return Math.max(0, Math.ceil(seconds));
}

export function renderError(err: GatewayError, opts?: RenderOptions): RenderedError {
  const entry = err.entry;
  const body = Buffer.from(errorJson(err, opts?.requestId), 'utf8');
  const headers: Array<readonly [string, string]> = [
    ['content-type', 'application/json'],
    ['content-length', String(body.length)],
    ['cache-control', 'no-store'],
    [ERROR_CODE_HEADER, entry.code],
  ];
  const retryAfter = retryAfterFor(err, opts);
  if (retryAfter !== undefined) headers.push(['retry-after', String(retryAfter)]);
  if (err.kind === 'method_not_allowed') headers.push(['allow', 'POST']);
  const dropped = DROPPED_REASON_BY_KIND[err.kind];
  if (dropped !== undefined) headers.push([DROPPED_REASON_HEADER, dropped]);
  return { status: entry.status, headers, body };
}

const LF = 0x0a;
const CR = 0x0d;
const NO_PREFIX = Buffer.alloc(0);
const ONE_LF = Buffer.from('\n');
const TWO_LF = Buffer.from('\n\n');

/**
 * What to write before an appended SSE event so it starts on a fresh line *and* is not merged
 * into an event the upstream left undispatched. `lastBytes` is the tail of what was already sent
 * (4 bytes is enough: the longest tail that matters is `\r\n\r\n`).
 *
 * An SSE event is dispatched by a blank line, i.e. two line breaks in a row, where a line break
 * is CRLF, LF or CR. So: two trailing breaks → nothing needed; one → one more `\n`; none → `\n\n`.
 * A lone trailing CR is special: our `\n` would pair with it into a single CRLF break, so it
 * needs `\n\n`. Nothing sent at all → nothing needed.
 *
 * Limitation: if the upstream stopped in the middle of a `data:` line, the break we add completes
 * that partial event and clients receive it (usually as a JSON parse error) before ours; bytes
 * already sent cannot be taken back.
 */
export function sseEventPrefixFor(lastBytes: Buffer): Buffer {
  if (lastBytes.length === 0) return NO_PREFIX;
  let i = lastBytes.length;
  let breaks = 0;
  while (i > 0 && breaks < 2) {
    const b = lastBytes[i - 1];
    if (b === LF) {
      i -= i >= 2 && lastBytes[i - 2] === CR ? 2 : 1;
    } else if (b === CR) {
      i -= 1;
    } else {
      break;
    }
    breaks += 1;
  }
  if (breaks >= 2) return NO_PREFIX;
  if (breaks === 1) return lastBytes[lastBytes.length - 1] === CR ? TWO_LF : ONE_LF;
  return TWO_LF;
}

/**
 * `data: {"error":{...}}\n\n` — no `event:` line and no `[DONE]` after it: the OpenAI SDKs raise
 * an APIError for a data payload with an `error` key, whereas a named event or a following
 * `[DONE]` would make some clients skip it or end the stream quietly. Pass `lastBytes` (see
 * `sseEventPrefixFor`) to have the event start on a fresh line.
 */
export function renderSseErrorEvent(err: GatewayError, lastBytes?: Buffer, opts?: Pick<RenderOptions, 'requestId'>): Buffer {
  const prefix = lastBytes === undefined ? NO_PREFIX : sseEventPrefixFor(lastBytes);
  // JSON.stringify never emits a raw newline, so the payload is one `data:` line.
  return Buffer.concat([prefix, Buffer.from(`data: ${errorJson(err, opts?.requestId)}\n\n`, 'utf8')]);
}
