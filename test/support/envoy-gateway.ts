// The real Envoy Gateway controller (envoy-gateway v1.9.1, scripts/install-envoy-gateway.mjs) on the
// suite's real kube-apiserver, and a real Envoy 1.40 playing the proxy pod it creates.
//
// What runs as it would in a cluster: the Gateway API and Envoy Gateway CRDs (from the module's
// own chart), `envoy-gateway certgen` writing its Secrets, `envoy-gateway server` with provider
// Kubernetes watching every resource, translating, creating the Envoy Deployment/Service/ConfigMap
// and serving xDS over mutual TLS. What a test bed must stand in for: there is no kubelet, so the
// Envoy Deployment never runs; we start Envoy ourselves with the exact bootstrap the controller put
// in that Deployment's `--config-yaml` argument, changing only what a pod network provides: the
// xDS server's DNS name → 127.0.0.1, the mounted certificate files → files of the same Secrets,
// and the fixed admin/stats ports → free ones. Everything else (listeners, routes, clusters,
// endpoints, filters) reaches Envoy over xDS from the controller.
//
// Envoy Gateway v1.9 has fixed ports (xDS :18000, health :8081, Wasm :18002) and reads its serving
// pair only from /certs (internal/xds/runner/runner.go), so one controller runs per machine at a
// time (machine-lock.ts) and /certs must be writable (it is as root, as in CI).

