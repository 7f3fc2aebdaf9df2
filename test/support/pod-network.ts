// Pod IPs for the live gateway beds (Istio, Envoy Gateway). Every pod's process runs on this machine, but its address must be
// one the real API server accepts in an EndpointSlice, and EndpointSlice validation refuses the
// loopback range (127.0.0.0/8). So each pod gets an address from 198.18.0.0/15 (RFC 2544's
// benchmarking range, never routed on real networks) added as a /32 to the loopback interface:
// still local traffic only, and distinct per pod, so every model server listens on the pool's one
// targetPort. Adding addresses needs CAP_NET_ADMIN (CI runs as root). Each test process claims a
// block of its own: `ip addr add` of an address that exists fails, so two processes never share
// one. The addresses are removed when the process exits; each carries the label `lo:<pid>`, so a
// later claim also removes those of a process that was killed before it could clean up.

import { spawnSync } from 'node:child_process';

// 198.18.0.0/15 as /24s, less the last one (198.19.255.0/24): the container e2e test's podman
// network (test/support/container.ts), whose bridge holds addresses of that block.
const BLOCKS = 511;
const claimed = new Set<string>();
let hookInstalled = false;

function ip(args: readonly string[]): { ok: boolean; message: string } {
  const res = spawnSync('ip', args, { encoding: 'utf8' });
  if (res.error !== undefined) return { ok: false, message: res.error.message };
  return { ok: res.status === 0, message: `${res.stderr}${res.stdout}`.trim() };
}

function releaseAll(): void {
  for (const address of claimed) ip(['addr', 'del', `${address}/32`, 'dev', 'lo']);
  claimed.clear();
}

/** Whether a process exists (EPERM: it does, owned by someone else). */
export function alive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch (err) {
    return (err as NodeJS.ErrnoException).code === 'EPERM';
  }
}

/** Removes the pod addresses of processes that are gone (labels `lo:<pid>`). */
function reapOrphans(): void {
  const listed = spawnSync('ip', ['-4', '-o', 'addr', 'show', 'dev', 'lo'], { encoding: 'utf8' });
  for (const match of `${listed.stdout ?? ''}`.matchAll(/inet (198\.1[89]\.\d+\.\d+)\/32 .*? lo:(\d+)/g)) {
    if (!alive(Number(match[2]))) ip(['addr', 'del', `${match[1]}/32`, 'dev', 'lo']);
  }
}

/**
 * Claims `count` addresses `198.(18|19).<block>.<1..count>` for this process (trying blocks from
 * one derived from our pid), adds them to `lo`, and returns them. Throws with the reason when the
 * machine does not allow it.
 */
export function claimPodAddresses(count: number): string[] {
  if (!hookInstalled) {
    hookInstalled = true;
    process.on('exit', releaseAll);
    reapOrphans();
  }
  const label = ['label', `lo:${process.pid}`];
  for (let attempt = 0; attempt < BLOCKS; attempt++) {
    const block = (process.pid + attempt) % BLOCKS;
    const prefix = `198.${18 + (block >> 8)}.${block & 0xff}`;
    const first = ip(['addr', 'add', `${prefix}.1/32`, 'dev', 'lo', ...label]);
    if (!first.ok) {
      if (/File exists/i.test(first.message)) continue; // another process holds this block
      throw new Error(
        `cannot add pod addresses to the loopback interface (\`ip addr add ${prefix}.1/32 dev lo\`: ${first.message}); the live gateway tests need CAP_NET_ADMIN`,
      );
    }
    const addresses = [`${prefix}.1`];
    claimed.add(addresses[0]);
    for (let i = 2; i <= count; i++) {
      const address = `${prefix}.${i}`;
      const res = ip(['addr', 'add', `${address}/32`, 'dev', 'lo', ...label]);
      if (!res.ok) throw new Error(`ip addr add ${address}/32 dev lo: ${res.message}`);
      claimed.add(address);
      addresses.push(address);
    }
    return addresses;
  }
  throw new Error('no free 198.18.0.0/15 block for pod addresses');
}

/** Removes addresses claimed earlier (a bed's teardown). */
export function releasePodAddresses(addresses: readonly string[]): void {
  for (const address of addresses) {
    if (!claimed.delete(address)) continue;
    ip(['addr', 'del', `${address}/32`, 'dev', 'lo']);
  }
}

/**
 * Why this machine cannot give pods their own addresses, or undefined when it can. As root (CI)
 * the answer is always undefined: there a failure to add addresses fails the tests instead of
 * skipping them.
 */
export function podNetworkUnavailable(): string | undefined {
  if (process.getuid?.() === 0) return undefined;
  try {
    releasePodAddresses(claimPodAddresses(1));
    return undefined;
  } catch (err) {
    return err instanceof Error ? err.message : String(err);
  }
}
