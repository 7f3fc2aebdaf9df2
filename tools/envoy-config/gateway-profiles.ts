// Gateway profiles: the Envoy configuration each gateway generates for an InferencePool, transcribed
// from that project's source so our processor can be tested under exactly what it will face. These
// are test fixtures and documentation (docs/gateways.md), not configurations users deploy: each
// gateway writes its own. Only what the endpoint picker can observe is transcribed (ext_proc filter,
// per-route override, the picker's cluster, the model servers' cluster and the route's retry and
// timeout); names, discovery (EDS/DNS → STATIC) and addresses are adapted to a loopback test bed.
// Each profile names the repository, path and release it was read from, so it can be re-checked.
// Pure: options in, a plain Envoy bootstrap object out. Plain Envoy Gateway has no profile: the
// suite runs its real controller (test/e2e/live-envoy-gateway.test.ts), which also holds the parts
// of the aigw profiles that Envoy Gateway owns against its live translation.

import {
  DESTINATION_HEADER,
  DESTINATION_METADATA_NAMESPACE,
  SERVED_ENDPOINT_KEY,
  SUBSET_HINT_KEY,
  SUBSET_HINT_NAMESPACE,
} from '../../src/extproc/protocol-names.js';
import type { BodySendMode, HeaderSendMode } from '../../src/extproc/messages.js';
import type { DestinationFormat } from '../../src/config/config.js';
import {
  DEFAULT_GATEWAY_OPTIONS,
  HTTP2_OPTIONS,
  loadAssignment,
  pickerTransportSocket,
  renderGatewayConfig,
  socketAddress,
  streamEndAccessLog,
} from './gateway-config.js';
import type { PickerTls, Yaml } from './gateway-config.js';

export const GATEWAY_PROFILE_NAMES = ['ours', 'istio', 'aigw', 'aigw-buffered', 'kgateway'] as const;
export type GatewayProfileName = (typeof GATEWAY_PROFILE_NAMES)[number];

export { SERVED_ENDPOINT_KEY };
/**
 * Test-bed only (kgateway profile): a request header whose value becomes the subset hint, standing
 * in for the gateway's own forwarding. Its value is a base64 `google.protobuf.Value` holding a list
 * of `ip:port` strings (see subsetHintHeaderValue), so the picker receives the same list shape.
 */
export const TEST_SUBSET_HINT_HEADER = 'x-test-subset-hint';

export interface ProfileOptions {
  readonly listener: { readonly address: string; readonly port: number };
  readonly admin: { readonly address: string; readonly port: number };
  /** llm-extproc's one `ip:port` (or `unix:///path` for `ours`). */
  readonly extProc: string;
  readonly pickerTls: PickerTls;
  /** Model-server addresses the gateway knows (its EDS view of the InferencePool's pods). */
  readonly backends: readonly string[];
  /** Test knob: the route timeout, so a hung model server fails fast. Absent = the gateway's default. */
  readonly routeTimeoutSeconds?: number;
  /**
   * Istio only: the `:authority` of the gRPC stream to the picker, as an EnvoyFilter patch of the
   * route's ExtProcPerRoute `grpc_service.envoy_grpc.authority` would set it. Istio sets none, so
   * Envoy sends the cluster name (`outbound|9002||…`), whose `|` Node's HTTP/2 (nghttp2) refuses
   * with RST_STREAM PROTOCOL_ERROR: without the patch every request fails closed (envoy#3297).
   */
  readonly istioPickerAuthority?: string;
}

/** What llm-extproc must be told to work behind this gateway (the `chart` values follow these). */
export interface PickerSettings {
  /** `routing.destinationFormat`: `single` wherever the gateway parses the pick as one address. */
  readonly destinationFormat: DestinationFormat;
  /** Whether the gateway always dials the picker over TLS (then `listen.tls.enabled: true`). */
  readonly tls: 'optional' | 'required';
}

