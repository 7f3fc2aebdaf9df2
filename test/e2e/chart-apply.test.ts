// The chart's manifests accepted by a real Kubernetes API server: `helm template` over the default
// values and every example values file, then server-side apply (as `kubectl apply --server-side`
// and Helm 4 do) into a kube-apiserver with the InferencePool CRD installed. The API server runs
// its own validation (Deployment, Service, PDB, HPA, RBAC, ConfigMap) and the InferencePool CRD's
// schema and CEL rules. Objects of CRDs this test bed does not install (Envoy Gateway, Istio,
// Prometheus Operator) are listed, not applied; chart.test.ts checks their fields.
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtempSync, readdirSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { stringify as toYaml } from 'yaml';
import { repoRoot } from '../../scripts/repo-root.js';
import { CHART_DIR } from '../../scripts/chart/chart-files.js';
import { helm, parseManifests } from '../support/helm.js';
import { KubeControlPlane } from '../support/kube-control-plane.js';

const CHART = join(repoRoot(), CHART_DIR);
const EXAMPLES = readdirSync(join(CHART, 'examples'))
  .filter((f) => f.endsWith('.yaml'))
  .sort();
/** API groups whose CRDs are not in this test bed. */
const NOT_SERVED = new Set(['gateway.envoyproxy.io', 'networking.istio.io', 'monitoring.coreos.com']);

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

let plane: KubeControlPlane;
let home = '';
const created = new Set<string>();

before(async () => {
  home = mkdtempSync(join(tmpdir(), 'chart-apply-'));
  plane = await KubeControlPlane.start();
  await plane.installInferencePoolCrd();
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
      const servable = objects.filter((o) => !NOT_SERVED.has(o.apiVersion.split('/')[0] ?? ''));
      for (const ns of new Set([namespace, ...servable.map((o) => o.metadata.namespace ?? namespace)])) {
        if (created.has(ns)) continue;
        await plane.createNamespace(ns);
        created.add(ns);
      }
      const applied = await plane.apply(servable.map((o) => toYaml(o)).join('---\n'));
      assert.deepEqual(
        applied.map((o) => `${o.kind}/${o.metadata?.name}`).sort(),
        servable.map((o) => `${o.kind}/${o.metadata.name}`).sort(),
      );
      // The API server kept the fields we rely on (an unknown field would have been dropped).
      for (const object of applied) {
        const sent = servable.find(
          (o) => o.kind === object.kind && o.metadata.name === object.metadata?.name && o.metadata.namespace === object.metadata?.namespace,
        );
        const keep = (o: unknown): unknown => {
          const spec = (o as { spec?: Record<string, unknown> }).spec;
          if (object.kind === 'Deployment') {
            const pod = (spec?.template as { spec?: { containers?: Array<Record<string, unknown>>; securityContext?: unknown } }).spec;
            const c = pod?.containers?.[0];
            return [c?.readinessProbe, c?.livenessProbe, c?.securityContext, c?.ports, pod?.securityContext];
          }
          if (object.kind === 'InferencePool') return spec;
          if (object.kind === 'Role') return (o as { rules?: unknown }).rules;
          return undefined;
        };
        const missing = missingFrom(plain(keep(object)), plain(keep(sent)), '');
        assert.deepEqual(missing, [], `${object.kind}/${object.metadata?.name} kept as rendered (API defaults may add fields)`);
      }
      const kinds = new Set(objects.map((o) => o.kind));
      if (values === 'inferencepool-istio.yaml') assert.ok(kinds.has('InferencePool') && applied.some((o) => o.kind === 'InferencePool'));
    });
  }
});
