// The picking pipeline: filters, weighted scorers, prefix and LoRA affinity, shedding, and the
// ordered primary + fallbacks it returns; plus the load tracker that feeds it.
import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import fc from 'fast-check';
import { ENDPOINT_STATES, isRoutable } from '../../../src/endpoints/model.js';
import type { Endpoint, EndpointState, PoolView } from '../../../src/endpoints/model.js';
import { LoadTracker } from '../../../src/picker/load-tracker.js';
import { Picker } from '../../../src/picker/picker.js';
import { DEFAULT_SATURATION } from '../../../src/picker/saturation.js';
import { DEFAULT_WEIGHTS } from '../../../src/picker/settings.js';
import type { PickOutcome, PickRequest, PipelineOptions } from '../../../src/picker/picker.js';
import type { PoolPolicy } from '../../../src/picker/settings.js';
import { onlyScorers, SCORERS } from '../../../src/picker/scorer-table.js';
import type { ScorerWeights } from '../../../src/picker/scorer-table.js';
import { affinityKey } from '../../../src/routing/affinity-key.js';
import { promptPrefixOf } from '../../../src/request/prompt-prefix.js';
import { recordScrape, recordScrapeFailure, SignalBoard } from '../../../src/picker/signals.js';
import type { ServerLoad } from '../../../src/picker/signals.js';

function ep(address: string, state: EndpointState = 'Ready', pool = 'p'): Endpoint {
  return { id: address === '' ? `pod-${state}` : address, address, state, reason: '', pool };
}

function poolOf(name: string, endpoints: Endpoint[]): PoolView {
  return { name, models: ['m'], endpoints: endpoints.map((e) => ({ ...e, pool: name })) };
}

const IN_FLIGHT: ScorerWeights = onlyScorers(SCORERS, { inFlight: 1 });

function picker(board: SignalBoard, options: Partial<PipelineOptions> & { draws?: number[] } = {}): Picker {
  const draws = options.draws ?? [0];
  let i = 0;
  return new Picker(board, {
    weights: DEFAULT_WEIGHTS,
    fallbacks: 2,
    boundedLoad: { factor: 1.25, slack: 2 },
    maxAdaptersPerServer: 2,
    poolPolicy: () => ({}),
    // One draw per pick; the test says which.
    random: () => draws[i++ % draws.length],
    ...options,
  });
}

function server(load: Partial<ServerLoad>): ServerLoad {
  return { waiting: 0, running: 0, kvCacheUsage: 0, runningAdapters: [], waitingAdapters: [], maxAdapters: undefined, ...load };
}

function report(board: SignalBoard, table: Record<string, Partial<ServerLoad> | 'failing'>): void {
  for (const [address, load] of Object.entries(table)) {
    if (load === 'failing') recordScrapeFailure(board.cell(address), 'connection failed');
    else recordScrape(board.cell(address), server(load), 0);
  }
}

function inFlight(board: SignalBoard, table: Record<string, number>): void {
  for (const [address, n] of Object.entries(table)) board.cell(address).inFlight = n;
}

function addresses(outcome: PickOutcome): string[] {
  assert.equal(outcome.kind, 'picked', `expected a pick, got ${JSON.stringify(outcome)}`);
  return outcome.kind === 'picked' ? outcome.endpoints.map((e) => e.address) : [];
}

/** A chat request as routing hands it to the picker: its key over 16-character blocks, at most 4 of them. */
const chat = (system: string, user: string): PickRequest => {
  const prompt = promptPrefixOf(
    {
      messages: [
        { role: 'system', content: system },
        { role: 'user', content: user },
      ],
    },
    { chars: 64, tokens: 16 },
  );
  const key = affinityKey(prompt, { blockTokens: 4, charsPerToken: 4 }, 4);
  return key === undefined ? { model: 'm' } : { model: 'm', affinityKey: key };
};

const fleet = (n: number): PoolView[] => [
  poolOf(
    'p',
    Array.from({ length: n }, (_, i) => ep(`10.0.0.${i + 1}:8000`)),
  ),
];

