// Routing decisions for the data path: model → pools → ordered endpoints, with the load and
// passive-health bookkeeping that follows each request. Glue between the store (state owner),
// the pure picker and the load tracker.

import type { Endpoint, PoolView } from '../endpoints/model.js';
import type { AttemptFailure } from '../endpoints/passive-health.js';
import type { EndpointStore } from '../endpoints/store.js';
import { GatewayError } from '../errors/gateway-error.js';
import { noReadyReplicaError } from '../errors/no-ready-replica.js';
import type { LatencyTracker } from '../picker/latency-tracker.js';
import type { LoadTracker } from '../picker/load-tracker.js';
import { Picker } from '../picker/picker.js';
import { affinityKey, blockChars, NO_PROMPT, prefixLimit } from '../picker/prompt-hash.js';
import type { CacheBlockSize, PrefixLimit, PromptPrefix } from '../picker/prompt-hash.js';
import { cacheBlockFor, IN_FLIGHT_ONLY, poolSettings } from '../picker/settings.js';
import type { PickerSettings } from '../picker/settings.js';

export interface RoutedRequest {
  readonly model: string;
  /** Distinct endpoints: primary first, then fallbacks in the order Envoy should try them. */
  readonly endpoints: readonly Endpoint[];
  /**
   * The address list handed to Envoy: always 1 + `fallbacks` long, repeating endpoints when fewer
   * are ready. Envoy's retries walk this list, so they never run past it into the override_host
   * fallback policy, which may pick any host of the cluster (even one serving another model).
   */
  readonly destinations: readonly string[];
}

/** How fast one answer came, in seconds (undefined = not measured). */
export interface AnswerTimes {
  readonly timeToFirstToken: number | undefined;
  readonly timePerOutputToken: number | undefined;
}

/** What the picker may use about one request. */
export interface RouteRequest {
  readonly model: string;
  /**
   * The gateway's subset hint (`envoy.lb.subset_hint` → `x-gateway-destination-endpoint-subset`):
   * only these `ip:port` addresses may be picked. Undefined = no restriction.
   */
  readonly subset?: ReadonlySet<string>;
  /**
   * The leading part of the prompt's shared part (InferenceRequest.prompt), at most `promptLimit`
   * long: cut in the pools' cache blocks, it gives the affinity key. Absent = no affinity.
   */
  readonly prompt?: PromptPrefix;
}

export interface Routing {
  /** How much of a prompt the affinity key may depend on: what the request reader extracts. */
  readonly promptLimit: PrefixLimit;
  /** Throws GatewayError `model_not_found`, `no_ready_replica` or `pool_overloaded`. */
  route(request: RouteRequest): RoutedRequest;
  release(routed: RoutedRequest): void;
  recordSuccess(endpoint: Endpoint): void;
  recordFailure(endpoint: Endpoint, failure: AttemptFailure): void;
  /**
   * How fast `endpoint` answered a request of `model` (seconds; undefined = not measured), at
   * `now` (performance.now() milliseconds): the latency signal's input.
   */
  recordLatency(model: string, endpoint: Endpoint, times: AnswerTimes, now: number): void;
  /** OpenAI `GET /v1/models` answer from the cache; throws `no_ready_replica` before the first sync. */
  modelList(): unknown;
  /** Whether some pool serves this model (bounds metric label values to configured models). */
  servesModel(model: string): boolean;
}

const NOT_SYNCED_RETRY_AFTER_SECONDS = 5;

export interface RoutingOptions {
  /** Must be at least the Envoy route's retry count (our shipped configs use the same number). */
  readonly fallbacks: number;
  /**
   * Serve exactly this pool: behind an InferencePool the gateway's cluster holds only its
   * endpoints. A scoped pool that lists no models serves whatever model a request names.
   */
  readonly pool?: string;
  readonly random?: () => number;
  /** Scorer weights, affinity and shedding; absent = least in-flight only. */
  readonly picker?: PickerSettings;
  /** Recent latency per endpoint, writing into the load tracker's board; absent = latency does not steer. */
  readonly latency?: LatencyTracker;
}

export class StoreRouting implements Routing {
  readonly promptLimit: PrefixLimit;
  private readonly picker: Picker;
  private readonly settings: PickerSettings;
  private readonly scoped = new WeakMap<PoolView, readonly PoolView[]>();

