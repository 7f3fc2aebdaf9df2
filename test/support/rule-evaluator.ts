// Evaluates the chart's alert and recording rules (as `helm template` renders them:
// test/support/chart-rules.ts) against scrapes of /metrics laid on a timeline, so a test can say
// which alerts an episode would trip in a real Prometheus. It is NOT Prometheus, but for the
// grammar our rules use it follows Prometheus's (3.x) semantics:
//
// - Selectors with =, !=, =~, !~ (regexes anchored, as Prometheus's).
// - An instant selector at time t reads each series' sample of the latest scrape at or before t,
//   within the 5-minute lookback; a series missing from that scrape is stale, so absent.
// - A range selector x[w] at t takes each series' samples of the scrapes in (t − w, t].
// - rate() and increase() are Prometheus's extrapolatedRate: a series with fewer than two samples
//   in the range gives nothing (so a counter first created inside the range contributes no
//   increase for its first sample: the reason the server creates the series the alerts read at 0,
//   src/metrics/metrics.ts); a counter reset adds the value before it; the result is extrapolated
//   to the range's ends (all the way when the first or last sample is within 1.1 average sample
//   intervals of that end, else by half an interval), never below the counter's zero point, and
//   rate divides by the range.
// - sum/max/min/count by (…) and quantile by (…); / * between vectors and scalars, with on (…)
//   and group_left; the comparisons (as filters); unless; parentheses.
// - An alert's `for:` (alertState): evaluated at every scrape's time (evaluation interval = scrape
//   interval), a label set returned at consecutive evaluations is pending from the first, firing
//   once `for` has passed since it.
//
// What differs from Prometheus: no other function, operator or modifier (offset, @, bool,
// without, ignoring, group_right, and/or, subqueries, histograms) — an expression outside the
// grammar is refused with an error, never guessed at; scrapes are whole (no per-series
// timestamps, no scrape failures); NaN and ±Inf follow JavaScript's arithmetic, which matches
// IEEE as Go's does; `keep_firing_for` is not modelled.

import type { Sample } from './prometheus.js';

type Labels = ReadonlyMap<string, string>;
interface Point {
  readonly labels: Labels;
  readonly value: number;
}
type Value = { readonly kind: 'scalar'; readonly value: number } | { readonly kind: 'vector'; readonly points: readonly Point[] };

/** One scrape of /metrics, `at` seconds into the timeline. */
export interface Scrape {
  readonly at: number;
  readonly samples: readonly Sample[];
}

/** Scrapes in time order. */
export type Timeline = readonly Scrape[];

/** Prometheus's default lookback for an instant selector. */
const LOOKBACK_SECONDS = 300;

/**
 * The scrapes as Prometheus would take them every `intervalSeconds` (the chart's ServiceMonitor
 * scrapes every 15 s), the first at 0; `quietFor` more seconds of scrapes repeat the last one, as
 * if nothing happened after the episode (how a `for:` plays out).
 */
export function timeline(scrapes: ReadonlyArray<readonly Sample[]>, intervalSeconds: number, quietFor = 0): Timeline {
  const out: Scrape[] = scrapes.map((samples, i) => ({ at: i * intervalSeconds, samples }));
  const last = out[out.length - 1];
  if (last === undefined) throw new Error('a timeline needs a scrape');
  for (let at = last.at + intervalSeconds; at <= last.at + quietFor; at += intervalSeconds) out.push({ at, samples: last.samples });
  return out;
}

const NAME = '__name__';

/** The samples the expression returns at `at` (default: the last scrape's time); empty = not true. */
export function evaluateRule(expr: string, scrapes: Timeline, at: number = lastScrape(scrapes).at): readonly Point[] {
  const parser = new Parser(tokenize(expr), scrapes, at);
  const value = parser.expression();
  parser.end();
  if (value.kind === 'scalar') throw new Error(`rule evaluates to a scalar: ${expr}`);
  return value.points;
}

// ── tokens ──────────────────────────────────────────────────────────────────────────────────

interface Token {
  readonly kind: 'ident' | 'number' | 'string' | 'duration' | 'op';
  readonly text: string;
}

