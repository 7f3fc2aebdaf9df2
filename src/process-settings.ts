// Memory settings of the process, applied by the entry (main.ts) before the program loads, so
// `node dist/src/main.js`, the image and every other way of starting it run with the same ones
// (issue 34; measured in docs/benchmarks.md, "Memory").
//
// V8 reads most heap sizes once, when the isolate is made, before any script runs: setting
// --max-semi-space-size from here does nothing. The young generation's growth factor it reads
// each time it considers growing the young generation, so setting it to 1 here keeps the young
// generation at its initial size (1 MiB per semi-space) while the program loads
// (test/unit/entry/process-settings.test.ts checks that it does). Left alone, V8 doubles it under load
// up to 16 MiB per semi-space, and already to 8 MiB while the program loads, and keeps it until
// the process idles: 10 MiB of resident memory at rest and up to 30 MiB under load.
//
// Once the servers are up (startupDone), util/young-generation-cap.ts lets it grow again, up to
// 4 MiB per semi-space. Kept at 1 MiB for the life of the process, the young generation cost CPU:
// requests still in flight at a scavenge survive it, are copied, and after a second one promoted,
// and with 1 MiB that happened every few requests. Measured against 4 MiB in the same build (quiet
// machine, docs/benchmarks.md "Memory", "The young generation"): up to 90 % more CPU per request and
// up to 2.3x per streamed chunk at 8-64 streams, for 1-6 MiB less resident memory after the load (less
// than the 6 MiB a 4 MiB young generation commits more: it promotes less, so the old generation
// grows less).
//
// With a young generation that small (measured at 1 MiB per semi-space; not re-measured at the
// 4 MiB ceiling), each scavenge is a fraction of a millisecond of work, and
// splitting it over V8's helper threads (--parallel-scavenge, also read at each scavenge) costs
// more than it saves where a picker runs: a pod with a fraction of a core, next to Envoy's
// workers. Measured on the 2-vCPU reference machine under 1 MiB prompts: scavenge pauses p50
// 1.0 / p90 1.5 / max 5.4 ms on the main thread alone, against 1.2 / 2.4 / 12.3 ms with helpers.
//
// While the program loads, V8's optimizing compiler is off (--turbofan, read each time a function
// is considered for optimization), and it is turned back on once the servers are up (startupDone):
// loading hundreds of modules and validating the config makes a few dozen functions hot once,
// optimizing them is work for code that never runs again, and it pages in the compiler itself.
// An idle replica then holds 5-6 MiB less (measured: 65 → 59 MiB RSS); the request path is
// optimized as it gets hot, as before (the same number of its functions are), and start-up takes
// as long.
//
// Tried and not kept: --optimize-for-size (read by the garbage collector at each decision). It keeps the
// old generation close to what is live (growth between full collections of at most 2 MiB or 30 %
// instead of 8 MiB, and partly used pages compacted and given back): 1-8 MiB less RSS (median 4.6)
// at the end of the bench's request and stream load in all eighteen samples of nine A/B runs. But
// CPU per streamed chunk at one stream rose by 8-51 % in eight of those nine runs (docs/benchmarks.md,
// "The old generation"): a picker's cores are worth more than 4.6 MiB of its 128 MiB request.
//
// Tried and not kept: --heap-growing-percent=30 (also read at run time) halves the old
// generation's growth between full collections under a request load, but V8 counts Buffers in
// that budget: a 1 MiB prompt then set off a full collection every sixth request (18 per 100,
// against 1), a tail of its own.
//
// Tried and not kept: giving memory back when the server goes quiet after a load, either with
// --gc-memory-reducer-start-delay-ms (in Node 20's V8 it does not delay the reducer that follows a
// full collection) or with a full collection of our own (13-21 ms of the main thread, and V8 keeps
// the emptied pages committed: RSS within 2 MiB of before in nine of ten). docs/benchmarks.md, "Giving memory back".
//
// Scavenges on demand (readGarbageCollector, below): long request bodies leave Buffers that die
// faster than the heap fills, and V8 counts them against the old generation until a full
// collection; the servers report their reads and ends to util/external-garbage.ts, which asks for
// a scavenge when a call ends with enough of them dead (the long-prompt tail: docs/benchmarks.md).
//
// An operator who sets any of these on the command line (node flags or NODE_OPTIONS) is left alone.

import { getHeapSpaceStatistics, getHeapStatistics, setFlagsFromString } from 'node:v8';
import { runInNewContext } from 'node:vm';
import { EXTERNAL_GARBAGE_DEFAULTS, ExternalGarbage } from './util/external-garbage.js';
import type { ReadGarbageObserver } from './util/external-garbage.js';
import { YoungGenerationCap } from './util/young-generation-cap.js';

interface RuntimeFlag {
  /** Set with v8.setFlagsFromString. */
  readonly flag: string;
  /** Command-line flags that mean the operator chose this themselves (either spelling: - or _). */
  readonly unlessGiven: readonly string[];
}

/** No young-generation growth while the program loads; util/young-generation-cap.ts takes over once started. */
const NO_YOUNG_GROWTH = '--semi-space-growth-factor=1';

const RUNTIME_V8_FLAGS: readonly RuntimeFlag[] = [
  {
    flag: NO_YOUNG_GROWTH,
    unlessGiven: ['max-semi-space-size', 'min-semi-space-size', 'semi-space-growth-factor'],
  },
  { flag: '--no-parallel-scavenge', unlessGiven: ['parallel-scavenge', 'no-parallel-scavenge', 'single-threaded-gc', 'single-threaded'] },
];

