// End to end: the gateway scenarios (test/support/gateway-scenarios.ts, also run behind the live
// controllers) through a real Envoy under the configuration each gateway generates for an
// InferencePool (tools/envoy-config/gateway-profiles.ts), and what only a profile can show (a dying
// replica, the subset hint, TLS to llm-extproc). One table row per gateway; a scenario a gateway
// cannot support is listed in its row with the documented fallback, and that fallback is what the
// cell asserts (docs/gateways.md explains each).

import assert from 'node:assert/strict';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { stringify as toYaml } from 'yaml';
import type { PickerTls } from '../../tools/envoy-config/gateway-config.js';
import {
  GATEWAY_PROFILE_NAMES,
  GATEWAY_PROFILES,
  TEST_SUBSET_HINT_HEADER,
  subsetHintHeaderValue,
  type GatewayProfileName,
} from '../../tools/envoy-config/gateway-profiles.js';
import { assertCatalogError } from '../support/catalog-assert.js';
import { startGateway, type Gateway, type GatewayOptions, type StaticPoolSpec } from '../support/gateway.js';
import { metricValue } from '../support/prometheus.js';
import type { ClientRequest } from '../support/http-client.js';
import { startModelServer, type Behavior, type ModelServer } from '../support/model-server.js';
import { caVolume, fingerprint, handshakeServed, makeTestCa, secretVolume, servedFingerprint } from '../support/tls-files.js';
import type { TlsIdentity } from '../../src/grpc/tls-identity.js';
import { waitUntil } from '../support/wait-until.js';
import { ARRANGED_POOLS, arrangedPools, fromArrangedPools, gatewayScenarios } from '../support/gateway-scenarios.js';

const CHAT = '/v1/chat/completions';

function chat(model: string, extra: Record<string, unknown> = {}): ClientRequest {
  return { path: CHAT, body: { model, messages: [{ role: 'user', content: 'hi there' }], ...extra } };
}

/** What each gateway can do with a scenario; anything but the default is explained in docs/gateways.md. */
interface Row {
  readonly profile: GatewayProfileName;
  /** How Envoy dials llm-extproc in this row (the gateway's usual way). */
  readonly pickerTls: 'plaintext' | 'unverified' | 'verified';
  /** A 5 MB request body: passes byte-identical, or the gateway's buffer limit answers 413. */
  readonly bigBody: 'identical' | 'body_too_large';
  /** `envoy.lb.subset_hint`: forwarded to the picker (kgateway), or never sent (the hint header is ignored). */
  readonly subsetHint: 'honoured' | 'not_forwarded';
  /**
   * A response body held whole by Envoy (BUFFERED) never reaches the client in part: a reset
   * half-way becomes a failed response instead of a stream broken after bytes went out.
   */
  readonly responseHeld?: boolean;
}

const ROWS: readonly Row[] = [
  { profile: 'ours', pickerTls: 'plaintext', bigBody: 'identical', subsetHint: 'not_forwarded' },
  { profile: 'aigw', pickerTls: 'unverified', bigBody: 'identical', subsetHint: 'not_forwarded' },
  // Envoy Gateway's 32 KiB listener buffer limit holds a BUFFERED body: 5 MB cannot fit.
  { profile: 'aigw-buffered', pickerTls: 'unverified', bigBody: 'body_too_large', subsetHint: 'not_forwarded', responseHeld: true },
  { profile: 'kgateway', pickerTls: 'unverified', bigBody: 'identical', subsetHint: 'honoured' },
];

/**
 * Profiles whose gateway runs live in the suite instead (its controller programs a real Envoy):
 * istio in live-istio*.test.ts, which also holds the profile against istiod's output.
 */
const LIVE_CONTROLLERS: ReadonlySet<GatewayProfileName> = new Set(['istio']);

void describe('the table covers every profile', () => {
  void it('has one row per gateway profile without a live controller', () => {
    assert.deepEqual(ROWS.map((r) => r.profile).sort(), GATEWAY_PROFILE_NAMES.filter((n) => !LIVE_CONTROLLERS.has(n)).sort());
  });
});

