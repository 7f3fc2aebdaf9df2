// What the real program loads under each configuration (issue 34): a module it never runs is
// memory a picker pays for in every replica. Each test starts `node dist/src/main.js` with a preload
// that records every module loaded (test/support/module-trace.ts: ES modules through a loader hook,
// CommonJS ones from the require cache), has it do its work, stops it, and reads the list:
// - the default server, after a plain and a streamed request through a real Envoy: no grpc-js, no
//   self-signed certificate maker, no OpenTelemetry SDK, no Kubernetes client;
// - the Kubernetes source, synced with a real kube-apiserver: client-node's kubeconfig and watch,
//   but never its generated API index (every API and model of Kubernetes);
// - and, so that an empty list cannot pass for a lean one, the configuration that needs them all
//   (grpc-js transport, self-signed TLS, tracing), where each one is found.

import assert from 'node:assert/strict';
import { mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { stringify as toYaml } from 'yaml';
import { startEnvoy } from '../support/envoy-process.js';
import { startExtprocProcess } from '../support/extproc-process.js';
import type { ExtprocProcess } from '../support/extproc-process.js';
import { loopbackGatewayConfig, poolsYaml } from '../support/gateway.js';
import { send } from '../support/http-client.js';
import { KubeControlPlane } from '../support/kube-control-plane.js';
import { startModelServer } from '../support/model-server.js';
import { waitUntil } from '../support/wait-until.js';

const MODEL = 'lazy-model';
const MODULE_TRACE = new URL('../support/module-trace.js', import.meta.url).href;

/** Packages (or parts of one) and the path that marks a module of theirs. */
const GRPC_JS = /\/node_modules\/@grpc\/grpc-js\//;
const SELFSIGNED = /\/node_modules\/(selfsigned|@peculiar\/x509)\//;
const OTEL_SDK = /\/node_modules\/@opentelemetry\/(sdk-trace|exporter-trace-otlp-proto|resources|core)\//;
const KUBE_CLIENT = /\/node_modules\/@kubernetes\/client-node\//;
/** client-node's index and its generated APIs, models and typed clients. */
const KUBE_GENERATED = /\/node_modules\/@kubernetes\/client-node\/dist\/(index\.js|api\.js|gen\/(index\.js|apis\/|models\/|types\/))/;

let dir: string;

before(async () => {
  dir = await mkdtemp(join(tmpdir(), 'llm-extproc-lazy-'));
});

after(async () => {
  await rm(dir, { recursive: true, force: true });
});

/** Starts the program with `config` under the module trace; `work` runs while it is up; resolves with every module it loaded. */
async function modulesLoaded(
  name: string,
  config: Record<string, unknown>,
  work: (proc: ExtprocProcess) => Promise<void>,
): Promise<string[]> {
  const configPath = join(dir, `${name}.yaml`);
  const traceFile = join(dir, `${name}.modules`);
  await writeFile(
    configPath,
    toYaml({ listen: { grpc: '127.0.0.1:0', http: '127.0.0.1:0' }, shutdownDrainSeconds: 0, shutdownGraceSeconds: 1, ...config }),
  );
  const proc = await startExtprocProcess({
    configPath,
    nodeArgs: ['--import', MODULE_TRACE],
    env: { LLM_EXTPROC_MODULE_TRACE: traceFile },
  });
  try {
    await work(proc);
  } finally {
    proc.signal('SIGTERM');
    const exit = await proc.exitWithin(20_000);
    assert.equal(exit.code, 0, `llm-extproc should exit cleanly; output:\n${proc.output()}`);
  }
  const modules = (await readFile(traceFile, 'utf8')).split('\n').filter((line) => line !== '');
  // The trace itself must have seen the program: our own modules, and a CommonJS dependency's inside.
  assert.ok(
    modules.some((m) => m.endsWith('/dist/src/app.js')),
    'the trace saw the app',
  );
  assert.ok(
    modules.some((m) => /\/node_modules\/prom-client\/lib\//.test(m)),
    "the trace saw a CommonJS package's own requires",
  );
  return modules;
}

function loadedOf(modules: readonly string[], pattern: RegExp): string[] {
  return modules.filter((m) => pattern.test(m));
}

void describe('what the program loads', () => {
  void it('the default server (static pools, native transport, no TLS, no tracing), serving through Envoy, loads no grpc-js, selfsigned, OpenTelemetry SDK or Kubernetes client', async (t) => {
    const server = await startModelServer({ id: 'lazy', models: [MODEL] });
    t.after(() => server.close());
    const endpointsFile = join(dir, 'endpoints.yaml');
    await writeFile(endpointsFile, poolsYaml([{ name: 'pool', models: [MODEL], endpoints: [{ address: server.address }] }]));
    const modules = await modulesLoaded(
      'default',
      { static: { path: endpointsFile }, picker: { metrics: { enabled: false } } },
      async (proc) => {
        const envoy = await startEnvoy({
          name: 'lazy-loading',
          configYaml: toYaml(loopbackGatewayConfig(proc.grpcAddress, [server.address])),
        });
        try {
          const port = envoy.listenerPort('llm_gateway');
          const messages = [{ role: 'user', content: 'hello' }];
          const plain = await send(port, { method: 'POST', path: '/v1/chat/completions', body: { model: MODEL, messages } });
          assert.equal(plain.status, 200, plain.text());
          const streamed = await send(port, {
            method: 'POST',
            path: '/v1/chat/completions',
            body: { model: MODEL, messages, stream: true },
          });
          assert.equal(streamed.status, 200, streamed.text());
          assert.match(streamed.text(), /data: \[DONE\]/);
        } finally {
          await envoy.stop();
        }
      },
    );
    assert.deepEqual(loadedOf(modules, GRPC_JS), [], 'grpc-js under the native transport');
    assert.deepEqual(loadedOf(modules, SELFSIGNED), [], 'selfsigned without TLS');
    assert.deepEqual(loadedOf(modules, OTEL_SDK), [], 'the OpenTelemetry SDK with tracing off');
    assert.deepEqual(loadedOf(modules, KUBE_CLIENT), [], 'the Kubernetes client with static pools');
  });

  void it("the Kubernetes source, synced with a real API server, loads client-node's kubeconfig and watch but not its generated API index", async (t) => {
    const plane = await KubeControlPlane.start();
    t.after(() => plane.stop());
    await plane.createNamespace('models');
    const kubeconfigPath = await plane.writeKubeconfig('lazy-kubeconfig.yaml');
    const modules = await modulesLoaded(
      'kubernetes',
      {
        kubernetes: {
          kubeconfigPath,
          pools: [{ name: 'pool', namespace: 'models', selector: { app: 'vllm' }, targetPort: 8000, models: [MODEL] }],
        },
        picker: { metrics: { enabled: false } },
      },
      async (proc) => {
        // Synced: a list answered and a watch opened, through the modules the trace records.
        await waitUntil(async () => ((await fetch(`http://127.0.0.1:${proc.httpPort}/readyz`)).status === 200 ? true : undefined), {
          description: 'llm-extproc /readyz after the first list',
          timeoutMs: 30_000,
        });
        await proc.waitForLog(/^kubernetes endpoint cache synced$/);
      },
    );
    assert.ok(loadedOf(modules, /\/@kubernetes\/client-node\/dist\/watch\.js$/).length === 1, "client-node's Watch is what watches");
    assert.deepEqual(loadedOf(modules, KUBE_GENERATED), [], "client-node's index or generated APIs");
  });

  void it('the configuration that needs them (grpc-js transport, self-signed TLS, tracing) loads each one: the trace sees what the other tests say is absent', async () => {
    const endpointsFile = join(dir, 'control-endpoints.yaml');
    await writeFile(endpointsFile, poolsYaml([{ name: 'pool', models: [MODEL], endpoints: [{ address: '127.0.0.1:9' }] }]));
    const modules = await modulesLoaded(
      'control',
      {
        static: { path: endpointsFile },
        listen: { grpc: '127.0.0.1:0', http: '127.0.0.1:0', transport: 'grpc-js', tls: { enabled: true } },
        tracing: { enabled: true, endpoint: 'http://127.0.0.1:9/v1/traces' },
        picker: { metrics: { enabled: false } },
      },
      async () => {},
    );
    assert.notDeepEqual(loadedOf(modules, GRPC_JS), [], 'grpc-js');
    assert.notDeepEqual(loadedOf(modules, SELFSIGNED), [], 'selfsigned');
    assert.notDeepEqual(loadedOf(modules, OTEL_SDK), [], 'the OpenTelemetry SDK');
  });
});
