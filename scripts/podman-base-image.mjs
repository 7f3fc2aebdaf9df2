// The base images the Dockerfile names, in podman's local storage: as they are when present, pulled
// when the registry answers, and otherwise made here under the same name (CI reaches package
// registries only, no Docker Hub).
//
// The one stand-in we know how to make is node:<major>-bookworm-slim: a `debootstrap
// --variant=minbase bookworm` root filesystem (Debian's packages) plus Node <major> and npm 10 and
// the `node` user (uid 1000), as the official image has them. Node is this machine's own binary
// when its major version matches, else the official binary shipped in the npm package
// node-linux-<arch>. The filesystem is kept as a tarball in the tools cache, keyed by what went
// into it, and imported again in seconds whenever podman's storage lacks the image.
import {
  chmodSync,
  copyFileSync,
  existsSync,
  mkdirSync,
  mkdtempSync,
  readFileSync,
  readdirSync,
  renameSync,
  rmSync,
  symlinkSync,
  writeFileSync,
} from 'node:fs';
import { createHash } from 'node:crypto';
import { join } from 'node:path';
import { InstallError, runCaptured, runChecked, toolsDir } from './install-common.mjs';
import { podman, podmanCaptured, probeFailure } from './podman-engine.mjs';

/** Bump when the recipe below changes: a new key, so the cached tarball is made again. */
const RECIPE = 1;
const SUITE = 'bookworm';
/** What the official node:20 images ship. */
const NPM_VERSION = '10.8.2';
/** The Node release taken from the npm registry when this machine's node is another major. */
const NODE_FALLBACK = { 20: '20.20.2' };
const STAND_IN_LABEL = 'org.llm-extproc.stand-in';
const PULL_TIMEOUT_MS = 120_000;

/** `node:20-bookworm-slim` → `docker.io/library/node:20-bookworm-slim` (how podman stores it). */
export function qualifiedName(name) {
  const first = name.split('/')[0];
  if (!name.includes('/')) return `docker.io/library/${name}`;
  if (!first.includes('.') && !first.includes(':') && first !== 'localhost') return `docker.io/${name}`;
  return name;
}

/** The base images of a Dockerfile: every FROM that is neither `scratch` nor an earlier stage. */
export function baseImages(dockerfileText) {
  const stages = new Set();
  const bases = [];
  for (const line of dockerfileText.split('\n')) {
    const m = /^\s*FROM\s+(?:--platform=\S+\s+)?(\S+)(?:\s+AS\s+(\S+))?\s*$/i.exec(line);
    if (m === null) continue;
    const [, image, stage] = m;
    if (image !== 'scratch' && !stages.has(image.toLowerCase()) && !bases.includes(image)) bases.push(image);
    if (stage !== undefined) stages.add(stage.toLowerCase());
  }
  return bases;
}

/** The Debian mirror this machine's apt uses for the suite (deb822 or one-line sources), else Debian's own. */
function debianMirror() {
  const files = ['/etc/apt/sources.list'];
  if (existsSync('/etc/apt/sources.list.d'))
    files.push(...readdirSync('/etc/apt/sources.list.d').map((f) => join('/etc/apt/sources.list.d', f)));
  for (const file of files) {
    if (!existsSync(file)) continue;
    const text = readFileSync(file, 'utf8');
    const oneLine = new RegExp(`^deb\\s+(?:\\[[^\\]]*\\]\\s+)?(\\S+)\\s+${SUITE}\\s+main`, 'm').exec(text);
    if (oneLine !== null) return oneLine[1];
    for (const stanza of text.split(/\n\s*\n/)) {
      const suites = /^Suites:\s*(.*)$/m.exec(stanza)?.[1]?.split(/\s+/) ?? [];
      const uri = /^URIs:\s*(\S+)/m.exec(stanza)?.[1];
      if (suites.includes(SUITE) && uri !== undefined && /^Components:.*\bmain\b/m.test(stanza)) return uri;
    }
  }
  return 'http://deb.debian.org/debian';
}

/** The Node version the stand-in gets: this machine's when the major matches, else NODE_FALLBACK's. */
function nodeVersion(major) {
  if (process.versions.node.split('.')[0] === String(major)) return process.versions.node;
  const version = NODE_FALLBACK[major];
  if (version === undefined)
    throw new InstallError(`no Node ${major} to put in a stand-in base image (this machine runs ${process.version})`);
  return version;
}

/** The path of a node binary of `version`: this process's own, or one unpacked from the npm registry into `work`. */
function nodeBinary(version, work) {
  if (version === process.versions.node) return process.execPath;
  const arch = { x64: 'x64', arm64: 'arm64' }[process.arch];
  if (arch === undefined) throw new InstallError(`no Node ${version} package for ${process.arch}`);
  const tarball = runChecked('npm', ['pack', `node-linux-${arch}@${version}`, '--pack-destination', work, '--silent'], { cwd: work })
    .trim()
    .split('\n')
    .at(-1);
  runChecked('tar', ['-xzf', join(work, tarball), '-C', work]);
  return join(work, 'package', 'bin', 'node');
}

