#!/usr/bin/env node
// The one list of what the test suite needs installed, in the order `npm test` runs it: each
// installer is quiet when its tool is already in the tools cache (a second or less) and builds or
// downloads it otherwise. A new tool is a new line here, not another link in package.json's chain.
// `.ci/run` calls the same installers itself so it can start the long network-bound ones (vLLM,
// podman) in the background first; each installer is idempotent, so running both is cheap.
//
// Plain Node ESM with no dependencies because it runs before the TypeScript build exists.
// Prints nothing on success; on the first failure prints that installer's output and exits 1.

import { spawnSync } from 'node:child_process';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

const scripts = dirname(fileURLToPath(import.meta.url));

/** Each installer with its arguments; Envoy first (every e2e file needs it), the heavy ones last. */
const INSTALLERS = [
  ['install-envoy.mjs'],
  ['install-helm.mjs'],
  ['install-envoy-gateway.mjs'],
  ['install-istiod.mjs'],
  ['install-h2spec.mjs'],
  ['install-otelcol.mjs'],
  ['install-openai-python.mjs'],
  // The machine side only (uidmap, the engine's config): the engine and base image are built by
  // .ci/run, or by the image test itself when missing.
  ['install-podman.mjs', '--machine-only'],
  ['install-vllm.mjs'],
];

for (const [script, ...args] of INSTALLERS) {
  const run = spawnSync(process.execPath, [join(scripts, script), ...args], { encoding: 'utf8', maxBuffer: 64 * 1024 * 1024 });
  if (run.status !== 0) {
    process.stderr.write(`${run.stdout ?? ''}${run.stderr ?? ''}`);
    process.stderr.write(`scripts/${script} failed (exit ${run.status ?? run.signal})\n`);
    process.exit(1);
  }
}
