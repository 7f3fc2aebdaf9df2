// The SDK as the app runs it (otel-sdk.ts) against collectors that misbehave, on loopback: one that
// accepts connections and never answers, one that refuses them. Ending a span never waits, the
// export queue never holds more than maxQueueSize, and every lost span is counted.
import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { createServer } from 'node:http';
import type { Server, ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { startTracing } from '../../../src/tracing/otel-sdk.js';
import type { TracingObserver } from '../../../src/tracing/otel-sdk.js';
import { TRACING_OFF } from '../../../src/tracing/tracing-settings.js';
import type { TracingSettings } from '../../../src/tracing/tracing-settings.js';
import { waitUntil } from '../../support/wait-until.js';

const REQUEST = { method: 'POST', path: '/v1/chat/completions', requestId: 'r' };
const NO_HEADERS = (): undefined => undefined;

function settings(endpoint: string, overrides: Partial<TracingSettings> = {}): TracingSettings {
  return {
    ...TRACING_OFF,
    enabled: true,
    endpoint,
    maxQueueSize: 50,
    maxExportBatchSize: 10,
    scheduledDelayMs: 10,
    exportTimeoutMs: 300,
    ...overrides,
  };
}

function counting(): TracingObserver & { exported: number; queueFull: number; exportFailed: number; errors: number } {
  const observer = {
    exported: 0,
    queueFull: 0,
    exportFailed: 0,
    errors: 0,
    spansExported: (count: number) => void (observer.exported += count),
    spansDropped: (reason: 'queue_full' | 'export_failed', count: number) => {
      if (reason === 'queue_full') observer.queueFull += count;
      else observer.exportFailed += count;
    },
    error: () => void observer.errors++,
  };
  return observer;
}

async function listen(server: Server): Promise<string> {
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  return `http://127.0.0.1:${(server.address() as AddressInfo).port}/v1/traces`;
}

describe('tracing SDK: bounded when the collector misbehaves', () => {
  it('a stalled collector: ending spans never waits, the queue stays within maxQueueSize, drops are counted', async () => {
    const held: ServerResponse[] = [];
    const server = createServer((req, res) => {
      req.resume();
      held.push(res); // never answered
    });
    const url = await listen(server);
    const observer = counting();
    const tracing = startTracing(settings(url), observer);
    try {
      let maxQueue = 0;
      const started = performance.now();
      for (let i = 0; i < 2000; i++) {
        const trace = tracing.tracer.start(NO_HEADERS, REQUEST);
        assert.ok(trace !== undefined, 'always_on samples every request');
        trace.end();
        maxQueue = Math.max(maxQueue, tracing.queueLength());
      }
      const perSpanMs = (performance.now() - started) / 2000;
      assert.ok(perSpanMs < 1, `ending a span costs ${perSpanMs} ms: it only queues`);
      assert.ok(maxQueue <= 50, `queue peaked at ${maxQueue}`);
      await waitUntil(() => (observer.queueFull > 0 ? true : undefined), { description: 'spans dropped for a full queue' });
      // The stalled exports time out and their spans count as lost too.
      await waitUntil(() => (observer.exportFailed > 0 ? true : undefined), { description: 'timed-out exports counted' });
      assert.ok(tracing.queueLength() <= 50);
      assert.equal(observer.exported, 0);
      assert.ok(observer.queueFull + observer.exportFailed <= 2000);
    } finally {
      const before = performance.now();
      await tracing.shutdown(200);
      assert.ok(performance.now() - before < 2000, 'shutdown is bounded even with a stalled collector');
      for (const res of held) res.destroy();
      server.close();
    }
  });

  it('a collector that refuses connections: spans are counted as export_failed and reported once per error', async () => {
    const server = createServer();
    const url = await listen(server);
    await new Promise<void>((resolve) => server.close(() => resolve())); // the port now refuses
    const observer = counting();
    const tracing = startTracing(settings(url), observer);
    try {
      for (let i = 0; i < 20; i++) tracing.tracer.start(NO_HEADERS, REQUEST)?.end();
      await waitUntil(() => (observer.exportFailed >= 20 ? true : undefined), {
        description: 'refused exports counted',
        timeoutMs: 20_000,
      });
      assert.ok(observer.errors > 0, 'the SDK reported the failure');
    } finally {
      await tracing.shutdown(200);
    }
  });

  it('a healthy collector: spans are exported and counted; shutdown flushes what is queued', async () => {
    let received = 0;
    const server = createServer((req, res) => {
      req.resume();
      req.on('end', () => {
        received++;
        res.writeHead(200, { 'content-type': 'application/x-protobuf' }).end();
      });
    });
    const url = await listen(server);
    const observer = counting();
    const tracing = startTracing(settings(url, { scheduledDelayMs: 60_000 }), observer);
    try {
      for (let i = 0; i < 5; i++) tracing.tracer.start(NO_HEADERS, REQUEST)?.end();
      assert.equal(tracing.queueLength(), 5, 'queued until the (long) delay or shutdown');
      await tracing.shutdown(5000);
      assert.equal(observer.exported, 5);
      assert.ok(received >= 1);
    } finally {
      server.close();
    }
  });
});
