// Follows the KV events of every Ready model server of the pools in precise mode: one subscription
// per server (zmq-subscription.ts), opened when it becomes Ready and closed when it leaves, its
// events fed to the index (prefix-index.ts). Each llm-extproc replica subscribes for itself, so
// active-active needs no shared state. The publisher's address: the server's own IP and the
// configured port, or the port its `GET /kv_event_sources` names (vLLM: the endpoint it binds,
// `tcp://*:PORT`). A timer ticks the index (silence, rebuilds) and hands it each server's
// capacity (`num_gpu_blocks`) as its metrics report it.

import { request as httpRequest } from 'node:http';
import { isRoutable } from '../endpoints/model.js';
import type { EndpointView } from '../endpoints/model.js';
import { splitHostPort } from '../util/host-port.js';
import type { PrefixIndex } from './prefix-index.js';
import { ZmqSubscription } from './zmq-subscription.js';
import type { SubscriptionHandler } from './zmq-subscription.js';
import type { ServerLoad } from '../picker/signals.js';

export interface KvEventsSettings {
  /** The publisher's port on each server of a pool; undefined = ask the server (`discover`). */
  readonly portOf: (pool: string) => number | undefined;
  /** Ask each server's `GET /kv_event_sources` for its publisher's port (and topic). */
  readonly discover: boolean;
  /** Topic prefix to subscribe to ('' = every topic; vLLM's default topic is empty, the test bed's `kv@<model>`). */
  readonly topic: string;
  readonly heartbeatMs: number;
  /** How often the index is ticked and subscriptions follow the view. */
  readonly tickMs: number;
}

export interface KvEventsLog {
  /** A server whose publisher cannot be found (discovery failed): logged once per server until it works. */
  unreachable(address: string, detail: string): void;
}

interface Follow {
  readonly pool: string;
  subscription: ZmqSubscription | undefined;
  /** Opening (discovery, the library import) is under way. */
  opening: boolean;
  /** Discovery failed and was logged; cleared when it works. */
  reported: boolean;
  /** Closed: a late open must close what it opened. */
  closed: boolean;
}

/** What a server's metrics say of its cache: capacity in blocks, tokens per block. */
export type ServerCache = Pick<ServerLoad, 'cacheBlocks' | 'cacheBlockSize'>;

export class KvEventsSource {
  private readonly follows = new Map<string, Follow>();
  private timer: NodeJS.Timeout | undefined;
  private lastVersion = -1;

  constructor(
    private readonly index: PrefixIndex,
    private readonly view: () => EndpointView,
    private readonly settings: KvEventsSettings,
    /** Whether a pool is in precise mode. */
    private readonly precise: (pool: string) => boolean,
    /** A server's cache as its metrics last described it (undefined: unknown). */
    private readonly cacheOf: (address: string) => ServerCache | undefined,
    private readonly log: KvEventsLog,
    private readonly now: () => number = () => performance.now(),
  ) {}

  start(): void {
    if (this.timer !== undefined) return;
    this.sync();
    this.timer = setInterval(() => this.sync(), this.settings.tickMs);
    this.timer.unref();
  }

  async stop(): Promise<void> {
    if (this.timer !== undefined) clearInterval(this.timer);
    this.timer = undefined;
    const closing: Array<Promise<void>> = [];
    for (const [address, follow] of this.follows) closing.push(this.unfollow(address, follow));
    await Promise.all(closing);
  }

  /** Follows the view (when it changed), ticks the index, passes the servers' cache shapes on. */
  sync(): void {
    const view = this.view();
    if (view.version !== this.lastVersion) {
      this.lastVersion = view.version;
      const wanted = new Map<string, string>();
      for (const pool of view.pools.values()) {
        if (!this.precise(pool.name)) continue;
        for (const endpoint of pool.endpoints)
          if (isRoutable(endpoint) && !wanted.has(endpoint.address)) wanted.set(endpoint.address, pool.name);
      }
      for (const [address, follow] of this.follows) if (wanted.get(address) !== follow.pool) void this.unfollow(address, follow);
      for (const [address, pool] of wanted) if (!this.follows.has(address)) this.follow(address, pool);
    }
    for (const [address, follow] of this.follows) {
      if (follow.subscription === undefined && !follow.opening) void this.open(address, follow);
      const cache = this.cacheOf(address);
      if (cache?.cacheBlocks !== undefined) this.index.capacity(address, cache.cacheBlocks);
      if (cache?.cacheBlockSize !== undefined) this.index.blockSize(address, cache.cacheBlockSize);
    }
    this.index.tick(this.now());
  }

