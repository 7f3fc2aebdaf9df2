// Multi-core mode as a user runs it: `llm-extproc --workers 2` (the real entry point, as its own
// process) behind a real Envoy with two worker threads, so Envoy holds two connections and the
// cluster primary hands one to each worker. Requests are routed, /metrics adds the workers up,
// a crashed worker is replaced, and SIGTERM drains every worker and exits cleanly.

import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import type { ChildProcess } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { request } from 'node:http';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { stringify as toYaml } from 'yaml';
import { startEnvoy } from '../support/envoy-process.js';
import { freePort } from '../support/free-ports.js';
import type { RunningEnvoy } from '../support/envoy-process.js';
import { loopbackGatewayConfig, poolsYaml } from '../support/gateway.js';
import { metricValue } from '../support/prometheus.js';
import { send } from '../support/http-client.js';
import { startModelServer } from '../support/model-server.js';
import { parseStrictJson } from '../support/strict-json.js';
import type { ModelServer } from '../support/model-server.js';
import { repoRoot } from '../../scripts/repo-root.js';
import { waitUntil } from '../support/wait-until.js';

const MODEL = 'cluster-model';
const CHAT = '/v1/chat/completions';

function httpGet(port: number, path: string): Promise<{ status: number; body: string }> {
  return new Promise((resolve, reject) => {
    const req = request({ host: '127.0.0.1', port, path, agent: false }, (res) => {
      let body = '';
      res.setEncoding('utf8');
      res.on('data', (c: string) => (body += c));
      res.on('end', () => resolve({ status: res.statusCode ?? 0, body }));
    });
    req.on('error', reject);
    req.end();
  });
}

/** Live child pids of `pid` (the cluster workers of a primary). */
function childPids(pid: number): number[] {
  try {
    return readFileSync(`/proc/${pid}/task/${pid}/children`, 'utf8').trim().split(/\s+/).filter(Boolean).map(Number);
  } catch {
    return [];
  }
}

function exitOf(child: ChildProcess): Promise<{ code: number | null; signal: NodeJS.Signals | null }> {
  return new Promise((resolve) => {
    if (child.exitCode !== null || child.signalCode !== null) resolve({ code: child.exitCode, signal: child.signalCode });
    else child.once('exit', (code, signal) => resolve({ code, signal }));
  });
}

