// What a peer may make us do without doing the same work itself, counted so the connection can end
// it with ENHANCE_YOUR_CALM (RFC 9113 §10.5): streams reset as soon as they open, and header blocks
// spread over many tiny CONTINUATION frames; and the memory of closed streams whose late frames we
// must still tell apart. Pure state; the connection asks and acts.

/**
 * Rapid reset (CVE-2023-44487) and stream churn: a peer that opens streams and resets them at once
 * makes us do work per stream while no concurrency limit applies (reset streams are not open).
 *
 * What counts is a stream the peer reset (RST_STREAM, any code) within RAPID_RESET_LIFETIME_MS of
 * opening it while it was still waiting for us: it had sent HEADERS or DATA that no write of ours
 * answered yet. The DATA it carried does not matter (a byte of DATA first does not dodge the
 * count). Envoy resets every ext_proc side stream it ends (`closeStream()` then `resetStream()`,
 * unless graceful close is on), but only after our reply to its last message, so its own
 * cancellations never count; a client that gives up before we answered makes Envoy reset a stream
 * that does count, which is why one such reset is nothing: only when at least RAPID_RESETS_MIN of
 * them, and at least half the streams opened, were counted does the connection end with
 * ENHANCE_YOUR_CALM (RFC 9113 §10.5). nghttp2 (node:http2, grpc-js) instead allows a burst of 1000
 * resets of any kind and 33 a second after it, which Envoy's own resets exceed under steady load.
 */
const RAPID_RESET_LIFETIME_MS = 100;
const RAPID_RESETS_MIN = 500;
/** Both counts are halved every time this many streams were opened: old traffic cannot hide a new burst. */
const RESET_WINDOW_STREAMS = 2000;

/** The GOAWAY's debug data when RapidResetCount trips, on every transport. */
export const RAPID_RESET_EXPLANATION = 'most streams were reset as soon as they opened, before our answer (rapid reset)';

/** Streams opened, and streams the peer reset quickly while they waited for us (see RAPID_RESET_LIFETIME_MS). */
export class RapidResetCount {
  private streamsOpened = 0;
  private rapidResets = 0;

  opened(): void {
    if (++this.streamsOpened >= RESET_WINDOW_STREAMS) {
      this.streamsOpened /= 2;
      this.rapidResets /= 2;
    }
  }

  /**
   * The peer reset a stream `lifetimeMs` after opening it; `waiting`: something it sent was not
   * answered yet. True when that makes one rapid reset too many.
   */
  resetIsTooMany(lifetimeMs: number, waiting: boolean): boolean {
    if (!waiting || lifetimeMs >= RAPID_RESET_LIFETIME_MS) return false;
    return ++this.rapidResets >= RAPID_RESETS_MIN && this.rapidResets * 2 >= this.streamsOpened;
  }
}

/** Header blocks above this (all fragments) end the connection before they are decoded. */
const HEADER_BLOCK_FACTOR = 2;
/**
 * What each CONTINUATION frame counts against that limit at least: empty or tiny frames would
 * otherwise never reach it, and a peer could send them forever (the "CONTINUATION flood",
 * CVE-2024-27316 and kin). Real peers fill their frames, so only a flood reaches the limit this way.
 */
const CONTINUATION_MIN_CHARGE = 1024;

/** The size of one header block in flight (HEADERS + CONTINUATION), every CONTINUATION frame counted as at least CONTINUATION_MIN_CHARGE. */
export class HeaderBlockCharge {
  private charge = 0;

  constructor(private readonly maxHeaderListBytes: number) {}

  /** A HEADERS frame without END_HEADERS opened a block with this fragment. */
  start(fragmentBytes: number): void {
    this.charge = fragmentBytes;
  }

  /** One more CONTINUATION frame: true when the block is now too large to decode. */
  continuationIsTooMuch(payloadBytes: number): boolean {
    this.charge += Math.max(payloadBytes, CONTINUATION_MIN_CHARGE);
    return this.charge > HEADER_BLOCK_FACTOR * this.maxHeaderListBytes;
  }
}

/**
 * How long we remember a stream we reset (or ended before the peer did): frames the peer sent
 * before it read our RST_STREAM may still arrive, and must be dropped (RFC 9113 §5.1, "closed"),
 * where the same frames on any other closed stream are a STREAM_CLOSED error. Far longer than any
 * round trip; bounded in count too, so a peer that makes us reset streams cannot grow it.
 */
const LATE_FRAMES_MS = 10_000;
const LATE_FRAMES_MAX_STREAMS = 8192;

/** Streams we closed first, whose peer may not know yet (ids only, oldest first, bounded in time and count). */
export class LocallyClosedStreams {
  /** Stream id → the time (ms) until which its late frames are expected. Ids come in rising order. */
  private readonly until = new Map<number, number>();

  add(streamId: number, nowMs: number): void {
    this.until.set(streamId, nowMs + LATE_FRAMES_MS);
    if (this.until.size > LATE_FRAMES_MAX_STREAMS) this.prune(nowMs, true);
  }

  /** True when frames on this closed stream are to be dropped rather than treated as an error. */
  expectsLateFrames(streamId: number, nowMs: number): boolean {
    const until = this.until.get(streamId);
    if (until === undefined) return false;
    if (until >= nowMs) return true;
    this.prune(nowMs, false);
    return false;
  }

  private prune(nowMs: number, overSize: boolean): void {
    for (const [id, until] of this.until) {
      if (until >= nowMs && !(overSize && this.until.size > LATE_FRAMES_MAX_STREAMS)) return;
      this.until.delete(id);
    }
  }
}
