// The simulator's own parts: the prefix cache it models, the workload it replays, and that a run
// is deterministic for a seed and accounts every request; and the saturated multi-tenant
// scenario's claims about flow control (the real FlowControl and Picker, on the simulated clock).
import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { DEFAULT_SIM, POLICIES, PrefixCache, simulate, workload } from '../../../scripts/simulate/sim.js';
import type { PolicyName } from '../../../scripts/simulate/sim.js';
import { estimate, simulateDraws } from '../../../scripts/simulate/draws.js';
import type { DrawSummary } from '../../../scripts/simulate/draws.js';
import { renderSimulationSvg } from '../../../scripts/simulate/chart.js';
import { renderTenantSvg, tenantRuns } from '../../../scripts/simulate/tenant-report.js';
import {
  DEFAULT_TENANT_SIM,
  jainIndex,
  maxMinShares,
  simulateTenants,
  tenantWorkload,
  type TenantName,
  type TenantSimConfig,
  type TenantSimResult,
  type TenantStats,
} from '../../../scripts/simulate/tenants.js';

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
    for (const policy of POLICIES) {
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

  it('router draws: draw 0 is the plain run, others differ, and a row reports mean ± standard error over them', () => {
    const three = { ...small, routers: 3 };
    const requests = workload(three);
    assert.deepEqual(simulate({ ...three, draw: 0 }, 'pipeline', requests), simulate(three, 'pipeline', requests));
    assert.notDeepEqual(simulate({ ...three, draw: 1 }, 'pipeline', requests), simulate(three, 'pipeline', requests));
    const summary = simulateDraws(three, 'pipeline', requests, 3);
    assert.deepEqual(summary, simulateDraws(three, 'pipeline', requests, 3), 'deterministic for a seed');
    const p99s = [0, 1, 2].map((draw) => simulate({ ...three, draw }, 'pipeline', requests).p99WaitMs);
    assert.deepEqual(summary.estimates.p99WaitMs, estimate(p99s));
    assert.equal(summary.mean.p99WaitMs, estimate(p99s).mean);
    const e = estimate([1, 2, 3]);
    assert.deepEqual([e.mean, e.min, e.max], [2, 1, 3]);
    assert.ok(Math.abs(e.stderr - 1 / Math.sqrt(3)) < 1e-12, `${e.stderr}`);
    assert.equal(estimate([5]).stderr, 0);
  });

  it('means over router draws: the pipeline is ahead of round-robin and least in-flight on block hit ratio and p99 queue wait, with 1 and with 3 replicas', () => {
    // The default workload's first 8,000 requests and 3 draws (npm run simulate: 20,000 and 10), for speed.
    const config = { ...DEFAULT_SIM, requests: 8000 };
    const requests = workload(config);
    for (const routers of [1, 3]) {
      const rows = new Map<PolicyName, DrawSummary>(POLICIES.map((p) => [p, simulateDraws({ ...config, routers }, p, requests, 3)]));
      const ours = (rows.get('pipeline') as DrawSummary).mean;
      for (const baseline of ['round-robin', 'least-in-flight'] as const) {
        const other = (rows.get(baseline) as DrawSummary).mean;
        assert.ok(
          ours.cacheHitRatio > other.cacheHitRatio,
          `${routers} replica(s): hit ratio ${ours.cacheHitRatio} vs ${baseline} ${other.cacheHitRatio}`,
        );
        assert.ok(
          ours.p99WaitMs < other.p99WaitMs,
          `${routers} replica(s): p99 queue wait ${ours.p99WaitMs} vs ${baseline} ${other.p99WaitMs}`,
        );
      }
    }
  });

  it('precise (the servers’ own cached blocks) is ahead of the pipeline on the shared-prompt workload: hit ratio and p99 time to first token, with 1 and with 3 replicas', () => {
    const config = { ...DEFAULT_SIM, requests: 8000 };
    const requests = workload(config);
    for (const routers of [1, 3]) {
      const pipeline = simulateDraws({ ...config, routers }, 'pipeline', requests, 3).mean;
      const precise = simulateDraws({ ...config, routers }, 'precise', requests, 3).mean;
      assert.ok(
        precise.cacheHitRatio > pipeline.cacheHitRatio,
        `${routers}: hit ratio ${precise.cacheHitRatio} vs ${pipeline.cacheHitRatio}`,
      );
      assert.ok(precise.p99TtftMs < pipeline.p99TtftMs, `${routers}: p99 TTFT ${precise.p99TtftMs} vs ${pipeline.p99TtftMs}`);
    }
  });

  it('short prompts alone are placed by load: p99 queue wait at most least in-flight’s, with 1 and with 3 replicas (and with a server 3× slower, within 5 %: it was 2.3× before the cost model)', () => {
    const plain = { ...DEFAULT_SIM, requests: 8000, shortShare: 1 };
    const slow = { ...plain, slowServers: 1, slowFactor: 3 };
    for (const [config, margin] of [
      [plain, 1],
      [slow, 1.05],
    ] as const) {
      const requests = workload(config);
      for (const routers of [1, 3]) {
        const baseline = simulateDraws({ ...config, routers }, 'least-in-flight', requests, 3).mean.p99WaitMs;
        for (const policy of ['pipeline', 'precise'] as const) {
          const ours = simulateDraws({ ...config, routers }, policy, requests, 3).mean.p99WaitMs;
          assert.ok(
            ours <= baseline * margin,
            `${config.slowServers} slow, ${routers} replica(s), ${policy}: p99 queue wait ${ours} vs ${baseline}`,
          );
        }
      }
    }
  });

  it('the chart has a bar per policy and measure, labelled', () => {
    const results = (['round-robin', 'least-in-flight', 'pipeline'] as const).map((p) => simulate(small, p));
    const svg = renderSimulationSvg(results);
    assert.equal((svg.match(/<rect x="[\d.]+" y="[\d.]+" width="50"/g) ?? []).length, 12);
    for (const p of ['round-robin', 'least-in-flight', 'pipeline']) assert.ok(svg.includes(`>${p}</text>`));
  });
});

