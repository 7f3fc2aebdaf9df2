// Child processes of the benchmark (llm-extproc servers, the model server), free ports, and CPU
// accounting from /proc. Every child is tracked: a sync exit hook SIGKILLs whatever is still alive
// however the benchmark ends, so no run leaves servers behind.

import { spawn } from 'node:child_process';
import type { ChildProcess } from 'node:child_process';
import { spawnSync } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { LogRing } from '../../test/support/log-ring.js';

export interface ManagedChild {
  readonly name: string;
  readonly pid: number;
  readonly child: ChildProcess;
  /** Resolves with the first stdout line matching `pattern` (its first capture group). */
  waitForLine(pattern: RegExp, timeoutMs?: number): Promise<string>;
  logs(): string;
  /** SIGTERM, then SIGKILL after `graceMs`. Idempotent. */
  stop(graceMs?: number): Promise<void>;
}

const live = new Set<ChildProcess>();
let hookInstalled = false;

function installExitHook(): void {
  if (hookInstalled) return;
  hookInstalled = true;
  process.on('exit', () => {
    for (const child of live) {
      try {
        child.kill('SIGKILL');
      } catch {
        // already gone
      }
    }
  });
}

export function spawnNode(
  name: string,
  script: string,
  options: { args?: readonly string[]; env?: NodeJS.ProcessEnv; nodeArgs?: readonly string[] } = {},
): ManagedChild {
  installExitHook();
  const child = spawn(process.execPath, [...(options.nodeArgs ?? []), script, ...(options.args ?? [])], {
    env: { ...process.env, ...options.env },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  live.add(child);
  const ring = new LogRing(256 * 1024);
  const lineWaiters: { pattern: RegExp; resolve: (v: string) => void }[] = [];
  let pending = '';
  child.stdout?.on('data', (b: Buffer) => {
    ring.push(b);
    pending += b.toString('utf8');
    const lines = pending.split('\n');
    pending = lines.pop() ?? '';
    for (const line of lines) {
      for (const w of [...lineWaiters]) {
        const m = w.pattern.exec(line);
        if (m !== null) {
          lineWaiters.splice(lineWaiters.indexOf(w), 1);
          w.resolve(m[1] ?? line);
        }
      }
    }
  });
  child.stderr?.on('data', (b: Buffer) => ring.push(b));
  const exited = new Promise<void>((resolve) => {
    child.once('error', () => resolve());
    child.once('close', () => resolve());
  });
  void exited.then(() => live.delete(child));

  let stopping: Promise<void> | undefined;
  return {
    name,
    pid: child.pid ?? -1,
    child,
    logs: () => ring.toString(),
    waitForLine: (pattern, timeoutMs = 15_000) =>
      new Promise<string>((resolve, reject) => {
        const timer = setTimeout(
          () => reject(new Error(`${name}: no line matching ${String(pattern)} within ${timeoutMs} ms\n${ring.toString()}`)),
          timeoutMs,
        );
        void exited.then(() => {
          clearTimeout(timer);
          reject(
            new Error(
              `${name} exited (code ${String(child.exitCode)}, signal ${String(child.signalCode)}) before printing ${String(pattern)}\n${ring.toString()}`,
            ),
          );
        });
        lineWaiters.push({
          pattern,
          resolve: (v) => {
            clearTimeout(timer);
            resolve(v);
          },
        });
      }),
    stop: (graceMs = 10_000) =>
      (stopping ??= (async () => {
        if (child.exitCode !== null || child.signalCode !== null) return;
        child.kill('SIGTERM');
        let timer: NodeJS.Timeout | undefined;
        const timedOut = await Promise.race([
          exited.then(() => false),
          new Promise<boolean>((resolve) => (timer = setTimeout(() => resolve(true), graceMs))),
        ]);
        clearTimeout(timer);
        if (timedOut) {
          child.kill('SIGKILL');
          await exited;
        }
      })()),
  };
}

let clockTicks: number | undefined;

/** Kernel clock ticks per second (the unit of /proc/<pid>/stat CPU times). */
function ticksPerSecond(): number {
  if (clockTicks === undefined) {
    const out = spawnSync('getconf', ['CLK_TCK'], { encoding: 'utf8' });
    const n = Number(out.stdout?.trim());
    clockTicks = Number.isFinite(n) && n > 0 ? n : 100;
  }
  return clockTicks;
}

/** User+system CPU seconds used so far by a process (all its threads). */
export function cpuSeconds(pid: number): number {
  const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
  // Fields after the parenthesised command name (which may contain spaces); utime and stime are
  // fields 14 and 15 of the whole line, i.e. indexes 11 and 12 after ")".
  const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
  return (Number(fields[11]) + Number(fields[12])) / ticksPerSecond();
}

/** `pid` and all its descendants (cluster workers are children of the primary). */
function processTree(pid: number): number[] {
  const out = [pid];
  for (let i = 0; i < out.length; i++) {
    let children = '';
    try {
      children = readFileSync(`/proc/${out[i]}/task/${out[i]}/children`, 'utf8');
    } catch {
      continue; // gone, or a kernel without the children file
    }
    for (const child of children.trim().split(/\s+/)) if (child !== '') out.push(Number(child));
  }
  return out;
}

/** CPU seconds of `pid` and its live descendants. */
export function treeCpuSeconds(pid: number): number {
  let total = 0;
  for (const p of processTree(pid)) {
    try {
      total += cpuSeconds(p);
    } catch {
      // exited between listing and reading
    }
  }
  return total;
}

/** A /proc/<pid>/status memory field (kB) of `pid` plus its live descendants, in bytes. */
function treeStatusBytes(pid: number, field: 'VmHWM' | 'VmRSS'): number {
  const pattern = new RegExp(`^${field}:\\s+(\\d+)\\s+kB`, 'm');
  let total = 0;
  for (const p of processTree(pid)) {
    try {
      const m = pattern.exec(readFileSync(`/proc/${p}/status`, 'utf8'));
      if (m !== null) total += Number(m[1]) * 1024;
    } catch {
      // exited
    }
  }
  return total;
}

/** Peak resident set (VmHWM) of `pid` plus its live descendants, in bytes. */
export function treePeakRssBytes(pid: number): number {
  return treeStatusBytes(pid, 'VmHWM');
}

/** Resident set now (VmRSS) of `pid` plus its live descendants, in bytes. */
export function treeRssBytes(pid: number): number {
  return treeStatusBytes(pid, 'VmRSS');
}