export interface GatewayProfile {
  readonly name: GatewayProfileName;
  readonly title: string;
  /** Repository, path and release the configuration was transcribed from. */
  readonly source: string;
  readonly requestBodyMode: BodySendMode;
  readonly responseBodyMode: BodySendMode;
  /** Whether ext_proc receives response attributes (code details, flags, upstream address). */
  readonly responseAttributes: boolean;
  /** Whether Envoy retries a failed connect on another pick from our list. */
  readonly retriesOnOurList: boolean;
  readonly picker: PickerSettings;
  render(options: ProfileOptions): Yaml;
}

// ---------------------------------------------------------------------------------------------
// shared pieces

const ROUTER = {
  name: 'envoy.filters.http.router',
  typed_config: { '@type': 'type.googleapis.com/envoy.extensions.filters.http.router.v3.Router' },
};
const EXT_PROC_TYPE = 'type.googleapis.com/envoy.extensions.filters.http.ext_proc.v3.ExternalProcessor';
const EXT_PROC_PER_ROUTE_TYPE = 'type.googleapis.com/envoy.extensions.filters.http.ext_proc.v3.ExtProcPerRoute';
const HEADER_TO_METADATA_TYPE = 'type.googleapis.com/envoy.extensions.filters.http.header_to_metadata.v3.Config';

function processingMode(request: BodySendMode, response: BodySendMode, trailers: Exclude<HeaderSendMode, 'DEFAULT'>): Yaml {
  return {
    request_header_mode: 'SEND',
    response_header_mode: 'SEND',
    request_body_mode: request,
    response_body_mode: response,
    request_trailer_mode: trailers,
    response_trailer_mode: trailers,
  };
}

function envoyGrpc(cluster: string, extra: Yaml = {}): Yaml {
  return { envoy_grpc: { cluster_name: cluster, ...extra } };
}

interface BootstrapParts {
  readonly options: ProfileOptions;
  readonly httpFilters: readonly Yaml[];
  readonly route: Yaml;
  readonly clusters: readonly Yaml[];
  /** Listener buffer limit (Envoy's default is 1 MiB). */
  readonly bufferLimitBytes?: number;
  readonly hcmExtra?: Yaml;
  /**
   * The picker's cluster, which also receives Envoy's access log of flagged streams (each gateway
   * lets an operator add a gRPC access log: docs/gateways.md).
   */
  readonly accessLogCluster: string;
}

function bootstrap(parts: BootstrapParts): Yaml {
  const { options } = parts;
  const hcm: Yaml = {
    '@type': 'type.googleapis.com/envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager',
    stat_prefix: 'llm_gateway',
    route_config: { name: 'llm_routes', virtual_hosts: [{ name: 'llm', domains: ['*'], routes: [parts.route] }] },
    http_filters: [...parts.httpFilters, ROUTER],
    access_log: [streamEndAccessLog(parts.accessLogCluster)],
    ...parts.hcmExtra,
  };
  return {
    admin: { address: { socket_address: { address: options.admin.address, port_value: options.admin.port } } },
    static_resources: {
      listeners: [
        {
          name: 'llm_gateway',
          address: { socket_address: { address: options.listener.address, port_value: options.listener.port } },
          ...(parts.bufferLimitBytes === undefined ? {} : { per_connection_buffer_limit_bytes: parts.bufferLimitBytes }),
          filter_chains: [{ filters: [{ name: 'envoy.filters.network.http_connection_manager', typed_config: hcm }] }],
        },
      ],
      clusters: parts.clusters,
    },
  };
}

/** The picker's cluster: one `ip:port`, HTTP/2, TLS as the gateway does it. */
function pickerCluster(name: string, options: ProfileOptions, extra: Yaml = {}): Yaml {
  return {
    name,
    type: 'STATIC',
    connect_timeout: '10s',
    ...extra,
    typed_extension_protocol_options: HTTP2_OPTIONS,
    ...pickerTransportSocket(options.pickerTls),
    load_assignment: loadAssignment(name, [options.extProc]),
  };
}

