// Protobuf wire-format primitives for our hand-written message codecs (the ext_proc messages in
// extproc/codec/, the health messages in health-messages.ts): a bounds-checked reader and a
// scratch-buffer writer. Bytes that are not a protobuf message (truncated, a length past the end,
// an unknown wire type) throw MalformedMessage; everything else decodes.

import { FRAME_HEADER_BYTES } from './framing.js';

/** The bytes are not a well-formed protobuf message. */
export class MalformedMessage extends Error {
  constructor(reason: string) {
    super(`malformed protobuf message: ${reason}`);
    this.name = 'MalformedMessage';
  }
}

export const WIRE_VARINT = 0;
export const WIRE_FIXED64 = 1;
export const WIRE_LEN = 2;
const WIRE_FIXED32 = 5;

/**
 * Reads one message's bytes. Every read is bounds-checked against the end of the enclosing
 * message; a truncated or malformed buffer throws MalformedMessage.
 */
export class Reader {
  pos: number;

  constructor(
    readonly buf: Buffer,
    pos = 0,
  ) {
    this.pos = pos;
  }

  /** A varint of at most 5 bytes that fits 32 bits unsigned: tags and lengths. */
  uint32(end: number): number {
    const buf = this.buf;
    let pos = this.pos;
    if (pos >= end) throw new MalformedMessage('truncated varint');
    let byte = buf[pos++];
    let value = byte & 0x7f;
    if (byte >= 0x80) {
      let shift = 7;
      for (;;) {
        if (pos >= end) throw new MalformedMessage('truncated varint');
        byte = buf[pos++];
        if (shift === 28) {
          // 5th byte: only 4 more bits fit in 32.
          if (byte > 0x0f) throw new MalformedMessage('varint beyond 32 bits');
          value += byte * 0x10000000;
          break;
        }
        value |= (byte & 0x7f) << shift;
        if (byte < 0x80) break;
        shift += 7;
      }
      value >>>= 0;
    }
    this.pos = pos;
    return value;
  }

  /** The end offset of a length-delimited field whose length prefix starts at pos. */
  lengthEnd(end: number): number {
    const len = this.uint32(end);
    const stop = this.pos + len;
    if (stop > end) throw new MalformedMessage('length beyond the enclosing message');
    return stop;
  }

  bytes(end: number): Buffer {
    const stop = this.lengthEnd(end);
    // A view, not a copy, like protobufjs's BufferReader (Buffer.prototype.slice).
    const out = this.buf.subarray(this.pos, stop);
    this.pos = stop;
    return out;
  }

  string(end: number): string {
    return this.stringAt(this.lengthEnd(end));
  }

  /** The UTF-8 string from pos to stop (the length prefix already read). */
  private stringAt(stop: number): string {
    const out =
      stop - this.pos <= SHORT_STRING
        ? (shortAscii(this.buf, this.pos, stop) ?? this.buf.toString('utf8', this.pos, stop))
        : this.buf.toString('utf8', this.pos, stop);
    this.pos = stop;
    return out;
  }

  /**
   * A string that is most likely one of `known` (header names, attribute and metadata keys): the
   * table's own string when the bytes match one, so nothing is allocated and property and Map
   * lookups with it find an already internalized string; else as string() decodes it.
   */
  knownString(end: number, known: StringTable): string {
    const stop = this.lengthEnd(end);
    const found = known.find(this.buf, this.pos, stop);
    if (found !== undefined) {
      this.pos = stop;
      return found;
    }
    return this.stringAt(stop);
  }

  /**
   * A varint value of an int32, uint32, enum or bool field: up to 10 bytes (a negative int32 is
   * sign-extended to 64 bits on the wire), of which the low 32 bits count, as protobuf parsers read it.
   */
  low32(end: number): number {
    const buf = this.buf;
    const start = this.pos;
    let value = 0;
    for (let i = 0; i < 10; i++) {
      if (start + i >= end) throw new MalformedMessage('truncated varint');
      const byte = buf[start + i];
      if (i < 5) value += (byte & 0x7f) * 2 ** (7 * i);
      if (byte < 0x80) {
        this.pos = start + i + 1;
        return value % 2 ** 32;
      }
    }
    throw new MalformedMessage('varint longer than 10 bytes');
  }

  bool(end: number): boolean {
    return this.low32(end) !== 0;
  }

  double(end: number): number {
    if (this.pos + 8 > end) throw new MalformedMessage('truncated double');
    const value = this.buf.readDoubleLE(this.pos);
    this.pos += 8;
    return value;
  }

  /** Skips a field we do not read (unknown to us, unused, or with a wire type we do not expect). */
  skip(wireType: number, end: number): void {
    switch (wireType) {
      case WIRE_VARINT:
        for (;;) {
          if (this.pos >= end) throw new MalformedMessage('truncated varint');
          if (this.buf[this.pos++] < 0x80) return;
        }
      case WIRE_FIXED64:
        this.pos += 8;
        break;
      case WIRE_LEN:
        this.pos = this.lengthEnd(end);
        return;
      case WIRE_FIXED32:
        this.pos += 4;
        break;
      default:
        throw new MalformedMessage(`wire type ${wireType}`);
    }
    if (this.pos > end) throw new MalformedMessage('truncated fixed-size field');
  }
}

/** A fixed set of ASCII strings, found by their bytes without decoding them. */
export class StringTable {
  /** By byte length: the candidates of that length, their bytes and the string. */
  private readonly byLength: { readonly bytes: Buffer; readonly text: string }[][] = [];

