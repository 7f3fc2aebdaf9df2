// The schema of llm-extproc's config file: the one source of truth for what the server accepts.
// It is plain JSON Schema built with TypeBox, so the same object validates the file at start
// (config.ts), and becomes the `config` part of the Helm chart's values.schema.json
// (scripts/render-chart-schema.ts; a test checks the chart's copy for drift).
//
// Rules the schema cannot express (cross-field checks such as maxSeconds ≥ baseSeconds) live in
// config.ts next to the mapping onto the `Config` type.
//
// `errorMessage` (an annotation ignored by JSON Schema validators) replaces the generated wording
// for any error at that node or below it; see describeSchemaError in config.ts.

import { DEFAULT_PICKER_SETTINGS, DEFAULT_PRECISE_EVENTS } from '../picker/settings.js';
import { POOL_CACHE_BLOCK_FIELDS, SCORERS } from '../picker/scorer-table.js';
import type { ScorerTable, SettingsSection } from '../picker/scorer-table.js';
import { MAX_TIMER_MS, TRACING_DEFAULTS } from '../tracing/tracing-settings.js';
import { Kind, Type, TypeRegistry } from '@sinclair/typebox';
import type { SchemaOptions, Static, TNumber, TObject, TOptional, TProperties, TUnsafe } from '@sinclair/typebox';

/** A timer's longest wait in seconds, whole: Node fires longer timers at once. */
const MAX_TIMER_SECONDS = Math.floor(MAX_TIMER_MS / 1000);

declare module '@sinclair/typebox' {
  interface SchemaOptions {
    /** Operator-facing wording for errors at this node or below (see config.ts). */
    errorMessage?: string;
  }
}

export const LOG_LEVELS = ['fatal', 'error', 'warn', 'info', 'debug', 'trace', 'silent'] as const;
/** How the pick is written for the gateway (request/decision-replies.ts): a list for override_host, or one address. */
export const DESTINATION_FORMATS = ['list', 'single'] as const;
/** Implementations of the gRPC listener (src/grpc/server.ts). */
export const GRPC_TRANSPORTS = ['native', 'grpc-js'] as const;

/** Defaults, shown in the schema (`default`) and applied by config.ts. */
export const DEFAULTS = {
  grpcAddress: '0.0.0.0:9002',
  httpAddress: '0.0.0.0:9090',
  grpcTransport: 'native',
  maxConnections: 1024,
  idleTimeoutSeconds: 300,
  logLevel: 'info',
  staticPath: 'endpoints.yaml',
  targetPort: 8000,
  fallbacks: 2,
  maxRequestBodyBytes: 8 * 1024 * 1024,
  maxInspectedBodyBytes: 4 * 1024 * 1024,
  destinationFormat: 'list',
  consecutiveFailures: 3,
  baseSeconds: 10,
  maxSeconds: 300,
  checkPath: '',
  checkTimeoutSeconds: 0.5,
  shutdownDrainSeconds: 5,
  shutdownGraceSeconds: 20,
} as const;

// A string restricted to a list, emitted as `{ type: string, enum: [...] }` (clearer in Helm's
// error messages than TypeBox's anyOf-of-literals). Registered so TypeBox can check it.
const STRING_ENUM = 'LlmExtprocStringEnum';
if (!TypeRegistry.Has(STRING_ENUM)) {
  TypeRegistry.Set<{ enum: readonly string[] }>(STRING_ENUM, (schema, value) => typeof value === 'string' && schema.enum.includes(value));
}
function StringEnum<T extends readonly string[]>(values: T, options: SchemaOptions = {}): TUnsafe<T[number]> {
  return Type.Unsafe<T[number]>({ ...options, [Kind]: STRING_ENUM, type: 'string', enum: [...values] });
}

const NonEmpty = (options: SchemaOptions = {}) => Type.String({ minLength: 1, ...options });
const NonEmptyList = (options: SchemaOptions = {}) =>
  Type.Array(NonEmpty(), { errorMessage: 'expected a list of non-empty strings', ...options });
