// The Kubernetes endpoint source: lists and watches the Pods of each configured pool (and,
// when enabled, the InferencePools that define more pools) and reports every replica with its
// state from `classifyPod`. This is the only file that imports @kubernetes/client-node.
//
// We drive list → watch → relist ourselves instead of using the library's informer: the informer
// does not restart itself after every kind of error, and recovery is the whole point here. Each
// collection runs one loop: list (retrying with backoff until the API answers), then watch from
// the list's resourceVersion (bookmarks keep it fresh); a 410 Gone means relist; a dropped
// connection or an API error means rewatch from the last resourceVersion after a backoff.
//
// Built for pools of thousands of pods: lists are paged (limit/continue), each loop keeps only a
// small projection of every object (a classified pod, not the whole V1Pod), a watch event touches
// only its own pod, unchanged pools keep their ObservedPool object (the store reuses its view of
// them), and a burst of events publishes one view.

import { CoreV1Api, CustomObjectsApi, KubeConfig, Observable, Watch } from '@kubernetes/client-node';
import type { ConfigurationOptions, ObservableMiddleware, RequestContext, ResponseContext } from '@kubernetes/client-node';
import { isIPv6 } from 'node:net';
import type { Logger } from 'pino';
import type { EndpointSink, EndpointSource, ObservedEndpoint, ObservedPool } from './model.js';
import { classifyPod } from './pod-state.js';
import type { PodFacts } from './pod-state.js';
import { errorMessage } from '../util/error-message.js';

export interface KubernetesPoolConfig {
  /** Pool name used in routing, errors and metrics. */
  name: string;
  namespace: string;
  /** Equality label selector (`matchLabels`); must not be empty. */
  selector: Record<string, string>;
  /** Port of the model server on each pod. */
  targetPort: number;
  /** Model names this pool serves (the `model` field of OpenAI requests). */
  models: string[];
}

/** Validated by buildConfig (src/config/schema.ts): pool names unique, selectors non-empty, ports 1–65535. */
export interface KubernetesSourceConfig {
  /** Explicit kubeconfig file; otherwise in-cluster config, otherwise the default loading rules. */
  kubeconfigPath?: string;
  pools: KubernetesPoolConfig[];
  inferencePools?: {
    enabled: boolean;
    namespaces: string[];
    /** Annotation holding comma-separated served model names. Default `llm-extproc.io/models`. */
    modelsAnnotation?: string;
  };
  backoff?: { initialMs: number; maxMs: number };
  /** Request timeouts. Defaults: list 30 s, watch 300 s (the server ends the watch; we rewatch). */
  timeouts?: { listSeconds?: number; watchSeconds?: number };
}

/** Hooks for metrics. `resource` is `pods/<pool>` or `inferencepools/<namespace>`. */
export interface KubernetesSourceObserver {
  /** A watch ended abnormally and will be restarted: `gone` = 410 (relist), `dropped` = connection lost, `error` = API error. */
  watchRestarted(resource: string, reason: 'gone' | 'dropped' | 'error'): void;
  /** A (re)list completed: the cache for `resource` is fresh as of now. */
  listed(resource: string): void;
  /** A watch event arrived (including bookmarks): the cache for `resource` is fresh as of now. */
  eventReceived(resource: string): void;
}

export interface KubernetesSourceOptions {
  logger: Logger;
  observer?: KubernetesSourceObserver;
}

export const DEFAULT_MODELS_ANNOTATION = 'llm-extproc.io/models';
const SOURCE_NAME = 'kubernetes';
const DEFAULT_BACKOFF = { initialMs: 500, maxMs: 30_000 };
const DEFAULT_LIST_SECONDS = 30;
// Short watches bound how long a silently dead connection (no RST, no data) can go unnoticed.
const DEFAULT_WATCH_SECONDS = 60;
/** How long past its requested timeout a silent watch may stay open before we assume a dead connection. */
const WATCH_IDLE_GRACE_MS = 15_000;

