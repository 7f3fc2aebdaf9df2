// The live-Istio test bed, assembled the way a user installs llm-extproc beside Istio:
//
//   real kube-apiserver + etcd ── istiod (real, from its own chart) ── xDS ──▶ real Envoy 1.40 as
//   the Gateway's pod ──▶ model-server "pods" (local OpenAI servers on loopback addresses)
//                                  └── ext_proc ──▶ llm-extproc (the real program, as the chart's pod)
//
// - `helm template charts/llm-extproc -f examples/inferencepool-istio.yaml` (plus the test's own
//   values, like a user's -f) is server-side applied as it is: InferencePool, DestinationRule,
//   Services, RBAC, ConfigMap, Deployment.
// - A Gateway (gatewayClassName istio) and an HTTPRoute to the InferencePool, as in Istio's guide.
// - No kubelet, scheduler or controller-manager: we create the pods (model servers, llm-extproc
//   from the chart's Deployment template, the gateway from istiod's Deployment), report their
//   status as a kubelet would, write EndpointSlices as the endpoint controller would, and run each
//   pod's process on its own loopback address. The llm-extproc pod runs `dist/src/main.js` with the
//   ConfigMap's config.yaml; what a kubelet would do for the container is done here: the Secret
//   and ConfigMap "mounted" into a directory, the pod's IP for 0.0.0.0, and the ServiceAccount's
//   token as a kubeconfig (in a pod it is the in-cluster config).

