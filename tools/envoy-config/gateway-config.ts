// The Envoy configuration we ship, rendered from code so the demo, the tests and the files in
// envoy/ are the same configuration (a test fails when envoy/*.yaml drift from this renderer).
// Pure: options in, a plain object (serialised to YAML by the caller) out.

import { isIP } from 'node:net';
import { splitHostPort } from '../../src/util/host-port.js';
import { CATALOG } from '../../src/errors/catalog.js';
import type { ErrorKind } from '../../src/errors/catalog.js';
import { LOCAL_REPLY_FLAG_RULES } from '../../src/errors/local-reply-rules.js';
import { ERROR_CODE_HEADER } from '../../src/errors/render.js';
import { DESTINATION_HEADER, EXT_PROC_SERVICE_NAME, DESTINATION_METADATA_NAMESPACE } from '../../src/extproc/protocol-names.js';

export type BackendsCluster =
  /** Fixed addresses (demo, tests, bare metal). Every address the picker may return must be listed. */
  | { readonly kind: 'static'; readonly addresses: readonly string[] }
  /** A Kubernetes headless Service: DNS returns ready pods only, so the override_host fallback stays safe. */
  | { readonly kind: 'strict_dns'; readonly host: string; readonly port: number }
  /** No host set needed; Envoy connects to the address in the header. Retries reuse the same host. */
  | { readonly kind: 'original_dst' };

export interface GatewayConfigOptions {
  readonly listener: { readonly address: string; readonly port: number };
  readonly admin: { readonly address: string; readonly port: number };
  /** Where llm-extproc listens: `host:port` or `unix:///path.sock`. */
  readonly extProc: string;
  readonly backends: BackendsCluster;
  /** Retries on connect failure / refused stream / reset before request; must not exceed llm-extproc's `routing.fallbacks`. */
  readonly maxRetries: number;
  /** Whole-request limit; long enough for long generations. 0 disables it. */
  readonly routeTimeoutSeconds: number;
  /** A stream with no bytes in either direction for this long is ended (catches hung servers). */
  readonly streamIdleTimeoutSeconds: number;
  readonly maxRequestBodyBytes: number;
  /** Non-streaming JSON answers up to this size are held and validated before they go out. */
  readonly maxInspectedBodyBytes: number;
  /** ext_proc per-message deadline. */
  readonly messageTimeoutMs: number;
  /** Circuit breaker: concurrent requests to the backends before Envoy answers UO (overflow). */
  readonly maxConcurrentRequests: number;
  /**
   * gRPC health checks of llm-extproc at this interval, for a standalone deployment with several
   * replicas: a replica that is draining or not yet synced says NOT_SERVING and Envoy moves its
   * streams to the others. Leave unset for a sidecar (one replica: nothing to move to).
   */
  readonly extProcHealthCheckIntervalMs?: number;
  /** TLS from Envoy to llm-extproc (a standalone Deployment with `listen.tls`); absent = plaintext h2c. */
  readonly extProcTls?: PickerTls;
  /**
   * `ours` (default): request BUFFERED, response STREAMED with mode overrides. `full-duplex`:
   * FULL_DUPLEX_STREAMED both ways with trailers, as the InferencePool gateways configure it.
   */
  readonly bodyModes?: 'ours' | 'full-duplex';
}

/**
 * How Envoy's gRPC client reaches llm-extproc. `unverified` is what Envoy AI Gateway and kgateway
 * generate (an empty validation context: encrypted, any certificate accepted); `verified` checks
 * the chain against `caPem` and the certificate's DNS name against `serverName` (also sent as SNI).
 * With `clientCertificate` Envoy presents it (mutual TLS, llm-extproc's `listen.tls.clientCaFile`).
 */
export type PickerTls =
  | { readonly kind: 'plaintext' }
  | { readonly kind: 'unverified'; readonly clientCertificate?: ClientCertificate }
  | { readonly kind: 'verified'; readonly caPem: string; readonly serverName: string; readonly clientCertificate?: ClientCertificate };

