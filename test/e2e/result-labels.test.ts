// The result label is what the client got. 200 streams at once over three model servers through a
// real Envoy; one server is killed while it streams; five times over. For every request, the
// result llm-extproc logged (and counted in llm_extproc_requests_total) equals what its client
// received: the code of the error body or SSE error event (`upstream_reset` when Envoy still held
// the headers and answered itself: Envoy's access-log entry tells llm-extproc), `ok` for a whole
// answer, or the cut-stream code `stream_broken` for a stream Envoy reset. Every error body the clients got
// carries their request id — including Envoy's own replies (its local-reply mapper).

import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import { Writable } from 'node:stream';
import { describe, it } from 'node:test';
import { pino } from 'pino';
import { startGateway, type Gateway } from '../support/gateway.js';
import type { ClientResponse } from '../support/http-client.js';
import { privateLoopbackHost } from '../support/loopback.js';
import { startModelServer, type ModelServer } from '../support/model-server.js';
import { metricValue } from '../support/prometheus.js';
import { waitUntil } from '../support/wait-until.js';

const STREAMS = 200;
const RUNS = 5;

interface ClientSaw {
  readonly requestId: string;
  /** The code the client got: `ok`, an error code from a body or event, or stream_broken for a reset. */
  readonly code: string;
  /** An error body's request_id, `(none)` when it has none; undefined when the client got no error body. */
  readonly bodyRequestId: string | undefined;
}

/** What one client received, in the catalog's terms. */
function clientSaw(requestId: string, response: ClientResponse): ClientSaw {
  const text = response.text();
  if (response.status !== 200) {
    const error = (JSON.parse(text) as { error: { code: string; request_id?: string } }).error;
    return { requestId, code: error.code, bodyRequestId: error.request_id ?? '(none)' };
  }
  const event = /^data: (\{"error".*)$/m.exec(text);
  if (event !== null) {
    const error = (JSON.parse(event[1] ?? '{}') as { error: { code: string; request_id?: string } }).error;
    return { requestId, code: error.code, bodyRequestId: error.request_id ?? '(none)' };
  }
  if (response.error !== undefined) return { requestId, code: 'stream_broken', bodyRequestId: undefined };
  assert.match(text, /data: \[DONE\]/, `a whole answer for ${requestId}`);
  return { requestId, code: 'ok', bodyRequestId: undefined };
}

/** The result of each request, from llm-extproc's own log lines (debug: one per request). */
class ResultLog extends Writable {
  readonly results = new Map<string, string>();

  override _write(chunk: Buffer, _encoding: string, done: () => void): void {
    for (const line of chunk.toString('utf8').split('\n')) {
      if (line === '') continue;
      const entry = JSON.parse(line) as { msg?: string; requestId?: string; result?: string };
      if (entry.requestId === undefined) continue;
      if (entry.msg === 'request served') this.results.set(entry.requestId, 'ok');
      else if (entry.msg === 'request failed' || entry.msg === 'request cancelled') this.results.set(entry.requestId, entry.result ?? '?');
    }
    done();
  }
}

async function oneRun(run: number): Promise<{ saw: ClientSaw[]; broken: number; signals: string }> {
  const behavior = { kind: 'paced-random-sse', events: 30, gapMs: 30, bytesPerEvent: 40 } as const;
  const victim = await startModelServer({ id: `victim-${run}`, host: privateLoopbackHost(), models: ['m'], behavior });
  const others: ModelServer[] = [
    await startModelServer({ id: `a-${run}`, models: ['m'], behavior }),
    await startModelServer({ id: `b-${run}`, models: ['m'], behavior }),
  ];
  const log = new ResultLog();
  let gateway: Gateway | undefined;
  try {
    gateway = await startGateway({
      pools: [{ name: 'p', models: ['m'], endpoints: [victim, ...others].map((s) => ({ address: s.address })) }],
      envoy: { messageTimeoutMs: 10_000 },
      logger: pino({ level: 'debug' }, log),
    });
    const gw = gateway;
    let killed = false;
    const kill = (): void => {
      // Once the victim streams to many clients: its process dies (listener gone, connections dropped).
      if (killed || victim.requests.length < STREAMS / 6) return;
      killed = true;
      void victim.refuse();
    };
    const saw = await Promise.all(
      Array.from({ length: STREAMS }, async () => {
        const requestId = randomUUID();
        const response = await gw.send({
          path: '/v1/chat/completions',
          headers: { 'x-request-id': requestId },
          body: { model: 'm', stream: true, messages: [{ role: 'user', content: 'hi' }] },
          onData: kill,
          timeoutMs: 60_000,
        });
        return clientSaw(requestId, response);
      }),
    );
    await waitUntil(() => (saw.every((c) => log.results.has(c.requestId)) ? true : undefined), {
      description: 'every request logged',
      timeoutMs: 30_000,
    });
    const metrics = await gw.metricsText();
    const counts = new Map<string, number>();
    for (const c of saw) counts.set(c.code, (counts.get(c.code) ?? 0) + 1);
    for (const [code, count] of counts)
      assert.equal(metricValue(metrics, 'llm_extproc_requests_total', { result: code }), count, `run ${run}: ${code} in the metrics`);
    assert.equal(metricValue(metrics, 'llm_extproc_requests_total'), STREAMS, `run ${run}: every request counted once`);
    const signals = ['access_log_upstream', 'access_log_client', 'none']
      .map((signal) => `${signal} ${metricValue(metrics, 'llm_extproc_midstream_break_signals_total', { signal })}`)
      .join(', ');
    return { saw: saw.map((c) => ({ ...c, logged: log.results.get(c.requestId) })), broken: counts.get('stream_broken') ?? 0, signals };
  } finally {
    await gateway?.stop();
    await Promise.all([victim.close(), ...others.map((s) => s.close())]);
  }
}

void describe('the result label is what the client got (real Envoy, a model server killed under 200 streams)', () => {
  void it(`over ${RUNS} runs, every request's result equals the client's code, and every error body carries its request id`, async (t) => {
    for (let run = 1; run <= RUNS; run++) {
      const { saw, broken, signals } = await oneRun(run);
      const codes = new Map<string, number>();
      for (const c of saw) {
        codes.set(c.code, (codes.get(c.code) ?? 0) + 1);
        assert.equal((c as ClientSaw & { logged?: string }).logged, c.code, `run ${run}, request ${c.requestId}`);
        if (c.bodyRequestId !== undefined) assert.equal(c.bodyRequestId, c.requestId, `run ${run}: the ${c.code} body's request_id`);
      }
      t.diagnostic(`run ${run}: ${[...codes].map(([code, n]) => `${code} ${n}`).join(', ')}; breaks judged by: ${signals}`);
      assert.ok(broken > 0, `run ${run}: the kill cut some streams`);
    }
  });
});
