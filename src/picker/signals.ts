// Per-endpoint load signals. The numbers the picker reads on every request live in typed-array
// columns owned by the board, one slot per address (struct of arrays): a pick over 10,000
// candidates then streams through a few dense arrays instead of visiting 10,000 scattered objects.
// Each address also has a SignalCell, the handle the writers use and the home of what the picker
// never reads (the last report for display, when it was taken, the last error). Two writers, each
// owning its own signals: the load tracker (our in-flight count) and the metrics scraper (what
// the model server reports about itself).

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

/**
 * The picker's inputs, one element per slot. Replaced by a larger copy when the board grows, so
 * read `board.columns` afresh for each pick (after compiling candidates, which may add slots).
 */
export class SignalColumns {
  /** Requests we routed here that have not finished. */
  readonly inFlight: Int32Array;
  /**
   * 1 while the metrics state is `fresh` with a report: only then do the numbers below count.
   * A stale, failing or missing scrape reads 0 here, so it never looks idle.
   */
  readonly reporting: Uint8Array;
  readonly waiting: Float64Array;
  readonly running: Float64Array;
  /** NaN when the server does not report it. */
  readonly kvCacheUsage: Float64Array;
  /** How many LoRA adapters the server runs or loads. */
  readonly adapterCount: Int32Array;
  /** The server's own `max_lora`; Infinity when it does not say. */
  readonly maxAdapters: Float64Array;
  /** Scratch for one pick: equals the pick's stamp where the server holds the requested adapter. */
  readonly adapterMark: Uint32Array;

  constructor(readonly capacity: number, from?: SignalColumns) {
    this.inFlight = new Int32Array(capacity);
    this.reporting = new Uint8Array(capacity);
    this.waiting = new Float64Array(capacity);
    this.running = new Float64Array(capacity);
    this.kvCacheUsage = new Float64Array(capacity).fill(Number.NaN);
    this.adapterCount = new Int32Array(capacity);
    this.maxAdapters = new Float64Array(capacity).fill(Number.POSITIVE_INFINITY);
    this.adapterMark = new Uint32Array(capacity);
    if (from !== undefined) {
      this.inFlight.set(from.inFlight);
      this.reporting.set(from.reporting);
      this.waiting.set(from.waiting);
      this.running.set(from.running);
      this.kvCacheUsage.set(from.kvCacheUsage);
      this.adapterCount.set(from.adapterCount);
      this.maxAdapters.set(from.maxAdapters);
      this.adapterMark.set(from.adapterMark);
    }
  }

  /** Back to the state of a never-seen address. */
  reset(slot: number): void {
    this.inFlight[slot] = 0;
    this.reporting[slot] = 0;
    this.waiting[slot] = 0;
    this.running[slot] = 0;
    this.kvCacheUsage[slot] = Number.NaN;
    this.adapterCount[slot] = 0;
    this.maxAdapters[slot] = Number.POSITIVE_INFINITY;
    this.adapterMark[slot] = 0;
  }
}

/** No slot: the cell left the board (its address left the view with nothing in flight). */
const DETACHED = -1;

/** One address's signals: its slot in the board's columns, and what the picker never reads. */
export class SignalCell {
  private state: MetricsState = 'missing';
  /** Last good report; kept while stale/failing for /debug/endpoints, never used for picking then. */
  load: ServerLoad | undefined = undefined;
  /** When `load` was scraped (ms since epoch), 0 = never. */
  scrapedAt = 0;
  /** Short reason of the last failed scrape. */
  lastError = '';
  /** `runningAdapters ∪ waitingAdapters` of the last report. */
  adapters: ReadonlySet<string> = EMPTY_SET;

  /** The adapters this cell has counted in the board's index (only while reporting). */
  private counted: ReadonlySet<string> = EMPTY_SET;

  constructor(
    readonly address: string,
    private readonly board: SignalBoard,
    /** Index into the board's columns; DETACHED once the board dropped the cell. */
    private slotIndex: number,
  ) {}

  get slot(): number {
    return this.slotIndex;
  }

  /** Requests we routed here that have not finished. */
  get inFlight(): number {
    return this.slotIndex === DETACHED ? 0 : this.board.columns.inFlight[this.slotIndex];
  }

  set inFlight(count: number) {
    if (this.slotIndex !== DETACHED) this.board.columns.inFlight[this.slotIndex] = count;
  }

  get metricsState(): MetricsState {
    return this.state;
  }

  set metricsState(state: MetricsState) {
    this.state = state;
    const reporting = state === 'fresh' && this.load !== undefined;
    if (this.slotIndex !== DETACHED) this.board.columns.reporting[this.slotIndex] = reporting ? 1 : 0;
    this.recount(reporting ? this.adapters : EMPTY_SET);
  }

