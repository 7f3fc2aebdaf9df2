// Memory settings of the process, applied by the entry (main.ts) before the program loads, so
// `node dist/src/main.js`, the image and every other way of starting it run with the same ones
// (issue 34; measured in docs/benchmarks.md, "Memory").
//
// V8 reads most heap sizes once, when the isolate is made, before any script runs: setting
// --max-semi-space-size from here does nothing. These two it reads each time it resizes the
// heap, so setting them here works (test/unit/process-settings.test.ts checks that it does):
// - the young generation's growth factor at 1 keeps the young generation at its initial size
//   (1 MiB per semi-space). Left alone, V8 doubles it under load up to 16 MiB per semi-space and
//   keeps it until the process idles: about 30 MiB of resident memory, for per-request garbage
//   that dies within a scavenge or two either way (the scavenges are more frequent, and cheap:
//   little survives them).
// - the old generation may grow by 30 % of what a full collection left alive before the next one,
//   instead of V8's factor for small heaps (up to 4x): without it, the objects a busy server
//   promotes pile up to twice the live heap between collections, some 15 MiB of resident memory
//   at rest after every burst, for two more full collections per 10,000 requests.
// An operator who sets either on the command line (node flags or NODE_OPTIONS) is left alone.

import { setFlagsFromString } from 'node:v8';

interface RuntimeFlag {
  /** Set with v8.setFlagsFromString. */
  readonly flag: string;
  /** Command-line flags that mean the operator chose this themselves (either spelling: - or _). */
  readonly unlessGiven: readonly string[];
}

export const RUNTIME_V8_FLAGS: readonly RuntimeFlag[] = [
  {
    flag: '--semi-space-growth-factor=1',
    unlessGiven: ['max-semi-space-size', 'min-semi-space-size', 'semi-space-growth-factor'],
  },
  { flag: '--heap-growing-percent=30', unlessGiven: ['heap-growing-percent'] },
];

/** The runtime flags to set, given the node flags and NODE_OPTIONS the process started with. */
export function flagsToSet(execArgv: readonly string[], nodeOptions: string | undefined): string[] {
  const given = [...execArgv, ...(nodeOptions ?? '').split(/\s+/)]
    .filter((arg) => arg.startsWith('--'))
    .map((arg) => arg.slice(2).split('=')[0].replaceAll('_', '-'));
  return RUNTIME_V8_FLAGS.filter(({ unlessGiven }) => !unlessGiven.some((name) => given.includes(name))).map(({ flag }) => flag);
}

export function applyProcessSettings(execArgv: readonly string[] = process.execArgv, env: NodeJS.ProcessEnv = process.env): void {
  for (const flag of flagsToSet(execArgv, env['NODE_OPTIONS'])) setFlagsFromString(flag);
}
