// `npm run demo`: a real Envoy, llm-extproc (as its own process, exactly as deployed) and three
// local model servers wired by a static endpoints file you can edit while it runs.
// Flags: --port N (Envoy listener, default 8080; 0 = any free port), --smoke (send sample requests,
// print the answers and exit: what the test suite runs to keep this command honest), --state-dir D.
// A normal start prints no error-looking line: the demo waits for llm-extproc's /readyz before its
// first request through Envoy. Ctrl-C stops llm-extproc first (it closes Envoy's connections
// gracefully), then Envoy, then the model servers: Envoy and llm-extproc run in their own process
// groups so the terminal's Ctrl-C reaches only the demo, which stops them in that order.

import { spawn, type ChildProcess } from 'node:child_process';
import { mkdirSync, rmSync, writeFileSync } from 'node:fs';
import { createInterface } from 'node:readline';
import { join } from 'node:path';
import { stringify as toYaml } from 'yaml';
import { DEFAULT_GATEWAY_OPTIONS, renderGatewayConfig } from '../tools/envoy-config/gateway-config.js';
import { startEnvoy, type RunningEnvoy } from '../test/support/envoy-process.js';
import { send } from '../test/support/http-client.js';
import { startModelServer, type ModelServer } from '../test/support/model-server.js';
import { poolsYaml } from '../test/support/gateway.js';
import { waitUntil } from '../test/support/wait-until.js';
import { repoRoot } from './repo-root.js';
import { parseScriptOptions } from './script-options.js';

const { values } = parseScriptOptions(import.meta.url, {
  options: { port: { type: 'string', default: '8080' }, smoke: { type: 'boolean', default: false }, 'state-dir': { type: 'string' } },
});
const root = repoRoot();
// Endpoints file, configs and the Unix socket live here (--state-dir lets two demos run side by side).
const stateDir = values['state-dir'] ?? join(root, '.cache', 'demo');
mkdirSync(stateDir, { recursive: true });

let server: ChildProcess | undefined;
const servers: ModelServer[] = [];
let envoy: RunningEnvoy | undefined;
// The children are in their own process groups: nothing else would stop them if the demo died.
process.on('exit', () => server?.kill('SIGKILL'));

let stopping = false;
async function shutdown(code: number): Promise<never> {
  if (stopping) return new Promise<never>(() => undefined);
  stopping = true;
  // llm-extproc first: it ends Envoy's connections itself (GOAWAY) rather than seeing them reset.
  const child = server;
  if (child !== undefined && child.exitCode === null && child.signalCode === null) {
    const exited = new Promise((resolve) => child.once('exit', resolve));
    child.kill('SIGTERM');
    await exited;
  }
  await envoy?.stop();
  await Promise.all(servers.map((s) => s.close()));
  process.exit(code);
}

/** Forwards llm-extproc's log lines to our stdout and resolves with its ops port (from its start line). */
function opsPortOf(child: ChildProcess): Promise<number> {
  return new Promise((resolve, reject) => {
    if (child.stdout === null) throw new Error('llm-extproc has no stdout pipe');
    const lines = createInterface({ input: child.stdout });
    lines.on('line', (line) => {
      process.stdout.write(`${line}\n`);
      if (!line.includes('"llm-extproc started"')) return;
      const started = JSON.parse(line) as { http?: unknown };
      if (typeof started.http === 'number') resolve(started.http);
    });
    child.once('exit', (code) => reject(new Error(`llm-extproc exited with code ${String(code)} before it started`)));
  });
}

