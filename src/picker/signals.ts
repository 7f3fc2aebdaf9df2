// Per-endpoint load signals. The numbers the picker reads on every request live in one Float64Array
// owned by the board, a fixed-size record per address (its slot): a pick over 10,000 candidates
// then streams through one dense array instead of visiting 10,000 scattered objects.
// Each address also has a SignalCell, the handle the writers use and the home of what the picker
// never reads (the last report for display, when it was taken, the last error). Two writers, each
// owning its own signals: the load tracker (our in-flight count) and the metrics scraper (what
// the model server reports about itself). They meet here: a report is stored with our in-flight
// count at that moment, so that the picker can tell our share of the reported load (which it
// knows live) from everyone else's (which only the next scrape updates).

import { observedBatchLimit, othersLoad, othersWaiting, type PrefillCosts } from './scorers.js';

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
  /** The prefix cache's capacity in blocks (vLLM `cache_config_info{num_gpu_blocks}`), when reported. */
  readonly cacheBlocks?: number;
  /** Tokens per cache block (vLLM `cache_config_info{block_size}`), when reported. */
  readonly cacheBlockSize?: number;
}

/**
 * The picker's inputs: one record of `Field.Stride` numbers per slot in one Float64Array, so a
 * candidate's signals sit together and the picker's loops index a single array.
 */
export const enum Field {
  /** Requests we routed here that have not finished. */
  InFlight = 0,
  /**
   * 1 while the metrics state is `fresh` with a report: only then do the numbers below count. A
   * stale, failing or missing scrape reads 0 here, so it never looks idle.
   */
  Reporting = 1,
  Waiting = 2,
  /**
   * The reported outstanding requests (waiting + running) beyond ours in flight to the server when
   * the report was taken: what other llm-extproc replicas and other clients sent it (scorers.ts,
   * othersLoad). Our own share is read live from InFlight instead of from the report.
   */
  OthersLoad = 3,
  /** NaN when the server does not report it. */
  KvCacheUsage = 4,
  /**
   * The reported queue beyond ours in flight to the server when the report was taken
   * (scorers.ts, othersWaiting): the queue scorer's input. Waiting above is the whole queue, for
   * the pool's queue limit and flow control.
   */
  OthersWaiting = 5,
  /** How many requests the server runs at once, as its reports showed it (observedBatchLimit); NaN until one did. */
  BatchLimit = 6,
  // What every pick reads comes first; the LoRA fields after them, which only a LoRA pick reads.
  /** How many LoRA adapters the server runs or loads. */
  AdapterCount = 7,
  /** The server's own `max_lora`; Infinity when it does not say. */
  MaxAdapters = 8,
  /** Scratch for one pick: equals the pick's stamp where the server holds the requested adapter. */
  AdapterMark = 9,
  /** Numbers per record. */
  Stride = 10,
}

/** A slot's record as it is before anything is known. */
function resetRecord(signals: Float64Array, slot: number): void {
  const at = slot * Field.Stride;
  signals.fill(0, at, at + Field.Stride);
  signals[at + Field.KvCacheUsage] = Number.NaN;
  signals[at + Field.MaxAdapters] = Number.POSITIVE_INFINITY;
  signals[at + Field.BatchLimit] = Number.NaN;
}

/** Latency score of an endpoint as fast as its pool's median, or not measured yet. */
export const LATENCY_NEUTRAL = 1;
/**
 * Latency "score" of a replica demoted as much slower than its pool: ranked below every replica
 * that is not, while one of those has room in its batch (picker.ts).
 */
export const LATENCY_DEMOTED = -1;

/** No slot: the cell left the board (its address left the view with nothing in flight). */
const DETACHED = -1;

/** One address's signals: its record in the board's signals, and what the picker never reads. */
class SignalCell {
  private state: MetricsState = 'missing';
  /** Last good report; kept while stale/failing for /debug/endpoints, never used for picking then. */
  load: ServerLoad | undefined = undefined;
  /** When `load` was scraped (ms since epoch), 0 = never. */
  scrapedAt = 0;
  /** Our in-flight count here when `load` was stored: the part of the report that was ours. */
  inFlightAtReport = 0;
  /** Short reason of the last failed scrape. */
  lastError = '';
  /** `runningAdapters ∪ waitingAdapters` of the last report. */
  adapters: ReadonlySet<string> = EMPTY_SET;