describe('pipeline: filters and order (least in-flight weights)', () => {
  const cases: ReadonlyArray<{
    name: string;
    pools: PoolView[];
    load?: Record<string, number>;
    fallbacks: number;
    draw: number;
    subset?: string[];
    expected: string[];
  }> = [
    {
      name: 'least in-flight first',
      pools: [poolOf('p', [ep('a:1'), ep('b:1'), ep('c:1')])],
      load: { 'a:1': 5, 'c:1': 2 },
      fallbacks: 2,
      draw: 0,
      expected: ['b:1', 'c:1', 'a:1'],
    },
    {
      name: 'equal loads: the random start decides (start 0)',
      pools: [poolOf('p', [ep('a:1'), ep('b:1'), ep('c:1')])],
      fallbacks: 2,
      draw: 0,
      expected: ['a:1', 'b:1', 'c:1'],
    },
    {
      name: 'equal loads: the random start decides (start 2)',
      pools: [poolOf('p', [ep('a:1'), ep('b:1'), ep('c:1')])],
      fallbacks: 2,
      draw: 0.7,
      expected: ['c:1', 'a:1', 'b:1'],
    },
    {
      name: 'fallbacks limit the list to 1 + fallbacks',
      pools: [poolOf('p', [ep('a:1'), ep('b:1'), ep('c:1'), ep('d:1')])],
      load: { 'a:1': 1, 'b:1': 1 },
      fallbacks: 1,
      draw: 0,
      expected: ['c:1', 'd:1'],
    },
    {
      name: 'more fallbacks than endpoints returns them all',
      pools: [poolOf('p', [ep('a:1'), ep('b:1')])],
      fallbacks: 5,
      draw: 0,
      expected: ['a:1', 'b:1'],
    },
    {
      name: 'negative fallbacks still give a primary',
      pools: [poolOf('p', [ep('a:1'), ep('b:1')])],
      load: { 'a:1': 1 },
      fallbacks: -3,
      draw: 0,
      expected: ['b:1'],
    },
    {
      name: 'only Ready endpoints with an address are candidates',
      pools: [
        poolOf('p', [
          ep('a:1', 'Starting'),
          ep('b:1', 'Quarantined'),
          ep('', 'Ready'),
          ep('c:1', 'NotReady'),
          ep('d:1'),
          ep('e:1', 'Terminating'),
        ]),
      ],
      fallbacks: 5,
      draw: 0,
      expected: ['d:1'],
    },
    {
      name: 'endpoints of every pool of the model compete',
      pools: [poolOf('big', [ep('a:1')]), poolOf('small', [ep('b:1')])],
      load: { 'a:1': 3, 'b:1': 1 },
      fallbacks: 1,
      draw: 0,
      expected: ['b:1', 'a:1'],
    },
    {
      name: 'an address listed in two pools appears once',
      pools: [poolOf('big', [ep('a:1'), ep('b:1')]), poolOf('small', [ep('b:1'), ep('c:1')])],
      fallbacks: 5,
      draw: 0,
      expected: ['a:1', 'b:1', 'c:1'],
    },
    {
      name: 'subset hint: only those addresses',
      pools: [poolOf('p', [ep('a:1'), ep('b:1'), ep('c:1')])],
      load: { 'c:1': 9 },
      fallbacks: 2,
      draw: 0,
      subset: ['c:1', 'a:1'],
      expected: ['a:1', 'c:1'],
    },
    {
      name: 'subset hint naming unknown addresses',
      pools: [poolOf('p', [ep('a:1'), ep('b:1')])],
      fallbacks: 2,
      draw: 0,
      subset: ['z:9', 'b:1', 'y:9', 'x:9'],
      expected: ['b:1'],
    },
  ];
  for (const c of cases) {
    it(c.name, () => {
      const board = new SignalBoard();
      inFlight(board, c.load ?? {});
      const p = picker(board, { weights: IN_FLIGHT, fallbacks: c.fallbacks, draws: [c.draw] });
      assert.deepEqual(
        addresses(p.pick(c.pools, { model: 'm', ...(c.subset === undefined ? {} : { subset: new Set(c.subset) }) })),
        c.expected,
      );
    });
  }

  it('nothing routable, or nothing in the subset: none', () => {
    const p = picker(new SignalBoard(), { weights: IN_FLIGHT });
    assert.deepEqual(p.pick([poolOf('p', [ep('a:1', 'Pending'), ep('b:1', 'CrashLoop')])], { model: 'm' }), { kind: 'none' });
    assert.deepEqual(p.pick([], { model: 'm' }), { kind: 'none' });
    assert.deepEqual(p.pick([poolOf('p', [ep('a:1')])], { model: 'm', subset: new Set(['b:1']) }), { kind: 'none' });
  });

  it('a Quarantined copy in one pool does not hide a Ready copy in another', () => {
    const outcome = picker(new SignalBoard(), { weights: IN_FLIGHT }).pick(
      [poolOf('big', [ep('a:1', 'Quarantined')]), poolOf('small', [ep('a:1')])],
      { model: 'm' },
    );
    assert.deepEqual(outcome.kind === 'picked' ? outcome.endpoints.map((e) => `${e.pool}/${e.address}`) : [], ['small/a:1']);
  });

  it('idle replicas share traffic: each comes first for some draw', () => {
    const pools = [poolOf('p', [ep('a:1'), ep('b:1'), ep('c:1')])];
    const firsts = new Set(
      [0.1, 0.5, 0.9].map((d) => addresses(picker(new SignalBoard(), { weights: IN_FLIGHT, draws: [d] }).pick(pools, { model: 'm' }))[0]),
    );
    assert.deepEqual([...firsts].sort(), ['a:1', 'b:1', 'c:1']);
  });
});

