// A small, faithful stand-in for the Kubernetes API server, so the real @kubernetes/client-node
// can run against it through an ordinary kubeconfig. It serves list and watch for Pods and
// InferencePools the way the real server does: one global, monotonically increasing
// resourceVersion; watches that replay history after a given resourceVersion and then stream
// newline-delimited JSON events; bookmarks on request; 410 Gone once history is compacted; and
// label selectors applied to watches (an object leaving the selector arrives as DELETED).
// Lists are paged when the client asks (limit/continue, with expired continue tokens answered
// 410 like the real server), a watch from a compacted resourceVersion can be refused either way the
// real server does it (HTTP 200 + an ERROR event, or HTTP 410), and watch events can be framed as
// the real server's chunked stream may deliver them: one per chunk, split across several chunks
// (even inside a UTF-8 character), or several merged into one.
// Test controls let a test break it in the ways a real cluster breaks: dropped watch
// connections, compaction, an unreachable or failing server, slow responses.

import { createServer } from 'node:http';
import type { IncomingMessage, Server, ServerResponse } from 'node:http';
import type { Socket } from 'node:net';
import { randomUUID } from 'node:crypto';
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';

/** The parts of an object's metadata the fake reads and maintains. */
export interface KubeObjectMeta {
  name: string;
  namespace?: string;
  labels?: Record<string, string>;
  annotations?: Record<string, string>;
  uid?: string;
  resourceVersion?: string;
  creationTimestamp?: string;
  deletionTimestamp?: string;
}

/** Any API object; pods from `pod-builders.ts` fit. */
export interface KubeObject {
  apiVersion?: string;
  kind?: string;
  metadata: KubeObjectMeta;
}

export type WatchEventType = 'ADDED' | 'MODIFIED' | 'DELETED' | 'BOOKMARK' | 'ERROR';

interface ResourceType {
  /** URL prefix of the group/version, e.g. `/api/v1`. */
  readonly prefix: string;
  readonly plural: string;
  readonly kind: string;
  readonly apiVersion: string;
}

const RESOURCE_TYPES: readonly ResourceType[] = [
  { prefix: '/api/v1', plural: 'pods', kind: 'Pod', apiVersion: 'v1' },
  {
    prefix: '/apis/inference.networking.k8s.io/v1',
    plural: 'inferencepools',
    kind: 'InferencePool',
    apiVersion: 'inference.networking.k8s.io/v1',
  },
  {
    prefix: '/apis/inference.networking.x-k8s.io/v1alpha2',
    plural: 'inferenceobjectives',
    kind: 'InferenceObjective',
    apiVersion: 'inference.networking.x-k8s.io/v1alpha2',
  },
];

/** Path of a namespaced collection, as a watch or list request uses it. */
export function podsPath(namespace: string): string {
  return `/api/v1/namespaces/${namespace}/pods`;
}

export function inferencePoolsPath(namespace: string): string {
  return `/apis/inference.networking.k8s.io/v1/namespaces/${namespace}/inferencepools`;
}

export function inferenceObjectivesPath(namespace: string): string {
  return `/apis/inference.networking.x-k8s.io/v1alpha2/namespaces/${namespace}/inferenceobjectives`;
}

interface HistoryEntry {
  readonly rv: number;
  readonly plural: string;
  readonly type: 'ADDED' | 'MODIFIED' | 'DELETED';
  readonly object: KubeObject;
  /** The object before this change, to decide what a selector-filtered watch sees. */
  readonly previous: KubeObject | undefined;
}

interface OpenWatch {
  readonly path: string;
  readonly plural: string;
  readonly namespace: string | undefined;
  readonly selector: Selector;
  readonly bookmarks: boolean;
  readonly res: ServerResponse;
  timer: NodeJS.Timeout | undefined;
  /** Writes of split events, in order (each piece after a short pause). */
  chain: Promise<void>;
  /** Merged framing: event lines waiting to go out together in one write. */
  merged: Buffer[];
  mergeScheduled: NodeJS.Immediate | undefined;
}

/**
 * How watch events are framed on the wire. `whole`: one event per write (what the fake always did);
 * `split`: each event in three writes with pauses between (cut at byte offsets, so possibly inside
 * a multi-byte character); `merged`: the events of one burst in a single write.
 */
