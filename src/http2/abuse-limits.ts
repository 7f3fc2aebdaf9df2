// What a peer may make us do without doing the same work itself, counted so the connection can end
// it with ENHANCE_YOUR_CALM (RFC 9113 §10.5): streams reset as soon as they open, and header blocks
// spread over many tiny CONTINUATION frames. Pure counters; the connection asks and acts.

/**
 * Rapid reset (CVE-2023-44487): a peer opening streams and resetting them at once makes us do work
 * per stream while no concurrency limit applies (reset streams are not open). Envoy sends its
 * first ext_proc message together with the HEADERS that open the side stream, and resets a side
 * stream when its request ends or is cancelled: after that message, and often before our answer
 * (a full-duplex request whose body is still uploading when the client gives up). So what counts
 * is a stream reset before it carried any DATA and before we answered it: once at least this many,
 * and at least half the streams opened, the connection ends with ENHANCE_YOUR_CALM. A peer can
 * dodge the count by sending a byte first; the classic attack (HEADERS, RST_STREAM) cannot.
 */
const EMPTY_RESETS_MIN = 500;
/** Both counts are halved every time this many streams were opened: old traffic cannot hide a new burst. */
const RESET_WINDOW_STREAMS = 2000;

/** Streams opened, and streams the peer reset with nothing sent either way (see EMPTY_RESETS_MIN). */
export class RapidResetCount {
  private streamsOpened = 0;
  private emptyResets = 0;

  opened(): void {
    if (++this.streamsOpened >= RESET_WINDOW_STREAMS) {
      this.streamsOpened /= 2;
      this.emptyResets /= 2;
    }
  }

  /** The peer reset a stream before it carried any DATA and before we answered it: true when that is one too many. */
  emptyResetIsTooMany(): boolean {
    return ++this.emptyResets >= EMPTY_RESETS_MIN && this.emptyResets * 2 >= this.streamsOpened;
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
