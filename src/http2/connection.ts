// The server side of one HTTP/2 connection (RFC 9113), written directly on the socket: the
// preface and SETTINGS, streams and their states, flow control both ways, PING, GOAWAY, and the
// errors that end a stream or the connection. It knows nothing of gRPC: it hands each new stream
// and its header fields to `onStream` and moves DATA both ways.
//
// Why our own and not node:http2: for Envoy's ext_proc stream (small messages, one request per
// stream, every reply awaited) node:http2's per-stream Duplex and its callbacks through nghttp2
// cost more CPU than Envoy spends on the whole HTTP request (docs/benchmarks-history.md, "Our own
// HTTP/2"). This connection does only what a gRPC server needs: no server push, no priorities, one
// write per batch of replies.
//
// Writes are batched: frames queue during a turn of the event loop and go out in one socket write
// from a microtask, so the replies to every message of one read leave together.
import type { Socket } from 'node:net';
import { checkRequestFields, trailerFieldsProblem } from './field-rules.js';
import { HeaderBlockCharge, LocallyClosedStreams, RAPID_RESET_EXPLANATION, RapidResetCount } from './abuse-limits.js';
import { Http2Stream } from './stream.js';
import type { StreamClose, StreamHost } from './stream.js';
import { HeaderListTooLargeError, HpackDecoder } from './hpack.js';
import {
  CONNECTION_PREFACE,
  ConnectionError,
  DEFAULT_MAX_FRAME_SIZE,
  DEFAULT_WINDOW_SIZE,
  encodeGoaway,
  encodePing,
  encodeRstStream,
  encodeSettings,
  encodeWindowUpdate,
  ErrorCode,
  Flag,
  FrameReader,
  FrameType,
  headersDependency,
  MAX_FRAME_SIZE_LIMIT,
  MAX_WINDOW_SIZE,
  SETTINGS_ACK,
  Setting,
  unpad,
  ZERO_COPY_PAYLOAD_BYTES,
} from './frames.js';

export interface Http2ConnectionOptions {
  /** Receive window we grant each stream (SETTINGS_INITIAL_WINDOW_SIZE). */
  readonly streamWindow: number;
  /** Receive window we grant the connection. */
  readonly connectionWindow: number;
  /** Largest decoded header list we accept per stream (SETTINGS_MAX_HEADER_LIST_SIZE). */
  readonly maxHeaderListBytes: number;
  /**
   * Streams the peer may have open at once (SETTINGS_MAX_CONCURRENT_STREAMS); one more is refused
   * with REFUSED_STREAM, which a client retries elsewhere (Envoy opens another connection).
   * Absent: no limit.
   */
  readonly maxConcurrentStreams?: number;
  /** A new stream and its request header fields. Set `stream.handlers` before returning. */
  readonly onStream: (stream: Http2Stream, headers: ReadonlyArray<readonly [string, string]>) => void;
  /**
   * A peer's protocol error, a refused stream, a handler that threw: one of a closed set of kinds
   * (fit for a metric label), with details for a log line. Never called on the path of a
   * well-behaved peer's messages.
   */
  readonly onProtocolEvent?: (kind: ProtocolEventKind, details: Record<string, unknown>) => void;
  /**
   * Told at each socket write that carries stream DATA written while handling a read: the seconds
   * since that read's callback began, and how many stream writes the socket write carries (decoding,
   * handling, encoding, and waiting for the other work of the same read). A lower bound of our share
   * of the round trip: bytes waiting in the kernel for the event loop and TLS record decryption come
   * before it. Writes made later (after an await) are not told.
   */
  readonly onReadAnswered?: (seconds: number, dataWrites: number) => void;
  /** Told the size of each socket read, before it is handled. */
  readonly onBytesRead?: (bytes: number) => void;
}

/** What `onProtocolEvent` reports. */
export const PROTOCOL_EVENT_KINDS = [
  /** The connection ended with GOAWAY and an error code (see `code`), rapid reset and header floods aside. */
  'connection_error',
  /** Most streams were reset while waiting for us (abuse-limits.ts): GOAWAY ENHANCE_YOUR_CALM. */
  'rapid_reset',
  /** A header block past the size limit in CONTINUATION frames: GOAWAY ENHANCE_YOUR_CALM. */
  'header_flood',
  /** A request or trailers malformed by RFC 9113 §8 (fields, pseudo-headers, content-length): RST_STREAM PROTOCOL_ERROR. */
  'malformed_request',
  /** A request header list above SETTINGS_MAX_HEADER_LIST_SIZE: RST_STREAM. */
  'header_list_too_large',
  /** A stream over SETTINGS_MAX_CONCURRENT_STREAMS: RST_STREAM REFUSED_STREAM. */
  'refused_stream',
  /** Another stream error of the peer's (flow control, frames on a half-closed stream): RST_STREAM. */
  'stream_error',
  /** Our own stream handler threw: RST_STREAM INTERNAL_ERROR. */
  'handler_error',
  /** The socket failed (reset by the peer, TLS error after the handshake). */
  'socket_error',
] as const;
export type ProtocolEventKind = (typeof PROTOCOL_EVENT_KINDS)[number];

