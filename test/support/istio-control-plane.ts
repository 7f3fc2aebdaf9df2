// The real Istio control plane for tests: istiod (pilot-discovery, built by
// scripts/install-istiod.mjs from the pinned istio.io/istio commit) running out of cluster against
// the suite's real kube-apiserver, installed the way a user installs Istio with Helm:
//
// - the Gateway API standard CRDs, Istio's own CRDs (its `base` chart) and the InferencePool CRD;
// - the `istiod` chart rendered by `helm template` with the values below, and everything it renders
//   applied as it is (ServiceAccount, ClusterRoles and bindings, the `istio` mesh ConfigMap, the
//   sidecar-injector ConfigMap whose `kube-gateway` template the gateway deployment controller
//   uses), except what only a pod network could serve: the Deployment (we run its container here,
//   with its own arguments and environment) and the two admission webhooks (the API server cannot
//   call back into a process on our loopback);
// - pilot-discovery authenticating as its own ServiceAccount, so the chart's RBAC is what it gets.
//
// Every istiod port is moved to a free loopback port. The gateway's Envoy (istio-gateway-proxy.ts)
// dials the TLS xDS port (`--secureGRPCAddr`) with its pod's token, as pilot-agent does; the
// plaintext one (`--grpcAddr`) stays unused.

import { mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import { request as httpRequest } from 'node:http';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { stringify as toYaml } from 'yaml';
import { helm, parseManifests, type K8sObject } from './helm.js';
import { freePorts } from './free-ports.js';
import type { KubeControlPlane } from './kube-control-plane.js';
import { istioTools, type IstioTools } from './istio-tools.js';
import { TiedProcess } from './tied-process.js';
import { waitUntil } from './wait-until.js';

export const ISTIO_NAMESPACE = 'istio-system';
const START_TIMEOUT_MS = 180_000;

/**
 * The istiod chart values of the test bed: what Istio's Gateway API Inference Extension guide asks
 * for (`ENABLE_GATEWAY_API_INFERENCE_EXTENSION`), plus the settings that keep istiod from
 * generating filters only Istio's own Envoy build has (we run stock Envoy 1.40): telemetry's
 * `istio.stats` filter and metadata exchange (`io.istio.http.peer_metadata`), the `istio.alpn`
 * filter. Users of stock Envoy would set the same; istio-proxy users need none of them. Each one is
 * named in docs/gateways.md with what Envoy says without it.
 */
export const BED_ISTIOD_VALUES = {
  pilot: {
    env: {
      ENABLE_GATEWAY_API_INFERENCE_EXTENSION: 'true',
      PILOT_ENABLE_ALPN_FILTER: 'false',
      PILOT_ENABLE_METADATA_EXCHANGE: 'false',
    },
  },
  telemetry: { enabled: false },
  // No pilot-agent here to serve the workload certificate (SDS `default` / `ROOTCA`, which Envoy
  // waits for forever). Auto mTLS only ever applies to endpoints with a sidecar
  // (`security.istio.io/tlsMode: istio`), which neither the model servers nor llm-extproc have, so
  // the gateway reaches them in plaintext either way; switching it off removes the unused matches.
  meshConfig: { enableAutoMtls: false },
} as const;

export interface IstiodOptions {
  /** istiod chart values, replacing BED_ISTIOD_VALUES (e.g. to show what Envoy rejects without them). */
  readonly values?: object;
}

interface DeploymentLike {
  readonly spec: {
    readonly template: {
      readonly spec: {
        readonly serviceAccountName?: string;
        readonly containers: ReadonlyArray<{
          readonly args?: readonly string[];
          readonly env?: ReadonlyArray<{ name: string; value?: string; valueFrom?: { fieldRef?: { fieldPath: string } } }>;
        }>;
      };
    };
  };
}

/**
 * CRDs of Istio's `base` chart at this commit that kube-apiserver refuses (422: the v1alpha1 schema
 * of TrafficExtension gives `status.observedGeneration` no type). A user's `helm install` of this
 * base chart fails the same way; istiod runs without the kind (it watches only CRDs that exist).
 */
const REJECTED_CRDS = new Set(['trafficextensions.extensions.istio.io']);

/** Kinds of the istiod chart we do not apply (see the header) and CRD-less kinds we leave out. */
const NOT_APPLIED = new Set(['Deployment', 'MutatingWebhookConfiguration', 'ValidatingWebhookConfiguration']);

export class Istiod {
  private constructor(
    private readonly process: TiedProcess,
    private readonly dir: string,
    readonly tools: IstioTools,
    /** `127.0.0.1:<port>`: xDS over TLS, authenticated by a ServiceAccount token (what pilot-agent uses). */
    readonly secureXdsAddress: string,
    /** `http://127.0.0.1:<port>`: /ready and /debug/* (istiod's --httpAddr). */
    readonly debugUrl: string,
  ) {}

  /** Installs Istio into `plane` as a user would (CRDs, the istiod chart) and starts istiod. */
  static async start(plane: KubeControlPlane, options: IstiodOptions = {}): Promise<Istiod> {
    const tools = await istioTools();
    const dir = await mkdtemp(join(tmpdir(), 'llm-extproc-istiod-'));
    try {
      await plane.installCrds(await readFile(tools.gatewayApiCrds, 'utf8'));
      await installIstioBase(plane, tools, dir);
      await plane.installInferencePoolCrd();

      const objects = parseManifests(await renderChart(tools.istiodChart, 'istiod', options.values ?? BED_ISTIOD_VALUES, dir));
      const deployment = objects.find((o) => o.kind === 'Deployment' && o.metadata.name === 'istiod') as
        (K8sObject & DeploymentLike) | undefined;
      if (deployment === undefined) throw new Error('the istiod chart rendered no istiod Deployment');
      await plane.apply(
        objects
          .filter((o) => !NOT_APPLIED.has(o.kind))
          .map((o) => toYaml(o))
          .join('---\n'),
      );

      const pod = deployment.spec.template.spec;
      const serviceAccount = pod.serviceAccountName ?? 'istiod';
      const kubeconfig = await plane.writeKubeconfig('istiod.kubeconfig', await plane.serviceAccountToken(ISTIO_NAMESPACE, serviceAccount));
      const [grpc, secureGrpc, http, https, monitoring, ctrlz] = await freePorts(6);
      const container = pod.containers[0];
      const fieldValues: Record<string, string> = {
        'metadata.name': 'istiod-0',
        'metadata.namespace': ISTIO_NAMESPACE,
        'spec.serviceAccountName': serviceAccount,
      };
      const env: NodeJS.ProcessEnv = { PATH: process.env.PATH ?? '/usr/bin:/bin', HOME: dir };
      for (const variable of container?.env ?? []) {
        // KUBECONFIG points into a Secret volume; --kubeconfig below says where ours is.
        if (variable.name === 'KUBECONFIG') continue;
        const value = variable.value ?? fieldValues[variable.valueFrom?.fieldRef?.fieldPath ?? ''];
        if (value !== undefined) env[variable.name] = value;
      }
      const args = [
        ...(container?.args ?? ['discovery']),
        `--kubeconfig=${kubeconfig}`,
        `--grpcAddr=127.0.0.1:${grpc}`,
        `--secureGRPCAddr=127.0.0.1:${secureGrpc}`,
        `--httpAddr=127.0.0.1:${http}`,
        `--httpsAddr=127.0.0.1:${https}`,
        `--monitoringAddr=127.0.0.1:${monitoring}`,
        '--ctrlz_address=127.0.0.1',
        `--ctrlz_port=${ctrlz}`,
      ];
      await writeFile(
        join(dir, 'command.txt'),
        `${Object.entries(env)
          .map(([k, v]) => `${k}=${v}`)
          .join(' ')} ${tools.pilotDiscovery} ${args.join(' ')}\n`,
      );
      // istiod writes relative paths (./var/run/secrets/istio-dns, ./etc/istio): run it in its own directory.
      const child = new TiedProcess('istiod', tools.pilotDiscovery, args, { logFile: join(dir, 'istiod.log'), env, cwd: dir });
      const istiod = new Istiod(child, dir, tools, `127.0.0.1:${secureGrpc}`, `http://127.0.0.1:${http}`);
      const exited = new AbortController();
      void child.whenExited().then((code) => exited.abort(new Error(`istiod exited with code ${code}`)));
      try {
        await waitUntil(async () => ((await httpStatus(`${istiod.debugUrl}/ready`)) === 200 ? true : undefined), {
          description: `istiod /ready (log: ${join(dir, 'istiod.log')})`,
          timeoutMs: START_TIMEOUT_MS,
          intervalMs: 200,
          signal: exited.signal,
        });
      } catch (err) {
        process.stderr.write(`istiod did not become ready; last log lines:\n${await istiod.logTail()}\n`);
        await istiod.stop();
        throw err;
      }
      return istiod;
    } catch (err) {
      await rm(dir, { recursive: true, force: true });
      throw err;
    }
  }

  /** An istiod debug endpoint (`/debug/configz`, `/debug/syncz`, ...) as text. */
  async debug(path: string): Promise<string> {
    return httpText(`${this.debugUrl}${path}`);
  }

  async logTail(lines = 60): Promise<string> {
    const text = await readFile(join(this.dir, 'istiod.log'), 'utf8').catch(() => '');
    return text.split('\n').slice(-lines).join('\n');
  }

  /** The whole log (for assertions on what istiod reported). */
  log(): Promise<string> {
    return readFile(join(this.dir, 'istiod.log'), 'utf8').catch(() => '');
  }

  async stop(): Promise<void> {
    await this.process.stop();
    if (process.env.LLM_EXTPROC_KEEP_KUBE_DIR === undefined) await rm(this.dir, { recursive: true, force: true });
  }
}

/** `helm template` of one of Istio's charts into the istio-system namespace. */
/**
 * Istio's CRDs (DestinationRule, EnvoyFilter, ...) as a user installs them: the `base` chart of
 * the pinned commit rendered and applied into `istio-system`, less the CRDs the API server refuses
 * (REJECTED_CRDS). `dir` is a scratch directory for Helm.
 */
export async function installIstioBase(plane: KubeControlPlane, tools: IstioTools, dir: string): Promise<void> {
  await plane.createNamespace(ISTIO_NAMESPACE);
  const base = parseManifests(await renderChart(tools.baseChart, 'istio-base', {}, dir));
  await plane.installCrds(
    base
      .filter((o) => !REJECTED_CRDS.has(o.metadata.name))
      .map((o) => toYaml(o))
      .join('---\n'),
  );
}

async function renderChart(chart: string, release: string, values: object, dir: string): Promise<string> {
  const valuesFile = join(dir, `${release}-values.yaml`);
  await writeFile(valuesFile, toYaml(values));
  const res = await helm(['template', release, chart, '--namespace', ISTIO_NAMESPACE, '--values', valuesFile], join(dir, 'helm'));
  if (res.code !== 0) throw new Error(`helm template ${chart} failed: ${res.stderr}`);
  return res.stdout;
}

function httpGet(url: string): Promise<{ status: number; body: string }> {
  return new Promise((resolve, reject) => {
    const req = httpRequest(url, { agent: false }, (res) => {
      let body = '';
      res.setEncoding('utf8');
      res.on('data', (chunk: string) => (body += chunk));
      res.on('end', () => resolve({ status: res.statusCode ?? 0, body }));
    });
    req.setTimeout(10_000, () => req.destroy(new Error(`GET ${url} timed out`)));
    req.on('error', reject);
    req.end();
  });
}

async function httpStatus(url: string): Promise<number> {
  return (await httpGet(url)).status;
}

async function httpText(url: string): Promise<string> {
  const res = await httpGet(url);
  if (res.status !== 200) throw new Error(`GET ${url}: ${res.status} ${res.body.slice(0, 300)}`);
  return res.body;
}
