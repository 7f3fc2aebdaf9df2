// HTTP/2 framing (RFC 9113 §4, §6): the 9-byte frame header, the frame types and flags we read
// and write, and a reader that cuts a connection's byte stream into frames. Pure: bytes in,
// frames out; what a frame means for the connection is connection.ts's business.

export const CONNECTION_PREFACE = Buffer.from('PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n', 'latin1');
const FRAME_HEADER_BYTES = 9;
/** The protocol's initial SETTINGS_MAX_FRAME_SIZE and flow-control window. */
export const DEFAULT_MAX_FRAME_SIZE = 16_384;
export const DEFAULT_WINDOW_SIZE = 65_535;
export const MAX_WINDOW_SIZE = 2 ** 31 - 1;
export const MAX_FRAME_SIZE_LIMIT = 2 ** 24 - 1;

export const FrameType = Object.freeze({
  DATA: 0x0,
  HEADERS: 0x1,
  PRIORITY: 0x2,
  RST_STREAM: 0x3,
  SETTINGS: 0x4,
  PUSH_PROMISE: 0x5,
  PING: 0x6,
  GOAWAY: 0x7,
  WINDOW_UPDATE: 0x8,
  CONTINUATION: 0x9,
});

export const Flag = Object.freeze({
  END_STREAM: 0x1,
  ACK: 0x1,
  END_HEADERS: 0x4,
  PADDED: 0x8,
  PRIORITY: 0x20,
});

/** Error codes of RST_STREAM and GOAWAY (RFC 9113 §7). */
export const ErrorCode = Object.freeze({
  NO_ERROR: 0x0,
  PROTOCOL_ERROR: 0x1,
  INTERNAL_ERROR: 0x2,
  FLOW_CONTROL_ERROR: 0x3,
  SETTINGS_TIMEOUT: 0x4,
  STREAM_CLOSED: 0x5,
  FRAME_SIZE_ERROR: 0x6,
  REFUSED_STREAM: 0x7,
  CANCEL: 0x8,
  COMPRESSION_ERROR: 0x9,
  ENHANCE_YOUR_CALM: 0xb,
});

export const Setting = Object.freeze({
  HEADER_TABLE_SIZE: 0x1,
  ENABLE_PUSH: 0x2,
  MAX_CONCURRENT_STREAMS: 0x3,
  INITIAL_WINDOW_SIZE: 0x4,
  MAX_FRAME_SIZE: 0x5,
  MAX_HEADER_LIST_SIZE: 0x6,
});

/** A violation that ends the whole connection (GOAWAY with `code`). */
export class ConnectionError extends Error {
  constructor(
    readonly code: number,
    message: string,
  ) {
    super(message);
    this.name = 'ConnectionError';
  }
}

/** Receives each frame; `payload` is a view valid only during the call unless copied. */
export type FrameHandler = (type: number, flags: number, streamId: number, payload: Buffer) => void;

/**
 * Cuts a byte stream into frames. A frame inside one chunk is handed out as a view of it (no
 * copy); a frame split over chunks is copied once into a buffer of its own size, and only its
 * bytes are taken from the next chunk, whose later frames are views again. Frames larger than
 * `maxFrameSize` (our SETTINGS_MAX_FRAME_SIZE) are refused before their payload is buffered.
 */
export class FrameReader {
  /** The start of a frame header split over chunks. */
  private readonly header = Buffer.alloc(FRAME_HEADER_BYTES);
  private headerFill = 0;
  /** A frame split over chunks, allocated at its whole size once its header is known. */
  private partial: Buffer | undefined;
  private partialFill = 0;

  constructor(private readonly maxFrameSize: number) {}

  /** Feeds one chunk; calls `onFrame` for every frame it completes. Throws ConnectionError. */
  push(chunk: Buffer, onFrame: FrameHandler): void {
    const end = chunk.length;
    let at = this.headerFill > 0 || this.partial !== undefined ? this.continueSplit(chunk, onFrame) : 0;
    while (end - at >= FRAME_HEADER_BYTES) {
      const length = this.checkedLength(chunk, at);
      if (end - at < FRAME_HEADER_BYTES + length) break;
      const start = at + FRAME_HEADER_BYTES;
      at = start + length;
      emit(chunk, start - FRAME_HEADER_BYTES, chunk.subarray(start, at), onFrame);
    }
    if (at < end) this.keepTail(chunk, at);
  }

  /** Bytes of an incomplete frame held back. */
  get buffered(): number {
    return this.headerFill + this.partialFill;
  }

  private checkedLength(bytes: Buffer, at: number): number {
    const length = (bytes[at] << 16) | (bytes[at + 1] << 8) | bytes[at + 2];
    if (length > this.maxFrameSize) {
      throw new ConnectionError(
        ErrorCode.FRAME_SIZE_ERROR,
        `frame of ${length} bytes exceeds SETTINGS_MAX_FRAME_SIZE ${this.maxFrameSize}`,
      );
    }
    return length;
  }

