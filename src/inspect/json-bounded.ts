// A JSON document read from its bytes into a value whose strings are cut to a bound, for request
// bodies we only need a few short facts from (request/openai-request.ts). A 1 MiB chat body is
// almost all one or two long strings: decoding the whole body to text and parsing it builds a
// megabyte string twice (the text, then the value) to read a model name and the first kilobyte of
// the prompt. Here every byte is still checked against JSON's grammar (the token readers of
// json-syntax.ts), but only the first characters of a long string are ever decoded.
//
// Conservative like isWellFormedJson: `undefined` for every document JSON.parse rejects, and also
// for the few it takes that the byte grammar does not (nesting deeper than MAX_DEPTH): the caller
// then asks JSON.parse, which gives the verdict and the words of the error.

import { BACKSLASH, CLOSE_ARRAY, CLOSE_OBJECT, COLON, COMMA, OPEN_ARRAY, OPEN_OBJECT, QUOTE } from './json-bytes.js';
import { FALSE, MAX_DEPTH, NULL, TRUE, literalEnd, numberEnd, releaseScan, skipWhitespace, stringEnd } from './json-syntax.js';

export interface BoundedJsonOptions {
  /** Strings longer than this many characters (UTF-16 code units) are cut to this length. */
  readonly maxStringChars: number;
  /** Members of the top-level object whose string value is kept whole (a model name must not be cut). */
  readonly wholeTopLevelStrings: ReadonlySet<string>;
}

/** Thrown inside the reader when the bytes leave the grammar; never escapes this module. */
class NotJson extends Error {}

const U = 0x75;
const MINUS = 0x2d;

/**
 * Raw bytes to read for at least `chars` characters plus a margin of two: the widest encoding is
 * 6 bytes per character (`\uXXXX`), and the margin keeps a surrogate pair cut at the end from
 * reaching the characters kept.
 */
function byteBudget(chars: number): number {
  return 6 * (chars + 2) + 12;
}

class BoundedReader {
  i = 0;

  constructor(
    private readonly bytes: Buffer,
    private readonly options: BoundedJsonOptions,
  ) {}

  document(): unknown {
    const value = this.value(0, this.options.maxStringChars);
    if (skipWhitespace(this.bytes, this.i) !== this.bytes.length) throw new NotJson();
    return value;
  }

  private value(depth: number, maxChars: number): unknown {
    const bytes = this.bytes;
    this.i = skipWhitespace(bytes, this.i);
    const c = bytes[this.i];
    if (c === OPEN_OBJECT) return this.object(depth);
    if (c === OPEN_ARRAY) return this.array(depth);
    if (c === QUOTE) return this.string(maxChars);
    if (c === MINUS || (c >= 0x30 && c <= 0x39)) {
      const end = numberEnd(bytes, this.i);
      if (end < 0) throw new NotJson();
      // JSON's number grammar is a subset of Number()'s, with the same value for each.
      const n = Number(bytes.toString('latin1', this.i, end));
      this.i = end;
      return n;
    }
    const literal = c === 0x74 ? TRUE : c === 0x66 ? FALSE : c === 0x6e ? NULL : undefined;
    if (literal === undefined) throw new NotJson();
    const end = literalEnd(bytes, this.i, literal);
    if (end < 0) throw new NotJson();
    this.i = end;
    return literal === TRUE ? true : literal === FALSE ? false : null;
  }

  private object(depth: number): Record<string, unknown> {
    const bytes = this.bytes;
    const out: Record<string, unknown> = {};
    this.i = skipWhitespace(bytes, this.i + 1);
    if (bytes[this.i] === CLOSE_OBJECT) {
      this.i++;
      return out;
    }
    if (depth === MAX_DEPTH) throw new NotJson();
    for (;;) {
      if (bytes[this.i] !== QUOTE) throw new NotJson();
      const key = this.string(Infinity);
      this.i = skipWhitespace(bytes, this.i);
      if (bytes[this.i] !== COLON) throw new NotJson();
      this.i++;
      const whole = depth === 0 && this.options.wholeTopLevelStrings.has(key);
      const value = this.value(depth + 1, whole ? Infinity : this.options.maxStringChars);
      // As JSON.parse: the last of duplicate keys wins, and "__proto__" is an own property.
      if (key === '__proto__') Object.defineProperty(out, key, { value, writable: true, enumerable: true, configurable: true });
      else out[key] = value;
      this.i = skipWhitespace(bytes, this.i);
      const next = bytes[this.i++];
      if (next === CLOSE_OBJECT) return out;
      if (next !== COMMA) throw new NotJson();
      this.i = skipWhitespace(bytes, this.i);
    }
  }

  private array(depth: number): unknown[] {
    const bytes = this.bytes;
    const out: unknown[] = [];
    this.i = skipWhitespace(bytes, this.i + 1);
    if (bytes[this.i] === CLOSE_ARRAY) {
      this.i++;
      return out;
    }
    if (depth === MAX_DEPTH) throw new NotJson();
    for (;;) {
      out.push(this.value(depth + 1, this.options.maxStringChars));
      this.i = skipWhitespace(bytes, this.i);
      const next = bytes[this.i++];
      if (next === CLOSE_ARRAY) return out;
      if (next !== COMMA) throw new NotJson();
    }
  }

  /** The string whose opening quote is at `i`, checked whole, decoded up to `maxChars`. */
  private string(maxChars: number): string {
    const start = this.i + 1;
    const end = stringEnd(this.bytes, this.i);
    if (end < 0) throw new NotJson();
    this.i = end;
    const contentEnd = end - 1;
    const budget = byteBudget(maxChars);
    if (contentEnd - start <= budget) {
      const text = this.decode(start, contentEnd);
      return text.length > maxChars ? text.slice(0, maxChars) : text;
    }
    return this.decode(start, this.cutPoint(start, start + budget)).slice(0, maxChars);
  }

  /** The last character boundary at or before `limit`: never inside an escape or a UTF-8 sequence. */
  private cutPoint(start: number, limit: number): number {
    const bytes = this.bytes;
    let i = start;
    while (i < limit) {
      if (bytes[i] !== BACKSLASH) {
        i++;
        continue;
      }
      const length = bytes[i + 1] === U ? 6 : 2;
      if (i + length > limit) break;
      i += length;
    }
    while (i > start && (bytes[i] & 0xc0) === 0x80) i--; // back to the lead byte of a cut sequence
    return i;
  }

  /** String content already checked by stringEnd, so escapes are whole and control characters absent. */
  private decode(start: number, end: number): string {
    const text = this.bytes.toString('utf8', start, end);
    return this.hasEscape(start, end) ? (JSON.parse(`"${text}"`) as string) : text;
  }

  /** A backslash between start and end: a loop for the short strings most are (a view costs an object), a native search for long ones. */
  private hasEscape(start: number, end: number): boolean {
    const bytes = this.bytes;
    if (end - start > 64) return bytes.subarray(start, end).includes(BACKSLASH);
    for (let i = start; i < end; i++) if (bytes[i] === BACKSLASH) return true;
    return false;
  }
}

/** The value of `bytes` with long strings cut, or undefined when they are not (surely) JSON. */
export function parseBoundedJson(bytes: Buffer, options: BoundedJsonOptions): { readonly value: unknown } | undefined {
  try {
    return { value: new BoundedReader(bytes, options).document() };
  } catch (err) {
    if (err instanceof NotJson) return undefined;
    throw err;
  } finally {
    releaseScan();
  }
}
