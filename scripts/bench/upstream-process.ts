// Child-process entry for the benchmark's model server, so the model server's event loop is not
// the load generator's. Prints one line `address=<host:port>` when listening; stops on SIGTERM.

import { parseArgs } from 'node:util';
import { startBenchUpstream } from './upstream.js';

const { values } = parseArgs({
  options: {
    events: { type: 'string', default: '64' },
    'event-delay-ms': { type: 'string', default: '2' },
  },
});

const upstream = await startBenchUpstream({
  id: 'bench-upstream',
  host: '127.0.0.1',
  events: Number(values.events),
  eventDelayMs: Number(values['event-delay-ms']),
});
process.stdout.write(`address=${upstream.address}\n`);
process.once('SIGTERM', () => {
  void upstream.close().then(() => process.exit(0));
});
