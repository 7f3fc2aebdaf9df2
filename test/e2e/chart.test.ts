// The Helm chart as an operator meets it: `helm lint` and `helm template` (the real Helm v3.22
// binary) over the default values and one realistic values file per gateway; the rendered
// manifests are parsed and checked for what would break an install (RBAC, probes on the ports the
// server listens on, securityContext, a config the server accepts, an Envoy config Envoy accepts,
// a checksum that rolls the pods), and values.schema.json refuses bad values naming the field.
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { CANCELLATION_KINDS, CATALOG } from '../../src/errors/catalog.js';
import { ALERTED_RESULTS } from '../../src/metrics/metrics.js';
import { mkdirSync, mkdtempSync, readFileSync, readdirSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { buildConfig } from '../../src/config/config.js';
import type { Config } from '../../src/config/config.js';
import { configFileSchema } from '../../src/config/schema.js';
import { parseStaticEndpoints } from '../../src/endpoints/static-file.js';
import { flagsToSet } from '../../src/process-settings.js';
import { flowControlAnywhere } from '../../src/picker/settings.js';
import { makeSelfSignedIdentity } from '../../src/grpc/tls-identity.js';
import { ERROR_CODE_HEADER } from '../../src/errors/render.js';
import { DESTINATION_HEADER, DESTINATION_METADATA_NAMESPACE } from '../../src/extproc/protocol-names.js';
import { repoRoot } from '../../scripts/repo-root.js';
import { CHART_DIR, chartFiles } from '../../scripts/chart/chart-files.js';
import { envoyBinaryPath } from '../support/envoy-binary.js';
import { runExtprocCommand, startExtprocProcess } from '../support/extproc-process.js';
import type { CommandResult } from '../support/extproc-process.js';
import { rulesOf } from '../support/chart-rules.js';
import { helm, parseManifests, run } from '../support/helm.js';
import type { K8sObject } from '../support/helm.js';
import { writeWordTokenizer } from '../support/word-tokenizer.js';

const CHART = join(repoRoot(), CHART_DIR);
const NAMESPACE = 'llm';
const RELEASE = 'gw';
const FULLNAME = `${RELEASE}-llm-extproc`;
const EXAMPLES = readdirSync(join(CHART, 'examples'))
  .filter((f) => f.endsWith('.yaml'))
  .sort();

type Obj = Record<string, unknown>;
/** The API groups of each resource the server reads (pods are in the core group): llm-d's kinds under its group and the deprecated one. */
const GROUPS_OF: Readonly<Record<string, readonly string[]>> = {
  pods: [''],
  inferencepools: ['inference.networking.k8s.io'],
  inferencemodelrewrites: ['llm-d.ai', 'inference.networking.x-k8s.io'],
  inferenceobjectives: ['llm-d.ai', 'inference.networking.x-k8s.io'],
};
let home = '';

before(() => {
  home = mkdtempSync(join(tmpdir(), 'chart-test-'));
});
after(() => {
  rmSync(home, { recursive: true, force: true });
});

async function template(valuesFiles: readonly string[], extra: readonly string[] = []): Promise<K8sObject[]> {
  const args = [
    'template',
    RELEASE,
    CHART,
    '--namespace',
    NAMESPACE,
    ...valuesFiles.flatMap((f) => ['-f', join(CHART, 'examples', f)]),
    ...extra,
  ];
  const res = await helm(args, home);
  assert.equal(res.code, 0, `helm ${args.join(' ')} failed:\n${res.stderr}`);
  return parseManifests(res.stdout);
}

function only(objects: readonly K8sObject[], kind: string, name?: string): K8sObject {
  const found = objects.filter((o) => o.kind === kind && (name === undefined || o.metadata.name === name));
  assert.equal(found.length, 1, `expected one ${kind}${name === undefined ? '' : ` ${name}`}, found ${found.length}`);
  return found[0];
}

function field(value: unknown, ...path: Array<string | number>): unknown {
  let current = value;
  for (const key of path) current = (current as Obj | unknown[] | undefined)?.[key as never];
  return current;
}

/** The config file the chart renders, run through the server's own loader (as the pod would). */
function serverConfig(objects: readonly K8sObject[]): { config: Config; text: string; data: Obj } {
  const data = field(only(objects, 'ConfigMap', FULLNAME), 'data') as Obj;
  const text = data['config.yaml'];
  assert.equal(typeof text, 'string');
  return { config: buildConfig(text as string, {}), text: text as string, data };
}

function portOf(address: string): number {
  return Number(address.slice(address.lastIndexOf(':') + 1));
}

/** The pod spec that runs the server: the Deployment's, or the sidecar patch of the Envoy pods. */
function serverPodSpec(objects: readonly K8sObject[]): Obj {
  const deployment = objects.find((o) => o.kind === 'Deployment');
  if (deployment !== undefined) return field(deployment, 'spec', 'template', 'spec') as Obj;
  const patch = field(only(objects, 'EnvoyProxy'), 'spec', 'provider', 'kubernetes', 'envoyDeployment', 'patch', 'value');
  return field(patch, 'spec', 'template', 'spec') as Obj;
}

function serverContainer(objects: readonly K8sObject[]): Obj {
  const container = (serverPodSpec(objects).containers as Obj[]).find((c) => c.name === 'llm-extproc');
  assert.ok(container !== undefined, 'a container named llm-extproc');
  return container;
}

const CONFIG_DIR = '/etc/llm-extproc';

/**
 * What a replica holds outside V8's old generation, with room to spare (docs/benchmarks.md,
 * "Memory": Node's own floor ~43 MiB, loaded code, the young generation, Buffers in flight).
 */
const NON_HEAP_MIB = 64;

/** A Kubernetes memory quantity (`128Mi`, `1Gi`, `134217728`, `200M`) in MiB. */
function mebibytes(quantity: unknown): number {
  const m = /^(\d+(?:\.\d+)?)(Ki|Mi|Gi|k|M|G)?$/.exec(String(quantity));
  assert.ok(m !== null, `a memory quantity: ${String(quantity)}`);
  const unit = { Ki: 2 ** 10, Mi: 2 ** 20, Gi: 2 ** 30, k: 1e3, M: 1e6, G: 1e9 }[m[2] ?? ''] ?? 1;
  return (Number(m[1]) * unit) / 2 ** 20;
}

/**
 * Runs the `helm test` Pod's command with the real program, as its kubelet would: the ConfigMap's
 * files (a certificate pair for a mounted TLS Secret, tokenizer files for a mounted tokenizer) written to a directory standing for the
 * mount path, the Pod's literal environment variables set.
 */
async function runCheckConfigPod(
  objects: readonly K8sObject[],
): Promise<{ result: CommandResult; configText: string; env: Record<string, string> }> {
  const pod = only(objects, 'Pod', `${FULLNAME}-check-config`);
  const container = (field(pod, 'spec', 'containers') as Obj[])[0];
  const dir = mkdtempSync(join(home, 'mount-'));
  const local = (text: string): string => text.replaceAll(CONFIG_DIR, dir);
  const data = field(only(objects, 'ConfigMap', FULLNAME), 'data') as Record<string, string>;
  for (const [name, text] of Object.entries(data)) writeFileSync(join(dir, name), local(text));
  const mounts = container.volumeMounts as Obj[];
  if (mounts.some((m) => m.mountPath === `${CONFIG_DIR}/tls`)) {
    const identity = await makeSelfSignedIdentity(['llm-extproc']);
    mkdirSync(join(dir, 'tls'));
    writeFileSync(join(dir, 'tls', 'tls.crt'), identity.cert);
    writeFileSync(join(dir, 'tls', 'tls.key'), identity.key);
  }
  if (mounts.some((m) => m.mountPath === `${CONFIG_DIR}/client-ca`)) {
    mkdirSync(join(dir, 'client-ca'));
    writeFileSync(join(dir, 'client-ca', 'ca.crt'), (await makeSelfSignedIdentity(['client-ca'])).cert);
  }
  if (mounts.some((m) => m.mountPath === `${CONFIG_DIR}/tokenizer`)) {
    // The model's tokenizer files a ConfigMap or volume would hold: the check loads them as the server does.
    mkdirSync(join(dir, 'tokenizer'));
    await writeWordTokenizer(join(dir, 'tokenizer'));
  }
  const env = Object.fromEntries(
    (container.env as Obj[]).filter((e) => typeof e.value === 'string').map((e) => [e.name as string, e.value as string]),
  );
  const args = (container.args as string[]).map(local);
  return { result: await runExtprocCommand(args, { env }), configText: local(data['config.yaml']), env };
}

describe('chart: helm lint', () => {
  for (const values of ['(defaults)', ...EXAMPLES]) {
    it(`passes with ${values}`, async () => {
      const args = ['lint', CHART, '--strict', ...(values === '(defaults)' ? [] : ['-f', join(CHART, 'examples', values)])];
      const res = await helm(args, home);
      assert.equal(res.code, 0, `helm lint failed:\n${res.stdout}\n${res.stderr}`);
      assert.match(res.stdout, /1 chart\(s\) linted, 0 chart\(s\) failed/);
    });
  }
});

describe('chart: InferenceObjective RBAC follows flow control', () => {
  const rulesIn = (objects: readonly K8sObject[], namespace: string): unknown[] =>
    (
      field(
        objects.find((o) => o.kind === 'Role' && o.metadata.namespace === namespace),
        'rules',
      ) as Obj[]
    ).map((r) => r.resources);
  for (const [flow, extra, granted] of [
    ['off', [], false],
    ['on', ['--set', 'config.picker.flowControl.enabled=true'], true],
    ['on for one pool', ['--set', 'config.picker.pools.llama.flowControl=true'], true],
    [
      'on, objectives: false',
      ['--set', 'config.picker.flowControl.enabled=true', '--set', 'config.kubernetes.inferencePools.objectives=false'],
      false,
    ],
  ] as const) {
    it(`flow control ${flow}: ${granted ? 'granted' : 'not granted'}`, async () => {
      const objects = await template(['several-namespaces.yaml'], extra);
      const resources = rulesIn(objects, 'shared-models');
      assert.equal(
        resources.some((r) => JSON.stringify(r) === '["inferenceobjectives"]'),
        granted,
        JSON.stringify(resources),
      );
      assert.ok(resources.some((r) => JSON.stringify(r) === '["inferencepools"]'));
    });
  }
});

describe('chart: rendered manifests', () => {
  for (const values of ['(defaults)', ...EXAMPLES]) {
    describe(values, () => {
      let objects: K8sObject[] = [];
      before(async () => {
        objects = await template(values === '(defaults)' ? [] : [values]);
      });

      it('the ConfigMap holds a config file the server accepts', () => {
        const { config, data } = serverConfig(objects);
        if (config.source.kind === 'static') {
          assert.equal(config.source.path, '/etc/llm-extproc/endpoints.yaml');
          assert.ok(parseStaticEndpoints(data['endpoints.yaml'] as string).length > 0, 'the static endpoints file parses and has pools');
        }
      });

      it('RBAC is exactly get/list/watch on what the server reads, in the namespaces it reads', () => {
        const { config } = serverConfig(objects);
        assert.equal(
          objects.filter((o) => o.kind === 'ClusterRole' || o.kind === 'ClusterRoleBinding').length,
          0,
          'no cluster-wide permissions',
        );
        const expected = new Map<string, string[]>();
        if (config.source.kind === 'kubernetes') {
          for (const pool of config.source.kubernetes.pools) expected.set(pool.namespace, ['pods']);
          const ip = config.source.kubernetes.inferencePools;
          // InferenceObjectives are watched only where flow control, their only reader, is on.
          const objectives = ip?.objectives !== false && flowControlAnywhere(config.picker);
          const kinds = ['pods', 'inferencepools', 'inferencemodelrewrites', ...(objectives ? ['inferenceobjectives'] : [])];
          for (const ns of ip?.namespaces ?? []) expected.set(ns, kinds);
        }
        const roles = objects.filter((o) => o.kind === 'Role');
        assert.deepEqual(roles.map((r) => r.metadata.namespace).sort(), [...expected.keys()].sort());
        for (const role of roles) {
          const rules = field(role, 'rules') as Obj[];
          assert.deepEqual(
            rules.map((r) => ({ groups: r.apiGroups, resources: r.resources, verbs: r.verbs })),
            (expected.get(role.metadata.namespace ?? '') ?? []).flatMap((resource) =>
              (GROUPS_OF[resource] ?? ['']).map((group) => ({ groups: [group], resources: [resource], verbs: ['get', 'list', 'watch'] })),
            ),
            `rules of the Role in ${role.metadata.namespace}`,
          );
          const binding = objects.find((o) => o.kind === 'RoleBinding' && o.metadata.namespace === role.metadata.namespace);
          assert.equal(field(binding, 'roleRef', 'name'), role.metadata.name);
          assert.deepEqual(field(binding, 'subjects', 0, 'namespace'), NAMESPACE);
        }
      });

      it('the pod spec (Deployment or sidecar patch) probes the ports the server listens on and is locked down', () => {
        const { config } = serverConfig(objects);
        const deployment = objects.find((o) => o.kind === 'Deployment');
        const podSpec = serverPodSpec(objects);
        const container = serverContainer(objects);
        const ports = new Map((container.ports as Obj[]).map((p) => [p.name as string, p.containerPort as number]));
        assert.equal(ports.get('http-metrics'), portOf(config.listen.http));
        if (config.listen.grpc.startsWith('unix://')) assert.equal(ports.has('grpc'), false);
        else assert.equal(ports.get('grpc'), portOf(config.listen.grpc));
        for (const [probe, path] of [
          ['livenessProbe', '/healthz'],
          ['readinessProbe', '/readyz'],
          ['startupProbe', '/healthz'],
        ] as const) {
          assert.equal(field(container, probe, 'httpGet', 'path'), path, probe);
          assert.equal(
            ports.get(field(container, probe, 'httpGet', 'port') as string),
            portOf(config.listen.http),
            `${probe} targets the HTTP port`,
          );
        }
        const sc = container.securityContext as Obj;
        assert.equal(sc.runAsNonRoot, true);
        assert.equal(sc.readOnlyRootFilesystem, true);
        assert.equal(sc.allowPrivilegeEscalation, false);
        assert.deepEqual(field(sc, 'capabilities', 'drop'), ['ALL']);
        assert.equal(field(sc, 'seccompProfile', 'type'), 'RuntimeDefault');
        if (deployment !== undefined) {
          assert.equal(field(podSpec, 'securityContext', 'runAsNonRoot'), true);
          const grace = podSpec.terminationGracePeriodSeconds as number;
          assert.ok(
            grace * 1000 > config.shutdownDrainMs + config.shutdownGraceMs,
            `terminationGracePeriodSeconds ${grace} outlasts drain + grace`,
          );
          assert.ok((podSpec.topologySpreadConstraints as unknown[]).length > 0);
          assert.match(String(field(deployment, 'spec', 'template', 'metadata', 'annotations', 'checksum/config')), /^[0-9a-f]{64}$/);
        }
      });

      it('the container keeps the entry’s memory settings and a heap limit inside its memory limit', () => {
        const container = serverContainer(objects);
        const env = new Map((container.env as Obj[]).map((e) => [e.name as string, e.value as string | undefined]));
        const nodeOptions = env.get('NODE_OPTIONS') ?? '';
        // A young-generation or GC flag here would switch the entry's own setting off (process-settings.ts).
        assert.deepEqual(flagsToSet([], nodeOptions), flagsToSet([], undefined), `NODE_OPTIONS ${nodeOptions}`);
        const heapMib = Number(/--max-old-space-size=(\d+)/.exec(nodeOptions)?.[1]);
        const requestMib = mebibytes(field(container, 'resources', 'requests', 'memory'));
        const limitMib = mebibytes(field(container, 'resources', 'limits', 'memory'));
        assert.ok(requestMib <= limitMib, `memory request ${requestMib} Mi ≤ limit ${limitMib} Mi`);
        // The heap limit makes V8 collect before the kubelet kills the pod: it must leave the rest
        // of the process (Node's floor, code, buffers) room under the limit.
        assert.ok(heapMib + NON_HEAP_MIB <= limitMib, `--max-old-space-size=${heapMib} + ${NON_HEAP_MIB} Mi ≤ limit ${limitMib} Mi`);
      });

      it('the Services expose gRPC as http2 and the headless variant lists every replica', () => {
        if (objects.some((o) => o.kind === 'EnvoyProxy')) return assert.equal(objects.filter((o) => o.kind === 'Service').length, 0);
        const { config } = serverConfig(objects);
        for (const [name, headless] of [
          [FULLNAME, false],
          [`${FULLNAME}-headless`, true],
        ] as const) {
          const service = only(objects, 'Service', name);
          const grpc = (field(service, 'spec', 'ports') as Obj[]).find((p) => p.name === 'grpc');
          assert.equal(grpc?.appProtocol, 'http2');
          assert.equal(grpc?.port, portOf(config.listen.grpc));
          assert.equal(field(service, 'spec', 'clusterIP'), headless ? 'None' : undefined);
        }
      });

      it('helm test: a Pod runs the server image with --check-config, its env and its config mounts, and that check passes', async () => {
        const pod = only(objects, 'Pod', `${FULLNAME}-check-config`);
        assert.equal(field(pod, 'metadata', 'annotations', 'helm.sh/hook'), 'test');
        assert.equal(field(pod, 'spec', 'restartPolicy'), 'Never');
        assert.equal(field(pod, 'spec', 'automountServiceAccountToken'), false, 'it needs no API access');
        const [check, ...others] = field(pod, 'spec', 'containers') as Obj[];
        assert.equal(others.length, 0);
        const server = serverContainer(objects);
        assert.equal(check.image, server.image);
        assert.deepEqual(check.args, [...(server.args as string[]), '--check-config']);
        assert.deepEqual(check.env, server.env, 'the same environment overrides');
        assert.deepEqual(check.securityContext, server.securityContext);
        const serverMounts = server.volumeMounts as Obj[];
        for (const mount of check.volumeMounts as Obj[])
          assert.ok(serverMounts.some((m) => m.name === mount.name && m.mountPath === mount.mountPath));
        for (const mount of serverMounts.filter((m) => String(m.mountPath).startsWith(CONFIG_DIR)))
          assert.ok(
            (check.volumeMounts as Obj[]).some((m) => m.mountPath === mount.mountPath),
            `mounts ${String(mount.mountPath)}`,
          );
        const { result, configText, env } = await runCheckConfigPod(objects);
        assert.equal(result.code, 0, result.stderr);
        const report = JSON.parse(result.stdout) as { config: unknown };
        assert.deepEqual(
          report.config,
          JSON.parse(JSON.stringify(buildConfig(configText, env))),
          'the effective config is the one the server loads',
        );
      });
    });
  }

  it('inferencePools.objectives=false: the server watches no InferenceObjectives, and the Role grants none (InferenceModelRewrites still)', async () => {
    const objects = await template(['several-namespaces.yaml'], ['--set', 'config.kubernetes.inferencePools.objectives=false']);
    const { config } = serverConfig(objects);
    assert.ok(config.source.kind === 'kubernetes');
    assert.equal(config.source.kubernetes.inferencePools?.objectives, false);
    const role = only(
      objects.filter((o) => o.kind === 'Role' && o.metadata.namespace === 'shared-models'),
      'Role',
    );
    assert.deepEqual(
      (field(role, 'rules') as Obj[]).map((r) => r.resources),
      [['pods'], ['inferencepools'], ['inferencemodelrewrites'], ['inferencemodelrewrites']],
    );
  });
});

describe('chart: helm test catches what the values schema cannot', () => {
  it('a config that breaks a cross-field rule renders, and the check-config Pod exits 1 naming the field', async () => {
    const objects = await template(
      ['static-endpoints.yaml'],
      ['--set', 'config.quarantine.baseSeconds=60', '--set', 'config.quarantine.maxSeconds=30'],
    );
    const { result } = await runCheckConfigPod(objects);
    assert.equal(result.code, 1, result.stdout);
    assert.match(
      result.stderr,
      /^llm-extproc: invalid configuration \(.*config\.yaml\): quarantine\.maxSeconds: must be ≥ quarantine\.baseSeconds \(60\), got 30\n$/,
    );
  });

  it('tests.checkConfig.enabled=false leaves the Pod out', async () => {
    const objects = await template([], ['--set', 'tests.checkConfig.enabled=false']);
    assert.equal(objects.filter((o) => o.kind === 'Pod').length, 0);
  });
});

describe('chart: gateway wiring', () => {
  it('InferencePools point at our Service and are watched by the server (Istio, with a TLS DestinationRule)', async () => {
    const objects = await template(['inferencepool-istio.yaml']);
    const pool = only(objects, 'InferencePool', 'llama');
    assert.equal(pool.apiVersion, 'inference.networking.k8s.io/v1');
    assert.equal(pool.metadata.namespace, NAMESPACE);
    const service = only(objects, 'Service', FULLNAME);
    const grpcPort = (field(service, 'spec', 'ports') as Obj[]).find((p) => p.name === 'grpc')?.port;
    assert.deepEqual(field(pool, 'spec', 'endpointPickerRef'), {
      group: '',
      kind: 'Service',
      name: FULLNAME,
      port: { number: grpcPort },
      failureMode: 'FailClose',
    });
    assert.deepEqual(field(pool, 'spec', 'targetPorts'), [{ number: 8000 }]);
    assert.equal(pool.metadata.annotations?.['llm-extproc.io/models'], 'llama-3-8b');
    const { config } = serverConfig(objects);
    assert.ok(config.source.kind === 'kubernetes');
    assert.deepEqual(config.source.kubernetes.inferencePools?.namespaces, [NAMESPACE]);
    assert.deepEqual(config.listen.tls, {
      mode: 'files',
      certFile: '/etc/llm-extproc/tls/tls.crt',
      keyFile: '/etc/llm-extproc/tls/tls.key',
    });
    const rule = only(objects, 'DestinationRule');
    const host = `${FULLNAME}.${NAMESPACE}.svc.cluster.local`;
    assert.equal(field(rule, 'spec', 'host'), host);
    // Verified against the example's CA ConfigMap and our Service's names (live: live-istio.test.ts).
    assert.deepEqual(field(rule, 'spec', 'trafficPolicy', 'tls'), {
      mode: 'SIMPLE',
      sni: host,
      credentialName: `configmap://${NAMESPACE}/llm-extproc-ca`,
      subjectAltNames: [host, `${FULLNAME}.${NAMESPACE}.svc`],
    });
    const volumes = field(only(objects, 'Deployment'), 'spec', 'template', 'spec', 'volumes') as Obj[];
    assert.equal(
      field(
        volumes.find((v) => v.name === 'llm-extproc-tls'),
        'secret',
        'secretName',
      ),
      'llm-extproc-tls',
    );
  });

  it('Istio: one EnvoyFilter per named gateway, in its namespace, mapping ext_proc failures to gateway_unavailable JSON', async () => {
    const objects = await template(
      ['inferencepool-istio.yaml'],
      ['--set-json', 'gateway.inferencePool.istio.gateways=[{"name":"edge","namespace":"gw"},{"name":"inference-gateway"}]'],
    );
    const filters = objects.filter((o) => o.kind === 'EnvoyFilter');
    assert.deepEqual(
      filters.map((f) => [f.metadata.namespace, field(f, 'spec', 'targetRefs')]),
      [
        ['gw', [{ group: 'gateway.networking.k8s.io', kind: 'Gateway', name: 'edge' }]],
        [NAMESPACE, [{ group: 'gateway.networking.k8s.io', kind: 'Gateway', name: 'inference-gateway' }]],
      ],
    );
    const patch = field(filters[0], 'spec', 'configPatches', 0) as Obj;
    const mappers = field(patch, 'patch', 'value', 'typed_config', 'local_reply_config', 'mappers') as Obj[];
    assert.equal(mappers.length, 1);
    assert.equal(
      field(mappers[0], 'filter', 'extension_filter', 'typed_config', 'expression'),
      "response.code_details.startsWith('ext_proc_error')",
    );
    assert.equal(mappers[0].status_code, CATALOG.gateway_unavailable.status);
    assert.deepEqual(field(mappers[0], 'body_format_override', 'json_format', 'error', 'code'), 'gateway_unavailable');
    assert.equal(
      (await template(['inferencepool-istio.yaml'], ['--set-json', 'gateway.inferencePool.istio.gateways=[]'])).filter(
        (o) => o.kind === 'EnvoyFilter',
      ).length,
      0,
    );
  });

  it('Istio without a CA ConfigMap: TLS to the picker encrypted but not verified (the gateway has no CA to verify with)', async () => {
    const objects = await template(['inferencepool-istio.yaml'], ['--set', 'gateway.inferencePool.istio.caConfigMap=']);
    const host = `${FULLNAME}.${NAMESPACE}.svc.cluster.local`;
    assert.deepEqual(field(only(objects, 'DestinationRule'), 'spec', 'trafficPolicy', 'tls'), {
      mode: 'SIMPLE',
      sni: host,
      insecureSkipVerify: true,
    });
  });

  it("Envoy AI Gateway: single destination, self-signed TLS, AI Gateway's default full-duplex body mode", async () => {
    const objects = await template(['inferencepool-ai-gateway.yaml']);
    const { config } = serverConfig(objects);
    assert.equal(config.routing.destinationFormat, 'single');
    assert.deepEqual(config.listen.tls, { mode: 'self-signed' });
    assert.equal(only(objects, 'InferencePool').metadata.annotations?.['aigateway.envoyproxy.io/processing-body-mode'], undefined);
    assert.equal(field(only(objects, 'InferencePool'), 'spec', 'endpointPickerRef', 'failureMode'), 'FailClose');
    assert.equal(objects.filter((o) => o.kind === 'DestinationRule').length, 0);
  });

  it('Envoy AI Gateway: FailOpen is refused (AI Gateway ignores it); buffered mode renders the annotation', async () => {
    const example = join(CHART, 'examples', 'inferencepool-ai-gateway.yaml');
    const refused = await helm(['template', RELEASE, CHART, '-f', example, '--set', 'gateway.inferencePool.failureMode=FailOpen'], home);
    assert.notEqual(refused.code, 0);
    assert.match(refused.stderr, /FailOpen is ignored by Envoy AI Gateway/);
    const buffered = ['-f', example, '--set', 'gateway.inferencePool.aiGateway.processingBodyMode=buffered'];
    const objects = await template([], buffered);
    assert.equal(only(objects, 'InferencePool').metadata.annotations?.['aigateway.envoyproxy.io/processing-body-mode'], 'buffered');
    // The warning is in NOTES.txt, which only `helm install` renders: live-envoy-gateway.test.ts
    // checks it against a real API server.
  });

  it('plain Envoy Gateway: the extension policy calls our Service with our modes, and the endpoint override reads our header', async () => {
    const objects = await template(['envoy-gateway.yaml']);
    const policy = only(objects, 'EnvoyExtensionPolicy');
    const extProc = field(policy, 'spec', 'extProc', 0) as Obj;
    assert.deepEqual(field(extProc, 'backendRefs'), [{ name: FULLNAME, port: 9002 }]);
    assert.equal(extProc.failOpen, false);
    assert.deepEqual(field(extProc, 'processingMode'), {
      allowModeOverride: true,
      request: { body: 'Buffered' },
      response: { body: 'Streamed', attributes: ['response.code_details', 'response.flags', 'upstream.address'] },
    });
    assert.deepEqual(field(extProc, 'metadata', 'writableNamespaces'), [DESTINATION_METADATA_NAMESPACE]);
    const traffic = only(objects, 'BackendTrafficPolicy');
    assert.deepEqual(field(traffic, 'spec', 'loadBalancer', 'endpointOverride', 'extractFrom'), [{ header: DESTINATION_HEADER }]);
    assert.deepEqual(field(traffic, 'spec', 'targetRefs'), field(policy, 'spec', 'targetRefs'));
  });

  it('plain Envoy Gateway: buffer limits fit routing.maxRequestBodyBytes, an hour of request timeout, JSON when llm-extproc is unreachable', async () => {
    const objects = await template(['envoy-gateway.yaml'], ['--set', 'config.routing.maxRequestBodyBytes=1048576']);
    const limit = String(Math.max(1048576, 4 * 1024 * 1024) + 64 * 1024); // the larger of the request and inspected-answer limits
    const client = only(objects, 'ClientTrafficPolicy');
    assert.deepEqual(field(client, 'spec', 'targetRefs'), [{ group: 'gateway.networking.k8s.io', kind: 'Gateway', name: 'llm-gateway' }]);
    assert.equal(field(client, 'spec', 'connection', 'bufferLimit'), limit);
    const traffic = only(objects, 'BackendTrafficPolicy');
    assert.equal(field(traffic, 'spec', 'connection', 'bufferLimit'), limit);
    assert.equal(field(traffic, 'spec', 'timeout', 'http', 'requestTimeout'), '1h');
    assert.equal(field(only(objects, 'EnvoyExtensionPolicy'), 'spec', 'extProc', 0, 'backendSettings', 'connection', 'bufferLimit'), limit);
    const override = field(traffic, 'spec', 'responseOverride', 0) as Obj;
    assert.deepEqual(field(override, 'match'), { statusCodes: [{ type: 'Value', value: 500 }] });
    assert.equal(override.source, 'Local');
    const body = JSON.parse(String(field(override, 'response', 'body', 'inline'))) as {
      error: { code: string; type: string; request_id: string };
    };
    assert.equal(body.error.code, CATALOG.gateway_unavailable.code);
    assert.equal(body.error.request_id, '%REQ(X-REQUEST-ID)%', "Envoy's request id, substituted by Envoy");
    assert.equal(body.error.type, CATALOG.gateway_unavailable.type);
    assert.equal(field(override, 'response', 'statusCode'), CATALOG.gateway_unavailable.status);
    assert.deepEqual(field(override, 'response', 'header', 'set'), [
      { name: 'retry-after', value: String(CATALOG.gateway_unavailable.retryAfterSeconds) },
      { name: ERROR_CODE_HEADER, value: CATALOG.gateway_unavailable.code },
    ]);
  });

  it('plain Envoy Gateway: each fix can be switched off; the Gateway for the buffer limit is required otherwise', async () => {
    const off = await template(
      ['envoy-gateway.yaml'],
      [
        '--set',
        'gateway.envoyGateway.bufferLimit.enabled=false,gateway.envoyGateway.requestTimeout=,gateway.envoyGateway.unreachableJson=false',
      ],
    );
    assert.equal(off.filter((o) => o.kind === 'ClientTrafficPolicy').length, 0);
    const spec = field(only(off, 'BackendTrafficPolicy'), 'spec') as Obj;
    assert.deepEqual(Object.keys(spec).sort(), ['loadBalancer', 'targetRefs']);
    assert.equal(field(only(off, 'EnvoyExtensionPolicy'), 'spec', 'extProc', 0, 'backendSettings'), undefined);
    const res = await helm(
      [
        'template',
        RELEASE,
        CHART,
        '-f',
        join(CHART, 'examples', 'envoy-gateway.yaml'),
        '--set',
        'gateway.envoyGateway.bufferLimit.gateway.name=',
      ],
      home,
    );
    assert.notEqual(res.code, 0);
    assert.match(res.stderr, /gateway\.envoyGateway\.bufferLimit\.gateway\.name: name the Gateway/);
  });

  it('Envoy Gateway sidecar: no Deployment; Envoy reaches the socket the server listens on', async () => {
    const objects = await template(['envoy-gateway-sidecar.yaml']);
    assert.equal(objects.filter((o) => o.kind === 'Deployment' || o.kind === 'Service').length, 0);
    const { config } = serverConfig(objects);
    const socket = field(only(objects, 'Backend'), 'spec', 'endpoints', 0, 'unix', 'path');
    assert.equal(`unix://${String(socket)}`, config.listen.grpc);
    const policy = only(objects, 'EnvoyExtensionPolicy');
    assert.deepEqual(field(policy, 'spec', 'extProc', 0, 'backendRefs'), [
      { group: 'gateway.envoyproxy.io', kind: 'Backend', name: `${FULLNAME}-socket` },
    ]);
    const podSpec = field(
      only(objects, 'EnvoyProxy'),
      'spec',
      'provider',
      'kubernetes',
      'envoyDeployment',
      'patch',
      'value',
      'spec',
      'template',
      'spec',
    ) as Obj;
    const mountsOf = (name: string): unknown[] =>
      (
        field(
          (podSpec.containers as Obj[]).find((c) => c.name === name),
          'volumeMounts',
        ) as Obj[]
      )
        .filter((m) => m.name === 'llm-extproc-socket')
        .map((m) => m.mountPath);
    assert.deepEqual(mountsOf('envoy'), mountsOf('llm-extproc'));
    assert.equal(String(socket).startsWith(String(mountsOf('envoy')[0])), true);
    const binding = only(objects, 'RoleBinding');
    assert.equal(field(binding, 'subjects', 0, 'name'), 'llm-gateway');
  });

  const plainEnvoy: ReadonlyArray<{ values: string; extra: readonly string[]; tls: boolean }> = [
    { values: 'envoy.yaml', extra: [], tls: false },
    { values: 'envoy.yaml', extra: ['--set', 'tls.enabled=true'], tls: true },
    { values: 'static-endpoints.yaml', extra: [], tls: false },
  ];
  for (const { values, extra, tls } of plainEnvoy) {
    it(`plain Envoy (${values}${tls ? ', TLS to the picker' : ''}): the rendered Envoy config passes envoy --mode validate and targets our headless Service`, async () => {
      const objects = await template([values], extra);
      const envoyYaml = field(only(objects, 'ConfigMap', `${FULLNAME}-envoy`), 'data', 'envoy.yaml') as string;
      assert.doesNotMatch(envoyYaml, /[a-z-]+\.placeholder\.invalid|port_value: 6500[1-4]/, 'every placeholder was replaced');
      assert.match(envoyYaml, new RegExp(`address: ${FULLNAME}-headless\\.${NAMESPACE}\\.svc\\.cluster\\.local\\n\\s+port_value: 9002`));
      const { config } = serverConfig(objects);
      assert.match(envoyYaml, new RegExp(`per_connection_buffer_limit_bytes: ${config.routing.maxRequestBodyBytes + 65536}\\n`));
      assert.equal(
        envoyYaml.includes('envoy.extensions.transport_sockets.tls.v3.UpstreamTlsContext'),
        tls,
        'TLS to llm-extproc exactly when the server listens with TLS',
      );
      assert.equal(config.listen.tls !== undefined, tls);
      const file = join(home, `envoy-${tls ? 'tls-' : ''}${values}`);
      writeFileSync(file, envoyYaml);
      const res = await run(envoyBinaryPath(), ['--mode', 'validate', '--config-path', file, '--log-level', 'error']);
      assert.equal(res.code, 0, `envoy --mode validate failed:\n${res.stdout}\n${res.stderr}`);
    });
  }
});

describe('chart: each replica names itself for access-log forwarding (peerForwarding)', () => {
  /** The container's environment as the kubelet expands it, with `podIP` for the downward API. */
  function expandedEnv(objects: readonly K8sObject[], podIP: string): Record<string, string> {
    const env: Record<string, string> = {};
    for (const e of serverContainer(objects).env as Obj[]) {
      const fromPod = field(e, 'valueFrom', 'fieldRef', 'fieldPath');
      const value = fromPod === 'status.podIP' ? podIP : typeof e.value === 'string' ? e.value : '';
      env[e.name as string] = value.replace(/\$\((\w+)\)/g, (_, name: string) => env[name] ?? '');
    }
    return env;
  }

  it('auto, with the chart’s Envoy (which sends the access log): listen.peerAddress is the pod IP and ports.grpc, and the server accepts it', async () => {
    const objects = await template(['envoy.yaml'], ['--set', 'ports.grpc=9100']);
    const env = expandedEnv(objects, '10.244.1.7');
    assert.equal(env.LLM_EXTPROC_PEER_ADDRESS, '10.244.1.7:9100');
    assert.equal(buildConfig(serverConfig(objects).text, env).listen.peerAddress, '10.244.1.7:9100');
  });

  it('true, where the operator wired the gateway’s access log (TLS on, as in the InferencePool examples): the same address, accepted', async () => {
    const objects = await template(['inferencepool-istio.yaml'], ['--set', 'ports.grpc=9100', '--set', 'peerForwarding=true']);
    const env = expandedEnv(objects, '10.244.1.7');
    assert.equal(env.LLM_EXTPROC_PEER_ADDRESS, '10.244.1.7:9100');
    assert.equal(buildConfig(serverConfig(objects).text, env).listen.peerAddress, '10.244.1.7:9100');
  });

  it('off: auto without the chart’s Envoy (no access log is known to come, and each break would wait 3 s for one) or with mutual TLS, false, and the Envoy Gateway sidecar mode', async () => {
    for (const objects of [
      await template([]),
      await template(['inferencepool-istio.yaml']),
      await template(['envoy-gateway.yaml']),
      await template(['envoy.yaml'], ['--set', 'peerForwarding=false']),
      await template(['envoy-gateway-sidecar.yaml'], ['--set', 'peerForwarding=true']),
    ]) {
      assert.equal(expandedEnv(objects, '10.244.1.7').LLM_EXTPROC_PEER_ADDRESS, undefined);
    }
  });
});

describe('chart: mutual TLS on the gRPC port', () => {
  it('tls.clientCaSecretName mounts the Secret’s ca.crt and sets listen.tls.clientCaFile; the check-config Pod accepts it', async () => {
    const objects = await template(
      ['inferencepool-istio.yaml'],
      ['--set', 'tls.clientCaSecretName=gateway-client-ca', '--set', 'peerForwarding=false'],
    );
    const { config } = serverConfig(objects);
    assert.deepEqual(config.listen.tls, {
      mode: 'files',
      certFile: `${CONFIG_DIR}/tls/tls.crt`,
      keyFile: `${CONFIG_DIR}/tls/tls.key`,
      clientCaFile: `${CONFIG_DIR}/client-ca/ca.crt`,
    });
    const volume = (serverPodSpec(objects).volumes as Obj[]).find((v) => v.name === 'llm-extproc-client-ca');
    assert.deepEqual(field(volume, 'secret'), { secretName: 'gateway-client-ca', items: [{ key: 'ca.crt', path: 'ca.crt' }] });
    const mounts = serverContainer(objects).volumeMounts as Obj[];
    assert.ok(mounts.some((m) => m.name === 'llm-extproc-client-ca' && m.mountPath === `${CONFIG_DIR}/client-ca`));
    const { result } = await runCheckConfigPod(objects);
    assert.equal(result.code, 0, result.stderr);
  });

  it('is refused without tls.secretName, with a message', async () => {
    const res = await helm(
      ['template', RELEASE, CHART, '--set', 'tls.enabled=true', '--set', 'tls.clientCaSecretName=gateway-client-ca'],
      home,
    );
    assert.notEqual(res.code, 0);
    // Pointing at the template that holds the rule, not at the first template that rendered the config.
    assert.match(res.stderr, /at \(llm-extproc\/templates\/validate\.yaml:\d+:\d+\): tls\.clientCaSecretName needs tls\.secretName/);
  });
});

describe('chart: refuses at helm template what the cluster, the pod or the gateway would refuse', () => {
  const cases: ReadonlyArray<{ name: string; values?: string; set: string[]; message: string }> = [
    {
      name: 'HPA bounds the wrong way round (the API server refuses the HPA)',
      set: ['autoscaling.enabled=true', 'autoscaling.minReplicas=5', 'autoscaling.maxReplicas=2'],
      message: 'autoscaling.minReplicas (5) is above autoscaling.maxReplicas (2): the API server refuses such a HorizontalPodAutoscaler',
    },
    {
      name: 'gRPC and HTTP on one port (the pod would crash on the second bind)',
      set: ['ports.grpc=9090'],
      message:
        'ports.grpc and ports.http are both 9090: the server listens on each, so the second would fail to bind; give them different ports',
    },
    {
      name: 'a client CA without TLS (silently ignored before)',
      set: ['tls.clientCaSecretName=gateway-client-ca'],
      message: 'tls.clientCaSecretName needs tls.enabled: mutual TLS is TLS on the gRPC port (set tls.enabled=true and tls.secretName)',
    },
    {
      name: 'peer forwarding with mutual TLS (the peers present no client certificate)',
      values: 'inferencepool-istio.yaml',
      set: ['tls.clientCaSecretName=gateway-client-ca', 'peerForwarding=true'],
      message:
        'peerForwarding with tls.clientCaSecretName: the replicas forward access-log entries to each other with no client certificate, and mutual TLS would refuse them; set peerForwarding=false or drop tls.clientCaSecretName',
    },
    {
      name: 'a certificate Secret without TLS (silently ignored before)',
      set: ['tls.secretName=llm-extproc-tls'],
      message: 'tls.secretName needs tls.enabled: without it the gRPC port stays plaintext and the Secret is not mounted',
    },
    {
      name: 'an Istio CA without the DestinationRule that uses it',
      values: 'inferencepool-istio.yaml',
      set: ['gateway.inferencePool.istio.destinationRule=false'],
      message:
        'gateway.inferencePool.istio.caConfigMap needs gateway.inferencePool.istio.destinationRule: the CA is used by the DestinationRule that makes Istio speak TLS to the picker',
    },
    {
      name: 'an Istio CA with a self-signed certificate (Istio would refuse it)',
      values: 'inferencepool-istio.yaml',
      set: ['tls.secretName='],
      message:
        'gateway.inferencePool.istio.caConfigMap needs tls.secretName: a certificate made at start (no secretName) is signed by no CA, so Istio would refuse it',
    },
    {
      name: 'config.static with config.kubernetes (the server refuses both)',
      values: 'one-namespace.yaml',
      set: ['config.static.path=/srv/endpoints.yaml'],
      message: 'config.static and config.kubernetes are both set: the server refuses both; choose one endpoint source',
    },
    {
      name: 'config.static with InferencePools the chart creates',
      values: 'inferencepool-istio.yaml',
      set: ['config.static.path=/srv/endpoints.yaml'],
      message:
        'gateway.inferencePool.pools creates InferencePools the server must watch (a Kubernetes source), so staticEndpoints and config.static cannot be used with it; choose one endpoint source',
    },
  ];
  for (const c of cases) {
    it(c.name, async () => {
      const res = await helm(
        [
          'template',
          RELEASE,
          CHART,
          '--namespace',
          NAMESPACE,
          ...(c.values === undefined ? [] : ['-f', join(CHART, 'examples', c.values)]),
          ...c.set.flatMap((set) => ['--set', set]),
        ],
        home,
      );
      assert.notEqual(res.code, 0, 'refused');
      assert.match(res.stderr, /^Error: execution error at \(llm-extproc\/templates\/validate\.yaml:\d+:\d+\): /);
      assert.ok(res.stderr.includes(`): ${c.message}\n`), res.stderr);
    });
  }

  it('sidecar mode: equal ports are fine (gRPC is a Unix socket there)', async () => {
    const objects = await template(['envoy-gateway-sidecar.yaml'], ['--set', 'ports.grpc=9090']);
    assert.match(serverConfig(objects).config.listen.grpc, /^unix:\/\//);
  });
});

describe('chart: the model’s tokenizer files (precise prefix matching)', () => {
  const precise = ['--set', 'config.picker.precise.events.port=5557'];

  it('tokenizer.configMap is mounted read-only and named as config.picker.precise.tokenizerDir; the check-config Pod accepts it', async () => {
    const objects = await template(['inferencepool-istio.yaml'], [...precise, '--set', 'tokenizer.configMap=llama-tokenizer']);
    const { config } = serverConfig(objects);
    assert.equal(config.picker.precise?.tokenizerDir, `${CONFIG_DIR}/tokenizer`);
    const volume = (serverPodSpec(objects).volumes as Obj[]).find((v) => v.name === 'llm-extproc-tokenizer');
    assert.deepEqual(field(volume, 'configMap'), { name: 'llama-tokenizer' });
    const mounts = serverContainer(objects).volumeMounts as Obj[];
    assert.ok(mounts.some((m) => m.name === 'llm-extproc-tokenizer' && m.mountPath === `${CONFIG_DIR}/tokenizer` && m.readOnly === true));
    const { result } = await runCheckConfigPod(objects);
    assert.equal(result.code, 0, result.stderr);
  });

  it('tokenizer.volume: any volume source, with subPath for the files’ directory inside it', async () => {
    const objects = await template(
      ['inferencepool-istio.yaml'],
      [...precise, '--set', 'tokenizer.volume.persistentVolumeClaim.claimName=models', '--set', 'tokenizer.subPath=llama-3-8b'],
    );
    const volume = (serverPodSpec(objects).volumes as Obj[]).find((v) => v.name === 'llm-extproc-tokenizer');
    assert.deepEqual(field(volume, 'persistentVolumeClaim'), { claimName: 'models' });
    const mount = (serverContainer(objects).volumeMounts as Obj[]).find((m) => m.name === 'llm-extproc-tokenizer');
    assert.equal(mount?.subPath, 'llama-3-8b');
    assert.equal(serverConfig(objects).config.picker.precise?.tokenizerDir, `${CONFIG_DIR}/tokenizer`);
  });

  it('precise without tokenizer files is refused with a message; without precise nothing is mounted', async () => {
    const res = await helm(['template', RELEASE, CHART, ...precise], home);
    assert.notEqual(res.code, 0);
    assert.match(res.stderr, /config\.picker\.precise needs the model's tokenizer files: set tokenizer\.configMap or tokenizer\.volume/);
    const plain = await template(['inferencepool-istio.yaml']);
    assert.ok(!(serverPodSpec(plain).volumes as Obj[]).some((v) => v.name === 'llm-extproc-tokenizer'));
  });
});

describe('chart: NetworkPolicy', () => {
  const EG_PROXIES = {
    namespaceSelector: { matchLabels: { 'kubernetes.io/metadata.name': 'envoy-gateway-system' } },
    podSelector: { matchLabels: { 'app.kubernetes.io/name': 'envoy', 'app.kubernetes.io/component': 'proxy' } },
  };
  const RELEASE_NAMESPACE_PODS = { podSelector: {} };
  const ANY_GATEWAY_API_POD = {
    namespaceSelector: {},
    podSelector: { matchExpressions: [{ key: 'gateway.networking.k8s.io/gateway-name', operator: 'Exists' }] },
  };
  const istioGateway = (name: string, namespace: string): Obj => ({
    namespaceSelector: { matchLabels: { 'kubernetes.io/metadata.name': namespace } },
    podSelector: { matchLabels: { 'gateway.networking.k8s.io/gateway-name': name } },
  });
  const MONITORING = { namespaceSelector: { matchLabels: { 'kubernetes.io/metadata.name': 'monitoring' } } };

  /** The peers allowed to each named container port, checked against the pods the policy selects. */
  function ingressByPort(objects: readonly K8sObject[]): Map<string, unknown> {
    const policy = only(objects, 'NetworkPolicy', FULLNAME);
    assert.deepEqual(field(policy, 'spec', 'policyTypes'), ['Ingress'], 'egress (API server, model servers) stays open');
    const template = field(only(objects, 'Deployment', FULLNAME), 'spec', 'template', 'metadata', 'labels') as Obj;
    for (const [key, value] of Object.entries(field(policy, 'spec', 'podSelector', 'matchLabels') as Obj))
      assert.equal(template[key], value, `the policy selects our pods (${key})`);
    const containerPorts = new Set((serverContainer(objects).ports as Obj[]).map((p) => p.name));
    const byPort = new Map<string, unknown>();
    for (const rule of field(policy, 'spec', 'ingress') as Obj[]) {
      const ports = rule.ports as Obj[];
      assert.equal(ports.length, 1);
      assert.ok(containerPorts.has(ports[0].port), `port ${String(ports[0].port)} is a container port name`);
      byPort.set(ports[0].port as string, rule.from);
    }
    assert.deepEqual([...byPort.keys()].sort(), ['grpc', 'http-metrics']);
    return byPort;
  }

  // `forwarding`: peerForwarding's auto is on there (the chart's Envoy sends the access log), so our replicas reach each other's gRPC port.
  const cases: ReadonlyArray<{ name: string; values: string[]; extra?: string[]; grpc: unknown[]; forwarding?: true }> = [
    { name: 'plain Envoy Gateway: its proxy pods in its namespace', values: ['envoy-gateway.yaml'], grpc: [EG_PROXIES] },
    { name: 'Envoy AI Gateway: the Envoy Gateway proxies it runs on', values: ['inferencepool-ai-gateway.yaml'], grpc: [EG_PROXIES] },
    {
      name: 'Istio: each named Gateway’s pods, in its namespace',
      values: ['inferencepool-istio.yaml'],
      extra: ['--set-json', 'gateway.inferencePool.istio.gateways=[{"name":"edge","namespace":"gw"},{"name":"inference-gateway"}]'],
      grpc: [istioGateway('edge', 'gw'), istioGateway('inference-gateway', NAMESPACE)],
    },
    {
      name: 'kgateway (an InferencePool gateway without a block of its own): Gateway API gateway pods',
      values: ['inferencepool-kgateway.yaml'],
      grpc: [ANY_GATEWAY_API_POD],
    },
    { name: 'plain Envoy: pods of the release namespace', values: ['envoy.yaml'], grpc: [RELEASE_NAMESPACE_PODS], forwarding: true },
    { name: 'no gateway block: pods of the release namespace', values: ['one-namespace.yaml'], grpc: [RELEASE_NAMESPACE_PODS] },
    {
      name: 'Envoy Gateway proxies in the Gateway’s namespace (GatewayNamespace deploy mode)',
      values: ['envoy-gateway.yaml'],
      extra: ['--set', 'networkPolicy.grpc.envoyGatewayNamespace=edge'],
      grpc: [{ ...EG_PROXIES, namespaceSelector: { matchLabels: { 'kubernetes.io/metadata.name': 'edge' } } }],
    },
    {
      name: 'networkPolicy.grpc.from replaces the default',
      values: ['envoy-gateway.yaml'],
      extra: ['--set-json', 'networkPolicy.grpc.from=[{"podSelector":{"matchLabels":{"app":"my-envoy"}}}]'],
      grpc: [{ podSelector: { matchLabels: { app: 'my-envoy' } } }],
    },
  ];
  /** The release's own pods: they forward each other the access-log entries of their streams (peerForwarding). */
  function ourReplicas(objects: readonly K8sObject[]): Obj {
    return { podSelector: field(only(objects, 'NetworkPolicy', FULLNAME), 'spec', 'podSelector') };
  }

  for (const c of cases) {
    it(`on by default; gRPC only from the gateway${c.forwarding ? ' and our replicas' : ''} — ${c.name}; HTTP from the monitoring namespace`, async () => {
      const objects = await template(c.values, c.extra ?? []);
      const byPort = ingressByPort(objects);
      assert.deepEqual(byPort.get('grpc'), c.forwarding ? [...c.grpc, ourReplicas(objects)] : c.grpc);
      assert.deepEqual(byPort.get('http-metrics'), [MONITORING]);
    });
  }

  it('peerForwarding on: gRPC also from our replicas (they forward each other access-log entries)', async () => {
    const objects = await template(['envoy-gateway.yaml'], ['--set', 'peerForwarding=true']);
    assert.deepEqual(ingressByPort(objects).get('grpc'), [EG_PROXIES, ourReplicas(objects)]);
  });

  it('the monitoring namespace and more HTTP peers come from values; networkPolicy.enabled=false leaves it out', async () => {
    const byPort = ingressByPort(
      await template(
        [],
        [
          '--set',
          'networkPolicy.http.monitoringNamespace=prom',
          '--set-json',
          'networkPolicy.http.from=[{"ipBlock":{"cidr":"10.1.0.0/16"}}]',
        ],
      ),
    );
    assert.deepEqual(byPort.get('http-metrics'), [
      { namespaceSelector: { matchLabels: { 'kubernetes.io/metadata.name': 'prom' } } },
      { ipBlock: { cidr: '10.1.0.0/16' } },
    ]);
    assert.equal((await template([], ['--set', 'networkPolicy.enabled=false'])).filter((o) => o.kind === 'NetworkPolicy').length, 0);
  });

  it('Envoy Gateway sidecar: none (no pods of ours; the gRPC listener is a Unix socket in the Envoy pod)', async () => {
    assert.equal((await template(['envoy-gateway-sidecar.yaml'])).filter((o) => o.kind === 'NetworkPolicy').length, 0);
  });
});

describe('chart: /debug/endpoints', () => {
  /** Starts the real program on the chart's rendered config (static endpoints example), on loopback ports. */
  async function debugEndpointsStatus(extra: readonly string[]): Promise<{ status: number; body: string }> {
    const objects = await template(['static-endpoints.yaml'], extra);
    const dir = mkdtempSync(join(home, 'debug-'));
    const data = field(only(objects, 'ConfigMap', FULLNAME), 'data') as Record<string, string>;
    for (const [name, text] of Object.entries(data)) {
      const local = text.replaceAll(CONFIG_DIR, dir).replace(/0\.0\.0\.0:\d+/g, '127.0.0.1:0');
      writeFileSync(join(dir, name), local);
    }
    const server = await startExtprocProcess({ configPath: join(dir, 'config.yaml') });
    try {
      const response = await fetch(`http://127.0.0.1:${server.httpPort}/debug/endpoints`);
      return { status: response.status, body: await response.text() };
    } finally {
      await server.kill();
    }
  }

  it('is off by default: the server the chart configures answers 404; debugEndpoints=true serves the cache', async () => {
    const off = await debugEndpointsStatus([]);
    assert.equal(off.status, 404, off.body);
    assert.doesNotMatch(off.body, /10\.0\.0\.5/, 'no pod address leaks');
    const on = await debugEndpointsStatus(['--set', 'debugEndpoints=true']);
    assert.equal(on.status, 200, on.body);
    const view = JSON.parse(on.body) as { pools: Array<{ endpoints: Array<{ address: string }> }> };
    assert.deepEqual(view.pools[0].endpoints.map((e) => e.address).sort(), ['10.0.0.5:8000', '10.0.0.6:8000']);
  });
});

/** Every rule templates/prometheusrule.yaml ships, in its order (docs/helm.md, "Alerts"). */
const SHIPPED_RULES = [
  'LlmExtprocModelNoReadyReplica',
  'LlmExtprocPoolNoReadyReplica',
  'LlmExtprocErrorRatioHigh',
  'LlmExtprocMidStreamFailures',
  'llm_extproc:requests_cancelled:rate5m',
  'LlmExtprocKubernetesWatchRestarts',
  'LlmExtprocEndpointCacheStale',
  'LlmExtprocReplicaSlowerThanPool',
];

describe('chart: monitoring', () => {
  it('ships the Grafana dashboard with the sidecar-discovery label, a ServiceMonitor on the metrics port and the alerts', async () => {
    const objects = await template(['one-namespace.yaml']);
    const dashboard = only(objects, 'ConfigMap', `${FULLNAME}-dashboard`);
    assert.equal(dashboard.metadata.labels?.['grafana_dashboard'], '1');
    assert.deepEqual(
      JSON.parse(field(dashboard, 'data', 'llm-extproc.json') as string),
      JSON.parse(readFileSync(join(CHART, 'files', 'grafana-dashboard.json'), 'utf8')),
    );
    const monitor = only(objects, 'ServiceMonitor');
    assert.equal(field(monitor, 'spec', 'endpoints', 0, 'port'), 'http-metrics');
    const scraped = objects.filter(
      (o) =>
        o.kind === 'Service' &&
        Object.entries(field(monitor, 'spec', 'selector', 'matchLabels') as Obj).every(([k, v]) => o.metadata.labels?.[k] === v),
    );
    assert.deepEqual(
      scraped.map((o) => o.metadata.name),
      [FULLNAME],
      'one Service scraped, so each pod is scraped once',
    );
    assert.deepEqual(
      rulesOf(only(objects, 'PrometheusRule')).map((r) => r.name),
      SHIPPED_RULES,
    );
  });

  it('the results the rules select by name are those the server creates at 0 for every model (ALERTED_RESULTS)', async () => {
    const rules = rulesOf(only(await template(['one-namespace.yaml']), 'PrometheusRule'));
    const codes = [...Object.keys(CATALOG), ...CANCELLATION_KINDS];
    const selected = new Set<string>();
    for (const rule of rules) {
      for (const m of rule.expr.matchAll(/llm_extproc_requests_total\{result(=~?)"([^"]*)"\}/g)) {
        const pattern = new RegExp(`^(?:${m[2]})$`);
        for (const code of codes) if (m[1] === '=' ? code === m[2] : pattern.test(code)) selected.add(code);
      }
    }
    assert.deepEqual([...selected].sort(), [...ALERTED_RESULTS].sort());
  });

  it('renders every alert and recording rule with labels set on the PrometheusRule too', async () => {
    const objects = await template(['one-namespace.yaml'], ['--set', 'metrics.prometheusRule.labels.release=kube-prometheus']);
    const rule = only(objects, 'PrometheusRule');
    assert.equal(rule.metadata.labels?.['release'], 'kube-prometheus');
    assert.deepEqual(
      rulesOf(rule).map((r) => r.name),
      SHIPPED_RULES,
    );
  });
});

describe('chart: a config change rolls the pods', () => {
  const checksum = async (extra: readonly string[]): Promise<unknown> =>
    field(
      only(await template(['one-namespace.yaml'], extra), 'Deployment'),
      'spec',
      'template',
      'metadata',
      'annotations',
      'checksum/config',
    );
  it('the checksum changes with the config and only with it', async () => {
    const base = await checksum([]);
    assert.notEqual(await checksum(['--set', 'config.logLevel=debug']), base);
    assert.notEqual(await checksum(['--set', 'tls.enabled=true']), base);
    assert.equal(await checksum(['--set', 'replicaCount=5']), base);
  });
});

describe('chart: values.schema.json', () => {
  it('is generated from the server schema (no drift), and so are files/envoy', () => {
    for (const [path, content] of chartFiles())
      assert.equal(readFileSync(join(repoRoot(), path), 'utf8'), content, `${path} is stale: run npm run chart:files`);
    const schema = JSON.parse(readFileSync(join(CHART, 'values.schema.json'), 'utf8')) as Obj;
    const config = field(schema, 'properties', 'config', 'properties') as Obj;
    const server = JSON.parse(JSON.stringify(configFileSchema.properties)) as Obj;
    delete server.listen;
    // The one difference: the chart names picker.precise.tokenizerDir itself when `tokenizer` mounts the files.
    const precise = field(server, 'picker', 'properties', 'precise') as { required: string[] };
    precise.required = precise.required.filter((name) => name !== 'tokenizerDir');
    assert.deepEqual(config, server);
  });

  const bad: ReadonlyArray<{ set: string; field: RegExp }> = [
    { set: 'config.logLevel=loud', field: /\/config\/logLevel/ },
    { set: 'config.routing.destinationFormat=csv', field: /\/config\/routing\/destinationFormat/ },
    { set: 'config.routing.fallbacks=-1', field: /\/config\/routing\/fallbacks/ },
    { set: 'config.quarantine.consecutiveFailures=0', field: /\/config\/quarantine\/consecutiveFailures/ },
    { set: 'config.routng.fallbacks=1', field: /\/config.*routng/ },
    { set: 'config.kubernetes.pools[0].name=x', field: /\/config\/kubernetes\/pools\/0/ },
    { set: 'ports.grpc=0', field: /\/ports\/grpc/ },
    { set: 'gateway.inferencePool.failureMode=Sometimes', field: /\/gateway\/inferencePool\/failureMode/ },
    { set: 'replicas=3', field: /replicas/ },
  ];
  for (const c of bad) {
    it(`refuses --set ${c.set} naming the field`, async () => {
      const res = await helm(['template', RELEASE, CHART, '--namespace', NAMESPACE, '--set', c.set], home);
      assert.notEqual(res.code, 0);
      assert.match(res.stderr, /values don't meet the specifications of the schema/);
      assert.match(res.stderr, c.field);
    });
  }

  it('refuses values the templates cannot honour, with a message', async () => {
    const res = await helm(
      [
        'template',
        RELEASE,
        CHART,
        '-f',
        join(CHART, 'examples', 'one-namespace.yaml'),
        '-f',
        join(CHART, 'examples', 'static-endpoints.yaml'),
      ],
      home,
    );
    assert.notEqual(res.code, 0);
    assert.match(res.stderr, /staticEndpoints and config\.kubernetes are both set/);
  });
});
