// The benchmark's model server. It answers in the same OpenAI shapes as the e2e fake
// (test/support/openai-replies.ts) but is built for measuring rather than testing:
// - a stream has exactly `events` content events (then `[DONE]`), whatever the prompt, because
//   the e2e fake's length follows the prompt text (at most ~18 events);
// - every event carries the hrtime at which it was written (`bench_sent_ns`), so the client can
//   measure each event's one-way latency through the gateway. process.hrtime reads
//   CLOCK_MONOTONIC, which all processes on one machine share;
// - nothing is recorded: the e2e fake keeps every byte of every response for assertions, a cost
//   that grows with the run and would leak into the numbers.

import { buffer } from 'node:stream/consumers';
import { createServer } from 'node:http';
import type { IncomingMessage, ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { jsonReply, parseInferenceRequest, sseEvent, SSE_DONE, CREATED } from '../../test/support/openai-replies.js';

export interface BenchUpstreamOptions {
  readonly id: string;
  readonly host: string;
  /** Content events per stream (the `[DONE]` terminator comes on top). */
  readonly events: number;
  /** Pause between stream events. */
  readonly eventDelayMs: number;
}

export interface BenchUpstream {
  readonly address: string;
  close(): Promise<void>;
}

export const SENT_FIELD = 'bench_sent_ns';

function streamEvent(id: string, model: string, index: number): string {
  return sseEvent(
    JSON.stringify({
      id: `chatcmpl-${id}`,
      object: 'chat.completion.chunk',
      created: CREATED,
      model,
      system_fingerprint: id,
      choices: [{ index: 0, delta: { content: `token${index} ` }, logprobs: null, finish_reason: null }],
      [SENT_FIELD]: process.hrtime.bigint().toString(),
    }),
  );
}

function write(res: ServerResponse, chunk: string): Promise<void> {
  return new Promise((resolve, reject) => res.write(chunk, (err) => (err ? reject(err) : resolve())));
}

/**
 * Waits until `offsetMs` after `start`. Node timers have 1 ms granularity, so the wait is rounded:
 * single events may leave up to ~0.5 ms early or late, the cadence averages out exact.
 */
async function untilScheduled(start: bigint, offsetMs: number): Promise<void> {
  const remainingMs = offsetMs - Number(process.hrtime.bigint() - start) / 1e6;
  if (remainingMs < 0.5) return;
  await new Promise((resolve) => setTimeout(resolve, Math.round(remainingMs)));
}

export async function startBenchUpstream(opts: BenchUpstreamOptions): Promise<BenchUpstream> {
  // Non-streaming answers depend only on the request body; compute each one once.
  const jsonCache = new Map<string, Buffer>();

  const answer = async (req: IncomingMessage, res: ServerResponse): Promise<void> => {
    const body = await buffer(req);
    if (req.method !== 'POST' || req.url !== '/v1/chat/completions') {
      res.writeHead(404, { 'content-type': 'application/json' }).end('{"error":{"message":"not found"}}');
      return;
    }
    const parsed = parseInferenceRequest('chat', body, 'bench-model');
    if ('error' in parsed) {
      res.writeHead(400, { 'content-type': 'application/json' }).end(JSON.stringify({ error: { message: parsed.error } }));
      return;
    }
    if (!parsed.stream) {
      const key = body.toString('utf8');
      let reply = jsonCache.get(key);
      if (reply === undefined) jsonCache.set(key, (reply = Buffer.from(JSON.stringify(jsonReply(opts.id, parsed)))));
      res.writeHead(200, { 'content-type': 'application/json', 'content-length': reply.length }).end(reply);
      return;
    }
    // Headers and the first event leave together, as when a server sends its first token at once.
    res.writeHead(200, { 'content-type': 'text/event-stream', 'cache-control': 'no-cache' });
    // Events follow a fixed schedule (event i at start + i·delay) rather than "delay after the
    // previous write": a timer that fires late on a busy machine then does not stretch the stream,
    // so stream durations differ between setups only by what the gateway adds.
    const start = process.hrtime.bigint();
    for (let i = 0; i <= opts.events; i++) {
      await untilScheduled(start, i * opts.eventDelayMs);
      if (res.destroyed) return;
      if (i === opts.events) res.end(SSE_DONE);
      else await write(res, streamEvent(opts.id, parsed.model, i));
    }
  };

  const server = createServer({ noDelay: true, requestTimeout: 0 }, (req, res) => {
    answer(req, res).catch(() => res.destroy());
  });
  // Envoy reuses idle upstream connections; a server-side idle timeout racing that reuse would
  // inject 503s into the run.
  server.keepAliveTimeout = 0;
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(0, opts.host, () => resolve());
  });
  const port = (server.address() as AddressInfo).port;
  return {
    address: `${opts.host}:${port}`,
    close: () =>
      new Promise<void>((resolve) => {
        server.closeAllConnections();
        server.close(() => resolve());
      }),
  };
}
