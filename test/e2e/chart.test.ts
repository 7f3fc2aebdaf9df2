// The Helm chart as an operator meets it: `helm lint` and `helm template` (the real Helm v3.22
// binary) over the default values and one realistic values file per gateway; the rendered
// manifests are parsed and checked for what would break an install (RBAC, probes on the ports the
// server listens on, securityContext, a config the server accepts, an Envoy config Envoy accepts,
// a checksum that rolls the pods), and values.schema.json refuses bad values naming the field.
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { CATALOG } from '../../src/errors/catalog.js';
import { mkdtempSync, readFileSync, readdirSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { buildConfig } from '../../src/config/config.js';
import type { Config } from '../../src/config/config.js';
import { configFileSchema } from '../../src/config/schema.js';
import { parseStaticEndpoints } from '../../src/endpoints/static-file.js';
import { DESTINATION_HEADER, DESTINATION_METADATA_NAMESPACE } from '../../src/extproc/protocol-names.js';
import { repoRoot } from '../../scripts/repo-root.js';
import { CHART_DIR, chartFiles } from '../../scripts/chart/chart-files.js';
import { envoyBinaryPath } from '../support/envoy-binary.js';
import { helm, parseManifests, run } from '../support/helm.js';
import type { K8sObject } from '../support/helm.js';

const CHART = join(repoRoot(), CHART_DIR);
const NAMESPACE = 'llm';
const RELEASE = 'gw';
const FULLNAME = `${RELEASE}-llm-extproc`;
const EXAMPLES = readdirSync(join(CHART, 'examples'))
  .filter((f) => f.endsWith('.yaml'))
  .sort();

type Obj = Record<string, unknown>;
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
          for (const ns of config.source.kubernetes.inferencePools?.namespaces ?? []) expected.set(ns, ['pods', 'inferencepools']);
        }
        const roles = objects.filter((o) => o.kind === 'Role');
        assert.deepEqual(roles.map((r) => r.metadata.namespace).sort(), [...expected.keys()].sort());
        for (const role of roles) {
          const rules = field(role, 'rules') as Obj[];
          assert.deepEqual(
            rules.map((r) => ({ groups: r.apiGroups, resources: r.resources, verbs: r.verbs })),
            (expected.get(role.metadata.namespace ?? '') ?? []).map((resource) => ({
              groups: [resource === 'pods' ? '' : 'inference.networking.k8s.io'],
              resources: [resource],
              verbs: ['get', 'list', 'watch'],
            })),
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
        const podSpec = (
          deployment !== undefined
            ? field(deployment, 'spec', 'template', 'spec')
            : field(
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
              )
        ) as Obj;
        const container = (podSpec.containers as Obj[]).find((c) => c.name === 'llm-extproc') as Obj;
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
    });
  }
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

  it('Envoy AI Gateway: single destination, self-signed TLS, the buffered body-mode annotation', async () => {
    const objects = await template(['inferencepool-ai-gateway.yaml']);
    const { config } = serverConfig(objects);
    assert.equal(config.routing.destinationFormat, 'single');
    assert.deepEqual(config.listen.tls, { mode: 'self-signed' });
    assert.equal(only(objects, 'InferencePool').metadata.annotations?.['aigateway.envoyproxy.io/processing-body-mode'], 'buffered');
    assert.equal(objects.filter((o) => o.kind === 'DestinationRule').length, 0);
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
    assert.equal(field(binding, 'subjects', 0, 'name'), 'envoy-llm-gateway');
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
    const groups = field(only(objects, 'PrometheusRule'), 'spec', 'groups', 0, 'rules') as Obj[];
    assert.ok(groups.length >= 5);
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