function routeTimeout(options: ProfileOptions, gatewayDefault: string | undefined): Yaml {
  if (options.routeTimeoutSeconds !== undefined) return { timeout: `${options.routeTimeoutSeconds}s` };
  return gatewayDefault === undefined ? {} : { timeout: gatewayDefault };
}

// ---------------------------------------------------------------------------------------------
// ours

const ours: GatewayProfile = {
  name: 'ours',
  title: 'Our own Envoy configuration (tools/envoy-config/gateway-config.ts; shipped as envoy/*.yaml)',
  source: 'this repository',
  requestBodyMode: 'BUFFERED',
  responseBodyMode: 'STREAMED',
  responseAttributes: true,
  retriesOnOurList: true,
  picker: { destinationFormat: 'list', tls: 'optional' },
  render: (options) =>
    renderGatewayConfig({
      ...DEFAULT_GATEWAY_OPTIONS,
      listener: options.listener,
      admin: options.admin,
      extProc: options.extProc,
      extProcTls: options.pickerTls,
      backends: { kind: 'static', addresses: options.backends },
      ...(options.routeTimeoutSeconds === undefined ? {} : { routeTimeoutSeconds: options.routeTimeoutSeconds }),
    }),
};

// ---------------------------------------------------------------------------------------------
// Istio

/**
 * Source: istio/istio master at 86c9f01fd735 (2026-08-22, tagged 1.31.0-rc.0; the InferencePool
 * code is unchanged since 1.28):
 * - pilot/pkg/xds/filters/filters.go `InferencePoolExtProc`: the listener-level ext_proc filter
 *   (cluster "dummy", grpc timeout 10s, failure_mode_allow true, header modes SKIP, message_timeout
 *   1000s, metadata_options receiving AND forwarding `envoy.lb`), added by
 *   pilot/pkg/networking/core/listener_builder.go when the Gateway has an InferencePool.
 * - pilot/pkg/networking/core/route/route.go (`InferencePoolExtensionRefs`): per-route
 *   ExtProcPerRoute overrides: the picker's cluster `outbound|PORT||FQDN`, failure_mode_allow from
 *   the pool's failureMode (FailClose by default), request and response FULL_DUPLEX_STREAMED with
 *   trailers SEND, headers SEND. No response attributes, no allow_mode_override.
 * - pilot/pkg/networking/core/cluster_builder.go `applyOverrideHostPolicy`: the pool's cluster gets
 *   lb_policy CLUSTER_PROVIDED + override_host reading ONLY metadata `envoy.lb` /
 *   `x-gateway-destination-endpoint`, `selected_host_key` `envoy.lb` /
 *   `x-gateway-destination-endpoint-served`, fallback ROUND_ROBIN.
 * - pilot/pkg/networking/core/route/retry/retry.go `DefaultPolicy`: 2 retries on
 *   connect-failure,refused-stream,unavailable,cancelled,retriable-status-codes, previous_hosts
 *   predicate, host_selection_retry_max_attempts 5. Istio routes have no timeout by default.
 * TLS to the picker: plaintext, or a DestinationRule `tls.mode: SIMPLE` (with or without
 * `insecureSkipVerify`) on the picker's Service.
 */
