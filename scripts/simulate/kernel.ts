// What the simulations share: a seeded PRNG, an event queue by time, percentiles, the scrape of a model server by every replica. No clocks, no I/O.
import { recordScrape, type SignalBoard } from '../../src/picker/signals.js';

/** Seeded PRNG (mulberry32). */
export function prng(seed: number): () => number {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

/** A binary min-heap of events by time. */
export class Events<T extends { time: number }> {
  private readonly heap: T[] = [];
  push(event: T): void {
    const h = this.heap;
    h.push(event);
    let i = h.length - 1;
    while (i > 0) {
      const parent = (i - 1) >> 1;
      if (h[parent].time <= h[i].time) break;
      [h[parent], h[i]] = [h[i], h[parent]];
      i = parent;
    }
  }
  pop(): T | undefined {
    const h = this.heap;
    const top = h[0];
    const last = h.pop();
    if (h.length > 0 && last !== undefined) {
      h[0] = last;
      let i = 0;
      for (;;) {
        const l = 2 * i + 1;
        const r = l + 1;
        let m = i;
        if (l < h.length && h[l].time < h[m].time) m = l;
        if (r < h.length && h[r].time < h[m].time) m = r;
        if (m === i) break;
        [h[m], h[i]] = [h[i], h[m]];
        i = m;
      }
    }
    return top;
  }
}

/** The value at quantile q of an ascending array (0 when empty). */
export function percentile(sorted: readonly number[], q: number): number {
  return sorted.length === 0 ? 0 : sorted[Math.min(sorted.length - 1, Math.floor(q * sorted.length))];
}

/**
 * One model server's metrics page as every llm-extproc replica's scraper reads it at `now`: a
 * vLLM-style report (queue, running, KV-cache use; no LoRA) recorded on each replica's board.
 */
function recordScrapeOnEvery(
  boards: readonly SignalBoard[],
  address: string,
  load: { waiting: number; running: number; kvCacheUsage: number },
  now: number,
): void {
  for (const board of boards)
    recordScrape(board.cell(address), { ...load, runningAdapters: [], waitingAdapters: [], maxAdapters: undefined }, now);
}

/** A simulated model server as its metrics page shows it. */
export interface ScrapedServer {
  readonly address: string;
  readonly queue: { readonly length: number };
  readonly running: number;
}

/** Every server's metrics page, read at `now` by every replica's scraper; `kvCacheUsage` says how full each one's KV cache is. */
export function scrapeAll<S extends ScrapedServer>(
  boards: readonly SignalBoard[],
  servers: readonly S[],
  kvCacheUsage: (server: S) => number,
  now: number,
): void {
  for (const s of servers)
    recordScrapeOnEvery(boards, s.address, { waiting: s.queue.length, running: s.running, kvCacheUsage: kvCacheUsage(s) }, now);
}
