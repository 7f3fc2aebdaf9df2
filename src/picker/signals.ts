// Per-endpoint load signals, kept in one mutable cell per address so the hot path reads plain
// fields instead of looking addresses up in maps: the compiled candidate list (pipeline.ts) holds
// the cell of each candidate. Two writers, each owning its own fields: the load tracker (our
// in-flight count) and the metrics scraper (what the model server reports about itself).

/** Why an endpoint's model-server metrics cannot be used right now. */
export type MetricsState =
  /** Scraped recently and understood. */
  | 'fresh'
  /** Never scraped yet (new endpoint, or scraping disabled). */
  | 'missing'
  /** The last scrape failed (refused, timed out, bad status, unparsable). */
  | 'failing'
  /** The last good scrape is older than the staleness limit. */
  | 'stale';

/** What a model server says about its own load (parsed from its Prometheus endpoint). */
export interface ServerLoad {
  /** Requests queued and not yet scheduled. */
  readonly waiting: number;
  /** Requests in the running batch. */
  readonly running: number;
  /** KV-cache utilisation 0..1; undefined when the server does not report it (TGI). */
  readonly kvCacheUsage: number | undefined;
  /** LoRA adapters loaded and running, and requested but still waiting to be loaded. */
  readonly runningAdapters: readonly string[];
  readonly waitingAdapters: readonly string[];
  /** `max_lora` as the server reports it, when it does. */
  readonly maxAdapters: number | undefined;
}

export class SignalCell {
  /** Requests we routed here that have not finished. */
  inFlight = 0;
  private state: MetricsState = 'missing';
  /**
   * `metricsState === 'fresh'`, kept as a plain field with the report's numbers beside it so the
   * picker's inner loop reads numbers, not objects (it runs over every candidate on every request).
   */
  reporting = false;
  waiting = 0;
  running = 0;
  /** NaN when the server does not report it. */
  kvCacheUsage = Number.NaN;
  /** Last good report; kept while stale/failing for /debug/endpoints, never used for picking then. */
  load: ServerLoad | undefined = undefined;
  /** When `load` was scraped (ms since epoch), 0 = never. */
  scrapedAt = 0;
  /** Short reason of the last failed scrape. */
  lastError = '';
  /** `runningAdapters ∪ waitingAdapters`, for O(1) LoRA look-ups. */
  adapters: ReadonlySet<string> = EMPTY_SET;

  /** The adapters this cell has counted in the board's index (only while reporting). */
  private counted: ReadonlySet<string> = EMPTY_SET;

  constructor(
    readonly address: string,
    private readonly index: AdapterIndex = new AdapterIndex(),
  ) {}

  get metricsState(): MetricsState {
    return this.state;
  }

  set metricsState(state: MetricsState) {
    this.state = state;
    this.reporting = state === 'fresh' && this.load !== undefined;
    this.recount();
  }

  /** Keeps the board's adapter index equal to the adapters of reporting cells. */
  recount(): void {
    const now = this.reporting ? this.adapters : EMPTY_SET;
    if (now === this.counted) return;
    for (const adapter of this.counted) this.index.remove(adapter);
    for (const adapter of now) this.index.add(adapter);
    this.counted = now;
  }

  /** The server's report, only when fresh: a stale, failing or missing scrape never reads as idle. */
  usableLoad(): ServerLoad | undefined {
    return this.metricsState === 'fresh' ? this.load : undefined;
  }
}

const EMPTY_SET: ReadonlySet<string> = new Set();

/**
 * How many reporting endpoints run or load each adapter: lets the picker tell in O(1) whether a
 * requested model is a LoRA adapter anyone has, instead of asking every candidate.
 */
export class AdapterIndex {
  private readonly counts = new Map<string, number>();

  add(adapter: string): void {
    this.counts.set(adapter, (this.counts.get(adapter) ?? 0) + 1);
  }

  remove(adapter: string): void {
    const next = (this.counts.get(adapter) ?? 0) - 1;
    if (next > 0) this.counts.set(adapter, next);
    else this.counts.delete(adapter);
  }

  has(adapter: string): boolean {
    return this.counts.has(adapter);
  }
}

export interface SignalSnapshot {
  readonly inFlight: number;
  readonly metrics: MetricsState;
  readonly waiting?: number;
  readonly running?: number;
  readonly kvCacheUsage?: number;
  readonly runningAdapters?: readonly string[];
  readonly waitingAdapters?: readonly string[];
  readonly scrapedAt?: string;
  readonly lastError?: string;
}

/** The cells, by address. Cells live as long as the address is in the view or has requests in flight. */
export class SignalBoard {
  private readonly cells = new Map<string, SignalCell>();
  readonly adapters = new AdapterIndex();

  cell(address: string): SignalCell {
    let cell = this.cells.get(address);
    if (cell === undefined) this.cells.set(address, (cell = new SignalCell(address, this.adapters)));
    return cell;
  }

  peek(address: string): SignalCell | undefined {
    return this.cells.get(address);
  }

  /** Drops cells of addresses that left the view and carry no in-flight request. */
  retainOnly(addresses: ReadonlySet<string>): void {
    for (const [address, cell] of this.cells) {
      if (addresses.has(address) || cell.inFlight > 0) continue;
      cell.metricsState = 'missing';
      this.cells.delete(address);
    }
  }

  all(): IterableIterator<SignalCell> {
    return this.cells.values();
  }

  /** For /debug/endpoints. */
  snapshot(address: string): SignalSnapshot {
    const cell = this.cells.get(address);
    if (cell === undefined) return { inFlight: 0, metrics: 'missing' };
    const load = cell.load;
    return {
      inFlight: cell.inFlight,
      metrics: cell.metricsState,
      ...(load === undefined
        ? {}
        : {
            waiting: load.waiting,
            running: load.running,
            ...(load.kvCacheUsage === undefined ? {} : { kvCacheUsage: load.kvCacheUsage }),
            runningAdapters: load.runningAdapters,
            waitingAdapters: load.waitingAdapters,
          }),
      ...(cell.scrapedAt === 0 ? {} : { scrapedAt: new Date(cell.scrapedAt).toISOString() }),
      ...(cell.lastError === '' ? {} : { lastError: cell.lastError }),
    };
  }
}

/** Stores a good scrape in the cell. */
export function recordScrape(cell: SignalCell, load: ServerLoad, at: number): void {
  cell.load = load;
  cell.waiting = load.waiting;
  cell.running = load.running;
  cell.kvCacheUsage = load.kvCacheUsage ?? Number.NaN;
  cell.scrapedAt = at;
  cell.lastError = '';
  cell.adapters =
    load.runningAdapters.length + load.waitingAdapters.length === 0
      ? EMPTY_SET
      : new Set([...load.runningAdapters, ...load.waitingAdapters]);
  cell.metricsState = 'fresh';
}

/** A failed scrape: the old report is kept for display but no longer counts. */
export function recordScrapeFailure(cell: SignalCell, reason: string): void {
  cell.metricsState = 'failing';
  cell.lastError = reason;
}

/** A fresh report older than `staleAfterMs` stops counting. */
export function markStaleIfOld(cell: SignalCell, now: number, staleAfterMs: number): void {
  if (cell.metricsState === 'fresh' && now - cell.scrapedAt > staleAfterMs) cell.metricsState = 'stale';
}
