// Removes the usage-only chunk from an SSE stream whose usage report we asked for ourselves
// (request/usage-injection.ts), so the client receives exactly the stream it asked for.
//
// Works on bytes, chunk by chunk as Envoy streams them: each chunk is passed on up to the end of
// its last complete event, and the unfinished event after it (if any) is held back and sent in
// front of the next chunk — a client cannot act on half an event anyway, and the bytes the
// client receives are the stream's bytes, in order, less one event. A complete event is taken out
// only when its data is a chunk with `choices: []` and a usage object; every other byte passes
// untouched, with one exception. vLLM puts `system_fingerprint` on a stream's last chunk: with
// usage asked for that is the usage chunk, without it the chunk that carries the finish_reason.
// So an event with a finish_reason is held until the next event shows whether the usage chunk
// follows it; if it does and carries a fingerprint the finish chunk lacks, the fingerprint is
// written at the end of the finish chunk's object, where vLLM writes it when usage is not asked
// for (measured against vLLM 0.32: test/e2e/real-vllm.test.ts). Only the last token waits for
// that, and the usage chunk comes right after it. Only streams we changed the request of go
// through here: for them the filter costs a search for the event boundary, for `"choices":[]` and
// for a finish_reason in the last event per chunk, and a copy only for a chunk that holds back
// bytes or carries the usage chunk.

import { isUsageOnly } from './sse-inspector.js';

const BLANK_LINES = ['\n\n', '\r\n\r\n', '\r\r'] as const;
/** How the usage-only chunk announces itself in compact JSON (vLLM, OpenAI, SGLang, TGI). */
const EMPTY_CHOICES = '"choices":[]';
/** A choice that finished (compact JSON: a string value; `null` while it goes on). */
const FINISHED = '"finish_reason":"';
const FINGERPRINT = '"system_fingerprint"';
const LF = 0x0a;
const CR = 0x0d;

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

/** The usage-only chunk's JSON when `event` is one, else undefined. */
function usageOnlyChunk(event: string): Record<string, unknown> | undefined {
  const data = eventData(event);
  if (data === undefined) return undefined;
  try {
    const parsed: unknown = JSON.parse(data);
    if (typeof parsed !== 'object' || parsed === null || Array.isArray(parsed)) return undefined;
    return isUsageOnly(parsed as Record<string, unknown>) ? (parsed as Record<string, unknown>) : undefined;
  } catch {
    return undefined;
  }
}

interface Filtered {
  readonly bytes: Buffer;
  /** The `system_fingerprint` of a usage-only event that was the first event of the input. */
  readonly leadingFingerprint: string | undefined;
}

/** Start of the last event that ends at `end` (an event boundary) in `bytes`, or -1. */
function lastEventStart(bytes: Buffer, end: number): number {
  let last = end - 1;
  while (last >= 0 && (bytes[last] === LF || bytes[last] === CR)) last--;
  return last < 0 ? -1 : eventStart(bytes, last);
}

/** True when the event is a data chunk with a finish_reason and no fingerprint of its own. */
function lacksFingerprint(event: Buffer): boolean {
  return event.indexOf(FINISHED) >= 0 && event.indexOf(EMPTY_CHOICES) < 0 && event.indexOf(FINGERPRINT) < 0;
}

/**
 * `bytes` without its complete usage-only events (the same Buffer when it has none). A usage
 * chunk's fingerprint goes to the finish chunk right before it, or, when the usage chunk is the
 * first event here, is returned for the finish chunk held from the last push.
 */
function withoutUsageOnly(bytes: Buffer): Filtered {
  let out = bytes;
  let from = 0;
  let leadingFingerprint: string | undefined;
  for (;;) {
    const at = out.indexOf(EMPTY_CHOICES, from);
    if (at < 0) return { bytes: out, leadingFingerprint };
    const start = eventStart(out, at);
    const end = eventEnd(out, at);
    const usage = usageOnlyChunk(out.toString('utf8', start, end));
    if (usage === undefined) {
      from = end;
      continue;
    }
    const fingerprint = usage['system_fingerprint'];
    const before = start === 0 ? -1 : lastEventStart(out, start);
    if (typeof fingerprint === 'string' && start === 0) leadingFingerprint = fingerprint;
    if (typeof fingerprint === 'string' && before >= 0 && lacksFingerprint(out.subarray(before, start))) {
      const finish = withFingerprint(out.subarray(before, start), fingerprint);
      out = Buffer.concat([out.subarray(0, before), finish, out.subarray(end)]);
      from = before + finish.length;
    } else {
      out = Buffer.concat([out.subarray(0, start), out.subarray(end)]);
      from = start;
    }
  }
}

/** Start of the last complete event in `bytes` when it is a finish chunk without a fingerprint, else -1. */
function finishEventStart(bytes: Buffer): number {
  const start = lastEventStart(bytes, bytes.length);
  return start >= 0 && lacksFingerprint(bytes.subarray(start)) ? start : -1;
}

/**
 * The finish event with `"system_fingerprint":<fingerprint>` added as the last member of its
 * object; unchanged when it has one or its data is not one JSON object on one line.
 */
function withFingerprint(event: Buffer, fingerprint: string): Buffer {
  const text = event.toString('utf8');
  const match = /^(data: ?\{.*)\}(\r\n|\r|\n)/m.exec(text);
  if (match === null) return event;
  const at = match.index + match[1].length;
  return Buffer.from(`${text.slice(0, at)},${FINGERPRINT}:${JSON.stringify(fingerprint)}${text.slice(at)}`);
}

export class UsageChunkFilter {
  /** The unfinished event at the end of the last chunk. */
  #partial: Buffer | undefined;
  /** A complete event with a finish_reason, waiting to see whether the usage chunk follows. */
  #finish: Buffer | undefined;
  #removed = 0;

  /** The bytes to send on in place of `chunk`; at `end`, everything held goes out too. */
  push(chunk: Buffer, end: boolean): Buffer {
    const bytes = this.#partial === undefined ? chunk : Buffer.concat([this.#partial, chunk]);
    this.#partial = undefined;
    const complete = end ? bytes.length : lastEventEnd(bytes, 0);
    if (complete < bytes.length) this.#partial = Buffer.from(bytes.subarray(complete));
    const ready = complete === bytes.length ? bytes : bytes.subarray(0, complete);
    if (ready.length === 0 && !end) return ready;
    const filtered = ready.indexOf(EMPTY_CHOICES) < 0 ? { bytes: ready, leadingFingerprint: undefined } : withoutUsageOnly(ready);
    this.#removed += ready.length - filtered.bytes.length;
    let out = filtered.bytes;
    const held = this.#finish;
    this.#finish = undefined;
    if (held !== undefined) {
      out = Buffer.concat([filtered.leadingFingerprint === undefined ? held : withFingerprint(held, filtered.leadingFingerprint), out]);
    }
    if (end) return out;
    const finishAt = finishEventStart(out);
    if (finishAt < 0) return out;
    this.#finish = Buffer.from(out.subarray(finishAt));
    return out.subarray(0, finishAt);
  }

  /** Bytes held back, waiting for the rest of their event or for the event after them. */
  get holding(): number {
    return (this.#partial?.length ?? 0) + (this.#finish?.length ?? 0);
  }

  /** Bytes taken out (the usage-only events) so far. */
  get removedBytes(): number {
    return this.#removed;
  }
}