/** A closed mapping: a misspelt key would silently fall back to a default, so it is refused. */
const Mapping = <T extends TProperties>(properties: T, options: SchemaOptions = {}) =>
  Type.Object(properties, { additionalProperties: false, ...options });
/** An HTTP header name as Envoy hands it to us: lower case token characters. */
const HeaderName = (description: string) =>
  Type.String({ pattern: "^[a-z0-9!#$%&'*+.^_`|~-]+$", errorMessage: 'expected a lower-case HTTP header name', description });
const Seconds = (description: string, defaultValue?: number) =>
  Type.Number({ minimum: 0, description, ...(defaultValue === undefined ? {} : { default: defaultValue }) });

const Pool = Mapping(
  {
    name: NonEmpty({ description: 'Pool name used in routing, errors and metrics (unique).' }),
    namespace: NonEmpty({ description: 'Namespace of the model-server pods.' }),
    selector: Type.Record(Type.String(), Type.String({ errorMessage: 'expected a string' }), {
      minProperties: 1,
      errorMessage: 'required (label key: value pairs)',
      description: 'Equality label selector (matchLabels); must not be empty.',
    }),
    targetPort: Type.Optional(
      Type.Integer({ minimum: 1, maximum: 65535, default: DEFAULTS.targetPort, description: 'Port of the model server on each pod.' }),
    ),
    models: NonEmptyList({ description: 'Model names this pool serves (the `model` field of OpenAI requests).' }),
  },
  { description: 'A pool of model-server pods selected by labels.' },
);

const Kubernetes = Mapping(
  {
    kubeconfigPath: Type.Optional(
      NonEmpty({ description: 'Explicit kubeconfig; otherwise in-cluster config, otherwise the default loading rules.' }),
    ),
    pools: Type.Optional(Type.Array(Pool, { description: 'Pools defined by label selectors.' })),
    inferencePools: Type.Optional(
      Mapping(
        {
          enabled: Type.Optional(Type.Boolean({ default: false, description: 'Watch InferencePools (inference.networking.k8s.io/v1).' })),
          namespaces: Type.Optional(
            NonEmptyList({ description: 'Namespaces whose InferencePools are watched (at least one when enabled).' }),
          ),
          modelsAnnotation: Type.Optional(
            NonEmpty({ description: 'Annotation holding comma-separated served model names. Default llm-extproc.io/models.' }),
          ),
          objectives: Type.Optional(
            Type.Boolean({
              default: true,
              description:
                'Also watch InferenceObjectives (inference.networking.x-k8s.io/v1alpha2) in these namespaces while flow control is on (globally or for some pool): their priorities apply to it. A missing CRD is tolerated.',
            }),
          ),
        },
        { description: 'InferencePool support.' },
      ),
    ),
    backoff: Type.Optional(
      Mapping(
        {
          initialMs: Type.Number({ minimum: 1, description: 'First retry delay after a failed list or watch.' }),
          maxMs: Type.Number({ minimum: 1, description: 'Largest retry delay (≥ initialMs).' }),
        },
        { description: 'Retry delays of the list/watch loops.' },
      ),
    ),
    timeouts: Type.Optional(
      Mapping(
        {
          // At least one second each: client-node and the API server both take whole seconds.
          listSeconds: Type.Optional(Type.Number({ minimum: 1, description: 'List request timeout (default 30).' })),
          watchSeconds: Type.Optional(
            Type.Number({ minimum: 1, description: 'Watch duration before the server ends it and we rewatch (default 300).' }),
          ),
        },
        { description: 'API request timeouts.' },
      ),
    ),
  },
  { description: 'Kubernetes endpoint source: pools by label selector and/or InferencePools.' },
);

