// The metrics scraper: the one place that talks to model servers' Prometheus endpoints. On an
// interval it fetches `/metrics` from every routable endpoint of every scraped pool, at most
// `concurrency` at a time and each within `timeoutMs`, and writes the parsed load into the
// endpoint's signal cell. A failed scrape marks the cell `failing`, an old one `stale`; neither
// is ever read as idle. Cycles never overlap, and stop() aborts open fetches and leaves no timer.

import { setMaxListeners } from 'node:events';
import { isRoutable } from '../endpoints/model.js';
import type { EndpointView } from '../endpoints/model.js';
import { MetricsClient, ScrapeHttpError } from './metrics-client.js';
import { METRICS_FORMATS, MetricsParseError, parseServerMetrics } from './server-metrics.js';
import type { MetricsFormat } from './server-metrics.js';
import { markStaleIfOld, recordScrape, recordScrapeFailure } from './signals.js';
import type { SignalBoard } from './signals.js';

export interface ScraperOptions {
  readonly intervalMs: number;
  readonly timeoutMs: number;
  /** A good scrape stops counting after this long without a newer one. */
  readonly staleAfterMs: number;
  /** Scrapes in flight at once. */
  readonly concurrency: number;
  /** HTTP path of the metrics endpoint on each model server. */
  readonly path: string;
  /** The flavour of a pool's servers; undefined = do not scrape that pool. */
  readonly formatFor: (pool: string) => MetricsFormat | undefined;
}

export type ScrapeResult = 'ok' | 'timeout' | 'http_error' | 'connect_error' | 'parse_error';

export interface ScrapeObserver {
  scraped?(result: ScrapeResult, seconds: number): void;
}

interface Target {
  readonly address: string;
  readonly format: MetricsFormat;
}

export class MetricsScraper {
  private timer: NodeJS.Timeout | undefined;
  private running: Promise<void> | undefined;
  private stopped = false;
  private readonly aborter = new AbortController();
  private readonly client: MetricsClient;

  constructor(
    private readonly board: SignalBoard,
    private readonly view: () => EndpointView,
    private readonly options: ScraperOptions,
    private readonly observer: ScrapeObserver = {},
    private readonly now: () => number = Date.now,
  ) {
    // Idle connections outlive one interval (so the next scrape reuses them), not much more.
    // Every scrape in flight listens on the stop signal: as many as `concurrency`, legitimately.
    setMaxListeners(Math.max(10, options.concurrency + 1), this.aborter.signal);
    this.client = new MetricsClient({ idleMs: options.intervalMs + options.timeoutMs, maxBytes: MAX_METRICS_PAGE_BYTES });
  }

  /** Scrapes at once, then every interval. */
  start(): void {
    if (this.stopped || this.running !== undefined || this.timer !== undefined) return;
    this.loop();
  }

  private loop(): void {
    this.timer = undefined;
    if (this.stopped) return;
    this.running = this.scrapeOnce().finally(() => {
      this.running = undefined;
      if (this.stopped) return;
      this.timer = setTimeout(() => this.loop(), this.options.intervalMs);
      this.timer.unref();
    });
  }

  async stop(): Promise<void> {
    this.stopped = true;
    if (this.timer !== undefined) clearTimeout(this.timer);
    this.timer = undefined;
    this.aborter.abort();
    await this.running;
    this.client.close();
  }

  /** One cycle over the current view (also for tests that want a scrape now). */
  async scrapeOnce(): Promise<void> {
    const view = this.view();
    const targets: Target[] = [];
    const present = new Set<string>();
    const targeted = new Set<string>();
    for (const pool of view.pools.values()) {
      const format = this.options.formatFor(pool.name);
      for (const endpoint of pool.endpoints) {
        if (endpoint.address !== '') present.add(endpoint.address);
        if (format === undefined || !isRoutable(endpoint) || targeted.has(endpoint.address)) continue;
        targeted.add(endpoint.address);
        targets.push({ address: endpoint.address, format: engineFormat(endpoint.engine) ?? format });
      }
    }
    this.board.retainOnly(present);
    let next = 0;
    const worker = async (): Promise<void> => {
      while (next < targets.length && !this.stopped) await this.scrape(targets[next++]);
    };
    await Promise.all(Array.from({ length: Math.min(this.options.concurrency, targets.length) }, worker));
    const now = this.now();
    for (const cell of this.board.all()) markStaleIfOld(cell, now, this.options.staleAfterMs);
  }

  private async scrape(target: Target): Promise<void> {
    const started = performance.now();
    const cell = this.board.cell(target.address);
    let result: ScrapeResult = 'ok';
    try {
      const text = await this.client.get(target.address, this.options.path, this.options.timeoutMs, this.aborter.signal);
      recordScrape(cell, parseServerMetrics(text, target.format), this.now());
    } catch (err) {
      if (this.stopped) return;
      result = scrapeResultOf(err);
      recordScrapeFailure(cell, err instanceof ScrapeHttpError || err instanceof MetricsParseError ? err.message : 'connection failed');
    }
    this.observer.scraped?.(result, (performance.now() - started) / 1000);
  }
}

/** vLLM's page is tens of KB; a page this large is an exporter gone wrong, not load data. */
const MAX_METRICS_PAGE_BYTES = 8 * 1024 * 1024;

function scrapeResultOf(err: unknown): ScrapeResult {
  if (err instanceof MetricsParseError) return 'parse_error';
  if (!(err instanceof ScrapeHttpError)) return 'connect_error';
  return err.kind === 'too_large' ? 'parse_error' : err.kind;
}

/** The metrics flavour a pod's engine-type label names, when it is one we read. */
function engineFormat(engine: string | undefined): MetricsFormat | undefined {
  if (engine === undefined) return undefined;
  const format = engine.toLowerCase();
  return (METRICS_FORMATS as readonly string[]).includes(format) ? (format as MetricsFormat) : undefined;
}
