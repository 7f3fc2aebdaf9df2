// Every gateway profile, with every way of dialling the picker, is a configuration the real Envoy
// 1.40 binary accepts (the end-to-end suite in gateways.test.ts then runs traffic through them).

import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { promisify } from 'node:util';
import { stringify as toYaml } from 'yaml';
import type { PickerTls } from '../../tools/envoy-config/gateway-config.js';
import { GATEWAY_PROFILE_NAMES, GATEWAY_PROFILES } from '../../tools/envoy-config/gateway-profiles.js';
import { envoyBinaryPath } from '../support/envoy-binary.js';
import { makeTestCa } from '../support/tls-files.js';

const run = promisify(execFile);

void describe('gateway profiles pass envoy --mode validate', () => {
  let dir: string;
  const tlsKinds: Array<{ name: string; tls: () => PickerTls }> = [];
  before(async () => {
    dir = await mkdtemp(join(tmpdir(), 'llm-extproc-profiles-'));
    const ca = await makeTestCa();
    tlsKinds.push(
      { name: 'plaintext', tls: () => ({ kind: 'plaintext' }) },
      { name: 'TLS, not verified', tls: () => ({ kind: 'unverified' }) },
      { name: 'TLS, verified', tls: () => ({ kind: 'verified', caPem: ca.caPem, serverName: 'llm-extproc.llm-extproc.svc' }) },
    );
  });
  after(async () => {
    await rm(dir, { recursive: true, force: true });
  });

  for (const name of GATEWAY_PROFILE_NAMES) {
    void it(`${name}: every picker TLS mode`, async () => {
      for (const { name: tlsName, tls } of tlsKinds) {
        const config = GATEWAY_PROFILES[name].render({
          listener: { address: '127.0.0.1', port: 0 },
          admin: { address: '127.0.0.1', port: 0 },
          extProc: '127.0.0.1:9002',
          pickerTls: tls(),
          backends: ['10.0.0.1:8000', '10.0.0.2:8000'],
        });
        const path = join(dir, `${name}.yaml`);
        await writeFile(path, toYaml(config));
        const { stdout, stderr } = await run(envoyBinaryPath(), ['--mode', 'validate', '--config-path', path, '--log-level', 'error']);
        assert.match(stdout + stderr, /OK/, `${name} (${tlsName})`);
      }
    });
  }
});