export type EventFraming = 'whole' | 'split' | 'merged';

/** How a watch from a compacted resourceVersion is refused: an ERROR event on a 200 stream, or HTTP 410. */
export type WatchGoneMode = 'event' | 'http';

interface Waiter {
  readonly path: string;
  readonly resolve: () => void;
  readonly timer: NodeJS.Timeout;
}

export interface RequestRecord {
  readonly method: string;
  readonly path: string;
  readonly query: string;
  readonly watch: boolean;
  readonly authorization: string | undefined;
  status: number;
}

export interface FakeKubeApiOptions {
  /** Events kept for watch resumption; older ones are compacted away (410 Gone). Default 1000. */
  readonly historyLimit?: number;
}

export type UnavailableMode = 'refuse' | 'error';

export class FakeKubeApi {
  private readonly server: Server;
  private readonly sockets = new Set<Socket>();
  private readonly objects = new Map<string, Map<string, KubeObject>>();
  private history: HistoryEntry[] = [];
  private readonly watches = new Set<OpenWatch>();
  private readonly waiters = new Set<Waiter>();
  private readonly pendingTimers = new Set<NodeJS.Timeout>();
  private readonly watchTotals = new Map<string, number>();
  private readonly listTotals = new Map<string, number>();
  private readonly historyLimit: number;
  private rv = 1;
  /** Watches must start at or after this resourceVersion; older ones get 410. */
  private compactedRv = 0;
  private latencyMs = 0;
  private readonly pathErrors = new Map<string, number>();
  private unavailable: UnavailableMode | undefined;
  private framing: EventFraming = 'whole';
  private watchGoneMode: WatchGoneMode = 'event';
  private continueFailures = 0;
  private eventWriteCount = 0;
  private listening = false;
  private portNumber = 0;
  /** Every request served, in order; tests read it to check what the client asked for. */
  readonly requests: RequestRecord[] = [];

  private constructor(options: FakeKubeApiOptions) {
    this.historyLimit = options.historyLimit ?? 1000;
    for (const t of RESOURCE_TYPES) this.objects.set(t.plural, new Map());
    this.server = createServer((req, res) => this.onRequest(req, res));
    this.server.on('connection', (socket: Socket) => {
      this.sockets.add(socket);
      socket.on('close', () => this.sockets.delete(socket));
    });
  }

  /** Starts a server on 127.0.0.1 with an ephemeral port. */
  static async start(options: FakeKubeApiOptions = {}): Promise<FakeKubeApi> {
    const api = new FakeKubeApi(options);
    await api.listen(0);
    return api;
  }

  get port(): number {
    return this.portNumber;
  }

  /** Base URL for a kubeconfig's `server` field. */
  get url(): string {
    return `http://127.0.0.1:${this.portNumber}`;
  }

  /** The latest resourceVersion handed out. */
  get resourceVersion(): string {
    return String(this.rv);
  }

  // ---- objects -------------------------------------------------------------------------------

  /** Creates or replaces a pod (ADDED or MODIFIED); returns the stored copy with its resourceVersion. */
  upsertPod(pod: KubeObject): KubeObject {
    return this.upsert('pods', pod);
  }

  deletePod(namespace: string, name: string): boolean {
    return this.remove('pods', namespace, name);
  }

  getPod(namespace: string, name: string): KubeObject | undefined {
    const found = this.objects.get('pods')?.get(`${namespace}/${name}`);
    return found === undefined ? undefined : structuredClone(found);
  }

  /** What the API server does on a graceful delete: a MODIFIED event carrying deletionTimestamp. */
  setPodDeletionTimestamp(namespace: string, name: string, when: Date = new Date()): KubeObject {
    const current = this.objects.get('pods')?.get(`${namespace}/${name}`);
    if (current === undefined) throw new Error(`no pod ${namespace}/${name}`);
    const next = structuredClone(current);
    next.metadata.deletionTimestamp = when.toISOString().replace(/\.\d{3}Z$/, 'Z');
    return this.upsert('pods', next);
  }

  upsertInferencePool(pool: KubeObject): KubeObject {
    return this.upsert('inferencepools', pool);
  }

