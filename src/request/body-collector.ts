// A request body that arrives in pieces (STREAMED and FULL_DUPLEX_STREAMED send one ext_proc
// message per chunk Envoy read), collected into one growing buffer as the pieces come. Keeping
// each piece and concatenating at the end held every body twice at its end (the pieces and the
// whole), copied a megabyte on the message that completes it (the one the client is waiting on),
// and left the pieces to the garbage collector as a megabyte of external memory per long prompt.
// Here each piece is copied once, when it arrives; the read buffer it came in dies young. The
// buffer is sized by the declared content-length when there is one (one allocation), else grown by
// doubling. A body that arrives whole in one piece (BUFFERED) is kept as it came: no copy.
// Pure: bytes in, one buffer out.

import { retainedPiece } from '../util/retained-piece.js';

const EMPTY = Buffer.alloc(0);
/** The first allocation when no length is declared: most chat bodies fit. */
const FIRST_CAPACITY = 16 * 1024;

export class BodyCollector {
  /** The one piece so far, as it came (a view of its message): copied only if a second follows. */
  private first: Buffer | undefined;
  private buffer: Buffer | undefined;
  /** Bytes collected. */
  bytes = 0;
  /** Pieces collected, empty ones included (STREAMED answers each message Envoy sent). */
  pieces = 0;

  /**
   * `expectedBytes`: the declared content-length, if any (checked against the limit by the caller);
   * `maxBytes`: the limit, so the doubling never allocates beyond it.
   */
  constructor(
    private readonly expectedBytes: number | undefined,
    private readonly maxBytes: number,
  ) {}

  add(piece: Buffer): void {
    this.pieces++;
    if (piece.length === 0) return;
    if (this.bytes === 0) {
      this.first = piece;
      this.bytes = piece.length;
      return;
    }
    const needed = this.bytes + piece.length;
    if (this.buffer === undefined || this.buffer.length < needed) this.grow(needed);
    piece.copy(this.buffer as Buffer, this.bytes);
    this.bytes = needed;
  }

  /** The whole body: the one piece (copied if it is a small view of a larger read), or a view of the buffer. */
  body(): Buffer {
    if (this.first !== undefined) return retainedPiece(this.first);
    return this.buffer === undefined ? EMPTY : this.buffer.subarray(0, this.bytes);
  }

  private grow(needed: number): void {
    const declared = this.expectedBytes !== undefined && this.expectedBytes >= needed ? this.expectedBytes : 0;
    const doubled = Math.min(this.maxBytes, Math.max(FIRST_CAPACITY, 2 * (this.buffer?.length ?? 0)));
    const grown = Buffer.allocUnsafe(Math.max(needed, declared === 0 ? doubled : declared));
    if (this.first !== undefined) {
      this.first.copy(grown, 0);
      this.first = undefined;
    } else if (this.buffer !== undefined) {
      this.buffer.copy(grown, 0, 0, this.bytes);
    }
    this.buffer = grown;
  }
}
