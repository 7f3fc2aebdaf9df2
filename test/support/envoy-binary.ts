// Where the tests find the Envoy binary. `scripts/install-envoy.mjs` puts it in the repo cache;
// ENVOY_BIN overrides. This module only locates it: downloading stays in the script so the test
// run never reaches the network by surprise.

import { accessSync, constants, existsSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

export const ENVOY_VERSION = '1.40.0';

/** Walks up from this file (test/support or dist/test/support) to the directory holding package.json. */
function repoRoot(): string {
  let dir = dirname(fileURLToPath(import.meta.url));
  for (;;) {
    if (existsSync(join(dir, 'package.json'))) return dir;
    const parent = dirname(dir);
    if (parent === dir) throw new Error(`cannot find the repository root above ${fileURLToPath(import.meta.url)}`);
    dir = parent;
  }
}

/** The cache path `scripts/install-envoy.mjs` writes to. */
export function cachedEnvoyPath(): string {
  return join(repoRoot(), '.cache', 'envoy', ENVOY_VERSION, 'envoy');
}

function isExecutable(path: string): boolean {
  try {
    accessSync(path, constants.X_OK);
    return true;
  } catch {
    return false;
  }
}

/** Path of the Envoy binary to run: $ENVOY_BIN, else the repo cache. Throws with a fix-it hint. */
export function envoyBinaryPath(): string {
  const fromEnv = process.env['ENVOY_BIN'];
  if (fromEnv) {
    if (!isExecutable(fromEnv)) throw new Error(`ENVOY_BIN=${fromEnv} is not an executable file`);
    return fromEnv;
  }
  const cached = cachedEnvoyPath();
  if (!isExecutable(cached)) {
    throw new Error(
      `no Envoy binary at ${cached}: run \`node scripts/install-envoy.mjs\` ` +
        `(downloads Envoy ${ENVOY_VERSION}), or set ENVOY_BIN to an Envoy ${ENVOY_VERSION} binary`,
    );
  }
  return cached;
}