const PREFACE_BYTES = CONNECTION_PREFACE.length;
/** Ranges of stream ids a peer skipped that we remember (clients number streams one after another; beyond this, cosmetic). */
const SKIPPED_RANGES_MAX = 32;
/** How long a connection ended for a protocol error gets to write its GOAWAY before it is destroyed. */
const GOAWAY_FLUSH_MS = 1000;
const MAX_STREAM_ID = 2 ** 31 - 1;
/** A flag bit no frame uses, set on a header block's flags when its HEADERS frame made the stream depend on itself. */
const SELF_DEPENDENT = 0x100;

/** A peer that makes us work without doing the same (abuse-limits.ts): GOAWAY ENHANCE_YOUR_CALM. */
class AbuseError extends ConnectionError {
  constructor(
    readonly kind: 'rapid_reset' | 'header_flood',
    message: string,
  ) {
    super(ErrorCode.ENHANCE_YOUR_CALM, message);
  }
}

/** The payload of close()'s PING, told apart from keepalive PINGs (all zeros) by its ACK. */
const SHUTDOWN_PING = Buffer.from('shutdown', 'latin1');
export class Http2Connection implements StreamHost {
  /** The peer's SETTINGS_MAX_FRAME_SIZE: the largest frame we may send. */
  peerMaxFrameSize = DEFAULT_MAX_FRAME_SIZE;
  /** Connection-level send window. */
  sendWindow = DEFAULT_WINDOW_SIZE;
  /** The socket's buffer is full: we stopped reading the peer until it drains. */
  congested = false;
  readonly blockedStreams = new Set<Http2Stream>();
  private readonly streams = new Map<number, Http2Stream>();
  private peerInitialWindow = DEFAULT_WINDOW_SIZE;
  private readonly reader = new FrameReader(DEFAULT_MAX_FRAME_SIZE);
  private readonly decoder: HpackDecoder;
  private preface: Buffer | undefined = Buffer.alloc(0);
  private settingsReceived = false;
  private lastStreamId = 0;
  private receiveConsumed = 0;
  /** A header block in CONTINUATION frames: its stream, flags and fragments so far. */
  private continuationStream = 0;
  private continuationFlags = 0;
  private continuationParts: Buffer[] = [];
  private continuationBytes = 0;
  private readonly headerBlockCharge: HeaderBlockCharge;
  /** Streams whose END_STREAM came in the current read (told after the read: a reset in it wins). */
  private endedInRead: Http2Stream[] = [];
  private pending: Buffer[] = [];
  private pendingBytes = 0;
  private flushScheduled = false;
  private readonly resets = new RapidResetCount();
  /** Streams we closed before the peer did: their late frames are dropped, not errors. */
  private readonly locallyClosed = new LocallyClosedStreams();
  /** Stream ids the peer skipped (implicitly closed, never used), as [first, last] pairs. */
  private readonly skippedIds: Array<readonly [number, number]> = [];
  /** performance.now() at the start of the current read: the clock of stream lifetimes. */
  private now = 0;
  /** performance.now() when the last stream closed and none was left open; -1 while streams are open. */
  private idleSinceMs: number;
  /** performance.now() when the read being answered came in; -1 outside one or when nobody is told. */
  private readStartedAt = -1;
  /** Stream writes since that read came in (counted always: cheaper than asking). */
  dataWritesSinceRead = 0;
  /** The final GOAWAY went out (an error, or the second step of close()): new streams are refused. */
  private goawaySent = false;
  /** close() sent its first GOAWAY and waits for the PING's ACK. */
  private draining = false;
  private destroyed = false;
  private pingAck: (() => void) | undefined;
  private readonly closeListeners: Array<() => void> = [];

  constructor(
    private readonly socket: Socket,
    private readonly options: Http2ConnectionOptions,
  ) {
    this.idleSinceMs = performance.now();
    this.decoder = new HpackDecoder({ maxListBytes: options.maxHeaderListBytes });
    this.headerBlockCharge = new HeaderBlockCharge(options.maxHeaderListBytes);
    socket.setNoDelay(true);
    // Our SETTINGS may go before the client's preface arrives (RFC 9113 §3.4).
    this.queue(
      encodeSettings([
        [Setting.INITIAL_WINDOW_SIZE, options.streamWindow],
        [Setting.MAX_HEADER_LIST_SIZE, options.maxHeaderListBytes],
        ...(options.maxConcurrentStreams === undefined
          ? []
          : [[Setting.MAX_CONCURRENT_STREAMS, options.maxConcurrentStreams] as [number, number]]),
      ]),
    );
    if (options.connectionWindow > DEFAULT_WINDOW_SIZE) this.queue(encodeWindowUpdate(0, options.connectionWindow - DEFAULT_WINDOW_SIZE));
    socket.on('data', this.onSocketData);
    socket.on('drain', this.onDrain);
    socket.on('error', (err) => this.options.onProtocolEvent?.('socket_error', { err }));
    socket.on('close', this.onSocketClose);
  }

