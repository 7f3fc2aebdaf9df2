// What precise prefix matching reports (kv-cache/): the state of each server's KV-event
// publisher as we follow it, the episodes that made one untrusted (counted once each), the events
// applied, the blocks the index holds, and how each pick's primary was judged. Registered in the
// app's registry only when precise mode is on.

import { Counter, Gauge } from 'prom-client';
import type { Registry } from 'prom-client';
import type { ApplyCounts } from '../kv-cache/pod-blocks.js';
import type { PickMode } from '../kv-cache/precise-prefix.js';
import type { EpisodeReason, PublisherPhase } from '../kv-cache/publisher-state.js';

export class KvEventsMetrics {
  private readonly publishers: Gauge<'pool' | 'state'>;
  private readonly episodes: Counter<'pool' | 'reason'>;
  private readonly events: Counter<'pool'>;
  private readonly blocks: Counter<'pool' | 'change'>;
  private readonly indexed: Gauge<'pool'>;
  private readonly picks: Counter<'pool' | 'mode'>;
  private phases: () => Map<string, Map<PublisherPhase, number>> = () => new Map();
  private sizes: () => Map<string, number> = () => new Map();

  constructor(registry: Registry) {
    const registers = [registry];
    this.publishers = new Gauge({
      name: 'llm_extproc_kv_events_publishers',
      help: 'Model servers whose KV events we follow, by the state of their index: trusted (picks use it), rebuilding (after a gap, a restart not seen from its start, a lost connection: new events refill it before it is trusted), down (disconnected or silent), subscribed (connected, nothing received yet), connecting (not connected yet).',
      labelNames: ['pool', 'state'] as const,
      registers,
      collect: () => {
        this.publishers.reset();
        for (const [pool, byPhase] of this.phases()) for (const [state, count] of byPhase) this.publishers.set({ pool, state }, count);
      },
    });
    this.episodes = new Counter({
      name: 'llm_extproc_kv_events_episodes_total',
      help: "Times a server's KV events stopped being trusted, by reason (gap, restart, disconnected, silent, bad_message): its entries are dropped and its picks fall back to approximate affinity until it is trusted again. Counted once per episode.",
      labelNames: ['pool', 'reason'] as const,
      registers,
    });
    this.events = new Counter({
      name: 'llm_extproc_kv_events_received_total',
      help: 'KV events received and applied (BlockStored, BlockRemoved, AllBlocksCleared).',
      labelNames: ['pool'] as const,
      registers,
    });
    this.blocks = new Counter({
      name: 'llm_extproc_kv_events_blocks_total',
      help: 'Blocks entering and leaving the index: stored, removed (BlockRemoved), unmatchable (stored after a parent we never saw, or with extra hash keys), over_capacity (dropped to stay within num_gpu_blocks), dropped (a server untrusted or gone).',
      labelNames: ['pool', 'change'] as const,
      registers,
    });
    this.indexed = new Gauge({
      name: 'llm_extproc_kv_events_indexed_blocks',
      help: 'Blocks the index holds, per pool.',
      labelNames: ['pool'] as const,
      registers,
      collect: () => {
        this.indexed.reset();
        for (const [pool, size] of this.sizes()) this.indexed.set({ pool }, size);
      },
    });
    this.picks = new Counter({
      name: 'llm_extproc_kv_events_picks_total',
      help: 'Picks in precise mode by how their primary was judged: precise (from its own trusted KV events) or approximate (its events not trusted now, or the prompt not tokenizable here).',
      labelNames: ['pool', 'mode'] as const,
      registers,
    });
  }

  reportFrom(phases: () => Map<string, Map<PublisherPhase, number>>, sizes: () => Map<string, number>): void {
    this.phases = phases;
    this.sizes = sizes;
  }

  episode(pool: string, reason: EpisodeReason): void {
    this.episodes.inc({ pool, reason });
  }

  applied(pool: string, counts: ApplyCounts, events: number): void {
    if (events > 0) this.events.inc({ pool }, events);
    if (counts.stored > 0) this.blocks.inc({ pool, change: 'stored' }, counts.stored);
    if (counts.removed > 0) this.blocks.inc({ pool, change: 'removed' }, counts.removed);
    if (counts.unmatchable > 0) this.blocks.inc({ pool, change: 'unmatchable' }, counts.unmatchable);
    if (counts.overCapacity > 0) this.blocks.inc({ pool, change: 'over_capacity' }, counts.overCapacity);
  }

  dropped(pool: string, blocks: number): void {
    this.blocks.inc({ pool, change: 'dropped' }, blocks);
  }

  picked(pool: string, mode: PickMode): void {
    this.picks.inc({ pool, mode });
  }
}
