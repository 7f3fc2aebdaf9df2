// HPACK (RFC 7541) for our own HTTP/2 server: a decoder for the header blocks a peer sends (full
// RFC: static and dynamic table, Huffman, size updates) and an encoder for the few header blocks
// we send, which deliberately uses neither Huffman nor the dynamic table. Pure: no I/O.
//
// Strings are latin1 JavaScript strings, one char per octet, so `string.length` is the octet
// count that table sizes (§4.1) and the list-size bound (RFC 9113 §6.5.2) are measured in.

import { decodeHuffman, HuffmanError } from './huffman.js';

/** A malformed header block: the connection must end with COMPRESSION_ERROR (RFC 9113 §4.3). */
export class HpackError extends Error {
  override name = 'HpackError';
}

/**
 * The decoded header list is larger than the decoder's `maxListBytes`. Thrown only after the whole
 * block was decoded, so the dynamic table is still in step with the peer's encoder and the
 * connection can go on; the caller refuses just that stream.
 */
export class HeaderListTooLargeError extends Error {
  override name = 'HeaderListTooLargeError';
}

/** RFC 7541 Appendix A; index 1 is the first entry (index 0 is never valid). */
const STATIC_TABLE: ReadonlyArray<readonly [string, string]> = [
  ['', ''],
  [':authority', ''],
  [':method', 'GET'],
  [':method', 'POST'],
  [':path', '/'],
  [':path', '/index.html'],
  [':scheme', 'http'],
  [':scheme', 'https'],
  [':status', '200'],
  [':status', '204'],
  [':status', '206'],
  [':status', '304'],
  [':status', '400'],
  [':status', '404'],
  [':status', '500'],
  ['accept-charset', ''],
  ['accept-encoding', 'gzip, deflate'],
  ['accept-language', ''],
  ['accept-ranges', ''],
  ['accept', ''],
  ['access-control-allow-origin', ''],
  ['age', ''],
  ['allow', ''],
  ['authorization', ''],
  ['cache-control', ''],
  ['content-disposition', ''],
  ['content-encoding', ''],
  ['content-language', ''],
  ['content-length', ''],
  ['content-location', ''],
  ['content-range', ''],
  ['content-type', ''],
  ['cookie', ''],
  ['date', ''],
  ['etag', ''],
  ['expect', ''],
  ['expires', ''],
  ['from', ''],
  ['host', ''],
  ['if-match', ''],
  ['if-modified-since', ''],
  ['if-none-match', ''],
  ['if-range', ''],
  ['if-unmodified-since', ''],
  ['last-modified', ''],
  ['link', ''],
  ['location', ''],
  ['max-forwards', ''],
  ['proxy-authenticate', ''],
  ['proxy-authorization', ''],
  ['range', ''],
  ['referer', ''],
  ['refresh', ''],
  ['retry-after', ''],
  ['server', ''],
  ['set-cookie', ''],
  ['strict-transport-security', ''],
  ['transfer-encoding', ''],
  ['user-agent', ''],
  ['vary', ''],
  ['via', ''],
  ['www-authenticate', ''],
];
const STATIC_COUNT = STATIC_TABLE.length - 1;

/** §4.1: an entry's size is its name and value octets plus 32. */
const ENTRY_OVERHEAD = 32;
/** The largest integer we accept (§5.1 leaves the limit to the implementation). */
const MAX_INTEGER = 2 ** 31 - 1;
/** 2^31 − 1 needs at most five continuation octets after any prefix of four or more bits. */
const MAX_CONTINUATION_OCTETS = 5;
const POWERS_OF_128 = [1, 2 ** 7, 2 ** 14, 2 ** 21, 2 ** 28];
/** RFC 9113 §6.5.2's default for SETTINGS_HEADER_TABLE_SIZE. */
const DEFAULT_TABLE_SIZE = 4096;
const DEFAULT_MAX_LIST_BYTES = 1024 * 1024;
const EMPTY = Buffer.alloc(0);

/**
 * The dynamic table (§2.3.2, §4): a ring buffer of entries, newest last, evicted oldest first. It
 * grows its arrays by doubling, so the steady state (a connection whose table is full) allocates
 * nothing per entry beyond the strings themselves.
 */
class DynamicTable {
  private names: string[] = new Array<string>(16).fill('');
  private values: string[] = new Array<string>(16).fill('');
  private mask = 15;
  /** Slot of the oldest entry. */
  private oldest = 0;
  count = 0;
  /** Sum of the entries' sizes (§4.1). */
  size = 0;

  constructor(private maxSize: number) {}