async function main(): Promise<void> {
  const llamaA = await startModelServer({ id: 'llama-a', models: ['llama-3-8b'] });
  const llamaB = await startModelServer({ id: 'llama-b', models: ['llama-3-8b'] });
  const qwen = await startModelServer({ id: 'qwen-a', models: ['qwen-2.5-7b'] });
  servers.push(llamaA, llamaB, qwen);
  const endpointsFile = join(stateDir, 'endpoints.yaml');
  writeFileSync(
    endpointsFile,
    poolsYaml([
      { name: 'llama', models: ['llama-3-8b'], endpoints: [{ address: llamaA.address }, { address: llamaB.address }] },
      {
        name: 'qwen',
        models: ['qwen-2.5-7b'],
        endpoints: [{ address: qwen.address }, { address: '127.0.0.1:1', state: 'Starting', reason: 'ContainerCreating' }],
      },
    ]),
  );

  const socket = join(stateDir, 'grpc.sock');
  // Ours alone: a socket a killed demo left behind is removed here, not warned about by llm-extproc.
  rmSync(socket, { force: true });
  const configFile = join(stateDir, 'llm-extproc.yaml');
  // A local demo has no load balancer to drain: stop at once on Ctrl-C.
  writeFileSync(
    configFile,
    toYaml({
      listen: { grpc: `unix://${socket}`, http: '127.0.0.1:0' },
      static: { path: endpointsFile },
      shutdownDrainSeconds: 0,
      shutdownGraceSeconds: 2,
    }),
  );
  const child = spawn(process.execPath, [join(root, 'dist', 'src', 'main.js'), '--config', configFile], {
    // Info: its start line carries the ops port, and each failed request is one line worth seeing.
    env: { ...process.env, LLM_EXTPROC_LOG_LEVEL: 'info' },
    stdio: ['ignore', 'pipe', 'inherit'],
    detached: true,
  });
  server = child;
  child.once('exit', (code) => {
    if (code !== 0 && code !== null) process.stderr.write(`llm-extproc exited with code ${code}\n`);
  });
  const opsPort = await opsPortOf(child);
  const ops = `http://127.0.0.1:${opsPort}`;
  // Synced before the first request, so no request meets an empty endpoint cache (503 no_ready_replica).
  await waitUntil(async () => ((await fetch(`${ops}/readyz`)).status === 200 ? true : undefined), {
    description: 'llm-extproc to sync its endpoint cache',
    timeoutMs: 20_000,
  });

  const config = renderGatewayConfig({
    ...DEFAULT_GATEWAY_OPTIONS,
    listener: { address: '127.0.0.1', port: Number(values.port) },
    admin: { address: '127.0.0.1', port: 0 },
    extProc: `unix://${socket}`,
    backends: { kind: 'static', addresses: [llamaA.address, llamaB.address, qwen.address, '127.0.0.1:1'] },
  });
  writeFileSync(join(stateDir, 'envoy.yaml'), toYaml(config, { lineWidth: 0 }));
  envoy = await startEnvoy({ configYaml: toYaml(config), name: 'demo', logLevel: 'warning', callerHandlesSignals: true });
  const port = envoy.listenerPort('llm_gateway');
  // Ready when Envoy routes through llm-extproc.
  await waitUntil(async () => ((await send(port, { path: '/v1/models' })).status === 200 ? true : undefined), {
    description: 'llm-extproc to answer through Envoy',
    timeoutMs: 20_000,
  });

  const base = `http://127.0.0.1:${port}`;
  if (values.smoke) {
    const samples = [
      { path: '/v1/chat/completions', body: { model: 'llama-3-8b', messages: [{ role: 'user', content: 'Hello!' }] } },
      {
        path: '/v1/chat/completions',
        body: { model: 'qwen-2.5-7b', stream: true, messages: [{ role: 'user', content: 'Stream, please' }] },
      },
      { path: '/v1/chat/completions', body: { model: 'no-such-model', messages: [] } },
    ];
    const statuses: number[] = [];
    for (const sample of samples) {
      const response = await send(port, sample);
      statuses.push(response.status);
      process.stdout.write(`POST ${sample.path} model=${sample.body.model} → ${response.status}\n${response.text().trim()}\n\n`);
    }
    await shutdown(statuses.join(',') === '200,200,404' ? 0 : 1);
  }

  process.stdout.write(`
llm-extproc demo is up: Envoy on ${base}, llm-extproc on ${socket}
Endpoints file (edit it while this runs): ${endpointsFile}
llm-extproc's ops port: ${ops}/metrics  ${ops}/healthz  ${ops}/readyz

  curl -s ${base}/v1/models
  curl -s ${base}/v1/chat/completions -H 'content-type: application/json' \\
       -d '{"model":"llama-3-8b","messages":[{"role":"user","content":"Hello!"}]}'
  curl -sN ${base}/v1/chat/completions -H 'content-type: application/json' \\
       -d '{"model":"qwen-2.5-7b","stream":true,"messages":[{"role":"user","content":"Stream, please"}]}'
  curl -s ${base}/v1/chat/completions -H 'content-type: application/json' -d '{"model":"gpt-17"}'   # 404 model_not_found
  curl -s ${base}/v1/chat/completions -H 'content-type: application/json' -d '{"model":'            # 400 invalid_json
  curl -s ${ops}/metrics | grep llm_extproc_requests_total

Press Ctrl-C to stop.
`);
  process.once('SIGINT', () => void shutdown(0));
  process.once('SIGTERM', () => void shutdown(0));
}

main().catch(async (err: unknown) => {
  process.stderr.write(`demo failed: ${err instanceof Error ? (err.stack ?? err.message) : String(err)}\n${envoy?.logs() ?? ''}\n`);
  await shutdown(1);
});
