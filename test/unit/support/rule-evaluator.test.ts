// The test-side evaluator of the chart's alert expressions (test/support/rule-evaluator.ts): the
// PromQL semantics our rules rely on, checked on hand-made scrapes, and refusal of the rest.

import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { samples } from '../../support/prometheus.js';
import { evaluateRule } from '../../support/rule-evaluator.js';

const BASE = samples(
  ['llm_extproc_requests_total{model="m",result="ok"} 10', 'llm_extproc_endpoints{pool="p",state="Ready"} 2'].join('\n'),
);
const NOW = samples(
  [
    'llm_extproc_requests_total{model="m",result="ok"} 40',
    'llm_extproc_requests_total{model="m",result="stream_broken"} 3',
    'llm_extproc_requests_total{model="m",result="cancelled_mid_stream"} 50',
    'llm_extproc_endpoints{pool="p",state="Ready"} 0',
    'llm_extproc_endpoints{pool="p",state="Quarantined"} 2',
    'ttft_sum{pool="p",endpoint="a"} 10',
    'ttft_count{pool="p",endpoint="a"} 10',
    'ttft_sum{pool="p",endpoint="b"} 10',
    'ttft_count{pool="p",endpoint="b"} 10',
    'ttft_sum{pool="p",endpoint="c"} 100',
    'ttft_count{pool="p",endpoint="c"} 10',
  ].join('\n'),
);
const scrapes = { base: BASE, now: NOW };

function values(expr: string): Array<[string, number]> {
  return evaluateRule(expr, scrapes)
    .map((p): [string, number] => [
      [...p.labels]
        .map(([k, v]) => `${k}=${v}`)
        .sort()
        .join(','),
      Number(p.value.toFixed(6)),
    ])
    .sort(([a], [b]) => a.localeCompare(b));
}

describe('rule evaluator (the grammar of our chart rules)', () => {
  it('increase counts from the base scrape; a series absent there counts from 0', () => {
    assert.deepEqual(values('sum by (result) (increase(llm_extproc_requests_total{result!~"ok|cancelled_.*"}[10m]))'), [
      ['result=stream_broken', 3],
    ]);
    assert.deepEqual(values('sum by (model) (increase(llm_extproc_requests_total[10m]))'), [['model=m', 83]]);
  });

  it('rate divides by the range; a comparison filters', () => {
    assert.deepEqual(values('sum by (model) (rate(llm_extproc_requests_total{result="ok"}[5m])) > 0'), [['model=m', 0.1]]);
    assert.deepEqual(values('sum by (model) (rate(llm_extproc_requests_total{result="ok"}[5m])) > 1'), []);
  });

  it('one-to-many division with on (…) group_left keeps the left labels', () => {
    assert.deepEqual(
      values(
        'sum by (model, result) (increase(llm_extproc_requests_total{result!~"ok|cancelled_.*"}[5m])) / on (model) group_left sum by (model) (increase(llm_extproc_requests_total[5m]))',
      ),
      [['model=m,result=stream_broken', Number((3 / 83).toFixed(6))]],
    );
  });

  it('unless drops what the right side has', () => {
    const expr = '(sum by (pool) (llm_extproc_endpoints) > 0) unless (sum by (pool) (llm_extproc_endpoints{state="Ready"}) > 0)';
    assert.deepEqual(values(expr), [['pool=p', 2]]);
  });

  it('quantile by (…) and a scalar product on the right of a comparison', () => {
    const mean = 'sum by (pool, endpoint) (ttft_sum) / sum by (pool, endpoint) (ttft_count > 0)';
    assert.deepEqual(values(`(${mean}) > on (pool) group_left 3 * quantile by (pool) (0.5, ${mean})`), [['endpoint=c,pool=p', 10]]);
  });

  it('refuses what it does not know instead of guessing', () => {
    assert.throws(() => evaluateRule('histogram_quantile(0.9, x)', scrapes), /unexpected|grammar|expected/);
    assert.throws(() => evaluateRule('x offset 5m', scrapes), /unexpected/);
  });
});
