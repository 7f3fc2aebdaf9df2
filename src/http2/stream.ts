// One stream of our HTTP/2 connection (RFC 9113 §5), as its handler (the gRPC call) sees it: send
// the response header block, DATA within the flow-control windows (what does not fit waits for
// WINDOW_UPDATE, in order), the end or a reset; and hear the peer's DATA, end and close. The
// connection (connection.ts) owns the frames, the windows it shares and the stream's lifecycle.
import { encodeDataFrames, encodeDataFramesOver, encodeHeadersFrames, encodeRstStream, ErrorCode } from './frames.js';

/** What a stream needs of its connection. */
export interface StreamHost {
  /** The peer's SETTINGS_MAX_FRAME_SIZE: the largest frame we may send. */
  readonly peerMaxFrameSize: number;
  /** Connection-level send window. */
  sendWindow: number;
  /** The socket's buffer is full: we stopped reading the peer until it drains. */
  readonly congested: boolean;
  /** Stream writes since the read being answered came in. */
  dataWritesSinceRead: number;
  /** Streams with DATA waiting for window. */
  readonly blockedStreams: Set<Http2Stream>;
  queue(frame: Buffer): void;
  /** Queues several buffers in order (a frame may be its header and a view of its payload). */
  queueAll(parts: readonly Buffer[]): void;
  closeStream(stream: Http2Stream, close: StreamClose): void;
}

/** How a stream ended, told to its handlers exactly once. */
export type StreamClose =
  /** Both sides sent END_STREAM (or we ended and told the peer to stop with NO_ERROR). */
  | { readonly kind: 'done' }
  /** The peer reset it (RST_STREAM with `code`). */
  | { readonly kind: 'reset'; readonly code: number }
  /** We reset it. */
  | { readonly kind: 'local-reset'; readonly code: number }
  /** The connection went away with the stream still open. */
  | { readonly kind: 'connection-lost' };

export interface Http2StreamHandlers {
  /** A non-empty piece of the request body. */
  onData(chunk: Buffer): void;
  /** The peer sent END_STREAM. Deferred to the end of the read it came in, so a reset in the same read wins. */
  onEnd(): void;
  onClose(close: StreamClose): void;
}

const EMPTY = Buffer.alloc(0);
const IGNORE: Http2StreamHandlers = { onData: () => undefined, onEnd: () => undefined, onClose: () => undefined };

/** One stream, as its gRPC call sees it. */
export class Http2Stream {
  handlers: Http2StreamHandlers = IGNORE;
  /** We sent END_STREAM (or reset). */
  localEnded = false;
  /** The peer sent END_STREAM. */
  remoteEnded = false;
  closed = false;
  headersSent = false;
  /** When it opened (the connection's clock, ms). */
  openedAt = 0;
  /**
   * The peer sent something (the HEADERS that opened it, DATA) that no write of ours answered yet:
   * what tells a peer resetting streams without reading our replies from Envoy, which resets a
   * stream only after our reply to its last message (abuse-limits.ts).
   */
  waiting = true;
  /** Bytes of DATA still to come by the request's `content-length`; -1 when it declared none. */
  remainingLength = -1;
  /** Bytes we may still send before the peer grants more (may go negative on a SETTINGS change). */
  sendWindow: number;
  /** Bytes the peer may still send us before we grant more. */
  receiveWindow: number;
  /** Received bytes not yet granted back. */
  receiveConsumed = 0;
  /** DATA waiting for window, and the end that must follow it (trailers, or null: an empty DATA). */
  private blocked: Buffer[] | undefined;
  private blockedEnd: Uint8Array | null | undefined;

  constructor(
    private readonly connection: StreamHost,
    readonly id: number,
    sendWindow: number,
    receiveWindow: number,
  ) {
    this.sendWindow = sendWindow;
    this.receiveWindow = receiveWindow;
  }

  /** Sends the response header block; `endStream` for a headers-only (trailers-only) response. */
  respond(block: Uint8Array, endStream = false): void {
    if (this.localEnded || this.closed) return;
    this.headersSent = true;
    this.waiting = false;
    this.connection.queue(encodeHeadersFrames(this.id, block, this.connection.peerMaxFrameSize, endStream));
    if (endStream) this.endedLocally();
  }

  /** Sends body bytes; false when the connection's write buffer is full (the caller should pause). */
  write(data: Uint8Array): boolean {
    if (this.localEnded || this.closed || data.length === 0) return !this.connection.congested;
    this.waiting = false;
    this.connection.dataWritesSinceRead++;
    this.sendOrHold(data);
    return !this.connection.congested;
  }