  constructor(
    private readonly store: EndpointStore,
    private readonly load: LoadTracker,
    private readonly options: RoutingOptions,
  ) {
    const settings = options.picker ?? IN_FLIGHT_ONLY;
    this.settings = settings;
    // Without prefix affinity no prompt is read at all. Pools the config names may cut their cache
    // in larger blocks than the default: extract enough for the largest.
    const sizes = [cacheBlockFor(settings, ''), ...Object.keys(settings.pools).map((pool) => cacheBlockFor(settings, pool))];
    this.promptLimit = settings.weights.prefix > 0 ? prefixLimit(sizes, settings.prefix.keyBlocks) : prefixLimit([], 0);
    // The picker reads the same signal cells the load tracker counts in (and the scraper fills).
    this.picker = new Picker(load.board, {
      weights: settings.weights,
      fallbacks: options.fallbacks,
      boundedLoad: { factor: settings.prefix.loadFactor, slack: settings.prefix.loadSlack, maxQueue: settings.prefix.maxQueue },
      maxAdaptersPerServer: settings.lora.maxAdaptersPerServer,
      poolPolicy: (pool) => poolSettings(settings, pool),
      random: options.random ?? Math.random,
    });
  }

  route(request: RouteRequest): RoutedRequest {
    const model = request.model;
    this.requireSynced(`model ${model} cannot be routed yet`, { model });
    // The pools as the view holds them (the picker caches its compiled candidates per view); the
    // subset hint travels in the request and is applied by the picker's filter.
    const pools = this.poolsFor(model);
    const key = affinityKey(request.prompt ?? NO_PROMPT, this.cacheBlockOf(pools), this.settings.prefix.keyBlocks);
    const outcome = this.picker.pick(pools, {
      model,
      ...(key === undefined ? {} : { affinityKey: key }),
      ...(request.subset === undefined ? {} : { subset: request.subset }),
    });
    if (outcome.kind === 'shed') {
      throw new GatewayError(
        'pool_overloaded',
        `every ready replica of the model ${model} has a full queue (at least ${outcome.shortestQueue} requests waiting; pool ${outcome.pools.join(', ')}); retry later`,
        { details: { model, pools: outcome.pools, shortest_queue: outcome.shortestQueue } },
      );
    }
    if (outcome.kind === 'none') throw this.nothingEligible(model, restrictToSubset(pools, request.subset), request.subset);
    const endpoints = outcome.endpoints;
    // Load is charged to the primary: it is where Envoy sends the request unless it cannot connect.
    this.load.acquire(endpoints[0].address);
    // A demoted replica waiting for its probe request gets this one.
    this.options.latency?.picked(model, endpoints[0].address);
    const destinations = new Array<string>(1 + this.options.fallbacks);
    for (let i = 0; i < destinations.length; i++) destinations[i] = endpoints[i % endpoints.length].address;
    return { model, endpoints, destinations };
  }

  /**
   * The cache block of a model's pools. When they differ (rare: one model on servers configured
   * apart), the largest: a block whole at that size is whole on every one of them.
   */
  private cacheBlockOf(pools: readonly PoolView[]): CacheBlockSize {
    let size = cacheBlockFor(this.settings, pools.length > 0 ? pools[0].name : '');
    for (let i = 1; i < pools.length; i++) {
      const other = cacheBlockFor(this.settings, pools[i].name);
      if (blockChars(other) > blockChars(size)) size = other;
    }
    return size;
  }

  /** The pools that may serve `model`: those listing it, or the one pool we are scoped to. */
  private poolsFor(model: string): readonly PoolView[] {
    const view = this.store.view();
    const scope = this.options.pool;
    if (scope === undefined) {
      const pools = view.poolsByModel.get(model);
      if (pools === undefined || pools.length === 0) {
        throw new GatewayError('model_not_found', `the model ${model} does not exist or is not served here`, {
          details: { param: 'model', model },
        });
      }
      return pools;
    }
    const pool = view.pools.get(scope);
    if (pool === undefined) {
      throw new GatewayError(
        'no_ready_replica',
        `model ${model} cannot be routed: the pool ${scope} this gateway serves is not known (yet). Retry in about ${NOT_SYNCED_RETRY_AFTER_SECONDS} s.`,
        {
          details: { model, pool: scope },
          retryAfterSeconds: NOT_SYNCED_RETRY_AFTER_SECONDS,
        },
      );
    }
    if (pool.models.length > 0 && !pool.models.includes(model)) {
      throw new GatewayError('model_not_found', `the model ${model} is not served by the pool ${scope} behind this gateway`, {
        details: { param: 'model', model, pool: scope },
      });
    }
    // The same array for as long as the pool object lives, so the picker's per-view cache hits.
    let scoped = this.scoped.get(pool);
    if (scoped === undefined) this.scoped.set(pool, (scoped = [pool]));
    return scoped;
  }