  deleteInferencePool(namespace: string, name: string): boolean {
    return this.remove('inferencepools', namespace, name);
  }

  upsertInferenceObjective(objective: KubeObject): KubeObject {
    return this.upsert('inferenceobjectives', objective);
  }

  deleteInferenceObjective(namespace: string, name: string): boolean {
    return this.remove('inferenceobjectives', namespace, name);
  }

  private upsert(plural: string, input: KubeObject): KubeObject {
    const store = this.store(plural);
    const namespace = input.metadata.namespace ?? 'default';
    const key = `${namespace}/${input.metadata.name}`;
    const previous = store.get(key);
    const type = RESOURCE_TYPES.find((t) => t.plural === plural);
    const object = structuredClone(input);
    object.apiVersion ??= type?.apiVersion;
    object.kind ??= type?.kind;
    object.metadata.namespace = namespace;
    object.metadata.uid = previous?.metadata.uid ?? object.metadata.uid ?? randomUUID();
    object.metadata.creationTimestamp =
      previous?.metadata.creationTimestamp ?? object.metadata.creationTimestamp ?? new Date().toISOString().replace(/\.\d{3}Z$/, 'Z');
    object.metadata.resourceVersion = String(++this.rv);
    store.set(key, object);
    this.record({ rv: this.rv, plural, type: previous === undefined ? 'ADDED' : 'MODIFIED', object, previous });
    return structuredClone(object);
  }

  private remove(plural: string, namespace: string, name: string): boolean {
    const store = this.store(plural);
    const key = `${namespace}/${name}`;
    const previous = store.get(key);
    if (previous === undefined) return false;
    store.delete(key);
    // The real server reports a deletion with the object's final state at a new resourceVersion.
    const object = structuredClone(previous);
    object.metadata.resourceVersion = String(++this.rv);
    this.record({ rv: this.rv, plural, type: 'DELETED', object, previous });
    return true;
  }

  private store(plural: string): Map<string, KubeObject> {
    const store = this.objects.get(plural);
    if (store === undefined) throw new Error(`unknown resource ${plural}`);
    return store;
  }

  private record(entry: HistoryEntry): void {
    this.history.push(entry);
    while (this.history.length > this.historyLimit) {
      const dropped = this.history.shift();
      if (dropped !== undefined) this.compactedRv = dropped.rv;
    }
    for (const w of this.watches) this.deliver(w, entry);
  }

  // ---- faults --------------------------------------------------------------------------------

  /** Forgets all history: a watch resuming from any resourceVersion before now gets 410 Gone. */
  compactHistory(): void {
    this.history = [];
    this.compactedRv = this.rv;
  }

  /**
   * Compacts and tells every open watch it is too old (an ERROR event with a 410 Status, then
   * the stream ends), as the server does when a watcher falls behind compaction.
   */
  expireWatches(): number {
    this.compactHistory();
    const n = this.watches.size;
    for (const w of [...this.watches]) {
      this.writeEvent(w, 'ERROR', goneStatus(this.rv - 1, this.compactedRv));
      this.closeWatch(w, 'end');
    }
    return n;
  }

  /** Destroys every open watch connection mid-stream (a load balancer reset, a node going away). */
  dropWatches(): number {
    const n = this.watches.size;
    for (const w of [...this.watches]) this.closeWatch(w, 'destroy');
    return n;
  }

  /** Sends a BOOKMARK with the current resourceVersion to every watch that asked for bookmarks. */
  sendBookmark(): number {
    let n = 0;
    for (const w of this.watches) {
      if (!w.bookmarks) continue;
      const type = RESOURCE_TYPES.find((t) => t.plural === w.plural);
      this.writeEvent(w, 'BOOKMARK', { kind: type?.kind, apiVersion: type?.apiVersion, metadata: { resourceVersion: String(this.rv) } });
      n++;
    }
    return n;
  }

  /**
   * Makes the server unreachable (`refuse`: the port stops listening, connections are cut) or
   * failing (`error`: every request gets a 500 Status, open watches are cut). `false` restores it
   * on the same port.
   */
  async setUnavailable(unavailable: boolean, mode: UnavailableMode = 'refuse'): Promise<void> {
    if (!unavailable) {
      this.unavailable = undefined;
      if (!this.listening) await this.listen(this.portNumber);
      return;
    }
    this.unavailable = mode;
    this.dropWatches();
    if (mode === 'refuse' && this.listening) {
      const closed = new Promise<void>((resolve) => this.server.close(() => resolve()));
      this.listening = false;
      for (const s of this.sockets) s.destroy();
      await closed;
    }
  }

