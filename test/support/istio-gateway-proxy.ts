// The gateway pod of an Istio Gateway (gatewayClassName istio), played for real: istiod's gateway
// deployment controller writes a Deployment for the Gateway; without a kubelet it never runs, so we
// do what the ReplicaSet controller, the scheduler and the kubelet would do — create one Pod from
// the Deployment's template, report its status — and start the container's proxy ourselves: a real
// Envoy 1.40 with the bootstrap pilot-agent would write for that pod (node id
// `router~<ip>~<pod>.<ns>~<ns>.svc.cluster.local`, the node metadata pilot-agent derives from the
// container's ISTIO_META_* environment and the pod), connected straight to istiod's xDS over TLS
// with the pod's token (pilot-agent would relay it from a Unix socket). Whatever istiod then sends
// is what runs.

import type { CoreV1Api, V1Container, V1Pod, V1PodTemplateSpec } from '@kubernetes/client-node';
import { AppsV1Api } from '@kubernetes/client-node';
import { stringify as toYaml } from 'yaml';
import { startEnvoy, type RunningEnvoy } from './envoy-process.js';
import { ISTIO_NAMESPACE, type Istiod } from './istio-control-plane.js';
import type { KubeControlPlane } from './kube-control-plane.js';
import { FakeKubelet, NODE_NAME } from './kube-kubelet.js';
import { notReadyPod, readyPod, type PodOptions } from './pod-builders.js';
import { waitUntil } from './wait-until.js';

/** pilot-agent's defaults for a gateway (pkg/bootstrap, tools/packaging/common/envoy_bootstrap.json). */
const STATUS_PORT = 15021;
const PROMETHEUS_PORT = 15090;
/** The runtime flags pilot-agent always writes into the bootstrap's static layer. */
const PILOT_AGENT_RUNTIME = {
  're2.max_program_size.error_level': '32768',
  'envoy.reloadable_features.http_reject_path_with_fragment': false,
  'envoy.reloadable_features.fixed_heap_use_allocated': true,
  'envoy.reloadable_features.coalesce_lb_rebuilds_on_batch_update': false,
};

export interface GatewayProxyOptions {
  readonly plane: KubeControlPlane;
  readonly istiod: Istiod;
  /** The Gateway (gateway.networking.k8s.io) this proxy serves. */
  readonly gateway: { readonly name: string; readonly namespace: string };
  /** The gateway pod's IP (a loopback address of ours). */
  readonly podIp: string;
  /** Extra Envoy flags (e.g. component log levels). */
  readonly envoyArgs?: readonly string[];
}

export interface IstioGatewayProxy {
  readonly envoy: RunningEnvoy;
  readonly pod: { readonly name: string; readonly namespace: string; readonly ip: string };
  /** The bootstrap we started Envoy with. */
  readonly bootstrap: Record<string, unknown>;
  /** Envoy admin `/config_dump` (with EDS when `eds`), parsed. */
  configDump(eds?: boolean): Promise<ConfigDump>;
  stop(): Promise<void>;
}

export interface ConfigDump {
  readonly configs: ReadonlyArray<Record<string, unknown> & { '@type': string }>;
}

/** What istiod's gateway controller names the Deployment of a Gateway (`<gateway>-<class>`). */
export function gatewayDeploymentName(gateway: string, gatewayClass = 'istio'): string {
  return `${gateway}-${gatewayClass}`;
}

