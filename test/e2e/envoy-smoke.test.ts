// Proves the Envoy test harness itself: a real Envoy starts from a port-0 config, its listener is
// discoverable by name, it serves traffic, stats are readable, startup failures carry Envoy's own
// logs, and stop() leaves no process behind.

import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import type { TestContext } from 'node:test';
import { startEnvoy } from '../support/envoy-process.js';
import type { RunningEnvoy } from '../support/envoy-process.js';

const DIRECT_BODY = 'hello from a direct response';

function directResponseConfig(listenerName: string): string {
  return `
admin:
  address: { socket_address: { address: 127.0.0.1, port_value: 0 } }
static_resources:
  listeners:
  - name: ${listenerName}
    address: { socket_address: { address: 127.0.0.1, port_value: 0 } }
    filter_chains:
    - filters:
      - name: envoy.filters.network.http_connection_manager
        typed_config:
          "@type": type.googleapis.com/envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager
          stat_prefix: smoke
          route_config:
            virtual_hosts:
            - name: all
              domains: ["*"]
              routes:
              - match: { prefix: "/" }
                direct_response: { status: 200, body: { inline_string: "${DIRECT_BODY}" } }
          http_filters:
          - name: envoy.filters.http.router
            typed_config: { "@type": type.googleapis.com/envoy.extensions.filters.http.router.v3.Router }
`;
}

function processExists(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === 'ESRCH') return false;
    throw err;
  }
}

/** Starts an Envoy that the test stops afterwards, printing its logs if the test failed. */
async function envoyFor(t: TestContext, listenerName: string): Promise<RunningEnvoy> {
  const envoy = await startEnvoy({ configYaml: directResponseConfig(listenerName), name: `smoke-${listenerName}` });
  t.after(() => envoy.stop());
  return envoy;
}

async function withLogsOnFailure(t: TestContext, envoy: RunningEnvoy, body: () => Promise<void>): Promise<void> {
  try {
    await body();
  } catch (err) {
    t.diagnostic(`envoy logs:\n${envoy.logs()}`);
    throw err;
  }
}

void describe('envoy harness', () => {
  void it('serves a direct response on a discovered port and exposes stats', async (t) => {
    const envoy = await envoyFor(t, 'smoke');
    await withLogsOnFailure(t, envoy, async () => {
      const port = envoy.listenerPort('smoke');
      assert.ok(port > 0);
      const res = await fetch(`http://127.0.0.1:${port}/anything`);
      assert.equal(res.status, 200);
      assert.equal(await res.text(), DIRECT_BODY);

      const seen = await envoy.waitForStat('http.smoke.downstream_rq_2xx', (v) => v >= 1);
      assert.equal(seen, 1);
      const stats = await envoy.stats('^http\\.smoke\\.');
      assert.equal(stats['http.smoke.downstream_rq_2xx'], 1);
      assert.ok(Object.keys(stats).every((k) => k.startsWith('http.smoke.')));
      assert.match(envoy.logs(), /starting main dispatch loop/);
    });
  });

  void it('names known listeners when asked for an unknown one', async (t) => {
    const envoy = await envoyFor(t, 'only-one');
    assert.throws(() => envoy.listenerPort('missing'), /no listener "missing".*only-one/);
  });

  void it('runs two instances side by side on distinct ports', async (t) => {
    const [a, b] = await Promise.all([envoyFor(t, 'left'), envoyFor(t, 'right')]);
    assert.notEqual(a.adminUrl, b.adminUrl);
    assert.notEqual(a.listenerPort('left'), b.listenerPort('right'));
    for (const [envoy, name] of [
      [a, 'left'],
      [b, 'right'],
    ] as const) {
      const res = await fetch(`http://127.0.0.1:${envoy.listenerPort(name)}/`);
      assert.equal(await res.text(), DIRECT_BODY);
    }
  });

  void it('stop() leaves no process and is idempotent', async () => {
    const envoy = await startEnvoy({ configYaml: directResponseConfig('gone'), name: 'smoke-stop' });
    assert.ok(processExists(envoy.pid), 'envoy should be running before stop');
    await envoy.stop();
    assert.equal(processExists(envoy.pid), false);
    await envoy.stop();
    await assert.rejects(fetch(`${envoy.adminUrl}/ready`));
  });

  void it('rejects with Envoy logs when the config is invalid', async () => {
    const broken = directResponseConfig('broken').replace('stat_prefix: smoke', 'stat_prefix: smoke\n          no_such_field: 1');
    await assert.rejects(startEnvoy({ configYaml: broken, name: 'smoke-broken' }), (err: unknown) => {
      assert.ok(err instanceof Error);
      assert.match(err.message, /exited during startup \(exit code 1\)/);
      assert.match(err.message, /no_such_field/);
      return true;
    });
  });
});