  /**
   * Answers every request on `path` with an error Status of HTTP `code` (403 for a namespace the
   * service account may not read, 404 for a CRD that is not installed); `undefined` clears it.
   */
  setPathError(path: string, code: number | undefined): void {
    if (code === undefined) this.pathErrors.delete(path);
    else this.pathErrors.set(path, code);
  }

  /** Frames the events of every watch (open or future) this way; see EventFraming. */
  setEventFraming(framing: EventFraming): void {
    this.framing = framing;
  }

  /** How a watch starting from a compacted resourceVersion is refused; see WatchGoneMode. */
  setWatchGoneMode(mode: WatchGoneMode): void {
    this.watchGoneMode = mode;
  }

  /**
   * The next `count` list requests that carry a continue token get 410 Expired, as when etcd
   * compacts past the list's resourceVersion between two pages.
   */
  expireNextContinueTokens(count = 1): void {
    this.continueFailures = count;
  }

  /** Writes that carried watch-event bytes (a split event counts once per piece). */
  get eventWrites(): number {
    return this.eventWriteCount;
  }

  /** Delays every response by `ms` (headers included), like an overloaded API server. */
  setLatency(ms: number): void {
    this.latencyMs = ms;
  }

  // ---- observation ---------------------------------------------------------------------------

  /** Watches established on `path` (or on any path) since start. */
  watchCount(path?: string): number {
    return path === undefined ? sum(this.watchTotals.values()) : (this.watchTotals.get(path) ?? 0);
  }

  openWatchCount(path?: string): number {
    return [...this.watches].filter((w) => path === undefined || w.path === path).length;
  }

  /** Successful list requests served on `path` (or on any path). */
  listCount(path?: string): number {
    return path === undefined ? sum(this.listTotals.values()) : (this.listTotals.get(path) ?? 0);
  }

  /** Resolves once a watch on `path` is open: immediately if one is, else when the next one opens. */
  waitForWatch(path: string, options: { timeoutMs?: number } = {}): Promise<void> {
    if (this.openWatchCount(path) > 0) return Promise.resolve();
    return this.nextWatch(path, options);
  }

  /** Resolves when a new watch on `path` is established after this call. */
  nextWatch(path: string, options: { timeoutMs?: number } = {}): Promise<void> {
    const timeoutMs = options.timeoutMs ?? 10_000;
    return new Promise<void>((resolve, reject) => {
      const waiter: Waiter = {
        path,
        resolve: () => {
          clearTimeout(waiter.timer);
          this.waiters.delete(waiter);
          resolve();
        },
        timer: setTimeout(() => {
          this.waiters.delete(waiter);
          reject(
            new Error(`no watch on ${path} within ${timeoutMs} ms (open: ${[...this.watches].map((w) => w.path).join(', ') || 'none'})`),
          );
        }, timeoutMs),
      };
      this.waiters.add(waiter);
    });
  }

  /** Stops listening and cuts every connection; pending waiters are abandoned. */
  async stop(): Promise<void> {
    for (const w of [...this.watches]) this.closeWatch(w, 'destroy');
    for (const t of this.pendingTimers) clearTimeout(t);
    this.pendingTimers.clear();
    for (const w of this.waiters) clearTimeout(w.timer);
    this.waiters.clear();
    if (this.listening) {
      const closed = new Promise<void>((resolve) => this.server.close(() => resolve()));
      this.listening = false;
      for (const s of this.sockets) s.destroy();
      await closed;
    }
  }

  // ---- HTTP ----------------------------------------------------------------------------------

  private async listen(port: number): Promise<void> {
    await new Promise<void>((resolve, reject) => {
      const onError = (err: Error): void => reject(err);
      this.server.once('error', onError);
      this.server.listen(port, '127.0.0.1', () => {
        this.server.off('error', onError);
        resolve();
      });
    });
    const address = this.server.address();
    if (address === null || typeof address === 'string') throw new Error('unexpected server address');
    this.portNumber = address.port;
    this.listening = true;
  }

