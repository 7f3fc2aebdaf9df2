// HPACK (RFC 7541) for our own HTTP/2 server: the decoder for the header blocks a peer sends (full
// RFC: static and dynamic table, Huffman, size updates). The encoder for the few blocks we send is
// hpack-encoder.ts. Pure: no I/O.
//
// Strings are latin1 JavaScript strings, one char per octet, so `string.length` is the octet
// count that table sizes (§4.1) and the list-size bound (RFC 9113 §6.5.2) are measured in.

import { decodeHuffman, HuffmanError } from './huffman.js';
import { STATIC_TABLE, STATIC_COUNT } from './hpack-static-table.js';

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
