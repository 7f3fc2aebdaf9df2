// Keeps the README's demo command honest: the demo starts a real Envoy, llm-extproc as its own
// process and local model servers, answers sample requests, and shuts everything down.

import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { it } from 'node:test';
import { promisify } from 'node:util';
import { repoRoot } from '../../scripts/repo-root.js';

const run = promisify(execFile);

it('the demo serves sample requests end to end and exits cleanly', async () => {
  const stateDir = await mkdtemp(join(tmpdir(), 'llm-extproc-demo-'));
  let stdout: string;
  try {
    ({ stdout } = await run(
      process.execPath,
      [join(repoRoot(), 'dist', 'scripts', 'demo.js'), '--smoke', '--port', '0', '--state-dir', stateDir],
      { timeout: 60_000 },
    ));
  } finally {
    await rm(stateDir, { recursive: true, force: true });
  }
  assert.match(stdout, /model=llama-3-8b → 200/);
  assert.match(stdout, /model=qwen-2.5-7b → 200[\s\S]*data: \[DONE\]/);
  assert.match(stdout, /model=no-such-model → 404\n\{"error":\{[^\n]*"code":"model_not_found"/);
});