  private follow(address: string, pool: string): void {
    this.index.follow(address, pool);
    const follow: Follow = { pool, subscription: undefined, opening: false, reported: false, closed: false };
    this.follows.set(address, follow);
    void this.open(address, follow);
  }

  private async unfollow(address: string, follow: Follow): Promise<void> {
    follow.closed = true;
    this.follows.delete(address);
    this.index.forget(address);
    await follow.subscription?.close();
  }

  private async open(address: string, follow: Follow): Promise<void> {
    follow.opening = true;
    try {
      const { host } = splitHostPort(address);
      const port = this.settings.portOf(follow.pool);
      const found = port === undefined && this.settings.discover ? await discover(address) : { port, topic: undefined };
      if (found.port === undefined) throw new Error('no publisher port (set picker.precise.events.port, or discover: true)');
      if (follow.closed) return;
      const handler: SubscriptionHandler = {
        connected: () => this.index.connected(address),
        disconnected: (detail) => this.index.disconnected(address, detail),
        batch: (batch) => this.index.batch(address, batch, this.now()),
        bad: (reason) => this.index.badMessage(address, reason, this.now()),
      };
      const subscription = await ZmqSubscription.open(
        {
          endpoint: `tcp://${host.includes(':') ? `[${host}]` : host}:${found.port}`,
          topic: found.topic ?? this.settings.topic,
          heartbeatMs: this.settings.heartbeatMs,
        },
        handler,
      );
      if (follow.closed) {
        await subscription.close();
        return;
      }
      follow.subscription = subscription;
      follow.reported = false;
    } catch (err) {
      if (!follow.reported) this.log.unreachable(address, err instanceof Error ? err.message : String(err));
      follow.reported = true;
    } finally {
      follow.opening = false;
    }
  }
}

/** What a vLLM server says of its publisher: the port of the endpoint it binds (rank 0), and its topic. */
export function publisherOf(body: unknown): { port: number | undefined; topic: string | undefined } {
  const config = typeof body === 'object' && body !== null ? (body as Record<string, unknown>)['0'] : undefined;
  if (typeof config !== 'object' || config === null) return { port: undefined, topic: undefined };
  const fields = config as Record<string, unknown>;
  const endpoint = typeof fields.endpoint === 'string' ? fields.endpoint : '';
  const port = /^tcp:\/\/.*:(\d+)$/.exec(endpoint)?.[1];
  return {
    port: fields.enable_kv_cache_events === true && port !== undefined ? Number(port) : undefined,
    topic: typeof fields.topic === 'string' ? fields.topic : undefined,
  };
}

const DISCOVERY_TIMEOUT_MS = 2000;

function discover(address: string): Promise<{ port: number | undefined; topic: string | undefined }> {
  return new Promise((resolve, reject) => {
    const req = httpRequest(`http://${address}/kv_event_sources`, { agent: false, timeout: DISCOVERY_TIMEOUT_MS }, (res) => {
      let text = '';
      res.setEncoding('utf8');
      res.on('data', (chunk: string) => {
        if (text.length < 64 * 1024) text += chunk;
      });
      res.on('end', () => {
        if (res.statusCode !== 200) return reject(new Error(`GET /kv_event_sources answered ${res.statusCode}`));
        try {
          const found = publisherOf(JSON.parse(text));
          if (found.port === undefined) reject(new Error('GET /kv_event_sources names no ZMQ publisher with KV-cache events on'));
          else resolve(found);
        } catch {
          reject(new Error('GET /kv_event_sources did not answer JSON'));
        }
      });
      res.on('error', reject);
    });
    req.on('timeout', () => req.destroy(new Error(`GET /kv_event_sources timed out after ${DISCOVERY_TIMEOUT_MS} ms`)));
    req.on('error', reject);
    req.end();
  });
}
