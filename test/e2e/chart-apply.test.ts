// The chart's manifests accepted by a real Kubernetes API server: `helm template` over the default
// values and every example values file, then server-side apply (as `kubectl apply --server-side`
// and Helm 4 do) of every rendered object, none left out, with strict field validation (a field the
// API does not know fails the apply instead of being dropped), into a kube-apiserver with the CRDs
// of every kind the chart renders installed from their projects' own releases: InferencePool
// (Gateway API Inference Extension v1.0.1), Envoy Gateway v1.9.1's gateway.envoyproxy.io kinds,
// Istio's base chart (DestinationRule, EnvoyFilter) and the Prometheus operator v0.85.0's
// ServiceMonitor and PrometheusRule. The API server runs its own validation (Deployment, Service,
// PDB, HPA, RBAC, ConfigMap, the helm test Pod) and each CRD's schema and CEL rules. The sidecar
// container Envoy Gateway merges into its proxy Deployment (a strategic-merge patch in EnvoyProxy,
// which the CRD keeps as free-form JSON) is validated as the pod template it becomes.
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtempSync, readFileSync, readdirSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { stringify as toYaml } from 'yaml';
import { repoRoot } from '../../scripts/repo-root.js';
import { CHART_DIR } from '../../scripts/chart/chart-files.js';
import { helm, parseManifests, type K8sObject } from '../support/helm.js';
import { installIstioBase, ISTIO_NAMESPACE } from '../support/istio-control-plane.js';
import { istioTools } from '../support/istio-tools.js';
import { KubeControlPlane } from '../support/kube-control-plane.js';
import { kubeTools } from '../support/kube-tools.js';

const CHART = join(repoRoot(), CHART_DIR);
const EXAMPLES = readdirSync(join(CHART, 'examples'))
  .filter((f) => f.endsWith('.yaml'))
  .sort();
/** Every kind some values file renders: the run below must have applied each of them. */
const EXPECTED_KINDS = [
  'Backend',
  'BackendTrafficPolicy',
  'ClientTrafficPolicy',
  'ConfigMap',
  'Deployment',
  'DestinationRule',
  'EnvoyExtensionPolicy',
  'EnvoyFilter',
  'EnvoyProxy',
  'HorizontalPodAutoscaler',
  'InferencePool',
  'NetworkPolicy',
  'Pod',
  'PodDisruptionBudget',
  'PrometheusRule',
  'Role',
  'RoleBinding',
  'Service',
  'ServiceAccount',
  'ServiceMonitor',
];
/** API groups of CRD kinds: their whole spec must come back as sent (a CRD's schema prunes what it does not declare). */
const CRD_GROUPS = new Set(['gateway.envoyproxy.io', 'networking.istio.io', 'monitoring.coreos.com', 'inference.networking.k8s.io']);
/** The container Envoy Gateway itself puts in its proxy pod, which the sidecar patch merges into by name. */
const ENVOY_GATEWAY_CONTAINER = 'envoy';

/** Client objects are class instances; compare their JSON. */
function plain(value: unknown): unknown {
  return value === undefined ? undefined : JSON.parse(JSON.stringify(value));
}

/** Paths of `sent` that `stored` lacks or holds differently (fields the server added are fine). */
function missingFrom(stored: unknown, sent: unknown, path: string): string[] {
  if (sent === null || typeof sent !== 'object')
    return stored === sent ? [] : [`${path}: sent ${JSON.stringify(sent)}, stored ${JSON.stringify(stored)}`];
  if (stored === null || typeof stored !== 'object') return [`${path}: missing`];
  return Object.entries(sent).flatMap(([key, value]) => missingFrom((stored as Record<string, unknown>)[key], value, `${path}.${key}`));
}

interface StrategicPatch {
  readonly spec?: { readonly template?: { readonly metadata?: Record<string, unknown>; readonly spec?: PodSpecLike } };
}
interface PodSpecLike {
  readonly containers?: ReadonlyArray<Record<string, unknown>>;
  readonly [field: string]: unknown;
}

/**
 * The proxy pod an EnvoyProxy's strategic-merge patch asks Envoy Gateway for, as a Deployment the
 * API server can validate: the patch's pod template as written, Envoy Gateway's own `envoy`
 * container given the image it would have. Undefined when the EnvoyProxy patches no pod template.
 */
function patchedProxyDeployment(envoyProxy: K8sObject): object | undefined {
  const patch = (
    envoyProxy as { spec?: { provider?: { kubernetes?: { envoyDeployment?: { patch?: { type?: string; value?: StrategicPatch } } } } } }
  ).spec?.provider?.kubernetes?.envoyDeployment?.patch;
  const template = patch?.value?.spec?.template;
  if (patch?.type !== 'StrategicMerge' || template?.spec === undefined) return undefined;
  const labels = { 'llm-extproc.test/patched-proxy': envoyProxy.metadata.name };
  return {
    apiVersion: 'apps/v1',
    kind: 'Deployment',
    metadata: { name: `${envoyProxy.metadata.name}-patched-proxy`, namespace: envoyProxy.metadata.namespace },
    spec: {
      selector: { matchLabels: labels },
      template: {
        metadata: { ...template.metadata, labels },
        spec: {
          ...template.spec,
          containers: (template.spec.containers ?? []).map((c) =>
            c.name === ENVOY_GATEWAY_CONTAINER ? { image: 'docker.io/envoyproxy/envoy:distroless-v1.36.2', ...c } : c,
          ),
        },
      },
    },
  };
}