  get streamCount(): number {
    return this.streams.size;
  }

  get closed(): boolean {
    return this.destroyed;
  }

  /** A graceful close has begun (close()), or the connection ended. */
  get closing(): boolean {
    return this.destroyed || this.draining || this.goawaySent;
  }

  /** How long the connection has had no open stream (ms, on performance.now()'s clock); 0 while streams are open. */
  idleMs(now: number = performance.now()): number {
    return this.idleSinceMs < 0 ? 0 : now - this.idleSinceMs;
  }

  onClose(listener: () => void): void {
    this.closeListeners.push(listener);
  }

  /**
   * Graceful close in two steps (RFC 9113 §6.8): a GOAWAY naming the highest possible stream and a
   * PING; streams the peer opens before it reads that GOAWAY are still served. The PING's ACK
   * proves it has read it: then the final GOAWAY names the last stream we took, later ones are
   * refused (REFUSED_STREAM), and the connection closes once the open streams finish. A single
   * GOAWAY would refuse a stream opened at the same moment: for Envoy, a failed ext_proc call.
   */
  close(): void {
    if (this.destroyed || this.goawaySent || this.draining) return;
    this.draining = true;
    this.queue(encodeGoaway(MAX_STREAM_ID, ErrorCode.NO_ERROR));
    this.queue(encodePing(SHUTDOWN_PING, false));
  }

  /** The peer has read our first GOAWAY: name the last stream we take, and end when they are done. */
  private finishClose(): void {
    if (this.destroyed || this.goawaySent) return;
    this.goawaySent = true;
    this.queue(encodeGoaway(this.lastStreamId, ErrorCode.NO_ERROR));
    if (this.streams.size === 0) this.endSocket();
  }

  /** Closes at once: every open stream is lost. */
  destroy(): void {
    if (this.destroyed) return;
    this.socket.destroy();
  }

  /** Sends a PING; `onAck` runs when it is answered. False when one is already outstanding. */
  ping(onAck: () => void): boolean {
    if (this.destroyed || this.pingAck !== undefined) return false;
    this.pingAck = onAck;
    this.queue(encodePing(Buffer.alloc(8), false));
    return true;
  }

  queue(frame: Buffer): void {
    if (this.destroyed) return;
    this.pending.push(frame);
    this.pendingBytes += frame.length;
    if (!this.flushScheduled) {
      this.flushScheduled = true;
      queueMicrotask(this.flush);
    }
  }

  queueAll(parts: readonly Buffer[]): void {
    for (let i = 0; i < parts.length; i++) this.queue(parts[i]);
  }

  private readonly flush = (): void => {
    this.flushScheduled = false;
    if (this.destroyed || this.pending.length === 0) return;
    const out = coalesced(this.pending, this.pendingBytes);
    this.pending = [];
    this.pendingBytes = 0;
    if (this.readStartedAt >= 0) {
      // Timed before the write: on loopback the write can hand the CPU to the reader at once, and
      // that time is the peer's, not ours.
      if (this.dataWritesSinceRead > 0)
        this.options.onReadAnswered?.((performance.now() - this.readStartedAt) / 1000, this.dataWritesSinceRead);
      this.readStartedAt = -1;
    }
    this.dataWritesSinceRead = 0;
    if (!this.write(out)) {
      // Stop reading a peer that does not read us: every frame read can add a reply (a PING or
      // SETTINGS ack, a RST_STREAM, a gRPC reply), and a peer that never takes them would have us
      // buffer without bound (the "ping flood"). Reading resumes on 'drain'.
      this.congested = true;
      this.socket.pause();
    }
  };

  /** One socket write: the buffer, or the buffers in one writev (cork: no copy into one). False when the socket is full. */
  private write(out: Buffer | readonly Buffer[]): boolean {
    if (Buffer.isBuffer(out)) return this.socket.write(out);
    let room = true;
    this.socket.cork();
    for (let i = 0; i < out.length; i++) room = this.socket.write(out[i]);
    this.socket.uncork();
    return room;
  }

  private readonly onDrain = (): void => {
    if (!this.congested) return;
    this.congested = false;
    this.socket.resume();
  };

