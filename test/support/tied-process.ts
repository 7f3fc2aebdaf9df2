// Child processes that cannot outlive the test process. A test file can end any way: assertions,
// an uncaught error, a timeout kill by the test runner, even SIGKILL. The first three run our exit
// hook; for the last, every child runs under a tiny shell watchdog that polls our pid and stops
// the child when we are gone. Used for the control plane (etcd, kube-apiserver), which would
// otherwise hold ports, memory and CPU for the rest of the suite.

import { spawn } from 'node:child_process';
import type { ChildProcess } from 'node:child_process';
import { createWriteStream } from 'node:fs';
import type { WriteStream } from 'node:fs';

/**
 * Runs "$@" in the background, forwards TERM/INT to it, and kills it once the parent (whose pid is
 * $1) has exited. `wait` returns early when a trapped signal arrives, so stopping is prompt.
 */
const WATCHDOG = [
  'parent=$1; shift',
  '"$@" & child=$!',
  'trap \'kill -TERM "$child" 2>/dev/null\' TERM INT',
  'while kill -0 "$parent" 2>/dev/null && kill -0 "$child" 2>/dev/null; do sleep 1 & wait $!; done',
  'kill -TERM "$child" 2>/dev/null',
  'wait "$child"',
].join('\n');

const live = new Set<TiedProcess>();
let exitHookInstalled = false;

function installExitHook(): void {
  if (exitHookInstalled) return;
  exitHookInstalled = true;
  // Synchronous on purpose: 'exit' handlers cannot await. SIGKILL to the watchdog's group ends it
  // and the child together (each runs in its own process group).
  process.on('exit', () => {
    for (const p of live) p.killGroup('SIGKILL');
  });
}

export interface TiedProcessOptions {
  /** Appends the child's stdout and stderr here (for diagnostics when a test fails). */
  readonly logFile: string;
  readonly env?: NodeJS.ProcessEnv;
  /** Working directory (default: ours), for programs that write relative paths. */
  readonly cwd?: string;
}

export class TiedProcess {
  private readonly child: ChildProcess;
  private readonly log: WriteStream;
  private readonly exited: Promise<number | null>;
  private exitCode: number | null | undefined;

  constructor(
    readonly name: string,
    bin: string,
    args: readonly string[],
    options: TiedProcessOptions,
  ) {
    installExitHook();
    this.log = createWriteStream(options.logFile, { flags: 'a' });
    this.child = spawn('bash', ['-c', WATCHDOG, 'watchdog', String(process.pid), bin, ...args], {
      stdio: ['ignore', 'pipe', 'pipe'],
      detached: true,
      env: options.env ?? process.env,
      ...(options.cwd === undefined ? {} : { cwd: options.cwd }),
    });
    this.child.stdout?.pipe(this.log, { end: false });
    this.child.stderr?.pipe(this.log, { end: false });
    this.exited = new Promise((resolve) => {
      this.child.once('exit', (code, signal) => {
        this.exitCode = code ?? (signal === null ? null : -1);
        live.delete(this);
        resolve(this.exitCode);
      });
      this.child.once('error', () => {
        live.delete(this);
        resolve(-1);
      });
    });
    live.add(this);
  }

  get running(): boolean {
    return this.exitCode === undefined;
  }

  /** Resolves when the process has exited (with its code). */
  whenExited(): Promise<number | null> {
    return this.exited;
  }

  /** TERM, then KILL after `graceMs`; resolves once the process and its watchdog are gone. */
  async stop(graceMs = 10_000): Promise<void> {
    if (!this.running) return;
    this.killGroup('SIGTERM');
    const timer = setTimeout(() => this.killGroup('SIGKILL'), graceMs);
    await this.exited;
    clearTimeout(timer);
    await new Promise<void>((resolve) => this.log.end(resolve));
  }

  killGroup(signal: NodeJS.Signals): void {
    const pid = this.child.pid;
    if (pid === undefined || !this.running) return;
    try {
      process.kill(-pid, signal);
    } catch {
      // Already gone.
    }
  }
}
