// Latency estimates and the latency scorer, pure: an exponentially decayed mean of one endpoint's
// recent samples (time to first token, time per output token), and how one endpoint's estimates
// compare with its pool's medians. Times are whatever monotonic milliseconds the caller passes.

/**
 * A mean whose samples lose half their weight every `halfLifeMs`: recent behaviour decides, and
 * an endpoint that stops answering slowly stops looking slow. `weight` is how many recent samples
 * the mean stands for (decayed), the estimate's confidence.
 */
export class DecayedMean {
  private sum = 0;
  private total = 0;
  private at = 0;

  /** Adds a sample taken at `now`. */
  observe(value: number, now: number, halfLifeMs: number): void {
    const keep = this.decay(now, halfLifeMs);
    this.sum = this.sum * keep + value;
    this.total = this.total * keep + 1;
    this.at = now;
  }

  /** Forgets every sample and starts from this one (a probe showed the old ones no longer hold). */
  restart(value: number, now: number): void {
    this.sum = value;
    this.total = 1;
    this.at = now;
  }

  /** The mean; NaN before the first sample. Decay leaves it unchanged: only new samples move it. */
  get mean(): number {
    return this.total === 0 ? Number.NaN : this.sum / this.total;
  }

  /** How many samples the mean stands for at `now`. */
  weightAt(now: number, halfLifeMs: number): number {
    return this.total * this.decay(now, halfLifeMs);
  }

  private decay(now: number, halfLifeMs: number): number {
    const elapsed = now - this.at;
    return elapsed <= 0 || this.total === 0 ? 1 : 2 ** (-elapsed / halfLifeMs);
  }
}

/**
 * A least-squares line through decayed samples (x, y): here time to first token against the
 * prompt's uncached tokens, whose slope is the prefill time per token. A queue wait adds to one
 * answer's time to first token whatever its prompt, so it moves the line's intercept, not its
 * slope, where a mean of time per token would count every wait as slow prefill.
 */
export class DecayedLine {
  private n = 0;
  private sx = 0;
  private sy = 0;
  private sxx = 0;
  private sxy = 0;
  private at = 0;

  observe(x: number, y: number, now: number, halfLifeMs: number): void {
    const elapsed = now - this.at;
    const keep = elapsed <= 0 || this.n === 0 ? 1 : 2 ** (-elapsed / halfLifeMs);
    this.n = this.n * keep + 1;
    this.sx = this.sx * keep + x;
    this.sy = this.sy * keep + y;
    this.sxx = this.sxx * keep + x * x;
    this.sxy = this.sxy * keep + x * y;
    this.at = now;
  }

  /** How many samples the line stands for at `now`. */
  weightAt(now: number, halfLifeMs: number): number {
    const elapsed = now - this.at;
    return this.n * (elapsed <= 0 || this.n === 0 ? 1 : 2 ** (-elapsed / halfLifeMs));
  }

  /** The slope; NaN while the x values do not spread (one prompt length tells nothing of per-token cost). */
  get slope(): number {
    const varX = this.sxx / (this.n || 1) - (this.sx / (this.n || 1)) ** 2;
    const meanX = this.sx / (this.n || 1);
    // A spread under 10 % of the mean length (or nothing at all) cannot separate prefill from the rest.
    if (!(varX > 0) || Math.sqrt(varX) < 0.1 * meanX) return Number.NaN;
    return (this.sxy / this.n - meanX * (this.sy / this.n)) / varX;
  }
}

/** The median of `values[0..count)`; sorts that part in place. NaN when empty. */
export function medianOf(values: Float64Array, count: number): number {
  if (count === 0) return Number.NaN;
  const part = values.subarray(0, count).sort();
  return count % 2 === 1 ? part[(count - 1) / 2] : (part[count / 2 - 1] + part[count / 2]) / 2;
}

/**
 * How many times slower than its pool's typical replica an endpoint is: its time per output token
 * over the pool's median, or, when TPOT is not known, its time to first token over that median.
 * TPOT is the replica's own speed; TTFT also carries the prompt's length, its cache hits and the
 * queue, which differ between replicas by what they were sent (prefix affinity gives each its
 * tenants): judged by TTFT alongside TPOT, a healthy replica holding the long prompts reads slow
 * (`npm run simulate` demoted such replicas and lost prefix-cache hits). Each median is raised to
 * `floor` first, so that jitter of a few milliseconds next to a tiny median never reads as "three
 * times slower". NaN (not known) does not count; 1 when nothing is known, or when faster.
 */
export function slowness(ttft: number, tpot: number, medianTtft: number, medianTpot: number, floor: LatencyFloor): number {
  const ratio =
    !Number.isNaN(tpot) && !Number.isNaN(medianTpot)
      ? tpot / Math.max(medianTpot, floor.tpotSeconds)
      : !Number.isNaN(ttft) && !Number.isNaN(medianTtft)
        ? ttft / Math.max(medianTtft, floor.ttftSeconds)
        : 1;
  return ratio > 1 ? ratio : 1;
}

/** Below these, a latency difference is noise rather than a slow replica. */
export interface LatencyFloor {
  readonly ttftSeconds: number;
  readonly tpotSeconds: number;
}

/**
 * Up to this many times its pool's median, a replica is as fast as its pool. Estimates of equally
 * fast replicas differ by what each happened to serve (batch sizes, output lengths) and by the
 * rounding of the decayed means, which is never exactly the median even for identical samples;
 * scoring those differences moves load-placed requests by noise, and every tiny score difference
 * breaks ties, so picks differ from those without latency at random (`npm run simulate` moved
 * p99 TTFT by ±10 % that way with every replica equally fast).
 */
export const SAME_SPEED = 1.2;

/**
 * The latency scorer: 1 for an endpoint within SAME_SPEED of its pool's median or faster (and for
 * one not yet measured: a new replica is not penalised for being new), SAME_SPEED/s for one s
 * times slower past that (continuous at the band's edge).
 */
export function latencyScore(slowdown: number): number {
  return slowdown <= SAME_SPEED ? 1 : SAME_SPEED / slowdown;
}