/** Makes the root filesystem tarball of a node:<major>-bookworm-slim stand-in at `target`. */
function makeNodeRootfs(major, version, target) {
  const work = mkdtempSync(join(toolsDir(), 'podman-base', '.build-'));
  try {
    const rootfs = join(work, 'rootfs');
    const mirror = debianMirror();
    process.stderr.write(
      `install-podman: debootstrap --variant=minbase ${SUITE} from ${mirror} (a stand-in for node:${major}-${SUITE}-slim)\n`,
    );
    runChecked('debootstrap', ['--variant=minbase', SUITE, rootfs, mirror], { inherit: false });
    // Node and npm where the official image has them.
    mkdirSync(join(rootfs, 'usr/local/bin'), { recursive: true });
    copyFileSync(nodeBinary(version, work), join(rootfs, 'usr/local/bin/node'));
    chmodSync(join(rootfs, 'usr/local/bin/node'), 0o755);
    const npmTarball = runChecked('npm', ['pack', `npm@${NPM_VERSION}`, '--pack-destination', work, '--silent'], { cwd: work })
      .trim()
      .split('\n')
      .at(-1);
    const npmDir = join(rootfs, 'usr/local/lib/node_modules/npm');
    mkdirSync(npmDir, { recursive: true });
    runChecked('tar', ['-xzf', join(work, npmTarball), '-C', npmDir, '--strip-components=1', '--no-same-owner']);
    symlinkSync('../lib/node_modules/npm/bin/npm-cli.js', join(rootfs, 'usr/local/bin/npm'));
    symlinkSync('../lib/node_modules/npm/bin/npx-cli.js', join(rootfs, 'usr/local/bin/npx'));
    // The official image's unprivileged user.
    writeFileSync(join(rootfs, 'etc/passwd'), `${readFileSync(join(rootfs, 'etc/passwd'), 'utf8')}node:x:1000:1000::/home/node:/bin/sh\n`);
    writeFileSync(join(rootfs, 'etc/group'), `${readFileSync(join(rootfs, 'etc/group'), 'utf8')}node:x:1000:\n`);
    mkdirSync(join(rootfs, 'home/node'), { recursive: true });
    runChecked('chown', ['1000:1000', join(rootfs, 'home/node')]);
    // What the official slim image leaves out too: downloaded packages, package lists, documentation.
    for (const dir of ['var/cache/apt/archives', 'var/lib/apt/lists', 'usr/share/doc', 'usr/share/man', 'usr/share/info']) {
      const abs = join(rootfs, dir);
      if (!existsSync(abs)) continue;
      for (const entry of readdirSync(abs))
        if (entry !== 'partial' && entry !== 'lock') rmSync(join(abs, entry), { recursive: true, force: true });
    }
    runChecked('tar', ['--numeric-owner', '-C', rootfs, '-czf', `${target}.tmp`, '.']);
    renameSync(`${target}.tmp`, target);
  } finally {
    rmSync(work, { recursive: true, force: true });
  }
}

/** Imports (making it first when not cached) the stand-in for `full`; returns how long it took. */
function standIn(confPath, full, why) {
  const m = /^docker\.io\/library\/node:(\d+)-bookworm-slim$/.exec(full);
  if (m === null) throw new InstallError(`cannot pull ${full} (${why}), and there is no local stand-in for it`);
  const major = Number(m[1]);
  const started = Date.now();
  const cache = join(toolsDir(), 'podman-base');
  mkdirSync(cache, { recursive: true });
  const version = nodeVersion(major);
  const key = createHash('sha256')
    .update(JSON.stringify({ RECIPE, SUITE, node: version, npm: NPM_VERSION, arch: process.arch }))
    .digest('hex')
    .slice(0, 16);
  if (standInKey(confPath, full) === key) return { source: 'stand-in', seconds: 0 };
  const tarball = join(cache, `node-${major}-${SUITE}-slim-${key}.tar.gz`);
  if (!existsSync(tarball)) makeNodeRootfs(major, version, tarball);
  podman(confPath, [
    'import',
    '--change',
    `CMD ["node"]`,
    '--change',
    'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin',
    '--change',
    `ENV NODE_VERSION=${version}`,
    '--change',
    `LABEL ${STAND_IN_LABEL}=${key}`,
    tarball,
    full,
  ]);
  // Remove tarballs of earlier keys: one stand-in per base name is enough.
  for (const f of readdirSync(cache))
    if (f.startsWith(`node-${major}-${SUITE}-slim-`) && join(cache, f) !== tarball) rmSync(join(cache, f), { force: true });
  return { source: 'stand-in', seconds: Math.round((Date.now() - started) / 1000) };
}

/** The stand-in key label of a local image ('' for an image we did not make, undefined when absent). */
function standInKey(confPath, full) {
  const res = podmanCaptured(confPath, ['image', 'inspect', '--format', `{{index .Labels "${STAND_IN_LABEL}"}}`, full]);
  if (res.status !== 0) return undefined;
  const label = res.stdout.trim();
  return label === '<no value>' ? '' : label;
}

/**
 * Makes sure `name` is in podman's storage: kept when present (pulled earlier, or our current
 * stand-in), pulled when the registry answers, else our stand-in. A stand-in of an older recipe is
 * replaced. Returns { name, source: 'local' | 'pulled' | 'stand-in', seconds }.
 */
export function ensureBaseImage(confPath, name) {
  const full = qualifiedName(name);
  const label = standInKey(confPath, full);
  if (label === '') return { name, source: 'local', seconds: 0 };
  if (label !== undefined) return { name, ...standIn(confPath, full, 'a stand-in made here earlier') };
  const started = Date.now();
  const pulled = runCaptured('timeout', [`${PULL_TIMEOUT_MS / 1000}`, 'podman', 'pull', '--quiet', full], {
    ...process.env,
    CONTAINERS_CONF: confPath,
  });
  if (pulled.status === 0) return { name, source: 'pulled', seconds: Math.round((Date.now() - started) / 1000) };
  return { name, ...standIn(confPath, full, probeFailure(pulled)) };
}
