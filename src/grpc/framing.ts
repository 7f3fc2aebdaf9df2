// gRPC's message framing over an HTTP/2 stream (the "Length-Prefixed-Message" of the gRPC over
// HTTP/2 protocol): a 1-byte compressed flag, a 4-byte big-endian length, then the message.
// Pure: bytes in, messages out. DATA frames split and merge messages arbitrarily, so the
// deframer reassembles them whatever the chunking.

/** Why a byte stream cannot be read as gRPC messages; `code` is the gRPC status to end the call with. */
export class GrpcFramingError extends Error {
  constructor(
    readonly code: 'RESOURCE_EXHAUSTED' | 'INTERNAL',
    message: string,
  ) {
    super(message);
    this.name = 'GrpcFramingError';
  }
}

export const FRAME_HEADER_BYTES = 5;

/**
 * One length-prefixed message as written: a Buffer, or pieces written in order (a long body's own
 * bytes between the bytes around it, so they are not copied into one frame).
 */
export type FramedMessage = Buffer | readonly Buffer[];

/** The framed message as one Buffer (a copy only when it came in pieces). */
export function joinedFrame(frame: FramedMessage): Buffer {
  return Buffer.isBuffer(frame) ? frame : Buffer.concat(frame);
}

/** One message with its prefix (flag 0: we never compress). */
export function frameMessage(message: Uint8Array): Buffer {
  const framed = Buffer.allocUnsafe(FRAME_HEADER_BYTES + message.length);
  framed[0] = 0;
  framed.writeUInt32BE(message.length, 1);
  framed.set(message, FRAME_HEADER_BYTES);
  return framed;
}

/**
 * The most a split message may allocate ahead of its bytes: a prefix that claims more is grown into
 * as its bytes arrive, so a length alone (up to the message limit) cannot make us allocate it.
 */
const AHEAD_BYTES = 8 * 1024 * 1024;

/**
 * Reassembles messages from the chunks of one stream. A chunk that holds whole messages yields
 * views into it (no copy); a message split over chunks is copied once, piece by piece as the
 * chunks come, into a buffer of its size. Copying as they come, rather than keeping views and
 * joining them at the end, lets each socket read die young instead of pinning a buffered body
 * twice until its last chunk, and takes the copy off the chunk that completes the message (the one
 * Envoy's request waits on).
 */
export class MessageDeframer {
  /** Bytes of the current frame's 5-byte prefix seen so far (kept until the prefix is whole). */
  private readonly header = Buffer.alloc(FRAME_HEADER_BYTES);
  private headerFill = 0;
  /** Length of the message being collected; -1 while its prefix is incomplete. */
  private expected = -1;
  /** The split message being collected, and how many of its bytes are in. */
  private partial: Buffer | undefined;
  private collected = 0;

  constructor(private readonly maxMessageBytes: number) {}

  /** True when no partial prefix or message is pending (the stream may end here). */
  get idle(): boolean {
    return this.headerFill === 0 && this.expected < 0;
  }

  /** Feeds one chunk; calls `onMessage` for every message it completes, in order. Throws GrpcFramingError. */
  push(chunk: Buffer, onMessage: (message: Buffer) => void): void {
    let at = 0;
    const end = chunk.length;
    while (at < end) {
      if (this.expected < 0) {
        // Fast path: a whole prefix in this chunk and nothing pending.
        if (this.headerFill === 0 && end - at >= FRAME_HEADER_BYTES) {
          this.expected = this.readPrefix(chunk, at);
          at += FRAME_HEADER_BYTES;
        } else {
          const take = Math.min(FRAME_HEADER_BYTES - this.headerFill, end - at);
          chunk.copy(this.header, this.headerFill, at, at + take);
          this.headerFill += take;
          at += take;
          if (this.headerFill < FRAME_HEADER_BYTES) return;
          this.headerFill = 0;
          this.expected = this.readPrefix(this.header, 0);
        }
      }
      const missing = this.expected - this.collected;
      if (this.collected === 0 && end - at >= missing) {
        // The whole message is inside this chunk: hand out a view.
        const message = chunk.subarray(at, at + missing);
        at += missing;
        this.expected = -1;
        onMessage(message);
        continue;
      }
      const take = Math.min(missing, end - at);
      if (take > 0) {
        const into = this.room(this.collected + take);
        chunk.copy(into, this.collected, at, at + take);
      }
      this.collected += take;
      at += take;
      if (this.collected < this.expected) return;
      const message = this.partial ?? Buffer.alloc(0);
      this.partial = undefined;
      this.collected = 0;
      this.expected = -1;
      onMessage(message);
    }
  }

  /** The split message's buffer with room for `needed` bytes: its whole size, or what has arrived if it claims more than AHEAD_BYTES. */
  private room(needed: number): Buffer {
    const current = this.partial;
    if (current !== undefined && current.length >= needed) return current;
    const size =
      this.expected <= AHEAD_BYTES ? this.expected : Math.min(this.expected, Math.max(needed, 2 * (current?.length ?? 0), AHEAD_BYTES));
    const grown = Buffer.allocUnsafe(size);
    if (current !== undefined) current.copy(grown, 0, 0, this.collected);
    this.partial = grown;
    return grown;
  }

  private readPrefix(buf: Buffer, at: number): number {
    const flag = buf[at];
    const length = buf.readUInt32BE(at + 1);
    if (flag !== 0) {
      // We announce no grpc-encoding, so a compressed message is a protocol violation (flag 1) or garbage.
      throw new GrpcFramingError(
        'INTERNAL',
        flag === 1 ? 'compressed message received, but no compression was negotiated' : `invalid message flag ${flag}`,
      );
    }
    if (length > this.maxMessageBytes) {
      throw new GrpcFramingError('RESOURCE_EXHAUSTED', `message of ${length} bytes exceeds the limit of ${this.maxMessageBytes}`);
    }
    return length;
  }
}