const istio: GatewayProfile = {
  name: 'istio',
  title: 'Istio gateway with an InferencePool backend',
  source:
    'istio/istio@86c9f01fd735 (1.31.0-rc.0): pilot/pkg/xds/filters/filters.go, pilot/pkg/networking/core/route/route.go, pilot/pkg/networking/core/cluster_builder.go, pilot/pkg/networking/core/route/retry/retry.go',
  requestBodyMode: 'FULL_DUPLEX_STREAMED',
  responseBodyMode: 'FULL_DUPLEX_STREAMED',
  responseAttributes: false,
  retriesOnOurList: true,
  picker: { destinationFormat: 'list', tls: 'optional' },
  render: (options) => {
    const pickerClusterName = 'outbound|9002||llm-extproc.llm-extproc.svc.cluster.local';
    const poolClusterName = 'outbound|8000||llm-pool-ip-0123abcd.models.svc.cluster.local';
    const listenerFilter: Yaml = {
      name: 'envoy.filters.http.ext_proc',
      typed_config: {
        '@type': EXT_PROC_TYPE,
        grpc_service: { ...envoyGrpc('dummy'), timeout: '10s' },
        failure_mode_allow: true,
        processing_mode: { request_header_mode: 'SKIP', response_header_mode: 'SKIP' },
        message_timeout: '1000s',
        metadata_options: {
          receiving_namespaces: { untyped: [DESTINATION_METADATA_NAMESPACE] },
          forwarding_namespaces: { untyped: [DESTINATION_METADATA_NAMESPACE] },
        },
      },
    };
    const route: Yaml = {
      match: { prefix: '/' },
      route: {
        cluster: poolClusterName,
        ...routeTimeout(options, '0s'),
        retry_policy: {
          retry_on: 'connect-failure,refused-stream,unavailable,cancelled,retriable-status-codes',
          num_retries: 2,
          retry_host_predicate: [
            {
              name: 'envoy.retry_host_predicates.previous_hosts',
              typed_config: { '@type': 'type.googleapis.com/envoy.extensions.retry.host.previous_hosts.v3.PreviousHostsPredicate' },
            },
          ],
          host_selection_retry_max_attempts: 5,
        },
      },
      typed_per_filter_config: {
        'envoy.filters.http.ext_proc': {
          '@type': EXT_PROC_PER_ROUTE_TYPE,
          overrides: {
            failure_mode_allow: false,
            grpc_service: envoyGrpc(
              pickerClusterName,
              options.istioPickerAuthority === undefined ? {} : { authority: options.istioPickerAuthority },
            ),
            processing_mode: processingMode('FULL_DUPLEX_STREAMED', 'FULL_DUPLEX_STREAMED', 'SEND'),
          },
        },
      },
    };
    const poolCluster: Yaml = {
      name: poolClusterName,
      type: 'STATIC',
      connect_timeout: '10s',
      lb_policy: 'CLUSTER_PROVIDED',
      load_balancing_policy: {
        policies: [
          {
            typed_extension_config: {
              name: 'envoy.load_balancing_policies.override_host',
              typed_config: {
                '@type': 'type.googleapis.com/envoy.extensions.load_balancing_policies.override_host.v3.OverrideHost',
                override_host_sources: [{ metadata: { key: DESTINATION_METADATA_NAMESPACE, path: [{ key: DESTINATION_HEADER }] } }],
                selected_host_key: { key: DESTINATION_METADATA_NAMESPACE, path: [{ key: SERVED_ENDPOINT_KEY }] },
                fallback_policy: {
                  policies: [
                    {
                      typed_extension_config: {
                        name: 'envoy.load_balancing_policies.round_robin',
                        typed_config: { '@type': 'type.googleapis.com/envoy.extensions.load_balancing_policies.round_robin.v3.RoundRobin' },
                      },
                    },
                  ],
                },
              },
            },
          },
        ],
      },
      load_assignment: loadAssignment(poolClusterName, options.backends),
    };
    return bootstrap({
      options,
      httpFilters: [listenerFilter],
      route,
      clusters: [pickerCluster(pickerClusterName, options), poolCluster],
      accessLogCluster: pickerClusterName,
    });
  },
};

// ---------------------------------------------------------------------------------------------
// Envoy AI Gateway

