// A user's install beside Envoy Gateway, on the real kube-apiserver with the real envoy-gateway
// controller (envoy-gateway.ts): a GatewayClass, a Gateway and an HTTPRoute to the model servers'
// Service as a user writes them, and `helm template` of charts/llm-extproc with
// examples/envoy-gateway.yaml (plus the values a user sets: pools, and whatever a test changes)
// server-side applied as it is. The controller programs a real Envoy from all of that.
//
// The test bed plays the parts a cluster's nodes would: the kubelet (pods and their status, through
// the status subresource), the endpoint controller (EndpointSlices of the model servers' Service
// and of llm-extproc's Service, ready or not, as the test says), and the container runtime:
// llm-extproc runs as a process (`node dist/src/main.js`) with the config file from the chart's
// ConfigMap, authenticated as the chart's ServiceAccount under the chart's RBAC. Only what a pod
// network provides is changed in that file: listen addresses on loopback, and a kubeconfig instead
// of the in-cluster one. Model servers listen on pod addresses (pod-network.ts: a block of
// 198.18.0.0/15 on the loopback interface; the API server refuses 127.0.0.x in an EndpointSlice),
// one per pod.

import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { CustomObjectsApi, KubernetesObjectApi } from '@kubernetes/client-node';
import { parse as parseYaml, stringify as toYaml } from 'yaml';
import { repoRoot } from '../../scripts/repo-root.js';
import { CHART_DIR } from '../../scripts/chart/chart-files.js';
import { EG_CONTROLLER_NAME, EnvoyGatewayController, deepMerge, type EnvoyGatewayOptions, type GatewayProxy } from './envoy-gateway.js';
import { dumpRoutes } from './envoy-config-dump.js';
import { scrapeMetrics } from './prometheus.js';
import { startExtprocProcess, type ExtprocProcess } from './extproc-process.js';
import { helm, parseManifests, type K8sObject } from './helm.js';
import { guideManifests, guideObject, withListenerPort } from './install-guide.js';
import { send, type ClientRequest, type ClientResponse } from './http-client.js';
import { KubeControlPlane } from './kube-control-plane.js';
import { FakeKubelet, type TestPod } from './kube-kubelet.js';
import { freePort } from './free-ports.js';
import { startModelServer, type Behavior, type ModelServer } from './model-server.js';
import { notReadyPod, readyPod, startingPod } from './pod-builders.js';
import { claimPodAddresses, releasePodAddresses } from './pod-network.js';
import { waitUntil } from './wait-until.js';

export { deepMerge };

// The user's objects are docs/install.md's (docs/install/envoy-gateway/gateway.yaml and
// model-server.yaml): names and namespaces come from there.
const GUIDE_GATEWAY = guideManifests('envoy-gateway/gateway.yaml');
const GUIDE_MODEL_SERVER = guideManifests('model-server.yaml');

export const RELEASE = 'edge';
export const RELEASE_NS = guideObject(GUIDE_GATEWAY, 'Gateway').metadata.namespace ?? 'default';
export const MODELS_NS = guideObject(GUIDE_MODEL_SERVER, 'Service').metadata.namespace ?? 'default';
export const GATEWAY_NAME = guideObject(GUIDE_GATEWAY, 'Gateway').metadata.name;
export const ROUTE_NAME = guideObject(GUIDE_GATEWAY, 'HTTPRoute').metadata.name;
export const MODELS_SERVICE = guideObject(GUIDE_MODEL_SERVER, 'Service').metadata.name;
export const EXTPROC_SERVICE = `${RELEASE}-llm-extproc`;
/** The cluster Envoy Gateway names after the HTTPRoute's first rule. */
export const ROUTE_CLUSTER = `httproute/${RELEASE_NS}/${ROUTE_NAME}/rule/0`;
const POD_LABEL = 'llm-extproc.test/pool';
const SYNC_TIMEOUT_MS = 120_000;

