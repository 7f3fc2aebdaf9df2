#!/usr/bin/env node
// Part of `npm run build`, after tsc: re-emits dist/src/endpoints/kube-client.js so that loading
// client-node's KubeConfig does not load the package's generated API index.
//
// Why: @kubernetes/client-node's config.js (KubeConfig) imports `./gen/index.js` for two names,
// `createConfiguration` and `ServerConfiguration` (used by makeApiClient), and that index
// evaluates every generated API and model — tens of MiB of source text and resident memory for
// a picker that lists and watches two kinds. ES modules cannot skip an import, so this step
// bundles config.js alone into our module with that one import narrowed to the two files that
// define those names; every other import (client-node's other files, js-yaml, node-fetch, the
// auth and proxy packages, Node built-ins) stays an import of the installed package, so nothing
// third-party is copied and the image's bundle still sees every package it ships.
//
// It fails the build, rather than emit a module that would break at run time, when config.js
// imports something else from the index (a client-node upgrade), or when a package config.js
// imports would resolve to another copy from dist/ than from client-node (npm nesting it).
//
// Usage: node scripts/narrow-kube-client.mjs [DIST_DIR]   (default: ./dist)

import { readFileSync, rmSync, writeFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { dirname, join, relative, resolve, sep } from 'node:path';
import { fileURLToPath } from 'node:url';
import { build } from 'esbuild';

const REPO = resolve(dirname(fileURLToPath(import.meta.url)), '..');
const DIST = resolve(process.argv[2] ?? join(REPO, 'dist'));
const TARGET = join(DIST, 'src', 'endpoints', 'kube-client.js');
const PACKAGE = '@kubernetes/client-node';
const PACKAGE_DIR = dirname(createRequire(join(REPO, 'package.json')).resolve(`${PACKAGE}/package.json`));
const CONFIG_JS = join(PACKAGE_DIR, 'dist', 'config.js');
/** What config.js takes from the generated index, and the files that define it. */
const NARROWED_INDEX = [
  `export { createConfiguration } from '${PACKAGE}/dist/gen/configuration.js';`,
  `export { ServerConfiguration } from '${PACKAGE}/dist/gen/servers.js';`,
].join('\n');
const MARKER = '// narrowed by scripts/narrow-kube-client.mjs';

/** Where `specifier` resolves for a module in `fromDir` (Node's CommonJS rules match ESM's for bare names here). */
function resolvedFrom(fromDir, specifier) {
  try {
    return createRequire(join(fromDir, 'index.js')).resolve(specifier);
  } catch {
    return undefined;
  }
}

const narrow = {
  name: 'narrow-kube-config',
  setup(b) {
    b.onResolve({ filter: /.*/ }, (args) => {
      if (args.kind === 'entry-point') return undefined;
      if (args.importer === CONFIG_JS && args.path === './gen/index.js') return { path: 'gen-index', namespace: 'narrowed' };
      if (args.path === `${PACKAGE}/dist/config.js`) return { path: CONFIG_JS };
      if (args.path.startsWith('node:') || args.namespace === 'narrowed') return { path: args.path, external: true };
      if (args.path.startsWith('.')) {
        // client-node's own files: imported from the installed package (no exports map).
        const file = resolve(dirname(args.importer), args.path);
        if (!file.startsWith(PACKAGE_DIR + sep)) throw new Error(`unexpected relative import ${args.path} from ${args.importer}`);
        return { path: `${PACKAGE}/${relative(PACKAGE_DIR, file).split(sep).join('/')}`, external: true };
      }
      // A package: it must be the same copy from dist/src/endpoints as from client-node.
      const fromPackage = resolvedFrom(dirname(args.importer), args.path);
      const fromDist = resolvedFrom(dirname(TARGET), args.path);
      if (fromPackage !== fromDist)
        throw new Error(
          `${args.path} resolves to ${fromPackage ?? 'nothing'} for client-node but to ${fromDist ?? 'nothing'} from dist/: cannot narrow KubeConfig's imports`,
        );
      return { path: args.path, external: true };
    });
    b.onLoad({ filter: /.*/, namespace: 'narrowed' }, () => ({ contents: NARROWED_INDEX, loader: 'js' }));
  },
};

async function main() {
  const emitted = readFileSync(TARGET, 'utf8');
  if (emitted.startsWith(MARKER)) return; // already narrowed (tsc left the file alone)
  const result = await build({
    stdin: { contents: emitted, resolveDir: dirname(TARGET), sourcefile: 'kube-client.js', loader: 'js' },
    bundle: true,
    format: 'esm',
    platform: 'node',
    target: 'node20',
    write: false,
    legalComments: 'none',
    plugins: [narrow],
    logLevel: 'warning',
  });
  const code = result.outputFiles[0].text;
  writeFileSync(TARGET, `${MARKER} from ${PACKAGE}'s KubeConfig (dist/config.js) and Watch; do not edit.\n${code}`);
  rmSync(`${TARGET}.map`, { force: true }); // tsc's map describes the module this replaced
}

main().catch((err) => {
  process.stderr.write(`narrow-kube-client: ${err instanceof Error ? err.message : String(err)}\n`);
  process.exitCode = 1;
});
