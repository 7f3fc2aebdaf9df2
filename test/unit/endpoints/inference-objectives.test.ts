// InferenceObjectives as priorities: parsing (inference.networking.x-k8s.io/v1alpha2 as the GIE
// CRD defines it), the per-pool table (pools not ours, models claimed twice, deletion), and the
// precedence between the config's priorities and the objectives.
import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { indexObjectives, NO_OBJECTIVES, parseInferenceObjective } from '../../../src/endpoints/inference-objectives.js';
import type { ObjectiveDefinition } from '../../../src/endpoints/inference-objectives.js';
import { requestPriority } from '../../../src/routing/priority.js';
import type { PriorityFacts } from '../../../src/routing/priority.js';
import { DEFAULT_FLOW_CONTROL } from '../../../src/picker/settings.js';

const ANNOTATION = 'llm-extproc.io/models';

function objective(
  name: string,
  spec: Record<string, unknown>,
  models?: string,
  namespace = 'models',
): Parameters<typeof parseInferenceObjective>[0] {
  return {
    metadata: { name, namespace, ...(models === undefined ? {} : { annotations: { [ANNOTATION]: models } }) },
    spec,
  } as Parameters<typeof parseInferenceObjective>[0];
}

function parsed(object: Parameters<typeof parseInferenceObjective>[0]): ObjectiveDefinition {
  const result = parseInferenceObjective(object, ANNOTATION);
  if (typeof result === 'string') assert.fail(`does not parse: ${result}`);
  return result;
}

function problem(object: Parameters<typeof parseInferenceObjective>[0]): string {
  const result = parseInferenceObjective(object, ANNOTATION);
  assert.equal(typeof result, 'string', 'refused');
  return result as string;
}

describe('parseInferenceObjective', () => {
  it('reads priority, the pool in its own namespace, and the models annotation', () => {
    const full = parsed(
      objective(
        'batch',
        { priority: -5, poolRef: { group: 'inference.networking.k8s.io', kind: 'InferencePool', name: 'llama' } },
        ' b1, b2 ,',
      ),
    );
    assert.deepEqual(full, { id: 'models/batch', name: 'batch', pool: 'models/llama', priority: -5, models: ['b1', 'b2'] });
    // group and kind default as the CRD defaults them; an objective without priority sets none.
    assert.deepEqual(parsed(objective('plain', { poolRef: { name: 'llama' } })), {
      id: 'models/plain',
      name: 'plain',
      pool: 'models/llama',
      priority: undefined,
      models: [],
    });
  });

  it('says why it cannot use an objective', () => {
    assert.match(problem(objective('x', { priority: 1 })), /no spec\.poolRef\.name/);
    assert.match(
      problem(objective('x', { poolRef: { name: 'p', kind: 'Service', group: '' } })),
      /refers to kind "Service" in group "", not an InferencePool/,
    );
    assert.match(problem(objective('x', { priority: 1.5, poolRef: { name: 'p' } })), /not an integer/);
  });

  it("ignores a poolRef in group llm-d.ai, as llm-d's router does (ebab687: it matches poolRef.group to its --pool-group, inference.networking.k8s.io)", () => {
    // llm-d's CRDs accept the group (the pattern allows any DNS name), but llm-d publishes no
    // llm-d.ai InferencePool: an objective naming one belongs to no pool llm-d or we serve.
    assert.match(
      problem(objective('x', { priority: 1, poolRef: { name: 'p', kind: 'InferencePool', group: 'llm-d.ai' } })),
      /refers to kind "InferencePool" in group "llm-d\.ai", not an InferencePool/,
    );
  });
});

