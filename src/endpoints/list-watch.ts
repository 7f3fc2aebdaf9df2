// One Kubernetes collection kept in sync with the API server, forever, until stopped: list
// (paged, retrying with backoff until the API answers), then watch from the list's resourceVersion
// (bookmarks keep it fresh); a 410 Gone means relist; a dropped connection or an API error means
// rewatch from the last resourceVersion after a backoff. Generic over what it keeps of each object;
// the pod pools and the InferencePools (pod-pools.ts, inference-pools.ts) are its two uses. It
// reaches the API only through the Collection and WatchClient it is given.

import type { Logger } from 'pino';
import { errorMessage } from '../util/error-message.js';

/** Hooks for metrics. `resource` is `pods/<pool>` or `inferencepools/<namespace>`. */
export interface KubernetesSourceObserver {
  /** A watch ended abnormally and will be restarted: `gone` = 410 (relist), `dropped` = connection lost, `error` = API error. */
  watchRestarted(resource: string, reason: 'gone' | 'dropped' | 'error'): void;
  /** A (re)list completed: the cache for `resource` is fresh as of now. */
  listed(resource: string): void;
  /** A watch event arrived (including bookmarks): the cache for `resource` is fresh as of now. */
  eventReceived(resource: string): void;
}

/** How long past its requested timeout a silent watch may stay open before we assume a dead connection. */
const WATCH_IDLE_GRACE_MS = 15_000;

export interface ListPage {
  readonly items: readonly unknown[];
  readonly resourceVersion: string;
  /** The continue token of a paged list; empty or absent on the last page. */
  readonly continueToken?: string | undefined;
}

/** Objects per list page: bounds the memory a relist of thousands of pods needs at once. */
export const LIST_PAGE_SIZE = 500;

/** One listable, watchable collection (pods of a pool, InferencePools of a namespace). */
export interface Collection<T> {
  readonly resource: string;
  readonly watchPath: string;
  readonly labelSelector: string | undefined;
  list(signal: AbortSignal, timeoutSeconds: number, continueToken: string | undefined): Promise<ListPage>;
  /** What the loop keeps of an object (the rest is garbage at once); `undefined` skips it. */
  project(object: unknown): T | undefined;
  /**
   * A kind that may be absent (an alpha CRD not installed, or not granted to us): a list answered
   * 404 or 403 is logged once, not on every retry, and the loop keeps retrying until it lists.
   */
  readonly optional?: boolean;
}

/** What changed in a loop's objects: everything (a relist), or one object by name. */
export type LoopChange = { readonly kind: 'reset' } | { readonly kind: 'set' | 'delete'; readonly name: string };

interface WatchFailure {
  readonly kind: 'gone' | 'dropped' | 'error';
  readonly detail: string;
  readonly sawEvents: boolean;
}

/** How a watch connection ended: a failure to recover from, a routine timeout, or our own stop. */
type WatchEnd = WatchFailure | { readonly kind: 'expired' } | { readonly kind: 'stopped' };

/**
 * How a loop opens a watch: client-node's `Watch` as the source hands it over (structurally), so
 * this module never imports the library. `onEvent` gets each event; `onDone` the end (null: the
 * server closed it); the promise gives what aborts it.
 */
export interface WatchClient {
  watch(
    path: string,
    query: Record<string, string | number | boolean | undefined>,
    onEvent: (type: string, object: unknown) => void,
    onDone: (err: unknown) => void,
  ): Promise<{ abort(): void }>;
}

export interface LoopDeps {
  readonly watch: WatchClient;
  readonly logger: Logger;
  readonly observer: KubernetesSourceObserver | undefined;
  readonly backoff: { readonly initialMs: number; readonly maxMs: number };
  readonly listSeconds: number;
  readonly watchSeconds: number;
}

/**
 * Keeps one collection's objects (as `project` keeps them) in sync with the API server, forever,
 * until stopped. Every change calls `onChange` saying what changed; the owner reads `get`/`items`.
 */