  /** Copies an incomplete frame at the end of `chunk` (a copy: a small remainder must not pin the chunk). */
  private keepTail(chunk: Buffer, at: number): void {
    const rest = chunk.length - at;
    if (rest < FRAME_HEADER_BYTES) {
      chunk.copy(this.header, 0, at);
      this.headerFill = rest;
      return;
    }
    this.partial = Buffer.allocUnsafe(FRAME_HEADER_BYTES + this.checkedLength(chunk, at));
    this.partialFill = chunk.copy(this.partial, 0, at);
  }

  /** Completes the frame split over chunks from the start of `chunk`; returns where the rest begins. */
  private continueSplit(chunk: Buffer, onFrame: FrameHandler): number {
    let at = 0;
    if (this.partial === undefined) {
      at = chunk.copy(this.header, this.headerFill, 0, FRAME_HEADER_BYTES - this.headerFill);
      this.headerFill += at;
      if (this.headerFill < FRAME_HEADER_BYTES) return at;
      this.headerFill = 0;
      this.partial = Buffer.allocUnsafe(FRAME_HEADER_BYTES + this.checkedLength(this.header, 0));
      this.partialFill = this.header.copy(this.partial, 0);
    }
    const frame = this.partial;
    const taken = chunk.copy(frame, this.partialFill, at, at + frame.length - this.partialFill);
    this.partialFill += taken;
    at += taken;
    if (this.partialFill < frame.length) return at;
    this.partial = undefined;
    this.partialFill = 0;
    emit(frame, 0, frame.subarray(FRAME_HEADER_BYTES), onFrame);
    return at;
  }
}

/** Hands out the frame whose header starts at `at` of `bytes`. */
function emit(bytes: Buffer, at: number, payload: Buffer, onFrame: FrameHandler): void {
  // The reserved bit is ignored on receipt (RFC 9113 §4.1).
  onFrame(bytes[at + 3], bytes[at + 4], bytes.readUInt32BE(at + 5) & 0x7fffffff, payload);
}

/** Writes a frame header into `out` at `at`. */
function writeFrameHeader(out: Buffer, at: number, length: number, type: number, flags: number, streamId: number): void {
  out[at] = (length >>> 16) & 0xff;
  out[at + 1] = (length >>> 8) & 0xff;
  out[at + 2] = length & 0xff;
  out[at + 3] = type;
  out[at + 4] = flags;
  out.writeUInt32BE(streamId, at + 5);
}

/** One frame with its payload copied in. */
export function encodeFrame(type: number, flags: number, streamId: number, payload?: Uint8Array): Buffer {
  const length = payload?.length ?? 0;
  const out = Buffer.allocUnsafe(FRAME_HEADER_BYTES + length);
  writeFrameHeader(out, 0, length, type, flags, streamId);
  if (payload !== undefined) out.set(payload, FRAME_HEADER_BYTES);
  return out;
}

/**
 * Payloads at least this long are sent as they are, behind a header of their own, instead of being
 * copied next to it: a streamed body goes out as views of the replies that carry it (the
 * connection writes them with one writev), and a megabyte of body is not copied once more.
 */
export const ZERO_COPY_PAYLOAD_BYTES = 4096;

/**
 * DATA frames for `data`, split at `maxFrameSize`; END_STREAM on the last when `endStream`. An
 * empty `data` gives one empty frame (how a stream ends without data). Below
 * ZERO_COPY_PAYLOAD_BYTES, one buffer with the payload copied in; from there on, encodeDataFramesOver's
 * headers and views of `data` (which must not change until written).
 */
export function encodeDataFrames(streamId: number, data: Uint8Array, maxFrameSize: number, endStream: boolean): Buffer[] {
  if (data.length >= ZERO_COPY_PAYLOAD_BYTES) return encodeDataFramesOver(streamId, [data], data.length, maxFrameSize, endStream);
  // Below ZERO_COPY_PAYLOAD_BYTES a payload fits one frame: a peer's SETTINGS_MAX_FRAME_SIZE is at least 16,384.
  const out = Buffer.allocUnsafe(FRAME_HEADER_BYTES + data.length);
  writeFrameHeader(out, 0, data.length, FrameType.DATA, endStream ? Flag.END_STREAM : 0, streamId);
  out.set(data, FRAME_HEADER_BYTES);
  return [out];
}

/**
 * DATA frames for the concatenation of `parts` (one buffer, or one message in pieces; `total` bytes
 * in all), split at `maxFrameSize` as the joined bytes would be: each frame's header, then views of
 * the parts it spans, none copied (the connection joins runs of small ones as it writes); END_STREAM
 * on the last when `endStream`. The parts must not change until written.
 */
