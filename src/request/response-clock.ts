// When a request's output arrived, for time to first token and inter-token latency. Fed with the
// arrival time of each ext_proc message that the processor already reads for its own timing, and
// with the SSE inspector's count of content events after it: a chunk that added none costs one
// comparison, one that did costs a subtraction. Also llm-d's inter-token latency: each gap between
// consecutive non-empty body chunks (not content events: llm-d times chunks), held in bucket counts
// rather than a list of times. Times are performance.now() milliseconds.

import { chunkGapTally } from '../metrics/llm-d-series.js';
import type { HeldObservations } from '../metrics/counting-histogram.js';

/** What the clock measured for one request; undefined where there was nothing to measure. */
export interface ResponseTimes {
  /** Pick → first content event, in seconds. */
  readonly timeToFirstToken: number | undefined;
  /** Mean gap between content events after the first, in seconds (needs two content chunks). */
  readonly interTokenLatency: number | undefined;
  /** First content event → last, in seconds (0 with one content chunk); undefined without content. */
  readonly generation: number | undefined;
  /** Each gap between consecutive non-empty body chunks, in seconds (empty with fewer than two). */
  readonly chunkGaps: HeldObservations;
}

export class ResponseClock {
  readonly #pickedAt: number | undefined;
  #firstAt = 0;
  #lastAt = 0;
  #events = 0;
  /** Content events counted when the first content chunk arrived (a chunk may carry several). */
  #firstEvents = 0;
  #lastChunkAt: number | undefined;
  readonly #chunkGaps = chunkGapTally();

  /**
   * `pickedAt`: when the request was routed (the first pick: TTFT is what the client waited);
   * undefined when it never was, and then there is no TTFT.
   */
  constructor(pickedAt: number | undefined) {
    this.#pickedAt = pickedAt;
  }

  /** After a chunk that arrived at `now`, the stream's inspector has counted `events` content events. */
  contentSeen(events: number, now: number): void {
    if (events === this.#events) return;
    if (this.#events === 0) {
      this.#firstAt = now;
      this.#firstEvents = events;
    }
    this.#lastAt = now;
    this.#events = events;
  }

  /** A body chunk with bytes arrived at `now`. */
  chunkSeen(now: number): void {
    if (this.#lastChunkAt !== undefined) this.#chunkGaps.observe((now - this.#lastChunkAt) / 1e3);
    this.#lastChunkAt = now;
  }

  times(): ResponseTimes {
    const picked = this.#pickedAt;
    const gaps = this.#events - this.#firstEvents;
    return {
      timeToFirstToken: picked === undefined || this.#events === 0 ? undefined : (this.#firstAt - picked) / 1e3,
      interTokenLatency: gaps > 0 ? (this.#lastAt - this.#firstAt) / 1e3 / gaps : undefined,
      generation: this.#events === 0 ? undefined : (this.#lastAt - this.#firstAt) / 1e3,
      chunkGaps: this.#chunkGaps,
    };
  }
}
