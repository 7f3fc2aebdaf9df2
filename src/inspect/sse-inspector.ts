// Incremental inspection of an OpenAI-style server-sent-event response, chunk by chunk as Envoy
// streams it to us, to answer at the end: did the stream finish properly, and did the model
// server report an error inside it?
//
// - Reassembly: bytes → text with a streaming TextDecoder (a multi-byte character split across
//   chunks is held back until complete; a leading BOM is dropped), text → events with
//   eventsource-parser, which keeps only the unfinished line/event between chunks. So an event
//   split at any byte gives the same result, and no chunk is ever re-scanned.
// - Terminators: `data: [DONE]` (chat/completions, legacy completions) or a terminal Responses
//   API event: `response.completed`, `response.incomplete` (a normal end: max_output_tokens or a
//   content filter, like finish_reason "length" in chat) and `response.failed` (an error event).
// - Error events: `event: error`; a data object with a non-null top-level `error` (OpenAI, newer
//   vLLM); `"object": "error"` (older vLLM); Responses `type: "error"` / `"response.failed"`.
//
// - Figures for metrics, on the same pass: content events (those that carry output: chat and
//   completion chunks, Responses `*.delta` events; not [DONE], errors, lifecycle events or the
//   usage-only chunk) and the token usage of the final chunk or of `response.completed`.
//
// Cost trade-off: JSON-parsing every delta would double the CPU spent per token. A data payload
// is parsed only when a single regex pass finds the string token `"error"` or a terminal
// Responses type in it, and named Responses events (`event: response.output_text.delta`) are
// judged by their name alone. Inside JSON string content a quote is escaped (`\"error\"`), so
// generated text mentioning "error" does not trigger a parse. What we give up: a payload that
// spells the key with unicode escapes (`"\u0065rror"`) would be missed; no server does that.

import { createParser } from 'eventsource-parser';
import type { EventSourceMessage, EventSourceParser, ParseError } from 'eventsource-parser';
import { findUsage, usageOf } from './usage.js';
import type { TokenUsage } from './usage.js';
import { OK_VERDICT } from './verdict.js';
import type { BodyVerdict } from './verdict.js';

export interface SseErrorEvent {
  /** The error message the model server gave (truncated), or a generic phrase if it gave none. */
  readonly message: string;
  readonly code?: string;
  readonly type?: string;
  /** The SSE `event:` name, when the error came as a named event. */
  readonly event?: string;
}

export interface SseInspectorOptions {
  /**
   * Most characters of one unfinished line/event the parser may hold (Responses API
   * `response.completed` carries the whole output, so this is generous). Past it, inspection is
   * abandoned and `finish()` says ok: an unjudged stream must not get a false error appended.
   */
  maxBufferedChars?: number;
}

const DEFAULT_MAX_BUFFERED_CHARS = 4 * 1024 * 1024;

/** Enough tail to decide the SSE prefix (`\r\n\r\n` is the longest ending that matters). */
const TAIL_BYTES = 4;
const MAX_MESSAGE_CHARS = 500;
const GENERIC_MESSAGE = 'The model server sent an error event without a message.';

/**
 * Prefilter: payloads that can be an error, a terminal Responses event or a usage report contain
 * one of these tokens (`"usage":null`, sent in every chunk by some servers, does not match).
 */
