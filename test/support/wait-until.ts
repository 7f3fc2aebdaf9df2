// Poll-until-condition with a deadline: the one sanctioned way for tests to wait on state they
// cannot subscribe to (a file appearing, an admin endpoint turning ready). Never a fixed sleep.

import { setTimeout as delay } from 'node:timers/promises';

export interface WaitUntilOptions {
  /** What is being waited for; appears in the timeout error. */
  readonly description: string;
  readonly timeoutMs?: number;
  /** Pause between probes. */
  readonly intervalMs?: number;
  /** Stops waiting early (e.g. the process being waited on exited); rejects with the signal's reason. */
  readonly signal?: AbortSignal;
}

/**
 * Calls `probe` until it returns something other than `undefined`, and resolves with that value.
 * A probe that throws counts as "not yet"; the last error is attached as the timeout's cause.
 */
export async function waitUntil<T>(probe: () => T | undefined | Promise<T | undefined>, options: WaitUntilOptions): Promise<T> {
  const timeoutMs = options.timeoutMs ?? 10_000;
  const intervalMs = options.intervalMs ?? 20;
  const deadline = Date.now() + timeoutMs;
  let lastError: unknown;
  for (;;) {
    options.signal?.throwIfAborted();
    try {
      const value = await probe();
      if (value !== undefined) return value;
    } catch (err) {
      lastError = err;
    }
    options.signal?.throwIfAborted();
    if (Date.now() >= deadline) {
      throw new Error(`timed out after ${timeoutMs} ms waiting for ${options.description}`, { cause: lastError });
    }
    try {
      await delay(Math.min(intervalMs, Math.max(0, deadline - Date.now())), undefined, { signal: options.signal });
    } catch {
      // Aborted mid-pause: surface the abort reason, not the timer's AbortError.
      options.signal?.throwIfAborted();
    }
  }
}
