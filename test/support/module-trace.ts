// A preload (`node --import dist/test/support/module-trace.js dist/src/main.js …`) that records
// every module the process loads, for tests of what a configuration loads (and what it must not):
// ES modules as the loader hands them over (a loader hook, module-trace-hooks.ts, which runs on
// the loader's own thread), CommonJS modules from the require cache (grpc-js and most
// dependencies are CommonJS: their inner requires never reach the ESM hook). Off unless
// LLM_EXTPROC_MODULE_TRACE names the file to write; the list (one URL or path a line) is written
// when the process exits.

import { appendFileSync, writeFileSync } from 'node:fs';
import { createRequire, register } from 'node:module';

const traceFile = process.env['LLM_EXTPROC_MODULE_TRACE'];
if (traceFile !== undefined && traceFile !== '') {
  writeFileSync(traceFile, '');
  register(new URL('./module-trace-hooks.js', import.meta.url), { data: { traceFile } });
  const require = createRequire(import.meta.url);
  process.on('exit', () => {
    appendFileSync(
      traceFile,
      Object.keys(require.cache)
        .map((path) => `${path}\n`)
        .join(''),
    );
  });
}