/** How a model-server pod looks to the kubelet (pod status) and to the endpoint controller (slice). */
export type PodState = 'ready' | 'not-ready' | 'starting';

export interface PoolSpec {
  readonly name: string;
  /** One pod per entry, each with its own model server. */
  readonly pods: ReadonlyArray<{ readonly id: string; readonly state?: PodState; readonly behavior?: Behavior }>;
}

export interface ModelPod {
  readonly pod: TestPod;
  readonly pool: string;
  readonly server: ModelServer;
  state: PodState;
}

export interface BedOptions {
  readonly pools: readonly PoolSpec[];
  /** Chart values over examples/envoy-gateway.yaml and the bed's own (pools, targetRefs). */
  readonly values?: Record<string, unknown>;
  /** The chart example the install starts from. */
  readonly example?: string;
  readonly controller?: EnvoyGatewayOptions;
}

export class EnvoyGatewayBed {
  private extprocProcess: ExtprocProcess | undefined;
  private applied: K8sObject[] = [];
  private values: Record<string, unknown> = {};

  private constructor(
    readonly plane: KubeControlPlane,
    readonly controller: EnvoyGatewayController,
    readonly dir: string,
    readonly pods: ReadonlyMap<string, ModelPod>,
    readonly modelPort: number,
    readonly gatewayPort: number,
    private readonly addresses: readonly string[],
    private readonly kubelet: FakeKubelet,
    private readonly options: BedOptions,
    private proxyRef: GatewayProxy | undefined,
  ) {}

  static async start(options: BedOptions): Promise<EnvoyGatewayBed> {
    const plane = await KubeControlPlane.start();
    let controller: EnvoyGatewayController | undefined;
    const servers: ModelServer[] = [];
    let addresses: string[] = [];
    try {
      // The controller holds the machine-wide lock, so the pod addresses are ours until stop().
      controller = await EnvoyGatewayController.start(plane, options.controller);
      const dir = await mkdtemp(join(tmpdir(), 'llm-extproc-eg-bed-'));
      for (const ns of [RELEASE_NS, MODELS_NS]) await plane.createNamespace(ns);
      // The first address is llm-extproc's; one per model pod after it.
      addresses = claimPodAddresses(1 + options.pools.reduce((n, p) => n + p.pods.length, 0));

      // Model servers: one pod address each, all on one port (a Service has one targetPort).
      const pods = new Map<string, ModelPod>();
      let port = 0;
      let host = 1;
      for (const pool of options.pools) {
        for (const spec of pool.pods) {
          const ip = addresses[host++];
          const server = await startModelServer({
            id: spec.id,
            host: ip,
            port,
            models: [pool.name],
            behavior: spec.behavior ?? { kind: 'ok' },
          });
          servers.push(server);
          port = server.port;
          const pod: TestPod = { name: spec.id, namespace: MODELS_NS, labels: { [POD_LABEL]: pool.name }, ip };
          pods.set(spec.id, { pod, pool: pool.name, server, state: spec.state ?? 'ready' });
        }
      }
      const kubelet = new FakeKubelet(plane.core());
      for (const p of pods.values()) await kubelet.createPod(p.pod, builderFor(p.state));

      const gatewayPort = await freePort();
      await plane.apply(userManifests(gatewayPort));
      const bed = new EnvoyGatewayBed(plane, controller, dir, pods, port, gatewayPort, addresses, kubelet, options, undefined);
      try {
        await bed.writeModelEndpoints();
        // As in a cluster: the policies are applied before llm-extproc's pod is ready (Envoy
        // Gateway marks the extension policy Invalid until its Service has a ready endpoint).
        await bed.install(options.values ?? {}, { wait: false });
        await bed.startExtproc();
        await bed.waitForPoliciesAccepted();
        bed.proxyRef = await controller.proxy(RELEASE_NS, GATEWAY_NAME);
        await bed.waitForProgrammed();
        return bed;
      } catch (err) {
        process.stderr.write(`envoy-gateway log tail:\n${await controller.logTail()}\n`);
        if (bed.proxyRef !== undefined) {
          const listeners = await fetch(`${bed.proxyRef.envoy.adminUrl}/listeners?format=json`)
            .then((r) => r.text())
            .catch(() => '');
          process.stderr.write(`envoy listeners: ${listeners}\nenvoy log:\n${bed.proxyRef.envoy.logs().slice(-4000)}\n`);
        }
        await bed.stop();
        throw err;
      }
    } catch (err) {
      await Promise.all(servers.map((s) => s.close()));
      releasePodAddresses(addresses);
      await controller?.stop();
      await plane.stop();
      throw err;
    }
  }