/**
 * Source: envoyproxy/ai-gateway v1.1.0 (tree at c217da8a5395, 2026-08-21):
 * - internal/extensionserver/inferencepool.go `buildHTTPFilterForInferencePool`: ext_proc with
 *   request and response body mode FULL_DUPLEX_STREAMED (BUFFERED with the pool annotation
 *   `aigateway.envoyproxy.io/processing-body-mode: buffered`), trailers SEND, headers SEND,
 *   allow_mode_override false unless `aigateway.envoyproxy.io/allow-mode-override: "true"`,
 *   message_timeout 300s, failure_mode_allow false, grpc authority `svc.ns.svc:port`; no
 *   metadata_options (our dynamic metadata is dropped) and no attributes.
 * - same file, `buildExtProcClusterForInferencePoolEndpointPicker`: STRICT_DNS cluster to the
 *   picker Service, LEAST_REQUEST, connect_timeout 10s, HTTP/2, TLS with an empty validation
 *   context (encrypted, certificate not verified).
 * - internal/extensionserver/post_cluster_modify.go `handleInferencePoolCluster`: the pool's cluster
 *   is ORIGINAL_DST, CLUSTER_PROVIDED, `use_http_header` on `x-gateway-destination-endpoint`,
 *   connect_timeout 10s; post_route_modify.go sets auto_host_rewrite false on the route.
 * Envoy Gateway (envoyproxy/gateway v1.9.0, internal/xds/translator/listener.go and cluster.go)
 * puts a 32 KiB per-connection buffer limit on listeners and clusters unless a
 * ClientTrafficPolicy / BackendTrafficPolicy raises it; routes carry no retry policy by default.
 */
function aiGateway(bodyMode: 'FULL_DUPLEX_STREAMED' | 'BUFFERED'): GatewayProfile {
  const buffered = bodyMode === 'BUFFERED';
  return {
    name: buffered ? 'aigw-buffered' : 'aigw',
    title: buffered
      ? 'Envoy AI Gateway InferencePool with aigateway.envoyproxy.io/processing-body-mode: buffered'
      : 'Envoy AI Gateway InferencePool (default: full duplex)',
    source:
      'envoyproxy/ai-gateway@v1.1.0: internal/extensionserver/inferencepool.go, internal/extensionserver/post_cluster_modify.go, internal/extensionserver/post_route_modify.go; envoyproxy/gateway@v1.9.0: internal/xds/translator/listener.go (buffer limit)',
    requestBodyMode: bodyMode,
    responseBodyMode: bodyMode,
    responseAttributes: false,
    retriesOnOurList: false,
    picker: { destinationFormat: 'single', tls: 'required' },
    render: (options) => {
      const pickerClusterName = 'envoy.filters.http.ext_proc/inferencepool/models/llm-pool';
      const poolClusterName = 'httproute/models/llm-route/rule/0';
      const filter: Yaml = {
        name: 'envoy.filters.http.ext_proc/inferencepool/models/llm-pool',
        typed_config: {
          '@type': EXT_PROC_TYPE,
          grpc_service: envoyGrpc(pickerClusterName, { authority: 'llm-extproc.llm-extproc.svc:9002' }),
          processing_mode: processingMode(bodyMode, bodyMode, 'SEND'),
          allow_mode_override: false,
          message_timeout: '300s',
          failure_mode_allow: false,
        },
      };
      const route: Yaml = {
        match: { prefix: '/' },
        route: { cluster: poolClusterName, auto_host_rewrite: false, ...routeTimeout(options, undefined) },
      };
      const poolCluster: Yaml = {
        name: poolClusterName,
        type: 'ORIGINAL_DST',
        lb_policy: 'CLUSTER_PROVIDED',
        connect_timeout: '10s',
        per_connection_buffer_limit_bytes: ENVOY_GATEWAY_BUFFER_LIMIT,
        original_dst_lb_config: { use_http_header: true, http_header_name: DESTINATION_HEADER },
      };
      return bootstrap({
        options,
        httpFilters: [filter],
        route,
        clusters: [pickerCluster(pickerClusterName, options, { lb_policy: 'LEAST_REQUEST' }), poolCluster],
        accessLogCluster: pickerClusterName,
        bufferLimitBytes: ENVOY_GATEWAY_BUFFER_LIMIT,
      });
    },
  };
}

/** Envoy Gateway's default per-connection buffer limit (listener and cluster); checked live. */
const ENVOY_GATEWAY_BUFFER_LIMIT = 32_768;

// ---------------------------------------------------------------------------------------------
// kgateway

