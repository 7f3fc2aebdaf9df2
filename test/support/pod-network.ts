// Pod addresses for test beds whose controllers read EndpointSlices. The API server refuses
// loopback endpoint addresses (127.0.0.0/8: "may not be in the loopback range"), so the 127.0.0.x
// addresses other tests give their pods cannot appear in an EndpointSlice. Instead, addresses from
// 198.18.0.0/15 — reserved for network benchmarking (RFC 2544), never routed on the Internet — are
// added to the loopback interface as /32s: local to this machine like 127.0.0.x, yet valid pod IPs
// to Kubernetes. That needs CAP_NET_ADMIN (root, as in CI). Callers hold the machine-wide lock of
// their bed (machine-lock.ts), so two runs never share an address; they are removed at the end.

import { spawnSync } from 'node:child_process';

const PREFIX = '198.18.0.';

export function canManagePodAddresses(): { ok: true } | { ok: false; reason: string } {
  if (process.getuid?.() !== 0)
    return { ok: false, reason: 'needs root: pod addresses are added to the loopback interface (CAP_NET_ADMIN)' };
  const probe = spawnSync('ip', ['-4', 'addr', 'show', 'dev', 'lo'], { encoding: 'utf8' });
  if (probe.error !== undefined || probe.status !== 0) return { ok: false, reason: 'needs the `ip` command (iproute2)' };
  return { ok: true };
}

function ip(args: readonly string[]): { status: number | null; stderr: string } {
  const res = spawnSync('ip', args, { encoding: 'utf8' });
  if (res.error !== undefined) throw new Error(`ip ${args.join(' ')}: ${res.error.message}`);
  return { status: res.status, stderr: res.stderr };
}

/** Adds 198.18.0.1 … 198.18.0.<count> to `lo` (an address already there is fine) and returns them. */
export function addPodAddresses(count: number): string[] {
  const addresses = Array.from({ length: count }, (_, i) => `${PREFIX}${i + 1}`);
  for (const address of addresses) {
    const res = ip(['addr', 'add', `${address}/32`, 'dev', 'lo']);
    if (res.status !== 0 && !/File exists/.test(res.stderr)) throw new Error(`ip addr add ${address}/32 dev lo: ${res.stderr.trim()}`);
  }
  return addresses;
}

export function removePodAddresses(addresses: readonly string[]): void {
  for (const address of addresses) ip(['addr', 'del', `${address}/32`, 'dev', 'lo']);
}
