// The gRPC listener's address, whichever transport serves it: parsing our config's forms and
// clearing a Unix socket file a dead process left behind.
import { connect } from 'node:net';
import { lstatSync, unlinkSync } from 'node:fs';
import { resolve as resolvePath } from 'node:path';
import type { Logger } from 'pino';
import { parseListenAddress } from '../util/host-port.js';

export type ListenTarget = { kind: 'tcp'; host: string; port: number } | { kind: 'unix'; path: string };

/** "host:port" (IPv6 in brackets; port 0 = any free one), "unix:///abs/path.sock" or "unix:rel/path.sock". */
export function parseAddress(address: string): ListenTarget {
  // The config check refused anything else before we got here (config.ts, the same parser).
  const parsed = parseListenAddress(address);
  if (parsed === undefined) throw new Error(`gRPC listen address "${address}" is neither host:port nor unix:///path`);
  // A relative socket path (only from code that skipped the config) is relative to the cwd.
  if (parsed.kind === 'unix') return { kind: 'unix', path: resolvePath(parsed.path) };
  // Kept in URI form (IPv6 in brackets): it becomes the bound address we report.
  return { kind: 'tcp', host: parsed.host.includes(':') ? `[${parsed.host}]` : parsed.host, port: parsed.port };
}

/** What a client dials once bound: "host:PORT" with the real port, or "unix:///abs/path.sock". */
export function dialAddress(target: ListenTarget, boundPort: number): string {
  return target.kind === 'unix' ? `unix://${target.path}` : `${target.host}:${boundPort}`;
}

/**
 * A sidecar that crashed leaves its socket file behind in the shared volume, and binding over it
 * fails. Remove it only if nobody answers on it; a live socket means another instance owns it.
 */
export async function removeStaleSocket(path: string, logger: Logger): Promise<void> {
  let isSocket: boolean;
  try {
    isSocket = lstatSync(path).isSocket();
  } catch {
    return; // nothing there
  }
  if (!isSocket) return; // not ours to delete; bind will report the conflict
  const live = await new Promise<boolean>((resolve) => {
    const probe = connect(path);
    probe.once('connect', () => {
      probe.destroy();
      resolve(true);
    });
    probe.once('error', () => resolve(false));
  });
  if (live) throw new Error(`unix socket ${path} is in use by another process`);
  logger.warn({ path }, 'removing stale unix socket');
  unlinkSync(path);
}
