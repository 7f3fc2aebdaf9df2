// A real Kubernetes control plane for tests: etcd and kube-apiserver (the binaries from
// scripts/install-kube.mjs) on loopback ports, with what a production API server has and our fake
// lacks: TLS (a serving certificate generated into a temporary directory and verified by the
// client), token authentication, RBAC authorization, admission and validation, the watch cache
// with its bookmarks, pagination and 410s. No controller-manager, scheduler or kubelet: tests play
// those parts (see kube-kubelet.ts).
//
// One instance per test file (before/after): starting takes several seconds on a loaded machine.
// Processes are tied to the test process (tied-process.ts), so they stop however the test ends.

import { generateKeyPairSync, randomBytes } from 'node:crypto';
import { mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import { mkdirSync } from 'node:fs';
import { request as httpsRequest } from 'node:https';
import { request as httpRequest } from 'node:http';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { ApiextensionsV1Api, CoreV1Api, CustomObjectsApi, KubeConfig, KubernetesObjectApi } from '@kubernetes/client-node';
import type { KubernetesObject } from '@kubernetes/client-node';
import { parseAllDocuments } from 'yaml';
import { repoRoot } from '../../scripts/repo-root.js';
import { freePorts } from './free-ports.js';
import { kubeTools } from './kube-tools.js';
import type { KubeTools } from './kube-tools.js';
import { TiedProcess } from './tied-process.js';
import { waitUntil } from './wait-until.js';

/** Startup on a loaded 2-core machine can take a while; a healthy start is ~5 s. */
const START_TIMEOUT_MS = 120_000;
const ADMIN_USER = 'test-admin';

export interface ControlPlaneOptions {
  /** Extra kube-apiserver flags (e.g. a shorter --min-request-timeout). */
  readonly apiserverArgs?: readonly string[];
}

/** How apply() sends objects. */
export interface ApplyOptions {
  /** fieldValidation=Strict: a field the API does not know, or one given twice, fails the apply instead of being dropped. */
  readonly strict?: boolean;
  /** dryRun=All: validated and admitted as if stored, nothing stored. */
  readonly dryRun?: boolean;
}

export class KubeControlPlane {
  private apiserver: TiedProcess | undefined;
  private stopped = false;

  private constructor(
    readonly dir: string,
    private readonly tools: KubeTools,
    private readonly etcd: TiedProcess,
    private readonly etcdUrl: string,
    /** `https://127.0.0.1:<port>` */
    readonly server: string,
    readonly adminToken: string,
    private readonly apiserverArgs: readonly string[],
    private caPem: string,
  ) {}

  /** Builds or finds the binaries, starts etcd then kube-apiserver, and waits for /readyz. */
  static async start(options: ControlPlaneOptions = {}): Promise<KubeControlPlane> {
    const tools = await kubeTools();
    const dir = await mkdtemp(join(tmpdir(), 'llm-extproc-kube-'));
    let etcd: TiedProcess | undefined;
    let plane: KubeControlPlane | undefined;
    try {
      const [clientPort, peerPort, apiPort] = await freePorts(3);
      const etcdUrl = `http://127.0.0.1:${clientPort}`;
      const peerUrl = `http://127.0.0.1:${peerPort}`;
      etcd = new TiedProcess(
        'etcd',
        tools.etcd,
        [
          '--name=test',
          `--data-dir=${join(dir, 'etcd')}`,
          `--listen-client-urls=${etcdUrl}`,
          `--advertise-client-urls=${etcdUrl}`,
          `--listen-peer-urls=${peerUrl}`,
          `--initial-advertise-peer-urls=${peerUrl}`,
          `--initial-cluster=test=${peerUrl}`,
          // Test data need not survive a power cut; fsync on a busy shared disk costs seconds.
          '--unsafe-no-fsync',
          '--log-level=warn',
        ],
        { logFile: join(dir, 'etcd.log') },
      );
      const runningEtcd = etcd;
      await waitUntil(async () => ((await httpGet(`${etcdUrl}/health`)).includes('"health":"true"') ? true : undefined), {
        description: `etcd healthy (log: ${join(dir, 'etcd.log')})`,
        timeoutMs: START_TIMEOUT_MS,
        intervalMs: 100,
        signal: exitSignal(runningEtcd),
      });

      const adminToken = randomBytes(24).toString('hex');
      await writeFile(join(dir, 'tokens.csv'), `${adminToken},${ADMIN_USER},${ADMIN_USER},"system:masters"\n`, { mode: 0o600 });
      const keys = generateKeyPairSync('rsa', { modulusLength: 2048 });
      await writeFile(join(dir, 'sa.key'), keys.privateKey.export({ type: 'pkcs8', format: 'pem' }), { mode: 0o600 });
      await writeFile(join(dir, 'sa.pub'), keys.publicKey.export({ type: 'spki', format: 'pem' }));
      mkdirSync(join(dir, 'certs'));
      const args = [
        `--etcd-servers=${etcdUrl}`,
        '--bind-address=127.0.0.1',
        '--advertise-address=127.0.0.1',
        `--secure-port=${apiPort}`,
        // No --tls-cert-file: the server generates a CA and a serving certificate for 127.0.0.1
        // here; clients verify against that CA (no insecure-skip-tls-verify anywhere).
        `--cert-dir=${join(dir, 'certs')}`,
        `--token-auth-file=${join(dir, 'tokens.csv')}`,
        '--authorization-mode=RBAC',
        '--service-account-issuer=https://kubernetes.default.svc.cluster.local',
        `--service-account-key-file=${join(dir, 'sa.pub')}`,
        `--service-account-signing-key-file=${join(dir, 'sa.key')}`,
        '--service-cluster-ip-range=10.96.0.0/16',
        // Nothing here reconciles the `kubernetes` Service's endpoints to a loopback address.
        '--endpoint-reconciler-type=none',
        '--profiling=false',
        '--v=1',
        ...(options.apiserverArgs ?? []),
      ];
      plane = new KubeControlPlane(dir, tools, runningEtcd, etcdUrl, `https://127.0.0.1:${apiPort}`, adminToken, args, '');
      await plane.startApiserver();
      return plane;
    } catch (err) {
      if (plane !== undefined) {
        process.stderr.write(`kube-apiserver did not start; last log lines:\n${await plane.logTail('kube-apiserver')}\n`);
        await plane.stop();
      } else {
        await etcd?.stop();
      }
      await rm(dir, { recursive: true, force: true });
      throw err;
    }
  }

  /** The serving certificate's CA bundle (PEM), as a kubeconfig's certificate-authority-data. */
  get ca(): string {
    return this.caPem;
  }

  get apiserverRunning(): boolean {
    return this.apiserver?.running ?? false;
  }

  /** Starts kube-apiserver (again) on the same port and etcd, and waits until it is ready. */
  async startApiserver(): Promise<void> {
    if (this.apiserverRunning) throw new Error('kube-apiserver is already running');
    const logFile = join(this.dir, 'kube-apiserver.log');
    const apiserver = new TiedProcess('kube-apiserver', this.tools.kubeApiserver, this.apiserverArgs, { logFile });
    this.apiserver = apiserver;
    const certFile = join(this.dir, 'certs', 'apiserver.crt');
    // The certificate appears before the server listens; read it once it exists.
    this.caPem = await waitUntil(
      async () => {
        const pem = await readFile(certFile, 'utf8');
        return pem.includes('END CERTIFICATE') ? pem : undefined;
      },
      {
        description: `kube-apiserver serving certificate (log: ${logFile})`,
        timeoutMs: START_TIMEOUT_MS,
        intervalMs: 100,
        signal: exitSignal(apiserver),
      },
    );
    await waitUntil(async () => ((await this.get('/readyz')).body === 'ok' ? true : undefined), {
      description: `kube-apiserver /readyz (log: ${logFile})`,
      timeoutMs: START_TIMEOUT_MS,
      intervalMs: 200,
      signal: exitSignal(apiserver),
    });
  }

  /** Stops kube-apiserver only; etcd and its data stay. */
  async stopApiserver(): Promise<void> {
    await this.apiserver?.stop();
  }

  /** An admin (system:masters) client configuration, or one authenticating with `token`. */
  kubeConfig(token: string = this.adminToken): KubeConfig {
    const kc = new KubeConfig();
    kc.loadFromString(this.kubeconfigYaml(token));
    return kc;
  }

  /** Writes a kubeconfig for `token` into the plane's directory and returns its path. */
  async writeKubeconfig(fileName: string, token: string = this.adminToken): Promise<string> {
    const path = join(this.dir, fileName);
    await writeFile(path, this.kubeconfigYaml(token), { mode: 0o600 });
    return path;
  }

  core(): CoreV1Api {
    return this.kubeConfig().makeApiClient(CoreV1Api);
  }

  /** A namespace, with the `default` ServiceAccount the controller-manager would create (pods need it). */
  async createNamespace(name: string): Promise<void> {
    const core = this.core();
    await core.createNamespace({ body: { metadata: { name } } });
    await core.createNamespacedServiceAccount({ namespace: name, body: { metadata: { name: 'default' } } });
  }

  /** A token for a ServiceAccount through the TokenRequest API, as the kubelet mounts it into a pod. */
  async serviceAccountToken(namespace: string, name: string, audiences: readonly string[] = []): Promise<string> {
    const response = await this.core().createNamespacedServiceAccountToken({
      namespace,
      name,
      body: { spec: { audiences: [...audiences], expirationSeconds: 3600 } },
    });
    const token = response.status?.token;
    if (token === undefined || token === '') throw new Error(`no token issued for ${namespace}/${name}`);
    return token;
  }

  /**
   * Server-side applies every document of a YAML manifest stream, as `kubectl apply --server-side`
   * does: each object is sent as written (client-node's typed serializer would drop keys it does
   * not model, such as a CRD schema's `x-kubernetes-*` extensions).
   */
  async apply(manifests: string, fieldManager = 'llm-extproc-tests', options: ApplyOptions = {}): Promise<KubernetesObject[]> {
    const kc = this.kubeConfig();
    const paths = kc.makeApiClient(ObjectPaths);
    paths.useNamespaceOf(kc);
    const applied: KubernetesObject[] = [];
    const query = [
      `fieldManager=${encodeURIComponent(fieldManager)}`,
      'force=true',
      ...(options.strict === true ? ['fieldValidation=Strict'] : []),
      ...(options.dryRun === true ? ['dryRun=All'] : []),
    ].join('&');
    for (const doc of parseAllDocuments(manifests)) {
      const object = doc.toJS() as KubernetesObject | null;
      if (object === null || object.kind === undefined) continue;
      const path = `${await paths.pathOf(object)}?${query}`;
      const res = await this.request('PATCH', path, JSON.stringify(object), 'application/apply-patch+yaml');
      if (res.status >= 300) {
        throw Object.assign(new Error(`apply ${object.kind}/${object.metadata?.name ?? ''}: ${res.status} ${res.body}`), {
          code: res.status,
          body: res.body,
        });
      }
      applied.push(JSON.parse(res.body) as KubernetesObject);
    }
    return applied;
  }

  /** Installs the InferencePool CRD and waits until the API serves it. */
  async installInferencePoolCrd(): Promise<void> {
    await this.installCrds(await readFile(this.tools.inferencePoolCrd, 'utf8'));
  }

  /** Installs the InferenceObjective CRD (inference.networking.x-k8s.io/v1alpha2) and waits until the API serves it. */
  async installInferenceObjectiveCrd(): Promise<void> {
    await this.installCrds(await readFile(this.tools.inferenceObjectiveCrd, 'utf8'));
  }

  /** Creates an InferencePool selecting `app: <app>` pods on `port`, serving `models` (our models annotation). */
  async createInferencePool(o: { namespace: string; name: string; app: string; port: number; models: readonly string[] }): Promise<void> {
    await this.kubeConfig()
      .makeApiClient(CustomObjectsApi)
      .createNamespacedCustomObject({
        group: 'inference.networking.k8s.io',
        version: 'v1',
        namespace: o.namespace,
        plural: 'inferencepools',
        body: {
          apiVersion: 'inference.networking.k8s.io/v1',
          kind: 'InferencePool',
          metadata: { name: o.name, namespace: o.namespace, annotations: { 'llm-extproc.io/models': o.models.join(',') } },
          spec: {
            selector: { matchLabels: { app: o.app } },
            targetPorts: [{ number: o.port }],
            endpointPickerRef: { name: 'llm-extproc', port: { number: 9002 } },
          },
        },
      });
  }

  /**
   * Installs llm-d's API group (llm-d.ai/v1alpha2: InferenceObjective, InferenceModelRewrite) from
   * our own manifest of its published shapes (test/support/crds/llm-d.ai-v1alpha2.yaml: llm-d's Go
   * module is not on the module proxy) and waits until the API serves both kinds.
   */
  async installLlmdCrds(): Promise<void> {
    await this.installCrds(await readFile(join(repoRoot(), 'test', 'support', 'crds', 'llm-d.ai-v1alpha2.yaml'), 'utf8'));
  }

  /**
   * Server-side applies a manifest stream of CustomResourceDefinitions (other objects in it are
   * applied too) and waits until every CRD is Established and its resources are served.
   */
  async installCrds(manifests: string): Promise<void> {
    const applied = await this.apply(manifests);
    const ext = this.kubeConfig().makeApiClient(ApiextensionsV1Api);
    for (const object of applied) {
      if (object.kind !== 'CustomResourceDefinition') continue;
      const name = object.metadata?.name ?? '';
      const crd = await waitUntil(
        async () => {
          const read = await ext.readCustomResourceDefinition({ name });
          return read.status?.conditions?.some((c) => c.type === 'Established' && c.status === 'True') ? read : undefined;
        },
        { description: `CRD ${name} established`, timeoutMs: 60_000, intervalMs: 100 },
      );
      // Established can precede discovery by a moment; the first list must not 404.
      const version = crd.spec.versions.find((v) => v.served)?.name ?? '';
      await waitUntil(
        async () => ((await this.get(`/apis/${crd.spec.group}/${version}/${crd.spec.names.plural}`)).status === 200 ? true : undefined),
        { description: `${name} served`, timeoutMs: 60_000, intervalMs: 100 },
      );
    }
  }

  /** A GET with the admin token; never throws on HTTP errors. */
  get(path: string): Promise<{ status: number; body: string }> {
    return this.request('GET', path);
  }

  /** One request with the admin token; never throws on HTTP errors. */
  private request(method: string, path: string, body?: string, contentType?: string): Promise<{ status: number; body: string }> {
    return new Promise((resolve, reject) => {
      const headers: Record<string, string> = { authorization: `Bearer ${this.adminToken}` };
      if (contentType !== undefined) headers['content-type'] = contentType;
      const req = httpsRequest(`${this.server}${path}`, { method, ca: this.caPem, headers }, (res) => {
        let text = '';
        res.setEncoding('utf8');
        res.on('data', (chunk: string) => (text += chunk));
        res.on('end', () => resolve({ status: res.statusCode ?? 0, body: text }));
      });
      req.setTimeout(10_000, () => req.destroy(new Error(`${method} ${path} timed out`)));
      req.on('error', reject);
      req.end(body);
    });
  }

  /** Last lines of a component's log, for failure messages. */
  async logTail(component: 'kube-apiserver' | 'etcd', lines = 40): Promise<string> {
    const text = await readFile(join(this.dir, `${component}.log`), 'utf8').catch(() => '');
    return text.split('\n').slice(-lines).join('\n');
  }

  async stop(): Promise<void> {
    if (this.stopped) return;
    this.stopped = true;
    await this.apiserver?.stop();
    await this.etcd.stop();
    if (process.env.LLM_EXTPROC_KEEP_KUBE_DIR === undefined) await rm(this.dir, { recursive: true, force: true });
  }

  /** etcd's client URL (for diagnostics). */
  get etcdEndpoint(): string {
    return this.etcdUrl;
  }

  private kubeconfigYaml(token: string): string {
    return [
      'apiVersion: v1',
      'kind: Config',
      'clusters:',
      '  - name: test',
      '    cluster:',
      `      server: ${this.server}`,
      `      certificate-authority-data: ${Buffer.from(this.caPem).toString('base64')}`,
      'users:',
      '  - name: test',
      '    user:',
      `      token: ${token}`,
      'contexts:',
      '  - name: test',
      '    context: { cluster: test, user: test }',
      'current-context: test',
      '',
    ].join('\n');
  }
}

/** client-node's resource-path resolution (discovery, cached), which it keeps protected. */
class ObjectPaths extends KubernetesObjectApi {
  pathOf(object: KubernetesObject): Promise<string> {
    return this.specUriPath(object, 'patch');
  }

  useNamespaceOf(kc: KubeConfig): void {
    this.setDefaultNamespace(kc);
  }
}

/** An AbortSignal that fires when the process exits, so waits fail fast with a useful message. */
function exitSignal(process: TiedProcess): AbortSignal {
  const controller = new AbortController();
  void process.whenExited().then((code) => controller.abort(new Error(`${process.name} exited with code ${code}`)));
  return controller.signal;
}

function httpGet(url: string): Promise<string> {
  return new Promise((resolve, reject) => {
    const req = httpRequest(url, (res) => {
      let body = '';
      res.setEncoding('utf8');
      res.on('data', (chunk: string) => (body += chunk));
      res.on('end', () => resolve(body));
    });
    req.setTimeout(5_000, () => req.destroy(new Error(`GET ${url} timed out`)));
    req.on('error', reject);
    req.end();
  });
}
