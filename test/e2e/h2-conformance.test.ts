// HTTP/2 conformance of the native transport, measured by a tool nobody on the project wrote:
// h2spec v2.2.1 (145 cases, 146 with the strict one) against the real program over h2c and over
// TLS. Every case must pass; afterwards the process is still up and serves a health check on a
// fresh connection (h2spec's cases end connections with every error code there is).

import assert from 'node:assert/strict';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { stringify as toYaml } from 'yaml';
import { startExtprocProcess, type ExtprocProcess } from '../support/extproc-process.js';
import { healthClient, type HealthClientTls } from '../support/grpc-health-client.js';
import { runH2spec } from '../support/h2spec.js';
import { makeTestCa, secretVolume } from '../support/tls-files.js';

/** h2spec v2.2.1's case counts: without and with `--strict`. */
const H2SPEC_CASES = 145;
const H2SPEC_STRICT_CASES = 146;

interface Listener {
  readonly proc: ExtprocProcess;
  readonly port: number;
  readonly tls: HealthClientTls | undefined;
}

void describe('HTTP/2 conformance of the native transport (h2spec v2.2.1)', () => {
  let dir: string;
  const listeners = new Map<'h2c' | 'TLS', Listener>();

  before(async () => {
    dir = await mkdtemp(join(tmpdir(), 'llm-extproc-h2spec-'));
    const endpoints = join(dir, 'endpoints.yaml');
    await writeFile(endpoints, 'pools: []\n');
    const ca = await makeTestCa();
    const volume = await secretVolume(join(dir, 'tls'), await ca.issue());
    for (const transport of ['h2c', 'TLS'] as const) {
      const tls = transport === 'TLS' ? { enabled: true, certFile: volume.certFile, keyFile: volume.keyFile } : undefined;
      const configPath = join(dir, `${transport}.yaml`);
      await writeFile(
        configPath,
        toYaml({
          listen: { grpc: '127.0.0.1:0', http: '127.0.0.1:0', transport: 'native', ...(tls === undefined ? {} : { tls }) },
          logLevel: 'info',
          static: { path: endpoints },
        }),
      );
      const proc = await startExtprocProcess({ configPath });
      const started = proc.logLines().find((line) => line.msg === 'llm-extproc started');
      const address = started?.['grpc'];
      const port = typeof address === 'string' ? Number(address.split(':').at(-1)) : NaN;
      assert.ok(port > 0, `a TCP port in the start line: ${JSON.stringify(started)}`);
      listeners.set(transport, { proc, port, tls: tls === undefined ? undefined : { caPem: ca.caPem } });
    }
  });

  after(async () => {
    for (const { proc } of listeners.values()) await proc.kill();
    await rm(dir, { recursive: true, force: true });
  });

  for (const transport of ['h2c', 'TLS'] as const) {
    for (const strict of [false, true]) {
      const expected = strict ? H2SPEC_STRICT_CASES : H2SPEC_CASES;
      void it(`${transport}: all ${expected} cases pass${strict ? ' (--strict)' : ''}, and a fresh connection is served after them`, async () => {
        const listener = listeners.get(transport);
        assert.ok(listener !== undefined);
        const run = await runH2spec({ host: '127.0.0.1', port: listener.port, tls: transport === 'TLS', strict });
        const failed = run.cases.filter((c) => c.outcome !== 'passed');
        assert.deepEqual(
          failed.map((c) => `${c.section} ${c.title}: ${c.outcome}\n${c.detail}`),
          [],
          `h2spec output:\n${run.output.slice(-4000)}`,
        );
        assert.equal(run.cases.length, expected, `h2spec ran ${run.cases.length} cases`);

        const client = healthClient(`127.0.0.1:${listener.port}`, listener.tls);
        try {
          assert.equal(await client.check(), 'SERVING');
        } finally {
          client.close();
        }
        const crashed = await Promise.race([listener.proc.exited.then(() => true), Promise.resolve(false)]);
        assert.equal(crashed, false, 'the process is still running');
      });
    }
  }
});
