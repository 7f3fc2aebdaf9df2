// The container image an operator pulls, built from the Dockerfile by a real engine (podman;
// scripts/install-podman.mjs builds it, or reuses the image of this exact tree) and run as the
// chart's Deployment runs it: the pod spec `helm template` renders for the static-endpoints example
// becomes `podman run` flags (uid 1000, read-only root, every capability dropped, no privilege
// escalation, the memory limit, the rendered ConfigMap mounted read-only where the chart mounts it,
// /tmp as the chart's emptyDir). A real Envoy on the host sends a chat request and an SSE stream
// through the container to a model server on the host, byte-identical both ways; the chart's probe
// paths and the four gRPC health services answer from the container's address; `podman stop` with
// the pod's terminationGracePeriodSeconds (SIGTERM, then SIGKILL at the deadline, as the kubelet
// does) drains a stream in flight and exits 0 before the deadline. The image must stay within its
// size budget, run nothing but node and the bundle, and carry its OCI labels.
//
// Where the bed cannot run (not Linux; not root: rootful podman, its bridge network and the pod
// addresses need root) the file skips, saying why. CI runs as root: there it runs, and fails on any
// failure to install podman or build the image.
import { after, before, describe, it } from 'node:test';
import type { TestContext } from 'node:test';
import assert from 'node:assert/strict';
import { existsSync, readFileSync, readdirSync } from 'node:fs';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join, relative } from 'node:path';
import { parse as parseYaml, stringify as toYaml } from 'yaml';
import { repoRoot } from '../../scripts/repo-root.js';
import { chartNodeOptions } from '../../scripts/bench/chart-node-options.js';
import { CHART_DIR } from '../../scripts/chart/chart-files.js';
import {
  containerEngine,
  podman,
  podmanOk,
  podmanRunFlags,
  podIpForThisProcess,
  prepareContainerNetwork,
  projectImage,
  runContainer,
  writeConfigMap,
  type ImageReport,
  type PodSpec,
  type RunningContainer,
} from '../support/container.js';
import { loopbackGatewayConfig } from '../support/gateway.js';
import { startEnvoy, type RunningEnvoy } from '../support/envoy-process.js';
import { healthClient } from '../support/grpc-health-client.js';
import { helm, parseManifests, run, type K8sObject } from '../support/helm.js';
import { send } from '../support/http-client.js';
import { startModelServer, type ModelServer } from '../support/model-server.js';
import { claimPodAddresses, releasePodAddresses } from '../support/pod-network.js';
import { waitUntil } from '../support/wait-until.js';

/** At most 150 MB uncompressed (docs/benchmarks.md, "Image"); the Node runtime alone is ~100 MB. */
const IMAGE_BUDGET_BYTES = 150_000_000;
const ROOT = repoRoot();
const CHART = join(ROOT, CHART_DIR);
const RELEASE = 'img';
const MODEL = 'llama-3-8b';
const MB = (bytes: number): string => `${(bytes / 1e6).toFixed(1)} MB`;

const engine = await containerEngine();
const skip = engine.available ? false : `no container engine for this test here: ${engine.reason}`;
const env = engine.available ? engine.env : {};

/** The chart's objects for the static-endpoints example, its one pool pointing at `endpoint`. */
async function renderChart(endpoint: string, dir: string): Promise<K8sObject[]> {
  const values = join(dir, 'values.yaml');
  await writeFile(values, toYaml({ staticEndpoints: { pools: [{ name: 'llama', models: [MODEL], endpoints: [endpoint] }] } }));
  const res = await helm(
    ['template', RELEASE, CHART, '--namespace', 'llm', '-f', join(CHART, 'examples', 'static-endpoints.yaml'), '-f', values],
    join(dir, 'helm'),
  );
  assert.equal(res.code, 0, res.stderr);
  return parseManifests(res.stdout);
}

/** Every file of a directory tree, as paths relative to it (symlinks listed, not followed). */
function filesUnder(dir: string): string[] {
  return readdirSync(dir, { withFileTypes: true, recursive: true })
    .filter((e) => !e.isDirectory())
    .map((e) => relative(dir, join(e.parentPath, e.name)));
}

