// Free ports for the processes a test starts, from below the kernel's ephemeral range.
//
// A port found free with a bind to port 0 comes from the ephemeral range and is released before
// the process under test binds it, which can be seconds (etcd, istiod) or tens of seconds (vLLM's
// KV-event publisher, bound once its engine has loaded) later. Meanwhile the kernel may hand that
// port to any other socket (an outgoing connection, another server's bind to port 0), and the
// process then dies with "Address already in use": seen in a clean-clone CI run. Below the range the
// kernel assigns nothing by itself, so a port found free there stays free unless someone names it.

import { readFile } from 'node:fs/promises';
import { createServer } from 'node:net';

/** Ports handed out in this process: none is handed out twice. */
const handedOut = new Set<number>();

/** Distinct ports free on every interface now, below the ephemeral range (released before use). */
export async function freePorts(count: number): Promise<number[]> {
  const range = await readFile('/proc/sys/net/ipv4/ip_local_port_range', 'utf8').catch(() => '32768 60999');
  const ephemeralLow = Number(range.trim().split(/\s+/)[0]) || 32768;
  const low = Math.max(10_000, ephemeralLow - 12_000);
  const ports: number[] = [];
  for (let tries = 0; ports.length < count; tries++) {
    if (tries > 500) throw new Error(`no free port in ${low}-${ephemeralLow - 1}`);
    const port = low + Math.floor(Math.random() * (ephemeralLow - low));
    if (handedOut.has(port) || !(await bindable(port))) continue;
    handedOut.add(port);
    ports.push(port);
  }
  return ports;
}

/** Whether nothing listens on `port` on any interface now. */
function bindable(port: number): Promise<boolean> {
  return new Promise((resolve) => {
    const probe = createServer();
    probe.once('error', () => resolve(false));
    probe.listen(port, () => probe.close(() => resolve(true)));
  });
}

/** One port, as freePorts gives them. */
export async function freePort(): Promise<number> {
  const [port] = await freePorts(1);
  return port;
}