const Tls = Mapping(
  {
    enabled: Type.Optional(Type.Boolean({ default: false, description: 'Serve the gRPC listener over TLS.' })),
    certFile: Type.Optional(
      NonEmpty({ description: 'PEM certificate (reloaded when it changes). Omit both files for a self-signed pair.' }),
    ),
    keyFile: Type.Optional(NonEmpty({ description: 'PEM private key (reloaded when it changes).' })),
    clientCaFile: Type.Optional(
      NonEmpty({
        description:
          'Mutual TLS: PEM CA certificate(s); only clients presenting a certificate that chains to it are served, others fail the handshake (reloaded when it changes). Needs certFile and keyFile.',
      }),
    ),
  },
  { description: 'TLS on the gRPC listener; absent = plaintext (sidecar, Unix socket).' },
);

export const METRICS_FLAVOURS = ['vllm', 'sglang', 'tgi'] as const;

/** `picker.weights`: one optional weight per scorer of the table, described by what it prefers and its default. */
export function scorerWeights<T extends ScorerTable>(table: T): TObject<{ [K in keyof T & string]: TOptional<TNumber> }> {
  const weights: TProperties = {};
  for (const [name, row] of Object.entries(table))
    weights[name] = Type.Optional(Type.Number({ minimum: 0, description: `${row.prefers} Default ${row.weight}.` }));
  return Mapping(weights, { description: 'Scorer weights (0 turns a scorer off).' }) as TObject<{
    [K in keyof T & string]: TOptional<TNumber>;
  }>;
}

/** `picker.<name>`: the section of each scorer of the table that has settings. */
export function scorerSections<T extends ScorerTable>(table: T): SectionSchemas<T> {
  const sections: TProperties = {};
  for (const [name, row] of Object.entries(table))
    if (row.settings !== undefined) sections[name] = Type.Optional(Mapping(row.settings.fields, { description: row.settings.description }));
  return sections as SectionSchemas<T>;
}

type SectionSchemas<T extends ScorerTable> = {
  [K in keyof T as T[K] extends { readonly settings: SettingsSection<object> } ? K : never]: T[K] extends {
    readonly settings: SettingsSection<object, infer F>;
  }
    ? TOptional<TObject<F>>
    : never;
};

const SaturationFields = (defaults: string) => ({
  queueDepth: Type.Optional(
    Type.Integer({ minimum: 1, description: `A replica reporting this many waiting requests (num_requests_waiting) is full. ${defaults}` }),
  ),
  kvCacheUsage: Type.Optional(
    Type.Number({
      exclusiveMinimum: 0,
      maximum: 1,
      description: `A replica reporting this KV-cache use (0..1, kv_cache_usage_perc) is full; servers that report none are judged by their queue. ${defaults}`,
    }),
  ),
  maxInFlight: Type.Optional(
    Type.Integer({ minimum: 1, description: `A replica with this many of our requests in flight is full. Default: no limit.` }),
  ),
});