describe('pipeline: model-server load', () => {
  const pools = [poolOf('p', [ep('a:1'), ep('b:1'), ep('c:1')])];
  const cases: ReadonlyArray<{
    name: string;
    metrics: Record<string, Partial<ServerLoad> | 'failing'>;
    load?: Record<string, number>;
    draw?: number;
    expected: string[];
  }> = [
    {
      name: 'shortest queue first',
      metrics: { 'a:1': { waiting: 30 }, 'b:1': { waiting: 0 }, 'c:1': { waiting: 10 } },
      expected: ['b:1', 'c:1', 'a:1'],
    },
    {
      name: 'equal queues: emptier KV cache first',
      metrics: { 'a:1': { kvCacheUsage: 0.9 }, 'b:1': { kvCacheUsage: 0.5 }, 'c:1': { kvCacheUsage: 0.1 } },
      expected: ['c:1', 'b:1', 'a:1'],
    },
    {
      name: 'failing scrape is not preferred over an idle report',
      metrics: { 'a:1': 'failing', 'b:1': { waiting: 0 }, 'c:1': { waiting: 0 } },
      expected: ['a:1', 'b:1', 'c:1'].slice(1).concat('a:1'),
    },
    {
      name: 'missing metrics rank with the most loaded',
      metrics: { 'b:1': { waiting: 0 }, 'c:1': { waiting: 0 } },
      draw: 0,
      expected: ['b:1', 'c:1', 'a:1'],
    },
    { name: 'no metrics anywhere: in-flight decides', metrics: {}, load: { 'a:1': 2, 'b:1': 1 }, expected: ['c:1', 'b:1', 'a:1'] },
  ];
  for (const c of cases) {
    it(c.name, () => {
      const board = new SignalBoard();
      report(board, c.metrics);
      inFlight(board, c.load ?? {});
      const p = picker(board, { weights: { ...DEFAULT_WEIGHTS, prefix: 0, lora: 0 }, draws: [c.draw ?? 0] });
      assert.deepEqual(addresses(p.pick(pools, { model: 'm' })), c.expected);
    });
  }

  it("a queue that was ours when reported is not scored again: our in-flight count has it live, the others' share comes from the report", () => {
    const board = new SignalBoard();
    // a:1 queued our 3 requests when scraped, and they have ended since; b:1 queues 1 of someone else's.
    inFlight(board, { 'a:1': 3 });
    report(board, { 'a:1': { waiting: 3, running: 0 }, 'b:1': { waiting: 1, running: 0 } });
    inFlight(board, { 'a:1': 0 });
    const p = picker(board, { weights: { ...DEFAULT_WEIGHTS, prefix: 0, lora: 0 }, fallbacks: 1 });
    assert.deepEqual(addresses(p.pick([poolOf('p', [ep('a:1'), ep('b:1')])], { model: 'm' })), ['a:1', 'b:1']);
    // The same queue at a:1 when none of it was ours: three strangers wait there, and b:1 comes first.
    const strangers = new SignalBoard();
    report(strangers, { 'a:1': { waiting: 3, running: 0 }, 'b:1': { waiting: 1, running: 0 } });
    const q = picker(strangers, { weights: { ...DEFAULT_WEIGHTS, prefix: 0, lora: 0 }, fallbacks: 1 });
    assert.deepEqual(addresses(q.pick([poolOf('p', [ep('a:1'), ep('b:1')])], { model: 'm' })), ['b:1', 'a:1']);
  });

  it('a stale report counts as unknown', () => {
    const board = new SignalBoard();
    report(board, { 'a:1': { waiting: 0 }, 'b:1': { waiting: 5 } });
    board.cell('a:1').metricsState = 'stale';
    assert.deepEqual(addresses(picker(board, { fallbacks: 0 }).pick([poolOf('p', [ep('a:1'), ep('b:1')])], { model: 'm' })), ['b:1']);
  });
});

