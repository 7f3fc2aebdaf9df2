// When to ask V8 for a scavenge because dead Buffers pile up outside its heap (issue 34, the long
// prompt tail; measured in docs/benchmarks.md, "Memory").
//
// Every socket read is a fresh ArrayBuffer, and a long body is copied once more as its gRPC message
// is reassembled: a 1 MiB prompt leaves 2–4 MiB of Buffers that die as soon as it is answered. Their
// bytes live outside V8's heap, and V8 frees them only when a collection finds their small wrapper
// objects dead. A scavenge would, but scavenges come when the young generation fills, and a long
// prompt allocates next to nothing on the heap. Meanwhile V8 counts the external bytes allocated
// since the last full collection against the old generation's budget (a few MiB of slack over a
// 13 MiB heap), so every few 1 MiB prompts it starts a full mark-compact of a heap that holds no
// garbage: 20–50 ms of marking on the event loop, the tail that made a 1 MiB prompt's p90 three
// times its p50. A scavenge of our young generation (1-4 MiB per semi-space) takes a millisecond or
// less and frees those Buffers, so the budget is never reached for them.
//
// When: at the end of a stream (for ext_proc, a request), once enough was read since the last look.
// Then that request's Buffers are dead. A scavenge while a body is still arriving would find its
// buffer alive and copy it, and a second one would promote it to the old generation, where its
// bytes count against the budget again until a full collection: measured so, FULL_DUPLEX_STREAMED
// bodies (collected over many reads) kept their tail when scavenged on reads.
//
// Pure: the caller supplies the reading of V8's external memory, the scavenge and the scheduling.

/** What the servers tell about the bytes they read and the streams that end. */
export interface ReadGarbageObserver {
  /** `bytes` were read from a peer (each read a Buffer of its own, soon dead). */
  read(bytes: number): void;
  /** A stream ended: what it read is garbage now, unless another stream still holds it. */
  streamEnded(): void;
}

export interface ExternalGarbageOptions {
  /** Bytes read between two looks at V8's external memory (a look costs a heap-statistics call). */
  readonly lookEveryBytes: number;
  /** Growth of external memory over its least reading at a stream's end since the last scavenge that asks for one. */
  readonly growthBytes: number;
  /** V8's external memory now (`v8.getHeapStatistics().external_memory`). */
  readonly externalBytes: () => number;
  /** A young-generation collection. */
  readonly scavenge: () => void;
  /** Runs `task` once the work in hand is done (setImmediate): the stream ending still holds its Buffers. */
  readonly later: (task: () => void) => void;
}

/** Defaults measured on the long-prompt rows of `npm run bench` (docs/benchmarks.md, "Memory"). */
export const EXTERNAL_GARBAGE_DEFAULTS = { lookEveryBytes: 256 * 1024, growthBytes: 2 * 1024 * 1024 } as const;

export class ExternalGarbage implements ReadGarbageObserver {
  private unlooked = 0;
  /** The least external memory seen since the last scavenge we asked for: what is not garbage. */
  private low = Number.POSITIVE_INFINITY;
  private scheduled = false;
  /** Scavenges asked for so far. */
  scavenges = 0;

  constructor(private readonly options: ExternalGarbageOptions) {}

  read(bytes: number): void {
    this.unlooked += bytes;
  }

  streamEnded(): void {
    if (this.unlooked < this.options.lookEveryBytes) return;
    this.unlooked = 0;
    const external = this.options.externalBytes();
    if (external < this.low) this.low = external;
    // Bodies still in flight on other streams grow it too: a scavenge then frees little, and the
    // low point moves up with them, so the next one waits for as much growth again.
    if (this.scheduled || external - this.low < this.options.growthBytes) return;
    this.scheduled = true;
    this.options.later(this.collect);
  }

  private readonly collect = (): void => {
    this.scheduled = false;
    this.scavenges++;
    this.options.scavenge();
    // Learnt again at the next look, once the frees of this scavenge are counted.
    this.low = Number.POSITIVE_INFINITY;
  };
}
