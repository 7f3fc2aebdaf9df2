// A ceiling on V8's young generation, kept from inside the process (issue 34; measured in
// docs/benchmarks.md, "Memory", "The young generation").
//
// V8 reads the young generation's maximum (--max-semi-space-size) once, when the isolate is made:
// too late for the entry to set. What it reads each time it considers growing the young generation
// is the growth factor. So the process keeps the factor at 1 (no growth) while it starts, and then
// lets V8 double the young generation (factor 2) only while one more doubling stays within the
// ceiling. Under load it grows to the ceiling and stops there; if V8 shrinks it (its memory reducer
// may), it may grow again up to the ceiling. Looked at when a stream ends (at most once per
// `minIntervalMs`: V8 grows it by one doubling per scavenge at most, and under load streams end far
// more often than scavenges come) and on a timer every `timerMs`, for what allocates without
// streams (a cluster primary, a Kubernetes watch, metrics scrapes). A size it cannot read counts as
// over the ceiling: no growth.
//
// Pure: the caller supplies V8's readings and the flag setter.

export interface YoungGenerationCapOptions {
  /** The young generation's ceiling: both semi-spaces, as `new_space` reports its size. */
  readonly capBytes: number;
  /** The young generation's size now (`v8.getHeapSpaceStatistics()`, `new_space`), or undefined when V8 does not report it. */
  readonly newSpaceBytes: () => number | undefined;
  /** Sets V8's `--semi-space-growth-factor`. */
  readonly setGrowthFactor: (factor: number) => void;
  /** Milliseconds, monotonic (`performance.now()`). */
  readonly now: () => number;
  /** Least time between two looks at the young generation's size. */
  readonly minIntervalMs: number;
  /** Runs `task` every `timerMs` (a timer that does not keep the process alive). */
  readonly every: (ms: number, task: () => void) => void;
  readonly timerMs: number;
}

export class YoungGenerationCap {
  private started = false;
  /** The factor last set (1 at start: the process starts with growth off). */
  private factor = 1;
  private lastLook = Number.NEGATIVE_INFINITY;

  constructor(private readonly options: YoungGenerationCapOptions) {}

  /** The process has started: from now on the young generation may grow up to the ceiling. */
  start(): void {
    if (this.started) return;
    this.started = true;
    this.check();
    this.options.every(this.options.timerMs, () => this.check());
  }

  /** A stream ended: a moment to look (reads, the hot path, are not). */
  streamEnded(): void {
    this.check();
  }

  /** The growth factor in force (1 or 2). */
  get growthFactor(): number {
    return this.factor;
  }

  private check(): void {
    if (!this.started) return;
    const now = this.options.now();
    if (now - this.lastLook < this.options.minIntervalMs) return;
    this.lastLook = now;
    // Grow while one more doubling stays within the ceiling.
    const size = this.options.newSpaceBytes();
    const wanted = size !== undefined && 2 * size <= this.options.capBytes ? 2 : 1;
    if (wanted === this.factor) return;
    this.factor = wanted;
    this.options.setGrowthFactor(wanted);
  }
}
