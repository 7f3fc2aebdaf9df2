// A syntax check of a JSON document on its bytes, for the answers we only need to know are whole
// (json-body.ts): no UTF-8 decoding, no string, no parsed objects. It is conservative: true only
// for bytes JSON.parse accepts once decoded as UTF-8 (RFC 8259 grammar, whitespace around the
// value). It also says false for a few documents JSON.parse takes (a BOM before the value,
// nesting deeper than MAX_DEPTH), so a false answer is a reason to look closer, not a verdict.
// Bytes of 0x80 and above are only taken inside strings, where any UTF-8 decoding of them is
// valid string content and never swallows the ASCII byte that follows.
// The token readers are shared with json-bounded.ts, which builds a value on the same grammar.

import { BACKSLASH, CLOSE_ARRAY, CLOSE_OBJECT, COLON, COMMA, OPEN_ARRAY, OPEN_OBJECT, QUOTE, isJsonWhitespace } from './json-bytes.js';

export const MAX_DEPTH = 512;

const OBJECT = 1;
const ARRAY = 2;

const MINUS = 0x2d;
const PLUS = 0x2b;
const DOT = 0x2e;
const ZERO = 0x30;
const NINE = 0x39;

/** Containers open at each depth; one scratch array, the check runs synchronously. */
const containers = new Uint8Array(MAX_DEPTH);

export function isWellFormedJson(bytes: Uint8Array): boolean {
  try {
    return wellFormed(bytes);
  } finally {
    releaseScan();
  }
}

function wellFormed(bytes: Uint8Array): boolean {
  const n = bytes.length;
  let depth = 0;
  let i = 0;
  value: for (;;) {
    i = skipWhitespace(bytes, i);
    if (i >= n) return false;
    const c = bytes[i];
    if (c === OPEN_OBJECT) {
      i = skipWhitespace(bytes, i + 1);
      if (bytes[i] === CLOSE_OBJECT) {
        i++;
      } else {
        if (depth === MAX_DEPTH) return false;
        containers[depth++] = OBJECT;
        i = memberKey(bytes, i);
        if (i < 0) return false;
        continue;
      }
    } else if (c === OPEN_ARRAY) {
      i = skipWhitespace(bytes, i + 1);
      if (bytes[i] === CLOSE_ARRAY) {
        i++;
      } else {
        if (depth === MAX_DEPTH) return false;
        containers[depth++] = ARRAY;
        continue;
      }
    } else if (c === QUOTE) {
      i = stringEnd(bytes, i);
    } else if (c === MINUS || (c >= ZERO && c <= NINE)) {
      i = numberEnd(bytes, i);
    } else if (c === 0x74 /* t */) {
      i = literalEnd(bytes, i, TRUE);
    } else if (c === 0x66 /* f */) {
      i = literalEnd(bytes, i, FALSE);
    } else if (c === 0x6e /* n */) {
      i = literalEnd(bytes, i, NULL);
    } else {
      return false;
    }
    if (i < 0) return false;
    // A value is complete: close containers until one continues with a comma.
    for (;;) {
      i = skipWhitespace(bytes, i);
      if (depth === 0) return i === n;
      const next = bytes[i];
      const container = containers[depth - 1];
      if (next === COMMA) {
        i++;
        if (container === OBJECT) {
          i = memberKey(bytes, skipWhitespace(bytes, i));
          if (i < 0) return false;
        }
        continue value;
      }
      if (next !== (container === OBJECT ? CLOSE_OBJECT : CLOSE_ARRAY)) return false;
      depth--;
      i++;
    }
  }
}

export function skipWhitespace(bytes: Uint8Array, i: number): number {
  for (;;) {
    const c = bytes[i];
    if (!isJsonWhitespace(c)) return i;
    i++;
  }
}

/** `"key" :` at i; the index after the colon, or -1. */
function memberKey(bytes: Uint8Array, i: number): number {
  if (bytes[i] !== QUOTE) return -1;
  i = stringEnd(bytes, i);
  if (i < 0) return -1;
  i = skipWhitespace(bytes, i);
  return bytes[i] === COLON ? i + 1 : -1;
}

/** The index after the string whose opening quote is at i, or -1. */
export function stringEnd(bytes: Uint8Array, i: number): number {
  const n = bytes.length;
  i++;
  for (;;) {
    i = plainRunEnd(bytes, i, n);
    if (i >= n) return -1;
    const c = bytes[i];
    if (c === QUOTE) return i + 1;
    if (c === BACKSLASH) {
      const e = bytes[i + 1];
      if (e === 0x75 /* u */) {
        if (!isHex(bytes[i + 2]) || !isHex(bytes[i + 3]) || !isHex(bytes[i + 4]) || !isHex(bytes[i + 5])) return -1;
        i += 6;
        continue;
      }
      // \" \\ \/ \b \f \n \r \t
      if (e !== QUOTE && e !== BACKSLASH && e !== 0x2f && e !== 0x62 && e !== 0x66 && e !== 0x6e && e !== 0x72 && e !== 0x74) return -1;
      i += 2;
      continue;
    }
    if (c < 0x20) return -1; // control characters must be escaped
    i++;
  }
}

