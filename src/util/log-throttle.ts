// At most one log line per kind per interval, however many events: a peer that opens and drops
// streams by the thousand (or a fault that fails every request) must not turn into as many log
// lines. The events themselves are counted in metrics; the line that is written says how many of
// its kind were left out since the last one. Pure: the clock is passed in.

/** Default interval between two lines of one kind. */
export const LOG_INTERVAL_MS = 10_000;

export class LogThrottle<Kind extends string> {
  /** Per kind: when its last line was written, and how many events since were not. */
  private readonly lastLine = new Map<Kind, { atMs: number; suppressed: number }>();

  constructor(private readonly intervalMs: number = LOG_INTERVAL_MS) {}

  /**
   * An event of `kind` at `nowMs`: the number of its kind left out since the last line (0 for
   * the first) when this one is to be logged, or undefined when it is to be left out.
   */
  admit(kind: Kind, nowMs: number): number | undefined {
    const last = this.lastLine.get(kind);
    if (last === undefined) {
      this.lastLine.set(kind, { atMs: nowMs, suppressed: 0 });
      return 0;
    }
    if (nowMs - last.atMs < this.intervalMs) {
      last.suppressed++;
      return undefined;
    }
    const suppressed = last.suppressed;
    last.atMs = nowMs;
    last.suppressed = 0;
    return suppressed;
  }
}
