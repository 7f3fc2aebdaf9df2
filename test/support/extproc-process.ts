// Runs the real program (`node dist/src/main.js --config FILE`) as a child process, the way a
// container runs it, for tests of what only a process can show: signals, exit codes, restarts.
// Its JSON log lines are kept for assertions and failure reports; no child outlives the tests.

import { spawn, type ChildProcess } from 'node:child_process';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { loadAssignment } from '../../tools/envoy-config/gateway-config.js';
import { LogRing } from './log-ring.js';
import { parseStrictJson } from './strict-json.js';
import { waitUntil } from './wait-until.js';

/** dist/test/support → dist/src/main.js */
const MAIN_JS = join(dirname(fileURLToPath(import.meta.url)), '..', '..', 'src', 'main.js');

export interface ProcessExit {
  readonly code: number | null;
  readonly signal: NodeJS.Signals | null;
}

export interface LogLine {
  readonly msg?: string;
  readonly level?: number;
  readonly [key: string]: unknown;
}

export interface ExtprocProcess {
  readonly pid: number;
  /** Port of the ops HTTP server (/metrics, /readyz), read from the start log line. */
  readonly httpPort: number;
  /** What Envoy dials (`127.0.0.1:port`, `unix:///path`), read from the start log line. */
  readonly grpcAddress: string;
  /** Resolves when the process has exited, however. */
  readonly exited: Promise<ProcessExit>;
  /** Waits (bounded) for the exit: a process that should exit but keeps running fails the test, not the run. */
  exitWithin(timeoutMs: number): Promise<ProcessExit>;
  /** Parsed JSON log lines so far. */
  logLines(): readonly LogLine[];
  /** Stdout lines that are not strict JSON (a parse error, or a key twice), each with the reason. */
  rejectedLines(): readonly string[];
  /** Raw stdout+stderr (for failure messages). */
  output(): string;
  /** Resolves with the first log line whose `msg` matches. */
  waitForLog(msg: RegExp, timeoutMs?: number): Promise<LogLine>;
  signal(signal: NodeJS.Signals): void;
  /** SIGKILL unless already exited; resolves on exit. Idempotent. */
  kill(): Promise<ProcessExit>;
}

export interface StartExtprocOptions {
  readonly configPath: string;
  /** Node flags before the script (e.g. `--import` of a test preload). */
  readonly nodeArgs?: readonly string[];
  readonly env?: Readonly<Record<string, string>>;
  /** The working directory (default: the test's). */
  readonly cwd?: string;
  readonly startTimeoutMs?: number;
}

const live = new Set<ChildProcess>();
let hookInstalled = false;

function killLeftovers(): void {
  for (const child of live) child.kill('SIGKILL');
  live.clear();
}

function killLeftoversOnExit(): void {
  if (hookInstalled) return;
  hookInstalled = true;
  process.on('exit', killLeftovers);
}

