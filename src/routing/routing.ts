// Routing decisions for the data path: model → pools → ordered endpoints, and the load each pick
// charges until its request ends; flow control's queue where a pool is saturated. Glue between the
// store (state owner), the pure picker and the load tracker. What became of a request is recorded
// elsewhere (the outcome sinks, src/outcomes/).

import { NO_OBJECTIVES } from '../endpoints/inference-objectives.js';
import type { ObjectiveIndex } from '../endpoints/inference-objectives.js';
import type { Endpoint, PoolView } from '../endpoints/model.js';
import type { EndpointStore } from '../endpoints/store.js';
import { GatewayError } from '../errors/gateway-error.js';
import { noReadyReplicaError } from '../errors/no-ready-replica.js';
import type { LatencyTracker } from '../picker/latency-tracker.js';
import type { LoadTracker } from '../picker/load-tracker.js';
import { Picker } from '../picker/picker.js';
import { candidateScorers, prefillCostsOf, SCORERS } from '../picker/scorer-table.js';
import type { ScoringRequest } from '../picker/scorer-table.js';
import { requestPriority } from './priority.js';
import { affinityKeyOf, NO_PROMPT, promptLimit, sharedTokensOf } from './affinity-key.js';
import type { PrecisePrefix } from '../kv-cache/precise-prefix.js';
import type { PromptSource } from '../kv-cache/prompt-source.js';
import type { PrefixLimit, PromptPrefix } from './affinity-key.js';
import { IN_FLIGHT_ONLY, poolPolicy } from '../picker/settings.js';
import type { PickerSettings, PoolPolicy } from '../picker/settings.js';
import { FlowControl } from './flow-control.js';
import { NOT_SYNCED_RETRY_AFTER_SECONDS, requireSynced } from './served-models.js';
import type { FlowObserver, QueuedRequest } from './flow-control.js';
import type { SessionAffinity, SessionReply } from './sessions.js';

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
  /** The primary's total score in the picker (traces). */
  readonly score?: number;
  /** The request named a session: the response tells the client its token (sessions.ts). */
  readonly session?: SessionReply;
}

/** What the picker may use about one request (its model, and its headers for the scorers that read one). */
export interface RouteRequest extends ScoringRequest {
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
  /** The prompt as the server will tokenize it (read only in precise mode). */
  readonly source?: PromptSource;
  /** The request body's size: what a long prompt's shared part is estimated from. */
  readonly bodyBytes?: number;
}

/** What flow control reads about one request (request headers, body size, body mode). */
export interface FlowRequest {
  /** The tenant header's value; absent = the default tenant. */
  readonly tenant: string | undefined;
  /** The priority header's value (a class name from the config). */
  readonly priorityClass: string | undefined;
  /** The objective header's value: an InferenceObjective's name. Optional for callers without one. */
  readonly objective?: string | undefined;
  readonly bytes: number;
  /** Envoy runs its ext_proc message timer on this request (buffered and streamed body modes). */
  readonly timed: boolean;
}

/** A request waiting in a saturated pool's queue for its pick. */
export type QueuedRoute = QueuedRequest<RouteRequest, RoutedRequest>;

/** Requests without a tenant header share this tenant. */
export const DEFAULT_TENANT = 'default';

export interface Routing {
  /** How much of a prompt the affinity key may depend on: what the request reader extracts. */
  readonly promptLimit: PrefixLimit;
  /** Throws GatewayError `model_not_found`, `no_ready_replica` or `pool_overloaded`. */
  route(request: RouteRequest): RoutedRequest;
  /**
   * `route`, or, where flow control is on and the pool is saturated, a place in its queue (the
   * stream listens for the outcome). Throws as `route` does, and `shed` or `pool_saturated`.
   */
  admit(request: RouteRequest, flow: FlowRequest): RoutedRequest | QueuedRoute;
  release(routed: RoutedRequest): void;
}

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
  /** Told about flow control's queueing (metrics). */
  readonly flowObserver?: FlowObserver;
  /** The InferenceObjectives of the pools, as the source last saw them; absent = none. */
  readonly objectives?: () => ObjectiveIndex;
  /** Precise prefix matching from the model servers' KV events; absent = approximate affinity only. */
  readonly precise?: PrecisePrefix;
  /** Session affinity (the session scorer is on); absent = session headers are not read. */
  readonly sessions?: SessionAffinity;
}

export class StoreRouting implements Routing {
  readonly promptLimit: PrefixLimit;
  private readonly picker: Picker;
  private readonly settings: PickerSettings;
  private readonly scoped = new WeakMap<PoolView, readonly PoolView[]>();
  private readonly policies = new Map<string, PoolPolicy>();
  private readonly flow: FlowControl<RouteRequest, RoutedRequest>;
  /** Session affinity, where its scorer is on. */
  private readonly sessions: SessionAffinity | undefined;

