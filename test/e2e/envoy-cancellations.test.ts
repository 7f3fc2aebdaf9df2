// Real Envoy's own cancellations are not abuse: clients that hang up mid-request, while waiting for
// the answer, and mid-stream — hundreds of them, through real Envoy, which then resets the matching
// ext_proc streams on its one HTTP/2 connection to us — never trip the rapid-reset guard
// (src/http2/abuse-limits.ts, applied by both transports): llm_extproc_grpc_protocol_events_total{kind="rapid_reset"}
// stays 0, and Envoy's connection to llm-extproc is never closed by us (no GOAWAY, no remote close).

import assert from 'node:assert/strict';
import { connect } from 'node:net';
import { after, before, describe, it } from 'node:test';
import { startGateway, type Gateway } from '../support/gateway.js';
import { metricValue } from '../support/prometheus.js';
import { startModelServer, type ModelServer } from '../support/model-server.js';
import { waitUntil } from '../support/wait-until.js';

const CHAT = '/v1/chat/completions';
const BATCH = 25;
/** More than the guard's 500 resets, in each way a client can leave. */
const PER_KIND = 600;

const chatBody = (model: string, stream: boolean): object => ({ model, messages: [{ role: 'user', content: 'hi there' }], stream });

for (const transport of ['native', 'grpc-js'] as const)
  void describe(`Envoy’s own cancellations never end its connection to llm-extproc (${transport} transport)`, () => {
    let hanging: ModelServer;
    let streaming: ModelServer;
    let gateway: Gateway;

    before(async () => {
      hanging = await startModelServer({ id: 'hang', models: ['hang-m'], behavior: { kind: 'hang' } });
      streaming = await startModelServer({ id: 'stream', models: ['stream-m'], behavior: { kind: 'slow-chunks', delayMs: 50 } });
      gateway = await startGateway({
        pools: [
          { name: 'hang', models: ['hang-m'], endpoints: [{ address: hanging.address }] },
          { name: 'stream', models: ['stream-m'], endpoints: [{ address: streaming.address }] },
        ],
        configYaml: `listen:\n  transport: ${transport}\nquarantine:\n  consecutiveFailures: 100000\n`,
      });
    });

    after(async () => {
      await gateway?.stop();
      await Promise.all([hanging?.close(), streaming?.close()]);
    });

    const extprocStats = (): Promise<Record<string, number>> => gateway.envoy.stats('^cluster\\.llm_extproc\\.upstream_');
    const extprocStreams = async (): Promise<number> => (await extprocStats())['cluster.llm_extproc.upstream_rq_total'] ?? 0;

    /** Clients that send headers and part of the body, then hang up once Envoy has opened their ext_proc streams. */
    async function midRequest(count: number): Promise<void> {
      const start = await extprocStreams();
      const sockets = [];
      for (let i = 0; i < count; i++) {
        const socket = connect(gateway.port, '127.0.0.1');
        socket.on('error', () => undefined);
        socket.write(
          `POST ${CHAT} HTTP/1.1\r\nhost: localhost\r\ncontent-type: application/json\r\ncontent-length: 100000\r\n\r\n{"model":"hang-m",`,
        );
        sockets.push(socket);
      }
      await waitUntil(async () => ((await extprocStreams()) >= start + count ? true : undefined), {
        description: `${count} ext_proc streams opened by Envoy`,
      });
      for (const socket of sockets) socket.destroy();
    }

    /** Clients whose request reached the model server, hanging up before any answer. */
    async function beforeAnswer(count: number): Promise<void> {
      const seen = hanging.requests.length;
      const aborts = Array.from({ length: count }, () => new AbortController());
      const sent = aborts.map((abort) => gateway.send({ path: CHAT, body: chatBody('hang-m', false), signal: abort.signal }));
      await waitUntil(() => (hanging.requests.length >= seen + count ? true : undefined), {
        description: `${count} requests at the model server`,
      });
      for (const abort of aborts) abort.abort();
      // Hung up before any response: each send ends in the client's own error.
      for (const outcome of await Promise.allSettled(sent)) assert.equal(outcome.status, 'rejected');
    }

    /** Clients hanging up after the first chunk of a streamed answer. */
    async function midStream(count: number): Promise<void> {
      await Promise.all(
        Array.from({ length: count }, async () => {
          const abort = new AbortController();
          const response = await gateway.send({
            path: CHAT,
            body: chatBody('stream-m', true),
            signal: abort.signal,
            onData: () => abort.abort(),
          });
          assert.notEqual(response.error, undefined, 'the client hung up mid-stream');
        }),
      );
    }

    for (const [name, leave] of [
      ['mid-request (part of the body sent)', midRequest],
      ['before the answer (request at the model server)', beforeAnswer],
      ['mid-stream (after the first chunk)', midStream],
    ] as const) {
      void it(`${PER_KIND} clients hanging up ${name}: no rapid_reset, Envoy's ext_proc connection stays up, the next request is served`, async () => {
        const before = await extprocStats();
        for (let done = 0; done < PER_KIND; done += BATCH) await leave(BATCH);
        const metrics = await gateway.metricsText();
        assert.equal(metricValue(metrics, 'llm_extproc_grpc_protocol_events_total', { kind: 'rapid_reset' }), 0);
        const afterStats = await extprocStats();
        for (const stat of ['cluster.llm_extproc.upstream_cx_destroy_remote', 'cluster.llm_extproc.upstream_cx_close_notify'])
          assert.equal(afterStats[stat] ?? 0, before[stat] ?? 0, `${stat}: llm-extproc closed Envoy's connection`);
        assert.ok(
          (afterStats['cluster.llm_extproc.upstream_rq_total'] ?? 0) >= (before['cluster.llm_extproc.upstream_rq_total'] ?? 0) + PER_KIND,
          'every cancelled request had its ext_proc stream',
        );
        const next = await gateway.send({ path: CHAT, body: chatBody('stream-m', false) });
        assert.equal(next.status, 200, next.text());
      });
    }
  });