const MAY_MATTER = /"(?:error|response\.(?:completed|failed|incomplete))"|"usage":\s*\{/;

/** Where the type name starts in an unnamed Responses event (`{"type":"response.…`). */
const RESPONSES_TYPE_AT = '{"type":"'.length;

type JsonObject = Record<string, unknown>;

function asObject(value: unknown): JsonObject | undefined {
  return typeof value === 'object' && value !== null && !Array.isArray(value) ? (value as JsonObject) : undefined;
}

function parseObject(data: string): JsonObject | undefined {
  try {
    return asObject(JSON.parse(data));
  } catch {
    return undefined;
  }
}

function clip(text: string): string {
  return text.length > MAX_MESSAGE_CHARS ? `${text.slice(0, MAX_MESSAGE_CHARS)}…` : text;
}

function stringish(value: unknown): string | undefined {
  if (typeof value === 'string' && value !== '') return value;
  if (typeof value === 'number') return String(value);
  return undefined;
}

/** Pulls message/code/type out of the shapes servers use for errors. */
function errorInfo(source: JsonObject | undefined, event: string | undefined, fallbackText?: string): SseErrorEvent {
  let e: JsonObject | undefined = source;
  if (source !== undefined) {
    if (source['type'] === 'response.failed') e = asObject(asObject(source['response'])?.['error']);
    else if (typeof source['error'] === 'string') e = { message: source['error'] };
    else if (asObject(source['error']) !== undefined) e = asObject(source['error']);
  }
  const message = stringish(e?.['message']) ?? (fallbackText !== undefined && fallbackText.trim() !== '' ? fallbackText : GENERIC_MESSAGE);
  const info: { message: string; code?: string; type?: string; event?: string } = { message: clip(message) };
  const code = stringish(e?.['code']);
  if (code !== undefined) info.code = code;
  const type = stringish(e?.['type']);
  if (type !== undefined && type !== 'error') info.type = type;
  if (event !== undefined) info.event = event;
  return info;
}

export class SseInspector {
  readonly #decoder = new TextDecoder('utf-8');
  readonly #parser: EventSourceParser;
  #tail: Buffer = Buffer.alloc(0);
  #bytes = 0;
  #events = 0;
  #contentEvents = 0;
  #usage: TokenUsage | undefined;
  #sawTerminator = false;
  #sawResponsesEvent = false;
  #firstError: SseErrorEvent | undefined;
  #abandoned = false;
  #verdict: BodyVerdict | undefined;

  constructor(options?: SseInspectorOptions) {
    this.#parser = createParser({
      onEvent: (event) => this.#onEvent(event),
      onError: (error) => this.#onParseError(error),
      maxBufferSize: options?.maxBufferedChars ?? DEFAULT_MAX_BUFFERED_CHARS,
    });
  }

  feed(chunk: Buffer): void {
    if (this.#verdict !== undefined) throw new Error('SseInspector.feed called after finish');
    if (chunk.length === 0) return;
    this.#bytes += chunk.length;
    this.#keepTail(chunk);
    if (this.#abandoned) return;
    const text = this.#decoder.decode(chunk, { stream: true });
    if (text !== '') this.#parser.feed(text);
  }

  /** Call once the body ended normally (end_of_stream). Idempotent. */
  finish(): BodyVerdict {
    if (this.#verdict !== undefined) return this.#verdict;
    if (!this.#abandoned) {
      const rest = this.#decoder.decode();
      if (rest !== '') this.#parser.feed(rest);
      // Dispatch an event whose closing blank line never came: a complete `data: [DONE]` without
      // it ends the stream just as well for clients (their parsers drop it either way).
      if (!this.#abandoned) this.#parser.feed('\n\n');
    }
    this.#verdict = this.#judge();
    return this.#verdict;
  }

  get firstErrorEvent(): SseErrorEvent | undefined {
    return this.#firstError;
  }

  get sawTerminator(): boolean {
    return this.#sawTerminator;
  }

  /** The last few bytes fed (a copy), for `sseEventPrefixFor`. */
  get lastBytes(): Buffer {
    return this.#tail;
  }

  get bytesSeen(): number {
    return this.#bytes;
  }

  get eventsSeen(): number {
    return this.#events;
  }

  /** Events that carried output so far (what TTFT and inter-token latency are measured on). */
  get contentEvents(): number {
    return this.#contentEvents;
  }

  /** The token usage the stream reported (its last report), if any. */
  get usage(): TokenUsage | undefined {
    return this.#usage;
  }

  /** True when an oversized event made us stop inspecting; the verdict is then ok. */
  get abandoned(): boolean {
    return this.#abandoned;
  }

  #keepTail(chunk: Buffer): void {
    if (chunk.length >= TAIL_BYTES) {
      this.#tail = Buffer.from(chunk.subarray(chunk.length - TAIL_BYTES));
    } else {
      const joined = Buffer.concat([this.#tail, chunk]);
      this.#tail = Buffer.from(joined.subarray(Math.max(0, joined.length - TAIL_BYTES)));
    }
  }

  #judge(): BodyVerdict {
    if (this.#abandoned) return OK_VERDICT;
    if (this.#firstError !== undefined) {
      return { ok: false, kind: 'upstream_error_event', detail: `model server sent an error event: ${this.#firstError.message}` };
    }
    if (!this.#sawTerminator) {
      const missing = this.#sawResponsesEvent ? 'a terminal response event' : 'data: [DONE]';
      const detail =
        this.#events === 0
          ? `stream ended after ${this.#bytes} bytes with no complete event`
          : `stream ended after ${this.#bytes} bytes and ${this.#events} events without ${missing}`;
      return { ok: false, kind: 'stream_incomplete', detail };
    }
    return OK_VERDICT;
  }

  #onParseError(error: ParseError): void {
    // Unknown fields and bad `retry:` values are the upstream's business; only running out of
    // buffer stops us.
    if (error.type === 'max-buffer-size-exceeded') this.#abandoned = true;
  }

  #recordError(info: SseErrorEvent): void {
    this.#firstError ??= info;
  }

  #onEvent({ event, data }: EventSourceMessage): void {
    this.#events += 1;
    if (event === undefined || event === 'message') {
      // `[DONE]` is short; trim only then, so long payloads are not copied.
      if (data.length <= 16 && data.trim() === '[DONE]') {
        this.#sawTerminator = true;
        return;
      }
    } else if (event === 'error') {
      this.#recordError(errorInfo(parseObject(data), event, data));
      return;
    } else if (event.startsWith('response.')) {
      this.#sawResponsesEvent = true;
      if (event === 'response.completed' || event === 'response.incomplete') {
        this.#sawTerminator = true;
        this.#usage = findUsage(data) ?? this.#usage;
      } else if (event === 'response.failed') {
        this.#sawTerminator = true;
        this.#recordError(errorInfo(parseObject(data) ?? { type: 'response.failed' }, event));
      } else if (event.endsWith('.delta')) {
        this.#contentEvents += 1;
      }
      // Other named Responses events are progress: the name says it all.
      return;
    }
    // Unnamed Responses events announce their type first: a delta is content, the rest is not.
    const typed = data.startsWith('{"type":"response.');
    if (typed) this.#sawResponsesEvent = true;
    if (!MAY_MATTER.test(data)) {
      if (!typed || data.endsWith('.delta', data.indexOf('"', RESPONSES_TYPE_AT))) this.#contentEvents += 1;
      return;
    }
    const obj = parseObject(data);
    if (obj === undefined) return;
    const type = obj['type'];
    if (type === 'response.completed' || type === 'response.incomplete') {
      this.#sawResponsesEvent = true;
      this.#sawTerminator = true;
      this.#usage = usageOf(asObject(obj['response'])?.['usage']) ?? this.#usage;
    } else if (type === 'response.failed') {
      this.#sawResponsesEvent = true;
      this.#sawTerminator = true;
      this.#recordError(errorInfo(obj, event));
    } else if (
      type === 'error' ||
      obj['object'] === 'error' ||
      (obj['error'] !== undefined && obj['error'] !== null && obj['error'] !== false)
    ) {
      this.#recordError(errorInfo(obj, event));
    } else {
      const usage = usageOf(obj['usage']);
      if (usage !== undefined) this.#usage = usage;
      // The usage-only chunk (`choices: []`) carries no output; a chunk with both (vLLM's
      // continuous usage stats) does.
      if (!(usage !== undefined && isUsageOnly(obj))) this.#contentEvents += 1;
    }
  }
}

/** A chunk that only reports usage: `choices` is an empty list (chat and completions alike). */
export function isUsageOnly(chunk: Record<string, unknown>): boolean {
  const choices = chunk['choices'];
  return Array.isArray(choices) && choices.length === 0 && asObject(chunk['usage']) !== undefined;
}