export async function startExtprocProcess(options: StartExtprocOptions): Promise<ExtprocProcess> {
  killLeftoversOnExit();
  const child = spawn(process.execPath, [...(options.nodeArgs ?? []), MAIN_JS, '--config', options.configPath], {
    stdio: ['ignore', 'pipe', 'pipe'],
    env: { ...process.env, ...options.env },
    ...(options.cwd === undefined ? {} : { cwd: options.cwd }),
  });
  live.add(child);
  const ring = new LogRing(1024 * 1024);
  const lines: LogLine[] = [];
  const rejected: string[] = [];
  let partial = '';
  child.stdout.on('data', (chunk: Buffer) => {
    ring.push(chunk);
    partial += chunk.toString('utf8');
    const complete = partial.split('\n');
    partial = complete.pop() ?? '';
    for (const text of complete) {
      try {
        lines.push(parseStrictJson(text) as LogLine);
      } catch (err) {
        // Not JSON, or a key twice (what strict log pipelines refuse): kept for the tests to assert on.
        rejected.push(`${(err as Error).message}: ${text}`);
      }
    }
  });
  child.stderr.on('data', (chunk: Buffer) => ring.push(chunk));
  const exited = new Promise<ProcessExit>((resolve) => {
    child.once('exit', (code, signal) => {
      live.delete(child);
      resolve({ code, signal });
    });
  });
  let exit: ProcessExit | undefined;
  let hasExited = false;
  void exited.then((info) => {
    exit = info;
    hasExited = true;
  });

  const waitForLog = (msg: RegExp, timeoutMs = 10_000): Promise<LogLine> =>
    waitUntil(
      () => {
        const found = lines.find((line) => typeof line.msg === 'string' && msg.test(line.msg));
        if (found === undefined && hasExited) throw new Error(`llm-extproc exited; output:\n${ring.toString()}`);
        return found;
      },
      { description: `llm-extproc log line ${String(msg)}`, timeoutMs },
    );

  let started: LogLine;
  try {
    started = await waitForLog(/^llm-extproc started$/, options.startTimeoutMs ?? 60_000);
  } catch (err) {
    child.kill('SIGKILL');
    await exited;
    throw new Error(`llm-extproc did not start; output:\n${ring.toString()}`, { cause: err });
  }
  if (child.pid === undefined) throw new Error('llm-extproc has no pid');
  return {
    pid: child.pid,
    httpPort: Number(started.http),
    grpcAddress: String(started.grpc),
    exited,
    exitWithin: (timeoutMs) => waitUntil(() => exit, { description: `llm-extproc (pid ${child.pid}) to exit`, timeoutMs }),
    logLines: () => lines,
    rejectedLines: () => rejected,
    output: () => ring.toString(),
    waitForLog,
    signal: (signal) => {
      child.kill(signal);
    },
    kill: () => {
      if (!hasExited) child.kill('SIGKILL');
      return exited;
    },
  };
}

export interface CommandResult extends ProcessExit {
  readonly stdout: string;
  readonly stderr: string;
}

/** Runs `node dist/src/main.js ARGS` to its exit (bounded: a command that hangs fails the test). */
export function runExtprocCommand(
  args: readonly string[],
  options: { env?: Readonly<Record<string, string>>; cwd?: string; timeoutMs?: number } = {},
): Promise<CommandResult> {
  killLeftoversOnExit();
  return new Promise((resolve, reject) => {
    const child = spawn(process.execPath, [MAIN_JS, ...args], {
      stdio: ['ignore', 'pipe', 'pipe'],
      env: { ...process.env, ...options.env },
      ...(options.cwd === undefined ? {} : { cwd: options.cwd }),
    });
    live.add(child);
    const out: Buffer[] = [];
    const err: Buffer[] = [];
    child.stdout.on('data', (chunk: Buffer) => out.push(chunk));
    child.stderr.on('data', (chunk: Buffer) => err.push(chunk));
    const timer = setTimeout(() => {
      child.kill('SIGKILL');
      reject(new Error(`llm-extproc ${args.join(' ')} did not exit within ${options.timeoutMs ?? 15_000} ms`));
    }, options.timeoutMs ?? 15_000);
    child.once('error', reject);
    child.once('close', (code, signal) => {
      clearTimeout(timer);
      live.delete(child);
      resolve({ code, signal, stdout: Buffer.concat(out).toString('utf8'), stderr: Buffer.concat(err).toString('utf8') });
    });
  });
}

/** A rendered Envoy config with every llm-extproc (by gRPC address) in its ext_proc cluster: Envoy round-robins streams over them. */
export function withAllPickers(config: Record<string, unknown>, grpcAddresses: readonly string[]): Record<string, unknown> {
  const resources = config.static_resources as { clusters: Array<Record<string, unknown>> };
  const clusters = resources.clusters.map((c) =>
    c.name === 'llm_extproc' ? { ...c, load_assignment: loadAssignment('llm_extproc', grpcAddresses) } : c,
  );
  return { ...config, static_resources: { ...resources, clusters } };
}
