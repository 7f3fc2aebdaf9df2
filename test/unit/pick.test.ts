// Endpoint selection: which endpoints a request may go to and in which order (primary first,
// then fallbacks), and the in-flight counts that drive it.
import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import fc from 'fast-check';
import { ENDPOINT_STATES, isRoutable } from '../../src/endpoints/model.js';
import type { Endpoint, EndpointState, PoolView } from '../../src/endpoints/model.js';
import { pickEndpoints } from '../../src/picker/pick.js';
import type { PickSignals } from '../../src/picker/pick.js';
import { LoadTracker } from '../../src/picker/load-tracker.js';

function ep(address: string, state: EndpointState = 'Ready', pool = 'p'): Endpoint {
  return { id: address === '' ? `pod-${state}` : address, address, state, reason: '', pool };
}

function poolOf(name: string, endpoints: Endpoint[]): PoolView {
  return { name, models: ['m'], endpoints: endpoints.map((e) => ({ ...e, pool: name })) };
}

/** Loads from a table; unknown addresses are idle. */
function loads(table: Record<string, number> = {}): PickSignals {
  return { inFlight: (address) => table[address] ?? 0 };
}

/** Returns the given numbers in order, then fails loudly: the test must know how many draws happen. */
function sequence(...values: number[]): () => number {
  let i = 0;
  return () => {
    if (i >= values.length) throw new Error(`random() called more than ${values.length} times`);
    return values[i++];
  };
}

const addresses = (endpoints: readonly Endpoint[]): string[] => endpoints.map((e) => e.address);

describe('pickEndpoints', () => {
  const cases: ReadonlyArray<{
    name: string;
    pools: PoolView[];
    load?: Record<string, number>;
    fallbacks: number;
    random: number[];
    expected: string[];
  }> = [
    {
      name: 'least in-flight first',
      pools: [poolOf('p', [ep('a:1'), ep('b:1'), ep('c:1')])],
      load: { 'a:1': 5, 'b:1': 0, 'c:1': 2 },
      fallbacks: 2,
      random: [0.1, 0.2, 0.3],
      expected: ['b:1', 'c:1', 'a:1'],
    },
    {
      name: 'load beats the random tie-break',
      pools: [poolOf('p', [ep('a:1'), ep('b:1')])],
      load: { 'a:1': 1 },
      fallbacks: 1,
      random: [0, 0.99],
      expected: ['b:1', 'a:1'],
    },
    {
      name: 'equal loads are ordered by the random draws',
      pools: [poolOf('p', [ep('a:1'), ep('b:1'), ep('c:1')])],
      fallbacks: 2,
      random: [0.9, 0.1, 0.5],
      expected: ['b:1', 'c:1', 'a:1'],
    },
    {
      name: 'a different draw sends traffic elsewhere',
      pools: [poolOf('p', [ep('a:1'), ep('b:1'), ep('c:1')])],
      fallbacks: 0,
      random: [0.2, 0.6, 0.4],
      expected: ['a:1'],
    },
    {
      name: 'fallbacks limit the list to 1 + fallbacks',
      pools: [poolOf('p', [ep('a:1'), ep('b:1'), ep('c:1'), ep('d:1')])],
      fallbacks: 1,
      random: [0.4, 0.3, 0.2, 0.1],
      expected: ['d:1', 'c:1'],
    },
    {
      name: 'more fallbacks than endpoints returns them all',
      pools: [poolOf('p', [ep('a:1'), ep('b:1')])],
      fallbacks: 5,
      random: [0.1, 0.2],
      expected: ['a:1', 'b:1'],
    },
    {
      name: 'negative fallbacks still give a primary',
      pools: [poolOf('p', [ep('a:1'), ep('b:1')])],
      fallbacks: -3,
      random: [0.5, 0.1],
      expected: ['b:1'],
    },
    {
      name: 'only Ready endpoints with an address are candidates',
      pools: [poolOf('p', [ep('a:1', 'Starting'), ep('b:1', 'Quarantined'), ep('', 'Ready'), ep('c:1', 'NotReady'), ep('d:1'), ep('e:1', 'Terminating')])],
      fallbacks: 5,
      random: [0.5],
      expected: ['d:1'],
    },
    {
      name: 'endpoints of every pool of the model compete',
      pools: [poolOf('big', [ep('a:1')]), poolOf('small', [ep('b:1')])],
      load: { 'a:1': 3, 'b:1': 1 },
      fallbacks: 1,
      random: [0.1, 0.2],
      expected: ['b:1', 'a:1'],
    },
    {
      name: 'an address listed in two pools appears once',
      pools: [poolOf('big', [ep('a:1'), ep('b:1')]), poolOf('small', [ep('b:1'), ep('c:1')])],
      fallbacks: 5,
      random: [0.1, 0.2, 0.3],
      expected: ['a:1', 'b:1', 'c:1'],
    },
    {
      name: 'nothing routable: empty list',
      pools: [poolOf('p', [ep('a:1', 'Pending'), ep('b:1', 'CrashLoop'), ep('c:1', 'Gone')])],
      fallbacks: 2,
      random: [],
      expected: [],
    },
    { name: 'no pools: empty list', pools: [], fallbacks: 2, random: [], expected: [] },
  ];
  for (const c of cases) {
    it(c.name, () => {
      const picked = pickEndpoints(c.pools, loads(c.load), { fallbacks: c.fallbacks, random: sequence(...c.random) });
      assert.deepEqual(addresses(picked), c.expected);
    });
  }

  it('a duplicated address is represented by its first pool (configuration order)', () => {
    const picked = pickEndpoints([poolOf('big', [ep('a:1')]), poolOf('small', [ep('a:1')])], loads(), { fallbacks: 1, random: sequence(0.5) });
    assert.deepEqual(picked.map((e) => e.pool), ['big']);
  });

  it('a Quarantined copy in one pool does not hide a Ready copy in another', () => {
    const picked = pickEndpoints([poolOf('big', [ep('a:1', 'Quarantined')]), poolOf('small', [ep('a:1')])], loads(), { fallbacks: 1, random: sequence(0.5) });
    assert.deepEqual(picked.map((e) => `${e.pool}/${e.address}`), ['small/a:1']);
  });

  it('idle replicas share traffic: each comes first for some draws', () => {
    const pools = [poolOf('p', [ep('a:1'), ep('b:1'), ep('c:1')])];
    const firsts = new Set<string>();
    for (const draws of [[0.1, 0.5, 0.9], [0.5, 0.1, 0.9], [0.9, 0.5, 0.1]]) {
      firsts.add(addresses(pickEndpoints(pools, loads(), { fallbacks: 0, random: sequence(...draws) }))[0] ?? '');
    }
    assert.deepEqual([...firsts].sort(), ['a:1', 'b:1', 'c:1']);
  });
});