  private onRequest(req: IncomingMessage, res: ServerResponse): void {
    const url = new URL(req.url ?? '/', 'http://fake');
    const watch = url.searchParams.get('watch') === 'true' || url.searchParams.get('watch') === '1';
    const record: RequestRecord = {
      method: req.method ?? 'GET',
      path: url.pathname,
      query: url.search,
      watch,
      authorization: req.headers.authorization,
      status: 0,
    };
    this.requests.push(record);
    const handle = (): void => {
      if (this.unavailable === 'error') {
        this.sendStatus(res, record, 500, 'InternalError', 'the fake API server is failing on purpose');
        return;
      }
      const pathError = this.pathErrors.get(url.pathname);
      if (pathError !== undefined) {
        this.sendStatus(
          res,
          record,
          pathError,
          STATUS_REASONS[pathError] ?? 'InternalError',
          `request to ${url.pathname} fails on purpose`,
        );
        return;
      }
      this.route(req, res, url, watch, record);
    };
    if (this.latencyMs > 0) {
      const timer = setTimeout(() => {
        this.pendingTimers.delete(timer);
        if (!res.destroyed) handle();
      }, this.latencyMs);
      this.pendingTimers.add(timer);
    } else {
      handle();
    }
  }

  private route(req: IncomingMessage, res: ServerResponse, url: URL, watch: boolean, record: RequestRecord): void {
    if (req.method !== 'GET') {
      this.sendStatus(res, record, 405, 'MethodNotAllowed', `${req.method ?? ''} is not supported by the fake`);
      return;
    }
    for (const type of RESOURCE_TYPES) {
      const match = new RegExp(`^${escapeRegExp(type.prefix)}/(?:namespaces/([^/]+)/)?${type.plural}(?:/([^/]+))?$`).exec(url.pathname);
      if (match === null) continue;
      const namespace = match[1] === undefined ? undefined : decodeURIComponent(match[1]);
      const name = match[2] === undefined ? undefined : decodeURIComponent(match[2]);
      const selector = parseSelector(url.searchParams.get('labelSelector') ?? '');
      if (selector instanceof Error) {
        this.sendStatus(res, record, 400, 'BadRequest', `unable to parse requirement: ${selector.message}`);
        return;
      }
      if (name !== undefined) {
        this.getOne(res, record, type, namespace, name);
      } else if (watch) {
        this.startWatch(res, record, type, url, namespace, selector);
      } else {
        this.list(res, record, type, url, namespace, selector);
      }
      return;
    }
    this.sendStatus(res, record, 404, 'NotFound', 'the server could not find the requested resource');
  }

  private getOne(res: ServerResponse, record: RequestRecord, type: ResourceType, namespace: string | undefined, name: string): void {
    const found = this.store(type.plural).get(`${namespace ?? 'default'}/${name}`);
    if (found === undefined) {
      this.sendStatus(res, record, 404, 'NotFound', `${type.plural} "${name}" not found`);
      return;
    }
    this.sendJson(res, record, 200, found);
  }

