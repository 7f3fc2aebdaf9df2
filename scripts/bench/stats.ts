// Pure number-crunching for the benchmark: latency summaries, Prometheus histogram parsing and
// differencing, bucket quantiles, and the docs marker splice. No I/O, so it is unit-tested.

export interface Summary {
  readonly n: number;
  readonly mean: number;
  readonly p50: number;
  readonly p90: number;
  readonly p99: number;
  readonly p999: number;
  readonly max: number;
}

/** Nearest-rank percentile of an ascending array (`p` in 0..100). NaN when empty. */
export function percentile(sorted: ArrayLike<number>, p: number): number {
  if (sorted.length === 0) return Number.NaN;
  const rank = Math.ceil((p / 100) * sorted.length);
  return sorted[Math.min(sorted.length, Math.max(1, rank)) - 1];
}

export function summarize(samples: readonly number[]): Summary {
  const sorted = Float64Array.from(samples).sort();
  let total = 0;
  for (const v of sorted) total += v;
  return {
    n: sorted.length,
    mean: sorted.length === 0 ? Number.NaN : total / sorted.length,
    p50: percentile(sorted, 50),
    p90: percentile(sorted, 90),
    p99: percentile(sorted, 99),
    p999: percentile(sorted, 99.9),
    max: sorted.length === 0 ? Number.NaN : sorted[sorted.length - 1],
  };
}

export interface HistogramSnapshot {
  /** Cumulative counts per upper bound, ascending; the last bound is +Inf. */
  readonly buckets: readonly { readonly le: number; readonly count: number }[];
  readonly sum: number;
  readonly count: number;
}

function parseLabels(text: string): Map<string, string> {
  const labels = new Map<string, string>();
  for (const m of text.matchAll(/(\w+)="((?:[^"\\]|\\.)*)"/g)) labels.set(m[1], m[2]);
  return labels;
}

/**
 * Reads one histogram family from Prometheus text exposition, split by the value of `byLabel`
 * (e.g. `message`). Series without that label are grouped under "".
 */
export function parseHistogram(text: string, name: string, byLabel: string): Map<string, HistogramSnapshot> {
  const acc = new Map<string, { buckets: Map<number, number>; sum: number; count: number }>();
  const entry = (key: string) => {
    let e = acc.get(key);
    if (e === undefined) acc.set(key, (e = { buckets: new Map(), sum: 0, count: 0 }));
    return e;
  };
  for (const line of text.split('\n')) {
    if (!line.startsWith(name)) continue;
    const m = /^(\w+)(?:\{(.*)\})?\s+(\S+)/.exec(line);
    if (m === null) continue;
    const [, series, labelText, valueText] = m;
    const labels = parseLabels(labelText ?? '');
    const key = labels.get(byLabel) ?? '';
    const value = Number(valueText);
    if (series === `${name}_bucket`) {
      const leText = labels.get('le');
      if (leText === undefined) continue;
      entry(key).buckets.set(leText === '+Inf' ? Number.POSITIVE_INFINITY : Number(leText), value);
    } else if (series === `${name}_sum`) entry(key).sum = value;
    else if (series === `${name}_count`) entry(key).count = value;
  }
  const out = new Map<string, HistogramSnapshot>();
  for (const [key, e] of acc) {
    const buckets = [...e.buckets.entries()].sort((a, b) => a[0] - b[0]).map(([le, count]) => ({ le, count }));
    out.set(key, { buckets, sum: e.sum, count: e.count });
  }
  return out;
}

/** What was observed between two scrapes of the same process. */
export function histogramDelta(after: HistogramSnapshot, before: HistogramSnapshot | undefined): HistogramSnapshot {
  if (before === undefined) return after;
  const earlier = new Map(before.buckets.map((b) => [b.le, b.count]));
  return {
    buckets: after.buckets.map((b) => ({ le: b.le, count: b.count - (earlier.get(b.le) ?? 0) })),
    sum: after.sum - before.sum,
    count: after.count - before.count,
  };
}

/**
 * Quantile estimate from cumulative buckets, interpolating linearly inside the bucket (as
 * Prometheus' histogram_quantile does). `aboveTop` is set when it lands past the last finite bound,
 * in which case `value` is that bound (a lower limit, not an estimate).
 */
export function histogramQuantile(h: HistogramSnapshot, q: number): { value: number; aboveTop: boolean } {
  if (h.count <= 0 || h.buckets.length === 0) return { value: Number.NaN, aboveTop: false };
  const target = q * h.count;
  let lowerBound = 0;
  let lowerCount = 0;
  for (const b of h.buckets) {
    if (b.count >= target) {
      if (!Number.isFinite(b.le)) return { value: lowerBound, aboveTop: true };
      const inBucket = b.count - lowerCount;
      const fraction = inBucket <= 0 ? 1 : (target - lowerCount) / inBucket;
      return { value: lowerBound + (b.le - lowerBound) * fraction, aboveTop: false };
    }
    if (Number.isFinite(b.le)) lowerBound = b.le;
    lowerCount = b.count;
  }
  return { value: lowerBound, aboveTop: true };
}

/** Replaces the text between two marker lines (markers kept). Throws if a marker is missing. */
export function replaceBetweenMarkers(doc: string, start: string, end: string, content: string): string {
  const from = doc.indexOf(start);
  const to = doc.indexOf(end, from + start.length);
  if (from < 0 || to < 0) throw new Error(`markers ${start} … ${end} not found`);
  return `${doc.slice(0, from + start.length)}\n${content.trim()}\n${doc.slice(to)}`;
}

/** Two snapshots of the same histogram added (e.g. one phase's deltas over several rounds). */
export function histogramSum(a: HistogramSnapshot | undefined, b: HistogramSnapshot): HistogramSnapshot {
  if (a === undefined) return b;
  const other = new Map(b.buckets.map((x) => [x.le, x.count]));
  return {
    buckets: a.buckets.map((x) => ({ le: x.le, count: x.count + (other.get(x.le) ?? 0) })),
    sum: a.sum + b.sum,
    count: a.count + b.count,
  };
}

/** All series of a histogram family added up (e.g. GC pauses of every kind). */
export function histogramTotal(byLabel: ReadonlyMap<string, HistogramSnapshot>): HistogramSnapshot | undefined {
  let total: HistogramSnapshot | undefined;
  for (const h of byLabel.values()) total = histogramSum(total, h);
  return total;
}
