// In-flight request counts per endpoint address: the load signal the picker reads. Owned by the
// data path; a request holds its slot from routing until its ext_proc stream ends, whatever the outcome.

import type { PickSignals } from './pick.js';

export class LoadTracker implements PickSignals {
  private readonly counts = new Map<string, number>();

  inFlight(address: string): number {
    return this.counts.get(address) ?? 0;
  }

  acquire(address: string): void {
    this.counts.set(address, this.inFlight(address) + 1);
  }

  release(address: string): void {
    const next = this.inFlight(address) - 1;
    if (next > 0) this.counts.set(address, next);
    else this.counts.delete(address);
  }
}