  get proxy(): GatewayProxy {
    if (this.proxyRef === undefined) throw new Error('the Envoy proxy is not running');
    return this.proxyRef;
  }

  get extproc(): ExtprocProcess {
    if (this.extprocProcess === undefined) throw new Error('llm-extproc is not running');
    return this.extprocProcess;
  }

  server(id: string): ModelServer {
    const pod = this.pods.get(id);
    if (pod === undefined) throw new Error(`no model pod ${id}`);
    return pod.server;
  }

  send(req: ClientRequest): Promise<ClientResponse> {
    return send(this.gatewayPort, req);
  }

  /** llm-extproc's Prometheus text (its ops port). */
  async metricsText(): Promise<string> {
    return scrapeMetrics(this.extproc.httpPort);
  }

  /** `helm template` of the chart with the example, the bed's values and `values`. */
  async render(values: Record<string, unknown>): Promise<K8sObject[]> {
    const chart = join(repoRoot(), CHART_DIR);
    const poolValues = [...new Set([...this.pods.values()].map((p) => p.pool))].map((name) => ({
      name,
      namespace: MODELS_NS,
      selector: { [POD_LABEL]: name },
      targetPort: this.modelPort,
      models: [name],
    }));
    const bedValues = deepMerge(
      {
        config: { kubernetes: { pools: poolValues }, quarantine: { consecutiveFailures: 1000 } },
        gateway: { envoyGateway: { targetRefs: [{ group: 'gateway.networking.k8s.io', kind: 'HTTPRoute', name: ROUTE_NAME }] } },
      },
      values,
    );
    const valuesFile = join(this.dir, 'values.yaml');
    await writeFile(valuesFile, toYaml(bedValues));
    const example = join(chart, 'examples', this.options.example ?? 'envoy-gateway.yaml');
    const res = await helm(
      ['template', RELEASE, chart, '--namespace', RELEASE_NS, '-f', example, '-f', valuesFile],
      join(this.dir, 'helm'),
    );
    if (res.code !== 0) throw new Error(`helm template failed: ${res.stderr}`);
    return parseManifests(res.stdout);
  }

  /**
   * `helm upgrade` with these values: every rendered object server-side applied, the ones the new
   * render no longer has deleted. Waits until the controller accepted the policies.
   */
  async install(values: Record<string, unknown>, { wait = true } = {}): Promise<K8sObject[]> {
    this.values = values;
    const objects = await this.render(values);
    const client = KubernetesObjectApi.makeApiClient(this.plane.kubeConfig());
    const key = (o: K8sObject): string => `${o.kind}/${o.metadata.namespace ?? ''}/${o.metadata.name}`;
    const kept = new Set(objects.map(key));
    for (const old of this.applied) {
      if (!kept.has(key(old))) await client.delete(old);
    }
    await this.plane.apply(objects.map((o) => toYaml(o)).join('---\n'), 'helm');
    this.applied = objects;
    if (wait) await this.waitForPoliciesAccepted();
    return objects;
  }

  /** Every Envoy Gateway policy of the release Accepted by the controller at its current generation. */
  async waitForPoliciesAccepted(): Promise<void> {
    for (const o of this.applied.filter((o) => o.apiVersion.startsWith('gateway.envoyproxy.io/') && o.kind.endsWith('Policy'))) {
      await this.waitForPolicyAccepted(o);
    }
  }

