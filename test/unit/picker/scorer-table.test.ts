// The scorer table (src/picker/scorer-table.ts) is the one declaration of each scorer: its weight
// and default, its config schema entry, the merge of a config file onto the defaults and the
// settings' defaults are derived from it. Shown for the production table, and for two scorers that
// exist only here, each added the way a new scorer is (a function and a row): one reads a request
// header, the other per-endpoint state fed from outside the picker (as KV-cache events would).

import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { Type } from '@sinclair/typebox';
import { Value } from '@sinclair/typebox/value';
import { buildConfig } from '../../../src/config/config.js';
import { scorerSections, scorerWeights } from '../../../src/config/schema.js';
import type { Endpoint, PoolView } from '../../../src/endpoints/model.js';
import { Picker } from '../../../src/picker/picker.js';
import {
  candidateScorers,
  DEFAULT_LATENCY,
  defaultWeights,
  mergedSections,
  mergedWeights,
  onlyScorers,
  SCORERS,
  sectionDefaults,
} from '../../../src/picker/scorer-table.js';
import type { CandidateScorer, ScorerRow, ScorerTable, WeightsOf } from '../../../src/picker/scorer-table.js';
import { DEFAULT_PICKER_SETTINGS, DEFAULT_WEIGHTS } from '../../../src/picker/settings.js';
import { SignalBoard } from '../../../src/picker/signals.js';
import { POLICY_WEIGHTS } from '../../../scripts/simulate/sim.js';

const refuse = (message: string): never => {
  throw new Error(message);
};

describe('the production scorer table', () => {
  it('gives every scorer its default weight, in DEFAULT_WEIGHTS and in the config schema', () => {
    assert.deepEqual(DEFAULT_WEIGHTS, { queue: 1, kvCache: 1, inFlight: 1, prefix: 8, lora: 2, latency: 2, session: 100 });
    const schema = scorerWeights(SCORERS);
    assert.deepEqual(Object.keys(schema.properties), Object.keys(SCORERS));
    for (const [name, row] of Object.entries(SCORERS)) {
      const property = schema.properties[name as keyof typeof SCORERS];
      assert.equal(property.description, `${row.prefers} Default ${row.weight}.`);
      assert.equal(property.minimum, 0);
    }
  });

  it('merges a config file onto the defaults: weights given win, the others keep their default', () => {
    assert.deepEqual(mergedWeights(SCORERS, { prefix: 0, lora: 7 }), { ...DEFAULT_WEIGHTS, prefix: 0, lora: 7 });
    assert.deepEqual(mergedWeights(SCORERS, undefined), DEFAULT_WEIGHTS);
    const config = buildConfig(
      'picker:\n  weights:\n    kvCache: 3\n  prefix:\n    keyBlocks: 8\n  latency:\n    halfLifeSeconds: 4\n',
      {},
    );
    assert.deepEqual(config.picker.weights, { ...DEFAULT_WEIGHTS, kvCache: 3 });
    assert.deepEqual(config.picker.prefix, { ...DEFAULT_PICKER_SETTINGS.prefix, keyBlocks: 8 });
    assert.deepEqual(config.picker.latency, { ...DEFAULT_LATENCY, halfLifeMs: 4000 });
  });

  it('derives the sections (prefix, lora, latency, session) and their defaults, and applies their own rules', () => {
    assert.deepEqual(Object.keys(scorerSections(SCORERS)), ['prefix', 'lora', 'latency', 'session']);
    const defaults = sectionDefaults(SCORERS);
    assert.deepEqual(defaults, {
      prefix: DEFAULT_PICKER_SETTINGS.prefix,
      lora: DEFAULT_PICKER_SETTINGS.lora,
      latency: DEFAULT_PICKER_SETTINGS.latency,
      session: DEFAULT_PICKER_SETTINGS.session,
    });
    assert.throws(
      () => mergedSections(SCORERS, { latency: { recoverFactor: 3 } }, refuse),
      /^Error: picker\.latency\.recoverFactor: must be < outlierFactor \(2\)/,
    );
  });

  it("derives the simulator's policies: least in-flight is the in-flight scorer alone, the pipeline every scorer at its default", () => {
    assert.deepEqual(POLICY_WEIGHTS['least-in-flight'], onlyScorers(SCORERS, { inFlight: 1 }));
    assert.deepEqual(POLICY_WEIGHTS.pipeline, defaultWeights(SCORERS));
    assert.deepEqual(POLICY_WEIGHTS['pipeline without latency'], { ...defaultWeights(SCORERS), latency: 0 });
  });
});

// ── two scorers that exist only here ───────────────────────────────────────────────────────

/** Its function: 1 for the endpoint a request header pins the session to. */
const pinnedScore = (address: string, pinned: string): number => (address === pinned ? 1 : 0);

interface PinSettings {
  readonly header: string;
}

/** Its row: a weight, what it prefers, its settings section, and how to make it. */
const SESSION_PIN = {
  weight: 10,
  prefers: 'The endpoint the session header names.',
  settings: {
    description: 'Session pinning.',
    fields: { header: Type.Optional(Type.String({ description: 'Header naming the endpoint. Default x-session-endpoint.' })) },
    defaults: { header: 'x-session-endpoint' },
    read: (given, defaults) => ({ header: typeof given.header === 'string' ? given.header : defaults.header }),
  },
  runs: {
    create: ({ settings }): CandidateScorer => ({
      forRequest: (request) => {
        const pinned = request.header?.(settings.header);
        return pinned === undefined ? undefined : (endpoint) => pinnedScore(endpoint.address, pinned);
      },
    }),
  },
} satisfies ScorerRow<PinSettings>;

