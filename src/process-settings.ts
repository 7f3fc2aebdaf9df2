// Memory settings of the process, applied by the entry (main.ts) before the program loads, so
// `node dist/src/main.js`, the image and every other way of starting it run with the same ones
// (issue 34; measured in docs/benchmarks.md, "Memory").
//
// V8 reads most heap sizes once, when the isolate is made, before any script runs: setting
// --max-semi-space-size from here does nothing. The young generation's growth factor, though, is
// read each time V8 considers growing it, so setting it to 1 from here keeps the young generation
// at its initial size (1 MiB per semi-space) for the life of the process. Left alone, V8 doubles
// it under load up to 16 MiB per semi-space and keeps it until the process idles: about 30 MiB of
// resident memory for a picker whose per-request garbage dies within a scavenge or two either way.
// An operator who sizes the young generation on the command line (NODE_OPTIONS or node flags) is
// left alone.

import { setFlagsFromString } from 'node:v8';

/** V8 flags that take effect when set at run time (each one checked by `npm run bench`'s memory table). */
export const RUNTIME_V8_FLAGS: readonly string[] = ['--semi-space-growth-factor=1'];

/** True when the young generation was sized on the command line (node flags or NODE_OPTIONS). */
export function youngGenerationSizedByOperator(execArgv: readonly string[], nodeOptions: string | undefined): boolean {
  return [...execArgv, ...(nodeOptions ?? '').split(/\s+/)].some((arg) =>
    /^--(max|min)[-_]semi[-_]space[-_]size|^--semi[-_]space[-_]growth[-_]factor/.test(arg),
  );
}

export function applyProcessSettings(execArgv: readonly string[] = process.execArgv, env: NodeJS.ProcessEnv = process.env): void {
  if (youngGenerationSizedByOperator(execArgv, env['NODE_OPTIONS'])) return;
  for (const flag of RUNTIME_V8_FLAGS) setFlagsFromString(flag);
}