/** Load-aware, cache-affine picking: the scorers' weights and sections are derived from their rows (src/picker/scorer-table.ts), the other defaults shown are DEFAULT_PICKER_SETTINGS (src/picker/settings.ts), the one place each lives. */
const PICKER = DEFAULT_PICKER_SETTINGS;
const Picker = Mapping(
  {
    weights: Type.Optional(scorerWeights(SCORERS)),
    ...scorerSections(SCORERS),
    metrics: Type.Optional(
      Mapping(
        {
          enabled: Type.Optional(Type.Boolean({ default: PICKER.metrics.enabled, description: 'Scrape model-server metrics.' })),
          format: Type.Optional(
            StringEnum(METRICS_FLAVOURS, { default: PICKER.metrics.format, description: 'Default metrics flavour of the model servers.' }),
          ),
          path: Type.Optional(
            Type.String({
              pattern: '^/',
              errorMessage: 'expected a path starting with /',
              default: PICKER.metrics.path,
              description: 'HTTP path of the metrics endpoint.',
            }),
          ),
          intervalSeconds: Type.Optional(
            Type.Number({ minimum: 0.05, description: `Scrape interval. Default ${PICKER.metrics.intervalMs / 1000}.` }),
          ),
          timeoutSeconds: Type.Optional(
            Type.Number({ minimum: 0.01, description: `Timeout of one scrape. Default ${PICKER.metrics.timeoutMs / 1000}.` }),
          ),
          staleAfterSeconds: Type.Optional(
            Type.Number({
              minimum: 0.01,
              description: 'A report older than this no longer counts (≥ intervalSeconds). Default max(5, 3 × intervalSeconds).',
            }),
          ),
          concurrency: Type.Optional(
            Type.Integer({ minimum: 1, description: `Scrapes in flight at once. Default ${PICKER.metrics.concurrency}.` }),
          ),
        },
        { description: 'Scraping of model-server Prometheus metrics.' },
      ),
    ),
    flowControl: Type.Optional(
      Mapping(
        {
          enabled: Type.Optional(
            Type.Boolean({
              default: PICKER.flowControl.enabled,
              description: 'Queue requests while a pool is saturated (every pool, unless picker.pools.<name>.flowControl says otherwise).',
            }),
          ),
          tenantHeader: Type.Optional(
            HeaderName(
              `Request header naming the tenant (fairness inside a priority); absent = the default tenant. Default ${PICKER.flowControl.tenantHeader}.`,
            ),
          ),
          priorityHeader: Type.Optional(
            HeaderName(`Request header whose value names a class of priorityByHeaderValue. Default ${PICKER.flowControl.priorityHeader}.`),
          ),
          objectiveHeader: Type.Optional(
            Type.String({
              pattern: "^[a-z0-9!#$%&'*+.^_`|~-]*$",
              errorMessage: "expected a lower-case HTTP header name, or '' (no header names an objective)",
              description: `Request header whose value names an InferenceObjective of the request's pool (its priority applies); '' = none does. Trusted: for untrusted clients the gateway must strip or set it. Default ${PICKER.flowControl.objectiveHeader}.`,
            }),
          ),
          defaultPriority: Type.Optional(
            Type.Integer({
              description: `Priority of requests no rule names (below 0 = sheddable). Default ${PICKER.flowControl.defaultPriority}.`,
            }),
          ),
          priorityByModel: Type.Optional(
            Type.Record(Type.String(), Type.Integer(), { description: 'Priority by model name (higher first; below 0 = sheddable).' }),
          ),
          priorityByHeaderValue: Type.Optional(
            Type.Record(Type.String(), Type.Integer(), {
              description: 'Priority by value of priorityHeader (wins over priorityByModel); values not listed are ignored.',
            }),
          ),
          ttlSeconds: Type.Optional(
            Type.Number({
              exclusiveMinimum: 0,
              description: `Longest wait in a queue in full-duplex body modes (no ext_proc message timer). Default ${PICKER.flowControl.ttlMs / 1000}.`,
            }),
          ),
          timedTtlSeconds: Type.Optional(
            Type.Number({
              exclusiveMinimum: 0,
              description: `Longest wait in buffered and streamed body modes: keep it below the gateway's ext_proc message_timeout (docs/gateways.md). Default ${PICKER.flowControl.timedTtlMs / 1000}.`,
            }),
          ),
          maxQueued: Type.Optional(
            Type.Integer({ minimum: 1, description: `Requests that may wait per pool. Default ${PICKER.flowControl.maxQueued}.` }),
          ),
          maxQueuedBytes: Type.Optional(
            Type.Integer({
              minimum: 1,
              description: `Request-body bytes the waiting requests of a pool may hold together. Default ${PICKER.flowControl.maxQueuedBytes}.`,
            }),
          ),
          saturation: Type.Optional(
            Mapping(
              SaturationFields(
                `Default ${PICKER.flowControl.saturation.queueDepth} waiting, ${PICKER.flowControl.saturation.kvCacheUsage} KV-cache use.`,
              ),
              {
                description:
                  'When a replica counts as full; a pool is saturated when all its replicas are (stale or missing metrics count as full).',
              },
            ),
          ),
          tenantLabels: Type.Optional(
            Type.Integer({
              minimum: 0,
              description: `Tenants named in the flow-control metrics (the first seen); the rest are labelled other. Default ${PICKER.flowControl.tenantLabels}.`,
            }),
          ),
        },
        {
          description:
            'Flow control: priorities, fair queues between tenants and shedding while a pool is saturated (docs/picking.md, Flow control).',
        },
      ),
    ),
    precise: Type.Optional(
      Mapping(
        {
          tokenizerDir: NonEmpty({
            description:
              "Directory with the model's tokenizer.json and tokenizer_config.json (and chat_template.jinja, if the model keeps its chat template apart): prompts are tokenized in process as the server tokenizes them (the chart mounts them: docs/helm.md).",
          }),
          events: Type.Optional(
            Mapping(
              {
                port: Type.Optional(
                  Type.Integer({
                    minimum: 1,
                    maximum: 65535,
                    description: "The KV-event publisher's port on each model server (vLLM --kv-events-config endpoint tcp://*:PORT).",
                  }),
                ),
                discover: Type.Optional(
                  Type.Boolean({
                    description: "Ask each server's GET /kv_event_sources for its publisher's port and topic. Default false.",
                  }),
                ),
                topic: Type.Optional(Type.String({ description: "Topic prefix to subscribe to; '' = every topic. Default ''." })),
                silenceSeconds: Type.Optional(
                  Type.Number({
                    exclusiveMinimum: 0,
                    description: `A server sent requests that store blocks and publishing nothing for this long is silent: its entries are dropped and it is picked as without events until it publishes again. Default ${DEFAULT_PRECISE_EVENTS.silenceMs / 1000}.`,
                  }),
                ),
                rebuildSeconds: Type.Optional(
                  Type.Number({
                    minimum: 0,
                    description: `After a gap, a restart it did not see from its start, or a lost connection, a server's index is rebuilt from new events for this long before it is trusted again. Default ${DEFAULT_PRECISE_EVENTS.rebuildMs / 1000}.`,
                  }),
                ),
                heartbeatSeconds: Type.Optional(
                  Type.Number({
                    minimum: 0.1,
                    description: `ZMTP heartbeat interval: a publisher that answers none for 3 intervals counts as disconnected. Default ${DEFAULT_PRECISE_EVENTS.heartbeatMs / 1000}.`,
                  }),
                ),
                pendingSeconds: Type.Optional(
                  Type.Number({
                    minimum: 0,
                    description: `A prompt's blocks count as held by the server it was sent to for this long, until that server's events report them: a second request with the same prefix follows the first instead of prefilling it elsewhere. 0 = only what the events report. Default ${DEFAULT_PRECISE_EVENTS.pendingMs / 1000}.`,
                  }),
                ),
              },
              { description: "The model servers' KV-event publishers (set port, or discover: true)." },
            ),
          ),
        },
        {
          description:
            "Precise prefix matching: each server's KV-cache events say which blocks it holds, the model's tokenizer cuts each prompt the same way, and the prefix scorer credits each server with what it really holds (docs/picking.md, Precise prefix matching).",
        },
      ),
    ),
    pools: Type.Optional(
      Type.Record(
        Type.String(),
        Mapping(
          {
            precise: Type.Optional(Type.Boolean({ description: "Use this pool's KV events (when picker.precise is set). Default true." })),
            kvEventsPort: Type.Optional(
              Type.Integer({
                minimum: 1,
                maximum: 65535,
                description: "The KV-event publisher's port on this pool's servers. Default picker.precise.events.port (or discovery).",
              }),
            ),
            metricsFormat: Type.Optional(
              StringEnum([...METRICS_FLAVOURS, 'none'] as const, { description: 'Metrics flavour of this pool; none = do not scrape it.' }),
            ),
            maxQueueDepth: Type.Optional(
              Type.Integer({
                minimum: 1,
                description:
                  'Load shedding: endpoints reporting this many waiting requests take no new ones; all of them = 429 pool_overloaded.',
              }),
            ),
            flowControl: Type.Optional(Type.Boolean({ description: 'Flow control for this pool. Default picker.flowControl.enabled.' })),
            saturation: Type.Optional(
              Mapping(SaturationFields('Default picker.flowControl.saturation.'), { description: "This pool's saturation limits." }),
            ),
            ...POOL_CACHE_BLOCK_FIELDS,
          },
          { description: 'Per-pool picker settings.' },
        ),
        { description: 'Per-pool settings by pool name.' },
      ),
    ),
  },
  { description: 'Load-aware, cache-affine endpoint picking.' },
);

