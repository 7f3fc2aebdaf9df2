// The forwarder against our real gRPC server (both transports): an entry sent to the replica that
// picked its stream arrives there unchanged and marked forwarded (so that replica never sends it on);
// a peer that is not listening is a failed stream, reported, and the next entry tries again.

import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { createServer } from 'node:http2';
import type { ServerHttp2Stream } from 'node:http2';
import type { AddressInfo } from 'node:net';
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
        {
          sent: () => undefined,
          streamFailed: (_peer, error) => failures.push(error.message),
          dropped: () => assert.fail('nothing dropped'),
        },
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
    const forwarder = new AccessLogForwarder({
      sent: () => sent++,
      streamFailed: (peer) => failures.push(peer),
      dropped: () => assert.fail('nothing dropped'),
    });
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

void describe('AccessLogForwarder to a peer that stops reading', () => {
  void it('drops and counts what its full stream cannot take, without buffering every entry; sends again once it drains', async () => {
    // A gRPC peer (plain HTTP/2) that accepts the stream and does not read it until told to:
    // HTTP/2 flow control then stops the bytes, and the client's stream fills.
    let held: ServerHttp2Stream | undefined;
    let received = 0;
    const peer = createServer();
    peer.on('stream', (stream) => {
      stream.respond({ ':status': 200, 'content-type': 'application/grpc' });
      stream.pause();
      stream.on('data', (chunk: Buffer) => (received += chunk.length));
      held = stream;
    });
    await new Promise<void>((resolve) => peer.listen(0, '127.0.0.1', resolve));
    const address = `127.0.0.1:${(peer.address() as AddressInfo).port}`;
    let sent = 0;
    let dropped = 0;
    let closing = false;
    const forwarder = new AccessLogForwarder({
      sent: () => sent++,
      streamFailed: () => (closing ? undefined : assert.fail('the stream stays up')),
      dropped: () => dropped++,
    });
    try {
      const wire = envoyEntry('r').wire;
      forwarder.forward(address, wire);
      await waitUntil(() => held, { description: 'the peer has the stream' });
      // 20,000 breaks while the peer reads nothing, a turn of the event loop between each hundred.
      for (let i = 0; i < 200; i++) {
        for (let j = 0; j < 100; j++) forwarder.forward(address, wire);
        await new Promise((resolve) => setImmediate(resolve));
      }
      assert.equal(sent + dropped, 20_001, 'every entry is sent or counted as dropped');
      assert.ok(dropped > 15_000, `most entries were dropped (${dropped}), not buffered`);
      assert.ok(sent < 5000, `what was written is bounded by the stream's buffers (${sent} entries)`);
      // The peer reads again: what was written arrives, the stream drains, and entries go out again.
      held?.resume();
      const sentBefore = sent;
      const droppedBefore = dropped;
      await waitUntil(
        () => {
          forwarder.forward(address, wire);
          return sent > sentBefore + 10 ? true : undefined;
        },
        { description: 'entries sent again after the drain', timeoutMs: 10_000 },
      );
      await waitUntil(() => (received >= sentBefore * wire.length ? true : undefined), {
        description: `the peer to get the ${sentBefore} entries written before`,
        timeoutMs: 10_000,
      });
      assert.ok(dropped - droppedBefore < 100, 'dropping stops once the stream drains');
    } finally {
      closing = true;
      forwarder.close();
      held?.close();
      await new Promise((resolve) => peer.close(resolve));
    }
  });
});