  /** 0 is the newest entry; the caller checks `position < count`. */
  name(position: number): string {
    return this.names[(this.oldest + this.count - 1 - position) & this.mask];
  }

  value(position: number): string {
    return this.values[(this.oldest + this.count - 1 - position) & this.mask];
  }

  /** §4.4: evict until the new entry fits; an entry larger than the whole table just empties it. */
  add(name: string, value: string): void {
    const entrySize = name.length + value.length + ENTRY_OVERHEAD;
    if (entrySize > this.maxSize) {
      this.evictDownTo(0);
      return;
    }
    this.evictDownTo(this.maxSize - entrySize);
    if (this.count === this.names.length) this.grow();
    const slot = (this.oldest + this.count) & this.mask;
    this.names[slot] = name;
    this.values[slot] = value;
    this.count++;
    this.size += entrySize;
  }

  /** §4.3: a new maximum evicts what no longer fits. */
  resize(maxSize: number): void {
    this.maxSize = maxSize;
    this.evictDownTo(maxSize);
  }

  private evictDownTo(limit: number): void {
    while (this.size > limit) {
      const slot = this.oldest;
      this.size -= this.names[slot].length + this.values[slot].length + ENTRY_OVERHEAD;
      // Drop the strings so an evicted large value is not kept alive by the ring.
      this.names[slot] = '';
      this.values[slot] = '';
      this.oldest = (slot + 1) & this.mask;
      this.count--;
    }
  }

  private grow(): void {
    const capacity = this.names.length * 2;
    const names = new Array<string>(capacity).fill('');
    const values = new Array<string>(capacity).fill('');
    for (let i = 0; i < this.count; i++) {
      const slot = (this.oldest + i) & this.mask;
      names[i] = this.names[slot];
      values[i] = this.values[slot];
    }
    this.names = names;
    this.values = values;
    this.mask = capacity - 1;
    this.oldest = 0;
  }
}

export interface HpackDecoderOptions {
  /** Our SETTINGS_HEADER_TABLE_SIZE: the dynamic table starts at this size and a size update may
   *  not exceed it. Default 4096, the protocol's initial value. Below 4096 there is a window: until
   *  the peer has our SETTINGS its encoder may fill 4096 octets (RFC 9113 §4.3.1), and a reference
   *  to an entry we evicted early throws HpackError (never a wrong field: the entries we keep are
   *  the newest, indexed alike on both sides). */
  readonly maxTableSize?: number;
  /** Bound on the decoded list: sum of name + value octets + 32 per field (RFC 9113 §6.5.2).
   *  Default 1 MiB. */
  readonly maxListBytes?: number;
}

/** Decodes the header blocks of one connection's direction; keeps that direction's dynamic table. */
export class HpackDecoder {
  private readonly maxTableSize: number;
  private readonly maxListBytes: number;
  private readonly table: DynamicTable;
  // The block being decoded and the read position in it: fields rather than locals passed around,
  // so reading an integer or a string returns a plain number or string and allocates nothing else.
  private src: Buffer = EMPTY;
  private pos = 0;

  constructor(options: HpackDecoderOptions = {}) {
    this.maxTableSize = nonNegativeInteger(options.maxTableSize ?? DEFAULT_TABLE_SIZE, 'maxTableSize');
    this.maxListBytes = nonNegativeInteger(options.maxListBytes ?? DEFAULT_MAX_LIST_BYTES, 'maxListBytes');
    this.table = new DynamicTable(this.maxTableSize);
  }

  /** The dynamic table's current size in octets (§4.1), for tests and diagnostics. */
  get dynamicTableSize(): number {
    return this.table.size;
  }

  /** The dynamic table's entries, newest first (index 62 first), for tests and diagnostics. */
  dynamicTableEntries(): Array<[string, string]> {
    const entries: Array<[string, string]> = [];
    for (let i = 0; i < this.table.count; i++) entries.push([this.table.name(i), this.table.value(i)]);
    return entries;
  }

