// Precise prefix matching, started when the config asks for it (the app imports this module only
// then): the model's tokenizer loaded from its files, the index, and the subscriptions to every
// Ready server's KV events of the pools in precise mode, with what they report counted and
// logged. Returns what routing consults, and how to stop.

import type { Logger } from 'pino';
import type { EndpointView } from '../endpoints/model.js';
import type { PreciseSettings } from '../picker/settings.js';
import { FileTokenizer } from './file-tokenizer.js';
import { KvEventsSource } from './kv-events-source.js';
import type { ServerCache } from './kv-events-source.js';
import type { ApplyCounts } from './pod-blocks.js';
import { PrecisePrefix } from './precise-prefix.js';
import type { PickMode } from './precise-prefix.js';
import { PrefixIndex } from './prefix-index.js';
import type { EpisodeReason, PublisherPhase } from './publisher-state.js';

/** What is counted (metrics/kv-events-metrics.ts). */
export interface PreciseObserver {
  reportFrom(phases: () => Map<string, Map<PublisherPhase, number>>, sizes: () => Map<string, number>): void;
  episode(pool: string, reason: EpisodeReason): void;
  applied(pool: string, counts: ApplyCounts, events: number): void;
  dropped(pool: string, blocks: number): void;
  picked(pool: string, mode: PickMode): void;
}

export interface RunningPrecise {
  readonly precise: PrecisePrefix;
  readonly index: PrefixIndex;
  stop(): Promise<void>;
}

/** How often subscriptions follow the view and the index is ticked (silence, rebuilds): well within the one second a fallback may take. */
const TICK_MS = 250;

export async function startPrecise(
  settings: PreciseSettings,
  /** A pool's own publisher port, where it has one (picker.pools.<name>.kvEventsPort). */
  poolPort: (pool: string) => number | undefined,
  view: () => EndpointView,
  inPrecise: (pool: string) => boolean,
  cacheOf: (address: string) => ServerCache | undefined,
  observer: PreciseObserver,
  logger: Logger,
): Promise<RunningPrecise> {
  const log = logger.child({ component: 'kv-events' });
  const started = performance.now();
  const tokenizer = await FileTokenizer.shared(settings.tokenizerDir);
  log.info(
    { tokenizerDir: settings.tokenizerDir, chatTemplate: tokenizer.hasChatTemplate, loadMs: Math.round(performance.now() - started) },
    'precise prefix matching: tokenizer loaded',
  );
  const { events } = settings;
  const index = new PrefixIndex(
    { silenceMs: events.silenceMs, rebuildMs: events.rebuildMs, pendingMs: events.pendingMs },
    {
      episode: (pool, address, reason, detail) => {
        observer.episode(pool, reason);
        log.warn(
          { pool, endpoint: address, reason, detail },
          'KV events not trusted: picks fall back to approximate affinity for this server',
        );
      },
      recovered: (pool, address) => log.info({ pool, endpoint: address }, 'KV events trusted again: index rebuilt from new events'),
      applied: (pool, counts, count) => observer.applied(pool, counts, count),
      dropped: (pool, blocks) => observer.dropped(pool, blocks),
    },
  );
  observer.reportFrom(
    () => index.phases(),
    () => {
      const sizes = new Map<string, number>();
      for (const [pool, addresses] of poolsOf(index, view()))
        sizes.set(
          pool,
          addresses.reduce((sum, a) => sum + index.blocks(a), 0),
        );
      return sizes;
    },
  );
  const source = new KvEventsSource(
    index,
    view,
    {
      portOf: (pool) => poolPort(pool) ?? events.port,
      discover: events.discover,
      topic: events.topic,
      heartbeatMs: events.heartbeatMs,
      tickMs: TICK_MS,
    },
    inPrecise,
    cacheOf,
    {
      unreachable: (address, detail) =>
        log.warn({ endpoint: address, detail }, 'KV events: cannot subscribe to this server; it is picked as without events'),
    },
  );
  source.start();
  return {
    precise: new PrecisePrefix(index, tokenizer, { picked: (pool, mode) => observer.picked(pool, mode) }),
    index,
    stop: () => source.stop(),
  };
}

/** The followed addresses of each pool. */
function poolsOf(index: PrefixIndex, view: EndpointView): Map<string, string[]> {
  const followed = new Set(index.addresses());
  const out = new Map<string, string[]>();
  for (const pool of view.pools.values()) {
    const addresses = pool.endpoints.map((e) => e.address).filter((a) => followed.has(a));
    if (addresses.length > 0) out.set(pool.name, addresses);
  }
  return out;
}