describe('--workers 2 behind Envoy', () => {
  let dir: string;
  let model: ModelServer;
  let server: ChildProcess;
  let exited: Promise<{ code: number | null; signal: NodeJS.Signals | null }>;
  let envoy: RunningEnvoy;
  let httpPort: number;
  let output = '';
  let stdout = '';
  const rejected: string[] = [];
  /** The JSON log lines of the primary and its workers so far (they share stdout); non-strict lines go to `rejected`. */
  const logLines = (): Array<Record<string, unknown>> => {
    const lines: Array<Record<string, unknown>> = [];
    rejected.length = 0;
    for (const text of stdout.split('\n').slice(0, -1)) {
      try {
        lines.push(parseStrictJson(text) as Record<string, unknown>);
      } catch (err) {
        rejected.push(`${(err as Error).message}: ${text}`);
      }
    }
    return lines;
  };

  before(async () => {
    dir = await mkdtemp(join(tmpdir(), 'llm-extproc-cluster-'));
    model = await startModelServer({ id: 'm1', models: [MODEL] });
    const endpointsFile = join(dir, 'endpoints.yaml');
    await writeFile(endpointsFile, poolsYaml([{ name: 'pool', models: [MODEL], endpoints: [{ address: model.address }] }]));
    httpPort = await freePort();
    const socket = join(dir, 'grpc.sock');
    const configFile = join(dir, 'config.yaml');
    await writeFile(
      configFile,
      toYaml({
        listen: { grpc: `unix://${socket}`, http: `127.0.0.1:${httpPort}`, debugEndpoints: true },
        static: { path: endpointsFile },
        // debug: every served request logs one line, with the index of the worker that served it.
        logLevel: 'debug',
        shutdownDrainSeconds: 0,
        shutdownGraceSeconds: 20,
      }),
    );
    server = spawn(process.execPath, [join(repoRoot(), 'dist', 'src', 'main.js'), '--config', configFile, '--workers', '2'], {
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    server.stdout?.on('data', (b: Buffer) => {
      output += b.toString();
      stdout += b.toString();
    });
    server.stderr?.on('data', (b: Buffer) => (output += b.toString()));
    exited = exitOf(server);
    const gone = new AbortController();
    void exited.then(() => gone.abort(new Error(`llm-extproc exited during start:\n${output}`)));
    await waitUntil(async () => ((await httpGet(httpPort, '/readyz').catch(() => ({ status: 0 }))).status === 200 ? true : undefined), {
      description: 'llm-extproc primary /readyz',
      timeoutMs: 30_000,
      signal: gone.signal,
    });
    const config = loopbackGatewayConfig(`unix://${socket}`, [model.address]);
    // Exact balance: the two Envoy workers take turns accepting client connections, so both open
    // their own connection to us, and the primary hands one to each of our workers.
    const listeners = (config.static_resources as { listeners: Array<Record<string, unknown>> }).listeners;
    for (const listener of listeners) listener.connection_balance_config = { exact_balance: {} };
    envoy = await startEnvoy({ configYaml: toYaml(config), name: 'cluster', logLevel: 'warning', concurrency: 2 });
  });

  after(async () => {
    await envoy?.stop();
    if (server !== undefined && server.exitCode === null && server.signalCode === null) {
      server.kill('SIGKILL');
      for (const pid of childPids(server.pid ?? 0)) process.kill(pid, 'SIGKILL');
    }
    await model?.close();
    if (dir !== undefined) await rm(dir, { recursive: true, force: true });
  });

  void it("runs two workers; requests through Envoy are routed and counted once in the primary's /metrics", async () => {
    assert.equal(childPids(server.pid ?? 0).length, 2, 'two cluster workers');
    const port = envoy.listenerPort('llm_gateway');
    const results = await Promise.all(
      Array.from({ length: 20 }, (_, i) =>
        send(port, { path: CHAT, body: { model: MODEL, messages: [{ role: 'user', content: `hi ${i}` }] } }),
      ),
    );
    for (const res of results) assert.equal(res.status, 200, res.text());
    const metrics = (await httpGet(httpPort, '/metrics')).body;
    assert.equal(metricValue(metrics, 'llm_extproc_requests_total', { model: MODEL, result: 'ok' }), 20);
    // Which worker served each request: its 'request served' line carries the worker's index.
    const served = await waitUntil(
      () => {
        const lines = logLines().filter((line) => line.msg === 'request served');
        return lines.length === 20 ? lines : undefined;
      },
      { description: "20 'request served' lines" },
    );
    const byWorker = new Map<unknown, number>();
    for (const line of served) byWorker.set(line.worker, (byWorker.get(line.worker) ?? 0) + 1);
    assert.deepEqual([...byWorker.keys()].sort(), [0, 1], `both workers served requests: ${JSON.stringify([...byWorker])}`);
    // The cache is the same in every worker: reported once, not summed.
    assert.equal(metricValue(metrics, 'llm_extproc_endpoints', { pool: 'pool', state: 'Ready' }), 1);
    assert.match(metrics, /^llm_extproc_event_loop_delay_seconds_count \d+/m);
    const view = JSON.parse((await httpGet(httpPort, '/debug/endpoints')).body) as {
      pools: { name: string; endpoints: { address: string }[] }[];
    };
    assert.deepEqual(
      view.pools.map((p) => [p.name, p.endpoints.map((e) => e.address)]),
      [['pool', [model.address]]],
    );
  });

  void it('replaces a worker that dies, and serves requests again', async () => {
    const [victim, survivor] = childPids(server.pid ?? 0);
    process.kill(victim, 'SIGKILL');
    await waitUntil(
      () => {
        const now = childPids(server.pid ?? 0);
        return now.length === 2 && !now.includes(victim) && now.includes(survivor) ? true : undefined;
      },
      { description: 'a replacement worker', timeoutMs: 30_000 },
    );
    await waitUntil(async () => ((await httpGet(httpPort, '/readyz')).status === 200 ? true : undefined), {
      description: 'ready with both workers',
      timeoutMs: 30_000,
    });
    const port = envoy.listenerPort('llm_gateway');
    // Envoy notices the closed connection and dials again; the next requests succeed.
    await waitUntil(
      async () =>
        (await send(port, { path: CHAT, body: { model: MODEL, messages: [{ role: 'user', content: 'again' }] } })).status === 200
          ? true
          : undefined,
      {
        description: 'a routed request after the replacement',
        timeoutMs: 30_000,
      },
    );
  });

  void it('SIGTERM drains every worker: a stream in flight completes, the primary exits 0, every log line strict JSON', async () => {
    const workers = childPids(server.pid ?? 0);
    assert.equal(workers.length, 2);
    let release!: () => void;
    const released = new Promise<void>((resolve) => (release = resolve));
    model.nextBehavior({ kind: 'paused-stream', release: released, afterEvents: 2 });
    let streaming!: () => void;
    const firstBytes = new Promise<void>((resolve) => (streaming = resolve));
    const inFlight = send(envoy.listenerPort('llm_gateway'), {
      path: CHAT,
      body: { model: MODEL, stream: true, messages: [{ role: 'user', content: 'in flight at SIGTERM' }] },
      onData: () => streaming(),
    });
    try {
      await firstBytes;
      const shuttingDown = (): number => logLines().filter((line) => line.msg === 'shutting down').length;
      const before = shuttingDown();
      server.kill('SIGTERM');
      // The primary and both workers say so; the workers' gRPC servers then wait for the open stream.
      await waitUntil(() => (shuttingDown() >= before + 3 ? true : undefined), {
        description: 'the primary and both workers shutting down',
      });
      assert.equal(server.exitCode, null, 'still running while the stream is open');
    } finally {
      release();
    }
    const response = await inFlight;
    assert.equal(response.status, 200);
    assert.equal(response.error, undefined, 'the stream in flight at SIGTERM completed');
    assert.deepEqual(response.body, model.requests.at(-1)?.response.body, 'every byte the model server sent');
    assert.match(response.text(), /data: \[DONE\]\n\n$/);
    const { code, signal } = await exited;
    assert.deepEqual({ code, signal }, { code: 0, signal: null }, output.split('\n').slice(-20).join('\n'));
    for (const pid of workers) assert.throws(() => process.kill(pid, 0), /ESRCH/, `worker ${pid} is gone`);
    const lines = logLines();
    const stopped = lines.filter((line) => line.msg === 'gRPC server stopped').map((line) => line.worker);
    assert.deepEqual(stopped.sort(), [0, 1], 'each worker stopped its gRPC server');
    assert.ok(!lines.some((line) => /grace period/.test(String(line.msg))), 'the stream ended before the grace period ran out');
    assert.deepEqual(rejected, [], 'every stdout line is strict JSON');
  });
});
