// The test-side evaluator of the chart's rules (test/support/rule-evaluator.ts): each case states
// what Prometheus (3.x) returns for it, on hand-made scrapes 15 s apart (the chart's ServiceMonitor
// interval), and the evaluator must return the same; what it does not know it refuses.

import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { samples } from '../../support/prometheus.js';
import { alertState, evaluateRule, timeline } from '../../support/rule-evaluator.js';
import type { Timeline } from '../../support/rule-evaluator.js';

const INTERVAL = 15;

/** Scrapes 15 s apart, each given as exposition lines. */
function scrapes(...texts: ReadonlyArray<readonly string[]>): Timeline {
  return timeline(
    texts.map((lines) => samples(lines.join('\n'))),
    INTERVAL,
  );
}

function values(expr: string, on: Timeline, at?: number): Array<[string, number]> {
  return evaluateRule(expr, on, at)
    .map((p): [string, number] => [
      [...p.labels]
        .map(([k, v]) => `${k}=${v}`)
        .sort()
        .join(','),
      Number(p.value.toFixed(6)),
    ])
    .sort(([a], [b]) => a.localeCompare(b));
}

const BROKEN = 'x_total{result="stream_broken"}';

describe('rule evaluator: increase() and rate() as Prometheus computes them', () => {
  it('a series absent at the earlier scrape gives no increase (one sample in the range: no result)', () => {
    assert.deepEqual(values('increase(x_total[10m])', scrapes([], [`${BROKEN} 3`])), []);
    // It stays without an increase while its value does not move again.
    assert.deepEqual(values('increase(x_total[10m])', scrapes([], [`${BROKEN} 3`], [`${BROKEN} 3`])), [['result=stream_broken', 0]]);
  });

  it('a series created at 0 before the episode gives the exact increase (extrapolation stops at the zero point)', () => {
    assert.deepEqual(values('increase(x_total[10m])', scrapes([`${BROKEN} 0`], [`${BROKEN} 1`])), [['result=stream_broken', 1]]);
  });

  it('a series that starts inside the range is extrapolated back by half an interval, not to the range start', () => {
    // 30 → 40 in 15 s; the range begins 585 s before the first sample: 7.5 s more at the same slope.
    assert.deepEqual(values('increase(x_total[10m])', scrapes(['x_total 30'], ['x_total 40'])), [['', 15]]);
    // 10 → 40: half an interval back would go below zero; it stops at the zero point (5 s back).
    assert.deepEqual(values('increase(x_total[10m])', scrapes(['x_total 10'], ['x_total 40'])), [['', 40]]);
  });

  it('samples that cover the range are extrapolated to its start; the range is open on the left', () => {
    const covered = scrapes(['x_total 0'], ['x_total 10'], ['x_total 20'], ['x_total 30'], ['x_total 40']);
    // At 60 s the range (0, 60] holds the samples at 15…60 s: 10 → 40, the first 15 s from the start
    // (within 1.1 intervals), so 30 × 60/45; the sample at 0 s lies on the open edge.
    assert.deepEqual(values('increase(x_total[1m])', covered, 60), [['', 40]]);
    assert.deepEqual(values('rate(x_total[1m])', covered, 60), [['', Number((40 / 60).toFixed(6))]]);
  });

  it('a counter reset adds the value before it', () => {
    // 5, 8, 2: an increase of 3 + 2 = 5 in 30 s, extrapolated by half an interval: 5 × 37.5/30.
    assert.deepEqual(values('increase(x_total[10m])', scrapes(['x_total 5'], ['x_total 8'], ['x_total 2'])), [['', 6.25]]);
  });
});

describe('rule evaluator: instant selectors', () => {
  it('read the latest scrape; a series missing from it is stale, so absent', () => {
    const on = scrapes(['up{pod="a"} 1', 'up{pod="b"} 1'], ['up{pod="a"} 1']);
    assert.deepEqual(values('up', on), [['__name__=up,pod=a', 1]]);
  });

  it('look back at most 5 minutes', () => {
    const on = scrapes(['up 1']);
    assert.deepEqual(values('up', on, 299), [['__name__=up', 1]]);
    assert.deepEqual(values('up', on, 300), []);
  });
});

