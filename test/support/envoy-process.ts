// Runs a real Envoy for end-to-end tests: one process per call, ports discovered through the
// admin API (configs bind admin and listeners to port 0, so parallel test files never collide),
// logs captured for failure reports, and no Envoy outliving the test process.

import { spawn } from 'node:child_process';
import type { ChildProcess } from 'node:child_process';
import { rmSync } from 'node:fs';
import { mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import { request } from 'node:http';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { setTimeout as delay } from 'node:timers/promises';
import { envoyBinaryPath } from './envoy-binary.js';
import { LogRing } from './log-ring.js';
import { waitUntil } from './wait-until.js';
import { errorMessage } from '../../src/util/error-message.js';

export type EnvoyLogLevel = 'trace' | 'debug' | 'info' | 'warning' | 'warn' | 'error' | 'critical' | 'off';

export interface StartEnvoyOptions {
  /**
   * Full bootstrap YAML. It must have an `admin.address` (use `port_value: 0`); listeners should
   * also bind port 0 and be looked up with `listenerPort(name)`.
   */
  readonly configYaml: string;
  readonly logLevel?: EnvoyLogLevel;
  /** Label for the temp dir and error messages. */
  readonly name?: string;
  /** Deadline for the admin endpoint to report ready. */
  readonly startTimeoutMs?: number;
  /**
   * The caller stops Envoy on Ctrl-C / SIGTERM itself, after what depends on it (the demo stops
   * llm-extproc first, so no connection is cut under it). Envoy then runs in its own process group
   * and the signal hooks leave it alone; the exit hook still kills it if the caller dies.
   */
  readonly callerHandlesSignals?: boolean;
  /** Envoy worker threads (`--concurrency`); default 1. */
  readonly concurrency?: number;
  /** Grace period between SIGTERM and SIGKILL in `stop()`. */
  readonly stopTimeoutMs?: number;
  /** Extra command-line flags, e.g. `['--component-log-level', 'ext_proc:trace']`. */
  readonly extraArgs?: readonly string[];
}

export interface RunningEnvoy {
  readonly name: string;
  readonly pid: number;
  /** `http://host:port` of the admin interface. */
  readonly adminUrl: string;
  /** Bound port of the named listener (as reported by the admin API at startup). */
  listenerPort(name: string): number;
  /** SIGTERM, wait for exit, SIGKILL after the grace period; removes the temp dir. Idempotent. */
  stop(): Promise<void>;
  /** Captured stdout+stderr (the most recent 1 MiB). Print it when a test fails. */
  logs(): string;
  /** Counters and gauges from `/stats`; `filter` is Envoy's regex filter (e.g. `^cluster\.model\.`). */
  stats(filter?: string): Promise<Record<string, number>>;
  /** Polls the named counter/gauge until `predicate` holds; resolves with its value. */
  waitForStat(name: string, predicate: (value: number) => boolean, timeoutMs?: number): Promise<number>;
}

interface ExitInfo {
  readonly code: number | null;
  readonly signal: NodeJS.Signals | null;
  readonly error?: Error;
}

interface LiveEnvoy {
  readonly child: ChildProcess;
  readonly dir: string;
  /** Left running on a signal (StartEnvoyOptions.callerHandlesSignals); killed at exit all the same. */
  readonly callerHandlesSignals: boolean;
}

/** Every Envoy we started and have not yet reaped; the exit hooks kill these. */
const live = new Set<LiveEnvoy>();
let hooksInstalled = false;

function killAllNow(cause: 'exit' | 'signal' = 'exit'): void {
  for (const envoy of live) {
    if (cause === 'signal' && envoy.callerHandlesSignals) continue;
    try {
      envoy.child.kill('SIGKILL');
    } catch {
      // Already gone.
    }
    rmSync(envoy.dir, { recursive: true, force: true });
    live.delete(envoy);
  }
}

/**
 * Kills leftover Envoys when the test process ends: on normal exit, and on the signals the test
 * runner or a developer sends. A signal is re-raised after cleanup when nobody else handles it, so
 * the process still dies the way it would have.
 */
function installExitHooks(): void {
  if (hooksInstalled) return;
  hooksInstalled = true;
  process.on('exit', () => killAllNow('exit'));
  for (const signal of ['SIGINT', 'SIGTERM', 'SIGHUP'] as const) {
    const onSignal = (): void => {
      killAllNow('signal');
      process.removeListener(signal, onSignal);
      if (process.listenerCount(signal) === 0) process.kill(process.pid, signal);
    };
    process.on(signal, onSignal);
  }
}

function describeExit(info: ExitInfo): string {
  if (info.error) return `failed to start: ${info.error.message}`;
  return info.signal ? `killed by ${info.signal}` : `exit code ${String(info.code)}`;
}

interface AdminResponse {
  readonly status: number;
  readonly body: string;
}

/** One admin request on a fresh connection, so nothing lingers in a keep-alive pool after stop(). */
function adminGet(url: string, timeoutMs = 2_000): Promise<AdminResponse> {
  return new Promise((resolve, reject) => {
    const req = request(url, { method: 'GET', agent: false, timeout: timeoutMs }, (res) => {
      const chunks: Buffer[] = [];
      res.on('data', (c: Buffer) => chunks.push(c));
      res.on('end', () => resolve({ status: res.statusCode ?? 0, body: Buffer.concat(chunks).toString('utf8') }));
      res.on('error', reject);
    });
    req.on('timeout', () => req.destroy(new Error(`admin request ${url} timed out`)));
    req.on('error', reject);
    req.end();
  });
}

function isRecord(v: unknown): v is Record<string, unknown> {
  return typeof v === 'object' && v !== null && !Array.isArray(v);
}

/** `/listeners?format=json` → listener name → bound port. */
export function parseListenerPorts(json: string): Map<string, number> {
  const parsed: unknown = JSON.parse(json);
  const ports = new Map<string, number>();
  const statuses = isRecord(parsed) ? parsed['listener_statuses'] : undefined;
  if (!Array.isArray(statuses)) return ports;
  for (const status of statuses as unknown[]) {
    if (!isRecord(status) || typeof status['name'] !== 'string') continue;
    const local = status['local_address'];
    const socket = isRecord(local) ? local['socket_address'] : undefined;
    const port = isRecord(socket) ? socket['port_value'] : undefined;
    if (typeof port === 'number') ports.set(status['name'], port);
  }
  return ports;
}

/** `/stats?format=json` → name → value for counters and gauges (histograms are skipped). */
export function parseStats(json: string): Record<string, number> {
  const parsed: unknown = JSON.parse(json);
  const out: Record<string, number> = {};
  const stats = isRecord(parsed) ? parsed['stats'] : undefined;
  if (!Array.isArray(stats)) return out;
  for (const entry of stats as unknown[]) {
    if (isRecord(entry) && typeof entry['name'] === 'string' && typeof entry['value'] === 'number') {
      out[entry['name']] = entry['value'];
    }
  }
  return out;
}

export async function startEnvoy(opts: StartEnvoyOptions): Promise<RunningEnvoy> {
  const name = opts.name ?? 'envoy';
  const startTimeoutMs = opts.startTimeoutMs ?? 20_000;
  const stopTimeoutMs = opts.stopTimeoutMs ?? 5_000;
  const bin = envoyBinaryPath();
  installExitHooks();

  const dir = await mkdtemp(join(tmpdir(), `${name.replace(/[^A-Za-z0-9_-]/g, '_')}-`));
  const configPath = join(dir, 'envoy.yaml');
  const adminAddressPath = join(dir, 'admin-address');
  await writeFile(configPath, opts.configYaml);

  const args = [
    '--config-path',
    configPath,
    '--admin-address-path',
    adminAddressPath,
    // Hot restart is off, and a dynamic base id keeps any shared-memory names distinct anyway, so
    // test files running in parallel processes never trip over each other.
    '--use-dynamic-base-id',
    '--disable-hot-restart',
    '--concurrency',
    String(opts.concurrency ?? 1),
    '--log-level',
    opts.logLevel ?? 'info',
    ...(opts.extraArgs ?? []),
  ];
  const callerHandlesSignals = opts.callerHandlesSignals === true;
  // Its own process group: a terminal's Ctrl-C reaches the caller only, which stops Envoy in turn.
  const child = spawn(bin, args, { stdio: ['ignore', 'pipe', 'pipe'], detached: callerHandlesSignals });
  const entry: LiveEnvoy = { child, dir, callerHandlesSignals };
  live.add(entry);

  const ring = new LogRing();
  child.stdout?.on('data', (b: Buffer) => ring.push(b));
  child.stderr?.on('data', (b: Buffer) => ring.push(b));

  // 'close' (not 'exit') so the log pipes are drained before anyone reads logs() after exit.
  let exitInfo: ExitInfo | undefined;
  const exited = new Promise<ExitInfo>((resolve) => {
    child.once('error', (error) => {
      exitInfo ??= { code: null, signal: null, error };
      resolve(exitInfo);
    });
    child.once('close', (code, signal) => {
      exitInfo ??= { code, signal };
      resolve(exitInfo);
    });
  });

  let stopping: Promise<void> | undefined;
  const stop = (): Promise<void> => {
    stopping ??= (async () => {
      if (exitInfo === undefined) {
        child.kill('SIGTERM');
        const grace = new AbortController();
        const outcome = await Promise.race([
          exited,
          delay(stopTimeoutMs, 'timeout' as const, { signal: grace.signal }).catch(() => 'cancelled' as const),
        ]);
        grace.abort();
        if (outcome === 'timeout') {
          child.kill('SIGKILL');
          await exited;
        }
      }
      live.delete(entry);
      await rm(dir, { recursive: true, force: true });
    })();
    return stopping;
  };

  const earlyExit = new AbortController();
  void exited.then((info) => {
    earlyExit.abort(new Error(`Envoy "${name}" exited during startup (${describeExit(info)}).\n--- envoy logs ---\n${ring.toString()}`));
  });

  let adminUrl: string;
  let ports: Map<string, number>;
  try {
    const adminAddress = await waitUntil(
      async () => {
        const text = await readFile(adminAddressPath, 'utf8').catch(() => '');
        return text.trim() || undefined;
      },
      {
        description: `Envoy "${name}" to write its admin address (does the config have admin.address?)`,
        timeoutMs: startTimeoutMs,
        signal: earlyExit.signal,
      },
    );
    adminUrl = `http://${adminAddress}`;
    await waitUntil(async () => ((await adminGet(`${adminUrl}/ready`)).status === 200 ? true : undefined), {
      description: `Envoy "${name}" ${adminUrl}/ready to return 200`,
      timeoutMs: startTimeoutMs,
      signal: earlyExit.signal,
    });
    const listeners = await adminGet(`${adminUrl}/listeners?format=json`);
    ports = parseListenerPorts(listeners.body);
  } catch (err) {
    // Read before stop(): stopping makes the process exit, which would also trip earlyExit.
    const exitedEarly = earlyExit.signal.aborted;
    await stop();
    if (exitedEarly) throw earlyExit.signal.reason as Error;
    const message = errorMessage(err);
    throw new Error(`${message}\n--- envoy logs ---\n${ring.toString()}`, { cause: err });
  }

  const stats = async (filter?: string): Promise<Record<string, number>> => {
    const query = filter === undefined ? '' : `&filter=${encodeURIComponent(filter)}`;
    const res = await adminGet(`${adminUrl}/stats?format=json${query}`);
    if (res.status !== 200) throw new Error(`Envoy "${name}" /stats returned ${res.status}: ${res.body}`);
    return parseStats(res.body);
  };

  return {
    name,
    pid: child.pid ?? -1,
    adminUrl,
    listenerPort(listener: string): number {
      const port = ports.get(listener);
      if (port === undefined) {
        throw new Error(`Envoy "${name}" has no listener "${listener}"; it has: ${[...ports.keys()].join(', ') || '(none)'}`);
      }
      return port;
    },
    stop,
    logs: () => ring.toString(),
    stats,
    waitForStat: (stat, predicate, timeoutMs = 5_000) =>
      waitUntil(
        async () => {
          const value = (await stats(`^${stat.replace(/[.*+?^${}()|[\]\\]/g, '\\$&')}$`))[stat];
          return value !== undefined && predicate(value) ? value : undefined;
        },
        { description: `Envoy "${name}" stat ${stat} to match`, timeoutMs },
      ),
  };
}