function tokenize(expr: string): Token[] {
  const tokens: Token[] = [];
  const pattern =
    /\s+|(\[\s*\d+[smhd]\s*\])|("(?:[^"\\]|\\.)*")|(\d+(?:\.\d+)?(?:e[+-]?\d+)?)|([A-Za-z_:][A-Za-z0-9_:]*)|(=~|!~|!=|>=|<=|==|[-+*/(){},=<>])/gy;
  let at = 0;
  while (at < expr.length) {
    pattern.lastIndex = at;
    const m = pattern.exec(expr);
    if (m === null) throw new Error(`outside the evaluator's grammar at "${expr.slice(at, at + 20)}"`);
    at = pattern.lastIndex;
    if (m[1] !== undefined) tokens.push({ kind: 'duration', text: m[1].replace(/[[\]\s]/g, '') });
    else if (m[2] !== undefined) tokens.push({ kind: 'string', text: JSON.parse(m[2]) as string });
    else if (m[3] !== undefined) tokens.push({ kind: 'number', text: m[3] });
    else if (m[4] !== undefined) tokens.push({ kind: 'ident', text: m[4] });
    else if (m[5] !== undefined) tokens.push({ kind: 'op', text: m[5] });
  }
  return tokens;
}

function seconds(duration: string): number {
  const n = Number(duration.slice(0, -1));
  const unit = duration.slice(-1);
  return n * (unit === 's' ? 1 : unit === 'm' ? 60 : unit === 'h' ? 3600 : 86400);
}

// ── parser + evaluation ─────────────────────────────────────────────────────────────────────

const COMPARISONS = new Set(['>', '<', '>=', '<=', '==', '!=']);
const AGGREGATIONS = new Set(['sum', 'max', 'min', 'count', 'quantile']);

interface Matching {
  readonly on: readonly string[] | undefined;
  readonly groupLeft: boolean;
}

class Parser {
  private at = 0;

  constructor(
    private readonly tokens: readonly Token[],
    private readonly scrapes: Timeline,
    private readonly evaluatedAt: number,
  ) {}

  end(): void {
    if (this.at !== this.tokens.length) throw new Error(`unexpected "${this.tokens[this.at]?.text}"`);
  }

  expression(): Value {
    let left = this.comparison();
    while (this.peekIdent('unless')) {
      this.at++;
      const matching = this.matching();
      const right = this.comparison();
      left = unless(vector(left), vector(right), matching);
    }
    return left;
  }

  private comparison(): Value {
    let left = this.product();
    while (this.peekOp(COMPARISONS)) {
      const op = this.next().text;
      const matching = this.matching();
      left = binary(op, left, this.product(), matching);
    }
    return left;
  }

  private product(): Value {
    let left = this.unary();
    while (this.peekOp(new Set(['*', '/']))) {
      const op = this.next().text;
      const matching = this.matching();
      left = binary(op, left, this.unary(), matching);
    }
    return left;
  }

  private unary(): Value {
    const token = this.next();
    if (token.kind === 'number') return { kind: 'scalar', value: Number(token.text) };
    if (token.kind === 'op' && token.text === '(') {
      const inner = this.expression();
      this.expect(')');
      return inner;
    }
    if (token.kind !== 'ident') throw new Error(`unexpected "${token.text}"`);
    if (AGGREGATIONS.has(token.text)) return this.aggregation(token.text);
    if (token.text === 'rate' || token.text === 'increase') {
      this.expect('(');
      const name = this.next().text;
      const matchers = this.matchers();
      const range = this.next();
      if (range.kind !== 'duration') throw new Error(`${token.text}() needs a range`);
      this.expect(')');
      const from = this.evaluatedAt - seconds(range.text);
      const inRange = this.scrapes.filter((scrape) => scrape.at > from && scrape.at <= this.evaluatedAt);
      return { kind: 'vector', points: extrapolatedRates(inRange, name, matchers, from, this.evaluatedAt, token.text === 'rate') };
    }
    const matchers = this.matchers();
    // The latest scrape at or before now, within the lookback: a series it lacks is stale.
    const latest = this.scrapes.filter((scrape) => scrape.at <= this.evaluatedAt).at(-1);
    if (latest === undefined || latest.at <= this.evaluatedAt - LOOKBACK_SECONDS) return { kind: 'vector', points: [] };
    return { kind: 'vector', points: select(latest.samples, token.text, matchers) };
  }

  private aggregation(op: string): Value {
    let by = this.peekIdent('by') ? (this.at++, this.labelList()) : undefined;
    this.expect('(');
    let parameter: number | undefined;
    if (op === 'quantile') {
      parameter = Number(this.next().text);
      this.expect(',');
    }
    const inner = vector(this.expression());
    this.expect(')');
    if (by === undefined && this.peekIdent('by')) {
      this.at++;
      by = this.labelList();
    }
    const groups = new Map<string, { labels: Labels; values: number[] }>();
    for (const point of inner) {
      const labels = new Map([...point.labels].filter(([k]) => by?.includes(k) === true));
      const key = keyOf(labels);
      const group = groups.get(key) ?? { labels, values: [] };
      group.values.push(point.value);
      groups.set(key, group);
    }
    return {
      kind: 'vector',
      points: [...groups.values()].map(({ labels, values }) => ({ labels, value: aggregate(op, values, parameter) })),
    };
  }