  /** The server's report, only when fresh: a stale, failing or missing scrape never reads as idle. */
  usableLoad(): ServerLoad | undefined {
    return this.metricsState === 'fresh' ? this.load : undefined;
  }

  /** Stores a good report's numbers in the columns (the state is set by the caller). */
  storeReport(load: ServerLoad): void {
    this.load = load;
    this.adapters =
      load.runningAdapters.length + load.waitingAdapters.length === 0
        ? EMPTY_SET
        : new Set([...load.runningAdapters, ...load.waitingAdapters]);
    if (this.slotIndex === DETACHED) return;
    const columns = this.board.columns;
    const slot = this.slotIndex;
    columns.waiting[slot] = load.waiting;
    columns.running[slot] = load.running;
    columns.kvCacheUsage[slot] = load.kvCacheUsage ?? Number.NaN;
    columns.adapterCount[slot] = this.adapters.size;
    columns.maxAdapters[slot] = load.maxAdapters ?? Number.POSITIVE_INFINITY;
  }

  /** Called by the board when it drops the cell: the slot goes back to the board for reuse. */
  detach(): void {
    this.metricsState = 'missing';
    this.slotIndex = DETACHED;
  }

  /** Keeps the board's adapter index equal to the adapters of reporting cells. */
  private recount(now: ReadonlySet<string>): void {
    if (now === this.counted) return;
    for (const adapter of this.counted) this.board.adapters.remove(adapter, this.slotIndex);
    if (this.slotIndex !== DETACHED) for (const adapter of now) this.board.adapters.add(adapter, this.slotIndex);
    this.counted = this.slotIndex === DETACHED ? EMPTY_SET : now;
  }
}

const EMPTY_SET: ReadonlySet<string> = new Set();

/**
 * Which reporting endpoints (by slot) run or load each adapter: lets the picker tell in O(1)
 * whether a requested model is a LoRA adapter anyone has, and mark its holders without asking
 * every candidate.
 */
export class AdapterIndex {
  private readonly holders = new Map<string, Set<number>>();

  add(adapter: string, slot: number): void {
    let slots = this.holders.get(adapter);
    if (slots === undefined) this.holders.set(adapter, (slots = new Set()));
    slots.add(slot);
  }

  remove(adapter: string, slot: number): void {
    const slots = this.holders.get(adapter);
    if (slots === undefined) return;
    slots.delete(slot);
    if (slots.size === 0) this.holders.delete(adapter);
  }

  has(adapter: string): boolean {
    return this.holders.has(adapter);
  }

  slotsOf(adapter: string): ReadonlySet<number> {
    return this.holders.get(adapter) ?? NO_SLOTS;
  }
}

const NO_SLOTS: ReadonlySet<number> = new Set();

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
  private readonly freeSlots: number[] = [];
  private used = 0;
  private stamp = 0;
  readonly adapters = new AdapterIndex();
  columns = new SignalColumns(16);
  /**
   * Counts slot releases: a slot may be reused for another address afterwards, so whoever keeps
   * slot numbers (the picker's compiled candidates) looks them up again when this changes.
   */
  layoutVersion = 0;

  cell(address: string): SignalCell {
    let cell = this.cells.get(address);
    if (cell === undefined) this.cells.set(address, (cell = new SignalCell(address, this, this.takeSlot())));
    return cell;
  }

  peek(address: string): SignalCell | undefined {
    return this.cells.get(address);
  }

  /** Drops cells of addresses that left the view and carry no in-flight request. */
  retainOnly(addresses: ReadonlySet<string>): void {
    for (const [address, cell] of this.cells) {
      if (addresses.has(address) || cell.inFlight > 0) continue;
      const slot = cell.slot;
      cell.detach();
      this.columns.reset(slot);
      this.freeSlots.push(slot);
      this.cells.delete(address);
      this.layoutVersion++;
    }
  }

  all(): IterableIterator<SignalCell> {
    return this.cells.values();
  }

  /**
   * Stamps `columns.adapterMark` at the slots of the reporting endpoints that hold `adapter`;
   * returns the stamp (each call a new one, so old marks never need clearing).
   */
  markHolders(adapter: string): number {
    if (this.stamp === 0xffffffff) {
      this.columns.adapterMark.fill(0);
      this.stamp = 0;
    }
    const stamp = ++this.stamp;
    const marks = this.columns.adapterMark;
    for (const slot of this.adapters.slotsOf(adapter)) marks[slot] = stamp;
    return stamp;
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

  private takeSlot(): number {
    const free = this.freeSlots.pop();
    if (free !== undefined) return free;
    if (this.used === this.columns.capacity) this.columns = new SignalColumns(this.columns.capacity * 2, this.columns);
    return this.used++;
  }
}

/** Stores a good scrape in the cell. */
export function recordScrape(cell: SignalCell, load: ServerLoad, at: number): void {
  cell.storeReport(load);
  cell.scrapedAt = at;
  cell.lastError = '';
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
