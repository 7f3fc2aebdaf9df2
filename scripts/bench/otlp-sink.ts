// Child-process entry for `npm run bench -- --tracing`: an OTLP/HTTP endpoint that accepts every
// trace export (POST /v1/traces → 200, an empty ExportTraceServiceResponse) and discards it, in its
// own process so that receiving spans costs the load generator nothing. It stands in for a
// collector that keeps up; it is not one. Prints `address=<host:port>` when listening, and on
// SIGTERM the requests and bytes it received (`received=<requests> <bytes>`).

import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';

let requests = 0;
let bytes = 0;
const server = createServer((req, res) => {
  req.on('data', (chunk: Buffer) => (bytes += chunk.length));
  req.on('end', () => {
    requests++;
    res.writeHead(200, { 'content-type': 'application/x-protobuf', 'content-length': 0 }).end();
  });
});
server.keepAliveTimeout = 30_000;
server.listen(0, '127.0.0.1', () => {
  process.stdout.write(`address=127.0.0.1:${(server.address() as AddressInfo).port}\n`);
});
process.once('SIGTERM', () => {
  process.stdout.write(`received=${requests} ${bytes}\n`);
  server.close(() => process.exit(0));
  server.closeAllConnections();
});
