// Runs the real program (`node dist/src/main.js --config FILE`) as a child process, the way a
// container runs it, for tests of what only a process can show: signals, exit codes, restarts.
// Its JSON log lines are kept for assertions and failure reports; no child outlives the tests.

import { spawn, type ChildProcess } from 'node:child_process';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { LogRing } from './log-ring.js';
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
  /** Resolves when the process has exited, however. */
  readonly exited: Promise<ProcessExit>;
  /** Waits (bounded) for the exit: a process that should exit but keeps running fails the test, not the run. */
  exitWithin(timeoutMs: number): Promise<ProcessExit>;
  /** Parsed JSON log lines so far. */
  logLines(): readonly LogLine[];
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
  readonly startTimeoutMs?: number;
}

const live = new Set<ChildProcess>();
let hookInstalled = false;

function killLeftovers(): void {
  for (const child of live) child.kill('SIGKILL');
  live.clear();
}

export async function startExtprocProcess(options: StartExtprocOptions): Promise<ExtprocProcess> {
  if (!hookInstalled) {
    hookInstalled = true;
    process.on('exit', killLeftovers);
  }
  const child = spawn(process.execPath, [...(options.nodeArgs ?? []), MAIN_JS, '--config', options.configPath], {
    stdio: ['ignore', 'pipe', 'pipe'],
    env: { ...process.env, ...options.env },
  });
  live.add(child);
  const ring = new LogRing(1024 * 1024);
  const lines: LogLine[] = [];
  let partial = '';
  child.stdout.on('data', (chunk: Buffer) => {
    ring.push(chunk);
    partial += chunk.toString('utf8');
    const complete = partial.split('\n');
    partial = complete.pop() ?? '';
    for (const text of complete) {
      try {
        lines.push(JSON.parse(text) as LogLine);
      } catch {
        // Not a log line (should not happen; kept in the raw output).
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
    started = await waitForLog(/^llm-extproc started$/, options.startTimeoutMs ?? 15_000);
  } catch (err) {
    child.kill('SIGKILL');
    await exited;
    throw new Error(`llm-extproc did not start; output:\n${ring.toString()}`, { cause: err });
  }
  if (child.pid === undefined) throw new Error('llm-extproc has no pid');
  return {
    pid: child.pid,
    httpPort: Number(started.http),
    exited,
    exitWithin: (timeoutMs) => waitUntil(() => exit, { description: `llm-extproc (pid ${child.pid}) to exit`, timeoutMs }),
    logLines: () => lines,
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
