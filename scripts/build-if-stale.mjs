#!/usr/bin/env node
// `npm run demo` builds only when dist/ is older than the sources: a second start skips the
// minute-long `tsc` when nothing changed, and a fresh clone (no dist/) or any edited file still
// builds. Fresh means every TypeScript file the build compiles has its output in dist/, written
// after the file's last change, and tsconfig.json and package-lock.json are older than every
// output. `npm test` and `npm run build` always build. Plain JS: it runs before the build exists.
//
//   node scripts/build-if-stale.mjs            build (tsc -p tsconfig.json) when stale, else nothing
//   node scripts/build-if-stale.mjs --check    exit 0 when fresh, 1 (naming why) when stale; never builds
//   --root DIR                                 the project to look at (default: this repository)

import { execFileSync } from 'node:child_process';
import { readdirSync, statSync } from 'node:fs';
import { createRequire } from 'node:module';
import { dirname, join, relative } from 'node:path';
import { fileURLToPath } from 'node:url';
import { parseArgs } from 'node:util';

/** The folders tsconfig.json's `include` compiles, and the files whose change affects every output. */
const SOURCE_DIRS = ['src', 'tools', 'test', 'scripts'];
const BUILD_INPUTS = ['tsconfig.json', 'package-lock.json'];

/** Every .ts file (not .d.ts) under dir, recursively. */
function typescriptFiles(dir) {
  let entries;
  try {
    entries = readdirSync(dir, { withFileTypes: true });
  } catch {
    return [];
  }
  return entries.flatMap((entry) => {
    const path = join(dir, entry.name);
    if (entry.isDirectory()) return typescriptFiles(path);
    return entry.name.endsWith('.ts') && !entry.name.endsWith('.d.ts') ? [path] : [];
  });
}

function mtime(path) {
  try {
    return statSync(path).mtimeMs;
  } catch {
    return undefined;
  }
}

/** Why dist/ under root is stale, or undefined when it is fresh. */
function staleness(root) {
  let oldestOutput = Infinity;
  for (const dir of SOURCE_DIRS) {
    for (const source of typescriptFiles(join(root, dir))) {
      const name = relative(root, source);
      const output = join(root, 'dist', name.replace(/\.ts$/, '.js'));
      const built = mtime(output);
      if (built === undefined) return `${name} has not been built`;
      if ((mtime(source) ?? Infinity) > built) return `${name} changed since it was built`;
      oldestOutput = Math.min(oldestOutput, built);
    }
  }
  if (oldestOutput === Infinity) return 'nothing has been built';
  for (const input of BUILD_INPUTS) if ((mtime(join(root, input)) ?? 0) > oldestOutput) return `${input} changed since the last build`;
  return undefined;
}

const isMain = process.argv[1] !== undefined && fileURLToPath(import.meta.url) === process.argv[1];
if (isMain) {
  const { values } = parseArgs({ options: { check: { type: 'boolean', default: false }, root: { type: 'string' } } });
  const root = values.root ?? join(dirname(fileURLToPath(import.meta.url)), '..');
  const why = staleness(root);
  if (values.check) {
    process.stdout.write(why === undefined ? 'dist/ is up to date\n' : `dist/ is stale: ${why}\n`);
    process.exit(why === undefined ? 0 : 1);
  }
  if (why !== undefined) {
    process.stdout.write(`building (${why})…\n`);
    const tsc = createRequire(join(root, 'package.json')).resolve('typescript/bin/tsc');
    execFileSync(process.execPath, [tsc, '-p', join(root, 'tsconfig.json')], { cwd: root, stdio: 'inherit' });
  }
}