/** Bytes that stand for themselves inside a string: all but controls, the quote and the backslash. */
const PLAIN_IN_STRING = new Uint8Array(256).map((_, c) => (c >= 0x20 && c !== QUOTE && c !== BACKSLASH ? 1 : 0));

/** Runs longer than this are read four bytes at a time. */
const SHORT_RUN = 16;

/**
 * The aligned 32-bit words of `bytes`, for reading long runs four bytes at a time (a prompt of a
 * megabyte is one string): `first` is the index of the first byte of word 0.
 */
interface Words {
  readonly words: Uint32Array;
  readonly first: number;
}

function wordsOf(bytes: Uint8Array): Words {
  const first = (4 - (bytes.byteOffset & 3)) & 3;
  const count = bytes.length > first ? (bytes.length - first) >>> 2 : 0;
  return { words: new Uint32Array(bytes.buffer, bytes.byteOffset + first, count), first };
}

// The words view of the document being scanned, made once per document rather than once per string
// (a response of a few hundred bytes has a dozen strings; each view is an object for the GC). Scans
// are synchronous, so one document at a time; the entry points let go of it when they return, so
// the cache never keeps a body alive.
let scanned: Uint8Array | undefined;
let scannedWords: Words | undefined;

function wordsFor(bytes: Uint8Array): Words {
  if (scanned !== bytes || scannedWords === undefined) {
    scannedWords = wordsOf(bytes);
    scanned = bytes;
  }
  return scannedWords;
}

/** Forgets the document the words view was made for (called when a scan of it ends). */
export function releaseScan(): void {
  scanned = undefined;
  scannedWords = undefined;
}

/** The index of the first byte from i on that does not stand for itself in a string (or n). */
function plainRunEnd(bytes: Uint8Array, i: number, n: number): number {
  const shortEnd = Math.min(n, i + SHORT_RUN);
  while (i < shortEnd && PLAIN_IN_STRING[bytes[i]] === 1) i++;
  if (i < shortEnd || i >= n) return i;
  return longRunEnd(bytes, i, n, wordsFor(bytes));
}

/** plainRunEnd past the first bytes of a run: aligned words are tested for a special byte all at once. */
function longRunEnd(bytes: Uint8Array, i: number, n: number, { words, first }: Words): number {
  while (i < n && ((i - first) & 3) !== 0) {
    if (PLAIN_IN_STRING[bytes[i]] !== 1) return i;
    i++;
  }
  let w = (i - first) >>> 2;
  while (w < words.length && !hasSpecialByte(words[w])) w++;
  i = first + (w << 2);
  while (i < n && PLAIN_IN_STRING[bytes[i]] === 1) i++;
  return i;
}

/**
 * Whether any of the four bytes of `x` is a control character, the quote or the backslash: the
 * bitwise "has a byte below n" and "has a zero byte" tests, exact as any-tests (bytes of 0x80 and
 * above, UTF-8's, never match).
 */
function hasSpecialByte(x: number): boolean {
  const below = (x - 0x20202020) & ~x;
  const q = x ^ 0x22222222;
  const b = x ^ 0x5c5c5c5c;
  return ((below | ((q - 0x01010101) & ~q) | ((b - 0x01010101) & ~b)) & 0x80808080) !== 0;
}

function isHex(c: number | undefined): boolean {
  return c !== undefined && ((c >= ZERO && c <= NINE) || (c >= 0x41 && c <= 0x46) || (c >= 0x61 && c <= 0x66));
}

/** `-? (0 | [1-9][0-9]*) (. [0-9]+)? ([eE] [+-]? [0-9]+)?` at i; the index after it, or -1. */
export function numberEnd(bytes: Uint8Array, i: number): number {
  if (bytes[i] === MINUS) i++;
  if (bytes[i] === ZERO) i++;
  else if (isDigit(bytes[i])) i = digitsEnd(bytes, i);
  else return -1;
  if (bytes[i] === DOT) {
    if (!isDigit(bytes[i + 1])) return -1;
    i = digitsEnd(bytes, i + 1);
  }
  const e = bytes[i];
  if (e === 0x65 || e === 0x45) {
    i++;
    if (bytes[i] === PLUS || bytes[i] === MINUS) i++;
    if (!isDigit(bytes[i])) return -1;
    i = digitsEnd(bytes, i);
  }
  return i;
}

function isDigit(c: number | undefined): boolean {
  return c !== undefined && c >= ZERO && c <= NINE;
}

function digitsEnd(bytes: Uint8Array, i: number): number {
  while (isDigit(bytes[i])) i++;
  return i;
}

export const TRUE = Buffer.from('true');
export const FALSE = Buffer.from('false');
export const NULL = Buffer.from('null');

export function literalEnd(bytes: Uint8Array, i: number, literal: Uint8Array): number {
  for (let k = 0; k < literal.length; k++) if (bytes[i + k] !== literal[k]) return -1;
  return i + literal.length;
}
