// The log lines as a log pipeline reads them: the real program at logLevel trace under a real
// Envoy, through start, served and failed requests (an unknown model, a refused connection, a
// stream broken mid-way), SIGTERM and exit. Every stdout line must be strict JSON (no key twice:
// some pipelines reject such a line, others keep one of the values), with one `component` at most.

import assert from 'node:assert/strict';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, it } from 'node:test';
import { stringify as toYaml } from 'yaml';
import { GRPC_TRANSPORTS } from '../../src/config/schema.js';
import { startEnvoy } from '../support/envoy-process.js';
import type { RunningEnvoy } from '../support/envoy-process.js';
import { startExtprocProcess } from '../support/extproc-process.js';
import type { ExtprocProcess } from '../support/extproc-process.js';
import { loopbackGatewayConfig, poolsYaml } from '../support/gateway.js';
import { send } from '../support/http-client.js';
import { startModelServer } from '../support/model-server.js';

/** Nothing listens here: connecting is refused at once. */
const DEAD = '127.0.0.1:9';

function chat(model: string, stream: boolean) {
  return { path: '/v1/chat/completions', body: { model, stream, messages: [{ role: 'user', content: 'hello' }] } };
}

for (const transport of GRPC_TRANSPORTS) {
  describe(`log lines of a whole run (${transport} transport)`, () => {
    it('every line is strict JSON with one component at most, the gRPC server and the request path included', async () => {
      const good = await startModelServer({ id: 'good', models: ['m'] });
      const breaking = await startModelServer({ id: 'breaking', models: ['b'], behavior: { kind: 'reset-mid-stream', afterEvents: 2 } });
      const dir = await mkdtemp(join(tmpdir(), 'llm-extproc-logs-'));
      let proc: ExtprocProcess | undefined;
      let envoy: RunningEnvoy | undefined;
      try {
        const endpoints = join(dir, 'endpoints.yaml');
        const socket = join(dir, 'grpc.sock');
        await writeFile(
          endpoints,
          poolsYaml([
            { name: 'p', models: ['m'], endpoints: [{ address: good.address }, { address: DEAD }] },
            { name: 'q', models: ['b'], endpoints: [{ address: breaking.address }] },
          ]),
        );
        const configPath = join(dir, 'config.yaml');
        await writeFile(
          configPath,
          toYaml({
            listen: { grpc: `unix://${socket}`, http: '127.0.0.1:0', transport },
            logLevel: 'trace',
            static: { path: endpoints },
            shutdownDrainSeconds: 0,
            shutdownGraceSeconds: 5,
          }),
        );
        proc = await startExtprocProcess({ configPath });
        const config = loopbackGatewayConfig(`unix://${socket}`, [good.address, DEAD, breaking.address]);
        envoy = await startEnvoy({ configYaml: toYaml(config), name: `logs-${transport}` });
        const port = envoy.listenerPort('llm_gateway');

        for (let i = 0; i < 4; i++)
          assert.equal((await send(port, chat('m', i % 2 === 0))).status, 200, 'served (a fallback after the dead one)');
        assert.equal((await send(port, chat('unknown-model', false))).status, 404);
        // Whether Envoy forwarded the headers before the reset is a race; either way it is logged.
        await send(port, chat('b', true));
        proc.signal('SIGTERM');
        assert.deepEqual(await proc.exitWithin(20_000), { code: 0, signal: null }, proc.output());

        assert.deepEqual(proc.rejectedLines(), [], 'every stdout line is strict JSON');
        const lines = proc.logLines();
        const components = new Set(lines.map((line) => String(line.component)));
        for (const expected of ['grpc-server', 'extproc'])
          assert.ok(components.has(expected), `lines of ${expected} were logged (seen: ${[...components].join(', ')})`);
        for (const line of lines) {
          assert.equal(line.service, 'llm-extproc', JSON.stringify(line));
          assert.equal(typeof line.level, 'number');
          assert.equal(typeof line.time, 'number');
          assert.equal(typeof line.msg, 'string', JSON.stringify(line));
        }
        const messages = lines.map((line) => `${String(line.component)}: ${String(line.msg)}`);
        assert.ok(messages.includes('grpc-server: gRPC server listening'), messages.join('\n'));
        assert.ok(messages.includes('grpc-server: gRPC server stopped'), messages.join('\n'));
      } finally {
        await envoy?.stop();
        await proc?.kill();
        await Promise.all([good.close(), breaking.close()]);
        await rm(dir, { recursive: true, force: true });
      }
    });
  });
}