describe('pipeline: queue limit and shedding', () => {
  const policy =
    (limits: Record<string, number>) =>
    (pool: string): PoolPolicy =>
      pool in limits ? { maxQueueDepth: limits[pool] } : {};

  it('endpoints at their pool limit are filtered out', () => {
    const board = new SignalBoard();
    report(board, { 'a:1': { waiting: 10 }, 'b:1': { waiting: 3 } });
    const p = picker(board, { poolPolicy: policy({ p: 10 }) });
    assert.deepEqual(addresses(p.pick([poolOf('p', [ep('a:1'), ep('b:1')])], { model: 'm' })), ['b:1']);
  });

  it('every endpoint at its limit: shed, naming the pools and the shortest queue', () => {
    const board = new SignalBoard();
    report(board, { 'a:1': { waiting: 12 }, 'b:1': { waiting: 10 } });
    const outcome = picker(board, { poolPolicy: policy({ p: 10 }) }).pick([poolOf('p', [ep('a:1'), ep('b:1')])], { model: 'm' });
    assert.deepEqual(outcome, { kind: 'shed', pools: ['p'], shortestQueue: 10 });
  });

  it('the shortest queue named when shedding is the whole reported queue, ours included', () => {
    const board = new SignalBoard();
    inFlight(board, { 'a:1': 12, 'b:1': 10 });
    report(board, { 'a:1': { waiting: 12 }, 'b:1': { waiting: 10 } });
    const outcome = picker(board, { poolPolicy: policy({ p: 10 }) }).pick([poolOf('p', [ep('a:1'), ep('b:1')])], { model: 'm' });
    assert.deepEqual(outcome, { kind: 'shed', pools: ['p'], shortestQueue: 10 });
  });

  it('an endpoint with unknown metrics is never shed on a guess', () => {
    const board = new SignalBoard();
    report(board, { 'a:1': { waiting: 12 }, 'b:1': 'failing' });
    assert.deepEqual(
      addresses(picker(board, { poolPolicy: policy({ p: 10 }) }).pick([poolOf('p', [ep('a:1'), ep('b:1')])], { model: 'm' })),
      ['b:1'],
    );
  });

  it('a pool without a limit still takes requests', () => {
    const board = new SignalBoard();
    report(board, { 'a:1': { waiting: 50 }, 'b:1': { waiting: 50 } });
    const outcome = picker(board, { poolPolicy: policy({ big: 10 }) }).pick([poolOf('big', [ep('a:1')]), poolOf('small', [ep('b:1')])], {
      model: 'm',
    });
    assert.deepEqual(addresses(outcome), ['b:1']);
  });
});

describe('pipeline: room under flow control (saturation limits)', () => {
  const limits: PoolPolicy = { saturation: { ...DEFAULT_SATURATION, maxInFlight: 2, scraped: true } };
  const pools = [poolOf('p', [ep('a:1'), ep('b:1'), ep('c:1')])];
  const QUEUE_ONLY: ScorerWeights = onlyScorers(SCORERS, { queue: 1 });

  it('a replica at its in-flight limit goes after every replica with room, whatever its scores', () => {
    const board = new SignalBoard();
    report(board, { 'a:1': { waiting: 0 }, 'b:1': { waiting: 3 }, 'c:1': { waiting: 4 } });
    inFlight(board, { 'a:1': 2 });
    assert.deepEqual(addresses(picker(board, { weights: QUEUE_ONLY }).pick(pools, { model: 'm' })), ['a:1', 'b:1', 'c:1'], 'scores alone');
    assert.deepEqual(addresses(picker(board, { weights: QUEUE_ONLY, poolPolicy: () => limits }).pick(pools, { model: 'm' })), [
      'b:1',
      'c:1',
      'a:1',
    ]);
  });

  it('so does one reporting KV-cache use at the limit, and one without a fresh report', () => {
    const board = new SignalBoard();
    report(board, { 'a:1': { waiting: 0, kvCacheUsage: 0.85 }, 'b:1': { waiting: 0 }, 'c:1': { waiting: 4, kvCacheUsage: 0.1 } });
    board.cell('b:1').metricsState = 'stale';
    inFlight(board, { 'a:1': 1, 'c:1': 1 });
    const first = (weights: ScorerWeights, policy: PoolPolicy): string | undefined =>
      addresses(picker(board, { weights, poolPolicy: () => policy, fallbacks: 0 }).pick(pools, { model: 'm' }))[0];
    // By its queue a:1 leads, by our in-flight count b:1 (its report is stale): neither has room.
    assert.equal(first(QUEUE_ONLY, {}), 'a:1');
    assert.equal(first(QUEUE_ONLY, limits), 'c:1');
    assert.equal(first(IN_FLIGHT, {}), 'b:1');
    assert.equal(first(IN_FLIGHT, limits), 'c:1');
  });

  it('a prefix owner without room gives the request to another replica', () => {
    const board = new SignalBoard();
    report(board, { 'a:1': {}, 'b:1': {}, 'c:1': {} });
    const request = chat('You are a helpful assistant for the billing team.', 'hi');
    const [owner] = addresses(picker(board, { poolPolicy: () => limits }).pick(pools, request));
    inFlight(board, { [owner]: 2 });
    const [first, ...rest] = addresses(picker(board, { poolPolicy: () => limits }).pick(pools, request));
    assert.notEqual(first, owner);
    assert.deepEqual(rest.at(-1), owner, 'still the last fallback');
    assert.equal(addresses(picker(board).pick(pools, request))[0], owner, 'without flow control the owner keeps it (within bounded load)');
  });

  it('no replica with room: the order the scores give, fallbacks included', () => {
    const board = new SignalBoard();
    report(board, { 'a:1': { waiting: 9 }, 'b:1': { waiting: 6 }, 'c:1': { waiting: 7 } });
    const p = picker(board, { weights: QUEUE_ONLY, poolPolicy: () => limits });
    assert.deepEqual(addresses(p.pick(pools, { model: 'm' })), ['b:1', 'c:1', 'a:1']);
  });
});