  constructor(strings: Iterable<string>) {
    for (const text of strings) {
      const bytes = Buffer.from(text, 'latin1');
      if (bytes.toString('ascii') !== text) throw new Error(`not ASCII: ${text}`);
      (this.byLength[bytes.length] ??= []).push({ bytes, text });
    }
  }

  find(buf: Buffer, start: number, stop: number): string | undefined {
    const candidates = this.byLength[stop - start];
    if (candidates === undefined) return undefined;
    for (const candidate of candidates) {
      const bytes = candidate.bytes;
      let i = 0;
      while (i < bytes.length && bytes[i] === buf[start + i]) i++;
      if (i === bytes.length) return candidate.text;
    }
    return undefined;
  }
}

/** Header names and short values: building the string by hand beats a native call below this length. */
const SHORT_STRING = 24;

function shortAscii(buf: Buffer, start: number, stop: number): string | undefined {
  let out = '';
  for (let i = start; i < stop; i++) {
    const c = buf[i];
    if (c >= 0x80) return undefined;
    out += String.fromCharCode(c);
  }
  return out;
}

const INITIAL_CAPACITY = 64 * 1024;

/**
 * Builds one message into a scratch buffer reused across messages (the result is copied out).
 * Nested messages and strings get a one-byte length placeholder that is widened after the fact
 * when the content turns out to be 128 bytes or longer, so nothing is measured twice.
 */
export class Writer {
  private buf: Buffer = Buffer.allocUnsafe(INITIAL_CAPACITY);
  private pos = 0;

  reset(): void {
    this.pos = 0;
  }

  /** A copy of what was written: the scratch buffer is reused by the next message. */
  finish(): Buffer {
    return this.copyOut(0);
  }

  /**
   * What was written as one gRPC length-prefixed message (flag 0, uncompressed; 4-byte big-endian
   * length): the prefix and the message in one copy.
   */
  finishFramed(): Buffer {
    const out = this.copyOut(FRAME_HEADER_BYTES);
    out[0] = 0;
    out.writeUInt32BE(out.length - FRAME_HEADER_BYTES, 1);
    return out;
  }

  private copyOut(before: number): Buffer {
    const out = Buffer.allocUnsafe(before + this.pos);
    this.buf.copy(out, before, 0, this.pos);
    if (this.buf.length > 4 * INITIAL_CAPACITY) this.buf = Buffer.allocUnsafe(INITIAL_CAPACITY); // let a huge body's buffer go
    return out;
  }

  private ensure(extra: number): void {
    const need = this.pos + extra;
    if (need <= this.buf.length) return;
    let size = this.buf.length * 2;
    while (size < need) size *= 2;
    const grown = Buffer.allocUnsafe(size);
    this.buf.copy(grown, 0, 0, this.pos);
    this.buf = grown;
  }

  uint32(value: number): void {
    this.ensure(5);
    const buf = this.buf;
    let v = value >>> 0;
    while (v >= 0x80) {
      buf[this.pos++] = (v & 0x7f) | 0x80;
      v >>>= 7;
    }
    buf[this.pos++] = v;
  }

  /** An int32 value: a negative one is sign-extended to ten bytes, as protobuf writes it. */
  int32(value: number): void {
    if (value >= 0) {
      this.uint32(value);
      return;
    }
    this.ensure(10);
    const buf = this.buf;
    let lo = value >>> 0;
    for (let i = 0; i < 4; i++) {
      buf[this.pos++] = (lo & 0x7f) | 0x80;
      lo >>>= 7;
    }
    // Bits 28-31 of the value, then the sign extension: all ones up to bit 63.
    buf[this.pos++] = (lo & 0x0f) | 0xf0;
    for (let i = 0; i < 4; i++) buf[this.pos++] = 0xff;
    buf[this.pos++] = 0x01;
  }

  tag(field: number, wireType: number): void {
    this.uint32((field << 3) | wireType);
  }

  bool(field: number, value: boolean): void {
    this.tag(field, WIRE_VARINT);
    this.uint32(value ? 1 : 0);
  }

  double(field: number, value: number): void {
    this.tag(field, WIRE_FIXED64);
    this.ensure(8);
    this.buf.writeDoubleLE(value, this.pos);
    this.pos += 8;
  }

  bytes(field: number, value: Uint8Array): void {
    this.tag(field, WIRE_LEN);
    this.uint32(value.length);
    this.ensure(value.length);
    this.buf.set(value, this.pos);
    this.pos += value.length;
  }

  string(field: number, value: string): void {
    this.tag(field, WIRE_LEN);
    const start = this.begin();
    this.ensure(value.length * 3);
    this.pos += this.buf.write(value, this.pos, 'utf8');
    this.end(start);
  }

  /** Opens a length-delimited field (tag already written); returns the content start for end(). */
  begin(): number {
    this.ensure(1);
    this.pos++;
    return this.pos;
  }

  /** Writes the length of the content since begin(), widening its varint if needed. */
  end(start: number): void {
    const len = this.pos - start;
    if (len < 0x80) {
      this.buf[start - 1] = len;
      return;
    }
    const width = varintSize(len);
    this.ensure(width - 1);
    this.buf.copy(this.buf, start + width - 1, start, this.pos);
    this.pos += width - 1;
    let at = start - 1;
    let v = len;
    while (v >= 0x80) {
      this.buf[at++] = (v & 0x7f) | 0x80;
      v >>>= 7;
    }
    this.buf[at] = v;
  }
}

/** Bytes of `value` (32 bits unsigned) as a varint. */
export function varintSize(value: number): number {
  return value < 0x80 ? 1 : value < 0x4000 ? 2 : value < 0x200000 ? 3 : value < 0x10000000 ? 4 : 5;
}
