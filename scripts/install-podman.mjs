#!/usr/bin/env node
// Makes the project's container image with a real container engine, for the container e2e test
// (test/e2e/image.test.ts), and prints one JSON line describing it.
//
// 1. podman (rootful, from Debian's packages, installed with apt-get when absent) and our own
//    containers.conf (podman-engine.mjs: runc, ulimits; a developer's podman setup is untouched).
// 2. The Dockerfile's base images (podman-base-image.mjs): local, pulled, or a stand-in made from
//    Debian's packages under the same name when no registry serves them (CI). The stand-in's
//    filesystem is cached in `${LLM_EXTPROC_TOOLS_DIR:-~/.cache/llm-extproc}/podman-base/`.
// 3. `podman build` of the Dockerfile, tagged `localhost/llm-extproc:ctx-<key>`, where the key
//    hashes the build context (the files .dockerignore lets in), the Dockerfile, the base images'
//    ids and the build args: an unchanged tree reuses the image in well under a second, a changed
//    source, lockfile or Dockerfile rebuilds the project image (the base stays), and podman's layer
//    cache keeps the `npm ci` layer while the lockfile is unchanged. The host npm's CA bundle, when
//    it has one, is passed as a build secret (never stored in the image); a non-default registry
//    as a build arg of the build stage.
//
// Usage: node scripts/install-podman.mjs [--machine-only]
//   --machine-only: steps 1 and 2 (what `npm test` runs before the suite; the test builds the image,
//   so a broken Dockerfile fails that test, not the whole run).
// Prints {"available":false,"reason":...} (exit 0) on a machine that cannot run containers at all
// (not Linux, or no podman and no root to install it); a failure on a machine that can is exit 1.
import { createHash } from 'node:crypto';
import { existsSync, readFileSync, readdirSync, statSync } from 'node:fs';
import { dirname, join, relative, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { InstallError, runCaptured, runInstaller } from './install-common.mjs';
import { baseImages, ensureBaseImage, qualifiedName } from './podman-base-image.mjs';
import { ContainersUnavailable, containersConf, ensurePodman, imageExists, isRoot, podman, podmanCaptured, podmanEnv, probeFailure } from './podman-engine.mjs';

const REPO = resolve(dirname(fileURLToPath(import.meta.url)), '..');
const IMAGE_REPOSITORY = 'localhost/llm-extproc';
const DEFAULT_NPM_REGISTRY = 'https://registry.npmjs.org/';

/** The paths .dockerignore lets into the context: it must be an allowlist (`*`, then `!path` lines). */
function contextFiles() {
  const lines = readFileSync(join(REPO, '.dockerignore'), 'utf8')
    .split('\n')
    .map((l) => l.trim())
    .filter((l) => l !== '' && !l.startsWith('#'));
  if (lines[0] !== '*' || lines.slice(1).some((l) => !l.startsWith('!') || /[*?[]/.test(l))) {
    throw new InstallError('.dockerignore must be an allowlist: `*`, then one `!path` per file or directory the Dockerfile copies');
  }
  const files = [];
  const walk = (path) => {
    if (statSync(path).isDirectory()) for (const entry of readdirSync(path)) walk(join(path, entry));
    else files.push(relative(REPO, path));
  };
  for (const line of lines.slice(1)) {
    const path = join(REPO, line.slice(1).replace(/\/$/, ''));
    if (!existsSync(path)) throw new InstallError(`.dockerignore lets in ${line.slice(1)}, which does not exist`);
    walk(path);
  }
  return [...new Set(files)].sort();
}

function npmConfig(key) {
  const res = runCaptured('npm', ['config', 'get', key]);
  const value = res.status === 0 ? res.stdout.trim() : '';
  return value === 'null' || value === 'undefined' ? '' : value;
}

function gitRevision() {
  const res = runCaptured('git', ['-C', REPO, 'rev-parse', 'HEAD']);
  return res.status === 0 ? res.stdout.trim() : 'unknown';
}

/** Build args and secrets: the OCI labels' values, and what npm inside the build needs from the host's npm. */
function buildInputs() {
  const pkg = JSON.parse(readFileSync(join(REPO, 'package.json'), 'utf8'));
  const args = { VERSION: pkg.version, REVISION: gitRevision() };
  const registry = npmConfig('registry');
  if (registry !== '' && registry !== DEFAULT_NPM_REGISTRY) args.NPM_REGISTRY = registry;
  const cafile = npmConfig('cafile') || process.env.NODE_EXTRA_CA_CERTS || '';
  return { args, cafile: cafile !== '' && existsSync(cafile) ? cafile : undefined };
}

function imageId(confPath, name) {
  return podman(confPath, ['image', 'inspect', '--format', '{{.Id}}', name]).trim();
}

/** The image's size and its layers (newest first), from podman. */
function describeImage(confPath, tag) {
  const sizeBytes = Number(podman(confPath, ['image', 'inspect', '--format', '{{.Size}}', tag]).trim());
  const history = JSON.parse(podman(confPath, ['history', '--format', 'json', tag]));
  const layers = history
    .filter((h) => h.size > 0)
    .map((h) => ({ bytes: h.size, createdBy: String(h.createdBy ?? h.CreatedBy ?? '').replace(/^\/bin\/sh -c #\(nop\) /, '').slice(0, 120) }));
  const labels = JSON.parse(podman(confPath, ['image', 'inspect', '--format', '{{json .Labels}}', tag]));
  return { sizeBytes, layers, labels };
}

/** Builds the image unless the tag for this exact context exists; returns { tag, built, seconds }. */
function projectImage(confPath, bases) {
  const { args, cafile } = buildInputs();
  const flags = [
    '--pull=never',
    // Build steps need the registries only; the host's network spares a NAT setup per step.
    '--network=host',
    ...Object.entries(args).flatMap(([k, v]) => ['--build-arg', `${k}=${v}`]),
    // The Dockerfile's LABEL reads these args too, but buildah 1.28 (podman 4.3) reuses a cached
    // LABEL step when only an arg's value changed: the labels would name the previous commit.
    '--label',
    `org.opencontainers.image.version=${args.VERSION}`,
    '--label',
    `org.opencontainers.image.revision=${args.REVISION}`,
    ...(cafile === undefined ? [] : ['--secret', `id=npm-ca,src=${cafile}`]),
    '--file',
    join(REPO, 'Dockerfile'),
  ];
  const hash = createHash('sha256');
  hash.update(readFileSync(join(REPO, 'Dockerfile'))).update(readFileSync(join(REPO, '.dockerignore')));
  for (const file of contextFiles()) hash.update(`\0${file}\0`).update(readFileSync(join(REPO, file)));
  for (const base of bases) hash.update(`\0${imageId(confPath, qualifiedName(base.name))}`);
  hash.update(JSON.stringify(flags));
  const tag = `${IMAGE_REPOSITORY}:ctx-${hash.digest('hex').slice(0, 16)}`;
  if (imageExists(confPath, tag)) return { tag, built: false, seconds: 0 };
  const started = Date.now();
  process.stderr.write(`install-podman: podman build -t ${tag}\n`);
  podman(confPath, ['build', ...flags, '--tag', tag, REPO], { inherit: true });
  // Earlier builds of this repository's images are superseded: keep storage from growing per commit.
  const old = podman(confPath, ['images', '--format', '{{.Repository}}:{{.Tag}}', '--filter', `reference=${IMAGE_REPOSITORY}`])
    .split('\n')
    .filter((t) => t !== '' && t !== tag);
  if (old.length > 0) podmanCaptured(confPath, ['rmi', '--force', ...old]);
  podmanCaptured(confPath, ['image', 'prune', '--force']);
  return { tag, built: true, seconds: Math.round((Date.now() - started) / 1000) };
}

/** A first container from a base image: the engine works on this machine (runtime, ulimits, storage). */
function probeEngine(confPath, base) {
  const res = podmanCaptured(confPath, ['run', '--rm', '--network=none', qualifiedName(base), 'true']);
  if (res.status === 0) return;
  const reason = `podman cannot run a container here: ${probeFailure(res)}`;
  // Root installed and set up the engine itself, so a failure there is ours to fix, not a skip.
  if (isRoot()) throw new InstallError(reason);
  throw new ContainersUnavailable(reason);
}

function main() {
  const machineOnly = process.argv.includes('--machine-only');
  let aptSeconds;
  try {
    aptSeconds = ensurePodman();
  } catch (err) {
    if (err instanceof ContainersUnavailable) return JSON.stringify({ available: false, reason: err.message });
    throw err;
  }
  const confPath = containersConf();
  const bases = baseImages(readFileSync(join(REPO, 'Dockerfile'), 'utf8')).map((name) => ensureBaseImage(confPath, name));
  try {
    if (bases.length > 0) probeEngine(confPath, bases[0].name);
  } catch (err) {
    if (err instanceof ContainersUnavailable) return JSON.stringify({ available: false, reason: err.message });
    throw err;
  }
  const machine = { available: true, env: podmanEnv(confPath), bases, aptSeconds };
  if (machineOnly) return JSON.stringify(machine);
  const image = projectImage(confPath, bases);
  return JSON.stringify({ ...machine, image: image.tag, built: image.built, buildSeconds: image.seconds, ...describeImage(confPath, image.tag) });
}

runInstaller('install-podman', main);
