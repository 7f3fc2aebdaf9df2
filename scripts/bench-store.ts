// `npm run build && node dist/scripts/bench-store.js`: the endpoint store's CPU time per change,
// in process and without an API server, for one pod changing state at a time in caches of
// different sizes and pool counts. A source hands the store a new ObservedPool only for the pool
// that changed (and keeps the ObservedEndpoint of every unchanged pod), as the Kubernetes source
// does; the store's work per change should then follow the changed pool's size, not the cache's.
// The figure includes this script's own copy of the changed pool's endpoint list (what the source
// does too). CPU time, so a loaded machine changes it less than wall time.

import type { ObservedEndpoint, ObservedPool } from '../src/endpoints/model.js';
import { EndpointStore } from '../src/endpoints/store.js';

const CHANGES = 2000;
const SHAPES: ReadonlyArray<readonly [endpoints: number, pools: number]> = [
  [10_000, 1],
  [10_000, 4],
  [10_000, 16],
  [10_000, 50],
  [40_000, 16],
];
const POLICY = { threshold: 3, baseMs: 10_000, maxMs: 60_000 };

function microsPerChange(total: number, poolCount: number): number {
  const store = new EndpointStore(['bench'], POLICY);
  const perPool = total / poolCount;
  const lists: ObservedEndpoint[][] = Array.from({ length: poolCount }, (_, p) =>
    Array.from({ length: perPool }, (_, i) => ({
      id: `ns/p${p}-${i}`,
      address: `10.${p}.${i >> 8}.${i & 255}:8000`,
      state: 'Ready' as const,
      reason: '',
    })),
  );
  let pools: ObservedPool[] = lists.map((endpoints, p) => ({ name: `p${p}`, models: [`m${p}`], endpoints }));
  store.replaceAll('bench', pools);
  const start = process.cpuUsage();
  for (let k = 0; k < CHANGES; k++) {
    const p = k % poolCount;
    const i = (k * 7919) % perPool;
    const list = (lists[p] ?? []).slice();
    const old = list[i];
    if (old === undefined) throw new Error(`no endpoint ${i} in pool ${p}`);
    list[i] = { ...old, state: old.state === 'Ready' ? 'NotReady' : 'Ready' };
    lists[p] = list;
    pools = pools.slice();
    pools[p] = { name: `p${p}`, models: [`m${p}`], endpoints: list };
    store.replaceAll('bench', pools);
  }
  const used = process.cpuUsage(start);
  return (used.user + used.system) / CHANGES;
}

process.stdout.write('| endpoints | pools | per pool | store CPU per change |\n| ---: | ---: | ---: | ---: |\n');
for (const [total, poolCount] of SHAPES) {
  const micros = microsPerChange(total, poolCount);
  process.stdout.write(`| ${total} | ${poolCount} | ${total / poolCount} | ${micros.toFixed(0)} µs |\n`);
}