  private nothingEligible(model: string, candidates: readonly PoolView[], subset: ReadonlySet<string> | undefined): GatewayError {
    const endpoints = candidates.flatMap((pool) => pool.endpoints);
    if (subset === undefined) return noReadyReplicaError(model, endpoints);
    if (subset.size === 0) {
      return new GatewayError('no_ready_replica', `model ${model} cannot be routed: the gateway's subset hint names no endpoint`, {
        details: { model, subset_size: 0 },
        retryAfterSeconds: NOT_SYNCED_RETRY_AFTER_SECONDS,
      });
    }
    if (endpoints.length === 0) {
      return new GatewayError(
        'no_ready_replica',
        `model ${model} cannot be routed: none of the ${subset.size} endpoints in the gateway's subset hint serves it`,
        {
          details: { model, subset_size: subset.size },
          retryAfterSeconds: NOT_SYNCED_RETRY_AFTER_SECONDS,
        },
      );
    }
    const err = noReadyReplicaError(model, endpoints);
    return new GatewayError(
      'no_ready_replica',
      `${err.message} (only the ${subset.size} endpoints in the gateway's subset hint were eligible)`,
      {
        details: { ...err.details, subset_size: subset.size },
        ...(err.retryAfterSeconds === undefined ? {} : { retryAfterSeconds: err.retryAfterSeconds }),
      },
    );
  }

  release(routed: RoutedRequest): void {
    const primary = routed.endpoints[0];
    if (primary !== undefined) this.load.release(primary.address);
  }

  /** Until the source's first complete view we know neither the models nor their pods. */
  private requireSynced(what: string, details: Record<string, unknown>): void {
    if (this.store.isSynced()) return;
    throw new GatewayError(
      'no_ready_replica',
      `${what}: the endpoint list has not been loaded (waiting for the first sync with the endpoint source). Retry in about ${NOT_SYNCED_RETRY_AFTER_SECONDS} s.`,
      { details: { ...details, endpoints_synced: false }, retryAfterSeconds: NOT_SYNCED_RETRY_AFTER_SECONDS },
    );
  }

  recordSuccess(endpoint: Endpoint): void {
    this.store.recordSuccess(endpoint.address);
  }

  recordFailure(endpoint: Endpoint, failure: AttemptFailure): void {
    this.store.recordFailure(endpoint.address, failure);
  }

  recordLatency(model: string, endpoint: Endpoint, times: AnswerTimes, now: number): void {
    this.options.latency?.record({ model, pool: endpoint.pool, address: endpoint.address, ...times }, now);
  }

  servesModel(model: string): boolean {
    const scope = this.options.pool;
    if (scope === undefined) return this.store.view().poolsByModel.has(model);
    return this.store.view().pools.get(scope)?.models.includes(model) ?? false;
  }

  modelList(): unknown {
    this.requireSynced('the served models cannot be listed yet', {});
    const view = this.store.view();
    const scope = this.options.pool;
    const models = scope === undefined ? [...view.poolsByModel.keys()] : [...(view.pools.get(scope)?.models ?? [])];
    const data = models.sort().map((id) => ({ id, object: 'model', created: 0, owned_by: 'llm-extproc' }));
    return { object: 'list', data };
  }
}

/** Only the endpoints the gateway's subset hint names may be picked. */
function restrictToSubset(pools: readonly PoolView[], subset: ReadonlySet<string> | undefined): readonly PoolView[] {
  if (subset === undefined) return pools;
  return pools.map((pool) => ({ ...pool, endpoints: pool.endpoints.filter((endpoint) => subset.has(endpoint.address)) }));
}