describe('pipeline: prefix-cache affinity', () => {
  const system = 'You are a helpful assistant for ACME Corp. Answer briefly and cite the handbook.';

  it('requests sharing a system prompt land on one endpoint while it is not overloaded', () => {
    const board = new SignalBoard();
    const p = picker(board, { draws: [0, 0.3, 0.6, 0.9] });
    const primaries = new Set(['q1', 'q2', 'q3', 'q4', 'q5', 'q6'].map((q) => addresses(p.pick(fleet(8), chat(system, q)))[0]));
    assert.equal(primaries.size, 1);
  });

  it('different prefixes spread over the endpoints', () => {
    const p = picker(new SignalBoard());
    const primaries = new Set(
      Array.from(
        { length: 64 },
        (_, i) => addresses(p.pick(fleet(8), chat(`tenant ${i} system prompt, long enough to fill blocks`, 'hi')))[0],
      ),
    );
    assert.ok(primaries.size >= 6, `64 prefixes used only ${primaries.size} of 8 endpoints`);
  });

  it('two independent picker instances (two replicas) agree on every prefix', () => {
    const one = picker(new SignalBoard(), { draws: [0.1] });
    const two = picker(new SignalBoard(), { draws: [0.8] });
    for (let i = 0; i < 50; i++) {
      const request = chat(`tenant ${i} system prompt, long enough to fill blocks`, `question ${i}`);
      assert.equal(addresses(one.pick(fleet(10), request))[0], addresses(two.pick(fleet(10), request))[0], `prefix ${i}`);
    }
  });

  it('removing an endpoint remaps only the prefixes it owned', () => {
    const before = fleet(10);
    const removed = '10.0.0.4:8000';
    const after = [
      poolOf(
        'p',
        before[0].endpoints.filter((e) => e.address !== removed),
      ),
    ];
    const p = picker(new SignalBoard());
    let owned = 0;
    for (let i = 0; i < 200; i++) {
      const request = chat(`tenant ${i} system prompt, long enough to fill blocks`, 'hello');
      const was = addresses(p.pick(before, request))[0];
      const now = addresses(p.pick(after, request))[0];
      if (was === removed) {
        owned++;
        assert.notEqual(now, removed);
      } else assert.equal(now, was, `prefix ${i} moved from ${was} to ${now} though its owner stayed`);
    }
    assert.ok(owned > 0, 'the removed endpoint owned some prefixes');
  });

  it('the owner yields when it is overloaded (bounded load), and the choice stays consistent', () => {
    const board = new SignalBoard();
    const p = picker(board);
    const request = chat(system, 'hello');
    const owner = addresses(p.pick(fleet(4), request))[0];
    report(board, Object.fromEntries(fleet(4)[0].endpoints.map((e) => [e.address, { waiting: e.address === owner ? 40 : 1 }])));
    const next = addresses(p.pick(fleet(4), request))[0];
    assert.notEqual(next, owner);
    const twin = picker(board, { draws: [0.99] });
    assert.equal(addresses(twin.pick(fleet(4), request))[0], next);
  });

  // Bounded load reads an owner's load as the others' share from the last report plus our
  // in-flight count now (fleet of 4, factor 1.25, slack 2).
  it('our requests that finished since the scrape stop counting: the owner keeps its prefixes at once', () => {
    const board = new SignalBoard();
    const p = picker(board);
    const request = chat(system, 'hello');
    const owner = addresses(p.pick(fleet(4), request))[0];
    // The report's 6 running at the owner were all ours; then 5 of them finished.
    inFlight(board, { [owner]: 6 });
    report(board, Object.fromEntries(fleet(4)[0].endpoints.map((e) => [e.address, { running: e.address === owner ? 6 : 0 }])));
    assert.notEqual(addresses(p.pick(fleet(4), request))[0], owner, 'at 6 of 6 the owner is over its bound');
    inFlight(board, { [owner]: 1 });
    assert.equal(addresses(p.pick(fleet(4), request))[0], owner);
  });

  it("the others' share stays from the report while ours is added live: the owner yields before the next scrape", () => {
    const board = new SignalBoard();
    const p = picker(board);
    const request = chat(system, 'hello');
    const owner = addresses(p.pick(fleet(4), request))[0];
    // Other replicas keep 4 running at the owner and 1 at each other server; none of them ours.
    report(board, Object.fromEntries(fleet(4)[0].endpoints.map((e) => [e.address, { running: e.address === owner ? 4 : 1 }])));
    assert.equal(addresses(p.pick(fleet(4), request))[0], owner, '4 against a mean of 1.75 is within bounds');
    // Two of ours since: 6 against a mean of 2.25, past 1.25 × 2.25 + 2.
    inFlight(board, { [owner]: 2 });
    assert.notEqual(addresses(p.pick(fleet(4), request))[0], owner);
  });

  it('an owner whose metrics fail does not keep its prefixes when others report', () => {
    const board = new SignalBoard();
    const p = picker(board);
    const request = chat(system, 'hello');
    const owner = addresses(p.pick(fleet(4), request))[0];
    report(board, Object.fromEntries(fleet(4)[0].endpoints.map((e) => [e.address, e.address === owner ? 'failing' : { waiting: 0 }])));
    assert.notEqual(addresses(p.pick(fleet(4), request))[0], owner);
  });

  it("a keyed prompt that saves nothing yet (a conversation's first turn) goes to the key's home at equal loads, on every replica", () => {
    // No shared tokens anywhere: the owner is credited with nothing, so load decides, and ties go
    // where the key's later turns will be credited.
    const withShared = (request: PickRequest, sharedTokens: number): PickRequest => ({ ...request, sharedTokens });
    const homes = new Set<string>();
    for (let i = 0; i < 40; i++) {
      const request = chat(`conversation ${i} opens with this question, long enough for blocks`, 'q');
      const first = addresses(picker(new SignalBoard(), { draws: [0.1], fallbacks: 0 }).pick(fleet(8), withShared(request, 0)))[0];
      assert.equal(addresses(picker(new SignalBoard(), { draws: [0.9], fallbacks: 0 }).pick(fleet(8), withShared(request, 0)))[0], first);
      // Its next turn, with history to credit, is owned there.
      assert.equal(addresses(picker(new SignalBoard(), { draws: [0.5], fallbacks: 0 }).pick(fleet(8), withShared(request, 64)))[0], first);
      homes.add(first);
    }
    assert.ok(homes.size >= 6, `40 conversations used only ${homes.size} of 8 endpoints`);
    // A less loaded endpoint still wins over the home: nothing is saved there.
    const request = withShared(chat('conversation 0 opens with this question, long enough for blocks', 'q'), 0);
    const home = addresses(picker(new SignalBoard(), { fallbacks: 0 }).pick(fleet(3), request))[0];
    const board = new SignalBoard();
    inFlight(board, { [home]: 1 });
    assert.notEqual(addresses(picker(board, { fallbacks: 0 }).pick(fleet(3), request))[0], home);
  });

  it('no prompt: no affinity, load decides', () => {
    const board = new SignalBoard();
    inFlight(board, { '10.0.0.1:8000': 1, '10.0.0.2:8000': 1 });
    assert.deepEqual(addresses(picker(board, { fallbacks: 0 }).pick(fleet(3), { model: 'm' })), ['10.0.0.3:8000']);
  });
});