const Tracing = Mapping(
  {
    enabled: Type.Optional(
      Type.Boolean({
        default: TRACING_DEFAULTS.enabled,
        description: 'Export one OpenTelemetry span per request over OTLP/HTTP (OTEL_TRACES_EXPORTER and OTEL_SDK_DISABLED override).',
      }),
    ),
    endpoint: Type.Optional(
      Type.String({
        pattern: '^https?://',
        default: TRACING_DEFAULTS.endpoint,
        errorMessage: 'expected an http(s) URL',
        description:
          'The OTLP/HTTP traces URL, /v1/traces included (OTEL_EXPORTER_OTLP_TRACES_ENDPOINT, OTEL_EXPORTER_OTLP_ENDPOINT override).',
      }),
    ),
    sampleRatio: Type.Optional(
      Type.Number({
        minimum: 0,
        maximum: 1,
        default: TRACING_DEFAULTS.sampleRatio,
        description:
          "Share of new traces kept; a client's traceparent decides for its own trace (parent based). OTEL_TRACES_SAMPLER and _ARG override.",
      }),
    ),
    serviceName: Type.Optional(
      NonEmpty({ default: TRACING_DEFAULTS.serviceName, description: 'service.name of our spans (OTEL_SERVICE_NAME overrides).' }),
    ),
    maxQueueSize: Type.Optional(
      Type.Integer({
        minimum: 1,
        default: TRACING_DEFAULTS.maxQueueSize,
        description: 'Finished spans waiting for export at most; more are dropped and counted (llm_extproc_trace_spans_dropped_total).',
      }),
    ),
    maxExportBatchSize: Type.Optional(
      Type.Integer({ minimum: 1, default: TRACING_DEFAULTS.maxExportBatchSize, description: 'Spans per export request at most.' }),
    ),
    scheduledDelaySeconds: Type.Optional(
      Type.Number({
        exclusiveMinimum: 0,
        maximum: MAX_TIMER_SECONDS,
        default: TRACING_DEFAULTS.scheduledDelaySeconds,
        description: 'A part-full batch is exported after this long.',
      }),
    ),
    exportTimeoutSeconds: Type.Optional(
      Type.Number({
        exclusiveMinimum: 0,
        maximum: MAX_TIMER_SECONDS,
        default: TRACING_DEFAULTS.exportTimeoutSeconds,
        description: 'One export request gives up after this long; its spans are counted as dropped.',
      }),
    ),
    shutdownFlushSeconds: Type.Optional(
      Seconds(
        'At shutdown, queued spans get this long to be exported (after the streams are done).',
        TRACING_DEFAULTS.shutdownFlushSeconds,
      ),
    ),
    propagateToUpstream: Type.Optional(
      Type.Boolean({
        default: TRACING_DEFAULTS.propagateToUpstream,
        description:
          "Send the model server our span's traceparent/tracestate in place of the client's, so its own spans are children of ours.",
      }),
    ),
  },
  { description: "OpenTelemetry traces: one span per request, continuing the client's traceparent (docs/observability.md)." },
);