export function encodeDataFramesOver(
  streamId: number,
  parts: readonly Uint8Array[],
  total: number,
  maxFrameSize: number,
  endStream: boolean,
): Buffer[] {
  const frames = Math.max(1, Math.ceil(total / maxFrameSize));
  const headers = Buffer.allocUnsafe(frames * FRAME_HEADER_BYTES);
  const out: Buffer[] = [];
  let part = 0;
  let offset = 0;
  for (let f = 0; f < frames; f++) {
    const length = Math.min(maxFrameSize, total - f * maxFrameSize);
    const at = f * FRAME_HEADER_BYTES;
    writeFrameHeader(headers, at, length, FrameType.DATA, endStream && f === frames - 1 ? Flag.END_STREAM : 0, streamId);
    out.push(headers.subarray(at, at + FRAME_HEADER_BYTES));
    for (let left = length; left > 0;) {
      const piece = parts[part];
      const take = Math.min(left, piece.length - offset);
      if (take > 0) out.push(Buffer.from(piece.buffer, piece.byteOffset + offset, take));
      offset += take;
      left -= take;
      if (offset === piece.length) {
        part++;
        offset = 0;
      }
    }
  }
  return out;
}

/** A header block as HEADERS (+ CONTINUATION) frames no larger than `maxFrameSize`. */
export function encodeHeadersFrames(streamId: number, block: Uint8Array, maxFrameSize: number, endStream: boolean): Buffer {
  if (block.length <= maxFrameSize) {
    return encodeFrame(FrameType.HEADERS, Flag.END_HEADERS | (endStream ? Flag.END_STREAM : 0), streamId, block);
  }
  const parts: Buffer[] = [];
  for (let from = 0; from < block.length; from += maxFrameSize) {
    const last = from + maxFrameSize >= block.length;
    const type = from === 0 ? FrameType.HEADERS : FrameType.CONTINUATION;
    const flags = (last ? Flag.END_HEADERS : 0) | (from === 0 && endStream ? Flag.END_STREAM : 0);
    parts.push(encodeFrame(type, flags, streamId, block.subarray(from, from + maxFrameSize)));
  }
  return Buffer.concat(parts);
}

export function encodeSettings(settings: ReadonlyArray<readonly [number, number]>): Buffer {
  const payload = Buffer.allocUnsafe(6 * settings.length);
  settings.forEach(([id, value], i) => {
    payload.writeUInt16BE(id, 6 * i);
    payload.writeUInt32BE(value, 6 * i + 2);
  });
  return encodeFrame(FrameType.SETTINGS, 0, 0, payload);
}

export const SETTINGS_ACK = encodeFrame(FrameType.SETTINGS, Flag.ACK, 0);

export function encodeWindowUpdate(streamId: number, increment: number): Buffer {
  const out = Buffer.allocUnsafe(FRAME_HEADER_BYTES + 4);
  writeFrameHeader(out, 0, 4, FrameType.WINDOW_UPDATE, 0, streamId);
  out.writeUInt32BE(increment, FRAME_HEADER_BYTES);
  return out;
}

export function encodeRstStream(streamId: number, code: number): Buffer {
  const out = Buffer.allocUnsafe(FRAME_HEADER_BYTES + 4);
  writeFrameHeader(out, 0, 4, FrameType.RST_STREAM, 0, streamId);
  out.writeUInt32BE(code, FRAME_HEADER_BYTES);
  return out;
}

export function encodeGoaway(lastStreamId: number, code: number, debug = ''): Buffer {
  const text = Buffer.from(debug, 'utf8');
  const payload = Buffer.allocUnsafe(8 + text.length);
  payload.writeUInt32BE(lastStreamId & 0x7fffffff, 0);
  payload.writeUInt32BE(code, 4);
  payload.set(text, 8);
  return encodeFrame(FrameType.GOAWAY, 0, 0, payload);
}

export function encodePing(payload: Uint8Array, ack: boolean): Buffer {
  return encodeFrame(FrameType.PING, ack ? Flag.ACK : 0, 0, payload);
}

/**
 * The fragment of a HEADERS or DATA payload without its padding (and, for HEADERS, without the
 * priority fields). Throws ConnectionError when the padding does not fit (RFC 9113 §6.1, §6.2).
 */
export function unpad(payload: Buffer, flags: number, type: number): Buffer {
  // The usual frame (what Envoy and gRPC clients send): nothing to cut, and no view to allocate.
  if ((flags & (Flag.PADDED | Flag.PRIORITY)) === 0) return payload;
  let from = 0;
  let to = payload.length;
  if ((flags & Flag.PADDED) !== 0) {
    if (payload.length < 1) throw new ConnectionError(ErrorCode.FRAME_SIZE_ERROR, 'padded frame without a pad length');
    const padLength = payload[0];
    from = 1;
    to -= padLength;
  }
  if (type === FrameType.HEADERS && (flags & Flag.PRIORITY) !== 0) from += 5;
  if (to < from) throw new ConnectionError(ErrorCode.PROTOCOL_ERROR, 'padding longer than the frame');
  return payload.subarray(from, to);
}

/** The stream a HEADERS frame with the PRIORITY flag depends on (its 31-bit dependency), or -1 without the flag. */
export function headersDependency(payload: Buffer, flags: number): number {
  if ((flags & Flag.PRIORITY) === 0) return -1;
  const at = (flags & Flag.PADDED) !== 0 ? 1 : 0;
  return payload.length >= at + 4 ? payload.readUInt32BE(at) & 0x7fffffff : -1;
}
