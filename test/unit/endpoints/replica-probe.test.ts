// The active check after a mid-stream break: the pure verdict, and the probe against real
// sockets (a listening server, a closed port, a health endpoint that answers 200 / 503 / never).

import assert from 'node:assert/strict';
import { createServer, type Server } from 'node:http';
import { createServer as createTcpServer } from 'node:net';
import type { AddressInfo } from 'node:net';
import { describe, it } from 'node:test';
import { healthStatusAlive, probeReplica, verdictFor } from '../../../src/endpoints/replica-probe.js';

function listen(server: Server | ReturnType<typeof createTcpServer>): Promise<string> {
  return new Promise((resolve) => server.listen(0, '127.0.0.1', () => resolve(`127.0.0.1:${(server.address() as AddressInfo).port}`)));
}

function close(server: Server | ReturnType<typeof createTcpServer>): Promise<void> {
  if ('closeAllConnections' in server) server.closeAllConnections();
  return new Promise((resolve) => server.close(() => resolve()));
}

/** An address nobody listens on: a port we held and released (our own process only). */
async function closedAddress(): Promise<string> {
  const server = createTcpServer();
  const address = await listen(server);
  await close(server);
  return address;
}

describe('replica check: verdict', () => {
  it('a replica that is no longer Ready is not checked', () => {
    assert.equal(verdictFor(false, { alive: false, detail: 'x' }), 'not_checked');
    assert.equal(verdictFor(false, undefined), 'not_checked');
  });

  it('a failed check means the replica died; a passed one means the client left', () => {
    assert.equal(verdictFor(true, { alive: false, detail: 'connect failed' }), 'replica_dead');
    assert.equal(verdictFor(true, { alive: true }), 'replica_alive');
  });

  it('only a 2xx health answer counts as alive', () => {
    assert.deepEqual([200, 204, 299, 300, 404, 500, 503].map(healthStatusAlive), [true, true, true, false, false, false, false]);
  });
});

describe('replica check: probe (real sockets)', () => {
  it('TCP: a listening replica is alive, a closed port is not', async () => {
    const server = createTcpServer((socket) => socket.destroy());
    const address = await listen(server);
    try {
      assert.deepEqual(await probeReplica(address, { path: '', timeoutMs: 2_000 }), { alive: true });
    } finally {
      await close(server);
    }
    const dead = await probeReplica(await closedAddress(), { path: '', timeoutMs: 2_000 });
    assert.equal(dead.alive, false);
    assert.match(dead.alive ? '' : dead.detail, /connect failed: .*ECONNREFUSED/);
  });

  it('HTTP: 200 is alive, 503 is not, and a health endpoint that never answers times out', async () => {
    let status = 200;
    let hang = false;
    const paths: string[] = [];
    const server = createServer((req, res) => {
      paths.push(req.url ?? '');
      if (hang) return;
      res.writeHead(status).end();
    });
    const address = await listen(server);
    try {
      const settings = { path: '/health', timeoutMs: 200 };
      assert.deepEqual(await probeReplica(address, settings), { alive: true });
      status = 503;
      assert.deepEqual(await probeReplica(address, settings), { alive: false, detail: 'GET /health answered 503' });
      hang = true;
      assert.deepEqual(await probeReplica(address, settings), { alive: false, detail: 'GET /health timed out after 200 ms' });
      assert.deepEqual(paths, ['/health', '/health', '/health']);
    } finally {
      await close(server);
    }
    const dead = await probeReplica(await closedAddress(), { path: '/health', timeoutMs: 2_000 });
    assert.match(dead.alive ? '' : dead.detail, /^GET \/health failed: .*ECONNREFUSED/);
  });

  it('an address without a port is dead without any I/O', async () => {
    assert.deepEqual(await probeReplica('10.0.0.1', { path: '', timeoutMs: 10 }), {
      alive: false,
      detail: 'not a host:port address: 10.0.0.1',
    });
  });
});
