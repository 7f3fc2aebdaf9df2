// The Kubernetes endpoint source: lists and watches the Pods of each configured pool (and,
// when enabled, the InferencePools that define more pools) and reports every replica with its
// state from `classifyPod`. This is the only file that imports @kubernetes/client-node.
//
// We drive list → watch → relist ourselves instead of using the library's informer: the informer
// does not restart itself after every kind of error, and recovery is the whole point here. Each
// collection runs one loop: list (retrying with backoff until the API answers), then watch from
// the list's resourceVersion (bookmarks keep it fresh); a 410 Gone means relist; a dropped
// connection or an API error means rewatch from the last resourceVersion after a backoff.

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

interface ListResult {
  readonly items: readonly unknown[];
  readonly resourceVersion: string;
}

/** One listable, watchable collection (pods of a pool, InferencePools of a namespace). */
interface Collection {
  readonly resource: string;
  readonly watchPath: string;
  readonly labelSelector: string | undefined;
  list(signal: AbortSignal, timeoutSeconds: number): Promise<ListResult>;
}

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
 * Keeps one collection's objects in sync with the API server, forever, until stopped. Every
 * change calls `onChange`; the owner reads `items()`.
 */
class ListWatchLoop {
  private readonly objects = new Map<string, WatchedObject>();
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
    private readonly collection: Collection,
    private readonly deps: LoopDeps,
    private readonly onChange: () => void,
  ) {
    this.log = deps.logger.child({ resource: collection.resource });
  }

  get synced(): boolean {
    return this.listedOnce;
  }

  items(): WatchedObject[] {
    return [...this.objects.values()];
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

  /** Lists the collection and replaces the cached objects; false when the API did not answer. */
  private async relist(): Promise<boolean> {
    const controller = new AbortController();
    this.cancelCurrent = () => controller.abort();
    // A plain timer rather than AbortSignal.timeout/any: on Node 20 a composed timeout signal can
    // be garbage-collected before it fires, leaving a hung list hanging forever.
    const timer = setTimeout(() => controller.abort(new Error(`list timed out after ${this.deps.listSeconds} s`)), this.deps.listSeconds * 1000);
    try {
      const result = await this.collection.list(controller.signal, Math.max(1, Math.ceil(this.deps.listSeconds)));
      if (this.stopped) return false;
      this.objects.clear();
      for (const item of result.items) {
        const name = nameOf(item);
        if (name !== undefined) this.objects.set(name, item as WatchedObject);
      }
      this.resourceVersion = result.resourceVersion;
      const first = !this.listedOnce;
      this.listedOnce = true;
      this.failures = 0;
      this.deps.observer?.listed(this.collection.resource);
      this.log[first ? 'info' : 'debug']({ count: this.objects.size, resourceVersion: this.resourceVersion }, first ? 'initial list complete' : 'relisted');
      this.onChange();
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
          this.objects.set(name, object as WatchedObject);
        } else if (type === 'DELETED') {
          this.objects.delete(name);
        } else {
          return;
        }
        this.onChange();
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

interface PoolWatch {
  def: PoolDefinition;
  readonly loop: ListWatchLoop;
}

export class KubernetesSource implements EndpointSource {
  readonly name = SOURCE_NAME;
  private readonly kubeConfig: KubeConfig;
  private readonly core: CoreV1Api;
  private readonly custom: CustomObjectsApi;
  private readonly deps: LoopDeps;
  private readonly log: Logger;
  private readonly staticPools: PoolWatch[];
  private readonly inferencePoolLoops = new Map<string, ListWatchLoop>();
  private readonly dynamicPools = new Map<string, PoolWatch>();
  private readonly stopping = new Set<Promise<void>>();
  private readonly warned = new Set<string>();
  private readonly modelsAnnotation: string;
  private sink: EndpointSink | undefined;
  private synced = false;
  private stopped = false;

  /** Throws on an invalid config or an unloadable kubeconfig; never on an unreachable API server. */
  constructor(
    private readonly config: KubernetesSourceConfig,
    options: KubernetesSourceOptions,
  ) {
    validateConfig(config);
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
    this.staticPools = config.pools.map((p) => {
      const def: PoolDefinition = { ...p, selector: { ...p.selector }, models: [...p.models] };
      return { def, loop: this.podLoop(def) };
    });
  }

  /** Kicks off every list/watch loop and returns at once; `markSynced` follows the first complete view. */
  start(sink: EndpointSink): void {
    if (this.sink !== undefined) throw new Error('KubernetesSource already started');
    this.sink = sink;
    this.log.info({ server: this.kubeConfig.getCurrentCluster()?.server, pools: this.staticPools.length }, 'starting kubernetes endpoint source');
    for (const p of this.staticPools) p.loop.start();
    if (this.config.inferencePools?.enabled) {
      for (const namespace of new Set(this.config.inferencePools.namespaces)) {
        const loop = new ListWatchLoop(this.inferencePoolCollection(namespace), this.deps, () => this.onInferencePoolsChanged());
        this.inferencePoolLoops.set(namespace, loop);
        loop.start();
      }
    }
    this.publish();
  }

  async stop(): Promise<void> {
    this.stopped = true;
    const loops = [
      ...this.staticPools.map((p) => p.loop),
      ...this.inferencePoolLoops.values(),
      ...[...this.dynamicPools.values()].map((p) => p.loop),
    ];
    await Promise.all([...loops.map((l) => l.stop()), ...this.stopping]);
  }

  private podLoop(def: PoolDefinition): ListWatchLoop {
    return new ListWatchLoop(this.podCollection(def), this.deps, () => this.publish());
  }

  private podCollection(def: PoolDefinition): Collection {
    const labelSelector = formatSelector(def.selector);
    return {
      resource: `pods/${def.name}`,
      watchPath: `/api/v1/namespaces/${encodeURIComponent(def.namespace)}/pods`,
      labelSelector,
      list: async (signal, timeoutSeconds) => {
        const list = await this.core.listNamespacedPod({ namespace: def.namespace, labelSelector, timeoutSeconds }, withSignal(signal));
        return { items: list.items, resourceVersion: list.metadata?.resourceVersion ?? '' };
      },
    };
  }

  private inferencePoolCollection(namespace: string): Collection {
    return {
      resource: `inferencepools/${namespace}`,
      watchPath: `/apis/${INFERENCE_POOL.group}/${INFERENCE_POOL.version}/namespaces/${encodeURIComponent(namespace)}/${INFERENCE_POOL.plural}`,
      labelSelector: undefined,
      list: async (signal, timeoutSeconds) => {
        const list: unknown = await this.custom.listNamespacedCustomObject({ ...INFERENCE_POOL, namespace, timeoutSeconds }, withSignal(signal));
        return parseCustomList(list);
      },
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
          this.warnOnce(`models:${parsed.name}`,
            `InferencePool ${parsed.name} has no ${this.modelsAnnotation} annotation; it serves no model names`);
        }
        desired.set(parsed.name, parsed);
      }
    }

    for (const [name, current] of this.dynamicPools) {
      const next = desired.get(name);
      if (next === undefined || next.namespace !== current.def.namespace || formatSelector(next.selector) !== formatSelector(current.def.selector)) {
        this.dynamicPools.delete(name);
        this.stopLoop(current.loop);
        this.log.info({ pool: name }, next === undefined ? 'InferencePool removed' : 'InferencePool selector changed');
      } else {
        current.def = next;
      }
    }
    for (const [name, def] of desired) {
      if (this.dynamicPools.has(name)) continue;
      const loop = this.podLoop(def);
      this.dynamicPools.set(name, { def, loop });
      this.log.info({ pool: name, selector: formatSelector(def.selector), targetPort: def.targetPort }, 'InferencePool added');
      loop.start();
    }
    this.publish();
  }

  private stopLoop(loop: ListWatchLoop): void {
    const stopping = loop.stop();
    this.stopping.add(stopping);
    void stopping.finally(() => this.stopping.delete(stopping));
  }

  /** Sends the complete view to the sink; marks the source synced once every collection has listed. */
  private publish(): void {
    if (this.stopped || this.sink === undefined) return;
    const dynamic = [...this.dynamicPools.values()].sort((a, b) => a.def.name.localeCompare(b.def.name));
    const all = [...this.staticPools, ...dynamic];
    const pools: ObservedPool[] = all.map(({ def, loop }) => ({
      name: def.name,
      models: def.models,
      endpoints: loop.items().map((pod) => toEndpoint(pod as PodObject, def)).sort((a, b) => a.id.localeCompare(b.id)),
    }));
    try {
      this.sink.replaceAll(SOURCE_NAME, pools);
    } catch (err: unknown) {
      // Callers sit inside client-node callbacks that swallow exceptions; make a sink bug visible.
      this.log.error({ err }, 'endpoint sink rejected the kubernetes view');
      return;
    }
    if (!this.synced && all.every((p) => p.loop.synced) && [...this.inferencePoolLoops.values()].every((l) => l.synced)) {
      this.synced = true;
      this.log.info({ pools: pools.length, endpoints: pools.reduce((n, p) => n + p.endpoints.length, 0) }, 'kubernetes endpoint cache synced');
      this.sink.markSynced(SOURCE_NAME);
    }
  }

  private warnOnce(key: string, message: string): void {
    if (this.warned.has(key)) return;
    this.warned.add(key);
    this.log.warn(message);
  }
}