  /** The current values (as last installed). */
  get installedValues(): Record<string, unknown> {
    return this.values;
  }

  private async waitForPolicyAccepted(policy: K8sObject): Promise<void> {
    const custom = this.plane.kubeConfig().makeApiClient(CustomObjectsApi);
    const plural = policy.kind.toLowerCase().replace(/y$/, 'ie') + 's';
    let lastStatus = 'none';
    await waitUntil(
      async () => {
        const got = (await custom.getNamespacedCustomObject({
          group: 'gateway.envoyproxy.io',
          version: 'v1alpha1',
          namespace: policy.metadata.namespace ?? RELEASE_NS,
          plural,
          name: policy.metadata.name,
        })) as { metadata?: { generation?: number }; status?: { ancestors?: Array<{ conditions?: Array<Record<string, unknown>> }> } };
        lastStatus = JSON.stringify(got.status ?? {});
        const conditions = got.status?.ancestors?.flatMap((a) => a.conditions ?? []) ?? [];
        const accepted = conditions.find((c) => c.type === 'Accepted');
        if (accepted?.status === 'False')
          throw new Error(`${policy.kind} ${policy.metadata.name} not accepted: ${String(accepted.message)}`);
        return accepted?.status === 'True' && accepted.observedGeneration === got.metadata?.generation ? true : undefined;
      },
      { description: `${policy.kind} ${policy.metadata.name} Accepted`, timeoutMs: SYNC_TIMEOUT_MS, intervalMs: 100 },
    ).catch((err: unknown) => {
      throw new Error(`${policy.kind} ${policy.metadata.name} not Accepted; last status ${lastStatus}`, { cause: err });
    });
  }

  /** The chart's ConfigMap config, changed only where a pod network differs from loopback. */
  private async extprocConfigFile(): Promise<string> {
    const configMap = this.applied.find((o) => o.kind === 'ConfigMap' && o.metadata.name === EXTPROC_SERVICE);
    const text = (configMap?.['data'] as Record<string, string> | undefined)?.['config.yaml'];
    if (text === undefined) throw new Error(`no config.yaml in ConfigMap ${EXTPROC_SERVICE}`);
    const config = parseYaml(text) as Record<string, Record<string, unknown>>;
    const token = await this.plane.serviceAccountToken(RELEASE_NS, EXTPROC_SERVICE);
    const kubeconfigPath = await this.plane.writeKubeconfig('llm-extproc-kubeconfig.yaml', token);
    config.listen = { ...config.listen, grpc: `${this.addresses[0]}:0`, http: '127.0.0.1:0' };
    config.kubernetes = { ...config.kubernetes, kubeconfigPath };
    config.logLevel = (process.env.LLM_EXTPROC_TEST_LOG_LEVEL ?? 'info') as unknown as Record<string, unknown>;
    const path = join(this.dir, 'llm-extproc.yaml');
    await writeFile(path, toYaml(config));
    return path;
  }

  /** Starts llm-extproc (again) and publishes its address in its Service's EndpointSlice, ready. */
  async startExtproc(): Promise<ExtprocProcess> {
    const extproc = await startExtprocProcess({ configPath: await this.extprocConfigFile(), startTimeoutMs: 60_000 });
    this.extprocProcess = extproc;
    await waitUntil(async () => ((await fetch(`http://127.0.0.1:${extproc.httpPort}/readyz`)).ok ? true : undefined), {
      description: 'llm-extproc ready (endpoint cache synced)',
      timeoutMs: SYNC_TIMEOUT_MS,
      intervalMs: 100,
    });
    await this.writeExtprocEndpoints('ready');
    return extproc;
  }

  /** llm-extproc's gRPC address, from its start log line. */
  extprocAddress(): { ip: string; port: number } {
    const started = this.extproc.logLines().find((l) => l.msg === 'llm-extproc started');
    const grpc = started?.['grpc'];
    const address = typeof grpc === 'string' ? grpc : '';
    const colon = address.lastIndexOf(':');
    return { ip: address.slice(0, colon), port: Number(address.slice(colon + 1)) };
  }

