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
// Prints {"available":false,"reason":...} (exit 0) where the test cannot run (not Linux, not root:
// rootful podman, its network and the test's pod addresses need root); any failure as root is exit 1.
import { Buffer } from 'node:buffer';
import { createHash } from 'node:crypto';
import { existsSync, mkdtempSync, readFileSync, readdirSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join, relative, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { InstallError, runCaptured, runInstaller } from './install-common.mjs';
import { baseImages, ensureBaseImage, qualifiedName } from './podman-base-image.mjs';
import {
  containersConf,
  containersUnavailable,
  ensurePodman,
  imageExists,
  podman,
  podmanCaptured,
  podmanEnv,
  probeFailure,
} from './podman-engine.mjs';

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

/** Build args, the OCI labels' values, and what npm inside the build needs from the host's npm (its CA bundle, a mirror). */
function buildInputs() {
  const pkg = JSON.parse(readFileSync(join(REPO, 'package.json'), 'utf8'));
  const args = { VERSION: pkg.version };
  const labels = { 'org.opencontainers.image.version': pkg.version, 'org.opencontainers.image.revision': gitRevision() };
  const registry = npmConfig('registry');
  if (registry !== '' && registry !== DEFAULT_NPM_REGISTRY) args.NPM_REGISTRY = registry;
  const cafile = npmConfig('cafile') || process.env.NODE_EXTRA_CA_CERTS || '';
  return { args, labels, cafile: cafile !== '' && existsSync(cafile) ? cafile : undefined };
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
    .map((h) => ({
      bytes: h.size,
      createdBy: String(h.createdBy ?? h.CreatedBy ?? '')
        .replace(/^\/bin\/sh -c #\(nop\) /, '')
        .slice(0, 120),
    }));
  const labels = JSON.parse(podman(confPath, ['image', 'inspect', '--format', '{{json .Labels}}', tag]));
  return { sizeBytes, layers, labels };
}

/** A tag in our repository for `parts` (hashed). */
function tagFor(kind, parts) {
  const hash = createHash('sha256');
  for (const part of parts) hash.update(`\0${part.length}\0`).update(part);
  return `${IMAGE_REPOSITORY}:${kind}-${hash.digest('hex').slice(0, 16)}`;
}

/**
 * The image for this tree and commit, in two steps so a new commit costs seconds, not a build:
 * 1. `build-<key>`: `podman build` of the Dockerfile, keyed by the context files, the Dockerfile,
 *    the base images' ids and the flags. The commit is not among its inputs: buildah 1.28 (podman
 *    4.3) re-runs every step, `npm ci` included, when any build arg's value changes.
 * 2. `ctx-<key>`: that image with the OCI version and revision labels set (a one-line build
 *    `FROM build-<key>`; the Dockerfile's own LABEL reads the same values from build args, for
 *    `docker build --build-arg REVISION=...`).
 * Returns { tag, built, seconds }; `built` is false when both already existed.
 */
function projectImage(confPath, bases) {
  const { args, labels, cafile } = buildInputs();
  const flags = [
    '--pull=never',
    // Build steps need the registries only; the host's network spares a NAT setup per step.
    '--network=host',
    ...Object.entries(args).flatMap(([k, v]) => ['--build-arg', `${k}=${v}`]),
    ...(cafile === undefined ? [] : ['--secret', `id=npm-ca,src=${cafile}`]),
    '--file',
    join(REPO, 'Dockerfile'),
  ];
  const inputs = [readFileSync(join(REPO, 'Dockerfile')), readFileSync(join(REPO, '.dockerignore'))];
  for (const file of contextFiles()) inputs.push(Buffer.from(file), readFileSync(join(REPO, file)));
  for (const base of bases) inputs.push(Buffer.from(imageId(confPath, qualifiedName(base.name))));
  const buildTag = tagFor('build', [...inputs, Buffer.from(JSON.stringify(flags))]);
  const labelFlags = Object.entries(labels).flatMap(([k, v]) => ['--label', `${k}=${v}`]);
  const tag = tagFor('ctx', [Buffer.from(buildTag), Buffer.from(JSON.stringify(labelFlags))]);
  if (imageExists(confPath, tag)) return { tag, built: false, seconds: 0 };
  const started = Date.now();
  if (!imageExists(confPath, buildTag)) {
    process.stderr.write(`install-podman: podman build -t ${buildTag}\n`);
    podman(confPath, ['build', ...flags, '--tag', buildTag, REPO], { inherit: true });
  }
  const labelDir = mkdtempSync(join(tmpdir(), 'llm-extproc-label-'));
  try {
    writeFileSync(join(labelDir, 'Containerfile'), `FROM ${buildTag}\n`);
    podman(confPath, ['build', '--pull=never', '--quiet', ...labelFlags, '--tag', tag, labelDir]);
  } finally {
    rmSync(labelDir, { recursive: true, force: true });
  }
  // Earlier builds of this repository's images are superseded: their tags go. Their untagged
  // intermediate images are buildah's layer cache (the `npm ci` layer of an unchanged lockfile is
  // reused from one), so only those made more than a month ago are pruned.
  const old = podman(confPath, ['images', '--format', '{{.Repository}}:{{.Tag}}', '--filter', `reference=${IMAGE_REPOSITORY}`])
    .split('\n')
    .filter((t) => t !== '' && t !== tag && t !== buildTag);
  if (old.length > 0) podmanCaptured(confPath, ['rmi', '--force', ...old]);
  podmanCaptured(confPath, ['image', 'prune', '--force', '--filter', 'until=720h']);
  return { tag, built: true, seconds: Math.round((Date.now() - started) / 1000) };
}

/** A first container from a base image: the engine works on this machine (runtime, ulimits, storage). */
function probeEngine(confPath, base) {
  const res = podmanCaptured(confPath, ['run', '--rm', '--network=none', qualifiedName(base), 'true']);
  if (res.status !== 0) throw new InstallError(`podman cannot run a container here: ${probeFailure(res)}`);
}

function main() {
  const machineOnly = process.argv.includes('--machine-only');
  const unavailable = containersUnavailable();
  if (unavailable !== undefined) return JSON.stringify({ available: false, reason: unavailable });
  const aptSeconds = ensurePodman();
  const confPath = containersConf();
  const bases = baseImages(readFileSync(join(REPO, 'Dockerfile'), 'utf8')).map((name) => ensureBaseImage(confPath, name));
  if (bases.length > 0) probeEngine(confPath, bases[0].name);
  const machine = { available: true, env: podmanEnv(confPath), bases, aptSeconds };
  if (machineOnly) return JSON.stringify(machine);
  const image = projectImage(confPath, bases);
  return JSON.stringify({
    ...machine,
    image: image.tag,
    built: image.built,
    buildSeconds: image.seconds,
    ...describeImage(confPath, image.tag),
  });
}

runInstaller('install-podman', main);
