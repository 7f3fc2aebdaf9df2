// End-to-end harness: a real Envoy binary, our server (in-process, so tests can read its store and
// metrics), and real local model servers, wired by a generated static endpoints file.

import { mkdtemp, rename, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { pino } from 'pino';
import type { Logger } from 'pino';
import { parse as parseYaml, stringify as toYaml } from 'yaml';
import { startApp, type RunningApp } from '../../src/app.js';
import { buildConfig, type Config } from '../../src/config/config.js';
import type { EndpointState } from '../../src/endpoints/model.js';
import {
  DEFAULT_GATEWAY_OPTIONS,
  renderGatewayConfig,
  type BackendsCluster,
  type GatewayConfigOptions,
  type PickerTls,
} from '../../tools/envoy-config/gateway-config.js';
import { GATEWAY_PROFILES, type GatewayProfileName } from '../../tools/envoy-config/gateway-profiles.js';
import { startEnvoy, type RunningEnvoy } from './envoy-process.js';
import { send, type ClientRequest, type ClientResponse } from './http-client.js';
import { waitUntil } from './wait-until.js';

export interface StaticEndpointSpec {
  readonly address: string;
  readonly state?: Exclude<EndpointState, 'Quarantined'>;
  readonly reason?: string;
}

export interface StaticPoolSpec {
  readonly name: string;
  readonly models: readonly string[];
  readonly endpoints: readonly StaticEndpointSpec[];
}

export interface GatewayOptions {
  /** Static pools; omit when `configYaml` sets up another source (e.g. Kubernetes). */
  readonly pools?: readonly StaticPoolSpec[];
  /** Serve /debug/endpoints (listen.debugEndpoints; off by default, as in the server). */
  readonly debugEndpoints?: boolean;
  /** Extra llm-extproc config YAML (merged under our listen/source settings). */
  readonly configYaml?: string;
  /** Every address Envoy's backends cluster must know (defaults to all static endpoint addresses). */
  readonly backendAddresses?: readonly string[];
  readonly backends?: BackendsCluster;
  readonly envoy?: Partial<Omit<GatewayConfigOptions, 'extProc' | 'backends'>>;
  /** Edits the rendered Envoy config before Envoy starts (e.g. another gateway's ext_proc modes). */
  readonly transformEnvoyConfig?: (config: Record<string, unknown>) => Record<string, unknown>;
  /** Wait for the endpoint cache to sync before returning (default true). */
  readonly waitForSync?: boolean;
  /**
   * Run Envoy with the configuration this gateway generates (tools/envoy-config/gateway-profiles.ts)
   * instead of ours; llm-extproc gets the profile's `routing.destinationFormat` unless configYaml
   * sets one. Only `envoy.routeTimeoutSeconds` applies to a profile.
   */
  readonly profile?: GatewayProfileName;
  /**
   * How Envoy dials llm-extproc (default: plaintext, or `unverified` where the profile's gateway
   * always uses TLS). Anything but plaintext turns on `listen.tls` (self-signed) unless configYaml
   * sets `listen.tls`.
   */
  readonly pickerTls?: PickerTls;
  /** Our server's logger (default: pino at LLM_EXTPROC_TEST_LOG_LEVEL, silent), e.g. to assert on log lines. */
  readonly logger?: Logger;
}

export interface Gateway {
  readonly app: RunningApp;
  readonly envoy: RunningEnvoy;
  readonly port: number;
  readonly dir: string;
  readonly endpointsFile: string;
  send(req: ClientRequest): Promise<ClientResponse>;
  /** Atomically replaces the static endpoints file (as a ConfigMap update would). */
  writePools(pools: readonly StaticPoolSpec[]): Promise<void>;
  /** Prometheus text of our server's registry. */
  metricsText(): Promise<string>;
  stop(): Promise<void>;
}

export function poolsYaml(pools: readonly StaticPoolSpec[]): string {
  return toYaml({ pools: pools.map((p) => ({ name: p.name, models: [...p.models], endpoints: p.endpoints.map((e) => ({ ...e })) })) });
}

/**
 * Our own Envoy config for one llm-extproc and fixed backends, listener and admin on loopback with
 * ephemeral ports: what every test that starts its own server (or container) hands to Envoy.
 */
export function loopbackGatewayConfig(
  extProc: string,
  backendAddresses: readonly string[],
  overrides: Partial<Omit<GatewayConfigOptions, 'extProc'>> = {},
): Record<string, unknown> {
  return renderGatewayConfig({
    ...DEFAULT_GATEWAY_OPTIONS,
    listener: { address: '127.0.0.1', port: 0 },
    admin: { address: '127.0.0.1', port: 0 },
    backends: { kind: 'static', addresses: backendAddresses },
    ...overrides,
    extProc,
  });
}

const logLevel = (process.env.LLM_EXTPROC_TEST_LOG_LEVEL ?? 'silent') as Config['logLevel'];

export async function startGateway(options: GatewayOptions): Promise<Gateway> {
  const dir = await mkdtemp(join(tmpdir(), 'llm-extproc-e2e-'));
  const endpointsFile = join(dir, 'endpoints.yaml');
  const pools = options.pools ?? [];
  await writeFile(endpointsFile, poolsYaml(pools));
  const profile = options.profile === undefined ? undefined : GATEWAY_PROFILES[options.profile];
  const pickerTls: PickerTls = options.pickerTls ?? (profile?.picker.tls === 'required' ? { kind: 'unverified' } : { kind: 'plaintext' });
  // The test's own settings win over the harness defaults (`listen` and `routing` key by key).
  const own = (parseYaml(options.configYaml ?? '') as Record<string, unknown> | null) ?? {};
  const section = (key: string): Record<string, unknown> => (own[key] as Record<string, unknown> | undefined) ?? {};
  const settings: Record<string, unknown> = {
    shutdownDrainSeconds: 0,
    shutdownGraceSeconds: 1,
    ...(options.pools === undefined ? {} : { static: { path: endpointsFile } }),
    ...own,
    listen: {
      grpc: '127.0.0.1:0',
      http: '127.0.0.1:0',
      ...(pickerTls.kind === 'plaintext' ? {} : { tls: { enabled: true } }),
      ...(options.debugEndpoints === true ? { debugEndpoints: true } : {}),
      ...section('listen'),
    },
    ...(profile === undefined && own.routing === undefined
      ? {}
      : { routing: { ...(profile === undefined ? {} : { destinationFormat: profile.picker.destinationFormat }), ...section('routing') } }),
  };
  const config = buildConfig(toYaml(settings), { LLM_EXTPROC_LOG_LEVEL: logLevel });
  const app = await startApp(config, options.logger ?? pino({ level: logLevel }));
  let envoy: RunningEnvoy | undefined;
  try {
    const addresses = options.backendAddresses ?? [...new Set(pools.flatMap((p) => p.endpoints.map((e) => e.address)))];
    const loopback = { address: '127.0.0.1', port: 0 };
    const envoyConfig =
      profile !== undefined
        ? profile.render({
            listener: loopback,
            admin: loopback,
            extProc: app.grpcAddress,
            pickerTls,
            backends: addresses,
            ...(options.envoy?.routeTimeoutSeconds === undefined ? {} : { routeTimeoutSeconds: options.envoy.routeTimeoutSeconds }),
          })
        : loopbackGatewayConfig(app.grpcAddress, addresses, {
            maxRequestBodyBytes: config.routing.maxRequestBodyBytes,
            maxInspectedBodyBytes: config.routing.maxInspectedBodyBytes,
            maxRetries: config.routing.fallbacks,
            ...options.envoy,
            ...(pickerTls.kind === 'plaintext' ? {} : { extProcTls: pickerTls }),
            ...(options.backends === undefined ? {} : { backends: options.backends }),
          });
    const finalConfig = options.transformEnvoyConfig === undefined ? envoyConfig : options.transformEnvoyConfig(envoyConfig);
    envoy = await startEnvoy({
      configYaml: toYaml(finalConfig),
      name: 'gateway',
      logLevel: (process.env.ENVOY_TEST_LOG_LEVEL ?? 'warning') as 'warning',
    });
    if (options.waitForSync ?? true)
      await waitUntil(() => (app.store.isSynced() ? true : undefined), { description: 'endpoint cache sync' });
  } catch (err) {
    await envoy?.stop();
    await app.stop();
    await rm(dir, { recursive: true, force: true });
    throw err;
  }
  const running = envoy;
  const port = running.listenerPort('llm_gateway');
  return {
    app,
    envoy: running,
    port,
    dir,
    endpointsFile,
    send: (req) => send(port, req),
    writePools: async (next) => {
      const temp = join(dir, `.endpoints-${process.hrtime.bigint()}.yaml`);
      await writeFile(temp, poolsYaml(next));
      await rename(temp, endpointsFile);
    },
    metricsText: () => app.metrics.registry.metrics(),
    stop: async () => {
      await running.stop();
      await app.stop();
      await rm(dir, { recursive: true, force: true });
    },
  };
}
