// The load generator: closed-loop HTTP/1.1 clients over a keep-alive Agent, timed with
// process.hrtime.bigint(). The same Agent settings are used against every setup, so connection
// reuse (one connection per concurrent client, opened during warm-up) is identical everywhere.

import { Agent, request } from 'node:http';
import type { IncomingMessage } from 'node:http';
import { SENT_FIELD } from './upstream.js';
import { errorMessage } from '../../src/util/error-message.js';

export interface Target {
  readonly port: number;
  readonly agent: Agent;
}

export function keepAliveAgent(maxSockets: number): Agent {
  // LIFO reuse and no idle-socket cap below maxSockets: after warm-up no request opens a connection.
  return new Agent({ keepAlive: true, maxSockets, maxFreeSockets: maxSockets, scheduling: 'lifo' });
}

const MS_PER_NS = 1e-6;

function elapsedMs(from: bigint, to: bigint = process.hrtime.bigint()): number {
  return Number(to - from) * MS_PER_NS;
}

class RequestFailed extends Error {
  override readonly name = 'RequestFailed';
}

function post(target: Target, body: Buffer, onResponse: (res: IncomingMessage) => void, onError: (err: Error) => void): void {
  const req = request(
    {
      host: '127.0.0.1',
      port: target.port,
      method: 'POST',
      path: '/v1/chat/completions',
      agent: target.agent,
      headers: { 'content-type': 'application/json', 'content-length': body.length },
    },
    onResponse,
  );
  req.setTimeout(30_000, () => req.destroy(new RequestFailed('client timeout after 30 s')));
  req.on('error', onError);
  req.end(body);
}

function describeFailure(res: IncomingMessage, body: Buffer): string {
  const error = res.headers['x-llm-extproc-error'];
  return `${error === undefined ? '' : `(${String(error)}) `}${JSON.stringify(body.toString('utf8', 0, Math.min(body.length, 300)))}`;
}

/** One non-streaming request; resolves with its latency (request start → last body byte) in ms. */
export function timedRequest(target: Target, body: Buffer): Promise<number> {
  return new Promise((resolve, reject) => {
    const started = process.hrtime.bigint();
    post(
      target,
      body,
      (res) => {
        let bytes = 0;
        // Failures keep the start of their body: it names the cause (ours, Envoy's, the model server's).
        const failed = res.statusCode !== 200;
        const kept: Buffer[] = [];
        res.on('data', (c: Buffer) => {
          bytes += c.length;
          if (failed) kept.push(c);
        });
        res.on('end', () => {
          const ms = elapsedMs(started);
          if (failed || bytes === 0)
            reject(new RequestFailed(`status ${String(res.statusCode)} ${describeFailure(res, Buffer.concat(kept))}`));
          else resolve(ms);
        });
        res.on('error', reject);
      },
      reject,
    );
  });
}

export interface ClosedLoopResult {
  readonly latenciesMs: number[];
  readonly wallMs: number;
  readonly errors: number;
  readonly firstError: string | undefined;
}

/** `total` calls of `one`, `concurrency` at a time (each worker starts the next as soon as one ends). */
export async function closedLoop<T>(
  total: number,
  concurrency: number,
  one: () => Promise<T>,
  keep: (value: T) => void,
): Promise<{ wallMs: number; errors: number; firstError: string | undefined }> {
  let next = 0;
  let errors = 0;
  let firstError: string | undefined;
  const started = process.hrtime.bigint();
  const worker = async (): Promise<void> => {
    while (next < total) {
      next++;
      try {
        keep(await one());
      } catch (err) {
        errors++;
        firstError ??= errorMessage(err);
      }
    }
  };
  await Promise.all(Array.from({ length: Math.min(concurrency, total) }, worker));
  return { wallMs: elapsedMs(started), errors, firstError };
}

export async function runRequests(target: Target, body: Buffer, total: number, concurrency: number): Promise<ClosedLoopResult> {
  const latenciesMs: number[] = [];
  const run = await closedLoop(
    total,
    concurrency,
    () => timedRequest(target, body),
    (ms) => latenciesMs.push(ms),
  );
  return { latenciesMs, ...run };
}

export interface StreamTiming {
  /** Request start → first SSE event complete at the client. */
  readonly ttfbMs: number;
  /** Request start → end of the response. */
  readonly totalMs: number;
  /** Per content event: upstream write → event complete at the client (one-way, same machine clock). */
  readonly eventLatencyMs: number[];
  /** Between consecutive events at the client. */
  readonly interArrivalMs: number[];
  /** Content events received (the `[DONE]` terminator not counted). */
  readonly events: number;
  readonly sawDone: boolean;
}

const SENT_PATTERN = new RegExp(`"${SENT_FIELD}":"(\\d+)"`);

/** One streaming request, timing every SSE event as it completes at the client. */
export function timedStream(target: Target, body: Buffer): Promise<StreamTiming> {
  return new Promise((resolve, reject) => {
    const started = process.hrtime.bigint();
    post(
      target,
      body,
      (res) => {
        if (res.statusCode !== 200) {
          const kept: Buffer[] = [];
          res.on('data', (c: Buffer) => kept.push(c));
          res.on('end', () =>
            reject(new RequestFailed(`stream status ${String(res.statusCode)} ${describeFailure(res, Buffer.concat(kept))}`)),
          );
          return;
        }
        res.setEncoding('utf8');
        let pending = '';
        let firstAt: bigint | undefined;
        let lastAt: bigint | undefined;
        let events = 0;
        let sawDone = false;
        const eventLatencyMs: number[] = [];
        const interArrivalMs: number[] = [];
        res.on('data', (text: string) => {
          const now = process.hrtime.bigint();
          pending += text;
          let end: number;
          while ((end = pending.indexOf('\n\n')) >= 0) {
            const event = pending.slice(0, end);
            pending = pending.slice(end + 2);
            if (event.includes('[DONE]')) {
              sawDone = true;
              continue;
            }
            const sent = SENT_PATTERN.exec(event);
            if (sent === null) continue;
            events++;
            eventLatencyMs.push(Number(now - BigInt(sent[1])) * MS_PER_NS);
            if (lastAt !== undefined) interArrivalMs.push(Number(now - lastAt) * MS_PER_NS);
            firstAt ??= now;
            lastAt = now;
          }
        });
        res.on('end', () => {
          if (firstAt === undefined || !sawDone) {
            reject(new RequestFailed(`stream ended after ${events} events without ${sawDone ? 'content' : '[DONE]'}`));
            return;
          }
          resolve({ ttfbMs: elapsedMs(started, firstAt), totalMs: elapsedMs(started), eventLatencyMs, interArrivalMs, events, sawDone });
        });
        res.on('error', reject);
      },
      reject,
    );
  });
}