export const configFileSchema = Mapping(
  {
    listen: Type.Optional(
      Mapping(
        {
          grpc: Type.Optional(
            NonEmpty({ default: DEFAULTS.grpcAddress, description: 'gRPC ext_proc + health: host:port or unix:///path/to.sock.' }),
          ),
          http: Type.Optional(
            NonEmpty({ default: DEFAULTS.httpAddress, description: 'HTTP /metrics, /healthz, /readyz (and /debug/endpoints): host:port.' }),
          ),
          peerAddress: Type.Optional(
            NonEmpty({
              description:
                "This replica's gRPC address as the other replicas reach it (host:port: in Kubernetes the pod IP and the gRPC port). Written into each picked request's envoy.lb metadata, so Envoy's access-log entry of its stream, whichever replica receives it, is forwarded here and a client that left is judged a cancellation on every replica. Absent: no forwarding (one replica, or each judges only the entries it receives). With listen.tls the entries go over TLS (the peer certificate is not verified); not with listen.tls.clientCaFile (peers present no client certificate).",
            }),
          ),
          debugEndpoints: Type.Optional(
            Type.Boolean({
              default: false,
              description:
                'Serve /debug/endpoints on the HTTP listener: every replica with its address, state, reason and load, as JSON. Off: 404 (it tells whoever reaches the port the whole fleet).',
            }),
          ),
          tls: Type.Optional(Tls),
          maxConnections: Type.Optional(
            Type.Integer({
              minimum: 1,
              default: DEFAULTS.maxConnections,
              description:
                'Most connections the gRPC listener holds at once (TLS handshakes included); one more is closed at once and counted. Both transports.',
            }),
          ),
          idleTimeoutSeconds: Type.Optional(
            Type.Number({
              exclusiveMinimum: 0,
              default: DEFAULTS.idleTimeoutSeconds,
              description:
                'A gRPC connection with no open stream for this long is closed gracefully (GOAWAY NO_ERROR; the gateway reconnects when it needs to).',
            }),
          ),
          transport: Type.Optional(
            StringEnum(GRPC_TRANSPORTS, {
              default: DEFAULTS.grpcTransport,
              description:
                'gRPC implementation: native (our own HTTP/2 on the socket, least CPU per message) or grpc-js (@grpc/grpc-js, the conservative fallback).',
            }),
          ),
        },
        { description: 'Listening addresses.' },
      ),
    ),
    logLevel: Type.Optional(StringEnum(LOG_LEVELS, { default: DEFAULTS.logLevel, description: 'Log level (JSON logs on stdout).' })),
    static: Type.Optional(
      Mapping(
        {
          path: Type.Optional(NonEmpty({ default: DEFAULTS.staticPath, description: 'Static endpoints file (reloaded when it changes).' })),
        },
        { description: 'Static endpoint source, used when there is no kubernetes section.' },
      ),
    ),
    kubernetes: Type.Optional(Kubernetes),
    routing: Type.Optional(
      Mapping(
        {
          fallbacks: Type.Optional(
            Type.Integer({ minimum: 0, default: DEFAULTS.fallbacks, description: 'Fallback endpoints handed to Envoy after the primary.' }),
          ),
          maxRequestBodyBytes: Type.Optional(
            Type.Number({ minimum: 1, default: DEFAULTS.maxRequestBodyBytes, description: 'Largest request body accepted.' }),
          ),
          maxInspectedBodyBytes: Type.Optional(
            Type.Number({
              minimum: 0,
              default: DEFAULTS.maxInspectedBodyBytes,
              description: 'Largest response body inspected for errors.',
            }),
          ),
          pool: Type.Optional(
            NonEmpty({ description: 'Serve exactly this pool (a pool name, or namespace/name of an InferencePool). Absent = all pools.' }),
          ),
          destinationFormat: Type.Optional(
            StringEnum(DESTINATION_FORMATS, {
              default: DEFAULTS.destinationFormat,
              description: 'list: primary,fallback,… for override_host; single: one ip:port (ORIGINAL_DST, kgateway, Envoy AI Gateway).',
            }),
          ),
          streamUsagePools: Type.Optional(
            Type.Array(NonEmpty(), {
              default: [],
              description:
                'Pools (names, or namespace/name of an InferencePool; "*" for all) whose streamed chat and completion requests get stream_options.include_usage added when they lack it, so their tokens are counted; the usage chunk the client did not ask for is removed from its stream.',
            }),
          ),
          modelRewrites: Type.Optional(
            Type.Array(
              Mapping({
                // None or empty: the rule applies to every model a rule naming it exactly does not claim (llm-d's rule).
                matches: Type.Optional(
                  Type.Array(Mapping({ model: Mapping({ value: NonEmpty(), type: Type.Optional(Type.Literal('Exact')) }) })),
                ),
                targets: Type.Array(
                  Mapping({ modelRewrite: NonEmpty(), weight: Type.Optional(Type.Integer({ minimum: 1, maximum: 1_000_000 })) }),
                  { minItems: 1 },
                ),
              }),
              {
                default: [],
                description:
                  "Weighted model rewrite, in the shape of llm-d's InferenceModelRewrite spec.rules: a request for a matched model is routed and sent as one of the targets (modelRewrite), split by weight (smooth weighted round robin); a rule without matches applies to every model no exact rule names; the body's model is changed in place. InferenceModelRewrites of the watched InferencePools add their rules after these. The x-llm-d-model-name-rewrite header, where the gateway sets it, wins.",
              },
            ),
          ),
        },
        { description: 'Routing.' },
      ),
    ),
    quarantine: Type.Optional(
      Mapping(
        {
          consecutiveFailures: Type.Optional(
            Type.Integer({
              minimum: 1,
              default: DEFAULTS.consecutiveFailures,
              description:
                'Failed attempts in a row before an endpoint is quarantined. A connect failure or a reset before any response also checks the replica at once, and a failed check quarantines it without waiting for this count.',
            }),
          ),
          baseSeconds: Type.Optional(Seconds('First quarantine length (doubles each time).', DEFAULTS.baseSeconds)),
          maxSeconds: Type.Optional(Seconds('Longest quarantine (≥ baseSeconds).', DEFAULTS.maxSeconds)),
          checkPath: Type.Optional(
            Type.String({
              pattern: '^(/.*)?$',
              default: DEFAULTS.checkPath,
              errorMessage: 'expected a path starting with "/" (or empty for a TCP connect)',
              description:
                'After a response stream broke mid-way: GET this path on the replica (2xx = alive, e.g. /health); empty = a TCP connect is the check.',
            }),
          ),
          checkTimeoutSeconds: Type.Optional(
            Type.Number({
              exclusiveMinimum: 0,
              default: DEFAULTS.checkTimeoutSeconds,
              errorMessage: 'expected a number of seconds above 0',
              description: 'A replica that does not pass that check within this long is dead (quarantined).',
            }),
          ),
        },
        { description: 'Passive health: endpoints that keep failing are skipped for a while.' },
      ),
    ),
    picker: Type.Optional(Picker),
    tracing: Type.Optional(Tracing),
    metrics: Type.Optional(
      Mapping(
        {
          deprecatedNames: Type.Optional(
            Type.Boolean({
              default: true,
              description:
                "Also show the Gateway API Inference Extension's metric names (inference_objective_*, inference_pool_*), which llm-d keeps as deprecated twins of its llm_d_epp_* names. false: only llm_d_epp_* (and llm_extproc_*).",
            }),
          ),
        },
        { description: 'What /metrics shows.' },
      ),
    ),
    shutdownDrainSeconds: Type.Optional(
      Seconds('On SIGTERM: keep answering (health NOT_SERVING) this long, so the proxy moves away first.', DEFAULTS.shutdownDrainSeconds),
    ),
    shutdownGraceSeconds: Type.Optional(
      Seconds('Then stop taking new streams; open ones get this long before they are released to Envoy.', DEFAULTS.shutdownGraceSeconds),
    ),
  },
  { title: 'llm-extproc configuration file' },
);

/** The config file as written (after validation), before defaults and unit conversion. */
export type ConfigFile = Static<typeof configFileSchema>;