/**
 * Source: kgateway-dev/kgateway v2 (main, 2025), internal/kgateway/extensions2/plugins/
 * inferenceextension/endpointpicker/plugin.go (`HttpFilters`, `ApplyForBackend`,
 * `buildExtProcCluster`) and endpoints.go (`processPoolBackendObjIR`):
 * - ext_proc filter (named inferencepool.backend.transformation.kgateway.io): request and response
 *   FULL_DUPLEX_STREAMED, trailers SEND, headers SEND, message_timeout 5s, failure_mode_allow
 *   false, metadata_options forwarding `envoy.lb.subset_hint`, receiving `envoy.lb`. Per route an
 *   ExtProcPerRoute override names the pool's picker cluster (grpc timeout 10s) and the pool's
 *   failure mode.
 * - a header_to_metadata filter after it copies the `x-gateway-destination-endpoint` request
 *   header into `envoy.lb` / `x-gateway-destination-endpoint` (STRING).
 * - the pool's cluster: STATIC, ROUND_ROBIN with lb_subset_config keyed on
 *   `x-gateway-destination-endpoint` (fallback ANY_ENDPOINT), each endpoint carrying its own
 *   `ip:port` under that key in `envoy.lb`, HTTP/1.1. The route's metadata_match lists the pool's
 *   endpoints under `envoy.lb.subset_hint`.
 * - the picker cluster: STRICT_DNS, LEAST_REQUEST, connect_timeout 10s, HTTP/2, TLS with an empty
 *   validation context (not verified).
 * The subset hint: ext_proc forwards only the stream's dynamic metadata (Envoy
 * source/extensions/filters/http/ext_proc/ext_proc.cc `addDynamicMetadata`), not a route's
 * metadata_match, so something must write `envoy.lb.subset_hint` into the stream first. In this
 * test bed a header_to_metadata filter ahead of ext_proc turns TEST_SUBSET_HINT_HEADER into it.
 */