  /** The adapters this cell has counted in the board's index (only while reporting). */
  private counted: ReadonlySet<string> = EMPTY_SET;

  constructor(
    readonly address: string,
    private readonly board: SignalBoard,
    /** Record number in the board's signals; DETACHED once the board dropped the cell. */
    private slotIndex: number,
  ) {}

  get slot(): number {
    return this.slotIndex;
  }

  /** How many requests the server runs at once, as its reports showed it (NaN: none has queued yet). */
  get batchLimit(): number {
    return this.slotIndex === DETACHED ? Number.NaN : this.board.signals[this.slotIndex * Field.Stride + Field.BatchLimit];
  }

  /** Requests we routed here that have not finished. */
  get inFlight(): number {
    return this.slotIndex === DETACHED ? 0 : this.board.signals[this.slotIndex * Field.Stride + Field.InFlight];
  }

  set inFlight(count: number) {
    if (this.slotIndex === DETACHED) return;
    this.board.signals[this.slotIndex * Field.Stride + Field.InFlight] = count;
    this.board.noteChange(this.slotIndex);
  }

  get metricsState(): MetricsState {
    return this.state;
  }

  set metricsState(state: MetricsState) {
    this.state = state;
    const reporting = state === 'fresh' && this.load !== undefined;
    if (this.slotIndex !== DETACHED) {
      this.board.signals[this.slotIndex * Field.Stride + Field.Reporting] = reporting ? 1 : 0;
      this.board.noteChange(this.slotIndex);
    }
    this.recount(reporting ? this.adapters : EMPTY_SET);
  }

  /** The server's report, only when fresh: a stale, failing or missing scrape never reads as idle. */
  usableLoad(): ServerLoad | undefined {
    return this.metricsState === 'fresh' ? this.load : undefined;
  }

  /**
   * Stores a good report's numbers in the board's signals (the state is set by the caller), with
   * our in-flight count now as the report's own share: the scrape answered just now, and our count
   * moves only when a request is routed or ends, so the two describe the same moment closely.
   */
  storeReport(load: ServerLoad): void {
    this.load = load;
    this.inFlightAtReport = this.inFlight;
    this.adapters =
      load.runningAdapters.length + load.waitingAdapters.length === 0
        ? EMPTY_SET
        : new Set([...load.runningAdapters, ...load.waitingAdapters]);
    if (this.slotIndex === DETACHED) return;
    const signals = this.board.signals;
    const at = this.slotIndex * Field.Stride;
    signals[at + Field.Waiting] = load.waiting;
    signals[at + Field.OthersLoad] = othersLoad(load.waiting, load.running, this.inFlightAtReport);
    signals[at + Field.OthersWaiting] = othersWaiting(load.waiting, this.inFlightAtReport);
    signals[at + Field.BatchLimit] = observedBatchLimit(signals[at + Field.BatchLimit], load.waiting, load.running);
    signals[at + Field.KvCacheUsage] = load.kvCacheUsage ?? Number.NaN;
    signals[at + Field.AdapterCount] = this.adapters.size;
    signals[at + Field.MaxAdapters] = load.maxAdapters ?? Number.POSITIVE_INFINITY;
    this.board.noteChange(this.slotIndex);
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
class AdapterIndex {
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
  /** How many requests the server runs at once, as its reports showed it (absent until one queued). */
  readonly batchLimit?: number;
  readonly scrapedAt?: string;
  readonly lastError?: string;
}

/** The cells, by address. Cells live as long as the address is in the view or has requests in flight. */
export class SignalBoard {
  private readonly cells = new Map<string, SignalCell>();
  private readonly freeSlots: number[] = [];
  private used = 0;
  private capacity = 16;
  private stamp = 0;
  readonly adapters = new AdapterIndex();
  /**
   * The picker's inputs, Field.Stride numbers per slot (the field offsets above). Replaced by a
   * larger copy when the board grows: read it afresh for each pick, after compiling candidates
   * (which may add slots).
   */
  signals = new Float64Array(this.capacity * Field.Stride);
  /**
   * Counts slot releases: a slot may be reused for another address afterwards, so whoever keeps
   * slot numbers (the picker's compiled candidates) looks them up again when this changes.
   */
  layoutVersion = 0;
  /**
   * The change log: slots whose InFlight, Reporting, Waiting, OthersLoad or KV-cache use may have changed, in
   * order, so that a reader keeping aggregates over some slots (the picker's candidate sets)
   * replays the changes it has not seen instead of re-reading every record. Bounded: when full it
   * starts over under a new epoch, and a reader from an older epoch re-reads everything.
   */
  private changes = new Int32Array(1024);
  /**
   * Latency scores per model (latency-tracker.ts writes them), indexed by slot like `signals`: a
   * score in [0, 1], or LATENCY_DEMOTED. Per model rather than a field of the record because one
   * server may serve several models (LoRA adapters) at different speeds. A slot past a table's end
   * is neutral (1).
   */
  private readonly latency = new Map<string, Float64Array>();
  /** Per pool, its measured cost figures (absent: not measured yet; the settings' defaults hold). */
  private readonly costs = new Map<string, PrefillCosts>();
  /** Entries in the change log this epoch. */
  changeCount = 0;
  changeEpoch = 0;

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
      resetRecord(this.signals, slot);
      // The slot may go to another address: it must not inherit this one's latency verdict.
      for (const table of this.latency.values()) if (slot < table.length) table[slot] = LATENCY_NEUTRAL;
      this.freeSlots.push(slot);
      this.cells.delete(address);
      this.layoutVersion++;
    }
  }

