// The real program as a process under a real Envoy: what a container orchestrator does to it
// (SIGTERM during a stream, kill -9 and restart) and what it does to itself on a bug (exit).

import assert from 'node:assert/strict';
import { mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { fileURLToPath, pathToFileURL } from 'node:url';
import { stringify as toYaml } from 'yaml';
import { CATALOG, type ErrorKind } from '../../src/errors/catalog.js';
import { longPromptBody } from '../../scripts/bench/long-prompts.js';
import { metricValue } from '../support/prometheus.js';
import { startEnvoy, type RunningEnvoy } from '../support/envoy-process.js';
import { startExtprocProcess, type ExtprocProcess } from '../support/extproc-process.js';
import { loopbackGatewayConfig, poolsYaml, type StaticPoolSpec } from '../support/gateway.js';
import { send, type ClientRequest, type ClientResponse } from '../support/http-client.js';
import { startModelServer, type ModelServer } from '../support/model-server.js';
import { waitUntil } from '../support/wait-until.js';

const CRASH_PRELOAD = pathToFileURL(join(dirname(fileURLToPath(import.meta.url)), '..', 'support', 'crash-on-signal.js')).href;

function chat(stream: boolean): ClientRequest {
  return { path: '/v1/chat/completions', body: { model: 'm', stream, messages: [{ role: 'user', content: 'hi' }] } };
}

function assertCatalogError(response: ClientResponse, kind: ErrorKind): void {
  const entry = CATALOG[kind];
  assert.equal(response.status, entry.status, response.text());
  assert.match(response.headers['content-type'] ?? '', /^application\/json/);
  const body = response.json() as { error: { code: string; type: string } };
  assert.equal(body.error.code, entry.code);
  assert.equal(body.error.type, entry.type);
}

/** A config file, an endpoints file and a Unix socket path in a fresh directory. */
async function programFiles(
  pools: readonly StaticPoolSpec[],
  graceSeconds: number,
): Promise<{ dir: string; configPath: string; socket: string }> {
  const dir = await mkdtemp(join(tmpdir(), 'llm-extproc-proc-'));
  const endpoints = join(dir, 'endpoints.yaml');
  const socket = join(dir, 'grpc.sock');
  await writeFile(endpoints, poolsYaml(pools));
  const config = {
    listen: { grpc: `unix://${socket}`, http: '127.0.0.1:0' },
    logLevel: 'info',
    static: { path: endpoints },
    shutdownDrainSeconds: 0,
    shutdownGraceSeconds: graceSeconds,
  };
  const configPath = join(dir, 'config.yaml');
  await writeFile(configPath, toYaml(config));
  return { dir, configPath, socket };
}

/** Envoy in front, reaching llm-extproc over its Unix socket (a restart keeps the address). */
async function envoyFor(socket: string, backends: readonly string[]): Promise<{ envoy: RunningEnvoy; port: number }> {
  const config = loopbackGatewayConfig(`unix://${socket}`, backends);
  const envoy = await startEnvoy({ configYaml: toYaml(config), name: 'process-test' });
  return { envoy, port: envoy.listenerPort('llm_gateway') };
}

describe('llm-extproc as a process under a real Envoy', () => {
  it('SIGTERM during a stream: the stream completes, new requests get catalog JSON, exit 0 within the grace period', async () => {
    let release!: () => void;
    const released = new Promise<void>((resolve) => (release = resolve));
    const server = await startModelServer({ id: 's', models: ['m'], behavior: { kind: 'paused-stream', release: released } });
    const files = await programFiles([{ name: 'p', models: ['m'], endpoints: [{ address: server.address }] }], 30);
    let proc: ExtprocProcess | undefined;
    let envoy: RunningEnvoy | undefined;
    try {
      proc = await startExtprocProcess({ configPath: files.configPath });
      const running = proc;
      const gateway = await envoyFor(files.socket, [server.address]);
      envoy = gateway.envoy;
      let signalled = false;
      const streaming = send(gateway.port, {
        ...chat(true),
        onData: () => {
          if (signalled) return;
          signalled = true;
          running.signal('SIGTERM');
        },
      });
      // The documented drain (drain 0 here): in the same turn as the "shutting down" line the
      // server stops accepting connections and sends GOAWAY on Envoy's one connection. The GOAWAY
      // is two-step (RFC 9113 §6.8): a stream Envoy opened before it read it is still served. Any
      // reply to such a stream follows the GOAWAY on the wire, so once a request sent after the
      // line has been answered, Envoy has read the GOAWAY and opens no stream on that connection
      // again. Requests sent one after another after the line: at most the first is served.
      await running.waitForLog(/^shutting down$/);
      const afterDrain = [await send(gateway.port, chat(false))];
      if (afterDrain[0].status === 200) afterDrain.push(await send(gateway.port, chat(false)));
      const refused = afterDrain.at(-1)!;
      assertCatalogError(refused, 'gateway_unavailable');
      const servedAfterDrain = afterDrain.length - 1;
      assert.equal(server.requests.length, 1 + servedAfterDrain, 'the refused request reached no model server');
      release();
      const response = await streaming;
      assert.equal(response.status, 200);
      assert.equal(response.error, undefined, 'the open stream was not cut off');
      const sent = server.requests[0].response;
      assert.equal(await sent.settled, 'ended');
      assert.deepEqual(response.body, sent.body, 'the client got every byte the model server sent');
      assert.match(response.text(), /data: \[DONE\]\s*$/);
      const exit = await running.exitWithin(30_000);
      assert.deepEqual(exit, { code: 0, signal: null }, running.output());
      const messages = running.logLines().map((line) => line.msg);
      assert.ok(!messages.some((m) => typeof m === 'string' && /grace period/.test(m)), 'exited before the grace period ran out');
      assert.ok(messages.includes('gRPC server stopped'));
    } finally {
      release();
      await envoy?.stop();
      await proc?.kill();
      await server.close();
      await rm(files.dir, { recursive: true, force: true });
    }
  });

  describe('kill -9 and restart', () => {
    let ready: ModelServer;
    let notReady: ModelServer;
    let files: { dir: string; configPath: string; socket: string };
    let envoy: RunningEnvoy | undefined;
    let port: number;
    let proc: ExtprocProcess | undefined;

    before(async () => {
      ready = await startModelServer({ id: 'ready', models: ['m'] });
      notReady = await startModelServer({ id: 'not-ready', models: ['m'] });
      files = await programFiles(
        [
          {
            name: 'p',
            models: ['m'],
            endpoints: [{ address: ready.address }, { address: notReady.address, state: 'NotReady', reason: 'readiness probe failing' }],
          },
        ],
        1,
      );
      proc = await startExtprocProcess({ configPath: files.configPath });
      const gateway = await envoyFor(files.socket, [ready.address, notReady.address]);
      envoy = gateway.envoy;
      port = gateway.port;
    });

    after(async () => {
      await envoy?.stop();
      await proc?.kill();
      await Promise.all([ready?.close(), notReady?.close()]);
      if (files !== undefined) await rm(files.dir, { recursive: true, force: true });
    });

    it('fails with catalog JSON while down, serves again once back, never routes to the not-ready replica', async () => {
      const before = await send(port, chat(false));
      assert.equal(before.status, 200, before.text());
      const first = proc!;
      first.signal('SIGKILL');
      assert.deepEqual(await first.exited, { code: null, signal: 'SIGKILL' });
      const servedBeforeKill = ready.requests.length;

      for (let i = 0; i < 3; i++) assertCatalogError(await send(port, chat(i === 1)), 'gateway_unavailable');
      assert.equal(ready.requests.length, servedBeforeKill, 'fail closed: nothing is routed while llm-extproc is down');

      proc = await startExtprocProcess({ configPath: files.configPath });
      assert.ok(
        proc.logLines().some((line) => line.msg === 'removing stale unix socket'),
        'the killed process left its socket behind',
      );
      // Envoy reconnects on the next request; a few seconds cover its connect backoff.
      const back = await waitUntil(
        async () => {
          const response = await send(port, chat(true));
          if (response.status === 200) return response;
          assertCatalogError(response, 'gateway_unavailable');
          return undefined;
        },
        { description: 'a request served after the restart', timeoutMs: 5_000, intervalMs: 100 },
      );
      assert.equal(back.error, undefined);
      assert.match(back.text(), /data: \[DONE\]/);
      for (let i = 0; i < 5; i++) assert.equal((await send(port, chat(false))).status, 200);
      assert.equal(notReady.requests.length, 0, 'nothing was ever routed to the not-ready replica');
    });
  });

  it('long prompts: the Buffers of 40 bodies of 1 MiB are freed as they die, not kept until a full collection of the heap', async () => {
    // Each 1 MiB prompt leaves 2-4 MiB of dead Buffers (socket reads, the reassembled message) and
    // next to nothing on the heap, so no scavenge comes to free them: they pile up outside the heap
    // until V8, which counts them against the old generation's budget, marks and compacts the whole
    // heap (every few prompts on a replica after a load: the long-prompt tail in docs/benchmarks.md,
    // "Memory"). The process scavenges them as they die instead. Its memory is read from outside
    // (/proc), between prompts: a scrape of /metrics would allocate, and so scavenge, by itself.
    const server = await startModelServer({ id: 'long', models: ['m'] });
    const files = await programFiles([{ name: 'p', models: ['m'], endpoints: [{ address: server.address }] }], 1);
    const proc = await startExtprocProcess({ configPath: files.configPath });
    const { envoy, port } = await envoyFor(files.socket, [server.address]);
    try {
      const rssMiB = async (): Promise<number> =>
        Number(/VmRSS:\s+(\d+) kB/.exec(await readFile(`/proc/${proc.pid}/status`, 'utf8'))?.[1]) / 1024;
      const scavenges = async (): Promise<number> =>
        metricValue(
          await (await fetch(`http://127.0.0.1:${proc.httpPort}/metrics`)).text(),
          'llm_extproc_nodejs_gc_duration_seconds_count',
          {
            kind: 'minor',
          },
        );
      const body = longPromptBody('m', 1024 * 1024);
      // Warmed up: the first prompts size the allocator's arenas and V8's code for this path.
      for (let i = 0; i < 5; i++) assert.equal((await send(port, { path: '/v1/chat/completions', body })).status, 200);
      const scavengesBefore = await scavenges();
      const before = await rssMiB();
      let highest = before;
      for (let i = 0; i < 40; i++) {
        const response = await send(port, { path: '/v1/chat/completions', body });
        assert.equal(response.status, 200, response.text());
        highest = Math.max(highest, await rssMiB());
      }
      const seen = `${(await scavenges()) - scavengesBefore} scavenges, resident memory up ${(highest - before).toFixed(1)} MiB at most, over 40 prompts of 1 MiB`;
      // Measured: 21 scavenges (one per 2-3 prompts, and those the heap's own allocations set off)
      // and 2-7 MiB; without the trigger 6-8 scavenges and 14-23 MiB.
      assert.ok((await scavenges()) - scavengesBefore >= 14, seen);
      assert.ok(highest - before <= 12, seen);
    } finally {
      await envoy.stop();
      await proc.kill();
      await server.close();
      await rm(files.dir, { recursive: true, force: true });
    }
  });

  for (const crash of ['exception', 'rejection'] as const) {
    it(`an unhandled ${crash} is logged and ends the process with exit code 1`, async () => {
      const files = await programFiles([{ name: 'p', models: ['m'], endpoints: [{ address: '127.0.0.1:9', state: 'NotReady' }] }], 1);
      const proc = await startExtprocProcess({
        configPath: files.configPath,
        nodeArgs: ['--import', CRASH_PRELOAD],
        env: { LLM_EXTPROC_TEST_CRASH: crash },
      });
      try {
        proc.signal('SIGUSR2');
        assert.deepEqual(await proc.exitWithin(10_000), { code: 1, signal: null }, proc.output());
        const fatal = proc.logLines().find((line) => line.level === 60);
        assert.match(String(fatal?.msg), crash === 'exception' ? /^uncaught exception/ : /^unhandled rejection/);
        assert.match(JSON.stringify(fatal?.err), /injected/);
      } finally {
        await proc.kill();
        await rm(files.dir, { recursive: true, force: true });
      }
    });
  }
});