for (const row of ROWS) {
  void describe(`behind ${row.profile}: ${GATEWAY_PROFILES[row.profile].title}`, () => {
    const servers = new Map<string, ModelServer>();
    let gateway: Gateway;
    let dir: string;

    async function server(id: string, behavior: Behavior = { kind: 'ok' }): Promise<ModelServer> {
      const s = await startModelServer({ id, models: [id], behavior });
      servers.set(id, s);
      return s;
    }
    const get = (id: string): ModelServer => servers.get(id)!;

    before(async () => {
      dir = await mkdtemp(join(tmpdir(), `llm-extproc-gw-${row.profile}-`));
      const [a, b, notReady, other] = await Promise.all([server('chat-a'), server('chat-b'), server('chat-c'), server('other')]);
      // A pool of its own for each way a scenario needs its replicas to answer (gateway-scenarios.ts).
      const arranged = arrangedPools();
      await Promise.all(arranged.flatMap((pool) => pool.replicas.map((id) => server(id, pool.behavior))));
      const [dyingA, dyingB] = await Promise.all([server('dying-a'), server('dying-b')]);
      const pools: StaticPoolSpec[] = [
        {
          name: 'chat',
          models: ['chat'],
          endpoints: [
            { address: a.address },
            { address: b.address },
            { address: notReady.address, state: 'NotReady', reason: 'readiness probe failing' },
          ],
        },
        { name: 'other', models: ['other'], endpoints: [{ address: other.address }] },
        { name: 'starting', models: ['starting'], endpoints: [{ address: '127.0.0.1:1', state: 'Starting', reason: 'ContainerCreating' }] },
        ...arranged.map((pool) => ({
          name: pool.model,
          models: [pool.model],
          endpoints: pool.replicas.map((id) => ({ address: get(id).address })),
        })),
        { name: 'dying', models: ['dying'], endpoints: [{ address: dyingA.address }, { address: dyingB.address }] },
      ];
      let pickerTls: PickerTls = { kind: row.pickerTls === 'verified' ? 'plaintext' : row.pickerTls };
      let tlsYaml = '';
      if (row.pickerTls === 'verified') {
        const ca = await makeTestCa();
        const volume = await secretVolume(join(dir, 'tls'), await ca.issue());
        pickerTls = { kind: 'verified', caPem: ca.caPem, serverName: 'localhost' };
        tlsYaml = `listen:\n  tls:\n    enabled: true\n    certFile: ${volume.certFile}\n    keyFile: ${volume.keyFile}\n`;
      }
      gateway = await startGateway({
        profile: row.profile,
        pickerTls,
        pools,
        // No metrics scraping: a replica refused mid-test would fail its next scrape and from then
        // on never be primary, so whether the dying-replica test sees it tried would depend on the
        // scrape timer. Picks go by our in-flight counts, ties at random.
        configYaml: `${tlsYaml}quarantine:\n  consecutiveFailures: 1000\npicker:\n  metrics:\n    enabled: false\n`,
        debugEndpoints: true,
        envoy: { routeTimeoutSeconds: 2 },
      });
      // Refuse only now: a port freed earlier could be taken by Envoy's own ephemeral listeners.
      await Promise.all(ARRANGED_POOLS.refuse.replicas.map((id) => get(id).refuse()));
    });

    after(async () => {
      await gateway?.stop();
      await Promise.all([...servers.values()].map((s) => s.close()));
      if (dir !== undefined) await rm(dir, { recursive: true, force: true });
    });

    /** The state /debug/endpoints shows for an address. */
    async function endpointState(address: string): Promise<string | undefined> {
      const response = await fetch(`http://127.0.0.1:${gateway.app.httpPort}/debug/endpoints`);
      const body = (await response.json()) as { pools: Array<{ endpoints: Array<{ address: string; state: string }> }> };
      return body.pools.flatMap((p) => p.endpoints).find((e) => e.address === address)?.state;
    }

    gatewayScenarios(
      () => ({
        send: (request) => gateway.send(request),
        metricsText: () => gateway.metricsText(),
        chat: { model: 'chat', ready: [get('chat-a'), get('chat-b')], notReady: get('chat-c') },
        other: { model: 'other', server: get('other') },
        arrange: fromArrangedPools(get),
        endpointState,
      }),
      {
        bodies: { bytes: [5 * 1024 * 1024], outcome: row.bigBody },
        startingModel: 'starting',
        resetBlamed: true,
        routeTimesOut: true,
        ...(row.responseHeld === true ? { responseHeld: true } : {}),
      },
    );

    void it('a model server killed under sequential traffic fails at most one request; the next go elsewhere; it shows Quarantined', async () => {
      const [dead, alive] = [get('dying-a'), get('dying-b')];
      await dead.refuse();
      const outcomes: number[] = [];
      // Ties break at random, so the dead replica is primary about every other request: keep going
      // until it was and got quarantined (200 requests make a miss impossible in practice).
      for (let i = 0; i < 200 && (await endpointState(dead.address)) !== 'Quarantined'; i++) {
        const response = await gateway.send(chat('dying'));
        if (response.status === 200) assert.equal(response.headers['x-model-server-id'], alive.id);
        else assertCatalogError(response, 'upstream_connect_failed');
        outcomes.push(response.status);
      }
      for (let i = 0; i < 10; i++) {
        const response = await gateway.send(chat('dying'));
        assert.equal(response.status, 200, 'once quarantined, the dead replica is no longer tried');
        assert.equal(response.headers['x-model-server-id'], alive.id);
      }
      assert.ok(outcomes.filter((s) => s !== 200).length <= 1, `statuses: ${outcomes.join(' ')}`);
      assert.equal(await endpointState(dead.address), 'Quarantined');
      // consecutiveFailures is 1000 here: only the check after the first failure can have done it.
      assert.equal(
        metricValue(await gateway.metricsText(), 'llm_extproc_upstream_attempts_total', { endpoint: dead.address, outcome: 'failure' }),
        1,
        'the dead replica was tried exactly once',
      );
    });

    if (row.subsetHint === 'honoured') {
      void it('subset hint: picks only hinted endpoints', async () => {
        // N distinct prompts, first without a hint: prefix affinity spreads them over both ready
        // endpoints (the control; the test needs both seen). Then the same N prompts hinted to
        // chat-b must all land on chat-b. A picker that ignored the hint would route them as the
        // control did, so the ones chat-a took would go there again (affinity is deterministic);
        // were it random instead, all N on chat-b by chance has probability 2^-N = 2^-24 ≈ 6·10^-8.
        const N = 24;
        const prompt = (i: number): ClientRequest => chat('chat', { messages: [{ role: 'user', content: `subset hint prompt ${i}` }] });
        const control: string[] = [];
        for (let i = 0; i < N; i++) {
          const response = await gateway.send(prompt(i));
          assert.equal(response.status, 200, response.text());
          control.push(response.headers['x-model-server-id'] ?? '');
        }
        assert.ok(control.includes('chat-a') && control.includes('chat-b'), `the prompts spread over both endpoints: ${control.join(',')}`);
        const b = get('chat-b');
        const before = get('chat-a').requests.length;
        for (let i = 0; i < N; i++) {
          const response = await gateway.send({ ...prompt(i), headers: { [TEST_SUBSET_HINT_HEADER]: subsetHintHeaderValue([b.address]) } });
          assert.equal(response.status, 200, response.text());
          assert.equal(response.headers['x-model-server-id'], 'chat-b', `prompt ${i} (went to ${control[i]} without the hint)`);
        }
        assert.equal(get('chat-a').requests.length, before, 'the endpoint outside the hint is never picked');
      });

      void it('subset hint: an empty hint, or one naming only unready endpoints, gives 503 JSON', async () => {
        const empty = await gateway.send({ ...chat('chat'), headers: { [TEST_SUBSET_HINT_HEADER]: subsetHintHeaderValue([]) } });
        assertCatalogError(empty, 'no_ready_replica');
        const unready = await gateway.send({
          ...chat('chat'),
          headers: { [TEST_SUBSET_HINT_HEADER]: subsetHintHeaderValue([get('chat-c').address]) },
        });
        assertCatalogError(unready, 'no_ready_replica');
        assert.equal(get('chat-c').requests.length, 0);
      });
    } else {
      void it('subset hint: this gateway never forwards one, so routing uses the whole pool', async () => {
        // Fallback documented in docs/gateways.md: without envoy.lb.subset_hint the picker chooses
        // from the pool's ready endpoints; a client cannot narrow that down.
        const seen = new Set<string>();
        for (let i = 0; i < 20 && seen.size < 2; i++) {
          const response = await gateway.send({
            ...chat('chat', { messages: [{ role: 'user', content: `hint ${i}` }] }),
            headers: { [TEST_SUBSET_HINT_HEADER]: subsetHintHeaderValue([get('chat-b').address]) },
          });
          assert.equal(response.status, 200, response.text());
          seen.add(response.headers['x-model-server-id'] ?? '');
        }
        assert.deepEqual([...seen].sort(), ['chat-a', 'chat-b']);
      });
    }
  });
}