describe('pickEndpoints properties', () => {
  const endpointArb = fc.record({
    address: fc.oneof(fc.constant(''), fc.constantFrom('10.0.0.1:80', '10.0.0.2:80', '10.0.0.3:80', '10.0.0.4:80', '10.0.0.5:80', '10.0.0.6:80')),
    state: fc.constantFrom(...ENDPOINT_STATES),
  });
  const poolsArb = fc.array(fc.array(endpointArb, { maxLength: 6 }), { maxLength: 4 });
  const loadArb = fc.dictionary(fc.constantFrom('10.0.0.1:80', '10.0.0.2:80', '10.0.0.3:80', '10.0.0.4:80', '10.0.0.5:80', '10.0.0.6:80'), fc.nat({ max: 4 }));

  it('returns distinct Ready endpoints, as many as possible up to 1 + fallbacks, least loaded first', () => {
    fc.assert(
      fc.property(poolsArb, loadArb, fc.integer({ min: -1, max: 6 }), fc.infiniteStream(fc.double({ min: 0, max: 1, maxExcluded: true, noNaN: true })), (raw, table, fallbacks, draws) => {
        const pools = raw.map((endpoints, i) => poolOf(`pool${i}`, endpoints.map((e, j) => ({ ...e, id: `e${i}-${j}`, reason: '', pool: '' }))));
        const picked = pickEndpoints(pools, loads(table), { fallbacks, random: () => draws.next().value as number });
        const routable = new Set(pools.flatMap((p) => p.endpoints.filter(isRoutable).map((e) => e.address)));
        assert.ok(picked.every((e) => e.state === 'Ready' && e.address !== ''), 'only routable endpoints');
        assert.equal(new Set(addresses(picked)).size, picked.length, 'no duplicate addresses');
        assert.equal(picked.length, Math.min(routable.size, 1 + Math.max(0, fallbacks)));
        const pickedLoads = picked.map((e) => table[e.address] ?? 0);
        assert.deepEqual(pickedLoads, [...pickedLoads].sort((a, b) => a - b), 'sorted by load');
        // Nothing left out is less loaded than something picked.
        const left = [...routable].filter((a) => !picked.some((e) => e.address === a)).map((a) => table[a] ?? 0);
        if (picked.length > 0 && left.length > 0) assert.ok(Math.min(...left) >= Math.max(...pickedLoads));
      }),
    );
  });
});

describe('LoadTracker', () => {
  const cases: ReadonlyArray<{ name: string; ops: Array<['acquire' | 'release', string]>; expected: Record<string, number> }> = [
    { name: 'unknown address is idle', ops: [], expected: { 'a:1': 0 } },
    { name: 'acquire counts up per address', ops: [['acquire', 'a:1'], ['acquire', 'a:1'], ['acquire', 'b:1']], expected: { 'a:1': 2, 'b:1': 1 } },
    { name: 'release counts down', ops: [['acquire', 'a:1'], ['acquire', 'a:1'], ['release', 'a:1']], expected: { 'a:1': 1 } },
    { name: 'back to zero', ops: [['acquire', 'a:1'], ['release', 'a:1']], expected: { 'a:1': 0 } },
    { name: 'an extra release never goes negative', ops: [['release', 'a:1'], ['acquire', 'a:1'], ['release', 'a:1'], ['release', 'a:1']], expected: { 'a:1': 0 } },
    { name: 'an extra release does not swallow the next acquire', ops: [['release', 'a:1'], ['release', 'a:1'], ['acquire', 'a:1']], expected: { 'a:1': 1 } },
  ];
  for (const c of cases) {
    it(c.name, () => {
      const tracker = new LoadTracker();
      for (const [op, address] of c.ops) tracker[op](address);
      for (const [address, count] of Object.entries(c.expected)) assert.equal(tracker.inFlight(address), count, address);
    });
  }

  it('drives the picker: the busy replica goes last', () => {
    const tracker = new LoadTracker();
    tracker.acquire('a:1');
    const picked = pickEndpoints([poolOf('p', [ep('a:1'), ep('b:1')])], tracker, { fallbacks: 1, random: sequence(0, 0.9) });
    assert.deepEqual(addresses(picked), ['b:1', 'a:1']);
    tracker.release('a:1');
    const after = pickEndpoints([poolOf('p', [ep('a:1'), ep('b:1')])], tracker, { fallbacks: 1, random: sequence(0, 0.9) });
    assert.deepEqual(addresses(after), ['a:1', 'b:1']);
  });
});
