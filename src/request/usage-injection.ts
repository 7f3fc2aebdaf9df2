// Asking a model server for the token usage of a stream the client did not ask it for: a pure
// function over the request body's raw bytes and the facts already read from it
// (openai-request.ts). Streams report usage only when the request says
// `stream_options.include_usage: true`; without it a streamed answer's tokens are unknown.
//
// The body is changed by splicing bytes, never by re-serialising: everything the client wrote
// (key order, number spelling, whitespace, unicode escapes) reaches the model server as written,
// plus `"stream_options":{"include_usage":true}` (or `"include_usage":true` inside an existing
// `stream_options`, or `true` in place of an explicit `false`/`null`). When the bytes do not look
// the way the facts say (a key spelled with escapes, say), nothing is changed: the request goes as
// it came and its stream is counted as one without usage.

import {
  BACKSLASH,
  CLOSE_ARRAY,
  CLOSE_OBJECT,
  COLON,
  COMMA,
  OPEN_ARRAY,
  OPEN_OBJECT,
  QUOTE,
  isJsonWhitespace,
} from '../inspect/json-bytes.js';

/** What the parsed request says about streaming and usage (openai-request.ts). */
export interface StreamUsageFacts {
  readonly stream: boolean;
  /** The top-level `stream_options`: absent, an object, `null`, or something else. */
  readonly streamOptions: 'absent' | 'object' | 'null' | 'other';
  /** `stream_options.include_usage` when it is a boolean. */
  readonly includeUsage: boolean | undefined;
}

/** The request paths whose streams carry a usage chunk on request. */
export function canAskForStreamUsage(path: string): boolean {
  return path === '/v1/chat/completions' || path === '/v1/completions';
}

/** True when the request streams and did not ask for usage itself. */
function lacksStreamUsage(facts: StreamUsageFacts): boolean {
  return facts.stream && facts.includeUsage !== true && facts.streamOptions !== 'other';
}

export interface Span {
  readonly start: number;
  readonly end: number;
}

export function skipWhitespace(b: Buffer, i: number, end: number): number {
  while (i < end && isJsonWhitespace(b[i])) i++;
  return i;
}

/** `i` at an opening quote → just past the closing one. */
function skipString(b: Buffer, i: number, end: number): number {
  for (i++; i < end; i++) {
    if (b[i] === BACKSLASH) i++;
    else if (b[i] === QUOTE) return i + 1;
  }
  return end;
}

/** `i` at the start of a value → just past it. */
function skipValue(b: Buffer, i: number, end: number): number {
  const c = b[i];
  if (c === QUOTE) return skipString(b, i, end);
  if (c !== OPEN_OBJECT && c !== OPEN_ARRAY) {
    while (i < end && b[i] !== COMMA && b[i] !== CLOSE_OBJECT && b[i] !== CLOSE_ARRAY && !isJsonWhitespace(b[i])) i++;
    return i;
  }
  let depth = 0;
  for (; i < end; i++) {
    const d = b[i];
    if (d === QUOTE) i = skipString(b, i, end) - 1;
    else if (d === OPEN_OBJECT || d === OPEN_ARRAY) depth++;
    else if ((d === CLOSE_OBJECT || d === CLOSE_ARRAY) && --depth === 0) return i + 1;
  }
  return end;
}

/** The value of member `key` of the object spanning `object` (the last one, as JSON.parse keeps). */
export function memberValue(b: Buffer, object: Span, key: Buffer): Span | undefined {
  let found: Span | undefined;
  let i = skipWhitespace(b, object.start + 1, object.end);
  while (i < object.end && b[i] === QUOTE) {
    const keyEnd = skipString(b, i, object.end);
    const matches = keyEnd - i === key.length && b.compare(key, 0, key.length, i, keyEnd) === 0;
    i = skipWhitespace(b, keyEnd, object.end);
    if (b[i] !== COLON) return undefined;
    const valueStart = skipWhitespace(b, i + 1, object.end);
    const valueEnd = skipValue(b, valueStart, object.end);
    if (matches) found = { start: valueStart, end: valueEnd };
    i = skipWhitespace(b, valueEnd, object.end);
    if (b[i] !== COMMA) break;
    i = skipWhitespace(b, i + 1, object.end);
  }
  return found;
}

/** Inserts `member` as the last member of the object spanning `object` (its last byte is `}`). */
function appendMember(b: Buffer, object: Span, member: string): Buffer {
  const close = object.end - 1;
  let last = close - 1;
  while (last > object.start && isJsonWhitespace(b[last])) last--;
  const text = last === object.start ? member : `,${member}`;
  return Buffer.concat([b.subarray(0, last + 1), Buffer.from(text), b.subarray(last + 1)]);
}

export function replaceSpan(b: Buffer, span: Span, text: string): Buffer {
  return Buffer.concat([b.subarray(0, span.start), Buffer.from(text), b.subarray(span.end)]);
}

const STREAM_OPTIONS = Buffer.from('"stream_options"');
const INCLUDE_USAGE = Buffer.from('"include_usage"');

/**
 * The body with `stream_options.include_usage: true`, or undefined when it needs no change or
 * cannot be changed safely (the request is then sent as it came).
 */
export function withStreamUsage(body: Buffer, facts: StreamUsageFacts): Buffer | undefined {
  if (!lacksStreamUsage(facts)) return undefined;
  const start = skipWhitespace(body, 0, body.length);
  let end = body.length;
  while (end > start && isJsonWhitespace(body[end - 1])) end--;
  if (body[start] !== OPEN_OBJECT || body[end - 1] !== CLOSE_OBJECT) return undefined;
  const top: Span = { start, end };
  const options = memberValue(body, top, STREAM_OPTIONS);
  if (facts.streamOptions === 'absent') {
    return options === undefined ? appendMember(body, top, '"stream_options":{"include_usage":true}') : undefined;
  }
  if (options === undefined) return undefined;
  if (facts.streamOptions === 'null') {
    return body[options.start] === 0x6e /* n */ ? replaceSpan(body, options, '{"include_usage":true}') : undefined;
  }
  if (body[options.start] !== OPEN_OBJECT || body[options.end - 1] !== CLOSE_OBJECT) return undefined;
  const include = memberValue(body, options, INCLUDE_USAGE);
  if (include === undefined) return facts.includeUsage === undefined ? appendMember(body, options, '"include_usage":true') : undefined;
  const literal = body.toString('latin1', include.start, include.end);
  return literal === 'false' || literal === 'null' ? replaceSpan(body, include, 'true') : undefined;
}