const INFERENCE_POOL = { group: 'inference.networking.k8s.io', version: 'v1', plural: 'inferencepools' } as const;

/** Resolved pool: from the config file or from an InferencePool. */
interface PoolDefinition {
  readonly name: string;
  readonly namespace: string;
  readonly selector: Readonly<Record<string, string>>;
  readonly targetPort: number;
  readonly models: readonly string[];
}

/** What we need of any watched object; pods additionally satisfy `PodFacts`. */
interface WatchedObject {
  readonly metadata?: {
    readonly name?: string;
    readonly namespace?: string;
    readonly resourceVersion?: string;
    readonly annotations?: Readonly<Record<string, string>>;
  };
}

type PodObject = WatchedObject & PodFacts & { readonly status?: { readonly podIP?: string | null } | null };

interface ListPage {
  readonly items: readonly unknown[];
  readonly resourceVersion: string;
  /** The continue token of a paged list; empty or absent on the last page. */
  readonly continueToken?: string | undefined;
}

/** Objects per list page: bounds the memory a relist of thousands of pods needs at once. */
export const LIST_PAGE_SIZE = 500;

/** One listable, watchable collection (pods of a pool, InferencePools of a namespace). */
interface Collection<T> {
  readonly resource: string;
  readonly watchPath: string;
  readonly labelSelector: string | undefined;
  list(signal: AbortSignal, timeoutSeconds: number, continueToken: string | undefined): Promise<ListPage>;
  /** What the loop keeps of an object (the rest is garbage at once); `undefined` skips it. */
  project(object: unknown): T | undefined;
}

/** What changed in a loop's objects: everything (a relist), or one object by name. */
type LoopChange = { readonly kind: 'reset' } | { readonly kind: 'set' | 'delete'; readonly name: string };

interface WatchFailure {
  readonly kind: 'gone' | 'dropped' | 'error';
  readonly detail: string;
  readonly sawEvents: boolean;
}

/** How a watch connection ended: a failure to recover from, a routine timeout, or our own stop. */
type WatchEnd = WatchFailure | { readonly kind: 'expired' } | { readonly kind: 'stopped' };

