// Pick time of this checkout's picker against another checkout's (built: its dist/), interleaved in
// one process on the same bench fleet (scripts/bench/pick.ts), so that a shared or drifting machine
// slows both alike. Both pickers see the same requests and tie-break draws; every pick is compared
// and a difference is reported. With --churn, traffic moves the signals between picks: the
// primary takes the request, an earlier request finishes, and two endpoints report afresh.
//
//   npm run build && node dist/scripts/bench-pick-ab.js --baseline /path/to/other/checkout [--churn]
//     [--sizes 10,100,1000,10000] [--rounds 40]

import { join } from 'node:path';
import { pathToFileURL } from 'node:url';
import { benchFleet, benchReport, lcg, PICK_SIZES } from './bench/pick.js';
import type { BenchFleet, PickerLibrary } from './bench/pick.js';
import { repoRoot } from './repo-root.js';
import { parseScriptOptions } from './script-options.js';

const { values: flags } = parseScriptOptions(import.meta.url, {
  options: {
    baseline: { type: 'string' },
    churn: { type: 'boolean', default: false },
    sizes: { type: 'string', default: PICK_SIZES.join(',') },
    rounds: { type: 'string', default: '40' },
  },
});
if (flags.baseline === undefined) throw new Error('--baseline <checkout with a built dist/> is required');

async function library(checkout: string): Promise<PickerLibrary> {
  const load = (path: string): Promise<Record<string, unknown>> =>
    import(pathToFileURL(join(checkout, 'dist', 'src', 'picker', path)).href);
  // DEFAULT_BOUNDED_LOAD lives in scorer-table.js (it moved there from settings.js).
  const parts = await Promise.all(['picker.js', 'signals.js', 'settings.js', 'scorer-table.js'].map(load));
  return Object.assign({}, ...parts) as PickerLibrary;
}

interface Run {
  readonly fleet: BenchFleet;
  readonly lib: PickerLibrary;
  readonly samples: number[];
  readonly picks: string[];
  /** Addresses holding a request of ours (churn). */
  readonly held: string[];
  readonly traffic: () => number;
  next: number;
}

function start(n: number, lib: PickerLibrary): Run {
  return { fleet: benchFleet(n, lib), lib, samples: [], picks: [], held: [], traffic: lcg(n + 1), next: 0 };
}

function pickSome(run: Run, count: number): void {
  const { picker, pools, requests, board } = run.fleet;
  for (let c = 0; c < count; c++) {
    const t0 = performance.now();
    const outcome = picker.pick(pools, requests[run.next++ % requests.length]);
    run.samples.push((performance.now() - t0) * 1000);
    run.picks.push(outcome.kind === 'picked' ? outcome.endpoints.map((e) => e.address).join(',') : outcome.kind);
    if (!flags.churn) continue;
    if (outcome.kind === 'picked') {
      const address = outcome.endpoints[0].address;
      board.cell(address).inFlight++;
      run.held.push(address);
    }
    if (run.held.length > 64) {
      const k = Math.floor(run.traffic() * run.held.length);
      board.cell(run.held[k]).inFlight--;
      run.held[k] = run.held[run.held.length - 1];
      run.held.pop();
    }
    const endpoints = pools[0].endpoints;
    for (let s = 0; s < 2; s++) {
      const endpoint = endpoints[Math.floor(run.traffic() * endpoints.length)];
      run.lib.recordScrape(board.cell(endpoint.address), benchReport(run.traffic), 0);
    }
  }
}

const p50 = (samples: readonly number[]): number => [...samples].sort((a, b) => a - b)[Math.floor(samples.length / 2)];

const [baseline, current] = await Promise.all([library(flags.baseline), library(repoRoot())]);
const rounds = Number(flags.rounds);
process.stdout.write(
  `| endpoints | picks each | baseline p50 µs | this p50 µs | this / baseline | same picks |\n| ---: | ---: | ---: | ---: | ---: | --- |\n`,
);
for (const n of flags.sizes.split(',').map(Number)) {
  const a = start(n, baseline);
  const b = start(n, current);
  const warmUp = Math.max(200, 200_000 / n);
  pickSome(a, warmUp);
  pickSome(b, warmUp);
  a.samples.length = 0;
  b.samples.length = 0;
  const batch = Math.max(10, Math.round(20_000 / n));
  for (let r = 0; r < rounds; r++) {
    // Alternate which goes first, so neither always runs on a cache the other warmed.
    const [first, second] = r % 2 === 0 ? [a, b] : [b, a];
    pickSome(first, batch);
    pickSome(second, batch);
  }
  const differs = a.picks.findIndex((pick, k) => pick !== b.picks[k]);
  const same = differs < 0 ? 'yes' : `no: pick ${differs}, ${a.picks[differs]} vs ${b.picks[differs]}`;
  const [pa, pb] = [p50(a.samples), p50(b.samples)];
  process.stdout.write(
    `| ${n.toLocaleString('en-US')} | ${a.samples.length} | ${pa.toFixed(2)} | ${pb.toFixed(2)} | ${(pb / pa).toFixed(2)} | ${same} |\n`,
  );
}
