// InferenceModelRewrites as rules: llm-d's fields read, unusable objects refused whole with a
// reason, and the rules of our pools' objects listed oldest first (llm-d's precedence).

import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { orderRewrites, parseInferenceModelRewrite } from '../../../src/endpoints/inference-model-rewrites.js';
import type { RewriteDefinition } from '../../../src/endpoints/inference-model-rewrites.js';
import { ModelRewrites } from '../../../src/picker/model-rewrite.js';

function rewrite(name: string, spec: unknown, created = '2026-12-01T00:00:00Z'): object {
  return { metadata: { name, namespace: 'ns', creationTimestamp: created }, spec };
}

function parsed(object: object): RewriteDefinition {
  const result = parseInferenceModelRewrite(object);
  assert.ok(typeof result === 'object', typeof result === 'string' ? result : 'parsed');
  return result;
}

const SPLIT = {
  poolRef: { name: 'pool' },
  rules: [
    {
      matches: [{ model: { type: 'Exact', value: 'm' } }],
      targets: [
        { modelRewrite: 'm-v1', weight: 90 },
        { modelRewrite: 'm-v2', weight: 10 },
      ],
    },
  ],
};

void describe('parseInferenceModelRewrite', () => {
  void it("reads llm-d's fields: pool, exact matches, weighted targets; a rule without matches matches every model", () => {
    const def = parsed(rewrite('split', { ...SPLIT, rules: [...SPLIT.rules, { targets: [{ modelRewrite: 'fallback' }] }] }));
    assert.equal(def.id, 'ns/split');
    assert.equal(def.pool, 'ns/pool');
    assert.deepEqual(def.rules, [
      {
        name: 'ns/split',
        matches: [{ model: { value: 'm' } }],
        targets: [
          { modelRewrite: 'm-v1', weight: 90 },
          { modelRewrite: 'm-v2', weight: 10 },
        ],
      },
      { name: 'ns/split', matches: [], targets: [{ modelRewrite: 'fallback' }] },
    ]);
  });

  void it('refuses an object it cannot apply whole, saying why', () => {
    const bad: Array<[unknown, RegExp]> = [
      [{ rules: [] }, /no spec.poolRef.name/],
      [{ poolRef: { name: 'pool', kind: 'Service', group: '' }, rules: [] }, /not an InferencePool/],
      [{ poolRef: { name: 'pool' } }, /no spec.rules/],
      [
        { poolRef: { name: 'pool' }, rules: [{ matches: [{ model: { type: 'Prefix', value: 'm' } }], targets: [{ modelRewrite: 'x' }] }] },
        /rules\[0\] has a match that is not an Exact/,
      ],
      [{ poolRef: { name: 'pool' }, rules: [{ targets: [{ modelRewrite: 'x', weight: 0 }] }] }, /weight outside 1\.\.1000000/],
      [{ poolRef: { name: 'pool' }, rules: [{ targets: [{ weight: 3 }] }] }, /without modelRewrite/],
    ];
    for (const [spec, why] of bad) {
      const result = parseInferenceModelRewrite(rewrite('bad', spec));
      assert.ok(typeof result === 'string', `refused: ${JSON.stringify(spec)}`);
      assert.match(result, why);
    }
  });
});

void describe('orderRewrites', () => {
  void it("older objects' rules first; other pools' left out; applied, an exact match beats a catch-all", () => {
    const older = parsed(
      rewrite('older', { poolRef: { name: 'pool' }, rules: [{ targets: [{ modelRewrite: 'everything' }] }] }, '2026-11-01T00:00:00Z'),
    );
    const newer = parsed(
      rewrite('newer', {
        poolRef: { name: 'pool' },
        rules: [{ matches: [{ model: { value: 'm' } }], targets: [{ modelRewrite: 'newer-m' }] }],
      }),
    );
    const tie = parsed(
      rewrite('a-tie', {
        poolRef: { name: 'pool' },
        rules: [{ matches: [{ model: { value: 'm' } }], targets: [{ modelRewrite: 'tie-m' }] }],
      }),
    );
    const elsewhere = parsed(
      rewrite('elsewhere', {
        poolRef: { name: 'other' },
        rules: [{ matches: [{ model: { value: 'n' } }], targets: [{ modelRewrite: 'x' }] }],
      }),
    );
    const rules = orderRewrites([newer, elsewhere, older, tie], new Set(['ns/pool']));
    assert.deepEqual(
      rules.map((r) => r.targets[0].modelRewrite),
      ['everything', 'tie-m', 'newer-m'],
    );
    const applied = new ModelRewrites(rules);
    assert.equal(applied.targetFor('m'), 'tie-m', 'same age: the name that sorts first, whatever the event order');
    assert.equal(applied.targetFor('n'), 'everything', "another pool's rule for n does not apply here");
  });
});
