// The Kubernetes endpoint source: lists and watches the Pods of each configured pool (and,
// when enabled, the InferencePools that define more pools, and the InferenceObjectives that give
// their requests priorities) and reports every replica with its state from `classifyPod`. It loads
// the kubeconfig and hands each list-watch loop (list-watch.ts) its collection: lists through
// kube-list.ts, watches through client-node's Watch (kube-client.ts, the only importer of
// @kubernetes/client-node); the pods of a pool are kept by pod-pools.ts, InferencePools parsed by
// inference-pools.ts, InferenceObjectives by inference-objectives.ts.
//
// We drive list → watch → relist ourselves instead of using the library's informer: the informer
// does not restart itself after every kind of error, and recovery is the whole point here.
//
// Built for pools of thousands of pods: lists are paged (limit/continue), each loop keeps only a
// small projection of every object (a classified pod, not the whole V1Pod), a watch event touches
// only its own pod, unchanged pools keep their ObservedPool object (the store reuses its view of
// them), and a burst of events publishes one view.

import type { Logger } from 'pino';
import { KubeConfig, Watch } from './kube-client.js';
import { listPage } from './kube-list.js';
import type { EndpointSink, EndpointSource, ObservedPool } from './model.js';
import type { PoolDefinition, WatchedObject, PodEntry } from './pod-pools.js';
import { projectPod, compareNames, PoolWatch } from './pod-pools.js';
import type { KubernetesSourceObserver, Collection, LoopDeps } from './list-watch.js';

export type { KubernetesSourceObserver } from './list-watch.js';
import { LIST_PAGE_SIZE, ListWatchLoop } from './list-watch.js';
import { DEFAULT_MODELS_ANNOTATION, INFERENCE_POOL, parseInferencePool } from './inference-pools.js';
import { INFERENCE_OBJECTIVE_KINDS, indexObjectives, parseInferenceObjective } from './inference-objectives.js';
import type { ObjectiveIndex } from './inference-objectives.js';
import { INFERENCE_MODEL_REWRITE_KINDS, orderRewrites, parseInferenceModelRewrite } from './inference-model-rewrites.js';
import type { ClusterRewriteRule, RewriteDefinition } from './inference-model-rewrites.js';
import { AliasedKind } from './aliased-kind.js';
import type { ApiKind } from './aliased-kind.js';

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
    /** Watch InferenceObjectives in the same namespaces (priorities for flow control). Default true. */
    objectives?: boolean;
  };
  backoff?: { initialMs: number; maxMs: number };
  /** Request timeouts. Defaults: list 30 s, watch 300 s (the server ends the watch; we rewatch). */
  timeouts?: { listSeconds?: number; watchSeconds?: number };
}

export interface KubernetesSourceOptions {
  logger: Logger;
  observer?: KubernetesSourceObserver;
  /**
   * The InferenceObjectives of the pools we serve, each time that table changes (objectives or
   * pools). Until the first call routing has none, as while the CRD is not installed. Absent = no
   * InferenceObjective is watched (flow control, their only reader, is off everywhere).
   */
  objectivesChanged?: (index: ObjectiveIndex) => void;
  /**
   * The rewrite rules of the InferenceModelRewrites of the pools we serve (in precedence order),
   * each time they change. Absent = none watched.
   */
  rewritesChanged?: (rules: readonly ClusterRewriteRule[]) => void;
}

const SOURCE_NAME = 'kubernetes';

const DEFAULT_BACKOFF = { initialMs: 500, maxMs: 30_000 };

const DEFAULT_LIST_SECONDS = 30;

// Short watches bound how long a silently dead connection (no RST, no data) can go unnoticed.
const DEFAULT_WATCH_SECONDS = 60;