describe('saturated multi-tenant simulation (flow control)', () => {
  // Half the pool and a shorter flood than `npm run simulate` runs, for speed: the same shape.
  const base: TenantSimConfig = { ...DEFAULT_TENANT_SIM, servers: 4, durationSeconds: 40, floodFromSeconds: 10, floodUntilSeconds: 30 };
  const of = (r: TenantSimResult, tenant: TenantName): TenantStats => r.tenants.find((t) => t.tenant === tenant) as TenantStats;
  const split = Math.ceil(base.slots / 3);
  const off = simulateTenants({ ...base, flowControl: false });
  const on = simulateTenants({ ...base, flowControl: true });
  const offThree = simulateTenants({ ...base, flowControl: false, routers: 3 });
  const onThree = simulateTenants({ ...base, flowControl: true, routers: 3, maxInFlight: split });

  it('fairness helpers: max-min shares fill the small demands first, Jain is 1 when equal and 1/n when one takes all', () => {
    assert.deepEqual(maxMinShares(30, [5, 100]), [5, 25]);
    assert.deepEqual(maxMinShares(30, [20, 20]), [15, 15]);
    assert.equal(jainIndex([1, 1, 1]), 1);
    assert.equal(jainIndex([1, 0, 0, 0]), 0.25);
  });

  it('is deterministic for a seed and accounts every request (served or refused with 429)', () => {
    assert.deepEqual(tenantWorkload(base), tenantWorkload(base));
    assert.notDeepEqual(tenantWorkload(base), tenantWorkload({ ...base, seed: base.seed + 1 }));
    assert.deepEqual(
      simulateTenants({ ...base, flowControl: true, routers: 3 }),
      simulateTenants({ ...base, flowControl: true, routers: 3 }),
    );
    for (const r of [off, on, offThree, onThree])
      for (const t of r.tenants)
        assert.equal(t.served + t.shed + t.queueFull + t.expired, t.sent, `${r.routers} ${r.flowControl} ${t.tenant}`);
    // The batch tenant floods at 5× what the pool serves.
    const batch = of(off, 'batch');
    assert.ok(batch.floodDemand > 4.5 * off.capacity && batch.floodDemand < 5.5 * off.capacity, `${batch.floodDemand} vs ${off.capacity}`);
  });

  it("the interactive tenant's p99 time to first token is far below what it is without flow control, with 1 and with 3 replicas", () => {
    for (const [without, withFlow] of [
      [off, on],
      [offThree, onThree],
    ] as const) {
      const slow = of(without, 'interactive').p99TtftMs;
      const fast = of(withFlow, 'interactive').p99TtftMs;
      assert.ok(fast * 10 < slow, `${withFlow.routers} replica(s): p99 ${fast} ms with flow control, ${slow} ms without`);
      // It gets all it asks for during the flood, instead of a share proportional to its sending.
      const interactive = of(withFlow, 'interactive');
      assert.ok(
        interactive.floodThroughput >= 0.9 * interactive.floodDemand,
        `${interactive.floodThroughput} of ${interactive.floodDemand}/s`,
      );
      assert.ok(of(without, 'interactive').floodThroughput < 0.5 * interactive.floodDemand);
    }
  });

  it('the sheddable tenant is shed while the pool is saturated and served while it is not; never shed without flow control', () => {
    for (const r of [on, onThree]) {
      const shed = of(r, 'sheddable');
      // Saturated for about half of the run (the flood): about half of its requests are shed.
      assert.ok(shed.shed > shed.sent / 3, `${r.routers}: ${shed.shed} of ${shed.sent} shed`);
      assert.ok(shed.floodThroughput < 0.1 * shed.floodDemand, 'next to nothing gets through during the flood');
      assert.ok(shed.served > 0.1 * shed.sent, 'served before and after the flood');
      assert.equal(of(r, 'interactive').shed + of(r, 'batch').shed, 0, 'priority 0 is never shed');
    }
    assert.equal(of(off, 'sheddable').shed, 0);
  });

  it('no tenant starves: the flooding tenant still gets most of the pool, and the shares are fair (Jain)', () => {
    for (const r of [on, onThree]) {
      assert.ok(
        of(r, 'batch').floodThroughput > 0.6 * r.capacity,
        `${r.routers}: batch ${of(r, 'batch').floodThroughput}/s of ${r.capacity}`,
      );
      assert.ok(r.floodThroughput > 0.9 * r.capacity, `the pool stays busy: ${r.floodThroughput}/s`);
      assert.ok(r.jain > 0.98, `${r.routers}: Jain ${r.jain}`);
      for (const t of r.tenants) assert.ok(t.served > 0, `${t.tenant} served`);
    }
    assert.ok(off.jain < 0.8 && offThree.jain < 0.8, `without: ${off.jain}, ${offThree.jain}`);
  });

  it('each replica holds its own requests to maxInFlight per server; with 3 the 1-replica limit overcommits the servers', () => {
    assert.ok(on.peakInFlight <= base.maxInFlight, `${on.peakInFlight}`);
    assert.ok(onThree.peakInFlight <= split, `${onThree.peakInFlight}`);
    assert.ok(off.peakInFlight > 10 * base.maxInFlight, 'without flow control nothing holds them');
    const kept = simulateTenants({ ...base, flowControl: true, routers: 3 });
    assert.ok(kept.peakInFlight <= base.maxInFlight);
    // Three replicas × slots each: the model servers' own queues come back, and with them the interactive tail.
    assert.ok(of(kept, 'interactive').p99TtftMs > 2 * of(onThree, 'interactive').p99TtftMs);
  });

  it('the chart has a bar per run and measure, and a legend entry per run', () => {
    const runs = tenantRuns(base);
    assert.equal(runs.length, 6);
    const svg = renderTenantSvg(runs);
    assert.equal((svg.match(/<rect x="[\d.]+" y="[\d.]+" width="34"/g) ?? []).length, 6 * 4);
    for (const run of runs) assert.ok(svg.includes(`>${run.label}</text>`), run.label);
  });
});