export class ListWatchLoop<T> {
  private objects = new Map<string, T>();
  private resourceVersion = '';
  private listedOnce = false;
  private stopped = false;
  private failures = 0;
  private goneStreak = 0;
  /** An optional collection whose list was refused (404/403): said once, until it lists. */
  private unavailable = false;
  private cancelCurrent: (() => void) | undefined;
  private wake: (() => void) | undefined;
  private running: Promise<void> | undefined;
  private readonly log: Logger;

  constructor(
    private readonly collection: Collection<T>,
    private readonly deps: LoopDeps,
    private readonly onChange: (change: LoopChange) => void,
  ) {
    this.log = deps.logger.child({ resource: collection.resource });
  }

  get synced(): boolean {
    return this.listedOnce;
  }

  /** The API server has said whether it serves the collection: it listed, or refused it as not served or not readable (optional kinds). */
  get answered(): boolean {
    return this.listedOnce || this.unavailable;
  }

  items(): IterableIterator<T> {
    return this.objects.values();
  }

  entries(): IterableIterator<[string, T]> {
    return this.objects.entries();
  }

  get(name: string): T | undefined {
    return this.objects.get(name);
  }

  start(): void {
    this.running ??= this.run().catch((err: unknown) => {
      // Nothing in run() should throw; if it does, say so loudly rather than lose the loop quietly.
      this.log.error({ err }, 'kubernetes list/watch loop crashed');
    });
  }

  async stop(): Promise<void> {
    this.stopped = true;
    this.cancelCurrent?.();
    this.wake?.();
    await this.running;
  }

  private async run(): Promise<void> {
    let needList = true;
    while (!this.stopped) {
      if (needList) {
        if (!(await this.relist())) {
          await this.sleep(this.nextBackoff());
          continue;
        }
        needList = false;
      }
      const end = await this.watchOnce();
      if (end.kind === 'stopped' || this.stopped) return;
      if (end.kind === 'expired') {
        // The server ended the watch at our requested timeout: routine, resume at once.
        this.log.debug('watch reached its timeout; resuming');
        continue;
      }
      this.deps.observer?.watchRestarted(this.collection.resource, end.kind);
      if (end.sawEvents) {
        this.failures = 0;
      }
      if (end.kind === 'gone') {
        this.log.info({ detail: end.detail }, 'watch resourceVersion expired (410 Gone); relisting');
        needList = true;
        // A relist normally fixes a 410 at once; back off only if it keeps happening.
        if (this.goneStreak++ > 0) await this.sleep(this.nextBackoff());
        continue;
      }
      const delay = this.nextBackoff();
      this.log.warn({ reason: end.kind, detail: end.detail, retryInMs: delay }, 'watch ended; reconnecting');
      await this.sleep(delay);
    }
  }