describe('pipeline: prefill saved, one scorer fed by either source', () => {
  const system = 'You are the assistant of company number 3. Rule 1: refunds within thirty days.';
  const pools = fleet(3);
  const everyone = pools[0].endpoints.map((e) => e.address);
  /** The key's owner while all are alike: the approximate source credits it with the shared part. */
  const ownerOf = (request: PickRequest): string => addresses(picker(new SignalBoard(), { fallbacks: 0 }).pick(pools, request))[0];

  it("a pool measured on time to first token alone keeps the defaults' exchange rate: a shared prompt worth more than a request ahead follows its owner", () => {
    const request: PickRequest = { ...chat(system, 'q1'), sharedTokens: 640 };
    const owner = ownerOf(request);
    const board = new SignalBoard();
    // The owner's cache is fuller (it holds the tenant's prompt): the KV-cache scorer prefers the others by 0.9.
    report(board, Object.fromEntries(everyone.map((a) => [a, { kvCacheUsage: a === owner ? 0.9 : 0 }])));
    // Slow servers (CPU): half a second to the first token, 0.7 s a request; prefill per token not measured (no usage).
    board.setPrefillCosts('p', { prefillSecondsPerToken: Number.NaN, queueSecondsPerRequest: 0.5, requestSeconds: 0.7 });
    // 640 tokens at the defaults' 1,000 tokens per request ahead: 0.32 s of a 0.7 s request saved.
    assert.equal(addresses(picker(board, { fallbacks: 0 }).pick(pools, request))[0], owner);
    // A request ahead there eats the saving: load decides.
    inFlight(board, { [owner]: 1 });
    assert.notEqual(addresses(picker(board, { fallbacks: 0 }).pick(pools, request))[0], owner);
  });

  it('a server whose KV events are trusted is credited with what they say it holds; one whose events are not, by the affinity estimate', () => {
    const request = chat(system, 'q1');
    const owner = ownerOf(request);
    const others = everyone.filter((a) => a !== owner);
    // Events say another server holds the prompt and the owner none: it goes there.
    const holds = (address: string, tokens: number) => ({
      bestTokens: tokens,
      matchedTokens: (a: string) => (a === address ? tokens : 0),
    });
    assert.equal(
      addresses(
        picker(new SignalBoard(), { fallbacks: 0 }).pick(pools, { ...request, sharedTokens: 640, prefix: holds(others[0], 640) }),
      )[0],
      others[0],
    );
    // The owner's events are not trusted (undefined): it is credited by the estimate, and keeps the prompt over a server holding less.
    const untrustedOwner = {
      bestTokens: 320,
      matchedTokens: (a: string) => (a === owner ? undefined : a === others[0] ? 320 : 0),
    };
    assert.equal(
      addresses(picker(new SignalBoard(), { fallbacks: 0 }).pick(pools, { ...request, sharedTokens: 640, prefix: untrustedOwner }))[0],
      owner,
    );
  });
});

