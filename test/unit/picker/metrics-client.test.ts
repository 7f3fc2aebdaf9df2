// The scraper's HTTP client against real local servers: it reuses one connection per model server
// between scrapes, lets it go once idle (so what it holds follows the live fleet), and turns every
// way a metrics page can fail into a short, typed reason.
import assert from 'node:assert/strict';
import { once } from 'node:events';
import { createServer } from 'node:http';
import type { Server, ServerResponse } from 'node:http';
import type { AddressInfo, Socket } from 'node:net';
import { describe, it } from 'node:test';
import { MetricsClient, ScrapeHttpError } from '../../../src/picker/metrics-client.js';

async function serve(handler: (res: ServerResponse) => void): Promise<{ server: Server; address: string; sockets: Socket[] }> {
  const sockets: Socket[] = [];
  const server = createServer((_req, res) => handler(res));
  server.on('connection', (socket: Socket) => sockets.push(socket));
  server.listen(0, '127.0.0.1');
  await once(server, 'listening');
  return { server, address: `127.0.0.1:${(server.address() as AddressInfo).port}`, sockets };
}

const PAGE = 'vllm:num_requests_waiting{model_name="m"} 3\n';

describe('MetricsClient', () => {
  it('reuses one connection across scrapes of a server and closes it once idle', async () => {
    const { server, address, sockets } = await serve((res) => res.end(PAGE));
    const client = new MetricsClient({ idleMs: 200, maxBytes: 1024 });
    try {
      const signal = new AbortController().signal;
      assert.equal(await client.get(address, '/metrics', 5000, signal), PAGE);
      assert.equal(await client.get(address, '/metrics', 5000, signal), PAGE);
      assert.equal(sockets.length, 1, 'the second scrape used the first connection');
      await once(sockets[0], 'close'); // the idle timeout let it go; nothing is kept for this server
    } finally {
      client.close();
      server.close();
    }
  });

  it('names each failure: refused, HTTP status, timeout, oversized page', async () => {
    const { server, address } = await serve((res) => {
      const path = res.req.url ?? '';
      if (path === '/status') res.writeHead(503).end('busy');
      else if (path === '/big') res.end('x'.repeat(4096));
      // '/hang': never answers
    });
    const refused = await serve(() => undefined);
    const refusedAddress = refused.address;
    refused.server.close();
    await once(refused.server, 'close');
    const client = new MetricsClient({ idleMs: 1000, maxBytes: 1024 });
    const signal = new AbortController().signal;
    const failure = async (target: string, path: string): Promise<ScrapeHttpError> => {
      const err: unknown = await client.get(target, path, 300, signal).then(
        () => assert.fail('expected a failure'),
        (e: unknown) => e,
      );
      assert.ok(err instanceof ScrapeHttpError);
      return err;
    };
    try {
      assert.deepEqual(pick(await failure(refusedAddress, '/metrics')), { kind: 'connect_error', message: 'connection failed' });
      assert.deepEqual(pick(await failure(address, '/status')), { kind: 'http_error', message: 'HTTP 503' });
      assert.deepEqual(pick(await failure(address, '/hang')), { kind: 'timeout', message: 'no answer within 300 ms' });
      assert.deepEqual(pick(await failure(address, '/big')), { kind: 'too_large', message: 'metrics page larger than 1024 bytes' });
    } finally {
      client.close();
      server.closeAllConnections();
      server.close();
    }
  });
});

function pick(err: ScrapeHttpError): { kind: string; message: string } {
  return { kind: err.kind, message: err.message };
}