  /** Forgets a stream and tells its handlers how it ended. */
  closeStream(stream: Http2Stream, close: StreamClose): void {
    if (stream.closed) return;
    stream.closed = true;
    stream.localEnded = true;
    this.streams.delete(stream.id);
    this.blockedStreams.delete(stream);
    // We reset it, or ended it before the peer did (RST_STREAM NO_ERROR): what the peer sent
    // before it heard may still come, and is dropped.
    if (close.kind === 'local-reset' || (close.kind === 'done' && !stream.remoteEnded))
      this.locallyClosed.add(stream.id, performance.now());
    if (this.streams.size === 0) this.idleSinceMs = performance.now();
    try {
      stream.handlers.onClose(close);
    } catch (err) {
      this.options.onProtocolEvent?.('handler_error', { err, stream: stream.id, handler: 'close' });
    }
    if (this.goawaySent && this.streams.size === 0) this.endSocket();
  }

  private endSocket(): void {
    this.flush();
    this.socket.end();
  }

  private readonly onSocketClose = (): void => {
    this.destroyed = true;
    this.pending = [];
    for (const stream of [...this.streams.values()]) this.closeStream(stream, { kind: 'connection-lost' });
    for (const listener of this.closeListeners) listener();
  };

  private readonly onSocketData = (chunk: Buffer): void => {
    if (this.destroyed) return;
    this.options.onBytesRead?.(chunk.length);
    const now = performance.now();
    this.now = now;
    // Reads can come back to back with no microtask between them (after a pause, Node hands over
    // everything buffered at once): then the replies of all of them leave in one write, timed
    // from the first.
    if (this.readStartedAt < 0) {
      if (this.options.onReadAnswered !== undefined) this.readStartedAt = now;
      this.dataWritesSinceRead = 0;
    }
    try {
      let data = chunk;
      if (this.preface !== undefined) {
        const seen = Buffer.concat([this.preface, chunk]);
        const compared = Math.min(seen.length, PREFACE_BYTES);
        if (!seen.subarray(0, compared).equals(CONNECTION_PREFACE.subarray(0, compared))) {
          throw new ConnectionError(ErrorCode.PROTOCOL_ERROR, 'not an HTTP/2 connection preface');
        }
        if (seen.length < PREFACE_BYTES) {
          this.preface = seen;
          return;
        }
        this.preface = undefined;
        data = seen.subarray(PREFACE_BYTES);
      }
      this.reader.push(data, this.onFrame);
    } catch (err) {
      this.failConnection(err);
    }
    this.tellEnds();
    this.grantConnectionWindow();
    // Nothing to write for this read: a later write answers a later read, not this one.
    if (!this.flushScheduled) this.readStartedAt = -1;
  };

  private tellEnds(): void {
    if (this.endedInRead.length === 0) return;
    const ended = this.endedInRead;
    this.endedInRead = [];
    for (const stream of ended) {
      if (stream.closed) continue;
      try {
        stream.handlers.onEnd();
      } catch (err) {
        this.options.onProtocolEvent?.('handler_error', { err, stream: stream.id, handler: 'end' });
        stream.reset(ErrorCode.INTERNAL_ERROR);
      }
    }
  }

  private failConnection(err: unknown): void {
    const code = err instanceof ConnectionError ? err.code : ErrorCode.INTERNAL_ERROR;
    const message = err instanceof Error ? err.message : String(err);
    const kind = err instanceof AbuseError ? err.kind : 'connection_error';
    this.options.onProtocolEvent?.(kind, { code, message, ...(err instanceof ConnectionError ? {} : { err }) });
    if (!this.goawaySent) {
      this.goawaySent = true;
      this.queue(encodeGoaway(this.lastStreamId, code, message));
    }
    this.flush();
    this.destroyed = true;
    this.socket.destroySoon(); // after the GOAWAY is written
    // A peer that stopped reading would keep that write, and the socket, pending forever.
    setTimeout(() => this.socket.destroy(), GOAWAY_FLUSH_MS).unref();
    for (const stream of [...this.streams.values()]) this.closeStream(stream, { kind: 'connection-lost' });
  }

  private readonly onFrame = (type: number, flags: number, streamId: number, payload: Buffer): void => {
    if (this.continuationStream !== 0 && type !== FrameType.CONTINUATION) {
      throw new ConnectionError(ErrorCode.PROTOCOL_ERROR, 'expected CONTINUATION');
    }
    if (!this.settingsReceived && type !== FrameType.SETTINGS) {
      throw new ConnectionError(ErrorCode.PROTOCOL_ERROR, 'the first frame must be SETTINGS');
    }
    switch (type) {
      case FrameType.DATA:
        this.onData(flags, streamId, payload);
        return;
      case FrameType.HEADERS:
        this.onHeaders(flags, streamId, payload);
        return;
      case FrameType.CONTINUATION:
        this.onContinuation(flags, streamId, payload);
        return;
      case FrameType.RST_STREAM:
        this.onRstStream(streamId, payload);
        return;
      case FrameType.SETTINGS:
        this.onSettings(flags, streamId, payload);
        return;
      case FrameType.PING:
        this.onPing(flags, streamId, payload);
        return;
      case FrameType.WINDOW_UPDATE:
        this.onWindowUpdate(streamId, payload);
        return;
      case FrameType.GOAWAY:
        if (streamId !== 0) throw new ConnectionError(ErrorCode.PROTOCOL_ERROR, 'GOAWAY on a stream');
        // The peer opens no more streams; the ones open carry on.
        return;
      case FrameType.PRIORITY:
        this.onPriority(streamId, payload);
        return;
      case FrameType.PUSH_PROMISE:
        throw new ConnectionError(ErrorCode.PROTOCOL_ERROR, 'a client cannot push');
      default:
        return; // unknown frame types are ignored (RFC 9113 §4.1)
    }
  };

