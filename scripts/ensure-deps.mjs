#!/usr/bin/env node
// Makes `npm run demo` and `npm test` work on a fresh clone: installs the locked npm dependencies
// when node_modules is missing or older than package-lock.json. Plain JS: it runs before anything
// is installed or built.
import { execFileSync } from 'node:child_process';
import { existsSync, mkdirSync, statSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

const root = join(dirname(fileURLToPath(import.meta.url)), '..');
// Scratch space for the Envoy binary, test results and the demo's files (git-ignored).
mkdirSync(join(root, '.cache'), { recursive: true });
const marker = join(root, 'node_modules', '.package-lock.json');
const lock = join(root, 'package-lock.json');
const stale = !existsSync(marker) || statSync(marker).mtimeMs < statSync(lock).mtimeMs;
if (stale) {
  process.stdout.write('installing npm dependencies (npm ci)…\n');
  execFileSync('npm', ['ci', '--no-audit', '--no-fund'], { cwd: root, stdio: 'inherit' });
}