/** Set at start and undone by startupDone(). */
const STARTUP_V8_FLAGS: readonly (RuntimeFlag & { readonly undo: string })[] = [
  {
    flag: '--no-turbofan',
    undo: '--turbofan',
    unlessGiven: ['turbofan', 'no-turbofan', 'opt', 'no-opt', 'jitless', 'maglev', 'no-maglev', 'max-opt'],
  },
];

function notGiven(execArgv: readonly string[], nodeOptions: string | undefined): (flag: RuntimeFlag) => boolean {
  const given = [...execArgv, ...(nodeOptions ?? '').split(/\s+/)]
    .filter((arg) => arg.startsWith('--'))
    .map((arg) => arg.slice(2).split('=')[0].replaceAll('_', '-'));
  return ({ unlessGiven }) => !unlessGiven.some((name) => given.includes(name));
}

/** The flags to set for the life of the process, given the node flags and NODE_OPTIONS it started with. */
export function flagsToSet(execArgv: readonly string[], nodeOptions: string | undefined): string[] {
  return RUNTIME_V8_FLAGS.filter(notGiven(execArgv, nodeOptions)).map(({ flag }) => flag);
}

/** The flags to set while the program starts, and to undo once it has. */
export function startupFlags(execArgv: readonly string[], nodeOptions: string | undefined): { set: string; undo: string }[] {
  return STARTUP_V8_FLAGS.filter(notGiven(execArgv, nodeOptions)).map(({ flag, undo }) => ({ set: flag, undo }));
}

let undoAtStartupDone: string[] = [];

/** The young generation's ceiling once started: 4 MiB per semi-space (new space reports both). */
export const YOUNG_GENERATION_CAP_BYTES = 8 * 1024 * 1024;

/** Set when the process keeps the young generation itself (the operator did not size it). */
let youngGenerationCap: YoungGenerationCap | undefined;

/** At the very start (main.ts), before the program loads. */
export function applyProcessSettings(execArgv: readonly string[] = process.execArgv, env: NodeJS.ProcessEnv = process.env): void {
  const flags = flagsToSet(execArgv, env['NODE_OPTIONS']);
  for (const flag of flags) setFlagsFromString(flag);
  const startup = startupFlags(execArgv, env['NODE_OPTIONS']);
  for (const { set } of startup) setFlagsFromString(set);
  undoAtStartupDone = startup.map(({ undo }) => undo);
  youngGenerationCap = flags.includes(NO_YOUNG_GROWTH)
    ? new YoungGenerationCap({
        capBytes: YOUNG_GENERATION_CAP_BYTES,
        newSpaceBytes: () => getHeapSpaceStatistics().find((space) => space.space_name === 'new_space')?.space_size,
        setGrowthFactor: (factor) => setFlagsFromString(`--semi-space-growth-factor=${factor}`),
        now: () => performance.now(),
        minIntervalMs: 1,
        every: (ms, task) => void setInterval(task, ms).unref(),
        timerMs: 100,
      })
    : undefined;
}

/**
 * The servers are up: what only start-up needed is undone (the optimizing compiler is back on), and
 * the young generation may grow up to its ceiling.
 */
export function startupDone(): void {
  for (const flag of undoAtStartupDone) setFlagsFromString(flag);
  undoAtStartupDone = [];
  youngGenerationCap?.start();
}

/** V8's collection function with the options its gc extension takes. */
type GcFunction = (options?: { type?: 'minor' | 'major'; execution?: 'sync' | 'async' }) => unknown;

/**
 * A young-generation collection on demand (util/external-garbage.ts says why we need one). V8 gives
 * the function only to contexts made after `--expose-gc` is set, so it is taken from a small context
 * of its own (about 0.6 MiB, made once); an operator who started node with --expose-gc has it already.
 * Undefined where V8 does not hand it out.
 */
export function scavengeOnDemand(): (() => void) | undefined {
  let gc = (globalThis as { gc?: GcFunction }).gc;
  if (gc === undefined) {
    setFlagsFromString('--expose-gc');
    const fromContext: unknown = runInNewContext('typeof gc === "function" ? gc : undefined');
    gc = typeof fromContext === 'function' ? (fromContext as GcFunction) : undefined;
  }
  if (gc === undefined) return undefined;
  const collect = gc;
  return () => void collect({ type: 'minor' });
}

/**
 * What the servers tell about each read and each call's end, put to use: a scavenge when Buffers
 * read from peers die faster than the heap fills (util/external-garbage.ts), and the young
 * generation's ceiling looked at as calls end (util/young-generation-cap.ts). Undefined when
 * neither applies (no scavenge can be asked for, and the operator sized the young generation).
 */
export function readGarbageCollector(): ReadGarbageObserver | undefined {
  const scavenge = scavengeOnDemand();
  const external =
    scavenge === undefined
      ? undefined
      : new ExternalGarbage({
          ...EXTERNAL_GARBAGE_DEFAULTS,
          externalBytes: () => getHeapStatistics().external_memory,
          scavenge,
          later: (task) => void setImmediate(task),
        });
  const cap = youngGenerationCap;
  if (cap === undefined) return external;
  if (external === undefined) return { read: () => undefined, streamEnded: () => cap.streamEnded() };
  // Reads go to the scavenge rule alone (the per-read path); stream ends to both.
  return {
    read: (bytes) => external.read(bytes),
    streamEnded: () => {
      external.streamEnded();
      cap.streamEnded();
    },
  };
}