/** A PEM certificate chain and its key, as UpstreamTlsContext's tls_certificates holds them. */
export interface ClientCertificate {
  readonly certPem: string;
  readonly keyPem: string;
}

export function pickerTransportSocket(tls: PickerTls | undefined): Yaml {
  if (tls === undefined || tls.kind === 'plaintext') return {};
  const validation: Yaml =
    tls.kind === 'unverified'
      ? {}
      : {
          trusted_ca: { inline_string: tls.caPem },
          match_typed_subject_alt_names: [{ san_type: 'DNS', matcher: { exact: tls.serverName } }],
        };
  return {
    transport_socket: {
      name: 'envoy.transport_sockets.tls',
      typed_config: {
        '@type': 'type.googleapis.com/envoy.extensions.transport_sockets.tls.v3.UpstreamTlsContext',
        ...(tls.kind === 'verified' ? { sni: tls.serverName } : {}),
        common_tls_context: {
          validation_context: validation,
          ...(tls.clientCertificate === undefined
            ? {}
            : {
                tls_certificates: [
                  {
                    certificate_chain: { inline_string: tls.clientCertificate.certPem },
                    private_key: { inline_string: tls.clientCertificate.keyPem },
                  },
                ],
              }),
        },
      },
    },
  };
}

export const DEFAULT_GATEWAY_OPTIONS: Omit<GatewayConfigOptions, 'backends' | 'extProc'> = {
  listener: { address: '0.0.0.0', port: 8080 },
  admin: { address: '127.0.0.1', port: 9901 },
  maxRetries: 2,
  routeTimeoutSeconds: 900,
  streamIdleTimeoutSeconds: 300,
  maxRequestBodyBytes: 8 * 1024 * 1024,
  maxInspectedBodyBytes: 4 * 1024 * 1024,
  messageTimeoutMs: 1000,
  maxConcurrentRequests: 1024,
};

export type Yaml = Record<string, unknown>;

export function socketAddress(hostPort: string): Yaml {
  if (hostPort.startsWith('unix://')) return { pipe: { path: hostPort.slice('unix://'.length) } };
  const { host, port } = splitHostPort(hostPort);
  return { socket_address: { address: host, port_value: port } };
}

function extProcHealthCheck(intervalMs: number): Yaml {
  return {
    timeout: '1s',
    interval: `${intervalMs / 1000}s`,
    // Envoy checks an idle cluster only once a minute by default: a drain must be seen at once.
    no_traffic_interval: `${intervalMs / 1000}s`,
    unhealthy_threshold: 1,
    healthy_threshold: 1,
    grpc_health_check: { service_name: EXT_PROC_SERVICE_NAME },
  };
}

/** Strict-DNS discovery through the DNS cluster extension (the top-level DNS fields are deprecated). */
function dnsClusterType(): Yaml {
  return {
    cluster_type: {
      name: 'envoy.clusters.dns',
      typed_config: {
        '@type': 'type.googleapis.com/envoy.extensions.clusters.dns.v3.DnsCluster',
        dns_refresh_rate: '5s',
        respect_dns_ttl: true,
      },
    },
  };
}

function isLiteralAddress(hostPort: string): boolean {
  if (hostPort.startsWith('unix://')) return true;
  return isIP(splitHostPort(hostPort).host) !== 0;
}

export function loadAssignment(name: string, addresses: readonly string[]): Yaml {
  return {
    cluster_name: name,
    endpoints: [{ lb_endpoints: addresses.map((a) => ({ endpoint: { address: socketAddress(a) } })) }],
  };
}

export const HTTP2_OPTIONS = {
  'envoy.extensions.upstreams.http.v3.HttpProtocolOptions': {
    '@type': 'type.googleapis.com/envoy.extensions.upstreams.http.v3.HttpProtocolOptions',
    explicit_http_config: { http2_protocol_options: {} },
  },
};