/** Per-endpoint state fed from outside the picker: blocks each endpoint holds (KV-cache events would). */
const warmBlocks = new Map<string, number>();

/** Its function: the share of the most any endpoint holds. */
const warmScore = (blocks: number, most: number): number => (most > 0 ? blocks / most : 0);

const WARM = {
  weight: 3,
  prefers: 'Endpoints holding more of the cache, more first.',
  runs: {
    create: (): CandidateScorer => ({
      forRequest: () => {
        const most = Math.max(0, ...warmBlocks.values());
        return most === 0 ? undefined : (endpoint) => warmScore(warmBlocks.get(endpoint.address) ?? 0, most);
      },
    }),
  },
} satisfies ScorerRow;

const TABLE = { ...SCORERS, sessionPin: SESSION_PIN, warm: WARM } satisfies ScorerTable;

const ADDRESSES = ['10.0.0.1:8000', '10.0.0.2:8000', '10.0.0.3:8000'];
const POOLS: PoolView[] = [
  {
    name: 'p',
    models: ['m'],
    endpoints: ADDRESSES.map((address): Endpoint => ({ id: address, address, state: 'Ready', reason: '', pool: 'p' })),
  },
];

function pickerWith(weights: WeightsOf<typeof TABLE>, sections = sectionDefaults(TABLE)): { picker: Picker; board: SignalBoard } {
  const board = new SignalBoard();
  const picker = new Picker(board, {
    weights,
    scorers: candidateScorers(TABLE, weights, sections, board),
    fallbacks: 2,
    boundedLoad: { factor: 1.1, slack: 1 },
    maxAdaptersPerServer: 4,
    poolPolicy: () => ({}),
    random: () => 0,
  });
  return { picker, board };
}

function primary(picker: Picker, headers: Record<string, string> = {}): string | undefined {
  const outcome = picker.pick(POOLS, { model: 'm', header: (name) => headers[name] });
  return outcome.kind === 'picked' ? outcome.endpoints[0].address : undefined;
}

describe('a scorer added as a function and a row', () => {
  it('has its weight in the config schema, with its default, and a config file may set it', () => {
    const schema = scorerWeights(TABLE);
    assert.equal(schema.properties.sessionPin.description, 'The endpoint the session header names. Default 10.');
    assert.ok(Value.Check(schema, { sessionPin: 2, warm: 0, prefix: 1 }));
    assert.ok(!Value.Check(schema, { sessionPin: -1 }), 'a weight is never negative');
    assert.ok(!Value.Check(schema, { sesionPin: 2 }), 'a misspelt scorer is refused');
    assert.deepEqual(mergedWeights(TABLE, { sessionPin: 2 }), { ...DEFAULT_WEIGHTS, sessionPin: 2, warm: 3 });
  });

  it('has its section in the config schema, with its defaults, merged like the others', () => {
    const sections = scorerSections(TABLE);
    assert.deepEqual(Object.keys(sections), ['prefix', 'lora', 'latency', 'session', 'sessionPin']);
    assert.ok(Value.Check(Type.Object(sections), { sessionPin: { header: 'x-pin' } }));
    assert.equal(sectionDefaults(TABLE).sessionPin.header, 'x-session-endpoint');
    assert.equal(mergedSections(TABLE, { sessionPin: { header: 'x-pin' } }, refuse).sessionPin.header, 'x-pin');
  });

  it('reads a request header: the pinned endpoint leads; without the header it says nothing and load decides', () => {
    const weights = { ...onlyScorers(TABLE, { inFlight: 1 }), sessionPin: 10 };
    const { picker, board } = pickerWith(weights);
    board.cell(ADDRESSES[2]).inFlight = 5; // the busiest by far
    assert.equal(primary(picker, { 'x-session-endpoint': ADDRESSES[2] }), ADDRESSES[2]);
    assert.notEqual(primary(picker), ADDRESSES[2], 'no header: the busiest is not picked');
    const renamed = mergedSections(TABLE, { sessionPin: { header: 'x-pin' } }, refuse);
    const other = pickerWith(weights, renamed);
    other.board.cell(ADDRESSES[2]).inFlight = 5;
    assert.equal(primary(other.picker, { 'x-pin': ADDRESSES[2] }), ADDRESSES[2], 'its own settings name the header');
  });

  it('reads per-endpoint state kept outside the picker, as it is at each pick', () => {
    const weights = { ...onlyScorers(TABLE, { inFlight: 1 }), warm: 3 };
    const { picker } = pickerWith(weights);
    warmBlocks.clear();
    warmBlocks.set(ADDRESSES[1], 40);
    assert.equal(primary(picker), ADDRESSES[1]);
    warmBlocks.set(ADDRESSES[0], 80);
    assert.equal(primary(picker), ADDRESSES[0]);
    warmBlocks.clear();
  });

  it('is not made at all while its weight is 0', () => {
    const weights = onlyScorers(TABLE, { inFlight: 1 });
    assert.deepEqual(
      candidateScorers(TABLE, weights, sectionDefaults(TABLE), new SignalBoard()).map((s) => s.name),
      [],
    );
    assert.deepEqual(
      candidateScorers(TABLE, { ...weights, warm: 1 }, sectionDefaults(TABLE), new SignalBoard()).map((s) => s.name),
      ['warm'],
    );
  });
});