  /**
   * Lists the collection page by page and replaces the cached objects; false when the API did not
   * answer. The pages of one list are a consistent snapshot (the server's continue token pins its
   * resourceVersion); an expired token (410) fails the list, and the retry starts over.
   */
  private async relist(): Promise<boolean> {
    const controller = new AbortController();
    this.cancelCurrent = () => controller.abort();
    // A plain timer rather than AbortSignal.timeout/any: on Node 20 a composed timeout signal can
    // be garbage-collected before it fires, leaving a hung list hanging forever. Re-armed per page.
    let timer: NodeJS.Timeout | undefined;
    const arm = (): void => {
      clearTimeout(timer);
      timer = setTimeout(
        () => controller.abort(new Error(`list timed out after ${this.deps.listSeconds} s`)),
        this.deps.listSeconds * 1000,
      );
    };
    try {
      const objects = new Map<string, T>();
      let continueToken: string | undefined;
      let resourceVersion = '';
      let pages = 0;
      do {
        arm();
        const page = await this.collection.list(controller.signal, Math.max(1, Math.ceil(this.deps.listSeconds)), continueToken);
        if (this.stopped) return false;
        for (const item of page.items) {
          const name = nameOf(item);
          const projected = name === undefined ? undefined : this.collection.project(item);
          if (name !== undefined && projected !== undefined) objects.set(name, projected);
        }
        resourceVersion = page.resourceVersion;
        continueToken = page.continueToken === '' ? undefined : page.continueToken;
        pages++;
      } while (continueToken !== undefined);
      this.objects = objects;
      this.resourceVersion = resourceVersion;
      const first = !this.listedOnce;
      this.listedOnce = true;
      this.failures = 0;
      this.deps.observer?.listed(this.collection.resource);
      this.log[first || this.unavailable ? 'info' : 'debug'](
        { count: this.objects.size, pages, resourceVersion: this.resourceVersion },
        first ? 'initial list complete' : this.unavailable ? 'listed again (served and readable now)' : 'relisted',
      );
      this.unavailable = false;
      this.onChange({ kind: 'reset' });
      return true;
    } catch (err: unknown) {
      if (!this.stopped) {
        const detail = controller.signal.aborted ? describeError(controller.signal.reason) : describeError(err);
        const status = controller.signal.aborted ? undefined : httpStatusOf(err);
        if (this.collection.optional === true && (status === 404 || status === 403)) {
          // Expected where the CRD is not installed: one line, then quiet retries that pick it up once it is.
          if (!this.unavailable) {
            this.log.warn({ detail }, 'not served or not readable (CRD not installed, or no RBAC grant); going on without it, retrying');
          } else {
            this.log.debug({ detail, attempt: this.failures + 1 }, 'still not served; will retry');
          }
          this.unavailable = true;
        } else {
          this.log.warn({ detail, attempt: this.failures + 1 }, 'list failed; will retry');
        }
      }
      return false;
    } finally {
      clearTimeout(timer);
      this.cancelCurrent = undefined;
    }
  }

  /** Runs one watch connection until it ends, applying its events; says how it ended. */
  private watchOnce(): Promise<WatchEnd> {
    return new Promise<WatchEnd>((resolve) => {
      let settled = false;
      let sawEvents = false;
      let controller: { abort(): void } | undefined;
      let idleTimer: NodeJS.Timeout | undefined;
      const startedAt = Date.now();
      const timeoutSeconds = Math.max(1, Math.round(this.deps.watchSeconds));
      const timeoutMs = timeoutSeconds * 1000;

      const finish = (end: WatchEnd): void => {
        if (settled) return;
        settled = true;
        clearTimeout(idleTimer);
        controller?.abort();
        this.cancelCurrent = undefined;
        resolve(end);
      };
      const ended = (kind: 'gone' | 'dropped' | 'error', detail: string): void => finish({ kind, detail, sawEvents });
      // Guards against half-open connections: the server promised to end the watch by then.
      const armIdleTimer = (): void => {
        clearTimeout(idleTimer);
        idleTimer = setTimeout(() => ended('dropped', 'no data past the watch timeout'), timeoutMs + WATCH_IDLE_GRACE_MS);
      };
      this.cancelCurrent = () => finish({ kind: 'stopped' });
      armIdleTimer();

      const query: Record<string, string | number | boolean | undefined> = {
        allowWatchBookmarks: true,
        resourceVersion: this.resourceVersion === '' ? undefined : this.resourceVersion,
        labelSelector: this.collection.labelSelector,
        timeoutSeconds,
      };

      const onEvent = (type: string, object: unknown): void => {
        if (settled) return;
        armIdleTimer();
        if (type === 'ERROR') {
          const code = statusCodeOf(object);
          ended(code === 410 ? 'gone' : 'error', `watch ERROR event: ${describeStatus(object)}`);
          return;
        }
        const rv = resourceVersionOf(object);
        if (rv !== undefined) this.resourceVersion = rv;
        sawEvents = true;
        this.goneStreak = 0;
        this.deps.observer?.eventReceived(this.collection.resource);
        if (type === 'BOOKMARK') return;
        const name = nameOf(object);
        if (name === undefined) return;
        if (type === 'ADDED' || type === 'MODIFIED') {
          const projected = this.collection.project(object);
          if (projected === undefined) {
            if (!this.objects.delete(name)) return;
            this.onChange({ kind: 'delete', name });
            return;
          }
          this.objects.set(name, projected);
          this.onChange({ kind: 'set', name });
        } else if (type === 'DELETED') {
          if (!this.objects.delete(name)) return;
          this.onChange({ kind: 'delete', name });
        }
      };

      const onDone = (err: unknown): void => {
        if (settled) return;
        if (err === null || err === undefined) {
          if (Date.now() - startedAt >= timeoutMs * 0.9) {
            finish({ kind: 'expired' });
          } else {
            ended('dropped', 'server closed the watch early');
          }
          return;
        }
        const status = httpStatusOf(err);
        if (status === 410) {
          ended('gone', 'HTTP 410 on watch');
        } else if (status !== undefined) {
          ended('error', `HTTP ${status} on watch`);
        } else {
          ended('dropped', describeError(err));
        }
      };

      this.deps.watch.watch(this.collection.watchPath, query, onEvent, onDone).then(
        (c) => {
          controller = c;
          if (settled) c.abort();
        },
        (err: unknown) => ended('error', describeError(err)),
      );
    });
  }