describe('indexObjectives', () => {
  const served = new Set(['models/llama']);

  it('keeps only the objectives of pools we serve, by name and by the models they name', () => {
    const { index, ignored } = indexObjectives(
      [
        parsed(objective('chat', { priority: 10, poolRef: { name: 'llama' } }, 'chat-model')),
        parsed(objective('theirs', { priority: 99, poolRef: { name: 'other-pool' } }, 'chat-model')),
        parsed(objective('elsewhere', { priority: 99, poolRef: { name: 'llama' } }, 'chat-model', 'team-b')),
        parsed(objective('unset', { poolRef: { name: 'llama' } }, 'unset-model')),
      ],
      served,
    );
    assert.deepEqual([...index.keys()], ['models/llama']);
    const llama = index.get('models/llama');
    assert.deepEqual([...(llama?.byName ?? [])], [['chat', 10]]);
    assert.deepEqual([...(llama?.byModel ?? [])], [['chat-model', 10]]);
    assert.deepEqual(
      ignored.map((i) => i.id),
      ['models/theirs', 'team-b/elsewhere'],
    );
  });

  it('a model two objectives name gets the one whose name sorts first, whatever the order they came in', () => {
    const a = parsed(objective('a-batch', { priority: 1, poolRef: { name: 'llama' } }, 'm'));
    const b = parsed(objective('b-batch', { priority: 7, poolRef: { name: 'llama' } }, 'm'));
    for (const order of [
      [a, b],
      [b, a],
    ]) {
      const { index, ignored } = indexObjectives(order, served);
      assert.equal(index.get('models/llama')?.byModel.get('m'), 1);
      // Both still apply by name (the header).
      assert.equal(index.get('models/llama')?.byName.get('b-batch'), 7);
      assert.deepEqual(ignored, [
        { id: 'models/b-batch', why: 'model-claimed', reason: 'model m already has the objective models/a-batch in pool models/llama' },
      ]);
    }
  });

  it('a deleted objective, or one whose pool went, is simply absent from the next table', () => {
    const chat = parsed(objective('chat', { priority: 10, poolRef: { name: 'llama' } }, 'chat-model'));
    assert.equal(indexObjectives([chat], served).index.get('models/llama')?.byName.get('chat'), 10);
    assert.equal(indexObjectives([], served).index.size, 0);
    assert.equal(indexObjectives([chat], new Set()).index.size, 0);
  });
});

describe('requestPriority: config and objectives', () => {
  const settings = { ...DEFAULT_FLOW_CONTROL, defaultPriority: 1, priorityByModel: { configured: 3 }, priorityByHeaderValue: { vip: 100 } };
  const { index } = indexObjectives(
    [
      parsed(objective('urgent', { priority: 50, poolRef: { name: 'llama' } })),
      parsed(objective('batch', { priority: -2, poolRef: { name: 'llama' } }, 'batch-model, configured')),
    ],
    new Set(['models/llama']),
  );
  const facts = (over: Partial<PriorityFacts>): PriorityFacts => ({
    pool: 'models/llama',
    model: 'other',
    priorityClass: undefined,
    objective: undefined,
    ...over,
  });

  it('first match wins: priority header class, objective header, priorityByModel, the model’s objective, the default', () => {
    const at = (over: Partial<PriorityFacts>): number => requestPriority(settings, index, facts(over));
    assert.equal(at({ priorityClass: 'vip', objective: 'urgent', model: 'batch-model' }), 100);
    assert.equal(at({ objective: 'urgent', model: 'configured' }), 50);
    assert.equal(at({ model: 'configured' }), 3, 'the config beats the objective naming the model');
    assert.equal(at({ model: 'batch-model' }), -2);
    assert.equal(at({}), 1);
    // Names and classes nobody defined fall through.
    assert.equal(at({ priorityClass: 'nobody', objective: 'nobody', model: 'batch-model' }), -2);
  });

  it('an empty objectiveHeader stops a request naming an objective, while objectives by model still apply', () => {
    const off = { ...settings, objectiveHeader: '' };
    assert.equal(requestPriority(off, index, facts({ objective: 'urgent' })), 1, 'the named objective no longer raises it');
    assert.equal(requestPriority(off, index, facts({ objective: 'urgent', model: 'batch-model' })), -2);
  });

  it('objectives apply only in their own pool', () => {
    assert.equal(requestPriority(settings, index, facts({ pool: 'team-b/llama', objective: 'urgent', model: 'batch-model' })), 1);
    assert.equal(requestPriority(settings, NO_OBJECTIVES, facts({ objective: 'urgent' })), 1);
  });
});
