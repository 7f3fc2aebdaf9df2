// In-flight request counts per endpoint address: the load signal we know without asking anyone.
// Owned by the data path; a request holds its slot from routing until its ext_proc stream ends,
// whatever the outcome. The counts live in the signal board's records, which the picker reads.

import { SignalBoard } from './signals.js';

export class LoadTracker {
  constructor(readonly board: SignalBoard = new SignalBoard()) {}

  inFlight(address: string): number {
    return this.board.peek(address)?.inFlight ?? 0;
  }

  acquire(address: string): void {
    this.board.cell(address).inFlight++;
  }

  /** Never below zero: an extra release must not swallow a later acquire. */
  release(address: string): void {
    const cell = this.board.peek(address);
    if (cell !== undefined && cell.inFlight > 0) cell.inFlight--;
  }
}