export async function startIstioGatewayProxy(options: GatewayProxyOptions): Promise<IstioGatewayProxy> {
  const { plane, istiod, gateway, podIp } = options;
  const apps = plane.kubeConfig().makeApiClient(AppsV1Api);
  const core = plane.core();
  const deploymentName = gatewayDeploymentName(gateway.name);
  const deployment = await waitUntil(
    async () => {
      const d = await apps.readNamespacedDeployment({ namespace: gateway.namespace, name: deploymentName });
      return d.spec?.template === undefined ? undefined : d;
    },
    { description: `istiod to write the gateway Deployment ${gateway.namespace}/${deploymentName}`, timeoutMs: 60_000, intervalMs: 200 },
  );
  const template = deployment.spec!.template;
  const podName = `${deploymentName}-0`;
  const pod = await createPodFromTemplate(core, template, { name: podName, namespace: gateway.namespace });
  const kubelet = new FakeKubelet(core);
  const testPod = { name: podName, namespace: gateway.namespace, labels: pod.metadata?.labels ?? {}, ip: podIp };
  const proxyContainer = (o: PodOptions): PodOptions => ({ ...o, container: 'istio-proxy' });
  // Running, not yet ready: the readiness probe (15021) passes only once Envoy has its config.
  await kubelet.setStatus(testPod, (o) => notReadyPod(proxyContainer(o)));

  const container = template.spec?.containers.find((c) => c.name === 'istio-proxy');
  if (container === undefined) throw new Error(`${deploymentName} has no istio-proxy container`);
  // What pilot-agent authenticates with: the pod's projected token for the `istio-ca` audience,
  // over TLS to istiod's secure port, verified against the root istiod publishes in every namespace.
  const serviceAccount = pod.spec?.serviceAccountName ?? 'default';
  const token = await plane.serviceAccountToken(gateway.namespace, serviceAccount, ['istio-ca']);
  const rootCert = await waitUntil(
    async () => (await core.readNamespacedConfigMap({ namespace: gateway.namespace, name: 'istio-ca-root-cert' })).data?.['root-cert.pem'],
    { description: `istiod to publish istio-ca-root-cert in ${gateway.namespace}`, timeoutMs: 60_000, intervalMs: 200 },
  );
  const bootstrap = pilotAgentBootstrap({
    pod: {
      name: podName,
      namespace: gateway.namespace,
      ip: podIp,
      labels: pod.metadata?.labels ?? {},
      annotations: pod.metadata?.annotations ?? {},
    },
    serviceAccount,
    container,
    istioVersion: istiod.tools.istioVersion,
    xds: { address: istiod.secureXdsAddress, rootCert, token },
    serviceCluster: `${deploymentName}.${gateway.namespace}`,
  });
  const envoy = await startEnvoy({
    configYaml: toYaml(bootstrap),
    name: `istio-gw-${gateway.name}`,
    startTimeoutMs: 60_000,
    concurrency: 2,
    // What pilot-agent passes Envoy (pkg/envoy/proxy.go), minus hot restart and file flushing.
    extraArgs: [
      '--drain-strategy',
      'immediate',
      '--local-address-ip-version',
      'v4',
      '--allow-unknown-static-fields',
      ...(options.envoyArgs ?? []),
    ],
  });
  await kubelet.setStatus(testPod, (o) => readyPod(proxyContainer(o)));

  return {
    envoy,
    pod: { name: podName, namespace: gateway.namespace, ip: podIp },
    bootstrap,
    configDump: async (eds = false) => {
      const res = await fetch(`${envoy.adminUrl}/config_dump${eds ? '?include_eds' : ''}`);
      return (await res.json()) as ConfigDump;
    },
    stop: async () => {
      await envoy.stop();
      await core.deleteNamespacedPod({ namespace: gateway.namespace, name: podName, gracePeriodSeconds: 0 }).catch(() => undefined);
    },
  };
}

/** The Pod a ReplicaSet makes from the template, bound to our node (the scheduler's part). */
async function createPodFromTemplate(
  core: CoreV1Api,
  template: V1PodTemplateSpec,
  at: { name: string; namespace: string },
): Promise<V1Pod> {
  return core.createNamespacedPod({
    namespace: at.namespace,
    body: {
      metadata: { ...template.metadata, name: at.name, namespace: at.namespace },
      spec: { ...template.spec!, nodeName: NODE_NAME },
    },
  });
}

interface BootstrapInput {
  readonly pod: {
    readonly name: string;
    readonly namespace: string;
    readonly ip: string;
    readonly labels: Record<string, string>;
    readonly annotations: Record<string, string>;
  };
  readonly serviceAccount: string;
  readonly container: V1Container;
  readonly istioVersion: string;
  /** istiod's secure xDS port, the root certificate to verify it, the token to authenticate with. */
  readonly xds: { readonly address: string; readonly rootCert: string; readonly token: string };
  readonly serviceCluster: string;
}

/**
 * The node metadata pilot-agent sends: every `ISTIO_META_<KEY>` variable of the container as
 * `<KEY>` (downward-API fields resolved for this pod), `PROXY_CONFIG` from the variable of that
 * name, and what the agent adds itself (version, pod identity, labels, annotations, ports).
 */