describe('pipeline: LoRA affinity', () => {
  const pools = [poolOf('p', [ep('a:1'), ep('b:1'), ep('c:1')])];
  const weights = { ...DEFAULT_WEIGHTS, prefix: 0 };
  const cases: ReadonlyArray<{ name: string; metrics: Record<string, Partial<ServerLoad>>; expected: string[] }> = [
    {
      name: 'a server running the adapter is preferred',
      metrics: { 'a:1': {}, 'b:1': { runningAdapters: ['sql'] }, 'c:1': {} },
      expected: ['b:1', 'a:1', 'c:1'],
    },
    {
      name: 'loading (waiting) counts as having it',
      metrics: { 'a:1': {}, 'b:1': {}, 'c:1': { waitingAdapters: ['sql'] } },
      expected: ['c:1', 'a:1', 'b:1'],
    },
    {
      name: 'a server at the adapter limit without it comes last',
      metrics: {
        'a:1': { runningAdapters: ['x', 'y'] },
        'b:1': { runningAdapters: ['z'] },
        'c:1': { runningAdapters: ['sql'], waiting: 2 },
      },
      expected: ['b:1', 'c:1', 'a:1'],
    },
    {
      name: 'a model no server reports as an adapter: LoRA stays silent',
      metrics: { 'a:1': { runningAdapters: ['x', 'y'], waiting: 0 }, 'b:1': { waiting: 1 }, 'c:1': { waiting: 2 } },
      expected: ['a:1', 'b:1', 'c:1'],
    },
  ];
  for (const c of cases) {
    it(c.name, () => {
      const board = new SignalBoard();
      report(board, c.metrics);
      assert.deepEqual(addresses(picker(board, { weights }).pick(pools, { model: 'sql' })), c.expected);
    });
  }
});

describe('pipeline properties (least in-flight weights)', () => {
  const addressPool = ['10.0.0.1:80', '10.0.0.2:80', '10.0.0.3:80', '10.0.0.4:80', '10.0.0.5:80', '10.0.0.6:80'];
  const endpointArb = fc.record({
    address: fc.oneof(fc.constant(''), fc.constantFrom(...addressPool)),
    state: fc.constantFrom(...ENDPOINT_STATES),
  });
  const poolsArb = fc.array(fc.array(endpointArb, { maxLength: 6 }), { maxLength: 4 });
  const loadArb = fc.dictionary(fc.constantFrom(...addressPool), fc.nat({ max: 4 }));

  it('returns distinct Ready endpoints, as many as possible up to 1 + fallbacks, least loaded first', () => {
    fc.assert(
      fc.property(
        poolsArb,
        loadArb,
        fc.integer({ min: -1, max: 6 }),
        fc.double({ min: 0, max: 1, maxExcluded: true, noNaN: true }),
        (raw, table, fallbacks, draw) => {
          const pools = raw.map((endpoints, i) =>
            poolOf(
              `pool${i}`,
              endpoints.map((e, j) => ({ ...e, id: `e${i}-${j}`, reason: '', pool: '' })),
            ),
          );
          const board = new SignalBoard();
          inFlight(board, table);
          const outcome = picker(board, { weights: IN_FLIGHT, fallbacks, draws: [draw] }).pick(pools, { model: 'm' });
          const routable = new Set(pools.flatMap((p) => p.endpoints.filter(isRoutable).map((e) => e.address)));
          if (routable.size === 0) return assert.deepEqual(outcome, { kind: 'none' });
          const picked = addresses(outcome);
          assert.equal(new Set(picked).size, picked.length, 'no duplicate addresses');
          assert.ok(
            picked.every((a) => routable.has(a)),
            'only routable endpoints',
          );
          assert.equal(picked.length, Math.min(routable.size, 1 + Math.max(0, fallbacks)));
          const loads = picked.map((a) => table[a] ?? 0);
          assert.deepEqual(
            loads,
            [...loads].sort((a, b) => a - b),
            'sorted by load',
          );
          const left = [...routable].filter((a) => !picked.includes(a)).map((a) => table[a] ?? 0);
          if (left.length > 0) assert.ok(Math.min(...left) >= Math.max(...loads));
        },
      ),
    );
  });

  it('with every scorer on, picks are distinct, routable and 1 + fallbacks long', () => {
    fc.assert(
      fc.property(
        poolsArb,
        loadArb,
        fc.dictionary(fc.constantFrom(...addressPool), fc.nat({ max: 20 })),
        fc.option(fc.nat(), { nil: undefined }),
        (raw, table, queues, key) => {
          const pools = raw.map((endpoints, i) =>
            poolOf(
              `pool${i}`,
              endpoints.map((e, j) => ({ ...e, id: `e${i}-${j}`, reason: '', pool: '' })),
            ),
          );
          const board = new SignalBoard();
          inFlight(board, table);
          report(board, Object.fromEntries(Object.entries(queues).map(([a, q]) => [a, { waiting: q }])));
          const outcome = picker(board, { fallbacks: 2 }).pick(
            pools,
            key === undefined ? { model: 'm' } : { model: 'm', affinityKey: key },
          );
          const routable = new Set(pools.flatMap((p) => p.endpoints.filter(isRoutable).map((e) => e.address)));
          if (routable.size === 0) return assert.deepEqual(outcome, { kind: 'none' });
          const picked = addresses(outcome);
          assert.equal(new Set(picked).size, picked.length);
          assert.ok(picked.every((a) => routable.has(a)));
          assert.equal(picked.length, Math.min(routable.size, 3));
        },
      ),
    );
  });
});

