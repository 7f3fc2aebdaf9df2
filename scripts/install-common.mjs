// What the tool installers (install-envoy, install-helm, install-kube, ...) share: the error type
// that means "a clear message, no stack", command helpers, the tools cache outside the clone, the
// one way an installer reports its result, and the one flow of a pinned Go tool (an override from
// the environment, else the cached binary when it reports its version, else a build renamed into place). Plain Node ESM with no dependencies: it runs before
// `npm ci` and before the TypeScript build exist.
import { spawnSync } from 'node:child_process';
import { accessSync, constants, existsSync, mkdirSync, mkdtempSync, renameSync, rmSync } from 'node:fs';
import { homedir } from 'node:os';
import { basename, dirname, join } from 'node:path';

/** A failure the installer explains itself: printed as its message, without a stack. */
export class InstallError extends Error {}

export function isExecutable(path) {
  try {
    accessSync(path, constants.X_OK);
    return true;
  } catch {
    return false;
  }
}

/** Runs a command to completion, capturing output; never throws (ENOENT shows up in `error`). */
export function runCaptured(cmd, args, env = process.env) {
  return spawnSync(cmd, args, { encoding: 'utf8', env, maxBuffer: 16 * 1024 * 1024 });
}

export function describeFailure(res) {
  if (res.error) return res.error.message;
  const out = `${res.stderr ?? ''}${res.stdout ?? ''}`.trim();
  return `exit ${res.status ?? res.signal}${out ? `:\n${out}` : ''}`;
}

/** `${LLM_EXTPROC_TOOLS_DIR:-~/.cache/llm-extproc}`: built tools live outside the clone and are reused. */
export function toolsDir() {
  const fromEnv = process.env.LLM_EXTPROC_TOOLS_DIR;
  return fromEnv && fromEnv.length > 0 ? fromEnv : join(homedir(), '.cache', 'llm-extproc');
}

/**
 * Runs an installer's `main`: prints what it returns (a path, or a JSON line) on stdout; on failure
 * prints `<name>: <message>` on stderr (a stack only for unexpected errors) and exits 1.
 */
export function runInstaller(name, main) {
  try {
    const result = main();
    if (result !== undefined) process.stdout.write(`${result}\n`);
  } catch (err) {
    const msg = err instanceof InstallError ? err.message : err instanceof Error ? (err.stack ?? err.message) : String(err);
    process.stderr.write(`${name}: ${msg}\n`);
    process.exitCode = 1;
  }
}

/** Go settings for every build: modules from the proxy, a caller's workspace/vendor settings ignored. */
export const GO_ENV = { GO111MODULE: 'on', GOWORK: 'off', GOFLAGS: '-mod=mod -buildvcs=false', CGO_ENABLED: '0' };

/**
 * Runs a command with GO_ENV (plus `env`) and returns its stdout; throws an InstallError with its
 * output when it fails. `inherit` streams the output to our stderr instead (long builds show progress).
 */
export function runChecked(cmd, args, { cwd, env, inherit = false } = {}) {
  const res = spawnSync(cmd, args, {
    cwd,
    env: { ...process.env, ...GO_ENV, ...env },
    encoding: 'utf8',
    maxBuffer: 64 * 1024 * 1024,
    stdio: inherit ? ['ignore', process.stderr, process.stderr] : ['ignore', 'pipe', 'pipe'],
  });
  if (res.error) throw new InstallError(`${cmd} ${args.join(' ')}: ${res.error.message}`);
  if (res.status !== 0) {
    const out = inherit ? '' : `\n${res.stderr ?? ''}${res.stdout ?? ''}`.trimEnd();
    throw new InstallError(`${cmd} ${args.join(' ')} (in ${cwd ?? '.'}) exited ${res.status ?? res.signal}${out}`);
  }
  return res.stdout ?? '';
}

/** `go mod download -json` of one module (run in `cwd`): its extracted directory, go.mod path, ... */
export function goModDownload(moduleAtVersion, cwd) {
  return JSON.parse(runChecked('go', ['mod', 'download', '-json', moduleAtVersion], { cwd }));
}

/** Throws an InstallError saying what needs Go when `go version` fails; returns its version line. */
export function requireGo(forWhat) {
  const res = runCaptured('go', ['version']);
  if (res.error || res.status !== 0) {
    throw new InstallError(`the Go toolchain (\`go\`) is needed to build ${forWhat}: \`go version\` failed (${describeFailure(res)})`);
  }
  return res.stdout.trim();
}

/**
 * Builds one binary in a private staging directory next to `target` and renames it into place, so
 * an interrupted or concurrent build never leaves a half-written file at the cache path. `build`
 * gets the staging directory (empty, for a wrapper module or as GOBIN) and returns the path of the
 * binary it built there. Returns the build's duration in seconds.
 */
export function buildInStaging(target, build) {
  mkdirSync(dirname(target), { recursive: true });
  const staging = mkdtempSync(join(dirname(target), '.build-'));
  const started = Date.now();
  try {
    const built = build(staging);
    if (!existsSync(built)) throw new InstallError(`the build reported success but left no ${basename(built)} in ${staging}`);
    renameSync(built, target);
  } finally {
    rmSync(staging, { recursive: true, force: true });
  }
  return Math.round((Date.now() - started) / 1000);
}

/** `go install -trimpath -ldflags=<ldflags> <packageAtVersion>` with GOBIN = `staging`; returns the binary's path there. */
export function goInstallInto(staging, packageAtVersion, ldflags, { inherit = true } = {}) {
  runChecked('go', ['install', '-trimpath', `-ldflags=${ldflags}`, packageAtVersion], { cwd: staging, env: { GOBIN: staging }, inherit });
  return join(staging, basename(packageAtVersion.replace(/@.*$/, '')));
}

/**
 * The path of a pinned tool: `$<envVar>` when set (it must be executable: an explicit choice is
 * never silently ignored), else `target` when it runs and `reportsVersion(path)`, else what
 * `build(target)` makes of it, checked with `reportsVersion` again.
 */
export function pinnedBinary({ envVar, target, version, reportsVersion, build }) {
  const fromEnv = envVar === undefined ? undefined : process.env[envVar];
  if (fromEnv) {
    if (!isExecutable(fromEnv)) throw new InstallError(`${envVar}=${fromEnv} is not an executable file`);
    return fromEnv;
  }
  if (isExecutable(target) && reportsVersion(target)) return target;
  build(target);
  if (!reportsVersion(target)) throw new InstallError(`built ${target} but it does not report version ${version}`);
  return target;
}