  /** Priorities mean nothing to a server that answers in arrival order; only the frame's validity is checked. */
  private onPriority(streamId: number, payload: Buffer): void {
    if (streamId === 0) throw new ConnectionError(ErrorCode.PROTOCOL_ERROR, 'PRIORITY on stream 0');
    let code: number | undefined;
    if (payload.length !== 5) code = ErrorCode.FRAME_SIZE_ERROR;
    else if ((payload.readUInt32BE(0) & 0x7fffffff) === streamId) code = ErrorCode.PROTOCOL_ERROR; // §5.3.1: not on itself
    if (code === undefined) return;
    // A stream error (RFC 9113 §6.3); on a stream that is not open there is nothing to reset (an
    // idle stream must never see RST_STREAM), so the connection ends instead.
    const stream = this.streams.get(streamId);
    if (stream === undefined) throw new ConnectionError(code, 'invalid PRIORITY frame');
    this.streamError(stream, code, 'invalid PRIORITY frame');
  }

  /** Resets a stream for the peer's error, and says so. */
  private streamError(stream: Http2Stream, code: number, problem: string): void {
    this.options.onProtocolEvent?.('stream_error', { stream: stream.id, code, problem });
    stream.reset(code);
  }

  /**
   * A DATA or HEADERS frame on a stream that is neither open nor idle. One we closed first: the
   * peer sent it before it heard, and it is dropped. Any other (ended both ways, reset by the peer,
   * skipped): a STREAM_CLOSED connection error (RFC 9113 §5.1 "closed"; a stream error there may
   * be treated as a connection error, §5.4), or PROTOCOL_ERROR for a HEADERS frame that reuses a
   * lower id than the last (§5.1.1).
   */
  private onClosedStream(type: 'DATA' | 'HEADERS', streamId: number): void {
    if (this.locallyClosed.expectsLateFrames(streamId, this.now)) return;
    if (type === 'HEADERS' && this.wasSkipped(streamId)) {
      throw new ConnectionError(ErrorCode.PROTOCOL_ERROR, 'HEADERS with a stream id lower than one already used');
    }
    throw new ConnectionError(ErrorCode.STREAM_CLOSED, `${type} on a closed stream`);
  }

  private wasSkipped(streamId: number): boolean {
    if (this.skippedIds.length >= SKIPPED_RANGES_MAX) return true;
    return this.skippedIds.some(([first, last]) => streamId >= first && streamId <= last);
  }

  private onSettings(flags: number, streamId: number, payload: Buffer): void {
    if (streamId !== 0) throw new ConnectionError(ErrorCode.PROTOCOL_ERROR, 'SETTINGS on a stream');
    if ((flags & Flag.ACK) !== 0) {
      if (payload.length !== 0) throw new ConnectionError(ErrorCode.FRAME_SIZE_ERROR, 'SETTINGS ack with a payload');
      return;
    }
    if (payload.length % 6 !== 0) throw new ConnectionError(ErrorCode.FRAME_SIZE_ERROR, 'SETTINGS payload not a multiple of 6');
    this.settingsReceived = true;
    let windowGrew = false;
    for (let at = 0; at < payload.length; at += 6) {
      const id = payload.readUInt16BE(at);
      const value = payload.readUInt32BE(at + 2);
      if (id === Setting.INITIAL_WINDOW_SIZE) {
        if (value > MAX_WINDOW_SIZE) throw new ConnectionError(ErrorCode.FLOW_CONTROL_ERROR, 'SETTINGS_INITIAL_WINDOW_SIZE above 2^31-1');
        const delta = value - this.peerInitialWindow;
        this.peerInitialWindow = value;
        for (const stream of this.streams.values()) {
          stream.sendWindow += delta;
          if (stream.sendWindow > MAX_WINDOW_SIZE) throw new ConnectionError(ErrorCode.FLOW_CONTROL_ERROR, 'stream window above 2^31-1');
        }
        windowGrew ||= delta > 0;
      } else if (id === Setting.MAX_FRAME_SIZE) {
        if (value < DEFAULT_MAX_FRAME_SIZE || value > MAX_FRAME_SIZE_LIMIT) {
          throw new ConnectionError(ErrorCode.PROTOCOL_ERROR, `SETTINGS_MAX_FRAME_SIZE ${value} out of range`);
        }
        this.peerMaxFrameSize = value;
      } else if (id === Setting.ENABLE_PUSH) {
        if (value > 1) throw new ConnectionError(ErrorCode.PROTOCOL_ERROR, 'SETTINGS_ENABLE_PUSH not 0 or 1');
      }
      // HEADER_TABLE_SIZE: our encoder never indexes, so the peer's table size never matters.
      // MAX_CONCURRENT_STREAMS limits pushes, which we never make. Unknown settings are ignored.
    }
    // The ACK goes before any data the new window lets out: a peer (nghttp2) applies a larger
    // window of its own only once it sees our ACK, and would count earlier data against the old one.
    this.queue(SETTINGS_ACK);
    if (windowGrew) this.resumeBlocked();
  }

