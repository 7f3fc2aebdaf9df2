// Pick time of the full picking pipeline (every scorer on: queue depth, KV cache, in-flight, prefix
// affinity, LoRA affinity; queue-limit filter; two fallbacks) at 10, 100, 1,000 and 10,000 ready
// endpoints, every one with a fresh model-server report. Pure CPU, in this process: no Envoy.
//
// Run alone: `npm run build && node dist/scripts/bench/pick.js [--write]`; `npm run bench` runs it
// first and, with --write, puts its table in docs/benchmarks.md between the pick-bench markers.

import { readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { isRoutable } from '../../src/endpoints/model.js';
import type { Endpoint, PoolView } from '../../src/endpoints/model.js';
import { Picker } from '../../src/picker/picker.js';
import type { PickRequest } from '../../src/picker/picker.js';
import { DEFAULT_WEIGHTS } from '../../src/picker/settings.js';
import { DEFAULT_BOUNDED_LOAD, DEFAULT_CACHE_BLOCK } from '../../src/picker/scorer-table.js';
import { affinityKey } from '../../src/routing/affinity-key.js';
import { promptPrefixOf } from '../../src/request/prompt-prefix.js';
import { recordScrape, SignalBoard } from '../../src/picker/signals.js';
import type { ServerLoad } from '../../src/picker/signals.js';
import { repoRoot } from '../repo-root.js';
import { replaceBetweenMarkers } from './stats.js';

export const PICK_SIZES = [10, 100, 1000, 10_000] as const;
const DOC_START = '<!-- pick-bench:start -->';
const DOC_END = '<!-- pick-bench:end -->';

export interface PickTiming {
  readonly endpoints: number;
  readonly picks: number;
  readonly meanMicros: number;
  readonly p50Micros: number;
  readonly p99Micros: number;
  /** The picker this pipeline replaced (in-flight only, one object per candidate, full sort), same fleet. */
  readonly sortedP50Micros: number;
}

/**
 * The picker as it was before the pipeline, for comparison on the same machine and fleet: every
 * candidate copied into a map and an array of objects, a random draw each, and a full sort.
 */
function sortEveryCandidate(
  pools: readonly PoolView[],
  inFlight: (address: string) => number,
  fallbacks: number,
  random: () => number,
): Endpoint[] {
  const byAddress = new Map<string, Endpoint>();
  for (const pool of pools)
    for (const endpoint of pool.endpoints)
      if (isRoutable(endpoint) && !byAddress.has(endpoint.address)) byAddress.set(endpoint.address, endpoint);
  const ranked = [...byAddress.values()].map((endpoint) => ({ endpoint, load: inFlight(endpoint.address), tieBreak: random() }));
  ranked.sort((a, b) => a.load - b.load || a.tieBreak - b.tieBreak);
  return ranked.slice(0, 1 + fallbacks).map((r) => r.endpoint);
}

/** A deterministic generator, so every run measures the same fleet and requests. */
export function lcg(seed: number): () => number {
  let s = seed >>> 0;
  return () => {
    s = (Math.imul(s, 1664525) + 1013904223) >>> 0;
    return s / 2 ** 32;
  };
}

/** What the bench fleet is built with: this checkout's picker, or another's (scripts/bench-pick-ab.ts). */
export interface PickerLibrary {
  readonly Picker: typeof Picker;
  readonly SignalBoard: typeof SignalBoard;
  readonly recordScrape: typeof recordScrape;
  readonly DEFAULT_WEIGHTS: typeof DEFAULT_WEIGHTS;
  readonly DEFAULT_BOUNDED_LOAD: typeof DEFAULT_BOUNDED_LOAD;
}

const THIS_PICKER: PickerLibrary = { Picker, SignalBoard, recordScrape, DEFAULT_WEIGHTS, DEFAULT_BOUNDED_LOAD };

export interface BenchFleet {
  readonly picker: Picker;
  readonly board: SignalBoard;
  readonly pools: PoolView[];
  readonly requests: PickRequest[];
  /** The generator the fleet and the picker's tie-breaks draw from. */
  readonly rand: () => number;
}

/** n ready endpoints, each with a fresh report, and 256 requests (every fourth for a LoRA adapter). */
export function benchFleet(n: number, lib: PickerLibrary = THIS_PICKER): BenchFleet {
  const rand = lcg(n);
  const board = new lib.SignalBoard();
  const endpoints: Endpoint[] = [];
  for (let i = 0; i < n; i++) {
    const address = `10.${(i >> 16) & 255}.${(i >> 8) & 255}.${i & 255}:8000`;
    endpoints.push({ id: `pod-${i}`, address, state: 'Ready', reason: '', pool: 'bench' });
    const cell = board.cell(address);
    cell.inFlight = Math.floor(rand() * 8);
    lib.recordScrape(cell, benchReport(rand), 0);
  }
  const pools: PoolView[] = [{ name: 'bench', models: ['llama', 'sql-lora'], endpoints }];
  const picker = new lib.Picker(board, {
    weights: lib.DEFAULT_WEIGHTS,
    fallbacks: 2,
    boundedLoad: lib.DEFAULT_BOUNDED_LOAD,
    maxAdaptersPerServer: 4,
    poolPolicy: () => ({ maxQueueDepth: 18 }),
    random: rand,
  });
  const requests: PickRequest[] = Array.from({ length: 256 }, (_, i) => {
    const prompt = promptPrefixOf(
      {
        messages: [
          { role: 'system', content: `tenant ${i % 32} system prompt `.repeat(40) },
          { role: 'user', content: `question ${i}` },
        ],
      },
      { chars: 1024, tokens: 256 },
    );
    const key = affinityKey(prompt, DEFAULT_CACHE_BLOCK, 16);
    // `promptBlocks: [key]` gives a picker from before whole-block keys the same key (A/B runs).
    const request = { model: i % 4 === 0 ? 'sql-lora' : 'llama', affinityKey: key, promptBlocks: [key] };
    return request;
  });
  return { picker, board, pools, requests, rand };
}

/** A bench endpoint's model-server report. */
export function benchReport(rand: () => number): ServerLoad {
  return {
    waiting: Math.floor(rand() * 20),
    running: Math.floor(rand() * 32),
    kvCacheUsage: rand(),
    runningAdapters: rand() < 0.3 ? ['sql-lora'] : [],
    waitingAdapters: [],
    maxAdapters: 4,
  };
}

/**
 * Times `run` once per sample until both `count` samples and `budgetMs` are reached. The clock is
 * performance.now() (a double; hrtime.bigint would allocate two BigInts per sample) and samples go
 * into a preallocated array, so the harness adds no garbage of its own to the picks it measures.
 */
function timed(count: number, budgetMs: number, run: (i: number) => void): Float64Array {
  let samples = new Float64Array(Math.max(count, 1024));
  let taken = 0;
  const started = performance.now();
  for (let i = 0; performance.now() - started < budgetMs || i < count; i++) {
    const t0 = performance.now();
    run(i);
    const micros = (performance.now() - t0) * 1000;
    if (taken === samples.length) {
      const grown = new Float64Array(samples.length * 2);
      grown.set(samples);
      samples = grown;
    }
    samples[taken++] = micros;
  }
  return samples.subarray(0, taken).sort();
}

function measurePick(n: number, budgetMs = 400): PickTiming {
  const { picker, board, pools, requests } = benchFleet(n);
  // Warm-up: compile the candidate set and let the JIT settle.
  for (let i = 0; i < Math.max(200, 200_000 / n); i++) picker.pick(pools, requests[i % requests.length]);
  const samples = timed(50, budgetMs, (i) => {
    if (picker.pick(pools, requests[i % requests.length]).kind !== 'picked') throw new Error('bench fleet produced no pick');
  });
  const inFlight = (address: string): number => board.peek(address)?.inFlight ?? 0;
  for (let i = 0; i < Math.max(20, 20_000 / n); i++) sortEveryCandidate(pools, inFlight, 2, Math.random);
  const sorted = timed(20, budgetMs / 2, () => sortEveryCandidate(pools, inFlight, 2, Math.random));
  const at = (list: Float64Array, q: number): number => list[Math.min(list.length - 1, Math.floor(q * list.length))];
  return {
    endpoints: n,
    picks: samples.length,
    meanMicros: samples.reduce((a, b) => a + b, 0) / samples.length,
    p50Micros: at(samples, 0.5),
    p99Micros: at(samples, 0.99),
    sortedP50Micros: at(sorted, 0.5),
  };
}

function renderPickReport(rows: readonly PickTiming[]): string {
  const fmt = (us: number): string => (us < 10 ? us.toFixed(2) : us < 100 ? us.toFixed(1) : us.toFixed(0));
  return [
    '| ready endpoints | picks timed | mean µs | p50 µs | p99 µs | before: sort every candidate, p50 µs |',
    '| ---: | ---: | ---: | ---: | ---: | ---: |',
    ...rows.map(
      (r) =>
        `| ${r.endpoints.toLocaleString('en-US')} | ${r.picks.toLocaleString('en-US')} | ${fmt(r.meanMicros)} | ${fmt(r.p50Micros)} | ${fmt(r.p99Micros)} | ${fmt(r.sortedP50Micros)} |`,
    ),
  ].join('\n');
}

/** Runs every size; returns the markdown table. */
export function pickBench(log: (line: string) => void = () => undefined): string {
  const rows = PICK_SIZES.map((n) => {
    log(`pick bench: ${n} endpoints…`);
    return measurePick(n);
  });
  return `#### Pick time, full pipeline (${process.version}, one pick per sample, timed with performance.now)\n\n${renderPickReport(rows)}`;
}

export function writePickReport(report: string): string {
  const docPath = join(repoRoot(), 'docs', 'benchmarks.md');
  writeFileSync(docPath, replaceBetweenMarkers(readFileSync(docPath, 'utf8'), DOC_START, DOC_END, report));
  return docPath;
}

if (process.argv[1] === fileURLToPath(import.meta.url)) {
  const report = pickBench((line) => process.stderr.write(`${line}\n`));
  process.stdout.write(`${report}\n`);
  if (process.argv.includes('--write')) process.stderr.write(`wrote ${writePickReport(report)}\n`);
}
