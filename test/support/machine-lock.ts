// A machine-wide lock for test beds that must own fixed ports. Envoy Gateway v1.9 listens on
// hard-coded ports (xDS :18000, health probe :8081, the Wasm server :18002) and reads its serving
// pair only from /certs, so two live controllers on one machine — two test files, or two people's
// `npm test` — would collide. The lock is an abstract Unix socket: the kernel frees it the moment
// the holder exits, however it exits, so a crashed run never leaves a stale lock behind.

import { createServer, type Server } from 'node:net';
import { waitUntil } from './wait-until.js';

export interface MachineLock {
  release(): Promise<void>;
}

function tryListen(name: string): Promise<Server | undefined> {
  return new Promise((resolve, reject) => {
    const server = createServer();
    server.once('error', (err: NodeJS.ErrnoException) => (err.code === 'EADDRINUSE' ? resolve(undefined) : reject(err)));
    // A leading NUL byte puts the socket in Linux's abstract namespace: no file, no cleanup.
    server.listen(`\0llm-extproc-lock-${name}`, () => resolve(server));
  });
}

/** Waits (up to `timeoutMs`) until no other process on this machine holds `name`, then holds it. */
export async function acquireMachineLock(name: string, timeoutMs: number): Promise<MachineLock> {
  const server = await waitUntil(() => tryListen(name), {
    description: `the machine-wide "${name}" lock (another test run on this machine holds it)`,
    timeoutMs,
    intervalMs: 500,
  });
  server.unref();
  return { release: () => new Promise<void>((resolve) => server.close(() => resolve())) };
}
