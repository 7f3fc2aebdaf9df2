// The metrics scraper against real local HTTP servers (loopback): what it records per endpoint,
// how failures and staleness show, its bounded concurrency, and that stop() leaves nothing running.
import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import type { EndpointView, PoolView } from '../../../src/endpoints/model.js';
import { MetricsScraper } from '../../../src/picker/scraper.js';
import type { ScrapeResult, ScraperOptions } from '../../../src/picker/scraper.js';
import { SignalBoard } from '../../../src/picker/signals.js';
import { startModelServer } from '../../support/model-server.js';

function viewOf(pools: PoolView[]): EndpointView {
  return { pools: new Map(pools.map((p) => [p.name, p])), poolsByModel: new Map(), version: 1 };
}

function pool(name: string, addresses: string[], state: 'Ready' | 'Starting' = 'Ready'): PoolView {
  return { name, models: ['m'], endpoints: addresses.map((address) => ({ id: address, address, state, reason: '', pool: name })) };
}

const OPTIONS: ScraperOptions = {
  intervalMs: 60_000,
  timeoutMs: 5000,
  staleAfterMs: 5000,
  concurrency: 4,
  path: '/metrics',
  formatFor: () => 'vllm',
};

describe('MetricsScraper', () => {
  it('records each ready endpoint’s report, marks failures, and never scrapes a not-ready endpoint', async () => {
    const ok = await startModelServer({ id: 'ok', metrics: { waiting: 4, running: 2, kvCacheUsage: 0.5, runningAdapters: ['sql'] } });
    const broken = await startModelServer({ id: 'broken', metrics: { fail: 'status-500' } });
    const starting = await startModelServer({ id: 'starting' });
    const refused = await startModelServer({ id: 'refused' });
    await refused.refuse();
    const board = new SignalBoard();
    const results: ScrapeResult[] = [];
    const scraper = new MetricsScraper(
      board,
      () => viewOf([pool('p', [ok.address, broken.address, refused.address]), pool('q', [starting.address], 'Starting')]),
      OPTIONS,
      {
        scraped: (r) => results.push(r),
      },
    );
    try {
      await scraper.scrapeOnce();
      assert.deepEqual(board.snapshot(ok.address), {
        inFlight: 0,
        metrics: 'fresh',
        waiting: 4,
        running: 2,
        kvCacheUsage: 0.5,
        runningAdapters: ['sql'],
        waitingAdapters: [],
        // It queues 4 behind 2 running: its batch holds 2 now.
        batchLimit: 2,
        scrapedAt: board.snapshot(ok.address).scrapedAt,
      });
      assert.deepEqual(board.snapshot(broken.address), { inFlight: 0, metrics: 'failing', lastError: 'HTTP 500' });
      assert.deepEqual(board.snapshot(refused.address), { inFlight: 0, metrics: 'failing', lastError: 'connection failed' });
      assert.equal(starting.metricsScrapes, 0);
      assert.deepEqual(results.sort(), ['connect_error', 'http_error', 'ok']);
      // A failure after a good scrape keeps the old numbers for display, but they no longer count.
      ok.setMetrics({ fail: 'garbage' });
      await scraper.scrapeOnce();
      const cell = board.cell(ok.address);
      assert.equal(cell.metricsState, 'failing');
      assert.equal(cell.usableLoad(), undefined);
      assert.match(cell.lastError, /is the metrics format "vllm" right/);
    } finally {
      await scraper.stop();
      await Promise.all([ok, broken, starting, refused].map((s) => s.close()));
    }
  });

  it('a scrape that times out counts as failing, and a cell leaves with its endpoint', async () => {
    const server = await startModelServer({ id: 'a', metrics: { waiting: 1 } });
    let now = 1_000_000;
    const board = new SignalBoard();
    const scraper = new MetricsScraper(
      board,
      () => viewOf([pool('p', [server.address])]),
      { ...OPTIONS, staleAfterMs: 100, timeoutMs: 200 },
      {},
      () => now,
    );
    try {
      await scraper.scrapeOnce();
      assert.equal(board.cell(server.address).metricsState, 'fresh');
      // The server stops answering in time and the clock moves past staleAfter.
      server.setMetrics({ fail: 'hang' });
      now += 1000;
      await scraper.scrapeOnce();
      assert.equal(board.cell(server.address).metricsState, 'failing');
      board.cell(server.address).metricsState = 'fresh';
      now += 1000;
      await new MetricsScraper(
        board,
        () => viewOf([]),
        OPTIONS,
        {},
        () => now,
      ).scrapeOnce();
      assert.equal(board.peek(server.address), undefined, 'a cell without in-flight requests leaves with its endpoint');
    } finally {
      await scraper.stop();
      await server.close();
    }
  });

  it('marks a fresh report stale once it is too old', async () => {
    const board = new SignalBoard();
    board.cell('10.0.0.1:80').inFlight = 1;
    let now = 0;
    const scraper = new MetricsScraper(
      board,
      () => viewOf([pool('p', ['10.0.0.1:80'])]),
      { ...OPTIONS, formatFor: () => undefined, staleAfterMs: 100 },
      {},
      () => now,
    );
    const cell = board.cell('10.0.0.1:80');
    cell.metricsState = 'fresh';
    cell.scrapedAt = 0;
    now = 50;
    await scraper.scrapeOnce();
    assert.equal(cell.metricsState, 'fresh');
    now = 500;
    await scraper.scrapeOnce();
    assert.equal(cell.metricsState, 'stale');
  });

  it('keeps at most `concurrency` scrapes open at once', async () => {
    let open = 0;
    let peak = 0;
    const release: Array<() => void> = [];
    const server = createServer((_req, res) => {
      open++;
      peak = Math.max(peak, open);
      release.push(() => {
        open--;
        res.end('vllm:num_requests_waiting 0\n');
      });
    });
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
    const port = (server.address() as AddressInfo).port;
    // Ten endpoints, all served by the one server: distinct addresses through 127.0.0.x.
    const addresses = Array.from({ length: 10 }, (_, i) => `127.0.0.${i + 1}:${port}`);
    server.close();
    const servers = await Promise.all(
      addresses.map(async (a) => {
        const s = createServer(server.listeners('request')[0] as Parameters<typeof createServer>[1]);
        await new Promise<void>((resolve) => s.listen(port, a.split(':')[0], resolve));
        return s;
      }),
    );
    const board = new SignalBoard();
    const scraper = new MetricsScraper(board, () => viewOf([pool('p', addresses)]), { ...OPTIONS, concurrency: 3, timeoutMs: 10_000 });
    try {
      const cycle = scraper.scrapeOnce();
      while (board.snapshot(addresses[9]).metrics !== 'fresh') {
        await new Promise<void>((resolve) => setImmediate(resolve));
        release.shift()?.();
      }
      await cycle;
      assert.equal(peak, 3);
      assert.ok(addresses.every((a) => board.snapshot(a).metrics === 'fresh'));
    } finally {
      await scraper.stop();
      for (const s of servers) {
        s.closeAllConnections();
        s.close();
      }
    }
  });

  it('stop() aborts a hanging scrape and leaves no timer: the process can exit', async () => {
    const server = await startModelServer({ id: 'hang', metrics: { fail: 'hang' } });
    const board = new SignalBoard();
    const scraper = new MetricsScraper(board, () => viewOf([pool('p', [server.address])]), {
      ...OPTIONS,
      intervalMs: 10,
      timeoutMs: 60_000,
    });
    scraper.start();
    while (server.metricsScrapes === 0) await new Promise<void>((resolve) => setImmediate(resolve));
    await scraper.stop();
    // A test runner that still had the scraper's timer or fetch would hang here instead of finishing.
    assert.equal(server.metricsScrapes, 1);
    await server.close();
  });
});