  /** Appends to the change log (signal writers call it after writing a slot's record). */
  noteChange(slot: number): void {
    if (this.changeCount === this.changes.length) {
      // Grow while the log is short next to the board (readers replay it rather than re-read
      // every record); past that, start over: readers re-read, at most once per log's worth of writes.
      if (this.changes.length < 4 * this.capacity) {
        const grown = new Int32Array(2 * this.changes.length);
        grown.set(this.changes);
        this.changes = grown;
      } else {
        this.changeCount = 0;
        this.changeEpoch++;
      }
    }
    this.changes[this.changeCount++] = slot;
  }

  /** The latency scores of `model` by slot, when any was written (read once per pick). */
  latencyTable(model: string): Float64Array | undefined {
    return this.latency.get(model);
  }

  /** Sets the latency score of `model` at `slot` (grows the model's table as needed). */
  setLatency(model: string, slot: number, value: number): void {
    let table = this.latency.get(model);
    if (table === undefined || slot >= table.length) {
      const grown = new Float64Array(Math.max(this.capacity, slot + 1)).fill(LATENCY_NEUTRAL);
      if (table !== undefined) grown.set(table);
      this.latency.set(model, (table = grown));
    }
    table[slot] = value;
  }

  /** A pool's measured cost figures, or undefined while not measured. */
  prefillCosts(pool: string): PrefillCosts | undefined {
    return this.costs.get(pool);
  }

  setPrefillCosts(pool: string, costs: PrefillCosts): void {
    this.costs.set(pool, costs);
  }

  /** The slot of change log entry `k` (0 ≤ k < changeCount). */
  changedSlot(k: number): number {
    return this.changes[k];
  }

  all(): IterableIterator<SignalCell> {
    return this.cells.values();
  }

  /**
   * Writes a new stamp into the AdapterMark field of the reporting endpoints that hold `adapter`
   * and returns it: each call a new stamp (exact up to 2^53), so old marks never need clearing.
   */
  markHolders(adapter: string): number {
    const stamp = ++this.stamp;
    const signals = this.signals;
    for (const slot of this.adapters.slotsOf(adapter)) signals[slot * Field.Stride + Field.AdapterMark] = stamp;
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
      ...(Number.isNaN(cell.batchLimit) ? {} : { batchLimit: cell.batchLimit }),
      ...(cell.scrapedAt === 0 ? {} : { scrapedAt: new Date(cell.scrapedAt).toISOString() }),
      ...(cell.lastError === '' ? {} : { lastError: cell.lastError }),
    };
  }

  private takeSlot(): number {
    // Released slots were reset when released.
    const free = this.freeSlots.pop();
    if (free !== undefined) return free;
    if (this.used === this.capacity) {
      this.capacity *= 2;
      const grown = new Float64Array(this.capacity * Field.Stride);
      grown.set(this.signals);
      this.signals = grown;
    }
    resetRecord(this.signals, this.used);
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