function toEndpoint(pod: PodObject, def: PoolDefinition): ObservedEndpoint {
  const { state, reason } = classifyPod(pod);
  const ip = pod.status?.podIP ?? '';
  return {
    id: `${pod.metadata?.namespace ?? def.namespace}/${pod.metadata?.name ?? ''}`,
    address: ip === '' ? '' : formatAddress(ip, def.targetPort),
    state,
    reason,
  };
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

function parseCustomList(list: unknown): ListResult {
  const items = field(list, 'items');
  const rv = field(field(list, 'metadata'), 'resourceVersion');
  return { items: Array.isArray(items) ? (items as unknown[]) : [], resourceVersion: typeof rv === 'string' ? rv : '' };
}

function validateConfig(config: KubernetesSourceConfig): void {
  const names = new Set<string>();
  for (const p of config.pools) {
    if (p.name === '') throw new Error('kubernetes pool without a name');
    if (names.has(p.name)) throw new Error(`kubernetes pool ${p.name} is defined twice`);
    names.add(p.name);
    if (p.namespace === '') throw new Error(`kubernetes pool ${p.name} has no namespace`);
    if (Object.keys(p.selector).length === 0) {
      throw new Error(`kubernetes pool ${p.name} has an empty selector (it would select every pod in ${p.namespace})`);
    }
    if (!Number.isInteger(p.targetPort) || p.targetPort < 1 || p.targetPort > 65535) {
      throw new Error(`kubernetes pool ${p.name} has an invalid targetPort ${p.targetPort}`);
    }
  }
  if (config.inferencePools?.enabled && config.inferencePools.namespaces.length === 0) {
    throw new Error('kubernetes.inferencePools is enabled but lists no namespaces');
  }
  const b = config.backoff;
  if (b !== undefined && !(b.initialMs > 0 && b.maxMs >= b.initialMs)) {
    throw new Error('kubernetes.backoff needs 0 < initialMs <= maxMs');
  }
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
