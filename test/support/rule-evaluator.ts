// Evaluates the chart's alert expressions (charts/llm-extproc/templates/prometheusrule.yaml)
// against two scrapes of /metrics, so a test can say which alerts an episode would trip. It is NOT
// Prometheus: it knows only the grammar our rules use — selectors with =, !=, =~, !~; rate() and
// increase() over a range; sum/max/min/count by (…) and quantile by (…); / * between vectors
// and scalars with on (…) and group_left; the comparisons (as filters); unless; parentheses. An
// expression outside it is refused with an error, never guessed at.
//
// Time is two points: `base` (scraped before the episode) and `now`. Every range in the rules is
// taken to cover the whole episode (a test runs for seconds, the shortest range is 5 minutes), so
// increase(x[w]) = x(now) − x(base) (a series absent at base counted from 0) and rate = that / w.
// `for:` is not modelled: "true" means the expression returns at least one sample now.

import type { Sample } from './prometheus.js';

type Labels = ReadonlyMap<string, string>;
interface Point {
  readonly labels: Labels;
  readonly value: number;
}
type Value = { readonly kind: 'scalar'; readonly value: number } | { readonly kind: 'vector'; readonly points: readonly Point[] };

export interface Scrapes {
  readonly base: readonly Sample[];
  readonly now: readonly Sample[];
}

const NAME = '__name__';

/** The samples the expression returns now (empty = the alert is not firing). */
export function evaluateRule(expr: string, scrapes: Scrapes): readonly Point[] {
  const parser = new Parser(tokenize(expr), scrapes);
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
    private readonly scrapes: Scrapes,
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
      const per = token.text === 'rate' ? seconds(range.text) : 1;
      const base = this.select(this.scrapes.base, name, matchers);
      return {
        kind: 'vector',
        points: this.select(this.scrapes.now, name, matchers).map((p) => {
          const before = base.find((b) => sameLabels(b.labels, p.labels))?.value ?? 0;
          return { labels: withoutName(p.labels), value: Math.max(0, p.value - before) / per };
        }),
      };
    }
    return { kind: 'vector', points: this.select(this.scrapes.now, token.text, this.matchers()) };
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

  private matchers(): Array<(labels: Labels) => boolean> {
    if (!this.peekOp(new Set(['{']))) return [];
    this.at++;
    const out: Array<(labels: Labels) => boolean> = [];
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

  private select(from: readonly Sample[], name: string, matchers: ReadonlyArray<(labels: Labels) => boolean>): Point[] {
    return from
      .filter((s) => s.name === name && matchers.every((m) => m(s.labels)))
      .map((s) => ({ labels: new Map([...s.labels, [NAME, name]]), value: s.value }));
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

function sameLabels(a: Labels, b: Labels): boolean {
  return keyOf(a) === keyOf(b);
}