function backendsCluster(options: GatewayConfigOptions): Yaml {
  const base: Yaml = {
    name: 'llm_backends',
    connect_timeout: '2s',
    // Upstream-side buffer; the downstream listener's limit also bounds what Envoy holds for us.
    per_connection_buffer_limit_bytes: options.maxInspectedBodyBytes,
    circuit_breakers: {
      thresholds: [
        {
          priority: 'DEFAULT',
          max_requests: options.maxConcurrentRequests,
          max_pending_requests: options.maxConcurrentRequests,
          max_retries: options.maxConcurrentRequests,
        },
      ],
    },
  };
  const backends = options.backends;
  if (backends.kind === 'original_dst') {
    return {
      ...base,
      type: 'ORIGINAL_DST',
      lb_policy: 'CLUSTER_PROVIDED',
      original_dst_lb_config: { use_http_header: true, http_header_name: DESTINATION_HEADER },
    };
  }
  const overrideHost = {
    policies: [
      {
        typed_extension_config: {
          name: 'envoy.load_balancing_policies.override_host',
          typed_config: {
            '@type': 'type.googleapis.com/envoy.extensions.load_balancing_policies.override_host.v3.OverrideHost',
            override_host_sources: [
              { metadata: { key: DESTINATION_METADATA_NAMESPACE, path: [{ key: DESTINATION_HEADER }] } },
              { header: DESTINATION_HEADER },
            ],
            // Used only when no override is present; our retry cap keeps retries inside our list.
            fallback_policy: {
              policies: [
                {
                  typed_extension_config: {
                    name: 'envoy.load_balancing_policies.least_request',
                    typed_config: { '@type': 'type.googleapis.com/envoy.extensions.load_balancing_policies.least_request.v3.LeastRequest' },
                  },
                },
              ],
            },
          },
        },
      },
    ],
  };
  if (backends.kind === 'static') {
    return {
      ...base,
      type: 'STATIC',
      load_balancing_policy: overrideHost,
      load_assignment: loadAssignment('llm_backends', backends.addresses),
    };
  }
  return {
    ...base,
    ...dnsClusterType(),
    load_balancing_policy: overrideHost,
    load_assignment: loadAssignment('llm_backends', [`${backends.host}:${backends.port}`]),
  };
}

/**
 * Envoy's request id in a local reply's body: the id llm-extproc also uses (`x-request-id`, which the
 * connection manager sets on every request), so a client that got Envoy's own answer has one to quote.
 */
export const LOCAL_REPLY_REQUEST_ID = '%REQ(X-REQUEST-ID)%';

/** The `log_name` of our access log (what an operator finds in Envoy's config dump). */
const ACCESS_LOG_NAME = 'llm_extproc_stream_ends';

/**
 * Envoy's access log of every HTTP stream that ended with a response flag, streamed over gRPC to
 * llm-extproc (`cluster`, the ext_proc cluster): how llm-extproc tells a client that left (DC, DR)
 * from a model server that broke off (UR, UC, …), and what Envoy answered the client
 * (src/extproc/access-log-service.ts). Streams without a flag (nearly all) are never sent. Entries
 * leave at once (a buffer of one byte) so that a broken stream's result waits little for its entry.
 */
export function streamEndAccessLog(cluster: string): Yaml {
  return {
    name: 'envoy.access_loggers.http_grpc',
    filter: { response_flag_filter: {} },
    typed_config: {
      '@type': 'type.googleapis.com/envoy.extensions.access_loggers.grpc.v3.HttpGrpcAccessLogConfig',
      common_config: {
        log_name: ACCESS_LOG_NAME,
        transport_api_version: 'V3',
        grpc_service: { envoy_grpc: { cluster_name: cluster } },
        buffer_size_bytes: 1,
        buffer_flush_interval: '0.05s',
      },
    },
  };
}

