// The waiting requests of one pool while it is saturated: bounded queues by priority, fair between
// tenants inside a priority. Pure: values in, values out; time is a number the caller passes.
//
//   order      the highest priority first; inside a priority, tenants take turns (round robin
//              over the tenants with something waiting); inside a tenant, first come first served
//   bounds     at most `maxSize` entries and `maxBytes` of request bodies: beyond, enqueue refuses
//   deadlines  each entry carries its own; `expire(now)` takes out every entry past it
//
// Round robin gives every backlogged tenant of a priority the same number of dispatches, whatever
// each one sends: a tenant flooding the queue waits behind its own requests, not in front of the
// others'. Sizes are bounded (maxSize), so removal by search is cheap enough.

export interface QueueEntry<T> {
  readonly value: T;
  /** Higher first; below zero is sheddable (the caller never queues those). */
  readonly priority: number;
  readonly tenant: string;
  /** Request bytes the entry holds (the memory bound). */
  readonly bytes: number;
  /** When it joined, and when it must leave, in the caller's clock (ms). */
  readonly enqueuedAt: number;
  readonly deadline: number;
}

export interface QueueLimits {
  readonly maxSize: number;
  readonly maxBytes: number;
}

/** One priority: a FIFO per tenant and the turn order of the tenants with something waiting. */
class Band<T> {
  readonly fifos = new Map<string, QueueEntry<T>[]>();
  /** Tenants with entries, in turn order; `turn` is the index of the next one to serve. */
  readonly ring: string[] = [];
  turn = 0;
  size = 0;

  constructor(readonly priority: number) {}

  add(entry: QueueEntry<T>): void {
    let fifo = this.fifos.get(entry.tenant);
    if (fifo === undefined) {
      this.fifos.set(entry.tenant, (fifo = []));
      // A tenant that starts waiting joins at the end of the round.
      this.ring.push(entry.tenant);
    }
    fifo.push(entry);
    this.size++;
  }

  head(): QueueEntry<T> | undefined {
    if (this.size === 0) return undefined;
    return this.fifos.get(this.ring[this.turn])?.[0];
  }

  /** Takes the head out and passes the turn to the next tenant. */
  shift(): QueueEntry<T> | undefined {
    if (this.size === 0) return undefined;
    const tenant = this.ring[this.turn];
    const fifo = this.fifos.get(tenant);
    const entry = fifo?.shift();
    if (fifo === undefined || entry === undefined) return undefined;
    this.size--;
    if (fifo.length === 0) this.dropTenant(this.turn);
    else this.turn = (this.turn + 1) % this.ring.length;
    return entry;
  }

  remove(entry: QueueEntry<T>): boolean {
    const fifo = this.fifos.get(entry.tenant);
    const at = fifo === undefined ? -1 : fifo.indexOf(entry);
    if (fifo === undefined || at < 0) return false;
    fifo.splice(at, 1);
    this.size--;
    if (fifo.length === 0) this.dropTenant(this.ring.indexOf(entry.tenant));
    return true;
  }

  /** Takes out the entries past their deadline, in queue order per tenant. */
  expire(now: number, out: QueueEntry<T>[]): void {
    for (const [tenant, fifo] of this.fifos) {
      let kept = 0;
      for (const entry of fifo) {
        if (entry.deadline <= now) out.push(entry);
        else fifo[kept++] = entry;
      }
      if (kept === fifo.length) continue;
      this.size -= fifo.length - kept;
      fifo.length = kept;
      if (kept === 0) this.dropTenant(this.ring.indexOf(tenant));
    }
  }

  /** The tenant at `index` has nothing left: out of the ring, the turn staying with whoever was next. */
  private dropTenant(index: number): void {
    const tenant = this.ring[index];
    this.fifos.delete(tenant);
    this.ring.splice(index, 1);
    if (index < this.turn) this.turn--;
    if (this.turn >= this.ring.length) this.turn = 0;
  }
}

export class FlowQueue<T> {
  /** Non-empty bands, highest priority first (a handful: priorities are configured classes). */
  private readonly bands: Band<T>[] = [];
  private count = 0;
  private held = 0;

  constructor(private readonly limits: QueueLimits) {}

  get size(): number {
    return this.count;
  }

  get bytes(): number {
    return this.held;
  }

  /** Whether an entry of `bytes` would fit now. */
  hasRoomFor(bytes: number): boolean {
    return this.count < this.limits.maxSize && this.held + bytes <= this.limits.maxBytes;
  }

  /** Adds the entry; false (and nothing changes) when the queue is full. */
  enqueue(entry: QueueEntry<T>): boolean {
    if (!this.hasRoomFor(entry.bytes)) return false;
    let at = 0;
    while (at < this.bands.length && this.bands[at].priority > entry.priority) at++;
    let band = this.bands[at];
    if (band === undefined || band.priority !== entry.priority) this.bands.splice(at, 0, (band = new Band<T>(entry.priority)));
    band.add(entry);
    this.count++;
    this.held += entry.bytes;
    return true;
  }

  /** The entry `dequeue` would take, left in place. */
  peek(): QueueEntry<T> | undefined {
    return this.bands[0]?.head();
  }

  dequeue(): QueueEntry<T> | undefined {
    const band = this.bands[0];
    const entry = band?.shift();
    if (band === undefined || entry === undefined) return undefined;
    if (band.size === 0) this.bands.shift();
    this.taken(entry);
    return entry;
  }

  /** Takes out an entry that leaves early (its client hung up); false when it is not queued. */
  remove(entry: QueueEntry<T>): boolean {
    const index = this.bands.findIndex((band) => band.priority === entry.priority);
    const band = this.bands[index];
    if (band === undefined || !band.remove(entry)) return false;
    if (band.size === 0) this.bands.splice(index, 1);
    this.taken(entry);
    return true;
  }

  /** Takes out and returns every entry whose deadline is at or before `now`. */
  expire(now: number): QueueEntry<T>[] {
    const out: QueueEntry<T>[] = [];
    for (const band of this.bands) band.expire(now, out);
    for (let i = this.bands.length - 1; i >= 0; i--) if (this.bands[i].size === 0) this.bands.splice(i, 1);
    for (const entry of out) this.taken(entry);
    return out;
  }

  /** The earliest deadline of any entry; Infinity when empty. */
  earliestDeadline(): number {
    let earliest = Number.POSITIVE_INFINITY;
    for (const band of this.bands)
      for (const fifo of band.fifos.values()) for (const entry of fifo) earliest = Math.min(earliest, entry.deadline);
    return earliest;
  }

  /** Waiting entries per priority and tenant (for the queue-length metric). */
  *lengths(): Generator<{ readonly priority: number; readonly tenant: string; readonly length: number }> {
    for (const band of this.bands) for (const [tenant, fifo] of band.fifos) yield { priority: band.priority, tenant, length: fifo.length };
  }

  private taken(entry: QueueEntry<T>): void {
    this.count--;
    this.held -= entry.bytes;
  }
}