  /**
   * One message in pieces (a long body between the bytes around it): sent as write() would send
   * their concatenation, in the same DATA frames and counted as one write, without joining them.
   */
  writeParts(parts: readonly Uint8Array[]): boolean {
    let total = 0;
    for (let i = 0; i < parts.length; i++) total += parts[i].length;
    if (this.localEnded || this.closed || total === 0) return !this.connection.congested;
    this.waiting = false;
    const connection = this.connection;
    connection.dataWritesSinceRead++;
    if (this.blocked === undefined && Math.min(this.sendWindow, connection.sendWindow) >= total) {
      this.sendWindow -= total;
      connection.sendWindow -= total;
      connection.queueAll(encodeDataFramesOver(this.id, parts, total, connection.peerMaxFrameSize, false));
      return !connection.congested;
    }
    // Short of window (rare: the peer reads as fast as we write): piece by piece, as write() holds
    // back, in order, whatever the window does not allow yet.
    for (let i = 0; i < parts.length; i++) if (parts[i].length > 0) this.sendOrHold(parts[i]);
    return !connection.congested;
  }

  /** Sends `data` within the windows, or holds it (copied) behind what already waits for window. */
  private sendOrHold(data: Uint8Array): void {
    if (this.blocked !== undefined) this.blocked.push(Buffer.from(data));
    else this.sendData(data);
  }

  /** Ends our side with a trailer block, or without trailers (an empty DATA frame), after any DATA still waiting for window. */
  end(trailers?: Uint8Array): void {
    if (this.localEnded || this.closed) return;
    this.waiting = false;
    if (this.blocked !== undefined) {
      this.blockedEnd = trailers ?? null;
      this.localEnded = true;
      return;
    }
    this.sendEnd(trailers ?? null);
  }

  private sendEnd(trailers: Uint8Array | null): void {
    const { peerMaxFrameSize } = this.connection;
    if (trailers === null) this.connection.queueAll(encodeDataFrames(this.id, EMPTY, peerMaxFrameSize, true));
    else this.connection.queue(encodeHeadersFrames(this.id, trailers, peerMaxFrameSize, true));
    this.endedLocally();
  }

  /** Resets the stream (RST_STREAM with `code`). */
  reset(code: number): void {
    if (this.closed) return;
    this.connection.queue(encodeRstStream(this.id, code));
    this.connection.closeStream(this, { kind: 'local-reset', code });
  }

  /** Sends what the windows allow now; queues the rest until WINDOW_UPDATE. False when some had to wait. */
  private sendData(data: Uint8Array): boolean {
    const connection = this.connection;
    const allowed = Math.min(this.sendWindow, connection.sendWindow);
    if (allowed >= data.length) {
      this.sendWindow -= data.length;
      connection.sendWindow -= data.length;
      connection.queueAll(encodeDataFrames(this.id, data, connection.peerMaxFrameSize, false));
      return true;
    }
    const now = Math.max(0, allowed);
    if (now > 0) {
      this.sendWindow -= now;
      connection.sendWindow -= now;
      connection.queueAll(encodeDataFrames(this.id, data.subarray(0, now), connection.peerMaxFrameSize, false));
    }
    this.blocked = [Buffer.from(data.subarray(now))];
    connection.blockedStreams.add(this);
    return false;
  }

  /** The windows grew: send what waits, then the end if it was held back. */
  resumeBlocked(): void {
    const waiting = this.blocked;
    if (waiting === undefined || this.closed) return;
    this.blocked = undefined;
    this.connection.blockedStreams.delete(this);
    for (let i = 0; i < waiting.length; i++) {
      if (!this.sendData(waiting[i])) {
        // Out of window again: what is left waits behind the part sendData just held back, in order.
        // (The cast: TypeScript keeps `blocked` narrowed to undefined across the call that set it.)
        (this.blocked as Buffer[] | undefined)?.push(...waiting.slice(i + 1));
        return;
      }
    }
    const end = this.blockedEnd;
    if (end !== undefined) {
      this.blockedEnd = undefined;
      this.sendEnd(end);
    }
  }

  private endedLocally(): void {
    this.localEnded = true;
    if (this.remoteEnded) {
      this.connection.closeStream(this, { kind: 'done' });
      return;
    }
    // A complete response before the whole request: ask the peer to stop sending, without error
    // (RFC 9113 §8.1), and forget the stream.
    this.connection.queue(encodeRstStream(this.id, ErrorCode.NO_ERROR));
    this.connection.closeStream(this, { kind: 'done' });
  }
}