/**
 * Second line of defence: Envoy local replies that never pass through ext_proc (our server down,
 * a limit hit before we ran) still become catalog-shaped JSON, never Envoy's plain text.
 * Mappers match Envoy's response flags; our own answers carry no flags, so they are left alone.
 */
function localReplyMappers(): Yaml[] {
  const mapper = (kind: ErrorKind, filter: Yaml, message: string, keepStatus = false): Yaml => {
    const entry = CATALOG[kind];
    const headers: Yaml[] = [{ header: { key: ERROR_CODE_HEADER, value: entry.code }, append_action: 'OVERWRITE_IF_EXISTS_OR_ADD' }];
    if (entry.retryAfterSeconds !== undefined)
      headers.push({ header: { key: 'retry-after', value: String(entry.retryAfterSeconds) }, append_action: 'OVERWRITE_IF_EXISTS_OR_ADD' });
    return {
      filter,
      ...(keepStatus ? {} : { status_code: entry.status }),
      headers_to_add: headers,
      body_format_override: {
        json_format: { error: { message, type: entry.type, code: entry.code, request_id: LOCAL_REPLY_REQUEST_ID } },
        content_type: 'application/json',
      },
    };
  };
  const details = (expression: string): Yaml => ({
    extension_filter: {
      name: 'envoy.access_loggers.extension_filters.cel',
      typed_config: { '@type': 'type.googleapis.com/envoy.extensions.access_loggers.filters.cel.v3.ExpressionFilter', expression },
    },
  });
  const flags = (...names: string[]): Yaml => ({ response_flag_filter: { flags: names } });
  const status = (code: number): Yaml => ({
    status_code_filter: { comparison: { op: 'EQ', value: { default_value: code, runtime_key: `llm_extproc.local_reply.${code}` } } },
  });
  // Our own answers (ext_proc immediate responses, details `llm_extproc_*`) are already in shape:
  // the first mapper matches them and changes nothing, which stops the search.
  const ours: Yaml = { filter: details("response.code_details.startsWith('llm_extproc')") };
  return [
    ours,
    ...LOCAL_REPLY_FLAG_RULES.map((rule) =>
      mapper(
        rule.kind,
        rule.allOf === true ? { and_filter: { filters: rule.flags.map((name) => flags(name)) } } : flags(...rule.flags),
        rule.message,
      ),
    ),
    mapper('body_too_large', status(413), 'request body exceeds the gateway limit'),
    mapper('gateway_unavailable', status(500), 'the routing service is unavailable'),
    mapper('gateway_unavailable', status(504), 'the routing service did not answer in time'),
    // Anything else Envoy flagged: keep its status, never its plain text.
    mapper('upstream_error', { response_flag_filter: {} }, 'the gateway could not complete the request to the model server', true),
  ];
}

