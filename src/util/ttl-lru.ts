// A bounded map with a sliding TTL: an entry lives `ttlMs` after it was last read or written, and
// past `capacity` entries the least recently used goes. A Map keeps insertion order, and every use
// moves its entry to the end, so the front is always the least recently used and the first to
// expire: expiry is checked on each read (an expired entry reads as absent) and swept from the
// front on each write, at O(1) amortised with no timer.

export type EvictionReason = 'ttl' | 'capacity';

interface Entry<V> {
  readonly value: V;
  readonly usedAt: number;
}

export class TtlLru<V> {
  private readonly entries = new Map<string, Entry<V>>();

  constructor(
    private readonly capacity: number,
    private readonly ttlMs: number,
    /** Milliseconds, monotonic. */
    private readonly now: () => number,
    private readonly evicted: (reason: EvictionReason) => void = () => undefined,
  ) {}

  get size(): number {
    return this.entries.size;
  }

  /** The value, if present and not expired; a hit counts as a use. */
  get(key: string): V | undefined {
    const entry = this.entries.get(key);
    if (entry === undefined) return undefined;
    const now = this.now();
    this.entries.delete(key);
    if (now - entry.usedAt >= this.ttlMs) {
      this.evicted('ttl');
      return undefined;
    }
    this.entries.set(key, { value: entry.value, usedAt: now });
    return entry.value;
  }

  set(key: string, value: V): void {
    const now = this.now();
    this.entries.delete(key);
    this.sweep(now);
    this.entries.set(key, { value, usedAt: now });
    while (this.entries.size > this.capacity) {
      const oldest = this.entries.keys().next();
      if (oldest.done === true) break;
      this.entries.delete(oldest.value);
      this.evicted('capacity');
    }
  }

  /** Drops expired entries from the front (the least recently used), stopping at the first live one. */
  private sweep(now: number): void {
    for (const [key, entry] of this.entries) {
      if (now - entry.usedAt < this.ttlMs) return;
      this.entries.delete(key);
      this.evicted('ttl');
    }
  }
}
