// The simulator's own parts: the prefix cache it models, the workload it replays, and that a run
// is deterministic for a seed and accounts every request.
import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { DEFAULT_SIM, PrefixCache, simulate, workload } from '../../scripts/simulate/sim.js';
import { renderSimulationSvg } from '../../scripts/simulate/chart.js';

describe('simulated prefix cache (LRU of blocks)', () => {
  it('a hit is the longest cached prefix, not any cached block', () => {
    const cache = new PrefixCache(10);
    cache.store([1, 2, 3]);
    assert.equal(cache.hits([1, 2, 3, 4]), 3);
    assert.equal(cache.hits([1, 9, 3]), 1);
    assert.equal(cache.hits([5, 1, 2]), 0);
  });

  it('evicts the least recently used blocks beyond capacity', () => {
    const cache = new PrefixCache(3);
    cache.store([1, 2, 3]);
    cache.store([1]);
    cache.store([4]);
    assert.equal(cache.size, 3);
    assert.equal(cache.hits([1]), 1, 'recently used block kept');
    assert.equal(cache.hits([2]), 0, 'least recently used block evicted');
  });
});

describe('simulation', () => {
  const small = { ...DEFAULT_SIM, requests: 600, servers: 4 };

  it('the workload is the same for a seed, with shared system prompts', () => {
    const a = workload(small);
    assert.deepEqual(a, workload(small));
    assert.notDeepEqual(a, workload({ ...small, seed: small.seed + 1 }));
    const tenants = new Set(a.map((r) => r.tenant));
    assert.ok(tenants.size > 1 && tenants.size < a.length, 'requests share tenants');
    assert.ok(
      a.every((r, i) => i === 0 || r.arrival >= a[i - 1].arrival),
      'arrivals in order',
    );
  });

  it('every policy serves every request, deterministically', () => {
    for (const policy of ['round-robin', 'least-in-flight', 'pipeline'] as const) {
      const one = simulate(small, policy);
      assert.deepEqual(one, simulate(small, policy));
      assert.equal(one.requests, 600);
      assert.ok(one.cacheHitRatio >= 0 && one.cacheHitRatio <= 1);
    }
  });

  it('the cache holds whole blocks only: a prompt shorter than a block has none, a tail is not kept', () => {
    const a = workload(small);
    const short = a.filter((r) => r.tenant < 0);
    assert.ok(short.length > 0 && short.length < a.length, 'short single-turn prompts beside the tenants');
    for (const r of a) assert.equal(r.blocks.length, Math.floor(r.promptTokens / 16), `request ${r.id}`);
    assert.ok(short.some((r) => r.promptTokens < 16 && r.blocks.length === 0));
  });

  it('several routers: every request served, deterministic, each with its own view', () => {
    const three = { ...small, routers: 3 };
    const one = simulate(three, 'pipeline');
    assert.deepEqual(one, simulate(three, 'pipeline'));
    assert.equal(one.routers, 3);
    assert.notDeepEqual(one, { ...simulate(small, 'pipeline'), routers: 3 }, 'three partial views pick differently from one');
  });

  it('round-robin spreads requests exactly evenly', () => {
    assert.equal(simulate({ ...small, requests: 400 }, 'round-robin').maxMinLoad, 1);
  });

  it('the chart has a bar per policy and measure, labelled', () => {
    const results = (['round-robin', 'least-in-flight', 'pipeline'] as const).map((p) => simulate(small, p));
    const svg = renderSimulationSvg(results);
    assert.equal((svg.match(/<rect x="[\d.]+" y="[\d.]+" width="50"/g) ?? []).length, 12);
    for (const p of ['round-robin', 'least-in-flight', 'pipeline']) assert.ok(svg.includes(`>${p}</text>`));
  });
});
