// Whether one model server's KV events can be trusted to say what its prefix cache holds: a pure
// state machine over what the subscriber sees (connections, sequence numbers, silence). While a
// server's index is not trusted, the picker treats that server as it would without events
// (approximate prefix affinity), and the episode that made it so is counted and logged once.
//
//   connecting ──ZMTP handshake done (what it publishes from now on reaches us)──────▶ subscribed
//   subscribed ──first batch seq 0 (a fresh engine: we saw all of it)────────────────▶ trusted
//   subscribed ──first batch seq > 0 (joined late: what it cached before is unknown)─▶ rebuilding
//   trusted    ──seq ≤ last (the engine restarted; it sends no AllBlocksCleared)─────▶ drop: trusted at seq 0, else rebuilding
//   trusted    ──seq > last + 1 (a gap: batches lost)────────────────────────────────▶ drop: rebuilding
//   trusted    ──a message that does not decode──────────────────────────────────────▶ drop: rebuilding
//   any        ──disconnected (the TCP path closed, or ZMTP heartbeats went unanswered)▶ drop: down
//   trusted    ──silent: requests that must make it store blocks, and no batch within
//                silenceMs──────────────────────────────────────────────────────────▶ drop: down
//   down       ──next batch───────────────────────────────────────────────────────────▶ rebuilding (trusted if seq 0)
//   rebuilding ──rebuildMs of contiguous batches without an episode───────────────────▶ trusted
//   any        ──AllBlocksCleared (the cache is empty: the index is exact again)──────▶ trusted
//
// "Drop" empties the server's entries (the caller does it); rebuilding applies new events from an
// empty index while the server may still hold blocks we never saw, so it is not trusted until
// rebuildMs of new events have refilled what is in use.

export type PublisherPhase = 'connecting' | 'subscribed' | 'trusted' | 'rebuilding' | 'down';

/** Why a server's index stopped being trusted (the `reason` label of the episode counter). */
export type EpisodeReason = 'gap' | 'restart' | 'disconnected' | 'silent' | 'bad_message';

export interface PublisherTimings {
  /** A server that should have stored blocks and published nothing for this long is silent. */
  readonly silenceMs: number;
  /** New events for this long, without an episode, before a rebuilt index is trusted again. */
  readonly rebuildMs: number;
}

/** What the caller must do after an input. */
export interface Verdict {
  /** Empty this server's entries (before applying the batch, if there is one). */
  readonly drop: boolean;
  /** Apply the batch's events (false only for inputs that carry none). */
  readonly apply: boolean;
  /** An episode starts now (count it, log it once). */
  readonly episode?: EpisodeReason;
  /** The index is trusted again after an episode (log it). */
  readonly recovered?: boolean;
}

const NOTHING: Verdict = { drop: false, apply: false };

export class PublisherState {
  private state: PublisherPhase = 'connecting';
  private last: bigint | undefined;
  private rebuildingSince = 0;
  /** When a request was sent that must make the server publish, and nothing came since; 0 = none. */
  private expectedSince = 0;
  /** An episode is open: it was counted and logged, and ends when the index is trusted again. */
  private inEpisode = false;

  constructor(private readonly timings: PublisherTimings) {}

  get phase(): PublisherPhase {
    return this.state;
  }

  /** Whether the index says what the server holds (the picker may use it). */
  get trusted(): boolean {
    return this.state === 'trusted';
  }

  /** A batch arrived with sequence number `seq`; `cleared`: it holds an AllBlocksCleared. */
  batch(seq: bigint, cleared: boolean, now: number): Verdict {
    this.expectedSince = 0;
    const last = this.last;
    this.last = seq;
    let episode: EpisodeReason | undefined;
    let drop = false;
    let fresh = seq === 0n;
    if (this.state === 'down' || this.state === 'connecting' || this.state === 'subscribed') {
      // Nothing to drop: the entries went when it went down (or there were none yet).
    } else if (last !== undefined && seq <= last) {
      episode = 'restart';
      drop = true;
    } else if (last !== undefined && seq > last + 1n) {
      episode = 'gap';
      drop = true;
      fresh = false;
    } else if (this.state === 'rebuilding') {
      fresh = false;
    }
    if (cleared) fresh = true;
    if (fresh || (this.state === 'trusted' && !drop))
      return this.trust({ drop, apply: true, ...(episode === undefined ? {} : { episode }) });
    if (this.state !== 'rebuilding' || drop) this.rebuildingSince = now;
    this.state = 'rebuilding';
    return this.opened({ drop, apply: true, ...(episode === undefined ? {} : { episode }) });
  }

  /** The ZMTP handshake with the publisher completed (the first connect, or a reconnect). */
  connected(): void {
    if (this.state === 'connecting') this.state = 'subscribed';
  }

  /** A message that did not decode: its events are lost. */
  badMessage(now: number): Verdict {
    this.expectedSince = 0;
    const was = this.state;
    if (was === 'down' || was === 'connecting' || was === 'subscribed') return NOTHING;
    this.state = 'rebuilding';
    this.rebuildingSince = now;
    return this.opened({ drop: true, apply: false, episode: 'bad_message' });
  }

  /** The connection to the publisher closed (or its heartbeats went unanswered). */
  disconnected(): Verdict {
    this.expectedSince = 0;
    const was = this.state;
    if (was === 'connecting' || was === 'subscribed') {
      this.state = 'connecting';
      return NOTHING;
    }
    this.state = 'down';
    if (was === 'down') return NOTHING;
    return this.opened({ drop: true, apply: false, episode: 'disconnected' });
  }

  /** A request went to the server whose prompt has whole blocks the index says it lacks: it will store and publish them. */
  expectPublish(now: number): void {
    if (this.state === 'trusted' && this.expectedSince === 0) this.expectedSince = now;
  }

  /** Time passes: a silent publisher, or a rebuild that has lasted long enough. */
  tick(now: number): Verdict {
    if (this.state === 'trusted' && this.expectedSince !== 0 && now - this.expectedSince > this.timings.silenceMs) {
      this.expectedSince = 0;
      this.state = 'down';
      return this.opened({ drop: true, apply: false, episode: 'silent' });
    }
    if (this.state === 'rebuilding' && now - this.rebuildingSince >= this.timings.rebuildMs) return this.trust(NOTHING);
    return NOTHING;
  }

  /**
   * The index is trusted (again). An open episode ends here, and a reason found on the way folds
   * into it; an episode that ends at once (a restart seen from its first batch) is still reported.
   */
  private trust(verdict: Verdict): Verdict {
    this.state = 'trusted';
    if (!this.inEpisode) return verdict;
    this.inEpisode = false;
    return { drop: verdict.drop, apply: verdict.apply, recovered: true };
  }

  /** An episode is reported only when none is open: once per episode, however many things go wrong in it. */
  private opened(verdict: Verdict): Verdict {
    if (verdict.episode === undefined) return verdict;
    if (this.inEpisode) return { drop: verdict.drop, apply: verdict.apply };
    this.inEpisode = true;
    return verdict;
  }
}
