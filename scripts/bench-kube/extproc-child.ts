// The llm-extproc process of `npm run bench:kube`: the whole app (startApp: Kubernetes source,
// endpoint store, gRPC and HTTP servers, metrics), as dist/src/main.js runs it, plus a store
// subscriber that tells the parent, over the IPC channel, when a pod state the parent is waiting
// for first appears in a published view: the moment a picker reading the store could use it.
//
// Messages in:  { type: 'expect', id, pool, state }   (id = namespace/pod)
// Messages out: { type: 'started', at } once listening, { type: 'synced', at }, { type: 'seen', id, at },
//               { type: 'memory', rss, peakRss, heapUsed, external, cpuSeconds } on { type: 'memory' },
//               { type: 'snapshot', path } once a heap snapshot is written on { type: 'snapshot', path }.
// Times are wall-clock milliseconds with sub-millisecond precision (performance.timeOrigin + now()).

import { readFileSync } from 'node:fs';
import { performance } from 'node:perf_hooks';
import { writeHeapSnapshot } from 'node:v8';
import { pino } from 'pino';
import { startApp } from '../../src/app.js';
import { buildConfig } from '../../src/config/config.js';
import { applyProcessSettings } from '../../src/process-settings.js';
import type { EndpointView, PoolView } from '../../src/endpoints/model.js';

interface Expectation {
  readonly pool: string;
  readonly state: string;
}

type Incoming =
  { type: 'expect'; id: string; pool: string; state: string } | { type: 'memory' } | { type: 'snapshot'; path: string } | { type: 'stop' };

function now(): number {
  return performance.timeOrigin + performance.now();
}

function send(message: object): void {
  process.send?.(message);
}

/** Endpoints are sorted by id (one namespace per pool here), so a binary search finds one. */
function stateIn(pool: PoolView | undefined, id: string): string | undefined {
  const endpoints = pool?.endpoints ?? [];
  let lo = 0;
  let hi = endpoints.length;
  while (lo < hi) {
    const mid = (lo + hi) >>> 1;
    if ((endpoints[mid]?.id ?? '') < id) lo = mid + 1;
    else hi = mid;
  }
  const found = endpoints[lo];
  return found?.id === id ? found.state : undefined;
}

function memorySample(): object {
  const usage = process.memoryUsage();
  const cpu = process.cpuUsage();
  // VmHWM: the most resident memory the process has had, in kB (Linux).
  const peakKb = /VmHWM:\s+(\d+) kB/.exec(readFileSync('/proc/self/status', 'utf8'))?.[1];
  return {
    rss: usage.rss,
    peakRss: peakKb === undefined ? Number.NaN : Number(peakKb) * 1024,
    heapUsed: usage.heapUsed,
    external: usage.external,
    cpuSeconds: (cpu.user + cpu.system) / 1e6,
  };
}

async function main(): Promise<void> {
  // The memory settings main.ts applies (V8 consults them at every heap resize, so from here on is in time).
  applyProcessSettings();
  const configPath = process.argv[2];
  if (configPath === undefined) throw new Error('usage: extproc-child.js CONFIG');
  const config = buildConfig(readFileSync(configPath, 'utf8'), { LLM_EXTPROC_LOG_LEVEL: 'warn' });
  const pending = new Map<string, Expectation>();
  let view: EndpointView | undefined;

  const check = (at: number): void => {
    if (view === undefined) return;
    for (const [id, expected] of pending) {
      if (stateIn(view.pools.get(expected.pool), id) === expected.state) {
        pending.delete(id);
        send({ type: 'seen', id, at });
      }
    }
  };

  const app = await startApp(config, pino({ level: 'warn' }));
  app.store.subscribe({
    viewChanged: (next) => {
      view = next;
      if (pending.size > 0) check(now());
    },
    synced: () => send({ type: 'synced', at: now() }),
  });
  view = app.store.view();
  if (app.store.isSynced()) send({ type: 'synced', at: now() });

  process.on('message', (message: Incoming) => {
    if (message.type === 'expect') {
      pending.set(message.id, { pool: message.pool, state: message.state });
      // The change may already be in: then this is when we learn it (a late, never early, reading).
      check(now());
    } else if (message.type === 'memory') {
      send({ type: 'memory', ...memorySample() });
    } else if (message.type === 'snapshot') {
      send({ type: 'snapshot', path: writeHeapSnapshot(message.path) });
    } else {
      void app.stop().then(() => process.exit(0));
    }
  });
  send({ type: 'started', at: now() });
}

main().catch((err: unknown) => {
  process.stderr.write(`extproc-child: ${err instanceof Error ? (err.stack ?? err.message) : String(err)}\n`);
  process.exit(1);
});
