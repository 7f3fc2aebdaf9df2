// Counts for a prom-client Counter that is incremented on every request. prom-client's inc()
// validates and hashes the label object on every call (a bound child from labels() too); here a
// series is found by nested Map lookups of its label values, in label order, and an increment is
// one addition. The counts reach the Counter when it is collected (every scrape, the cluster
// aggregation, any get()), so what a scrape shows does not change.

import type { Counter } from 'prom-client';

interface Cell {
  readonly labels: Record<string, string>;
  pending: number;
  /** Not flushed yet: flushed even at zero, as prom-client shows a series inc()'d by 0. */
  fresh: boolean;
}

/** One series kept by its user (found once), counted into without any lookup. */
export interface CounterCell {
  add(amount: number): void;
}

type Level = Map<string, Level | Cell>;

export class CounterCells {
  private readonly root: Level = new Map();
  private readonly cells = new Set<Cell>();

  /** Label names in the order the values are passed to add(). */
  constructor(private readonly labelNames: readonly string[]) {}

  /**
   * Adds one to the series with these label values (as many as labelNames, in its order); true
   * when this created the series.
   */
  add(a: string, b?: string, c?: string, d?: string): boolean {
    const before = this.cells.size;
    this.cellOf(a, b, c, d).pending++;
    return this.cells.size !== before;
  }

  /** The series with these label values as a handle to keep (created on its first flush, even at zero). */
  cell(a: string, b?: string, c?: string, d?: string): CounterCell {
    const cell = this.cellOf(a, b, c, d);
    return {
      add(amount: number): void {
        cell.pending += amount;
      },
    };
  }

  private cellOf(a: string, b: string | undefined, c: string | undefined, d: string | undefined): Cell {
    let level: Level = this.root;
    let node: Level | Cell | undefined;
    const depth = this.labelNames.length;
    for (let i = 0; i < depth; i++) {
      const value = (i === 0 ? a : i === 1 ? b : i === 2 ? c : d) as string;
      node = level.get(value);
      if (node === undefined) {
        node = i === depth - 1 ? this.newCell(a, b, c, d) : new Map();
        level.set(value, node);
      }
      if (i < depth - 1) level = node as Level;
    }
    return node as Cell;
  }

  /** Forgets every series whose first label has this value (prom-client's remove() follows). */
  dropFirst(value: string): void {
    const node = this.root.get(value);
    if (node === undefined) return;
    this.root.delete(value);
    const stack: (Level | Cell)[] = [node];
    while (stack.length > 0) {
      const next = stack.pop() as Level | Cell;
      if (next instanceof Map) stack.push(...next.values());
      else this.cells.delete(next);
    }
  }

  /** Moves the counts into the Counter; call it from the Counter's collect(). */
  flushTo(counter: Counter<string>): void {
    for (const cell of this.cells) {
      if (cell.pending === 0 && !cell.fresh) continue;
      counter.inc(cell.labels, cell.pending);
      cell.pending = 0;
      cell.fresh = false;
    }
  }

  private newCell(a: string, b: string | undefined, c: string | undefined, d: string | undefined): Cell {
    const values = [a, b, c, d];
    const labels: Record<string, string> = {};
    this.labelNames.forEach((name, i) => (labels[name] = values[i] as string));
    const cell: Cell = { labels, pending: 0, fresh: true };
    this.cells.add(cell);
    return cell;
  }
}
