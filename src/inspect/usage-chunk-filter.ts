// Removes the usage-only chunk from an SSE stream whose usage report we asked for ourselves
// (request/usage-injection.ts), so the client receives exactly the stream it asked for.
//
// Works on bytes, chunk by chunk as Envoy streams them: each chunk is passed on up to the end of
// its last complete event, and the unfinished event after it (if any) is held back and sent in
// front of the next chunk — a client cannot act on half an event anyway, and the bytes the
// client receives are the stream's bytes, in order, less one event. A complete event is taken out
// only when its data is a chunk with `choices: []` and a usage object; every other byte passes
// untouched. Only streams we changed the request of go through here: for them the filter costs a
// search for the event boundary and for `"choices":[]` per chunk, and a copy only for a chunk
// that holds back bytes or carries the usage chunk.

import { isUsageOnly } from './sse-inspector.js';

const BLANK_LINES = ['\n\n', '\r\n\r\n', '\r\r'] as const;
/** How the usage-only chunk announces itself in compact JSON (vLLM, OpenAI, SGLang, TGI). */
const EMPTY_CHOICES = '"choices":[]';

/** End (exclusive) of the last complete event in `bytes[from..]`, or `from` when there is none. */
function lastEventEnd(bytes: Buffer, from: number): number {
  let end = from;
  for (const blank of BLANK_LINES) {
    const at = bytes.lastIndexOf(blank);
    if (at >= from && at + blank.length > end) end = at + blank.length;
  }
  return end;
}

/** Start of the event that contains `at`: just after the blank line before it, or 0. */
function eventStart(bytes: Buffer, at: number): number {
  let start = 0;
  for (const blank of BLANK_LINES) {
    const found = at === 0 ? -1 : bytes.lastIndexOf(blank, at - 1);
    if (found >= 0 && found + blank.length > start) start = found + blank.length;
  }
  return start;
}

/** End (exclusive) of the event that contains `at`, its blank line included; `bytes.length` if unterminated. */
function eventEnd(bytes: Buffer, at: number): number {
  let end = -1;
  for (const blank of BLANK_LINES) {
    const found = bytes.indexOf(blank, at);
    if (found >= 0 && (end < 0 || found + blank.length < end)) end = found + blank.length;
  }
  return end < 0 ? bytes.length : end;
}

/** The data of one SSE event (its `data:` lines joined), or undefined when it is a named event. */
function eventData(event: string): string | undefined {
  const lines: string[] = [];
  for (const line of event.split(/\r\n|\r|\n/)) {
    if (line.startsWith('event:')) {
      const name = line.slice(6).trim();
      if (name !== '' && name !== 'message') return undefined;
    } else if (line.startsWith('data:')) lines.push(line.slice(line.startsWith('data: ') ? 6 : 5));
  }
  return lines.join('\n');
}

function isUsageOnlyEvent(event: string): boolean {
  const data = eventData(event);
  if (data === undefined) return false;
  try {
    const parsed: unknown = JSON.parse(data);
    return typeof parsed === 'object' && parsed !== null && !Array.isArray(parsed) && isUsageOnly(parsed as Record<string, unknown>);
  } catch {
    return false;
  }
}

/** `bytes` without its complete usage-only events (the same Buffer when it has none). */
function withoutUsageOnly(bytes: Buffer): Buffer {
  let out = bytes;
  let from = 0;
  for (;;) {
    const at = out.indexOf(EMPTY_CHOICES, from);
    if (at < 0) return out;
    const start = eventStart(out, at);
    const end = eventEnd(out, at);
    if (isUsageOnlyEvent(out.toString('utf8', start, end))) {
      out = Buffer.concat([out.subarray(0, start), out.subarray(end)]);
      from = start;
    } else from = end;
  }
}

export class UsageChunkFilter {
  #held: Buffer | undefined;
  #removed = 0;

  /** The bytes to send on in place of `chunk`; at `end`, everything held goes out too. */
  push(chunk: Buffer, end: boolean): Buffer {
    const bytes = this.#held === undefined ? chunk : Buffer.concat([this.#held, chunk]);
    this.#held = undefined;
    const complete = end ? bytes.length : lastEventEnd(bytes, 0);
    if (complete < bytes.length) this.#held = Buffer.from(bytes.subarray(complete));
    const ready = complete === bytes.length ? bytes : bytes.subarray(0, complete);
    const filtered = ready.indexOf(EMPTY_CHOICES) < 0 ? ready : withoutUsageOnly(ready);
    this.#removed += ready.length - filtered.length;
    return filtered;
  }

  /** Bytes held back, waiting for the rest of their event. */
  get holding(): number {
    return this.#held?.length ?? 0;
  }

  /** Bytes taken out (the usage-only events) so far. */
  get removedBytes(): number {
    return this.#removed;
  }
}