  private onPing(flags: number, streamId: number, payload: Buffer): void {
    if (streamId !== 0) throw new ConnectionError(ErrorCode.PROTOCOL_ERROR, 'PING on a stream');
    if (payload.length !== 8) throw new ConnectionError(ErrorCode.FRAME_SIZE_ERROR, 'PING payload not 8 bytes');
    if ((flags & Flag.ACK) === 0) {
      this.queue(encodePing(payload, true));
      return;
    }
    if (this.draining && payload.equals(SHUTDOWN_PING)) {
      this.finishClose();
      return;
    }
    const ack = this.pingAck;
    this.pingAck = undefined;
    ack?.();
  }

  private onWindowUpdate(streamId: number, payload: Buffer): void {
    if (payload.length !== 4) throw new ConnectionError(ErrorCode.FRAME_SIZE_ERROR, 'WINDOW_UPDATE payload not 4 bytes');
    const increment = payload.readUInt32BE(0) & 0x7fffffff;
    if (streamId === 0) {
      if (increment === 0) throw new ConnectionError(ErrorCode.PROTOCOL_ERROR, 'WINDOW_UPDATE of 0');
      this.sendWindow += increment;
      if (this.sendWindow > MAX_WINDOW_SIZE) throw new ConnectionError(ErrorCode.FLOW_CONTROL_ERROR, 'connection window above 2^31-1');
      this.resumeBlocked();
      return;
    }
    const stream = this.streams.get(streamId);
    if (stream === undefined) {
      if (streamId > this.lastStreamId) throw new ConnectionError(ErrorCode.PROTOCOL_ERROR, 'WINDOW_UPDATE on an idle stream');
      return; // a stream we closed; the peer had not heard yet
    }
    if (increment === 0) {
      this.streamError(stream, ErrorCode.PROTOCOL_ERROR, 'WINDOW_UPDATE of 0');
      return;
    }
    stream.sendWindow += increment;
    if (stream.sendWindow > MAX_WINDOW_SIZE) {
      this.streamError(stream, ErrorCode.FLOW_CONTROL_ERROR, 'stream window above 2^31-1');
      return;
    }
    stream.resumeBlocked();
  }

  private resumeBlocked(): void {
    for (const stream of [...this.blockedStreams]) {
      if (this.sendWindow <= 0) return;
      stream.resumeBlocked();
    }
  }

  private onRstStream(streamId: number, payload: Buffer): void {
    if (streamId === 0) throw new ConnectionError(ErrorCode.PROTOCOL_ERROR, 'RST_STREAM on stream 0');
    if (payload.length !== 4) throw new ConnectionError(ErrorCode.FRAME_SIZE_ERROR, 'RST_STREAM payload not 4 bytes');
    if (streamId > this.lastStreamId) throw new ConnectionError(ErrorCode.PROTOCOL_ERROR, 'RST_STREAM on an idle stream');
    const stream = this.streams.get(streamId);
    if (stream === undefined) return; // closed already: the peer had not heard, or resets twice
    if (this.resets.resetIsTooMany(this.now - stream.openedAt, stream.waiting)) {
      throw new AbuseError('rapid_reset', RAPID_RESET_EXPLANATION);
    }
    this.closeStream(stream, { kind: 'reset', code: payload.readUInt32BE(0) });
  }

