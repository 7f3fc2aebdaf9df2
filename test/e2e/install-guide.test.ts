// docs/install.md, step by step, against a real kube-apiserver: for each gateway the suite runs
// live (Envoy Gateway, Istio), the guide's example manifests (docs/install/) and `helm template` of
// the chart with the values file the guide installs with, server-side applied in the guide's
// namespaces with strict field validation (an unknown or misspelt field fails), into an API
// server holding the CRDs those objects need (Gateway API and Envoy Gateway v1.9.1's, the
// InferencePool's, Istio's base chart). The live beds (test/support/envoy-gateway-bed.ts,
// istio-bed.ts) run these same files against the real controllers; this file also checks that the
// guide names every example file and that each file it names exists.
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { existsSync, mkdtempSync, readFileSync, readdirSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, relative } from 'node:path';
import { stringify as toYaml } from 'yaml';
import { repoRoot } from '../../scripts/repo-root.js';
import { CHART_DIR } from '../../scripts/chart/chart-files.js';
import { envoyGatewayTools } from '../support/envoy-gateway.js';
import { helm, parseManifests, type K8sObject } from '../support/helm.js';
import { guideManifests, INSTALL_GUIDE_DIR } from '../support/install-guide.js';
import { installIstioBase, ISTIO_NAMESPACE } from '../support/istio-control-plane.js';
import { istioTools } from '../support/istio-tools.js';
import { KubeControlPlane } from '../support/kube-control-plane.js';

const ROOT = repoRoot();
const GUIDE = readFileSync(join(ROOT, 'docs', 'install.md'), 'utf8');

/** The guide's paths the suite runs live: its files, the chart values it installs with, and where. */
const PATHS = [
  { gateway: 'Envoy Gateway', files: ['model-server.yaml', 'envoy-gateway/gateway.yaml'], values: 'envoy-gateway.yaml', namespace: 'llm' },
  { gateway: 'Istio', files: ['model-server.yaml', 'istio/gateway.yaml'], values: 'inferencepool-istio.yaml', namespace: 'models' },
] as const;

function key(o: { kind?: string; metadata?: { name?: string } }): string {
  return `${o.kind}/${o.metadata?.name}`;
}

describe('docs/install.md', () => {
  it('names every example file in docs/install/, and every file it names exists', () => {
    const files = readdirSync(INSTALL_GUIDE_DIR, { recursive: true, withFileTypes: true })
      .filter((e) => e.isFile())
      .map((e) => relative(ROOT, join(e.parentPath, e.name)))
      .sort();
    assert.ok(files.length >= 3, `example files: ${files.join(', ')}`);
    for (const file of files) assert.ok(GUIDE.includes(file), `docs/install.md uses ${file}`);
    const named = [...GUIDE.matchAll(/(?:docs\/install|charts\/llm-extproc\/examples)\/[\w./-]+\.yaml/g)].map((m) => m[0]);
    for (const file of new Set(named)) assert.ok(existsSync(join(ROOT, file)), `${file} (named in docs/install.md) exists`);
    for (const path of PATHS)
      assert.ok(GUIDE.includes(`charts/llm-extproc/examples/${path.values}`), `the ${path.gateway} steps install with ${path.values}`);
  });
});

describe("docs/install.md's manifests, server-side applied to a real kube-apiserver", () => {
  let plane: KubeControlPlane;
  let home = '';
  const namespaces = new Set<string>();

  before(async () => {
    home = mkdtempSync(join(tmpdir(), 'install-guide-'));
    plane = await KubeControlPlane.start();
    await plane.installInferencePoolCrd();
    // Envoy Gateway's CRDs include the Gateway API's (Gateway, HTTPRoute, ReferenceGrant, ...).
    await plane.installCrds(readFileSync((await envoyGatewayTools()).crds, 'utf8'));
    await installIstioBase(plane, await istioTools(), home);
    namespaces.add(ISTIO_NAMESPACE);
  });

  after(async () => {
    await plane?.stop();
    rmSync(home, { recursive: true, force: true });
  });

  for (const path of PATHS) {
    it(`${path.gateway}: the guide's objects and the chart's, every one accepted as sent`, async () => {
      const chart = join(ROOT, CHART_DIR);
      const rendered = await helm(
        ['template', 'llm', chart, '--namespace', path.namespace, '-f', join(chart, 'examples', path.values)],
        join(home, 'helm'),
      );
      assert.equal(rendered.code, 0, rendered.stderr);
      const objects: K8sObject[] = [...path.files.flatMap((f) => guideManifests(f)), ...parseManifests(rendered.stdout)];
      // `kubectl create namespace ...`, as the guide's first step says.
      for (const ns of new Set([
        path.namespace,
        ...objects.flatMap((o) => (o.metadata.namespace === undefined ? [] : [o.metadata.namespace])),
      ])) {
        if (namespaces.has(ns)) continue;
        await plane.createNamespace(ns);
        namespaces.add(ns);
      }
      const applied = await plane.apply(objects.map((o) => toYaml(o)).join('---\n'), 'install-guide', { strict: true });
      assert.deepEqual(applied.map(key).sort(), objects.map(key).sort());
    });
  }
});