  private list(
    res: ServerResponse,
    record: RequestRecord,
    type: ResourceType,
    url: URL,
    namespace: string | undefined,
    selector: Selector,
  ): void {
    // Lists with an exact, compacted resourceVersion fail like the real server's; the others
    // (unset, "0", NotOlderThan) are served from the current state.
    const rv = url.searchParams.get('resourceVersion') ?? '';
    if (url.searchParams.get('resourceVersionMatch') === 'Exact' && rv !== '' && Number(rv) < this.compactedRv) {
      this.sendStatus(res, record, 410, 'Expired', `too old resource version: ${rv} (${this.compactedRv})`);
      return;
    }
    const token = url.searchParams.get('continue') ?? '';
    const from = token === '' ? undefined : parseContinue(token);
    if (token !== '') {
      if (from === undefined) {
        this.sendStatus(res, record, 400, 'BadRequest', 'continue key is not valid');
        return;
      }
      if (this.continueFailures > 0 || from.rv < this.compactedRv) {
        this.continueFailures = Math.max(0, this.continueFailures - 1);
        this.sendStatus(
          res,
          record,
          410,
          'Expired',
          'The provided continue parameter is too old to display a consistent list result. You can start a new list without the continue parameter.',
        );
        return;
      }
    }
    const all = [...this.store(type.plural).values()]
      .filter((o) => inScope(o, namespace, selector))
      .sort((a, b) => keyOf(a).localeCompare(keyOf(b)))
      .filter((o) => from === undefined || keyOf(o).localeCompare(from.after) > 0);
    const limit = Number(url.searchParams.get('limit') ?? '0');
    const page = limit > 0 ? all.slice(0, limit) : all;
    const listRv = from?.rv ?? this.rv;
    const last = page.at(-1);
    // Like the real server, later pages carry the first page's resourceVersion: the client
    // watches from there, and the history replays whatever changed while it paged.
    const metadata: Record<string, unknown> = { resourceVersion: String(listRv) };
    if (limit > 0 && all.length > page.length && last !== undefined) {
      metadata.continue = Buffer.from(JSON.stringify({ rv: listRv, after: keyOf(last) })).toString('base64url');
      metadata.remainingItemCount = all.length - page.length;
    }
    const items = page.map((o) => {
      // Built-in lists omit each item's kind/apiVersion; custom resources keep them.
      if (type.plural !== 'pods') return o;
      const rest: Partial<KubeObject> = { ...o };
      delete rest.kind;
      delete rest.apiVersion;
      return rest;
    });
    this.listTotals.set(url.pathname, (this.listTotals.get(url.pathname) ?? 0) + 1);
    this.sendJson(res, record, 200, { kind: `${type.kind}List`, apiVersion: type.apiVersion, metadata, items });
  }

  private startWatch(
    res: ServerResponse,
    record: RequestRecord,
    type: ResourceType,
    url: URL,
    namespace: string | undefined,
    selector: Selector,
  ): void {
    const rvParam = url.searchParams.get('resourceVersion') ?? '';
    const w: OpenWatch = {
      path: url.pathname,
      plural: type.plural,
      namespace,
      selector,
      bookmarks: url.searchParams.get('allowWatchBookmarks') === 'true',
      res,
      timer: undefined,
      chain: Promise.resolve(),
      merged: [],
      mergeScheduled: undefined,
    };
    const tooOld = rvParam !== '' && rvParam !== '0' && Number(rvParam) < this.compactedRv;
    if (tooOld && this.watchGoneMode === 'http') {
      // The other way the real server refuses: before the stream starts, as a plain HTTP 410.
      this.sendJson(res, record, 410, goneStatus(Number(rvParam), this.compactedRv));
      return;
    }
    record.status = 200;
    res.writeHead(200, { 'Content-Type': 'application/json', 'Cache-Control': 'no-cache, private' });
    res.flushHeaders();

    if (tooOld) {
      // The real server accepts the watch, then reports expiry as the first and only event.
      this.writeRaw(res, 'ERROR', goneStatus(Number(rvParam), this.compactedRv));
      res.end();
      return;
    }

    this.watches.add(w);
    res.on('close', () => this.closeWatch(w, 'none'));
    const timeoutSeconds = Number(url.searchParams.get('timeoutSeconds') ?? '0');
    if (timeoutSeconds > 0) {
      w.timer = setTimeout(() => this.closeWatch(w, 'end'), timeoutSeconds * 1000);
    }

    if (rvParam === '' || rvParam === '0') {
      // "Start at any": synthetic ADDED events for the current state, then live changes.
      for (const o of [...this.store(type.plural).values()].sort((a, b) => keyOf(a).localeCompare(keyOf(b)))) {
        if (inScope(o, namespace, selector)) this.writeEvent(w, 'ADDED', o);
      }
    } else {
      const from = Number(rvParam);
      for (const entry of this.history) {
        if (entry.rv > from) this.deliver(w, entry);
      }
    }

    this.watchTotals.set(w.path, (this.watchTotals.get(w.path) ?? 0) + 1);
    for (const waiter of [...this.waiters]) {
      if (waiter.path === w.path) waiter.resolve();
    }
  }