  /**
   * The endpoint controller's view of llm-extproc's Service: `ready` (serving), `terminating`
   * (pod deleted, still serving), or `none` (no endpoints).
   */
  async writeExtprocEndpoints(state: 'ready' | 'terminating' | 'none'): Promise<void> {
    const { ip, port } = this.extprocAddress();
    const endpoints =
      state === 'none'
        ? []
        : [{ ip, ready: state === 'ready', serving: true, terminating: state === 'terminating', pod: `${EXTPROC_SERVICE}-0` }];
    await this.plane.apply(endpointSlice(RELEASE_NS, EXTPROC_SERVICE, 'grpc', port, endpoints));
  }

  /** The model servers' Service slice as the endpoint controller writes it from pod readiness. */
  async writeModelEndpoints(overrides: ReadonlyMap<string, 'ready' | 'not-ready' | 'absent'> = new Map()): Promise<void> {
    const endpoints = [...this.pods.values()].flatMap((p) => {
      const state = overrides.get(p.pod.name) ?? (p.state === 'ready' ? 'ready' : p.state === 'not-ready' ? 'not-ready' : 'absent');
      // A pod without an IP (starting) has no endpoint at all.
      if (state === 'absent') return [];
      return [{ ip: p.pod.ip, ready: state === 'ready', serving: state === 'ready', terminating: false, pod: p.pod.name }];
    });
    await this.plane.apply(endpointSlice(MODELS_NS, MODELS_SERVICE, 'http', this.modelPort, endpoints));
  }

  /** The kubelet reports a new state for a pod. */
  async setPodState(id: string, state: PodState): Promise<void> {
    const pod = this.pods.get(id);
    if (pod === undefined) throw new Error(`no model pod ${id}`);
    pod.state = state;
    await this.kubelet.setStatus(pod.pod, builderFor(state));
  }

  /** Waits until Envoy's view of a cluster's hosts (address → EDS health) satisfies `check`. */
  async waitForHosts(cluster: string, check: (hosts: ReadonlyMap<string, string>) => boolean, description: string): Promise<void> {
    await waitUntil(
      async () => {
        const hosts = (await this.proxy.clusterHosts()).get(cluster);
        if (hosts === undefined) return undefined;
        return check(new Map(hosts.map((h) => [h.address, h.edsHealth]))) ? true : undefined;
      },
      { description: `Envoy cluster ${cluster}: ${description}`, timeoutMs: SYNC_TIMEOUT_MS, intervalMs: 100 },
    );
  }

  /** The HTTPRoute's Envoy route (Envoy Gateway names it `httproute/<ns>/<name>/rule/0/...`). */
  async route(): Promise<EnvoyRoute | undefined> {
    const routes = dumpRoutes(await this.proxy.configDump()) as EnvoyRoute[];
    return routes.find((r) => r.name?.startsWith(`${ROUTE_CLUSTER}/`));
  }

  /** Waits until Envoy's route satisfies `check` (the controller's xDS push after a change). */
  async waitForRoute(check: (route: EnvoyRoute) => boolean, description: string): Promise<EnvoyRoute> {
    return waitUntil(
      async () => {
        const route = await this.route();
        return route !== undefined && check(route) ? route : undefined;
      },
      { description: `Envoy's route: ${description}`, timeoutMs: SYNC_TIMEOUT_MS, intervalMs: 100 },
    );
  }

