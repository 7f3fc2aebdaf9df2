// The active check we run on a replica after a response stream broke half-way. Envoy reports an
// upstream that died mid-stream and a client that hung up the same way (the ext_proc stream just
// ends), so the break alone cannot say whose fault it was. Asking the replica can: a dead model
// server refuses the connection (or its health endpoint fails); a live one answers.
//
// The decision is pure (`verdictFor`, `healthStatusAlive`); `probeReplica` is the only I/O and
// never rejects: every failure is a result.

import { request as httpRequest } from 'node:http';
import { connect } from 'node:net';
import { errorMessage } from '../util/error-message.js';
import { splitHostPort } from '../util/host-port.js';

export interface ProbeSettings {
  /** HTTP path to GET (e.g. vLLM's `/health`); empty = a TCP connect is the whole check. */
  readonly path: string;
  /** Longer than this and the replica counts as dead: a live server accepts at once. */
  readonly timeoutMs: number;
}

export type ProbeResult = { readonly alive: true } | { readonly alive: false; readonly detail: string };

/**
 * What a mid-stream break turned out to be. `replica_dead`: the check failed, the replica is
 * quarantined. `replica_alive`: the replica answered the check and stays Ready; the break came from
 * elsewhere (the client or Envoy on its behalf ending the stream, or the model server resetting one
 * stream while staying up) — the verdict names what the check saw, not a guess about who left. `not_checked`: the replica was
 * no longer Ready in the cache (already quarantined, gone, not ready), so there was nothing to decide.
 */
export const BREAK_VERDICTS = ['replica_dead', 'replica_alive', 'not_checked'] as const;
export type BreakVerdict = (typeof BREAK_VERDICTS)[number];

/** A health endpoint says "alive" with a 2xx; anything else (503 while loading, 404, 500) does not. */
export function healthStatusAlive(status: number): boolean {
  return status >= 200 && status < 300;
}

export function verdictFor(stillReady: boolean, probe: ProbeResult | undefined): BreakVerdict {
  if (!stillReady || probe === undefined) return 'not_checked';
  return probe.alive ? 'replica_alive' : 'replica_dead';
}

export function probeReplica(address: string, settings: ProbeSettings): Promise<ProbeResult> {
  const { host, port } = splitHostPort(address);
  if (host === '' || !Number.isInteger(port)) return Promise.resolve({ alive: false, detail: `not a host:port address: ${address}` });
  return settings.path === '' ? tcpConnect(host, port, settings.timeoutMs) : httpGet(host, port, settings);
}

function tcpConnect(host: string, port: number, timeoutMs: number): Promise<ProbeResult> {
  return new Promise((resolve) => {
    const socket = connect({ host, port });
    const done = (result: ProbeResult): void => {
      socket.destroy();
      resolve(result);
    };
    socket.setTimeout(timeoutMs, () => done({ alive: false, detail: `connect timed out after ${timeoutMs} ms` }));
    socket.once('connect', () => done({ alive: true }));
    socket.once('error', (err) => done({ alive: false, detail: `connect failed: ${errorMessage(err)}` }));
  });
}

function httpGet(host: string, port: number, settings: ProbeSettings): Promise<ProbeResult> {
  return new Promise((resolve) => {
    let settled = false;
    const done = (result: ProbeResult): void => {
      if (settled) return;
      settled = true;
      resolve(result);
    };
    const req = httpRequest({ host, port, path: settings.path, method: 'GET', agent: false, timeout: settings.timeoutMs }, (res) => {
      res.resume();
      const status = res.statusCode ?? 0;
      done(healthStatusAlive(status) ? { alive: true } : { alive: false, detail: `GET ${settings.path} answered ${status}` });
      req.destroy();
    });
    req.once('timeout', () => {
      done({ alive: false, detail: `GET ${settings.path} timed out after ${settings.timeoutMs} ms` });
      req.destroy();
    });
    req.once('error', (err) => done({ alive: false, detail: `GET ${settings.path} failed: ${errorMessage(err)}` }));
    req.end();
  });
}