  /** Sends one change to one watch, as its selector sees it. */
  private deliver(w: OpenWatch, entry: HistoryEntry): void {
    if (entry.plural !== w.plural) return;
    const nowIn = entry.type !== 'DELETED' && inScope(entry.object, w.namespace, w.selector);
    const wasIn = entry.previous !== undefined && inScope(entry.previous, w.namespace, w.selector);
    if (entry.type === 'DELETED') {
      if (wasIn) this.writeEvent(w, 'DELETED', entry.object);
    } else if (nowIn && wasIn) {
      this.writeEvent(w, 'MODIFIED', entry.object);
    } else if (nowIn) {
      this.writeEvent(w, 'ADDED', entry.object);
    } else if (wasIn) {
      this.writeEvent(w, 'DELETED', entry.object);
    }
  }

  private writeEvent(w: OpenWatch, type: WatchEventType, object: unknown): void {
    const line = Buffer.from(`${JSON.stringify({ type, object })}\n`);
    if (this.framing === 'whole') {
      this.writeChunk(w.res, line);
    } else if (this.framing === 'merged') {
      w.merged.push(line);
      w.mergeScheduled ??= setImmediate(() => this.flushMerged(w));
    } else {
      // Thirds of the line by bytes: with non-ASCII text a cut can fall inside a character.
      const cuts = [0, Math.floor(line.length / 3), Math.floor((2 * line.length) / 3), line.length];
      for (let i = 0; i < 3; i++) {
        const piece = line.subarray(cuts[i], cuts[i + 1]);
        w.chain = w.chain.then(async () => {
          this.writeChunk(w.res, piece);
          await new Promise((resolve) => setTimeout(resolve, 2));
        });
      }
    }
  }

  private flushMerged(w: OpenWatch): void {
    if (w.mergeScheduled !== undefined) clearImmediate(w.mergeScheduled);
    w.mergeScheduled = undefined;
    if (w.merged.length === 0) return;
    const lines = Buffer.concat(w.merged);
    w.merged = [];
    this.writeChunk(w.res, lines);
  }

  private writeChunk(res: ServerResponse, bytes: Buffer): void {
    if (res.writableEnded || res.destroyed) return;
    this.eventWriteCount++;
    res.write(bytes);
  }

  private writeRaw(res: ServerResponse, type: WatchEventType, object: unknown): void {
    if (!res.writableEnded && !res.destroyed) res.write(`${JSON.stringify({ type, object })}\n`);
  }

  private closeWatch(w: OpenWatch, how: 'end' | 'destroy' | 'none'): void {
    if (!this.watches.delete(w)) return;
    clearTimeout(w.timer);
    if (how === 'end') {
      // Whatever was sent before the end goes out first, in order.
      this.flushMerged(w);
      void w.chain.then(() => w.res.end());
    }
    if (how === 'destroy') {
      if (w.mergeScheduled !== undefined) clearImmediate(w.mergeScheduled);
      w.res.socket?.destroy();
    }
  }

  private sendJson(res: ServerResponse, record: RequestRecord, status: number, body: unknown): void {
    record.status = status;
    const text = JSON.stringify(body);
    res.writeHead(status, { 'Content-Type': 'application/json', 'Content-Length': Buffer.byteLength(text) });
    res.end(text);
  }

  private sendStatus(res: ServerResponse, record: RequestRecord, code: number, reason: string, message: string): void {
    this.sendJson(res, record, code, { kind: 'Status', apiVersion: 'v1', metadata: {}, status: 'Failure', message, reason, code });
  }
}

const STATUS_REASONS: Readonly<Record<number, string>> = {
  400: 'BadRequest',
  401: 'Unauthorized',
  403: 'Forbidden',
  404: 'NotFound',
  410: 'Expired',
  429: 'TooManyRequests',
  500: 'InternalError',
  503: 'ServiceUnavailable',
};

function parseContinue(token: string): { rv: number; after: string } | undefined {
  try {
    const parsed = JSON.parse(Buffer.from(token, 'base64url').toString('utf8')) as { rv?: unknown; after?: unknown };
    return typeof parsed.rv === 'number' && typeof parsed.after === 'string' ? { rv: parsed.rv, after: parsed.after } : undefined;
  } catch {
    return undefined;
  }
}