  /** The listener is up, the route carries our filter, and both clusters hold their endpoints. */
  async waitForProgrammed(): Promise<void> {
    await waitUntil(async () => ((await this.proxy.listenerPort()) === this.gatewayPort ? true : undefined), {
      description: `the Gateway listener on :${this.gatewayPort}`,
      timeoutMs: SYNC_TIMEOUT_MS,
      intervalMs: 100,
    });
    const ready = [...this.pods.values()].filter((p) => p.state === 'ready').map((p) => p.server.address);
    await this.waitForHosts(ROUTE_CLUSTER, (hosts) => ready.every((a) => hosts.get(a) === 'HEALTHY'), 'every ready model pod HEALTHY');
    const { ip, port } = this.extprocAddress();
    await this.waitForExtprocHost(`${ip}:${port}`);
  }

  /** Waits until the ext_proc cluster's only host is llm-extproc's current address, healthy. */
  async waitForExtprocHost(address: string): Promise<void> {
    await waitUntil(
      async () => {
        const clusters = await this.proxy.clusterHosts();
        const extproc = [...clusters.entries()].find(([name]) => name.startsWith('envoyextensionpolicy/'));
        return extproc !== undefined && extproc[1].some((h) => h.address === address && h.edsHealth === 'HEALTHY') ? true : undefined;
      },
      { description: `Envoy's llm-extproc cluster holding ${address}`, timeoutMs: SYNC_TIMEOUT_MS, intervalMs: 100 },
    );
  }

  async stop(): Promise<void> {
    await this.proxyRef?.stop();
    await this.extprocProcess?.kill();
    await Promise.all([...this.pods.values()].map((p) => p.server.close()));
    releasePodAddresses(this.addresses);
    await this.controller.stop();
    await this.plane.stop();
    await rm(this.dir, { recursive: true, force: true });
  }
}

function builderFor(state: PodState): typeof readyPod {
  return state === 'ready' ? readyPod : state === 'not-ready' ? notReadyPod : startingPod;
}

/**
 * What a user applies from docs/install.md: the GatewayClass, Gateway, HTTPRoute and ReferenceGrant
 * (the listener on a free port), and the model servers' Deployment and Service (no controller
 * manager here, so the Deployment makes no pods: the bed's kubelet plays them).
 */
function userManifests(gatewayPort: number): string {
  const controller = (guideObject(GUIDE_GATEWAY, 'GatewayClass')['spec'] as { controllerName?: string }).controllerName;
  if (controller !== EG_CONTROLLER_NAME)
    throw new Error(`the guide's GatewayClass names ${controller}, not Envoy Gateway's ${EG_CONTROLLER_NAME}`);
  return [...withListenerPort(GUIDE_GATEWAY, gatewayPort), ...GUIDE_MODEL_SERVER].map((o) => toYaml(o)).join('---\n');
}

/** The parts of an Envoy route (config dump JSON) the tests read. */
export interface EnvoyRoute {
  readonly name?: string;
  readonly route?: { readonly cluster?: string; readonly timeout?: string; readonly [key: string]: unknown };
  readonly direct_response?: { readonly status?: number; readonly [key: string]: unknown };
  readonly typed_per_filter_config?: Record<string, unknown>;
}

interface SliceEndpoint {
  readonly ip: string;
  readonly ready: boolean;
  readonly serving: boolean;
  readonly terminating: boolean;
  readonly pod: string;
}

/** One EndpointSlice of a Service, as the EndpointSlice controller writes it. */
function endpointSlice(namespace: string, service: string, portName: string, port: number, endpoints: readonly SliceEndpoint[]): string {
  return toYaml({
    apiVersion: 'discovery.k8s.io/v1',
    kind: 'EndpointSlice',
    metadata: {
      name: `${service}-slice`,
      namespace,
      labels: { 'kubernetes.io/service-name': service, 'endpointslice.kubernetes.io/managed-by': 'endpointslice-controller.k8s.io' },
    },
    addressType: 'IPv4',
    ports: [{ name: portName, port, protocol: 'TCP' }],
    endpoints: endpoints.map((e) => ({
      addresses: [e.ip],
      conditions: { ready: e.ready, serving: e.serving, terminating: e.terminating },
      nodeName: 'node-1',
      targetRef: { kind: 'Pod', namespace, name: e.pod },
    })),
  });
}
