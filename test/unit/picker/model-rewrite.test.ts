// Weighted model rewrite: the split follows the weights, a live replace moves it, and the body's
// `model` changes in place with every other byte as the client wrote it.

import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { ModelRewrites } from '../../../src/picker/model-rewrite.js';
import type { RewriteRule } from '../../../src/picker/model-rewrite.js';
import { withModel } from '../../../src/request/model-in-body.js';

const SPLIT: RewriteRule[] = [
  {
    matches: [{ model: { value: 'm' } }],
    targets: [
      { modelRewrite: 'm-v1', weight: 90 },
      { modelRewrite: 'm-v2', weight: 10 },
    ],
  },
];

/** How many of `n` requests for `model` go to each target. */
function targets(rewrites: ModelRewrites, n: number, model = 'm'): Record<string, number> {
  const counts: Record<string, number> = {};
  for (let i = 0; i < n; i++) {
    const target = rewrites.targetFor(model) ?? '(none)';
    counts[target] = (counts[target] ?? 0) + 1;
  }
  return counts;
}

void describe('ModelRewrites', () => {
  void it('splits a matched model by weight exactly, in every window of the total weight, and leaves other models alone', () => {
    const rewrites = new ModelRewrites(SPLIT);
    assert.deepEqual(targets(rewrites, 1000), { 'm-v1': 900, 'm-v2': 100 });
    // Smooth: each run of 100 requests is 90/10 too, the canary spread through it rather than in a block.
    for (let window = 0; window < 5; window++) assert.deepEqual(targets(rewrites, 100), { 'm-v1': 90, 'm-v2': 10 });
    const first20 = Array.from({ length: 20 }, () => rewrites.targetFor('m'));
    assert.equal(first20.filter((t) => t === 'm-v2').length, 2, `two canaries in 20, apart: ${first20.join(',')}`);
    assert.notEqual(first20.indexOf('m-v2'), first20.lastIndexOf('m-v2') - 1);
    assert.equal(rewrites.targetFor('other'), undefined);
  });

  void it('follows a live replace at once, and an empty set rewrites nothing', () => {
    const rewrites = new ModelRewrites(SPLIT);
    targets(rewrites, 37);
    rewrites.replace([{ matches: [{ model: { value: 'm' } }], targets: [{ modelRewrite: 'm-v2' }] }]);
    assert.deepEqual(targets(rewrites, 100), { 'm-v2': 100 });
    rewrites.replace([]);
    assert.equal(rewrites.targetFor('m'), undefined);
    assert.equal(rewrites.empty, true);
  });

  void it('an exact match beats a rule without matches wherever it is listed; the first exact rule wins', () => {
    const rewrites = new ModelRewrites([
      { targets: [{ modelRewrite: 'catch-all' }] },
      { matches: [], targets: [{ modelRewrite: 'second catch-all' }] },
      { matches: [{ model: { value: 'm' } }], targets: [{ modelRewrite: 'first' }] },
      { matches: [{ model: { value: 'm' } }, { model: { value: 'n' } }], targets: [{ modelRewrite: 'second' }] },
    ]);
    assert.equal(rewrites.targetFor('m'), 'first');
    assert.equal(rewrites.targetFor('n'), 'second');
    assert.equal(rewrites.targetFor('anything'), 'catch-all');
  });

  void it('weights absent on every target split evenly', () => {
    const rewrites = new ModelRewrites([
      { matches: [{ model: { value: 'm' } }], targets: [{ modelRewrite: 'a' }, { modelRewrite: 'b' }, { modelRewrite: 'c' }] },
    ]);
    assert.deepEqual(targets(rewrites, 300), { a: 100, b: 100, c: 100 });
  });
});

void describe('withModel', () => {
  void it('changes only the top-level model value; key order, spacing, escapes and nested models stay as written', () => {
    const body = Buffer.from('{ "messages":[{"role":"user","content":"caf\\u00e9","model":"inner"}] ,\n "model" : "m",  "n":1.50 }');
    const changed = withModel(body, 'm-v2');
    assert.equal(
      changed?.toString(),
      '{ "messages":[{"role":"user","content":"caf\\u00e9","model":"inner"}] ,\n "model" : "m-v2",  "n":1.50 }',
    );
    assert.equal(withModel(Buffer.from('{"model":"m"}'), 'a"b')?.toString(), '{"model":"a\\"b"}');
  });

  void it('leaves a body alone when its model is not a plain string member', () => {
    assert.equal(withModel(Buffer.from('{"model":null}'), 'x'), undefined);
    assert.equal(withModel(Buffer.from('[{"model":"m"}]'), 'x'), undefined);
    assert.equal(withModel(Buffer.from('{"messages":[]}'), 'x'), undefined);
  });
});