function goneStatus(requested: number, oldest: number): object {
  return {
    kind: 'Status',
    apiVersion: 'v1',
    metadata: {},
    status: 'Failure',
    message: `too old resource version: ${requested} (${oldest})`,
    reason: 'Expired',
    code: 410,
  };
}

// ---- label selectors ------------------------------------------------------------------------

interface Requirement {
  readonly key: string;
  readonly op: 'in' | 'notin' | 'exists' | 'notexists';
  readonly values: readonly string[];
}

type Selector = readonly Requirement[];

/** Equality (`=`, `==`, `!=`), existence (`k`, `!k`) and set (`in`, `notin`) requirements. */
function parseSelector(text: string): Selector | Error {
  const parts: string[] = [];
  let depth = 0;
  let current = '';
  for (const ch of text) {
    if (ch === '(') depth++;
    if (ch === ')') depth--;
    if (ch === ',' && depth === 0) {
      parts.push(current);
      current = '';
    } else {
      current += ch;
    }
  }
  parts.push(current);
  const requirements: Requirement[] = [];
  for (const raw of parts.map((p) => p.trim()).filter((p) => p !== '')) {
    let m: RegExpExecArray | null;
    if ((m = /^([\w./-]+)\s*(==|=|!=)\s*([\w.-]*)$/.exec(raw)) !== null) {
      requirements.push({ key: m[1] ?? '', op: m[2] === '!=' ? 'notin' : 'in', values: [m[3] ?? ''] });
    } else if ((m = /^([\w./-]+)\s+(in|notin)\s+\(([^)]*)\)$/.exec(raw)) !== null) {
      requirements.push({ key: m[1] ?? '', op: m[2] === 'in' ? 'in' : 'notin', values: (m[3] ?? '').split(',').map((v) => v.trim()) });
    } else if ((m = /^!\s*([\w./-]+)$/.exec(raw)) !== null) {
      requirements.push({ key: m[1] ?? '', op: 'notexists', values: [] });
    } else if ((m = /^([\w./-]+)$/.exec(raw)) !== null) {
      requirements.push({ key: m[1] ?? '', op: 'exists', values: [] });
    } else {
      return new Error(`"${raw}"`);
    }
  }
  return requirements;
}

function matches(labels: Record<string, string> | undefined, selector: Selector): boolean {
  return selector.every((r) => {
    const value = labels?.[r.key];
    switch (r.op) {
      case 'in':
        return value !== undefined && r.values.includes(value);
      case 'notin':
        return value === undefined || !r.values.includes(value);
      case 'exists':
        return value !== undefined;
      case 'notexists':
        return value === undefined;
    }
  });
}

function inScope(o: KubeObject, namespace: string | undefined, selector: Selector): boolean {
  return (namespace === undefined || o.metadata.namespace === namespace) && matches(o.metadata.labels, selector);
}

function keyOf(o: KubeObject): string {
  return `${o.metadata.namespace ?? ''}/${o.metadata.name}`;
}

function escapeRegExp(s: string): string {
  return s.replace(/[.*+?^${}()|[\]\\]/g, '\\$&');
}

function sum(values: Iterable<number>): number {
  let total = 0;
  for (const v of values) total += v;
  return total;
}

// ---- kubeconfig -----------------------------------------------------------------------------

/**
 * Writes a kubeconfig pointing at `server` (plain HTTP, a dummy bearer token) and returns its
 * path. client-node refuses `http:` servers unless `insecure-skip-tls-verify` is set.
 */
export function writeKubeconfig(dir: string, server: string | FakeKubeApi, fileName = 'kubeconfig.yaml'): string {
  const url = typeof server === 'string' ? server : server.url;
  const text = [
    'apiVersion: v1',
    'kind: Config',
    'clusters:',
    '  - name: fake',
    '    cluster:',
    `      server: ${url}`,
    '      insecure-skip-tls-verify: true',
    'users:',
    '  - name: fake',
    '    user:',
    '      token: fake-token',
    'contexts:',
    '  - name: fake',
    '    context:',
    '      cluster: fake',
    '      user: fake',
    'current-context: fake',
    '',
  ].join('\n');
  const path = join(dir, fileName);
  writeFileSync(path, text, { mode: 0o600 });
  return path;
}