describe('LoadTracker', () => {
  const cases: ReadonlyArray<{ name: string; ops: Array<['acquire' | 'release', string]>; expected: Record<string, number> }> = [
    { name: 'unknown address is idle', ops: [], expected: { 'a:1': 0 } },
    {
      name: 'acquire counts up per address',
      ops: [
        ['acquire', 'a:1'],
        ['acquire', 'a:1'],
        ['acquire', 'b:1'],
      ],
      expected: { 'a:1': 2, 'b:1': 1 },
    },
    {
      name: 'release counts down',
      ops: [
        ['acquire', 'a:1'],
        ['acquire', 'a:1'],
        ['release', 'a:1'],
      ],
      expected: { 'a:1': 1 },
    },
    {
      name: 'back to zero',
      ops: [
        ['acquire', 'a:1'],
        ['release', 'a:1'],
      ],
      expected: { 'a:1': 0 },
    },
    {
      name: 'an extra release never goes negative',
      ops: [
        ['release', 'a:1'],
        ['acquire', 'a:1'],
        ['release', 'a:1'],
        ['release', 'a:1'],
      ],
      expected: { 'a:1': 0 },
    },
    {
      name: 'an extra release does not swallow the next acquire',
      ops: [
        ['release', 'a:1'],
        ['release', 'a:1'],
        ['acquire', 'a:1'],
      ],
      expected: { 'a:1': 1 },
    },
  ];
  for (const c of cases) {
    it(c.name, () => {
      const tracker = new LoadTracker();
      for (const [op, address] of c.ops) tracker[op](address);
      for (const [address, count] of Object.entries(c.expected)) assert.equal(tracker.inFlight(address), count, address);
    });
  }

  it('counts survive the board growing its signal records', () => {
    const tracker = new LoadTracker();
    const many = Array.from({ length: 100 }, (_, i) => `10.0.1.${i}:80`);
    many.forEach((address, i) => {
      for (let n = 0; n < i % 5; n++) tracker.acquire(address);
    });
    assert.deepEqual(
      many.map((address) => tracker.inFlight(address)),
      many.map((_, i) => i % 5),
    );
  });

  it('an address that left the board does not lend its record to the next one', () => {
    const board = new SignalBoard();
    const p = picker(board, { weights: IN_FLIGHT, fallbacks: 1 });
    const pools = [poolOf('p', [ep('a:1'), ep('b:1')])];
    p.pick(pools, { model: 'm' });
    // a:1 leaves the view with nothing in flight; a new address takes over its record.
    board.retainOnly(new Set(['b:1']));
    board.cell('z:9').inFlight = 7;
    board.cell('b:1').inFlight = 1;
    // A pick over the old view still sees a:1 as idle, not with z:9's seven requests.
    assert.deepEqual(addresses(p.pick(pools, { model: 'm' })), ['a:1', 'b:1']);
  });

  it('drives the picker through the shared cells: the busy replica goes last', () => {
    const tracker = new LoadTracker();
    const p = picker(tracker.board, { weights: IN_FLIGHT, fallbacks: 1 });
    const pools = [poolOf('p', [ep('a:1'), ep('b:1')])];
    tracker.acquire('a:1');
    assert.deepEqual(addresses(p.pick(pools, { model: 'm' })), ['b:1', 'a:1']);
    tracker.release('a:1');
    assert.deepEqual(addresses(p.pick(pools, { model: 'm' })), ['a:1', 'b:1']);
  });
});
