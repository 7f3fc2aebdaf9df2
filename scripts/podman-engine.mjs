// The container engine for the image build and the container e2e test: rootful podman from
// Debian's packages, and the settings this kind of machine needs, kept to our own commands.
//
// - Installed with apt-get when absent (root only; CI runs as root): podman, runc, netavark and
//   aardvark-dns (podman's network stack), iptables (netavark's NAT), debootstrap (stand-in base
//   images, podman-base-image.mjs).
// - runc as the OCI runtime: crun (podman's first choice when installed) refuses the cgroup layout
//   of these machines.
// - default_ulimits = this process's own open-files and processes limits: podman otherwise raises
//   RLIMIT_NOFILE and RLIMIT_NPROC past them, which fails without CAP_SYS_RESOURCE. The processes
//   limit is also capped at kernel.pid_max: podman runs conmon (and so the container's init) with
//   RLIMIT_NPROC lowered to it (measured here: 32768 while the shell had 96362).
// Those settings live in a containers.conf of our own in the tools cache, handed to our podman
// commands alone through CONTAINERS_CONF: /etc/containers and a developer's own podman setup are
// left as they are.
import { existsSync, mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { describeFailure, runCaptured, runChecked, toolsDir } from './install-common.mjs';

const APT_PACKAGES = ['podman', 'runc', 'netavark', 'aardvark-dns', 'iptables', 'debootstrap'];

function commandWorks(cmd, args) {
  const res = runCaptured(cmd, args);
  return !res.error && res.status === 0;
}

function isRoot() {
  return process.getuid?.() === 0;
}

/**
 * Why this machine cannot run our containers, or undefined when it can try: rootful podman (the
 * test's bridge network and pod addresses need root too) on Linux. CI runs as root.
 */
export function containersUnavailable() {
  if (process.platform !== 'linux') return `containers need Linux; this is ${process.platform}`;
  if (!isRoot()) return 'the image is built and run with rootful podman, installed with apt-get: that needs root (CI runs as root)';
  if (!commandWorks('apt-get', ['--version']) && !commandWorks('podman', ['--version']))
    return 'podman is not installed and there is no apt-get to install it with';
  return undefined;
}

/** Installs what is missing of APT_PACKAGES (as root); returns the seconds apt took (0 when nothing was missing). */
export function ensurePodman() {
  const missing = [
    ['podman', ['--version']],
    ['runc', ['--version']],
    ['debootstrap', ['--version']],
  ].some(([cmd, args]) => !commandWorks(cmd, args));
  if (!missing) return 0;
  const started = Date.now();
  const env = { DEBIAN_FRONTEND: 'noninteractive' };
  process.stderr.write(`install-podman: apt-get install ${APT_PACKAGES.join(' ')}\n`);
  runChecked('apt-get', ['update', '-qq'], { env });
  runChecked('apt-get', ['install', '-y', '-qq', '--no-install-recommends', ...APT_PACKAGES], { env });
  return Math.round((Date.now() - started) / 1000);
}

function pidMax() {
  try {
    return Number(readFileSync('/proc/sys/kernel/pid_max', 'utf8').trim()) || Infinity;
  } catch {
    return Infinity;
  }
}

/** This process's limits as podman ulimits (`nofile=soft:hard`, `nproc=soft:hard`), from /proc/self/limits. */
function ownUlimits() {
  const limits = readFileSync('/proc/self/limits', 'utf8').split('\n');
  return [
    ['nofile', 'Max open files'],
    ['nproc', 'Max processes'],
  ].flatMap(([name, row]) => {
    const [soft, hard] = (limits.find((l) => l.startsWith(row)) ?? '').slice(row.length).trim().split(/\s+/);
    if (soft === undefined || hard === undefined) return [];
    const cap = name === 'nproc' ? pidMax() : Infinity;
    const value = (v) => String(Math.min(v === 'unlimited' ? Infinity : Number(v), cap, 1048576));
    return [`"${name}=${value(soft)}:${value(hard)}"`];
  });
}

/** Writes our containers.conf (only when its content changes) and returns its path. */
export function containersConf() {
  const dir = join(toolsDir(), 'podman');
  const path = join(dir, 'containers.conf');
  const runtime = commandWorks('runc', ['--version']) ? '\n[engine]\nruntime = "runc"\n' : '';
  const text = [
    '# Written by llm-extproc scripts/podman-engine.mjs for its own podman commands (CONTAINERS_CONF);',
    '# /etc/containers/containers.conf and your own podman are not affected.',
    '[containers]',
    `default_ulimits = [${ownUlimits().join(', ')}]`,
    '',
    '[network]',
    'network_backend = "netavark"',
    runtime,
  ].join('\n');
  mkdirSync(dir, { recursive: true });
  if (!existsSync(path) || readFileSync(path, 'utf8') !== text) writeFileSync(path, text);
  return path;
}

/** The environment our podman commands run with. */
export function podmanEnv(confPath) {
  return { CONTAINERS_CONF: confPath };
}

/** Runs podman with our settings; returns stdout, throws an InstallError with its output on failure. */
export function podman(confPath, args, { inherit = false } = {}) {
  return runChecked('podman', args, { env: podmanEnv(confPath), inherit });
}

/** Runs podman with our settings and returns the spawn result (never throws). */
export function podmanCaptured(confPath, args) {
  return runCaptured('podman', args, { ...process.env, ...podmanEnv(confPath) });
}

/** True when the image exists in podman's local storage. */
export function imageExists(confPath, name) {
  return podmanCaptured(confPath, ['image', 'exists', name]).status === 0;
}

/** Why a probe container failed, as a one-line reason. */
export function probeFailure(res) {
  return describeFailure(res).split('\n').slice(0, 3).join(' ');
}