function chatRequest(stream: boolean): object {
  return { model: MODEL, stream, messages: [{ role: 'user', content: `hello from the container test (stream: ${stream})` }] };
}

describe('container image (podman, as the chart runs it)', { skip }, () => {
  let image: ImageReport;
  let home = '';
  let model: ModelServer;
  let addresses: string[] = [];
  let container: RunningContainer;
  let envoy: RunningEnvoy;
  let pod: PodSpec;
  let grpcPort = 0;
  let httpPort = 0;
  let stopped = false;

  /** What the container wrote (podman logs hands its stdout and stderr back on ours). */
  async function containerLogs(): Promise<string> {
    const res = await podman(env, ['logs', container.id]);
    return `${res.stdout}${res.stderr}`;
  }

  before(async () => {
    image = await projectImage();
    home = await mkdtemp(join(tmpdir(), 'image-e2e-'));
    await prepareContainerNetwork(env);
    // The model server on a pod address of the host: the container reaches it through the bridge,
    // the host's Envoy directly; both name it by the same address, as in a cluster.
    addresses = claimPodAddresses(1);
    model = await startModelServer({ id: 'model-0', host: addresses[0], models: [MODEL] });
    const objects = await renderChart(model.address, home);
    const deployment = objects.find((o) => o.kind === 'Deployment') as K8sObject & { spec: { template: { spec: PodSpec } } };
    pod = deployment.spec.template.spec;
    const container0 = pod.containers[0];
    const configMaps = new Map<string, string>();
    for (const cm of objects.filter((o) => o.kind === 'ConfigMap')) {
      configMaps.set(
        cm.metadata.name,
        await writeConfigMap(join(home, 'configmaps', cm.metadata.name), cm['data'] as Record<string, string>),
      );
    }
    const config = parseYaml(readFileSync(join(configMaps.get(`${RELEASE}-llm-extproc`) ?? '', 'config.yaml'), 'utf8')) as {
      listen: { grpc: string; http: string };
    };
    grpcPort = Number(config.listen.grpc.split(':').at(-1));
    httpPort = Number(config.listen.http.split(':').at(-1));
    container = await runContainer(
      env,
      image.image,
      podmanRunFlags(pod, container0, configMaps, podIpForThisProcess()),
      container0.args ?? [],
    );
    const readyPath = container0.readinessProbe?.httpGet?.path ?? '/readyz';
    await waitUntil(
      async () => {
        const res = await fetch(`http://${container.ip}:${httpPort}${readyPath}`).catch(() => undefined);
        if (res?.status === 200) return true;
        // A container that exited will never be ready: say so at once, with what it printed.
        const state = JSON.parse(await podmanOk(env, ['inspect', '--format', '{{json .State}}', container.id])) as {
          Status: string;
          ExitCode: number;
        };
        if (state.Status === 'exited')
          throw new Error(`the container exited (${state.ExitCode}) before it was ready:\n${await containerLogs()}`);
        return undefined;
      },
      { description: `the container's readiness probe (${readyPath})`, timeoutMs: 60_000, intervalMs: 200 },
    );
    envoy = await startEnvoy({
      name: 'image-gateway',
      logLevel: 'warning',
      configYaml: toYaml(loopbackGatewayConfig(`${container.ip}:${grpcPort}`, [model.address])),
    });
  });

  after(async () => {
    await envoy?.stop();
    if (container !== undefined) {
      if (!stopped) process.stderr.write(`container log:\n${(await containerLogs()).slice(-4000)}\n`);
      await podman(env, ['rm', '--force', '--time', '0', container.id]);
    }
    await model?.close();
    releasePodAddresses(addresses);
    if (home !== '') await rm(home, { recursive: true, force: true });
  });

  it('is within its size budget (150 MB uncompressed); the log shows its size and layers', (t: TestContext) => {
    t.diagnostic(
      `image ${image.image}: ${MB(image.sizeBytes)} uncompressed (budget ${MB(IMAGE_BUDGET_BYTES)})${image.built ? `, built in ${image.buildSeconds} s` : ', reused'}`,
    );
    for (const layer of image.layers) t.diagnostic(`  layer ${MB(layer.bytes)}: ${layer.createdBy}`);
    assert.ok(image.sizeBytes <= IMAGE_BUDGET_BYTES, `the image is ${MB(image.sizeBytes)}, over its ${MB(IMAGE_BUDGET_BYTES)} budget`);
  });

  it('holds node and the bundle only: no shell, no npm, no node_modules, no sources or source maps', async () => {
    const mountPoint = (await podmanOk(env, ['image', 'mount', image.image])).trim();
    try {
      const files = filesUnder(mountPoint);
      const app = files.filter((f) => f.startsWith('app/')).sort();
      assert.ok(
        app.includes('app/dist/bundle/main.js') && app.includes('app/package.json'),
        `the bundle and its package.json: ${app.join(', ')}`,
      );
      for (const f of app)
        assert.match(
          f,
          /^app\/(package\.json|dist\/bundle\/([\w-]+\.js|chunks\/[\w-]+\.js|THIRD-PARTY-NOTICES\.txt))$/,
          `only the bundle in /app: ${f}`,
        );
      const unwanted = files.filter((f) => /(^|\/)(node_modules|npm|sh|bash|dash|apt|dpkg)$|\.(map|ts)$|(^|\/)node_modules\//.test(f));
      assert.deepEqual(unwanted, [], 'nothing but node and its libraries besides the bundle');
      assert.ok(existsSync(join(mountPoint, 'usr/local/bin/node')), 'node at /usr/local/bin/node');
    } finally {
      await podman(env, ['image', 'unmount', image.image]);
    }
  });

  it('carries the OCI labels, a numeric USER and no HEALTHCHECK; --version names the package version', async () => {
    const pkg = JSON.parse(readFileSync(join(ROOT, 'package.json'), 'utf8')) as { version: string };
    const revision = await run('git', ['-C', ROOT, 'rev-parse', 'HEAD']);
    assert.equal(image.labels['org.opencontainers.image.version'], pkg.version);
    assert.equal(image.labels['org.opencontainers.image.revision'], revision.code === 0 ? revision.stdout.trim() : 'unknown');
    assert.match(image.labels['org.opencontainers.image.source'] ?? '', /^https:\/\//);
    const config = JSON.parse(await podmanOk(env, ['image', 'inspect', '--format', '{{json .Config}}', image.image])) as {
      User?: string;
      Healthcheck?: unknown;
      Env?: string[];
    };
    // A container started without the chart keeps the chart's heap limit, read only at start.
    assert.ok(
      (config.Env ?? []).includes(`NODE_OPTIONS=${chartNodeOptions(ROOT).join(' ')}`),
      `the image's NODE_OPTIONS are the chart's: ${JSON.stringify(config.Env)}`,
    );
    assert.match(config.User ?? '', /^\d+(:\d+)?$/, 'USER is numeric (runAsNonRoot can check it)');
    assert.equal(config.Healthcheck, undefined, 'no HEALTHCHECK: the kubelet probes decide');
    const version = await podmanOk(env, ['run', '--rm', '--network=none', image.image, '--version']);
    assert.equal(version.trim().split(' ').slice(0, 2).join(' '), `llm-extproc ${pkg.version}`);
  });

  it('runs as uid 1000 with no capabilities and a read-only root filesystem', async () => {
    const status = readFileSync(`/proc/${container.hostPid}/status`, 'utf8');
    const field = (name: string): string[] => (status.split('\n').find((l) => l.startsWith(`${name}:`)) ?? '').split(/\s+/).slice(1);
    assert.deepEqual(field('Uid').slice(0, 2), ['1000', '1000']);
    assert.deepEqual(field('Gid').slice(0, 2), ['1000', '1000']);
    assert.equal(BigInt(`0x${field('CapEff')[0]}`), 0n, 'no effective capabilities');
    assert.equal(field('NoNewPrivs')[0], '1');
    const probe = `const fs = require('node:fs'); for (const p of ['/app/probe', '/etc/llm-extproc/probe', '/tmp/probe']) { try { fs.writeFileSync(p, 'x'); console.log(p, 'ok'); } catch (e) { console.log(p, e.code); } }`;
    const out = await podmanOk(env, ['exec', container.id, '/usr/local/bin/node', '-e', probe]);
    assert.deepEqual(out.trim().split('\n'), ['/app/probe EROFS', '/etc/llm-extproc/probe EROFS', '/tmp/probe ok']);
  });

  it("answers the chart's probe paths and all four gRPC health services from its address", async () => {
    const container0 = pod.containers[0];
    for (const path of [container0.livenessProbe?.httpGet?.path, container0.readinessProbe?.httpGet?.path]) {
      assert.ok(path !== undefined);
      const res = await fetch(`http://${container.ip}:${httpPort}${path}`);
      assert.equal(res.status, 200, `${path} ${res.status}`);
    }
    const client = healthClient(`${container.ip}:${grpcPort}`);
    try {
      for (const service of ['', 'liveness', 'readiness', 'envoy.service.ext_proc.v3.ExternalProcessor']) {
        assert.equal(await client.check(service), 'SERVING', `grpc.health.v1 "${service}"`);
      }
    } finally {
      client.close();
    }
  });

  it('routes a chat request and an SSE stream through a real Envoy, byte-identical both ways', async () => {
    const port = envoy.listenerPort('llm_gateway');
    for (const stream of [false, true]) {
      const body = Buffer.from(JSON.stringify(chatRequest(stream)));
      const arrived = model.onRequest();
      const res = await send(port, { method: 'POST', path: '/v1/chat/completions', body });
      const upstream = await arrived;
      assert.equal(res.status, 200, res.text());
      assert.equal(res.error, undefined);
      assert.ok(upstream.body.equals(body), 'the model server got the request body byte for byte');
      await upstream.response.settled;
      assert.ok(res.body.equals(upstream.response.body), `the client got the model server's ${stream ? 'stream' : 'answer'} byte for byte`);
      if (stream) assert.match(res.text(), /data: \[DONE\]\n\n$/);
    }
  });

  it('on SIGTERM drains (health NOT_SERVING, the stream in flight finishes) and exits 0 within terminationGracePeriodSeconds', async () => {
    const grace = pod.terminationGracePeriodSeconds ?? 30;
    let release: () => void = () => undefined;
    model.nextBehavior({ kind: 'paused-stream', release: new Promise<void>((resolve) => (release = resolve)), afterEvents: 1 });
    let firstBytes: () => void = () => undefined;
    const started = new Promise<void>((resolve) => (firstBytes = resolve));
    const arrived = model.onRequest();
    const response = send(envoy.listenerPort('llm_gateway'), {
      method: 'POST',
      path: '/v1/chat/completions',
      body: chatRequest(true),
      onData: () => firstBytes(),
      timeoutMs: grace * 1000,
    });
    await started;
    // What the kubelet does at a pod's deletion: SIGTERM, then SIGKILL when the grace period ends.
    const stopping = podman(env, ['stop', '--time', String(grace), container.id]);
    stopped = true;
    const client = healthClient(`${container.ip}:${grpcPort}`);
    try {
      await waitUntil(async () => ((await client.check('readiness').catch(() => undefined)) === 'NOT_SERVING' ? true : undefined), {
        description: 'gRPC readiness NOT_SERVING while draining',
        timeoutMs: 10_000,
        intervalMs: 50,
      });
      assert.equal((await fetch(`http://${container.ip}:${httpPort}/readyz`)).status, 503, '/readyz 503 while draining');
    } finally {
      client.close();
    }
    release();
    const res = await response;
    const upstream = await arrived;
    await upstream.response.settled;
    assert.equal(res.status, 200);
    assert.equal(res.error, undefined, 'the stream in flight was not cut');
    assert.ok(res.body.equals(upstream.response.body), 'the stream in flight finished byte for byte');
    const stop = await stopping;
    assert.equal(stop.code, 0, stop.stderr);
    const state = JSON.parse(await podmanOk(env, ['inspect', '--format', '{{json .State}}', container.id])) as {
      ExitCode: number;
      Status: string;
    };
    assert.equal(state.ExitCode, 0, `exit ${state.ExitCode} (137 = killed at the ${grace} s deadline)`);
    const logs = await containerLogs();
    assert.doesNotMatch(logs, /"level":(50|60)/, 'no error logged on the way down');
  });
});