export function renderGatewayConfig(options: GatewayConfigOptions): Yaml {
  const extProcFilter = {
    name: 'envoy.filters.http.ext_proc',
    typed_config: {
      '@type': 'type.googleapis.com/envoy.extensions.filters.http.ext_proc.v3.ExternalProcessor',
      grpc_service: { envoy_grpc: { cluster_name: 'llm_extproc' } },
      failure_mode_allow: false,
      message_timeout: `${options.messageTimeoutMs / 1000}s`,
      ...(options.bodyModes === 'full-duplex'
        ? {
            // No message timer and no overrides in this mode; bodies stream through llm-extproc.
            processing_mode: {
              request_header_mode: 'SEND',
              response_header_mode: 'SEND',
              request_body_mode: 'FULL_DUPLEX_STREAMED',
              response_body_mode: 'FULL_DUPLEX_STREAMED',
              request_trailer_mode: 'SEND',
              response_trailer_mode: 'SEND',
            },
          }
        : {
            allow_mode_override: true,
            processing_mode: {
              request_header_mode: 'SEND',
              response_header_mode: 'SEND',
              request_body_mode: 'BUFFERED',
              response_body_mode: 'STREAMED',
              request_trailer_mode: 'SKIP',
              response_trailer_mode: 'SKIP',
            },
          }),
      // Lets us tell Envoy's own replies from the model server's, and which host really answered.
      response_attributes: ['response.code_details', 'response.flags', 'upstream.address'],
      metadata_options: { receiving_namespaces: { untyped: [DESTINATION_METADATA_NAMESPACE] } },
    },
  };
  const hcm = {
    '@type': 'type.googleapis.com/envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager',
    stat_prefix: 'llm_gateway',
    stream_idle_timeout: `${options.streamIdleTimeoutSeconds}s`,
    request_timeout: '0s',
    route_config: {
      name: 'llm_routes',
      virtual_hosts: [
        {
          name: 'llm',
          domains: ['*'],
          routes: [
            {
              match: { prefix: '/' },
              route: {
                cluster: 'llm_backends',
                timeout: `${options.routeTimeoutSeconds}s`,
                retry_policy: {
                  // Only failures where nothing reached the model server, let alone the client.
                  retry_on: 'connect-failure,refused-stream,reset-before-request',
                  num_retries: options.maxRetries,
                  retry_back_off: { base_interval: '0.01s', max_interval: '0.1s' },
                },
              },
            },
          ],
        },
      ],
    },
    local_reply_config: { mappers: localReplyMappers() },
    access_log: [streamEndAccessLog('llm_extproc')],
    http_filters: [
      extProcFilter,
      {
        name: 'envoy.filters.http.router',
        typed_config: { '@type': 'type.googleapis.com/envoy.extensions.filters.http.router.v3.Router' },
      },
    ],
  };
  return {
    admin: { address: { socket_address: { address: options.admin.address, port_value: options.admin.port } } },
    layered_runtime: {
      layers: [
        {
          name: 'llm_extproc_defaults',
          static_layer: {
            // Without it Envoy ends every ext_proc stream with RST_STREAM; past ~33 resets/s Node's
            // HTTP/2 flood protection answers GOAWAY and in-flight requests fail (seen in npm run bench).
            'envoy.reloadable_features.ext_proc_graceful_grpc_close': true,
          },
        },
        // Keeps the admin endpoint /runtime_modify usable for operators.
        { name: 'admin', admin_layer: {} },
      ],
    },
    static_resources: {
      listeners: [
        {
          name: 'llm_gateway',
          address: { socket_address: { address: options.listener.address, port_value: options.listener.port } },
          // BUFFERED request bodies must fit: the limit is our max body size plus headroom.
          per_connection_buffer_limit_bytes: options.maxRequestBodyBytes + 64 * 1024,
          filter_chains: [{ filters: [{ name: 'envoy.filters.network.http_connection_manager', typed_config: hcm }] }],
        },
      ],
      clusters: [
        {
          name: 'llm_extproc',
          // A Service name needs DNS; an IP or a Unix socket (sidecar) is static.
          ...(isLiteralAddress(options.extProc) ? { type: 'STATIC' } : dnsClusterType()),
          connect_timeout: '1s',
          // Every in-flight HTTP request holds one ext_proc stream. Envoy's default cap (1024) would
          // turn load above it into gateway_unavailable; keep it above the backends' cap, so that
          // overload shows up as `overloaded` there first.
          circuit_breakers: {
            thresholds: [
              {
                priority: 'DEFAULT',
                max_requests: 2 * options.maxConcurrentRequests,
                max_pending_requests: 2 * options.maxConcurrentRequests,
                max_connections: 1024,
              },
            ],
          },
          ...(options.extProcHealthCheckIntervalMs === undefined
            ? {}
            : { health_checks: [extProcHealthCheck(options.extProcHealthCheckIntervalMs)] }),
          typed_extension_protocol_options: HTTP2_OPTIONS,
          ...pickerTransportSocket(options.extProcTls),
          load_assignment: loadAssignment('llm_extproc', [options.extProc]),
        },
        backendsCluster(options),
      ],
    },
  };
}