export class KubernetesSource implements EndpointSource {
  readonly name = SOURCE_NAME;
  private readonly kubeConfig: KubeConfig;
  private readonly deps: LoopDeps;
  private readonly log: Logger;
  private readonly staticPools: PoolWatch[];
  private readonly inferencePoolLoops = new Map<string, ListWatchLoop<WatchedObject>>();
  private readonly objectives: AliasedKind;
  private readonly objectivesChanged: ((index: ObjectiveIndex) => void) | undefined;
  private readonly rewrites: AliasedKind;
  private readonly rewritesChanged: ((rules: readonly ClusterRewriteRule[]) => void) | undefined;
  /** The last rules handed over, as text. */
  private rewritesKey = '';
  /** The last index handed over, as text: an unchanged table is not handed over again. */
  private objectivesKey = '';
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
    this.objectivesChanged = options.objectivesChanged;
    this.rewritesChanged = options.rewritesChanged;
    this.objectives = new AliasedKind(INFERENCE_OBJECTIVE_KINDS, 'InferenceObjective', this.log);
    this.rewrites = new AliasedKind(INFERENCE_MODEL_REWRITE_KINDS, 'InferenceModelRewrite', this.log);
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
        const loop = new ListWatchLoop(this.customCollection(INFERENCE_POOL, namespace, false), this.deps, () =>
          this.onInferencePoolsChanged(),
        );
        this.inferencePoolLoops.set(namespace, loop);
        loop.start();
        // Neither is part of the first sync: the CRDs are alpha and often absent; until one lists, none applies.
        const collection = (kind: ApiKind, legacy: boolean): Collection<WatchedObject> =>
          this.customCollection(kind, namespace, true, legacy);
        if (this.rewritesChanged !== undefined) this.rewrites.watch(collection, this.deps, () => this.onRewritesChanged());
        if (this.config.inferencePools.objectives === false || this.objectivesChanged === undefined) continue;
        this.objectives.watch(collection, this.deps, () => this.onObjectivesChanged());
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
      ...this.objectives.loops(),
      ...this.rewrites.loops(),
      ...[...this.dynamicPools.values()].map((p) => p.loop),
    ];
    await Promise.all([...loops.map((l) => l.stop()), ...this.stopping]);
  }

  private poolWatch(def: PoolDefinition): PoolWatch {
    return new PoolWatch(def, this.podCollection(def), this.deps, () => this.schedulePublish());
  }

  private podCollection(def: PoolDefinition): Collection<PodEntry> {
    const labelSelector = formatSelector(def.selector);
    const path = `/api/v1/namespaces/${encodeURIComponent(def.namespace)}/pods`;
    return {
      resource: `pods/${def.name}`,
      watchPath: path,
      labelSelector,
      list: (signal, timeoutSeconds, continueToken) =>
        listPage(this.kubeConfig, path, { labelSelector, timeoutSeconds, limit: LIST_PAGE_SIZE, continue: continueToken }, signal),
      project: (object) => projectPod(object, def.namespace),
    };
  }

  /**
   * One namespace's objects of a custom kind (InferencePools, InferenceObjectives), handed to the
   * loop as they are; `optional`: the kind's CRD may be missing (a refused list is said once and retried).
   */
  private customCollection(kind: ApiKind, namespace: string, optional: boolean, legacy = false): Collection<WatchedObject> {
    const path = `/apis/${kind.group}/${kind.version}/namespaces/${encodeURIComponent(namespace)}/${kind.plural}`;
    return {
      // A deprecated group's collection says its group: the same plural is watched under two.
      resource: `${legacy ? `${kind.plural}.${kind.group}` : kind.plural}/${namespace}`,
      watchPath: path,
      labelSelector: undefined,
      list: (signal, timeoutSeconds, continueToken) =>
        listPage(this.kubeConfig, path, { timeoutSeconds, limit: LIST_PAGE_SIZE, continue: continueToken }, signal),
      project: (object) => object as WatchedObject,
      optional,
    };
  }

  /** Hands routing the priorities of the objectives of the pools we serve now. */
  private onObjectivesChanged(): void {
    if (this.stopped || this.objectivesChanged === undefined || !this.objectives.watching) return;
    const definitions = this.parsedItems(this.objectives, (object) => parseInferenceObjective(object, this.modelsAnnotation));
    const { index, ignored } = indexObjectives(definitions, this.servedPools());
    for (const { id, why, reason } of ignored) {
      // Objectives of other pools are routine in a shared namespace (each pool's picker reads its own).
      if (why === 'other-pool') this.log.debug({ objective: id }, `InferenceObjective ignored: ${reason}`);
      else this.warnOnce(`objective-conflict:${id}:${reason}`, `InferenceObjective ${id} ignored: ${reason}`);
    }
    const summary = Object.fromEntries(
      [...index].map(([pool, o]) => [pool, { byName: Object.fromEntries(o.byName), byModel: Object.fromEntries(o.byModel) }]),
    );
    const key = JSON.stringify(summary);
    if (key === this.objectivesKey) return;
    this.objectivesKey = key;
    this.log.info({ objectives: summary }, 'InferenceObjective priorities changed');
    this.objectivesChanged(index);
  }

  /** Hands the request path the rewrite rules of the pools we serve now. */
  private onRewritesChanged(): void {
    if (this.stopped || this.rewritesChanged === undefined || !this.rewrites.watching) return;
    const definitions: RewriteDefinition[] = this.parsedItems(this.rewrites, parseInferenceModelRewrite);
    const rules = orderRewrites(definitions, this.servedPools());
    const key = JSON.stringify(rules);
    if (key === this.rewritesKey) return;
    this.rewritesKey = key;
    this.log.info({ rules }, 'InferenceModelRewrite rules changed');
    this.rewritesChanged(rules);
  }

  /** The applying objects of a kind, parsed; each unusable one is warned about once. */
  private parsedItems<T>(kind: AliasedKind, parse: (object: WatchedObject) => T | string): T[] {
    const parsed: T[] = [];
    for (const object of kind.items()) {
      const result = parse(object);
      if (typeof result === 'string')
        this.warnOnce(`parse:${object.metadata?.namespace ?? ''}/${object.metadata?.name ?? ''}:${result}`, result);
      else parsed.push(result);
    }
    return parsed;
  }

  private servedPools(): Set<string> {
    return new Set([...this.staticPools.map((p) => p.def.name), ...this.dynamicPools.keys()]);
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
    // Objectives and rewrites waiting for their pool apply now; those of a pool that went stop applying.
    this.onObjectivesChanged();
    this.onRewritesChanged();
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

/** `k1=v1,k2=v2`, sorted so equal selectors compare equal. */
function formatSelector(selector: Readonly<Record<string, string>>): string {
  return Object.keys(selector)
    .sort()
    .map((k) => `${k}=${selector[k] ?? ''}`)
    .join(',');
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