export function nodeMetadata(input: BootstrapInput): Record<string, unknown> {
  const fields: Record<string, string> = {
    'metadata.name': input.pod.name,
    'metadata.namespace': input.pod.namespace,
    'spec.nodeName': NODE_NAME,
    'spec.serviceAccountName': input.serviceAccount,
    'status.podIP': input.pod.ip,
    'status.hostIP': '192.168.0.1',
  };
  const env = new Map<string, string>();
  for (const variable of input.container.env ?? []) {
    const value = variable.value ?? fields[variable.valueFrom?.fieldRef?.fieldPath ?? ''];
    if (value !== undefined) env.set(variable.name, value);
  }
  const metadata: Record<string, unknown> = {};
  for (const [name, value] of env) {
    if (!name.startsWith('ISTIO_META_')) continue;
    metadata[name.slice('ISTIO_META_'.length)] = value;
  }
  const proxyConfig = env.get('PROXY_CONFIG');
  return {
    ...metadata,
    ...(proxyConfig === undefined ? {} : { PROXY_CONFIG: JSON.parse(proxyConfig) as unknown }),
    ISTIO_VERSION: input.istioVersion,
    NAME: input.pod.name,
    NAMESPACE: input.pod.namespace,
    INSTANCE_IPS: input.pod.ip,
    LABELS: input.pod.labels,
    ANNOTATIONS: input.pod.annotations,
    SERVICE_ACCOUNT: input.serviceAccount,
    NODE_NAME: NODE_NAME,
    ENVOY_STATUS_PORT: STATUS_PORT,
    ENVOY_PROMETHEUS_PORT: PROMETHEUS_PORT,
  };
}

/**
 * A pilot-agent style bootstrap for a `router` proxy. pilot-agent relays xDS from a Unix socket to
 * istiod over TLS with the pod's token; here Envoy does that leg itself (TLS, the token as gRPC
 * metadata), so istiod sees an authenticated proxy, as it would.
 */
export function pilotAgentBootstrap(input: BootstrapInput): Record<string, unknown> {
  const [xdsHost, xdsPort] = splitAddress(input.xds.address);
  const ads = { ads: {}, initial_fetch_timeout: '0s', resource_api_version: 'V3' };
  return {
    node: {
      id: `router~${input.pod.ip}~${input.pod.name}.${input.pod.namespace}~${input.pod.namespace}.svc.cluster.local`,
      cluster: input.serviceCluster,
      locality: {},
      metadata: nodeMetadata(input),
    },
    layered_runtime: {
      layers: [
        { name: 'global config', static_layer: PILOT_AGENT_RUNTIME },
        { name: 'admin', admin_layer: {} },
      ],
    },
    stats_config: { use_all_default_tags: false },
    admin: { address: { socket_address: { address: '127.0.0.1', port_value: 0 } } },
    dynamic_resources: {
      lds_config: ads,
      cds_config: ads,
      ads_config: {
        api_type: 'GRPC',
        set_node_on_first_message_only: true,
        transport_api_version: 'V3',
        grpc_services: [
          { envoy_grpc: { cluster_name: 'xds-grpc' }, initial_metadata: [{ key: 'authorization', value: `Bearer ${input.xds.token}` }] },
        ],
      },
    },
    static_resources: {
      clusters: [
        {
          name: 'xds-grpc',
          type: 'STATIC',
          connect_timeout: '1s',
          lb_policy: 'ROUND_ROBIN',
          load_assignment: {
            cluster_name: 'xds-grpc',
            endpoints: [{ lb_endpoints: [{ endpoint: { address: { socket_address: { address: xdsHost, port_value: xdsPort } } } }] }],
          },
          upstream_connection_options: { tcp_keepalive: { keepalive_time: 300 } },
          transport_socket: {
            name: 'envoy.transport_sockets.tls',
            typed_config: {
              '@type': 'type.googleapis.com/envoy.extensions.transport_sockets.tls.v3.UpstreamTlsContext',
              sni: `istiod.${ISTIO_NAMESPACE}.svc`,
              common_tls_context: { alpn_protocols: ['h2'], validation_context: { trusted_ca: { inline_string: input.xds.rootCert } } },
            },
          },
          max_requests_per_connection: 1,
          typed_extension_protocol_options: {
            'envoy.extensions.upstreams.http.v3.HttpProtocolOptions': {
              '@type': 'type.googleapis.com/envoy.extensions.upstreams.http.v3.HttpProtocolOptions',
              explicit_http_config: { http2_protocol_options: {} },
            },
          },
        },
      ],
    },
  };
}

function splitAddress(address: string): [string, number] {
  const colon = address.lastIndexOf(':');
  return [address.slice(0, colon), Number(address.slice(colon + 1))];
}