let plane: KubeControlPlane;
let home = '';
const created = new Set<string>();
const appliedKinds = new Set<string>();

before(async () => {
  home = mkdtempSync(join(tmpdir(), 'chart-apply-'));
  plane = await KubeControlPlane.start();
  const tools = await kubeTools();
  await plane.installInferencePoolCrd();
  await plane.installCrds(readFileSync(tools.envoyGatewayCrds, 'utf8'));
  await plane.installCrds(readFileSync(tools.prometheusOperatorCrds, 'utf8'));
  await installIstioBase(plane, await istioTools(), home);
  created.add(ISTIO_NAMESPACE);
});

after(async () => {
  await plane?.stop();
  rmSync(home, { recursive: true, force: true });
});

describe('chart manifests, server-side applied to a real kube-apiserver', () => {
  for (const values of ['(defaults)', ...EXAMPLES]) {
    it(`${values}: every object is accepted`, async () => {
      // One release namespace per values file, so the releases do not overwrite each other.
      const release = `r${created.size}`;
      const namespace = `rel-${created.size}`;
      const args = [
        'template',
        release,
        CHART,
        '--namespace',
        namespace,
        ...(values === '(defaults)' ? [] : ['-f', join(CHART, 'examples', values)]),
      ];
      const res = await helm(args, home);
      assert.equal(res.code, 0, res.stderr);
      const objects = parseManifests(res.stdout);
      for (const ns of new Set([namespace, ...objects.map((o) => o.metadata.namespace ?? namespace)])) {
        if (created.has(ns)) continue;
        await plane.createNamespace(ns);
        created.add(ns);
      }
      const applied = await plane.apply(objects.map((o) => toYaml(o)).join('---\n'), undefined, { strict: true });
      assert.deepEqual(
        applied.map((o) => `${o.kind}/${o.metadata?.name}`).sort(),
        objects.map((o) => `${o.kind}/${o.metadata.name}`).sort(),
      );
      for (const object of applied) appliedKinds.add(object.kind ?? '');
      // The API server kept the fields we rely on (an unknown field would have been dropped).
      for (const object of applied) {
        const sent = objects.find(
          (o) => o.kind === object.kind && o.metadata.name === object.metadata?.name && o.metadata.namespace === object.metadata?.namespace,
        );
        const keep = (o: unknown): unknown => {
          const spec = (o as { spec?: Record<string, unknown> }).spec;
          if (object.kind === 'Deployment') {
            const pod = (spec?.template as { spec?: { containers?: Array<Record<string, unknown>>; securityContext?: unknown } }).spec;
            const c = pod?.containers?.[0];
            return [c?.readinessProbe, c?.livenessProbe, c?.securityContext, c?.ports, pod?.securityContext];
          }
          if (CRD_GROUPS.has(object.apiVersion?.split('/')[0] ?? '')) return spec;
          if (object.kind === 'Role') return (o as { rules?: unknown }).rules;
          return undefined;
        };
        const missing = missingFrom(plain(keep(object)), plain(keep(sent)), '');
        assert.deepEqual(missing, [], `${object.kind}/${object.metadata?.name} kept as rendered (API defaults may add fields)`);
      }
      // A sidecar patch is free-form JSON to the EnvoyProxy CRD: the pod it makes is validated here.
      const proxies = objects.filter((o) => o.kind === 'EnvoyProxy').map(patchedProxyDeployment);
      for (const deployment of proxies) {
        if (deployment === undefined) continue;
        const [checked] = await plane.apply(toYaml(deployment), undefined, { strict: true, dryRun: true });
        const containers = (checked as { spec?: { template?: { spec?: { containers?: Array<{ name: string }> } } } } | undefined)?.spec
          ?.template?.spec?.containers;
        assert.ok(
          containers?.some((c) => c.name === 'llm-extproc'),
          'the patched proxy pod runs the llm-extproc container',
        );
        appliedKinds.add('EnvoyProxy sidecar pod');
      }
      if (values === 'envoy-gateway-sidecar.yaml')
        assert.ok(
          proxies.some((d) => d !== undefined),
          'the sidecar example patches the proxy pod',
        );
    });
  }

  it('applied every kind the chart renders, and the sidecar pod', () => {
    assert.deepEqual([...appliedKinds].sort(), [...EXPECTED_KINDS, 'EnvoyProxy sidecar pod'].sort());
  });
});