  private onData(flags: number, streamId: number, payload: Buffer): void {
    if (streamId === 0) throw new ConnectionError(ErrorCode.PROTOCOL_ERROR, 'DATA on stream 0');
    // Flow control counts the whole payload, padding included (RFC 9113 §6.9.1).
    this.receiveConsumed += payload.length;
    if (this.receiveConsumed > this.options.connectionWindow) {
      throw new ConnectionError(ErrorCode.FLOW_CONTROL_ERROR, 'peer sent beyond the connection window');
    }
    // Padding is checked on every DATA frame, whatever its stream's state (§6.1).
    const data = unpad(payload, flags, FrameType.DATA);
    const stream = this.streams.get(streamId);
    if (stream === undefined) {
      if (streamId > this.lastStreamId) throw new ConnectionError(ErrorCode.PROTOCOL_ERROR, 'DATA on an idle stream');
      this.onClosedStream('DATA', streamId); // its window was counted above either way
      return;
    }
    if (stream.remoteEnded) {
      this.streamError(stream, ErrorCode.STREAM_CLOSED, 'DATA after END_STREAM');
      return;
    }
    stream.receiveWindow -= payload.length;
    if (stream.receiveWindow < 0) {
      this.streamError(stream, ErrorCode.FLOW_CONTROL_ERROR, 'peer sent beyond the stream window');
      return;
    }
    stream.receiveConsumed += payload.length;
    const endStream = (flags & Flag.END_STREAM) !== 0;
    // A declared content-length holds the DATA to it (§8.1.1); gRPC requests declare none.
    if (stream.remainingLength >= 0) {
      stream.remainingLength -= data.length;
      if (stream.remainingLength < 0 || (endStream && stream.remainingLength > 0)) {
        this.malformed(stream, 'DATA length differs from content-length');
        return;
      }
    }
    // The end is marked before the data is handed on: a handler that completes the response from
    // this last piece (a unary call) then closes a stream that is done both ways, rather than
    // telling the peer to stop sending what it already finished (RST_STREAM NO_ERROR).
    if (endStream) this.remoteEnd(stream);
    if (data.length > 0) {
      stream.waiting = true;
      try {
        stream.handlers.onData(data);
      } catch (err) {
        this.options.onProtocolEvent?.('handler_error', { err, stream: streamId, handler: 'data' });
        stream.reset(ErrorCode.INTERNAL_ERROR);
        return;
      }
    }
    if (endStream) return;
    // Grant the stream's window back once half of it is used: we consume as we read.
    if (!stream.closed && stream.receiveConsumed >= this.options.streamWindow / 2) {
      this.queue(encodeWindowUpdate(streamId, stream.receiveConsumed));
      stream.receiveWindow += stream.receiveConsumed;
      stream.receiveConsumed = 0;
    }
  }

  private grantConnectionWindow(): void {
    if (this.destroyed || this.receiveConsumed < this.options.connectionWindow / 2) return;
    this.queue(encodeWindowUpdate(0, this.receiveConsumed));
    this.receiveConsumed = 0;
  }

  private onHeaders(flags: number, streamId: number, payload: Buffer): void {
    if (streamId === 0) throw new ConnectionError(ErrorCode.PROTOCOL_ERROR, 'HEADERS on stream 0');
    const fragment = unpad(payload, flags, FrameType.HEADERS);
    // A stream cannot depend on itself (§5.3.1): a stream error, told once the block is decoded.
    const blockFlags = headersDependency(payload, flags) === streamId ? flags | SELF_DEPENDENT : flags;
    if ((flags & Flag.END_HEADERS) !== 0) {
      this.onHeaderBlock(blockFlags, streamId, fragment);
      return;
    }
    this.continuationStream = streamId;
    this.continuationFlags = blockFlags;
    this.continuationParts = [Buffer.from(fragment)];
    this.continuationBytes = fragment.length;
    this.headerBlockCharge.start(fragment.length);
  }

  private onContinuation(flags: number, streamId: number, payload: Buffer): void {
    if (streamId === 0 || streamId !== this.continuationStream) {
      throw new ConnectionError(ErrorCode.PROTOCOL_ERROR, 'CONTINUATION without its HEADERS');
    }
    if (this.headerBlockCharge.continuationIsTooMuch(payload.length)) {
      throw new AbuseError('header_flood', 'header block too large');
    }
    this.continuationBytes += payload.length;
    if (payload.length > 0) this.continuationParts.push(Buffer.from(payload));
    if ((flags & Flag.END_HEADERS) === 0) return;
    const block = Buffer.concat(this.continuationParts, this.continuationBytes);
    const headersFlags = this.continuationFlags;
    this.continuationStream = 0;
    this.continuationParts = [];
    this.continuationBytes = 0;
    this.onHeaderBlock(headersFlags, streamId, block);
  }