const kgateway: GatewayProfile = {
  name: 'kgateway',
  title: 'kgateway v2 InferencePool backend',
  source:
    'kgateway-dev/kgateway v2 (main): internal/kgateway/extensions2/plugins/inferenceextension/endpointpicker/plugin.go and endpoints.go',
  requestBodyMode: 'FULL_DUPLEX_STREAMED',
  responseBodyMode: 'FULL_DUPLEX_STREAMED',
  responseAttributes: false,
  retriesOnOurList: false,
  picker: { destinationFormat: 'single', tls: 'required' },
  render: (options) => {
    const filterName = 'inferencepool.backend.transformation.kgateway.io';
    const pickerClusterName = 'endpointpicker_llm-pool_models_ext_proc';
    const poolClusterName = 'endpoint-picker_llm-pool_models_8000';
    const testHint: Yaml = {
      name: 'test.subset_hint.header_to_metadata',
      typed_config: {
        '@type': HEADER_TO_METADATA_TYPE,
        request_rules: [
          {
            header: TEST_SUBSET_HINT_HEADER,
            on_header_present: {
              metadata_namespace: SUBSET_HINT_NAMESPACE,
              key: SUBSET_HINT_KEY,
              type: 'PROTOBUF_VALUE',
              encode: 'BASE64',
            },
            remove: true,
          },
        ],
      },
    };
    const extProc: Yaml = {
      name: filterName,
      typed_config: {
        '@type': EXT_PROC_TYPE,
        grpc_service: envoyGrpc('endpointpicker_placeholder-pool_placeholder-namespace_ext_proc', {
          authority: 'placeholder-service.placeholder-namespace.svc:9002',
        }),
        processing_mode: processingMode('FULL_DUPLEX_STREAMED', 'FULL_DUPLEX_STREAMED', 'SEND'),
        message_timeout: '5s',
        failure_mode_allow: false,
        metadata_options: {
          forwarding_namespaces: { untyped: [SUBSET_HINT_NAMESPACE] },
          receiving_namespaces: { untyped: [DESTINATION_METADATA_NAMESPACE] },
        },
      },
    };
    const headerToLb: Yaml = {
      name: 'envoy.filters.http.header_to_metadata',
      typed_config: {
        '@type': HEADER_TO_METADATA_TYPE,
        request_rules: [
          {
            header: DESTINATION_HEADER,
            on_header_present: { metadata_namespace: DESTINATION_METADATA_NAMESPACE, key: DESTINATION_HEADER, type: 'STRING' },
            remove: false,
          },
        ],
      },
    };
    const route: Yaml = {
      match: { prefix: '/' },
      route: {
        cluster: poolClusterName,
        ...routeTimeout(options, undefined),
        metadata_match: { filter_metadata: { [SUBSET_HINT_NAMESPACE]: { [SUBSET_HINT_KEY]: [...options.backends] } } },
      },
      typed_per_filter_config: {
        [filterName]: {
          '@type': EXT_PROC_PER_ROUTE_TYPE,
          overrides: {
            failure_mode_allow: false,
            grpc_service: { ...envoyGrpc(pickerClusterName, { authority: 'llm-extproc.models.svc:9002' }), timeout: '10s' },
          },
        },
      },
    };
    const poolCluster: Yaml = {
      name: poolClusterName,
      type: 'STATIC',
      connect_timeout: '5s',
      lb_policy: 'ROUND_ROBIN',
      lb_subset_config: { subset_selectors: [{ keys: [DESTINATION_HEADER] }], fallback_policy: 'ANY_ENDPOINT' },
      typed_extension_protocol_options: {
        'envoy.extensions.upstreams.http.v3.HttpProtocolOptions': {
          '@type': 'type.googleapis.com/envoy.extensions.upstreams.http.v3.HttpProtocolOptions',
          explicit_http_config: { http_protocol_options: {} },
        },
      },
      circuit_breakers: { thresholds: [{ max_connections: 40_000, max_pending_requests: 40_000, max_requests: 40_000 }] },
      load_assignment: {
        cluster_name: poolClusterName,
        endpoints: [
          {
            lb_endpoints: options.backends.map((address) => ({
              endpoint: { address: socketAddress(address) },
              load_balancing_weight: 1,
              metadata: { filter_metadata: { [DESTINATION_METADATA_NAMESPACE]: { [DESTINATION_HEADER]: address } } },
            })),
          },
        ],
      },
    };
    return bootstrap({
      options,
      httpFilters: [testHint, extProc, headerToLb],
      route,
      clusters: [
        pickerCluster(pickerClusterName, options, { lb_policy: 'LEAST_REQUEST' }),
        // The listener filter's placeholder cluster; every route overrides it.
        pickerCluster('endpointpicker_placeholder-pool_placeholder-namespace_ext_proc', options, { lb_policy: 'LEAST_REQUEST' }),
        poolCluster,
      ],
      accessLogCluster: pickerClusterName,
    });
  },
};

/**
 * The TEST_SUBSET_HINT_HEADER value for a list of `ip:port`: a serialised google.protobuf.Value
 * (list_value of string_value), base64 — what header_to_metadata's PROTOBUF_VALUE type decodes.
 */
export function subsetHintHeaderValue(addresses: readonly string[]): string {
  const field = (tag: number, payload: Buffer): Buffer => Buffer.concat([Buffer.from([tag]), varint(payload.length), payload]);
  const values = addresses.map((address) => field(0x0a, field(0x1a, Buffer.from(address, 'utf8')))); // ListValue.values[] = Value{string_value}
  return field(0x32, Buffer.concat(values)).toString('base64'); // Value{list_value}
}

function varint(value: number): Buffer {
  const bytes: number[] = [];
  let rest = value;
  while (rest >= 0x80) {
    bytes.push((rest & 0x7f) | 0x80);
    rest >>>= 7;
  }
  bytes.push(rest);
  return Buffer.from(bytes);
}

export const GATEWAY_PROFILES: Readonly<Record<GatewayProfileName, GatewayProfile>> = {
  ours,
  istio,
  aigw: aiGateway('FULL_DUPLEX_STREAMED'),
  'aigw-buffered': aiGateway('BUFFERED'),
  kgateway,
};