  constructor(
    private readonly store: EndpointStore,
    private readonly load: LoadTracker,
    private readonly options: RoutingOptions,
  ) {
    const settings = options.picker ?? IN_FLIGHT_ONLY;
    this.settings = settings;
    this.promptLimit = promptLimit(settings);
    this.sessions = settings.weights.session > 0 ? options.sessions : undefined;
    // The picker reads the same signal cells the load tracker counts in (and the scraper fills).
    this.picker = new Picker(load.board, {
      weights: settings.weights,
      scorers: candidateScorers(SCORERS, settings.weights, settings, load.board),
      fallbacks: options.fallbacks,
      boundedLoad: { factor: settings.prefix.loadFactor, slack: settings.prefix.loadSlack, maxQueue: settings.prefix.maxQueue },
      prefillCosts: prefillCostsOf(settings.prefix),
      maxAdaptersPerServer: settings.lora.maxAdaptersPerServer,
      poolPolicy: (pool) => this.policyOf(pool),
      random: options.random ?? Math.random,
    });
    const flowSettings = settings.flowControl;
    this.flow = new FlowControl(
      {
        saturated: (request) => this.saturatedNow(request),
        route: (request) => this.route(request),
        release: (routed) => this.load.release(routed.endpoints[0]?.address ?? ''),
      },
      { maxQueued: flowSettings.maxQueued, maxQueuedBytes: flowSettings.maxQueuedBytes },
      options.flowObserver,
    );
  }

  route(request: RouteRequest): RoutedRequest {
    const model = request.model;
    requireSynced(this.store, `model ${model} cannot be routed yet`, { model });
    return this.routeIn(this.poolsFor(model), request);
  }

  admit(request: RouteRequest, flow: FlowRequest): RoutedRequest | QueuedRoute {
    const model = request.model;
    requireSynced(this.store, `model ${model} cannot be routed yet`, { model });
    const pools = this.poolsFor(model);
    // A model's requests queue in its first pool's queue; pools without flow control never queue.
    const pool = pools[0]?.name;
    if (pool === undefined || this.policyOf(pool).saturation === undefined) return this.routeIn(pools, request);
    if (!this.flow.letThrough(pool) && !this.picker.saturated(pools, request.subset)) return this.routeIn(pools, request);
    const settings = this.settings.flowControl;
    return this.flow.enqueue(pool, request, {
      priority: requestPriority(settings, this.options.objectives?.() ?? NO_OBJECTIVES, {
        pool,
        model,
        priorityClass: flow.priorityClass,
        objective: flow.objective,
      }),
      tenant: flow.tenant ?? DEFAULT_TENANT,
      bytes: flow.bytes,
      ttlMs: flow.timed ? settings.timedTtlMs : settings.ttlMs,
    });
  }

  /** Something may have given a saturated pool room (a scrape, a new endpoint view). */
  wake(): void {
    this.flow.wake();
  }

  /** Waiting requests per pool, priority and tenant (metrics). */
  queueLengths(): ReturnType<FlowControl<RouteRequest, RoutedRequest>['lengths']> {
    return this.flow.lengths();
  }

  close(): void {
    this.flow.close();
  }

  private policyOf(pool: string): PoolPolicy {
    let policy = this.policies.get(pool);
    if (policy === undefined) this.policies.set(pool, (policy = poolPolicy(this.settings, pool)));
    return policy;
  }

  /** For a request that waited: are its pools (as the view holds them now) still saturated? */
  private saturatedNow(request: RouteRequest): boolean {
    if (!this.store.isSynced()) return false;
    let pools: readonly PoolView[];
    try {
      pools = this.poolsFor(request.model);
    } catch {
      return false; // dispatching answers why the model cannot be routed
    }
    return this.picker.saturated(pools, request.subset);
  }

  private routeIn(pools: readonly PoolView[], request: RouteRequest): RoutedRequest {
    const model = request.model;
    const prompt = request.prompt ?? NO_PROMPT;
    const affinityKey = affinityKeyOf(this.settings, pools, prompt);
    const precise = this.options.precise;
    const prefix = precise?.match(pools, request.source, this.load.board.adapters.has(model) ? model : undefined);
    const sessions = this.sessions;
    const sessionRef = sessions?.read(request.header);
    const session = sessionRef === undefined ? undefined : sessions?.placeOf(sessionRef, pools);
    const outcome = this.picker.pick(pools, {
      model,
      affinityKey,
      ...(affinityKey === undefined
        ? {}
        : { sharedTokens: sharedTokensOf(this.settings, pools, prompt, this.promptLimit, request.bodyBytes) }),
      ...(prefix === undefined ? {} : { prefix }),
      subset: request.subset,
      header: request.header,
      ...(session?.at === undefined ? {} : { sessionAt: session.at }),
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
    precise?.routed(endpoints[0].address, endpoints[0].pool, prefix);
    // Load is charged to the primary: it is where Envoy sends the request unless it cannot connect.
    this.load.acquire(endpoints[0].address);
    // A demoted replica waiting for its probe request gets this one.
    this.options.latency?.picked(model, endpoints[0].address);
    const destinations = new Array<string>(1 + this.options.fallbacks);
    for (let i = 0; i < destinations.length; i++) destinations[i] = endpoints[i % endpoints.length].address;
    if (session === undefined || sessions === undefined) return { model, endpoints, destinations, score: outcome.score };
    sessions.placed(session, endpoints[0]);
    return { model, endpoints, destinations, score: outcome.score, session: sessions };
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
    // A finished request may give a saturated pool room.
    this.flow.wake();
  }
}

/** Only the endpoints the gateway's subset hint names may be picked. */
function restrictToSubset(pools: readonly PoolView[], subset: ReadonlySet<string> | undefined): readonly PoolView[] {
  if (subset === undefined) return pools;
  return pools.map((pool) => ({ ...pool, endpoints: pool.endpoints.filter((endpoint) => subset.has(endpoint.address)) }));
}
