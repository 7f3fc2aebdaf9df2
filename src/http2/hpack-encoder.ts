// The HPACK encoder for the few header blocks we send (responses and trailers): deliberately
// without Huffman or the dynamic table, so encoding is a sized copy. Pure: no I/O. Strings are
// latin1 JavaScript strings, one char per octet.

import { STATIC_TABLE, STATIC_COUNT } from './hpack-static-table.js';

// Encoder side: name → its first static index and the static indices of its (name, value) pairs.
interface StaticName {
  readonly index: number;
  readonly valueIndex: ReadonlyMap<string, number>;
}

const STATIC_BY_NAME: ReadonlyMap<string, StaticName> = (() => {
  const byName = new Map<string, { index: number; valueIndex: Map<string, number> }>();
  for (let index = 1; index <= STATIC_COUNT; index++) {
    const [name, value] = STATIC_TABLE[index];
    let entry = byName.get(name);
    if (entry === undefined) {
      entry = { index, valueIndex: new Map() };
      byName.set(name, entry);
    }
    // Entries without a value (e.g. `accept`) only ever serve as indexed names: an empty value is
    // rare enough that sending it as a literal costs nothing worth a special case.
    if (value !== '') entry.valueIndex.set(value, index);
  }
  return byName;
})();

/** RFC 9113 §8.2.1: the chars of a field name: visible ASCII but upper case and ':'. */
const NAME_CHARS: Uint8Array = (() => {
  const allowed = new Uint8Array(128);
  for (let c = 0x21; c <= 0x7e; c++) allowed[c] = (c >= 0x41 && c <= 0x5a) || c === 0x3a ? 0 : 1;
  return allowed;
})();

const COLON = 0x3a;

/**
 * One header block for fields we send (responses and trailers): an indexed field for an exact
 * static-table match (e.g. `:status: 200`), else a literal without indexing (with an indexed name
 * when the name is in the static table). No Huffman and no dynamic table, so the peer's
 * SETTINGS_HEADER_TABLE_SIZE never matters and encoding is a copy. Throws TypeError on a name that
 * is not a lower-case field name (RFC 9113 §8.2.1; one leading ':' for pseudo-headers) or a value
 * with CR, LF, NUL or a char above U+00FF (which latin1 cannot carry).
 */
export function encodeHeaderBlock(fields: ReadonlyArray<readonly [string, string]>): Buffer {
  // Two passes, sizing then writing, so the result is allocated at its exact length: a Buffer view
  // (`subarray`) costs as much as the whole encoding of a typical response.
  let size = 0;
  for (const [name, value] of fields) {
    const known = STATIC_BY_NAME.get(name);
    if (known === undefined) size += 1 + stringLength(name) + stringLength(value);
    else if (known.valueIndex.has(value)) size += 1;
    else size += integerLength(4, known.index) + stringLength(value);
  }
  const out = Buffer.allocUnsafe(size);
  let pos = 0;
  for (const [name, value] of fields) {
    const known = STATIC_BY_NAME.get(name);
    if (known !== undefined) {
      const exact = known.valueIndex.get(value);
      if (exact !== undefined) {
        // §6.1: every static index fits the 7-bit prefix.
        out[pos++] = 0x80 | exact;
        continue;
      }
      // §6.2.2 with an indexed name: 0000 and a 4-bit-prefix index.
      pos = writeInteger(out, pos, 0x00, 4, known.index);
    } else {
      // §6.2.2 with a literal name: 0x00, then the name.
      out[pos++] = 0x00;
      pos = writeName(out, pos, name);
    }
    pos = writeValue(out, pos, value, name);
  }
  return out;
}

/** The octets of a §5.2 string literal without Huffman coding. */
function stringLength(text: string): number {
  return integerLength(7, text.length) + text.length;
}

/** The octets §5.1 takes for `value` after a `prefixBits` prefix. */
function integerLength(prefixBits: number, value: number): number {
  let length = 1;
  let rest = value - ((1 << prefixBits) - 1);
  if (rest < 0) return length;
  do {
    length++;
    rest = Math.floor(rest / 0x80);
  } while (rest > 0);
  return length;
}

/** §5.1: `value` in the low `prefixBits` of an octet whose high bits are `pattern`. */
function writeInteger(out: Buffer, pos: number, pattern: number, prefixBits: number, value: number): number {
  const prefixMax = (1 << prefixBits) - 1;
  if (value < prefixMax) {
    out[pos++] = pattern | value;
    return pos;
  }
  out[pos++] = pattern | prefixMax;
  let rest = value - prefixMax;
  while (rest >= 0x80) {
    out[pos++] = (rest % 0x80) | 0x80;
    rest = Math.floor(rest / 0x80);
  }
  out[pos++] = rest;
  return pos;
}

// The two string writers below are §5.2 with H = 0: the length (7-bit prefix), then one octet per
// char. They check each char as they copy it: one pass, and for the short strings of responses a
// char loop beats both a regular expression and Buffer#write's call into C++.

function writeName(out: Buffer, pos: number, name: string): number {
  const length = name.length;
  pos = writeInteger(out, pos, 0x00, 7, length);
  for (let i = 0; i < length; i++) {
    const c = name.charCodeAt(i);
    if (c >= 0x80 || (NAME_CHARS[c] === 0 && !(c === COLON && i === 0 && length > 1))) {
      throw new TypeError(`invalid HTTP/2 header name ${JSON.stringify(name)}`);
    }
    out[pos++] = c;
  }
  if (length === 0) throw new TypeError('empty HTTP/2 header name');
  return pos;
}

function writeValue(out: Buffer, pos: number, value: string, name: string): number {
  const length = value.length;
  pos = writeInteger(out, pos, 0x00, 7, length);
  for (let i = 0; i < length; i++) {
    const c = value.charCodeAt(i);
    if (c > 0xff || c === 0x00 || c === 0x0a || c === 0x0d) throw new TypeError(`invalid value for HTTP/2 header ${name}`);
    out[pos++] = c;
  }
  return pos;
}