  /** Exponential backoff with jitter in [50%, 100%] of the step, so restarts do not synchronise. */
  private nextBackoff(): number {
    const { initialMs, maxMs } = this.deps.backoff;
    const step = Math.min(maxMs, initialMs * 2 ** Math.min(this.failures, 30));
    this.failures++;
    return Math.round(step * (0.5 + Math.random() / 2));
  }

  private sleep(ms: number): Promise<void> {
    if (this.stopped) return Promise.resolve();
    return new Promise<void>((resolve) => {
      const timer = setTimeout(done, ms);
      function done(): void {
        clearTimeout(timer);
        resolve();
      }
      this.wake = () => {
        this.wake = undefined;
        done();
      };
    });
  }
}

export function field(value: unknown, key: string): unknown {
  return typeof value === 'object' && value !== null ? (value as Record<string, unknown>)[key] : undefined;
}

function nameOf(object: unknown): string | undefined {
  const name = field(field(object, 'metadata'), 'name');
  return typeof name === 'string' && name !== '' ? name : undefined;
}

function resourceVersionOf(object: unknown): string | undefined {
  const rv = field(field(object, 'metadata'), 'resourceVersion');
  return typeof rv === 'string' && rv !== '' ? rv : undefined;
}

function statusCodeOf(status: unknown): number | undefined {
  const code = field(status, 'code');
  return typeof code === 'number' ? code : undefined;
}

function describeStatus(status: unknown): string {
  const code = statusCodeOf(status);
  const reason = field(status, 'reason');
  const message = field(status, 'message');
  return [code, reason, message].filter((p) => p !== undefined && p !== '').join(' ');
}

/** HTTP status from client-node errors: `ApiException.code` (lists) or `statusCode` (watch). */
function httpStatusOf(err: unknown): number | undefined {
  const statusCode = field(err, 'statusCode');
  if (typeof statusCode === 'number') return statusCode;
  const code = field(err, 'code');
  return typeof code === 'number' ? code : undefined;
}

/** A one-line description; ApiException messages carry whole header dumps we keep out of logs. */
function describeError(err: unknown): string {
  const status = httpStatusOf(err);
  if (status !== undefined) {
    const body = field(err, 'body');
    const parsed: unknown = typeof body === 'string' ? safeJson(body) : body;
    const message = field(parsed, 'message');
    return typeof message === 'string' ? `HTTP ${status}: ${message}` : `HTTP ${status}`;
  }
  const code = field(err, 'code');
  if (typeof code === 'string') return code;
  return errorMessage(err);
}

function safeJson(text: string): unknown {
  try {
    return JSON.parse(text) as unknown;
  } catch {
    return undefined;
  }
}