// ---------------------------------------------------------------------------------------------
// TLS from Envoy to llm-extproc

/** The ext_proc cluster with one stream per connection (Envoy's max_requests_per_connection: 1). */
function oneStreamPerExtprocConnection(config: Record<string, unknown>): Record<string, unknown> {
  const key = 'envoy.extensions.upstreams.http.v3.HttpProtocolOptions';
  const resources = config.static_resources as { clusters: Array<Record<string, unknown>> };
  const clusters = resources.clusters.map((cluster) => {
    if (cluster.name !== 'llm_extproc') return cluster;
    const options = cluster.typed_extension_protocol_options as Record<string, Record<string, unknown>>;
    return {
      ...cluster,
      typed_extension_protocol_options: {
        ...options,
        [key]: { ...options[key], common_http_protocol_options: { max_requests_per_connection: 1 } },
      },
    };
  });
  assert.ok(
    clusters.some((c) => c.name === 'llm_extproc'),
    'the Envoy config has the llm_extproc cluster',
  );
  return { ...config, static_resources: { ...resources, clusters } };
}

void describe('Envoy reaches llm-extproc over TLS', () => {
  async function withGateway(
    pickerTls: PickerTls,
    configYaml: string,
    options: Pick<GatewayOptions, 'transformEnvoyConfig'>,
    fn: (gateway: Gateway, server: ModelServer) => Promise<void>,
  ): Promise<void> {
    const server = await startModelServer({ id: 'tls-m', models: ['m'], behavior: { kind: 'slow-chunks', delayMs: 200 } });
    let gateway: Gateway | undefined;
    try {
      gateway = await startGateway({
        pools: [{ name: 'p', models: ['m'], endpoints: [{ address: server.address }] }],
        pickerTls,
        configYaml,
        ...options,
      });
      await fn(gateway, server);
    } finally {
      await gateway?.stop();
      await server.close();
    }
  }

  void it('without verifying the certificate (self-signed at start)', async () => {
    await withGateway({ kind: 'unverified' }, 'listen:\n  tls:\n    enabled: true\n', {}, async (gateway) => {
      const response = await gateway.send(chat('m'));
      assert.equal(response.status, 200, response.text());
    });
  });

  void it('verifying the certificate against its CA; a certificate from another CA is refused (fail closed, JSON)', async () => {
    const dir = await mkdtemp(join(tmpdir(), 'llm-extproc-tls-e2e-'));
    try {
      const [ca, stranger] = await Promise.all([makeTestCa(), makeTestCa()]);
      const volume = await secretVolume(join(dir, 'tls'), await ca.issue());
      const tlsYaml = `listen:\n  tls:\n    enabled: true\n    certFile: ${volume.certFile}\n    keyFile: ${volume.keyFile}\n`;
      await withGateway({ kind: 'verified', caPem: ca.caPem, serverName: 'localhost' }, tlsYaml, {}, async (gateway, server) => {
        assert.equal((await gateway.send(chat('m'))).status, 200);
        assert.equal(server.requests.length, 1);
      });
      await withGateway({ kind: 'verified', caPem: stranger.caPem, serverName: 'localhost' }, tlsYaml, {}, async (gateway, server) => {
        assertCatalogError(await gateway.send(chat('m')), 'gateway_unavailable');
        assert.equal(server.requests.length, 0, 'nothing is routed without the picker');
      });
    } finally {
      await rm(dir, { recursive: true, force: true });
    }
  });

  for (const rotatedTo of ['a certificate of the same CA', 'a certificate of a CA Envoy does not trust'] as const) {
    const trusted = rotatedTo === 'a certificate of the same CA';
    void it(`certificate files replaced by ${rotatedTo}: a stream open across the swap completes; new connections ${trusted ? 'are served' : 'are refused (fail closed, JSON)'}`, async () => {
      const dir = await mkdtemp(join(tmpdir(), 'llm-extproc-tls-e2e-'));
      try {
        const [ca, stranger] = await Promise.all([makeTestCa(), makeTestCa()]);
        const volume = await secretVolume(join(dir, 'tls'), await ca.issue());
        const tlsYaml = `listen:\n  tls:\n    enabled: true\n    certFile: ${volume.certFile}\n    keyFile: ${volume.keyFile}\n`;
        const pickerTls: PickerTls = { kind: 'verified', caPem: ca.caPem, serverName: 'localhost' };
        // One ext_proc stream per connection: every request after the swap makes Envoy handshake
        // anew (with one shared connection, later requests would reuse the old session and never
        // see the new certificate).
        await withGateway(pickerTls, tlsYaml, { transformEnvoyConfig: oneStreamPerExtprocConnection }, async (gateway, server) => {
          const grpcPort = Number(gateway.app.grpcAddress.slice(gateway.app.grpcAddress.lastIndexOf(':') + 1));
          const tlsStats = async (): Promise<{ handshakes: number; failures: number }> => {
            const stats = await gateway.envoy.stats('^cluster\\.llm_extproc\\.ssl\\.');
            return {
              handshakes: stats['cluster.llm_extproc.ssl.handshake'] ?? 0,
              failures:
                (stats['cluster.llm_extproc.ssl.fail_verify_error'] ?? 0) + (stats['cluster.llm_extproc.ssl.connection_error'] ?? 0),
            };
          };
          let release!: () => void;
          const released = new Promise<void>((resolve) => (release = resolve));
          server.nextBehavior({ kind: 'paused-stream', release: released, afterEvents: 2 });
          let streaming!: () => void;
          const firstBytes = new Promise<void>((resolve) => (streaming = resolve));
          const inFlight = gateway.send({ ...chat('m', { stream: true }), onData: () => streaming() });
          try {
            await firstBytes;
            const before = await tlsStats();
            const next = trusted ? await ca.issue() : await stranger.issue();
            await volume.write(next);
            await waitUntil(async () => ((await servedFingerprint('127.0.0.1', grpcPort)) === fingerprint(next) ? true : undefined), {
              description: 'the new certificate served',
            });
            const served = server.requests.length;
            for (let i = 0; i < 3; i++) {
              const response = await gateway.send(chat('m'));
              if (trusted) assert.equal(response.status, 200, `request ${i} after the swap: ${response.text()}`);
              else assertCatalogError(response, 'gateway_unavailable');
            }
            const after = await tlsStats();
            if (trusted) {
              assert.ok(
                after.handshakes >= before.handshakes + 3,
                `a new handshake per request after the swap: ${JSON.stringify({ before, after })}`,
              );
              assert.equal(server.requests.length, served + 3);
            } else {
              assert.ok(after.failures >= before.failures + 1, `Envoy refused the new certificate: ${JSON.stringify({ before, after })}`);
              assert.equal(server.requests.length, served, 'nothing is routed without the picker');
            }
            assert.equal(server.requests[0].response.outcome, undefined, 'the first stream is still open, across the swap');
          } finally {
            release();
          }
          const response = await inFlight;
          assert.equal(response.status, 200);
          assert.equal(response.error, undefined, 'the stream open across the swap completes');
          const first = server.requests[0];
          assert.equal(await first.response.settled, 'ended');
          assert.deepEqual(response.body, first.response.body, 'every byte, the ones sent after the swap included');
          assert.match(response.text(), /data: \[DONE\]\n\n$/);
        });
      } finally {
        await rm(dir, { recursive: true, force: true });
      }
    });
  }
  for (const transport of ['native', 'grpc-js'] as const) {
    /** Envoy presenting `client` (a certificate and key) to llm-extproc. */
    const presenting = (caPem: string, client: TlsIdentity | undefined): PickerTls => ({
      kind: 'verified',
      caPem,
      serverName: 'localhost',
      ...(client === undefined ? {} : { clientCertificate: { certPem: client.cert.toString(), keyPem: client.key.toString() } }),
    });

    /** A serving pair from `ca`, the client CA `clients` in a mounted file, and the listen config using both. */
    async function mutualTls(dir: string) {
      const [ca, clients, other] = await Promise.all([makeTestCa(), makeTestCa(), makeTestCa()]);
      const volume = await secretVolume(join(dir, 'tls'), await ca.issue());
      const clientCa = await caVolume(join(dir, 'client-ca'), clients.caPem);
      const tls = { enabled: true, certFile: volume.certFile, keyFile: volume.keyFile, clientCaFile: clientCa.caFile };
      return { ca, clients, other, clientCa, tlsYaml: toYaml({ listen: { transport, tls } }) };
    }

    void it(`mutual TLS (listen.tls.clientCaFile, ${transport}): Envoy presenting a certificate of the client CA is served; without one, or with one of another CA, it is refused (fail closed, JSON)`, async () => {
      const dir = await mkdtemp(join(tmpdir(), 'llm-extproc-mtls-e2e-'));
      try {
        const { ca, clients, other: stranger, tlsYaml } = await mutualTls(dir);
        await withGateway(presenting(ca.caPem, await clients.issueClient('envoy')), tlsYaml, {}, async (gateway, server) => {
          const response = await gateway.send(chat('m'));
          assert.equal(response.status, 200, response.text());
          assert.equal(server.requests.length, 1);
        });
        for (const client of [undefined, await stranger.issueClient('envoy')]) {
          await withGateway(presenting(ca.caPem, client), tlsYaml, {}, async (gateway, server) => {
            assertCatalogError(await gateway.send(chat('m')), 'gateway_unavailable');
            assert.equal(server.requests.length, 0, 'nothing is routed without the picker');
            const grpcPort = Number(gateway.app.grpcAddress.slice(gateway.app.grpcAddress.lastIndexOf(':') + 1));
            assert.equal(await handshakeServed('127.0.0.1', grpcPort, client), false, 'the listener refuses that certificate');
          });
        }
      } finally {
        await rm(dir, { recursive: true, force: true });
      }
    });

    void it(`mutual TLS (${transport}): the client CA file replaced by another CA's: Envoy's next connections are refused, then served again once its certificate is trusted again`, async () => {
      const dir = await mkdtemp(join(tmpdir(), 'llm-extproc-mtls-e2e-'));
      try {
        const { ca, clients, other, clientCa, tlsYaml } = await mutualTls(dir);
        const envoyCert = await clients.issueClient('envoy');
        // One ext_proc stream per connection: each request makes Envoy handshake anew.
        await withGateway(
          presenting(ca.caPem, envoyCert),
          tlsYaml,
          { transformEnvoyConfig: oneStreamPerExtprocConnection },
          async (gateway, server) => {
            const grpcPort = Number(gateway.app.grpcAddress.slice(gateway.app.grpcAddress.lastIndexOf(':') + 1));
            assert.equal((await gateway.send(chat('m'))).status, 200);
            await clientCa.write(other.caPem);
            await waitUntil(async () => ((await handshakeServed('127.0.0.1', grpcPort, envoyCert)) ? undefined : true), {
              description: 'the replaced client CA in force',
            });
            assert.ok(await handshakeServed('127.0.0.1', grpcPort, await other.issueClient('other')), 'the new CA’s clients are served');
            const served = server.requests.length;
            assertCatalogError(await gateway.send(chat('m')), 'gateway_unavailable');
            assert.equal(server.requests.length, served, 'nothing is routed without the picker');
            await clientCa.write(clients.caPem);
            await waitUntil(async () => ((await handshakeServed('127.0.0.1', grpcPort, envoyCert)) ? true : undefined), {
              description: 'the original client CA back in force',
            });
            const response = await gateway.send(chat('m'));
            assert.equal(response.status, 200, response.text());
          },
        );
      } finally {
        await rm(dir, { recursive: true, force: true });
      }
    });
  }
});