  private matchers(): Matcher[] {
    if (!this.peekOp(new Set(['{']))) return [];
    this.at++;
    const out: Matcher[] = [];
    while (!this.peekOp(new Set(['}']))) {
      const label = this.next().text;
      const op = this.next().text;
      const value = this.next();
      if (value.kind !== 'string') throw new Error(`matcher on ${label} needs a string`);
      const regex = new RegExp(`^(?:${value.text})$`);
      const test = (v: string): boolean => (op === '=' || op === '!=' ? v === value.text : regex.test(v));
      const negated = op === '!=' || op === '!~';
      out.push((labels) => test(labels.get(label) ?? '') !== negated);
      if (this.peekOp(new Set([',']))) this.at++;
    }
    this.at++;
    return out;
  }

  private matching(): Matching {
    let on: string[] | undefined;
    let groupLeft = false;
    if (this.peekIdent('on')) {
      this.at++;
      on = this.labelList();
    }
    if (this.peekIdent('group_left')) {
      this.at++;
      groupLeft = true;
    }
    return { on, groupLeft };
  }

  private labelList(): string[] {
    this.expect('(');
    const out: string[] = [];
    while (!this.peekOp(new Set([')']))) {
      out.push(this.next().text);
      if (this.peekOp(new Set([',']))) this.at++;
    }
    this.at++;
    return out;
  }

  private peekOp(ops: ReadonlySet<string>): boolean {
    const t = this.tokens[this.at];
    return t?.kind === 'op' && ops.has(t.text);
  }

  private peekIdent(word: string): boolean {
    const t = this.tokens[this.at];
    return t?.kind === 'ident' && t.text === word;
  }

  private next(): Token {
    const t = this.tokens[this.at++];
    if (t === undefined) throw new Error('unexpected end of expression');
    return t;
  }

  private expect(op: string): void {
    const t = this.next();
    if (t.kind !== 'op' || t.text !== op) throw new Error(`expected "${op}", found "${t.text}"`);
  }
}

type Matcher = (labels: Labels) => boolean;

function select(from: readonly Sample[], name: string, matchers: readonly Matcher[]): Point[] {
  return from
    .filter((s) => s.name === name && matchers.every((m) => m(s.labels)))
    .map((s) => ({ labels: new Map([...s.labels, [NAME, name]]), value: s.value }));
}

/** Prometheus's extrapolatedRate for counters, per series, over the scrapes in (from, to]. */
function extrapolatedRates(
  inRange: Timeline,
  name: string,
  matchers: readonly Matcher[],
  from: number,
  to: number,
  isRate: boolean,
): Point[] {
  const series = new Map<string, { labels: Labels; points: Array<{ at: number; value: number }> }>();
  for (const scrape of inRange) {
    for (const point of select(scrape.samples, name, matchers)) {
      const key = keyOf(point.labels);
      const entry = series.get(key) ?? { labels: withoutName(point.labels), points: [] };
      entry.points.push({ at: scrape.at, value: point.value });
      series.set(key, entry);
    }
  }
  const out: Point[] = [];
  for (const { labels, points } of series.values()) {
    const first = points[0];
    const last = points[points.length - 1];
    // One sample (a series that appeared inside the range, or a range shorter than the interval): nothing.
    if (first === undefined || last === undefined || points.length < 2) continue;
    let increase = last.value - first.value;
    for (let i = 1; i < points.length; i++) {
      const before = points[i - 1]?.value ?? 0;
      if ((points[i]?.value ?? 0) < before) increase += before; // a counter reset
    }
    const sampled = last.at - first.at;
    const average = sampled / (points.length - 1);
    const threshold = average * 1.1;
    let toStart = first.at - from;
    let toEnd = to - last.at;
    if (toStart >= threshold) toStart = average / 2;
    // A counter is never below zero: extrapolate back no further than where it would reach it.
    const toZero = increase > 0 && first.value >= 0 ? sampled * (first.value / increase) : toStart;
    if (toZero < toStart) toStart = toZero;
    if (toEnd >= threshold) toEnd = average / 2;
    let value = increase * ((sampled + toStart + toEnd) / sampled);
    if (isRate) value /= to - from;
    out.push({ labels, value });
  }
  return out;
}

export type AlertState = 'inactive' | 'pending' | 'firing';

/**
 * The alert's state at the timeline's end, evaluated at every scrape's time: the state of its most
 * advanced label set (firing > pending > inactive).
 */