describe('rule evaluator: the grammar of our rules', () => {
  const on = scrapes(
    ['r_total{model="m",result="ok"} 0', 'r_total{model="m",result="stream_broken"} 0', 'ep{pool="p",state="Ready"} 2'],
    [
      'r_total{model="m",result="ok"} 30',
      'r_total{model="m",result="stream_broken"} 3',
      'ep{pool="p",state="Ready"} 0',
      'ep{pool="p",state="Quarantined"} 2',
      'ttft_sum{pool="p",endpoint="a"} 10',
      'ttft_count{pool="p",endpoint="a"} 10',
      'ttft_sum{pool="p",endpoint="b"} 10',
      'ttft_count{pool="p",endpoint="b"} 10',
      'ttft_sum{pool="p",endpoint="c"} 100',
      'ttft_count{pool="p",endpoint="c"} 10',
    ],
  );

  it('regex matchers are anchored; a comparison filters', () => {
    assert.deepEqual(values('sum by (result) (increase(r_total{result!~"o"}[10m])) > 0', on), [
      ['result=ok', 30],
      ['result=stream_broken', 3],
    ]);
    assert.deepEqual(values('sum by (model) (rate(r_total{result="ok"}[5m])) > 1', on), []);
  });

  it('one-to-many division with on (…) group_left keeps the left labels', () => {
    assert.deepEqual(
      values(
        'sum by (model, result) (increase(r_total{result!="ok"}[5m])) / on (model) group_left sum by (model) (increase(r_total[5m]))',
        on,
      ),
      [['model=m,result=stream_broken', Number((3 / 33).toFixed(6))]],
    );
  });

  it('unless drops what the right side has', () => {
    assert.deepEqual(values('(sum by (pool) (ep) > 0) unless (sum by (pool) (ep{state="Ready"}) > 0)', on), [['pool=p', 2]]);
  });

  it('quantile by (…) and a scalar product on the right of a comparison', () => {
    const mean = 'sum by (pool, endpoint) (ttft_sum) / sum by (pool, endpoint) (ttft_count > 0)';
    assert.deepEqual(values(`(${mean}) > on (pool) group_left 3 * quantile by (pool) (0.5, ${mean})`, on), [['endpoint=c,pool=p', 10]]);
  });

  it('refuses what it does not know instead of guessing', () => {
    assert.throws(() => evaluateRule('histogram_quantile(0.9, x)', on), /unexpected|grammar|expected/);
    assert.throws(() => evaluateRule('x offset 5m', on), /unexpected/);
  });
});

describe("rule evaluator: an alert's for:", () => {
  const rule = { expr: 'sum by (result) (increase(x_total[10m])) > 0', forSeconds: 300 };
  const episode = [[`${BROKEN} 0`], [`${BROKEN} 1`]] as const;
  const after = (quiet: number): Timeline =>
    timeline(
      episode.map((lines) => samples(lines.join('\n'))),
      INTERVAL,
      quiet,
    );

  it('is pending while true for less than for:, firing once for: has passed, inactive once the increase leaves the range', () => {
    assert.equal(alertState(rule, after(0)), 'pending');
    assert.equal(alertState(rule, after(285)), 'pending', 'true since 15 s, evaluated at 300 s');
    assert.equal(alertState(rule, after(300)), 'firing');
    // At 600 s the 0 at 0 s is out of (0, 600]: every sample left reads 1, an increase of 0.
    assert.equal(alertState(rule, after(585)), 'inactive');
  });

  it('a series first created at 1 never trips it: Prometheus sees no increase', () => {
    const late = timeline([samples(''), samples(`${BROKEN} 1`)], INTERVAL, 600);
    for (let at = 0; at <= 615; at += INTERVAL) assert.deepEqual(evaluateRule(rule.expr, late, at), [], `at ${at} s`);
    assert.equal(alertState({ ...rule, forSeconds: 0 }, late), 'inactive');
  });
});