interface LoopDeps {
  readonly watch: Watch;
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
class ListWatchLoop<T> {
  private objects = new Map<string, T>();
  private resourceVersion = '';
  private listedOnce = false;
  private stopped = false;
  private failures = 0;
  private goneStreak = 0;
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
      this.log[first ? 'info' : 'debug'](
        { count: this.objects.size, pages, resourceVersion: this.resourceVersion },
        first ? 'initial list complete' : 'relisted',
      );
      this.onChange({ kind: 'reset' });
      return true;
    } catch (err: unknown) {
      if (!this.stopped) {
        const detail = controller.signal.aborted ? describeError(controller.signal.reason) : describeError(err);
        this.log.warn({ detail, attempt: this.failures + 1 }, 'list failed; will retry');
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
      let controller: AbortController | undefined;
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

/** What a pod loop keeps of each pod: its classification and IP, not the whole object. */
interface PodEntry {
  readonly id: string;
  readonly ip: string;
  readonly state: ObservedEndpoint['state'];
  readonly reason: string;
}

function projectPod(object: unknown, namespace: string): PodEntry | undefined {
  const pod = object as PodObject;
  const name = pod.metadata?.name;
  if (name === undefined) return undefined;
  const { state, reason } = classifyPod(pod);
  return { id: `${pod.metadata?.namespace ?? namespace}/${name}`, ip: pod.status?.podIP ?? '', state, reason };
}

/** Plain code-point order: a stable total order, and far cheaper than localeCompare at thousands of pods. */
function compareNames(a: string, b: string): number {
  return a < b ? -1 : a > b ? 1 : 0;
}

/** First index in the sorted `names` whose name is not below `name`. */
function lowerBound(names: readonly string[], name: string): number {
  let lo = 0;
  let hi = names.length;
  while (lo < hi) {
    const mid = (lo + hi) >>> 1;
    if ((names[mid] ?? '') < name) lo = mid + 1;
    else hi = mid;
  }
  return lo;
}

/**
 * One pool's pods, kept ready to publish: the endpoint of each pod, the pod names in order, and the
 * ObservedPool last published. A watch event re-derives only its own pod's endpoint and marks the
 * pool dirty only when that endpoint really changed (a label or annotation edit does not).
 */
class PoolWatch {
  readonly loop: ListWatchLoop<PodEntry>;
  private readonly endpoints = new Map<string, ObservedEndpoint>();
  private names: string[] = [];
  private published: ObservedPool | undefined;

  constructor(
    private definition: PoolDefinition,
    collection: Collection<PodEntry>,
    deps: LoopDeps,
    private readonly changed: () => void,
  ) {
    this.loop = new ListWatchLoop(collection, deps, (change) => this.apply(change));
  }

  get def(): PoolDefinition {
    return this.definition;
  }

  /** Takes a new definition with the same namespace and selector (models or port may differ). */
  redefine(next: PoolDefinition): void {
    const portChanged = next.targetPort !== this.definition.targetPort;
    const modelsChanged = next.models.join('\u0000') !== this.definition.models.join('\u0000');
    this.definition = next;
    if (portChanged) this.apply({ kind: 'reset' });
    else if (modelsChanged) this.published = undefined;
  }

  /** The pool as last published, rebuilt only if something changed since. */
  view(): ObservedPool {
    if (this.published === undefined) {
      const endpoints: ObservedEndpoint[] = [];
      for (const name of this.names) {
        const endpoint = this.endpoints.get(name);
        if (endpoint !== undefined) endpoints.push(endpoint);
      }
      this.published = { name: this.definition.name, models: this.definition.models, endpoints };
    }
    return this.published;
  }

  private apply(change: LoopChange): void {
    if (change.kind === 'reset') {
      this.endpoints.clear();
      for (const [name, entry] of this.loop.entries()) this.endpoints.set(name, this.toEndpoint(entry));
      this.names = [...this.endpoints.keys()].sort(compareNames);
    } else if (change.kind === 'delete') {
      if (!this.endpoints.delete(change.name)) return;
      const at = lowerBound(this.names, change.name);
      if (this.names[at] === change.name) this.names.splice(at, 1);
    } else {
      const entry = this.loop.get(change.name);
      if (entry === undefined) return;
      const next = this.toEndpoint(entry);
      const previous = this.endpoints.get(change.name);
      if (previous !== undefined && sameEndpoint(previous, next)) return;
      this.endpoints.set(change.name, next);
      if (previous === undefined) this.names.splice(lowerBound(this.names, change.name), 0, change.name);
    }
    this.published = undefined;
    this.changed();
  }

  private toEndpoint(entry: PodEntry): ObservedEndpoint {
    return {
      id: entry.id,
      address: entry.ip === '' ? '' : formatAddress(entry.ip, this.definition.targetPort),
      state: entry.state,
      reason: entry.reason,
    };
  }
}

function sameEndpoint(a: ObservedEndpoint, b: ObservedEndpoint): boolean {
  return a.id === b.id && a.address === b.address && a.state === b.state && a.reason === b.reason;
}

export class KubernetesSource implements EndpointSource {
  readonly name = SOURCE_NAME;
  private readonly kubeConfig: KubeConfig;
  private readonly core: CoreV1Api;
  private readonly custom: CustomObjectsApi;
  private readonly deps: LoopDeps;
  private readonly log: Logger;
  private readonly staticPools: PoolWatch[];
  private readonly inferencePoolLoops = new Map<string, ListWatchLoop<WatchedObject>>();
  private readonly dynamicPools = new Map<string, PoolWatch>();
  private readonly stopping = new Set<Promise<void>>();
  private readonly warned = new Set<string>();
  private readonly modelsAnnotation: string;
  private sink: EndpointSink | undefined;
  private publishScheduled: NodeJS.Immediate | undefined;
  private synced = false;
  private stopped = false;

  /**
   * `config` comes from buildConfig, which validated it against the config schema (src/config/schema.ts).
   * Throws on an unloadable kubeconfig; never on an unreachable API server.
   */
  constructor(
    private readonly config: KubernetesSourceConfig,
    options: KubernetesSourceOptions,
  ) {
    this.kubeConfig = loadKubeConfig(config.kubeconfigPath);
    this.core = this.kubeConfig.makeApiClient(CoreV1Api);
    this.custom = this.kubeConfig.makeApiClient(CustomObjectsApi);
    this.log = options.logger.child({ source: SOURCE_NAME });
    this.deps = {
      watch: new Watch(this.kubeConfig),
      logger: this.log,
      observer: options.observer,
      backoff: config.backoff ?? DEFAULT_BACKOFF,
      listSeconds: config.timeouts?.listSeconds ?? DEFAULT_LIST_SECONDS,
      watchSeconds: config.timeouts?.watchSeconds ?? DEFAULT_WATCH_SECONDS,
    };
    this.modelsAnnotation = config.inferencePools?.modelsAnnotation ?? DEFAULT_MODELS_ANNOTATION;
    this.staticPools = config.pools.map((p) => this.poolWatch({ ...p, selector: { ...p.selector }, models: [...p.models] }));
  }

  /** Kicks off every list/watch loop and returns at once; `markSynced` follows the first complete view. */
  start(sink: EndpointSink): void {
    if (this.sink !== undefined) throw new Error('KubernetesSource already started');
    this.sink = sink;
    this.log.info(
      { server: this.kubeConfig.getCurrentCluster()?.server, pools: this.staticPools.length },
      'starting kubernetes endpoint source',
    );
    for (const p of this.staticPools) p.loop.start();
    if (this.config.inferencePools?.enabled) {
      for (const namespace of new Set(this.config.inferencePools.namespaces)) {
        const loop = new ListWatchLoop(this.inferencePoolCollection(namespace), this.deps, () => this.onInferencePoolsChanged());
        this.inferencePoolLoops.set(namespace, loop);
        loop.start();
      }
    }
    this.schedulePublish();
  }

  async stop(): Promise<void> {
    this.stopped = true;
    if (this.publishScheduled !== undefined) clearImmediate(this.publishScheduled);
    this.publishScheduled = undefined;
    const loops = [
      ...this.staticPools.map((p) => p.loop),
      ...this.inferencePoolLoops.values(),
      ...[...this.dynamicPools.values()].map((p) => p.loop),
    ];
    await Promise.all([...loops.map((l) => l.stop()), ...this.stopping]);
  }

  private poolWatch(def: PoolDefinition): PoolWatch {
    return new PoolWatch(def, this.podCollection(def), this.deps, () => this.schedulePublish());
  }

  private podCollection(def: PoolDefinition): Collection<PodEntry> {
    const labelSelector = formatSelector(def.selector);
    return {
      resource: `pods/${def.name}`,
      watchPath: `/api/v1/namespaces/${encodeURIComponent(def.namespace)}/pods`,
      labelSelector,
      list: async (signal, timeoutSeconds, continueToken) => {
        const list = await this.core.listNamespacedPod(
          { namespace: def.namespace, labelSelector, timeoutSeconds, limit: LIST_PAGE_SIZE, _continue: continueToken },
          withSignal(signal),
        );
        return { items: list.items, resourceVersion: list.metadata?.resourceVersion ?? '', continueToken: list.metadata?._continue };
      },
      project: (object) => projectPod(object, def.namespace),
    };
  }

  private inferencePoolCollection(namespace: string): Collection<WatchedObject> {
    return {
      resource: `inferencepools/${namespace}`,
      watchPath: `/apis/${INFERENCE_POOL.group}/${INFERENCE_POOL.version}/namespaces/${encodeURIComponent(namespace)}/${INFERENCE_POOL.plural}`,
      labelSelector: undefined,
      list: async (signal, timeoutSeconds, continueToken) => {
        const list: unknown = await this.custom.listNamespacedCustomObject(
          { ...INFERENCE_POOL, namespace, timeoutSeconds, limit: LIST_PAGE_SIZE, _continue: continueToken },
          withSignal(signal),
        );
        return parseCustomList(list);
      },
      project: (object) => object as WatchedObject,
    };
  }

  /** Brings the InferencePool-defined pools in line with the InferencePools we see. */
  private onInferencePoolsChanged(): void {
    if (this.stopped) return;
    const staticNames = new Set(this.staticPools.map((p) => p.def.name));
    const desired = new Map<string, PoolDefinition>();
    for (const loop of this.inferencePoolLoops.values()) {
      for (const object of loop.items()) {
        const parsed = parseInferencePool(object, this.modelsAnnotation);
        if (typeof parsed === 'string') {
          // Keyed by object and problem, not resourceVersion: a re-saved object must not warn (or grow the set) again.
          this.warnOnce(`invalid:${object.metadata?.namespace ?? ''}/${object.metadata?.name ?? ''}:${parsed}`, parsed);
          continue;
        }
        if (staticNames.has(parsed.name)) {
          this.warnOnce(`clash:${parsed.name}`, `InferencePool ${parsed.name} has the same name as a configured pool; ignoring it`);
          continue;
        }
        if (parsed.models.length === 0) {
          this.warnOnce(
            `models:${parsed.name}`,
            `InferencePool ${parsed.name} has no ${this.modelsAnnotation} annotation; it serves no model names`,
          );
        }
        desired.set(parsed.name, parsed);
      }
    }

    for (const [name, current] of this.dynamicPools) {
      const next = desired.get(name);
      if (
        next === undefined ||
        next.namespace !== current.def.namespace ||
        formatSelector(next.selector) !== formatSelector(current.def.selector)
      ) {
        this.dynamicPools.delete(name);
        this.stopLoop(current.loop);
        this.log.info({ pool: name }, next === undefined ? 'InferencePool removed' : 'InferencePool selector changed');
      } else {
        current.redefine(next);
      }
    }
    for (const [name, def] of desired) {
      if (this.dynamicPools.has(name)) continue;
      const pool = this.poolWatch(def);
      this.dynamicPools.set(name, pool);
      this.log.info({ pool: name, selector: formatSelector(def.selector), targetPort: def.targetPort }, 'InferencePool added');
      pool.loop.start();
    }
    this.schedulePublish();
  }

  private stopLoop(loop: ListWatchLoop<PodEntry>): void {
    const stopping = loop.stop();
    this.stopping.add(stopping);
    void stopping.finally(() => this.stopping.delete(stopping));
  }

  /**
   * Publishes once after the current burst of events: a watch chunk often carries many events,
   * and a relist of thousands of pods must not become thousands of views.
   */
  private schedulePublish(): void {
    if (this.stopped || this.publishScheduled !== undefined) return;
    this.publishScheduled = setImmediate(() => {
      this.publishScheduled = undefined;
      this.publish();
    });
  }

  /** Sends the complete view to the sink; marks the source synced once every collection has listed. */
  private publish(): void {
    if (this.stopped || this.sink === undefined) return;
    const dynamic = [...this.dynamicPools.values()].sort((a, b) => compareNames(a.def.name, b.def.name));
    const all = [...this.staticPools, ...dynamic];
    const pools: ObservedPool[] = all.map((p) => p.view());
    try {
      this.sink.replaceAll(SOURCE_NAME, pools);
    } catch (err: unknown) {
      // Callers sit inside client-node callbacks that swallow exceptions; make a sink bug visible.
      this.log.error({ err }, 'endpoint sink rejected the kubernetes view');
      return;
    }
    if (!this.synced && all.every((p) => p.loop.synced) && [...this.inferencePoolLoops.values()].every((l) => l.synced)) {
      this.synced = true;
      this.log.info(
        { pools: pools.length, endpoints: pools.reduce((n, p) => n + p.endpoints.length, 0) },
        'kubernetes endpoint cache synced',
      );
      this.sink.markSynced(SOURCE_NAME);
    }
  }

  private warnOnce(key: string, message: string): void {
    if (this.warned.has(key)) return;
    this.warned.add(key);
    this.log.warn(message);
  }
}

function formatAddress(ip: string, port: number): string {
  return isIPv6(ip) ? `[${ip}]:${port}` : `${ip}:${port}`;
}

/** `k1=v1,k2=v2`, sorted so equal selectors compare equal. */
function formatSelector(selector: Readonly<Record<string, string>>): string {
  return Object.keys(selector)
    .sort()
    .map((k) => `${k}=${selector[k] ?? ''}`)
    .join(',');
}

/** Turns an InferencePool (v1) into a pool definition, or says why it cannot. */
function parseInferencePool(object: WatchedObject, modelsAnnotation: string): PoolDefinition | string {
  const name = object.metadata?.name;
  const namespace = object.metadata?.namespace;
  if (name === undefined || namespace === undefined) return 'InferencePool without name or namespace';
  const id = `${namespace}/${name}`;
  const spec = field(object, 'spec');
  const matchLabels = field(field(spec, 'selector'), 'matchLabels');
  if (!isStringRecord(matchLabels) || Object.keys(matchLabels).length === 0) {
    return `InferencePool ${id} has no spec.selector.matchLabels; ignoring it`;
  }
  const ports = field(spec, 'targetPorts');
  const port = Array.isArray(ports) ? field(ports[0] as unknown, 'number') : undefined;
  if (typeof port !== 'number' || !Number.isInteger(port) || port < 1 || port > 65535) {
    return `InferencePool ${id} has no valid spec.targetPorts[0].number; ignoring it`;
  }
  const models = (object.metadata?.annotations?.[modelsAnnotation] ?? '')
    .split(',')
    .map((m) => m.trim())
    .filter((m) => m !== '');
  return { name: id, namespace, selector: matchLabels, targetPort: port, models };
}

function parseCustomList(list: unknown): ListPage {
  const items = field(list, 'items');
  const metadata = field(list, 'metadata');
  const rv = field(metadata, 'resourceVersion');
  const token = field(metadata, 'continue');
  return {
    items: Array.isArray(items) ? (items as unknown[]) : [],
    resourceVersion: typeof rv === 'string' ? rv : '',
    continueToken: typeof token === 'string' ? token : undefined,
  };
}

function loadKubeConfig(path: string | undefined): KubeConfig {
  const kc = new KubeConfig();
  if (path !== undefined && path !== '') {
    kc.loadFromFile(path);
  } else if (process.env['KUBERNETES_SERVICE_HOST']) {
    kc.loadFromCluster();
  } else {
    kc.loadFromDefault();
  }
  const cluster = kc.getCurrentCluster();
  if (cluster === null) throw new Error('kubeconfig has no current cluster');
  if (cluster.server.startsWith('http:') && !cluster.skipTLSVerify) {
    // client-node refuses plain HTTP otherwise, on every request; fail now with a clear message.
    throw new Error(`kubeconfig server ${cluster.server} is plain HTTP: set insecure-skip-tls-verify: true to allow it`);
  }
  return kc;
}

/** Per-request options that make the generated client honour an AbortSignal. */
function withSignal(signal: AbortSignal): ConfigurationOptions<ObservableMiddleware> {
  const middleware: ObservableMiddleware = {
    pre: (context: RequestContext) => {
      context.setSignal(signal);
      return new Observable(Promise.resolve(context));
    },
    post: (response: ResponseContext) => new Observable(Promise.resolve(response)),
  };
  return { middleware: [middleware], middlewareMergeStrategy: 'append' };
}

function field(value: unknown, key: string): unknown {
  return typeof value === 'object' && value !== null ? (value as Record<string, unknown>)[key] : undefined;
}

function isStringRecord(value: unknown): value is Record<string, string> {
  return typeof value === 'object' && value !== null && !Array.isArray(value) && Object.values(value).every((v) => typeof v === 'string');
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
