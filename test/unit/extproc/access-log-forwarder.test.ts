// The forwarder against our real gRPC server (both transports): an entry sent to the replica that
// picked its stream arrives there unchanged and marked forwarded (so that replica never sends it on);
// a peer that is not listening is a failed stream, reported, and the next entry tries again.

import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { pino } from 'pino';
import { loadSync } from '@grpc/proto-loader';
import type { MethodDefinition } from '@grpc/proto-loader';
import { AccessLogForwarder } from '../../../src/extproc/access-log-forwarder.js';
import type { AccessLogEntry } from '../../../src/extproc/access-log-service.js';
import { decodeAccessLogs } from '../../../src/extproc/access-log-service.js';
import { startExtProcServer } from '../../../src/extproc/server.js';
import { openTlsIdentity } from '../../../src/grpc/tls-identity.js';
import { GRPC_TRANSPORTS } from '../../../src/config/schema.js';
import { RESPONSE_FLAGS } from '../../../src/errors/envoy-response-flags.js';
import { PROTO_LOADER_OPTIONS } from '../../support/proto-definitions.js';
import { waitUntil } from '../../support/wait-until.js';

const definitions = loadSync(['envoy/service/accesslog/v3/als.proto'], { ...PROTO_LOADER_OPTIONS });
const streamAccessLogs = (definitions['envoy.service.accesslog.v3.AccessLogService'] as Record<string, MethodDefinition<object, object>>)
  .StreamAccessLogs;

/** An entry as Envoy sends it, decoded as a replica receives it (its bytes are what gets forwarded). */
function envoyEntry(requestId: string): AccessLogEntry {
  const message = streamAccessLogs.requestSerialize({
    identifier: { log_name: 'llm_extproc_stream_ends' },
    http_logs: {
      log_entry: [
        {
          common_properties: {
            response_flags: { downstream_connection_termination: true },
            metadata: { filter_metadata: { 'envoy.lb': { fields: { 'x-llm-extproc-replica': { stringValue: 'owner:1' } } } } },
          },
          request: { request_id: requestId },
          response: { response_code: { value: 200 } },
        },
      ],
    },
  });
  const [entry] = decodeAccessLogs(message).entries;
  assert.ok(entry !== undefined);
  return entry;
}

const silent = pino({ level: 'silent' });
const health = { isServing: () => true, onChange: () => () => undefined };

const peerSettings = GRPC_TRANSPORTS.flatMap((transport) => [
  { transport, tls: false },
  { transport, tls: true },
]);

for (const { transport, tls } of peerSettings) {
  void describe(`AccessLogForwarder to a peer on the ${transport} transport${tls ? ' with TLS (a self-signed certificate)' : ''}`, () => {
    void it('delivers each entry unchanged, marked forwarded, on one stream', async () => {
      const heard: Array<{ entry: AccessLogEntry; forwarded: boolean }> = [];
      let streams = 0;
      const peer = await startExtProcServer({
        address: '127.0.0.1:0',
        transport,
        logger: silent,
        health,
        ...(tls ? { tls: await openTlsIdentity({ mode: 'self-signed' }, silent) } : {}),
        processorFactory: () => assert.fail('no ext_proc stream in this test'),
        accessLog: {
          entry: (entry, forwarded) => heard.push({ entry, forwarded }),
          streams: (open) => (streams = Math.max(streams, open)),
        },
      });
      const failures: string[] = [];
      const forwarder = new AccessLogForwarder(
        { sent: () => undefined, streamFailed: (_peer, error) => failures.push(error.message) },
        tls,
      );
      try {
        for (const id of ['r1', 'r2', 'r3']) forwarder.forward(peer.address, envoyEntry(id).wire);
        await waitUntil(() => (heard.length === 3 ? true : undefined), { description: 'three entries at the peer' });
        assert.deepEqual(
          heard.map(({ entry, forwarded }) => [entry.requestId, entry.flags, entry.status, entry.owner, forwarded]),
          ['r1', 'r2', 'r3'].map((id) => [id, RESPONSE_FLAGS.DC, 200, 'owner:1', true]),
        );
        assert.equal(streams, 1, 'one stream per peer');
        assert.deepEqual(failures, []);
      } finally {
        forwarder.close();
        await peer.shutdown(0);
      }
    });
  });
}

void describe('AccessLogForwarder to a peer that is gone', () => {
  void it('reports the failed stream, and opens a new one for the next entry', async () => {
    // A port that was just free: nothing listens there.
    const gone = await startExtProcServer({
      address: '127.0.0.1:0',
      transport: 'native',
      logger: silent,
      health,
      processorFactory: () => assert.fail('no ext_proc stream in this test'),
    });
    const address = gone.address;
    await gone.shutdown(0);
    const failures: string[] = [];
    let sent = 0;
    const forwarder = new AccessLogForwarder({ sent: () => sent++, streamFailed: (peer) => failures.push(peer) });
    try {
      forwarder.forward(address, envoyEntry('r1').wire);
      await waitUntil(() => (failures.length === 1 ? true : undefined), { description: 'the first stream failed' });
      forwarder.forward(address, envoyEntry('r2').wire);
      await waitUntil(() => (failures.length === 2 ? true : undefined), { description: 'a second stream was tried, and failed' });
      assert.deepEqual(failures, [address, address]);
      assert.equal(sent, 2, 'both entries were written to a stream');
    } finally {
      forwarder.close();
    }
  });
});