import { mkdir, mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { V1Pod } from '@kubernetes/client-node';
import { parse as parseYaml, stringify as toYaml } from 'yaml';
import { repoRoot } from '../../scripts/repo-root.js';
import { startExtprocProcess, type ExtprocProcess } from './extproc-process.js';
import { helm, parseManifests, type K8sObject } from './helm.js';
import { guideManifests, guideObject, withListenerPort } from './install-guide.js';
import { send, type ClientRequest, type ClientResponse } from './http-client.js';
import { Istiod, type IstiodOptions } from './istio-control-plane.js';
import { EndpointSliceController } from './istio-endpoint-slices.js';
import { startIstioGatewayProxy, type IstioGatewayProxy } from './istio-gateway-proxy.js';
import { freePorts } from './free-ports.js';
import { KubeControlPlane } from './kube-control-plane.js';
import { FakeKubelet, NODE_NAME, type TestPod } from './kube-kubelet.js';
import { startModelServer, type Behavior, type ModelServer } from './model-server.js';
import { notReadyPod, readyPod, terminatingPod, type PodJson, type PodOptions } from './pod-builders.js';
import { claimPodAddresses, releasePodAddresses } from './pod-network.js';
import { makeTestCa } from './tls-files.js';
import { scrapeMetrics } from './prometheus.js';
import { waitUntil } from './wait-until.js';

// The user's Gateway and HTTPRoute are docs/install.md's (docs/install/istio/gateway.yaml), the
// model-server pods look like its model-server.yaml's: names, labels and the port come from there.
const GUIDE_GATEWAY = guideManifests('istio/gateway.yaml');
const GUIDE_GATEWAY_OBJECT = guideObject(GUIDE_GATEWAY, 'Gateway');
const GUIDE_MODEL_SERVER = guideObject<
  K8sObject & { spec: { template: { metadata: { labels: Record<string, string> }; spec: V1Pod['spec'] } } }
>(guideManifests('model-server.yaml'), 'Deployment');

export const RELEASE = 'llm';
export const MODELS_NS = GUIDE_MODEL_SERVER.metadata.namespace ?? 'default';
export const GATEWAY_NS = GUIDE_GATEWAY_OBJECT.metadata.namespace ?? 'default';
export const GATEWAY_NAME = GUIDE_GATEWAY_OBJECT.metadata.name;
/** What charts/llm-extproc/examples/inferencepool-istio.yaml declares. */
export const POOL = 'llama';
export const MODEL = 'llama-3-8b';
export const POOL_LABELS: Readonly<Record<string, string>> = GUIDE_MODEL_SERVER.spec.template.metadata.labels;
export const TARGET_PORT = GUIDE_MODEL_SERVER.spec.template.spec!.containers[0].ports![0].containerPort;
const CHART = join(repoRoot(), 'charts', 'llm-extproc');
export const ISTIO_EXAMPLE = join(CHART, 'examples', 'inferencepool-istio.yaml');

/** Pod addresses this bed claims (pod-network.ts): 1 gateway, 2-9 llm-extproc, 10+ model servers. */
const POD_ADDRESSES = 32;

export interface ModelPodSpec {
  readonly name: string;
  /** Ready=True (default), or Running with a failing readiness probe. */
  readonly ready?: boolean;
  readonly behavior?: Behavior;
}

export interface IstioBedOptions {
  readonly name: string;
  /** Values over the Istio example, as a user's own `-f` file. */
  readonly values?: object;
  readonly modelPods: readonly ModelPodSpec[];
  readonly istiod?: IstiodOptions;
  /** Extra fields for the HTTPRoute's rule (e.g. `timeouts`). */
  readonly routeRule?: object;
  /** Extra Envoy flags for the gateway proxy. */
  readonly envoyArgs?: readonly string[];
}

export interface PickerPod {
  readonly pod: TestPod;
  readonly process: ExtprocProcess;
  readonly grpcAddress: string;
  /** `http://<pod ip>:<port>`: /metrics, /readyz. */
  readonly opsUrl: string;
}

export class IstioBed {
  readonly servers = new Map<string, ModelServer>();
  readonly pods = new Map<string, TestPod>();
  /** The chart's llm-extproc replicas (replicaCount), as pods. */
  readonly pickers: PickerPod[] = [];
  proxy!: IstioGatewayProxy;
  /** The objects `helm template` rendered for our chart. */
  rendered: K8sObject[] = [];
  private readonly kubelet: FakeKubelet;
  readonly slices: EndpointSliceController;
  private readonly addresses = claimPodAddresses(POD_ADDRESSES);

  private constructor(
    readonly plane: KubeControlPlane,
    readonly istiod: Istiod,
    readonly dir: string,
    /** The Gateway listener's port (Envoy binds it on 0.0.0.0). */
    readonly gatewayPort: number,
  ) {
    this.kubelet = new FakeKubelet(plane.core());
    this.slices = new EndpointSliceController(plane);
  }

  static async start(options: IstioBedOptions): Promise<IstioBed> {
    const plane = await KubeControlPlane.start();
    let istiod: Istiod | undefined;
    let bed: IstioBed | undefined;
    try {
      istiod = await Istiod.start(plane, options.istiod);
      const dir = await mkdtemp(join(tmpdir(), `llm-extproc-istio-${options.name}-`));
      const [gatewayPort] = await freePorts(1);
      bed = new IstioBed(plane, istiod, dir, gatewayPort);
      await bed.install(options);
      return bed;
    } catch (err) {
      if (bed !== undefined) await bed.stop();
      else {
        await istiod?.stop();
        await plane.stop();
      }
      throw err;
    }
  }

  /** The address of pod number `index` (see POD_ADDRESSES). */
  podIp(index: number): string {
    const address = this.addresses[index - 1];
    if (address === undefined) throw new Error(`no pod address ${index}`);
    return address;
  }

  private async install(options: IstioBedOptions): Promise<void> {
    for (const ns of [MODELS_NS, GATEWAY_NS]) await this.plane.createNamespace(ns);

    // The Secret the example names (tls.secretName: llm-extproc-tls), as cert-manager writes it.
    const ca = await makeTestCa();
    // Named for our Service, as cert-manager would issue it; the DestinationRule checks the names.
    const service = `${RELEASE}-llm-extproc.${MODELS_NS}`;
    const identity = await ca.issue([`${service}.svc.cluster.local`, `${service}.svc`]);
    await this.plane.core().createNamespacedSecret({
      namespace: MODELS_NS,
      body: {
        metadata: { name: 'llm-extproc-tls' },
        type: 'kubernetes.io/tls',
        data: {
          'tls.crt': identity.cert.toString('base64'),
          'tls.key': identity.key.toString('base64'),
          'ca.crt': Buffer.from(ca.caPem).toString('base64'),
        },
      },
    });

    // The CA bundle the example's caConfigMap names, as trust-manager would publish it.
    await this.plane.core().createNamespacedConfigMap({
      namespace: MODELS_NS,
      body: { metadata: { name: 'llm-extproc-ca' }, data: { 'ca.crt': ca.caPem } },
    });

    this.rendered = await renderChart(options.values ?? {}, this.dir);
    await this.plane.apply(this.rendered.map((o) => toYaml(o)).join('---\n'));
    await this.plane.apply(gatewayManifests(this.gatewayPort, options.routeRule ?? {}));

    await Promise.all(options.modelPods.map((spec, i) => this.addModelPod(spec, 10 + i)));
    for (let i = 0; i < this.chartWorkload().replicas; i++) this.pickers.push(await this.startPicker(i));
    // istiod creates the InferencePool's shadow Service (`<pool>-ip-<hash>`); the endpoint
    // controller then lists the pool's pods in it.
    await waitUntil(
      async () => {
        const list = await this.plane
          .core()
          .listNamespacedService({ namespace: MODELS_NS, labelSelector: `istio.io/inferencepool-name=${POOL}` });
        return list.items.length > 0 ? true : undefined;
      },
      { description: `istiod to create the shadow Service of InferencePool ${POOL}`, timeoutMs: 60_000, intervalMs: 200 },
    );
    await this.slices.reconcile(MODELS_NS);

    this.proxy = await startIstioGatewayProxy({
      plane: this.plane,
      istiod: this.istiod,
      gateway: { name: GATEWAY_NAME, namespace: GATEWAY_NS },
      podIp: this.podIp(1),
      ...(options.envoyArgs === undefined ? {} : { envoyArgs: options.envoyArgs }),
    });
    await this.waitForPoolHosts((hosts) => options.modelPods.every((p) => hosts.has(`${this.pods.get(p.name)!.ip}:${TARGET_PORT}`)));
  }

  /** Starts a model server on its own pod IP and creates its pod (Ready or not). */
  async addModelPod(spec: ModelPodSpec, index: number): Promise<ModelServer> {
    const ip = this.podIp(index);
    const server = await startModelServer({
      id: spec.name,
      host: ip,
      port: TARGET_PORT,
      models: [MODEL],
      ...(spec.behavior === undefined ? {} : { behavior: spec.behavior }),
    });
    const pod: TestPod = { name: spec.name, namespace: MODELS_NS, labels: { ...POOL_LABELS }, ip };
    this.servers.set(spec.name, server);
    this.pods.set(spec.name, pod);
    await this.kubelet.createPod(pod, (o) => (spec.ready === false ? notReadyPod(o) : readyPod(o)));
    return server;
  }

  server(name: string): ModelServer {
    const s = this.servers.get(name);
    if (s === undefined) throw new Error(`no model server ${name}`);
    return s;
  }

  /**
   * A kubelet status sync for a model pod, then (unless `endpointController: false`, a controller
   * that has not caught up) the endpoint controller's update.
   */
  async setModelPodReady(name: string, ready: boolean, { endpointController = true } = {}): Promise<void> {
    const pod = this.pods.get(name)!;
    await this.kubelet.setStatus(pod, (o) => (ready ? readyPod(o) : notReadyPod(o)));
    if (endpointController) await this.slices.reconcile(MODELS_NS);
  }

  /** `kubectl delete pod`: Terminating (deletionTimestamp set) while its containers stop. */
  async terminateModelPod(name: string): Promise<void> {
    const pod = this.pods.get(name)!;
    await this.kubelet.requestDeletion(pod);
    await this.kubelet.setStatus(pod, (o) => terminatingPod(o));
    await this.slices.reconcile(MODELS_NS);
  }

  /** Every running llm-extproc replica's Prometheus text, concatenated (metricValue sums over replicas). */
  async pickerMetrics(): Promise<string> {
    // A replica that is down has no metrics to add.
    const texts = await Promise.all(this.pickers.map((p) => scrapeMetrics(p.opsUrl).catch(() => '')));
    return texts.join('\n');
  }

  /** One request through the gateway's listener. */
  send(request: ClientRequest): Promise<ClientResponse> {
    return send(this.gatewayPort, request);
  }

  /** The ext_proc override istiod put on the route to the InferencePool (Envoy's /config_dump). */
  async routeExtProcOverrides(): Promise<Record<string, unknown> | undefined> {
    const dump = await this.proxy.configDump();
    for (const config of dump.configs) {
      if (!config['@type'].endsWith('RoutesConfigDump')) continue;
      for (const dynamic of (config['dynamic_route_configs'] ?? []) as Array<{ route_config?: RouteConfig }>) {
        for (const host of dynamic.route_config?.virtual_hosts ?? []) {
          for (const route of host.routes ?? []) {
            const perFilter = route.typed_per_filter_config?.['envoy.filters.http.ext_proc'] as
              { overrides?: Record<string, unknown> } | undefined;
            if (perFilter?.overrides !== undefined) return perFilter.overrides;
          }
        }
      }
    }
    return undefined;
  }

  /** The pool cluster's hosts as Envoy has them (`/clusters`): address → health flags. */
  async poolHosts(): Promise<Map<string, string>> {
    const text = await (await fetch(`${this.proxy.envoy.adminUrl}/clusters`)).text();
    const hosts = new Map<string, string>();
    for (const line of text.split('\n')) {
      // outbound|54321||llama-ip-xxxx.models.svc.cluster.local::127.1.2.10:8000::health_flags::healthy
      const match = line.match(/^outbound\|\d+\|\|[^:]*-ip-[0-9a-f]+\.models\.svc\.cluster\.local::([\d.]+:\d+)::health_flags::(.*)$/);
      if (match !== null) hosts.set(match[1], match[2]);
    }
    return hosts;
  }

  /** Waits until Envoy's pool cluster satisfies `predicate` (EDS from istiod is asynchronous). */
  async waitForPoolHosts(
    predicate: (hosts: Map<string, string>) => boolean,
    description = 'the pool cluster',
  ): Promise<Map<string, string>> {
    return waitUntil(
      async () => {
        const hosts = await this.poolHosts();
        return predicate(hosts) ? hosts : undefined;
      },
      { description: `${description} in the gateway's Envoy`, timeoutMs: 60_000, intervalMs: 100 },
    );
  }

  /** The rendered Deployment and ConfigMap of our chart. */
  private chartWorkload(): {
    template: { metadata: V1Pod['metadata']; spec: V1Pod['spec'] };
    name: string;
    replicas: number;
    configYaml: string;
  } {
    const deployment = this.rendered.find((o) => o.kind === 'Deployment') as K8sObject & {
      spec: { replicas?: number; template: { metadata: V1Pod['metadata']; spec: V1Pod['spec'] } };
    };
    const configMap = this.rendered.find((o) => o.kind === 'ConfigMap') as K8sObject & { data: Record<string, string> };
    return {
      template: deployment.spec.template,
      name: deployment.metadata.name,
      replicas: deployment.spec.replicas ?? 1,
      configYaml: configMap.data['config.yaml'] ?? '',
    };
  }

  /**
   * An llm-extproc pod (replica `index` of the chart's Deployment): created from the Deployment's
   * template, then its container started (runPicker).
   */
  private async startPicker(index: number): Promise<PickerPod> {
    const { template, name } = this.chartWorkload();
    const podName = `${name}-${index}`;
    await this.plane.core().createNamespacedPod({
      namespace: MODELS_NS,
      body: { metadata: { ...template.metadata, name: podName, namespace: MODELS_NS }, spec: { ...template.spec!, nodeName: NODE_NAME } },
    });
    const pod: TestPod = {
      name: podName,
      namespace: MODELS_NS,
      labels: { ...(template.metadata?.labels ?? {}) },
      ip: this.podIp(2 + index),
    };
    await this.kubelet.setStatus(pod, (o) => pickerStatus(o, false));
    return this.runPicker(pod);
  }

  /**
   * Runs the container of an llm-extproc pod as `dist/src/main.js` with the ConfigMap's config, and
   * reports the pod Ready once its readiness probe (/readyz) passes. What a kubelet would do for the
   * container is done here: Secret and ConfigMap "mounted" into a directory, the in-cluster
   * credentials as a kubeconfig, the pod's own address for 0.0.0.0.
   */
  private async runPicker(pod: TestPod): Promise<PickerPod> {
    const { template, configYaml } = this.chartWorkload();
    const container = template.spec!.containers[0];
    const mounts = join(this.dir, pod.name);
    await mkdir(join(mounts, 'tls'), { recursive: true });
    const secret = await this.plane.core().readNamespacedSecret({ namespace: MODELS_NS, name: 'llm-extproc-tls' });
    for (const [key, value] of Object.entries(secret.data ?? {})) await writeFile(join(mounts, 'tls', key), Buffer.from(value, 'base64'));
    const config = parseYaml(configYaml) as {
      kubernetes?: Record<string, unknown>;
      listen?: { grpc?: string; http?: string; tls?: { certFile?: string; keyFile?: string } };
    };
    const remount = (path: string): string => path.replace(/^\/etc\/llm-extproc\/tls\//, `${join(mounts, 'tls')}/`);
    if (config.listen?.tls?.certFile !== undefined) config.listen.tls.certFile = remount(config.listen.tls.certFile);
    if (config.listen?.tls?.keyFile !== undefined) config.listen.tls.keyFile = remount(config.listen.tls.keyFile);
    const token = await this.plane.serviceAccountToken(MODELS_NS, template.spec!.serviceAccountName ?? 'default');
    config.kubernetes = { ...config.kubernetes, kubeconfigPath: await this.plane.writeKubeconfig(`${pod.name}.kubeconfig`, token) };
    const grpcPort = Number((config.listen?.grpc ?? ':9002').split(':').at(-1));
    const httpPort = Number((config.listen?.http ?? ':9090').split(':').at(-1));
    const configPath = join(mounts, 'config.yaml');
    await writeFile(configPath, toYaml(config));
    const env = Object.fromEntries((container.env ?? []).filter((e) => e.value !== undefined).map((e) => [e.name, e.value!]));
    const processHandle = await startExtprocProcess({
      configPath,
      env: { ...env, LLM_EXTPROC_GRPC_ADDRESS: `${pod.ip}:${grpcPort}`, LLM_EXTPROC_HTTP_ADDRESS: `${pod.ip}:${httpPort}` },
      startTimeoutMs: 60_000,
    });
    const opsUrl = `http://${pod.ip}:${httpPort}`;
    await waitUntil(async () => ((await fetch(`${opsUrl}/readyz`)).status === 200 ? true : undefined), {
      description: `${pod.name} /readyz`,
      timeoutMs: 60_000,
      intervalMs: 100,
    });
    await this.kubelet.setStatus(pod, (o) => pickerStatus(o, true));
    await this.slices.reconcile(MODELS_NS);
    return { pod, process: processHandle, grpcAddress: `${pod.ip}:${grpcPort}`, opsUrl };
  }

  /** Starts replica `index`'s container again (a container restart: same pod, same address). */
  async restartPicker(index: number): Promise<PickerPod> {
    const old = this.pickers[index];
    if (old === undefined) throw new Error(`no picker ${index}`);
    await old.process.kill();
    const picker = await this.runPicker(old.pod);
    this.pickers[index] = picker;
    return picker;
  }

  /** The kubelet's status for an llm-extproc pod whose readiness probe passes or fails; then the endpoint controller. */
  async setPickerReady(index: number, ready: boolean): Promise<void> {
    await this.kubelet.setStatus(this.pickers[index].pod, (o) => pickerStatus(o, ready));
    await this.slices.reconcile(MODELS_NS);
  }

  /** `helm upgrade` with these values over the example: the re-rendered manifests applied as they are. */
  async upgrade(values: object): Promise<void> {
    this.rendered = await renderChart(values, this.dir);
    await this.plane.apply(this.rendered.map((o) => toYaml(o)).join('---\n'));
  }

  async stop(): Promise<void> {
    await this.proxy?.stop().catch(() => undefined);
    await Promise.all(this.pickers.map((p) => p.process.kill().catch(() => undefined)));
    await Promise.all([...this.servers.values()].map((s) => s.close().catch(() => undefined)));
    await this.istiod.stop();
    await this.plane.stop();
    await rm(this.dir, { recursive: true, force: true });
    releasePodAddresses(this.addresses);
  }
}

/**
 * `helm template` of our chart with the Istio example (it names the guide's Gateway), and the
 * test's values on top.
 */
export async function renderChart(values: object, dir: string): Promise<K8sObject[]> {
  const valuesFile = join(dir, 'values.yaml');
  await writeFile(valuesFile, toYaml(values));
  const res = await helm(['template', RELEASE, CHART, '--namespace', MODELS_NS, '-f', ISTIO_EXAMPLE, '-f', valuesFile], join(dir, 'helm'));
  if (res.code !== 0) throw new Error(`helm template failed: ${res.stderr}`);
  return parseManifests(res.stdout);
}

/** The guide's Gateway (class istio, the listener on `port`) and HTTPRoute, `routeRule` merged into the route's rule. */
export function gatewayManifests(port: number, routeRule: object): string {
  return withListenerPort(GUIDE_GATEWAY, port)
    .map((o) => {
      if (o.kind !== 'HTTPRoute') return o;
      const spec = o['spec'] as { rules: object[] };
      return { ...o, spec: { ...spec, rules: spec.rules.map((rule) => ({ ...rule, ...routeRule })) } };
    })
    .map((o) => toYaml(o))
    .join('---\n');
}

function pickerStatus(o: PodOptions, ready: boolean): PodJson {
  return ready ? readyPod({ ...o, container: 'llm-extproc' }) : notReadyPod({ ...o, container: 'llm-extproc' });
}

interface RouteConfig {
  readonly virtual_hosts?: ReadonlyArray<{
    readonly routes?: ReadonlyArray<{ readonly typed_per_filter_config?: Record<string, unknown> }>;
  }>;
}