  private onHeaderBlock(flags: number, streamId: number, block: Buffer): void {
    let fields: Array<[string, string]> | undefined;
    try {
      fields = this.decoder.decode(block);
    } catch (err) {
      // Too large, but decoded whole: the table is in sync and only this stream is refused.
      if (!(err instanceof HeaderListTooLargeError)) {
        throw new ConnectionError(ErrorCode.COMPRESSION_ERROR, err instanceof Error ? err.message : 'undecodable header block');
      }
    }
    const endStream = (flags & Flag.END_STREAM) !== 0;
    const existing = this.streams.get(streamId);
    if (existing !== undefined) {
      // Trailers: they must end the stream (RFC 9113 §8.1).
      if (existing.remoteEnded) {
        this.streamError(existing, ErrorCode.STREAM_CLOSED, 'HEADERS after END_STREAM');
        return;
      }
      if (!endStream) {
        this.malformed(existing, 'a second HEADERS frame that does not end the stream');
        return;
      }
      const malformed = fields === undefined ? undefined : trailerFieldsProblem(fields);
      if (malformed !== undefined) {
        this.malformed(existing, malformed);
        return;
      }
      if ((flags & SELF_DEPENDENT) !== 0) {
        this.streamError(existing, ErrorCode.PROTOCOL_ERROR, 'stream depends on itself');
        return;
      }
      if (existing.remainingLength > 0) {
        this.malformed(existing, 'DATA length differs from content-length');
        return;
      }
      this.remoteEnd(existing);
      return;
    }
    if (streamId % 2 === 0) throw new ConnectionError(ErrorCode.PROTOCOL_ERROR, 'client stream with an even id');
    if (streamId <= this.lastStreamId) {
      this.onClosedStream('HEADERS', streamId); // its header block was decoded above: the table stays in sync
      return;
    }
    if (streamId > this.lastStreamId + 2 && this.skippedIds.length < SKIPPED_RANGES_MAX) {
      this.skippedIds.push([this.lastStreamId + 2, streamId - 2]);
    }
    this.lastStreamId = streamId;
    // Refused from here on: the HEADERS opened the stream, so RST_STREAM on it is allowed, and the
    // peer's frames that follow before it hears are dropped.
    const refuse = (code: number): void => {
      this.queue(encodeRstStream(streamId, code));
      this.locallyClosed.add(streamId, this.now);
    };
    if (this.goawaySent) {
      refuse(ErrorCode.REFUSED_STREAM);
      return;
    }
    if (fields === undefined) {
      this.options.onProtocolEvent?.('header_list_too_large', { stream: streamId });
      refuse(ErrorCode.ENHANCE_YOUR_CALM);
      return;
    }
    const check = checkRequestFields(fields);
    let problem = check.ok ? undefined : check.problem;
    if (check.ok && check.contentLength > 0 && endStream) problem = 'content-length without DATA';
    if ((flags & SELF_DEPENDENT) !== 0) problem ??= 'stream depends on itself';
    if (problem !== undefined) {
      this.options.onProtocolEvent?.('malformed_request', { stream: streamId, problem });
      refuse(ErrorCode.PROTOCOL_ERROR);
      return;
    }
    if (this.streams.size >= (this.options.maxConcurrentStreams ?? Infinity)) {
      this.options.onProtocolEvent?.('refused_stream', { stream: streamId });
      refuse(ErrorCode.REFUSED_STREAM);
      return;
    }
    this.resets.opened();
    const stream = new Http2Stream(this, streamId, this.peerInitialWindow, this.options.streamWindow);
    stream.openedAt = this.now;
    if (check.ok) stream.remainingLength = check.contentLength;
    this.streams.set(streamId, stream);
    this.idleSinceMs = -1;
    // Marked before onStream, as for DATA: a response completed at once then closes the stream cleanly.
    if (endStream) this.remoteEnd(stream);
    try {
      this.options.onStream(stream, fields);
    } catch (err) {
      this.options.onProtocolEvent?.('handler_error', { err, stream: streamId, handler: 'stream' });
      stream.reset(ErrorCode.INTERNAL_ERROR);
    }
  }

  /** A malformed request or trailers (§8.1.1): a stream error of type PROTOCOL_ERROR. */
  private malformed(stream: Http2Stream, problem: string): void {
    this.options.onProtocolEvent?.('malformed_request', { stream: stream.id, problem });
    stream.reset(ErrorCode.PROTOCOL_ERROR);
  }

  private remoteEnd(stream: Http2Stream): void {
    if (stream.closed || stream.remoteEnded) return;
    stream.remoteEnded = true;
    this.endedInRead.push(stream);
  }
}

/**
 * What one flush writes: every queued frame in one buffer (the common case: small frames, one
 * copy is cheaper than a writev of many), unless large payloads are queued (views of a streamed
 * body, frames.ts ZERO_COPY_PAYLOAD_BYTES): then those go as they are, and the small frames
 * between them are joined.
 */
function coalesced(pending: readonly Buffer[], bytes: number): Buffer | Buffer[] {
  if (pending.length === 1) return pending[0];
  if (bytes < ZERO_COPY_PAYLOAD_BYTES) return Buffer.concat(pending, bytes);
  const out: Buffer[] = [];
  let run: Buffer[] = [];
  let runBytes = 0;
  const endRun = (): void => {
    if (run.length > 0) out.push(run.length === 1 ? run[0] : Buffer.concat(run, runBytes));
    run = [];
    runBytes = 0;
  };
  for (const part of pending) {
    if (part.length >= ZERO_COPY_PAYLOAD_BYTES) {
      endRun();
      out.push(part);
    } else {
      run.push(part);
      runBytes += part.length;
    }
  }
  endRun();
  return out.length === 1 ? out[0] : out;
}