  /**
   * Decodes one complete header block (a HEADERS frame's fragment and its CONTINUATIONs, joined).
   * Returns the fields in order as sent; values are not checked for CR, LF or NUL (the HTTP layer
   * decides what is acceptable). Throws HpackError on any malformation and HeaderListTooLargeError
   * (after updating the table) when the list exceeds maxListBytes.
   */
  decode(block: Uint8Array): Array<[string, string]> {
    const src = Buffer.isBuffer(block) ? block : Buffer.from(block.buffer, block.byteOffset, block.byteLength);
    this.src = src;
    this.pos = 0;
    const fields: Array<[string, string]> = [];
    let listBytes = 0;
    let sawField = false;
    while (this.pos < src.length) {
      const first = src[this.pos];
      let name: string;
      let value: string;
      if (first >= 0x80) {
        // §6.1 Indexed Header Field: 1xxxxxxx.
        const index = this.readInteger(7);
        if (index === 0) throw new HpackError('indexed header field with index 0');
        if (index <= STATIC_COUNT) {
          const entry = STATIC_TABLE[index];
          name = entry[0];
          value = entry[1];
        } else {
          const position = this.dynamicPosition(index);
          name = this.table.name(position);
          value = this.table.value(position);
        }
      } else if (first >= 0x40) {
        // §6.2.1 Literal Header Field with Incremental Indexing: 01xxxxxx.
        name = this.readLiteralName(6);
        value = this.readString();
        this.table.add(name, value);
      } else if (first >= 0x20) {
        // §6.3 Dynamic Table Size Update: 001xxxxx, only before the block's first field (§4.2).
        if (sawField) throw new HpackError('dynamic table size update after a header field');
        const size = this.readInteger(5);
        if (size > this.maxTableSize) {
          throw new HpackError(`dynamic table size update to ${size} exceeds the limit ${this.maxTableSize}`);
        }
        this.table.resize(size);
        continue;
      } else {
        // §6.2.2 without indexing (0000xxxx) and §6.2.3 never indexed (0001xxxx): to us the same,
        // as we never re-encode what we decode.
        name = this.readLiteralName(4);
        value = this.readString();
      }
      sawField = true;
      listBytes += name.length + value.length + ENTRY_OVERHEAD;
      // Past the bound, keep decoding (the table must follow the encoder) but stop collecting.
      if (listBytes <= this.maxListBytes) fields.push([name, value]);
    }
    this.src = EMPTY;
    if (listBytes > this.maxListBytes) {
      throw new HeaderListTooLargeError(`header list of ${listBytes} octets exceeds the limit ${this.maxListBytes}`);
    }
    return fields;
  }

  /** The 0-based position (0 = newest) in the dynamic table of HPACK index `index` (> 61). */
  private dynamicPosition(index: number): number {
    const position = index - STATIC_COUNT - 1;
    if (position >= this.table.count) {
      throw new HpackError(`header field index ${index} is beyond the ${STATIC_COUNT + this.table.count} table entries`);
    }
    return position;
  }

  /** A literal's name: an index into the tables in the representation's prefix, or 0 and a string. */
  private readLiteralName(prefixBits: number): string {
    const index = this.readInteger(prefixBits);
    if (index === 0) return this.readString();
    if (index <= STATIC_COUNT) return STATIC_TABLE[index][0];
    return this.table.name(this.dynamicPosition(index));
  }

  /** §5.1: an integer in the low `prefixBits` of the current octet, continued in 7-bit groups. */
  private readInteger(prefixBits: number): number {
    const src = this.src;
    let pos = this.pos;
    if (pos >= src.length) throw new HpackError('header block ends inside a field');
    const prefixMax = (1 << prefixBits) - 1;
    let value = src[pos++] & prefixMax;
    if (value < prefixMax) {
      this.pos = pos;
      return value;
    }
    for (let i = 0; i < MAX_CONTINUATION_OCTETS; i++) {
      if (pos >= src.length) throw new HpackError('header block ends inside an integer');
      const octet = src[pos++];
      // Multiplication rather than a shift: the sum may pass 2^31 before the bound check.
      value += (octet & 0x7f) * POWERS_OF_128[i];
      if (octet < 0x80) {
        if (value > MAX_INTEGER) throw new HpackError('integer exceeds 2^31 - 1');
        this.pos = pos;
        return value;
      }
    }
    throw new HpackError(`integer continues beyond ${MAX_CONTINUATION_OCTETS} octets`);
  }

  /** §5.2: H flag and 7-bit-prefix length, then the octets, Huffman-coded when H is set. */
  private readString(): string {
    const src = this.src;
    if (this.pos >= src.length) throw new HpackError('header block ends before a string');
    const huffman = src[this.pos] >= 0x80;
    const length = this.readInteger(7);
    const start = this.pos;
    const end = start + length;
    if (end > src.length) throw new HpackError(`string of ${length} octets runs past the end of the header block`);
    this.pos = end;
    if (!huffman) return src.toString('latin1', start, end);
    try {
      return decodeHuffman(src, start, end);
    } catch (err) {
      if (err instanceof HuffmanError) throw new HpackError(err.message);
      throw err;
    }
  }
}

function nonNegativeInteger(value: number, what: string): number {
  if (!Number.isSafeInteger(value) || value < 0) throw new RangeError(`${what} must be a non-negative integer, got ${value}`);
  return value;
}

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