export function alertState(rule: { readonly expr: string; readonly forSeconds: number }, scrapes: Timeline): AlertState {
  const activeSince = new Map<string, number>();
  let state: AlertState = 'inactive';
  for (const scrape of scrapes) {
    const returned = new Set(evaluateRule(rule.expr, scrapes, scrape.at).map((p) => keyOf(p.labels)));
    for (const key of [...activeSince.keys()]) if (!returned.has(key)) activeSince.delete(key);
    for (const key of returned) if (!activeSince.has(key)) activeSince.set(key, scrape.at);
    state = 'inactive';
    for (const since of activeSince.values()) {
      if (scrape.at - since >= rule.forSeconds) state = 'firing';
      else if (state === 'inactive') state = 'pending';
    }
  }
  return state;
}

function lastScrape(scrapes: Timeline): Scrape {
  const last = scrapes[scrapes.length - 1];
  if (last === undefined) throw new Error('no scrape to evaluate against');
  return last;
}

function vector(value: Value): readonly Point[] {
  if (value.kind === 'scalar') throw new Error('a vector was expected');
  return value.points;
}

function aggregate(op: string, values: readonly number[], parameter: number | undefined): number {
  switch (op) {
    case 'sum':
      return values.reduce((a, b) => a + b, 0);
    case 'max':
      return Math.max(...values);
    case 'min':
      return Math.min(...values);
    case 'count':
      return values.length;
    default: {
      // Prometheus' quantile: linear interpolation between the closest ranks.
      const sorted = [...values].sort((a, b) => a - b);
      const rank = (parameter ?? 0.5) * (sorted.length - 1);
      const low = Math.floor(rank);
      const high = Math.min(low + 1, sorted.length - 1);
      return (sorted[low] ?? NaN) + ((sorted[high] ?? NaN) - (sorted[low] ?? NaN)) * (rank - low);
    }
  }
}

function apply(op: string, a: number, b: number): number | boolean {
  switch (op) {
    case '*':
      return a * b;
    case '/':
      return a / b;
    case '>':
      return a > b;
    case '<':
      return a < b;
    case '>=':
      return a >= b;
    case '<=':
      return a <= b;
    case '==':
      return a === b;
    default:
      return a !== b;
  }
}

function binary(op: string, left: Value, right: Value, matching: Matching): Value {
  const comparison = COMPARISONS.has(op);
  if (left.kind === 'scalar' && right.kind === 'scalar') {
    const r = apply(op, left.value, right.value);
    return { kind: 'scalar', value: typeof r === 'boolean' ? Number(r) : r };
  }
  const combine = (l: Point, lv: number, rv: number, labels: Labels): Point | undefined => {
    const r = apply(op, lv, rv);
    if (typeof r === 'boolean') return r ? l : undefined;
    return { labels: withoutName(labels), value: r };
  };
  if (right.kind === 'scalar') return vectorOf(vector(left).map((l) => combine(l, l.value, right.value, l.labels)));
  if (left.kind === 'scalar') {
    if (comparison) throw new Error('scalar on the left of a comparison is outside the grammar');
    return vectorOf(right.points.map((r) => combine(r, left.value, r.value, r.labels)));
  }
  const rightByKey = new Map<string, Point[]>();
  for (const r of right.points) {
    const key = matchKey(r.labels, matching.on);
    rightByKey.set(key, [...(rightByKey.get(key) ?? []), r]);
  }
  return vectorOf(
    left.points.map((l) => {
      const matches = rightByKey.get(matchKey(l.labels, matching.on)) ?? [];
      if (matches.length > 1) throw new Error('many-to-many matching is outside the grammar');
      const r = matches[0];
      return r === undefined ? undefined : combine(l, l.value, r.value, l.labels);
    }),
  );
}

function unless(left: readonly Point[], right: readonly Point[], matching: Matching): Value {
  const keys = new Set(right.map((r) => matchKey(r.labels, matching.on)));
  return { kind: 'vector', points: left.filter((l) => !keys.has(matchKey(l.labels, matching.on))) };
}

function vectorOf(points: ReadonlyArray<Point | undefined>): Value {
  return { kind: 'vector', points: points.filter((p): p is Point => p !== undefined) };
}

function matchKey(labels: Labels, on: readonly string[] | undefined): string {
  return keyOf(on === undefined ? withoutName(labels) : new Map([...labels].filter(([k]) => on.includes(k))));
}

function keyOf(labels: Labels): string {
  return JSON.stringify([...labels].filter(([k]) => k !== NAME).sort(([a], [b]) => a.localeCompare(b)));
}

function withoutName(labels: Labels): Labels {
  return new Map([...labels].filter(([k]) => k !== NAME));
}