import { accessSync, constants, mkdirSync } from 'node:fs';
import { mkdir, mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import { request as httpsRequest } from 'node:https';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { ApiextensionsV1Api, AppsV1Api, CoreV1Api } from '@kubernetes/client-node';
import type { V1Deployment } from '@kubernetes/client-node';
import { parse as parseYaml, parseAllDocuments, stringify as toYaml } from 'yaml';
import type { ConfigDump } from './envoy-config-dump.js';
import { startEnvoy, type RunningEnvoy } from './envoy-process.js';
import { send, type ClientRequest, type ClientResponse } from './http-client.js';
import { installerOutput } from './installer-output.js';
import type { KubeControlPlane } from './kube-control-plane.js';
import { acquireMachineLock, type MachineLock } from './machine-lock.js';
import { podNetworkUnavailable } from './pod-network.js';
import { TiedProcess } from './tied-process.js';
import { waitUntil } from './wait-until.js';

export const EG_NAMESPACE = 'envoy-gateway-system';
export const EG_CONTROLLER_NAME = 'gateway.envoyproxy.io/gatewayclass-controller';
/** Where envoy-gateway v1.9 reads its xDS serving pair (hard-coded; no flag or config field). */
const CERTS_DIR = '/certs';
const HEALTH_URL = 'http://127.0.0.1:8081/readyz';
const START_TIMEOUT_MS = 180_000;

/**
 * Why this machine cannot run the live bed (false when it can): pod addresses need CAP_NET_ADMIN
 * (pod-network.ts) and the controller's serving pair goes to /certs.
 */
export function liveEnvoyGatewayUnavailable(): string | false {
  const network = podNetworkUnavailable();
  if (network !== undefined) return `live Envoy Gateway bed: ${network}`;
  try {
    mkdirSync(CERTS_DIR, { recursive: true });
    accessSync(CERTS_DIR, constants.W_OK);
  } catch {
    return `live Envoy Gateway bed needs a writable ${CERTS_DIR} (envoy-gateway v1.9 reads its xDS serving pair only there)`;
  }
  return false;
}

interface EnvoyGatewayTools {
  readonly envoyGateway: string;
  readonly crds: string;
}

let tools: Promise<EnvoyGatewayTools> | undefined;

/** Builds the controller and renders the CRDs on first use (minutes), then answers from the cache. */
export function envoyGatewayTools(): Promise<EnvoyGatewayTools> {
  tools ??= installerOutput('install-envoy-gateway.mjs').then((line) => JSON.parse(line) as EnvoyGatewayTools);
  return tools;
}

export interface EnvoyGatewayOptions {
  /** Extra fields merged into the EnvoyGateway config (e.g. `extensionApis: { enableBackend: true }`). */
  readonly config?: Record<string, unknown>;
}

/** A running envoy-gateway controller; `proxy()` starts the Envoy of one Gateway. */
export class EnvoyGatewayController {
  private stopped = false;

  private constructor(
    readonly plane: KubeControlPlane,
    readonly dir: string,
    private readonly process: TiedProcess,
    private readonly lock: MachineLock,
  ) {}

  static async start(plane: KubeControlPlane, options: EnvoyGatewayOptions = {}): Promise<EnvoyGatewayController> {
    const { envoyGateway, crds } = await envoyGatewayTools();
    await installCrds(plane, await readFile(crds, 'utf8'));
    const lock = await acquireMachineLock('envoy-gateway', 30 * 60_000);
    const dir = await mkdtemp(join(tmpdir(), 'llm-extproc-eg-'));
    let process: TiedProcess | undefined;
    try {
      await plane.createNamespace(EG_NAMESPACE);
      const kubeconfig = await plane.writeKubeconfig('envoy-gateway-kubeconfig.yaml');
      const env = { ...globalThis.process.env, KUBECONFIG: kubeconfig, ENVOY_GATEWAY_NAMESPACE: EG_NAMESPACE };
      // certgen, as the chart's Job runs it: a CA and the envoy-gateway / envoy serving pairs as Secrets.
      const certgen = new TiedProcess('envoy-gateway-certgen', envoyGateway, ['certgen', '--disable-topology-injector'], {
        logFile: join(dir, 'certgen.log'),
        env,
      });
      const code = await certgen.whenExited();
      if (code !== 0) throw new Error(`envoy-gateway certgen exited ${code}:\n${await readFile(join(dir, 'certgen.log'), 'utf8')}`);
      await writeSecretFiles(plane, 'envoy-gateway', CERTS_DIR);

      const configPath = join(dir, 'envoy-gateway.yaml');
      await writeFile(configPath, toYaml(deepMerge(controllerConfig(dir), options.config ?? {})));
      process = new TiedProcess('envoy-gateway', envoyGateway, ['server', '--config-path', configPath], {
        logFile: join(dir, 'envoy-gateway.log'),
        env,
      });
      const running = process;
      await waitUntil(async () => ((await fetch(HEALTH_URL)).ok ? true : undefined), {
        description: `envoy-gateway ready (log: ${join(dir, 'envoy-gateway.log')})`,
        timeoutMs: START_TIMEOUT_MS,
        intervalMs: 200,
        signal: exitSignal(running),
      });
      return new EnvoyGatewayController(plane, dir, running, lock);
    } catch (err) {
      process?.killGroup('SIGKILL');
      await lock.release();
      throw err;
    }
  }

  /** Last lines of the controller's log, for failure messages. */
  async logTail(lines = 60): Promise<string> {
    const text = await readFile(join(this.dir, 'envoy-gateway.log'), 'utf8').catch(() => '');
    return text.split('\n').slice(-lines).join('\n');
  }

  /**
   * Waits for the Envoy Deployment the controller creates for this Gateway and runs a real Envoy
   * with its bootstrap (see the header comment for what is rewritten).
   */
  async proxy(gatewayNamespace: string, gatewayName: string): Promise<GatewayProxy> {
    const apps = this.plane.kubeConfig().makeApiClient(AppsV1Api);
    const selector = `gateway.envoyproxy.io/owning-gateway-namespace=${gatewayNamespace},gateway.envoyproxy.io/owning-gateway-name=${gatewayName}`;
    const deployment = await waitUntil(
      // In the controller's namespace by default, in the Gateway's with deploy.type GatewayNamespace.
      async () => (await apps.listDeploymentForAllNamespaces({ labelSelector: selector })).items[0],
      { description: `the Envoy Deployment for Gateway ${gatewayNamespace}/${gatewayName}`, timeoutMs: START_TIMEOUT_MS, intervalMs: 200 },
    );
    const dir = await mkdtemp(join(this.dir, 'proxy-'));
    const { bootstrap, args } = await proxyBootstrap(this.plane, deployment, dir);
    const envoy = await startEnvoy({
      name: `eg-${gatewayName}`,
      configYaml: toYaml(bootstrap, { lineWidth: 0 }),
      extraArgs: args,
      logLevel: (globalThis.process.env.ENVOY_TEST_LOG_LEVEL as 'info' | undefined) ?? 'warning',
      startTimeoutMs: 60_000,
    });
    return new GatewayProxy(envoy, dir);
  }

  async stop(): Promise<void> {
    if (this.stopped) return;
    this.stopped = true;
    await this.process.stop();
    await rm(this.dir, { recursive: true, force: true });
    await this.lock.release();
  }
}

/** Envoy Gateway's config: its Helm chart's defaults, plus what running out of the cluster needs. */
function controllerConfig(dir: string): Record<string, unknown> {
  return {
    apiVersion: 'gateway.envoyproxy.io/v1alpha1',
    kind: 'EnvoyGateway',
    gateway: { controllerName: EG_CONTROLLER_NAME },
    provider: { type: 'Kubernetes', kubernetes: { leaderElection: { disable: true } } },
    logging: { level: { default: 'info' } },
    // Out of the cluster these would share the host's ports with the Envoy we start.
    admin: { address: { host: '127.0.0.1', port: 0 } },
    telemetry: { metrics: { prometheus: { disable: true } } },
    // Access logs go to /dev/stdout by default, which Envoy cannot open when its stdout is a
    // socket (Node's child-process pipes are socketpairs; a container's stdout is a pipe or file):
    // the listener would be rejected. Same log, to a file (handy when a test fails).
    envoyProxy: { telemetry: { accessLog: { settings: [{ sinks: [{ type: 'File', file: { path: join(dir, 'access.log') } }] }] } } },
  };
}

async function installCrds(plane: KubeControlPlane, manifests: string): Promise<void> {
  const crds = parseAllDocuments(manifests)
    .map((d) => d.toJS() as { kind?: string; metadata?: { name?: string } } | null)
    .filter((o): o is { kind: string; metadata: { name: string } } => o?.kind === 'CustomResourceDefinition');
  for (const crd of crds) {
    // Raw server-side apply: client-node's typed serializer drops `x-kubernetes-int-or-string`
    // from the schemas (resource.Quantity fields), which the API server then rejects.
    await serverSideApplyRaw(plane, `/apis/apiextensions.k8s.io/v1/customresourcedefinitions/${crd.metadata.name}`, crd);
  }
  const ext = plane.kubeConfig().makeApiClient(ApiextensionsV1Api);
  for (const crd of crds) {
    const name = crd.metadata.name;
    await waitUntil(
      async () => {
        const got = await ext.readCustomResourceDefinition({ name });
        return got.status?.conditions?.some((c) => c.type === 'Established' && c.status === 'True') ? true : undefined;
      },
      { description: `CRD ${name} established`, timeoutMs: 60_000, intervalMs: 100 },
    );
  }
}

/** `kubectl apply --server-side --force-conflicts` of one object, as JSON, without client-node's model. */
function serverSideApplyRaw(plane: KubeControlPlane, path: string, object: unknown): Promise<void> {
  const body = JSON.stringify(object);
  return new Promise((resolve, reject) => {
    const req = httpsRequest(
      `${plane.server}${path}?fieldManager=llm-extproc-tests&force=true`,
      {
        method: 'PATCH',
        ca: plane.ca,
        headers: {
          authorization: `Bearer ${plane.adminToken}`,
          'content-type': 'application/apply-patch+yaml',
          'content-length': Buffer.byteLength(body),
        },
      },
      (res) => {
        let text = '';
        res.setEncoding('utf8');
        res.on('data', (chunk: string) => (text += chunk));
        res.on('end', () =>
          (res.statusCode ?? 0) < 300 ? resolve() : reject(new Error(`apply ${path}: HTTP ${res.statusCode} ${text.slice(0, 2000)}`)),
        );
      },
    );
    req.on('error', reject);
    req.end(body);
  });
}

/** Writes a certgen Secret's keys (ca.crt, tls.crt, tls.key) as files, as a Secret volume would. */
async function writeSecretFiles(plane: KubeControlPlane, name: string, dir: string): Promise<void> {
  const secret = await plane.core().readNamespacedSecret({ namespace: EG_NAMESPACE, name });
  await mkdir(dir, { recursive: true });
  for (const [key, value] of Object.entries(secret.data ?? {})) {
    await writeFile(join(dir, key), Buffer.from(value, 'base64'), { mode: 0o600 });
  }
}

/** The Envoy container's bootstrap and flags, with the pod-network parts rewritten for loopback. */
async function proxyBootstrap(
  plane: KubeControlPlane,
  deployment: V1Deployment,
  dir: string,
): Promise<{ bootstrap: Record<string, unknown>; args: string[] }> {
  const container = deployment.spec?.template.spec?.containers.find((c) => c.name === 'envoy');
  const args = container?.args ?? [];
  const configIndex = args.indexOf('--config-yaml');
  if (configIndex < 0) throw new Error(`no --config-yaml in the Envoy Deployment's args: ${JSON.stringify(args)}`);
  const mounts = await mountVolumes(plane, deployment, 'envoy', dir);
  const bootstrap = rewriteBootstrap(parseYaml(args[configIndex + 1] ?? '') as Record<string, unknown>, mounts);

  // The other flags as the controller wrote them; $(ENVOY_POD_NAME) is the kubelet's env expansion.
  const flags: string[] = [];
  for (let i = 0; i < args.length; i++) {
    const arg = args[i] ?? '';
    if (arg === '--config-yaml' || arg === '--log-level') {
      i++;
      continue;
    }
    if (arg === '--cpuset-threads') continue;
    flags.push(arg.replace('$(ENVOY_POD_NAME)', `${deployment.metadata?.name ?? 'envoy'}-0`));
  }
  return { bootstrap, args: flags };
}

/** A container's mount path → the directory standing in for it on this machine. */
type Mounts = ReadonlyMap<string, string>;

/** Replaces every mount path (`"/sds/…`, `"/certs/…`) in a JSON or YAML text with its directory. */
function remap(text: string, mounts: Mounts): string {
  let out = text;
  for (const [mountPath, local] of mounts) out = out.replaceAll(`${mountPath}/`, `${local}/`);
  return out;
}

/**
 * What the kubelet would mount into the container, written to directories: Secret and ConfigMap
 * volumes (their keys, or the listed items), and projected ServiceAccount tokens (issued through
 * the TokenRequest API with the volume's audience). File contents that name other mount paths (the
 * SDS files name the certificate files) are remapped too.
 */
async function mountVolumes(plane: KubeControlPlane, deployment: V1Deployment, containerName: string, dir: string): Promise<Mounts> {
  const spec = deployment.spec?.template.spec;
  const namespace = deployment.metadata?.namespace ?? EG_NAMESPACE;
  const container = spec?.containers.find((c) => c.name === containerName);
  const mounts = new Map<string, string>();
  const files: Array<{ path: string; content: string | Buffer }> = [];
  const core = plane.kubeConfig().makeApiClient(CoreV1Api);
  for (const mount of container?.volumeMounts ?? []) {
    const volume = spec?.volumes?.find((v) => v.name === mount.name);
    const local = join(dir, 'volumes', mount.name);
    mounts.set(mount.mountPath.replace(/\/$/, ''), local);
    if (volume?.secret?.secretName !== undefined) {
      const secret = await core.readNamespacedSecret({ namespace, name: volume.secret.secretName });
      for (const [key, value] of Object.entries(secret.data ?? {}))
        files.push({ path: join(local, key), content: Buffer.from(value, 'base64') });
    } else if (volume?.configMap?.name !== undefined) {
      const configMap = await core.readNamespacedConfigMap({ namespace, name: volume.configMap.name });
      const items = volume.configMap.items ?? Object.keys(configMap.data ?? {}).map((key) => ({ key, path: key }));
      for (const item of items) files.push({ path: join(local, item.path), content: configMap.data?.[item.key] ?? '' });
    } else if (volume?.projected !== undefined) {
      for (const source of volume.projected.sources ?? []) {
        const projection = source.serviceAccountToken;
        if (projection === undefined) continue;
        const response = await core.createNamespacedServiceAccountToken({
          namespace,
          name: spec?.serviceAccountName ?? 'default',
          body: {
            spec: {
              audiences: projection.audience === undefined ? [] : [projection.audience],
              expirationSeconds: projection.expirationSeconds ?? 3600,
            },
          },
        });
        files.push({ path: join(local, projection.path), content: response.status?.token ?? '' });
      }
    }
  }
  for (const file of files) {
    await mkdir(join(file.path, '..'), { recursive: true });
    await writeFile(file.path, typeof file.content === 'string' ? remap(file.content, mounts) : file.content, { mode: 0o600 });
  }
  return mounts;
}

/**
 * What differs between a pod and this machine: the xDS server is on loopback, mounted files are
 * ours, and the admin and stats listeners bind free loopback ports.
 */
export function rewriteBootstrap(bootstrap: Record<string, unknown>, mounts: Mounts): Record<string, unknown> {
  const text = remap(
    JSON.stringify(bootstrap)
      // The controller writes the Service's FQDN with a trailing dot (svc.cluster.local.).
      .replace(new RegExp(`"envoy-gateway\\.${EG_NAMESPACE}\\.svc\\.[a-z.]+?\\.?"`, 'g'), '"127.0.0.1"'),
    mounts,
  );
  const copy = JSON.parse(text) as {
    admin?: { address?: { socket_address?: { address?: string; port_value?: number } } };
    static_resources?: { listeners?: Array<{ address?: { socket_address?: { address?: string; port_value?: number } } }> };
  };
  if (copy.admin?.address?.socket_address !== undefined) {
    copy.admin.address.socket_address.address = '127.0.0.1';
    copy.admin.address.socket_address.port_value = 0;
  }
  for (const listener of copy.static_resources?.listeners ?? []) {
    if (listener.address?.socket_address !== undefined) {
      listener.address.socket_address.address = '127.0.0.1';
      listener.address.socket_address.port_value = 0;
    }
  }
  return copy;
}

/** The Envoy of one Gateway, programmed by the controller over xDS. */
export class GatewayProxy {
  constructor(
    readonly envoy: RunningEnvoy,
    private readonly dir: string,
  ) {}

  /** Envoy's `/config_dump?include_eds` as JSON. */
  async configDump(): Promise<ConfigDump> {
    const response = await fetch(`${this.envoy.adminUrl}/config_dump?include_eds`);
    return (await response.json()) as ConfigDump;
  }

  /** Every host of every cluster with its health flags, from `/clusters?format=json`. */
  async clusterHosts(): Promise<Map<string, ClusterHost[]>> {
    const response = await fetch(`${this.envoy.adminUrl}/clusters?format=json`);
    const json = (await response.json()) as {
      cluster_statuses?: Array<{
        name: string;
        host_statuses?: Array<{
          address?: { socket_address?: { address: string; port_value: number }; pipe?: { path: string } };
          health_status?: { eds_health_status?: string; failed_active_health_check?: boolean };
        }>;
      }>;
    };
    const out = new Map<string, ClusterHost[]>();
    for (const cluster of json.cluster_statuses ?? []) {
      out.set(
        cluster.name,
        (cluster.host_statuses ?? []).map((h) => ({
          address:
            h.address?.pipe !== undefined
              ? `unix://${h.address.pipe.path}`
              : `${h.address?.socket_address?.address}:${h.address?.socket_address?.port_value}`,
          edsHealth: h.health_status?.eds_health_status ?? 'UNKNOWN',
        })),
      );
    }
    return out;
  }

  /** The port the Gateway listener bound (Envoy reports it once the controller sent the listener). */
  async listenerPort(): Promise<number | undefined> {
    const response = await fetch(`${this.envoy.adminUrl}/listeners?format=json`);
    const json = (await response.json()) as {
      listener_statuses?: Array<{ name: string; local_address?: { socket_address?: { port_value?: number } } }>;
    };
    const gateway = json.listener_statuses?.find((l) => !l.name.startsWith('envoy-gateway-proxy'));
    return gateway?.local_address?.socket_address?.port_value;
  }

  async send(port: number, req: ClientRequest): Promise<ClientResponse> {
    return send(port, req);
  }

  async stop(): Promise<void> {
    await this.envoy.stop();
    await rm(this.dir, { recursive: true, force: true });
  }
}

export interface ClusterHost {
  readonly address: string;
  /** HEALTHY, DRAINING, UNHEALTHY... as EDS reported it. */
  readonly edsHealth: string;
}

/** An AbortSignal that fires when the process exits, so waits fail fast with a useful message. */
function exitSignal(process: TiedProcess): AbortSignal {
  const controller = new AbortController();
  void process.whenExited().then((code) => controller.abort(new Error(`${process.name} exited with code ${code}`)));
  return controller.signal;
}

function isObject(value: unknown): value is Record<string, unknown> {
  return typeof value === 'object' && value !== null && !Array.isArray(value);
}

/** Helm's merge of values files: maps merge key by key, anything else is replaced. */
export function deepMerge(base: Record<string, unknown>, over: Record<string, unknown>): Record<string, unknown> {
  const out: Record<string, unknown> = { ...base };
  for (const [key, value] of Object.entries(over)) {
    const current = out[key];
    out[key] = isObject(current) && isObject(value) ? deepMerge(current, value) : value;
  }
  return out;
}
