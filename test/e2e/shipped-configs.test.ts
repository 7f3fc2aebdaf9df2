// The Envoy configs in envoy/ are what users deploy: they must match the renderer (no drift) and
// the real Envoy 1.40 binary must accept each of them.

import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, it } from 'node:test';
import { promisify } from 'node:util';
import { SHIPPED_CONFIGS, renderShippedConfig } from '../../tools/envoy-config/shipped-configs.js';
import { repoRoot } from '../../scripts/repo-root.js';
import { envoyBinaryPath } from '../support/envoy-binary.js';

const run = promisify(execFile);

describe('shipped Envoy configurations', () => {
  for (const config of SHIPPED_CONFIGS) {
    it(`envoy/${config.file} matches the renderer and passes envoy --mode validate`, async () => {
      const path = join(repoRoot(), 'envoy', config.file);
      assert.equal(readFileSync(path, 'utf8'), renderShippedConfig(config), `envoy/${config.file} is stale: run \`npm run envoy:configs\``);
      const { stdout, stderr } = await run(envoyBinaryPath(), ['--mode', 'validate', '--config-path', path, '--log-level', 'error']);
      assert.match(stdout + stderr, /OK/);
    });
  }
});
