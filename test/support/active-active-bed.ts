// Three model servers, three llm-extproc processes reading one static endpoints file, and one real
// Envoy whose ext_proc cluster lists all three processes (as a gateway spreads ext_proc streams
// over the chart's replicas). Nothing is shared between the processes but their config file.
// Model-server metric scrapes are off (`picker.metrics.enabled: false`): their timing would differ
// between the processes and could decide a pick.

import { mkdtemp, rename, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { stringify as toYaml } from 'yaml';
import { startEnvoy, type RunningEnvoy } from './envoy-process.js';
import { startExtprocProcess, withAllPickers, type ExtprocProcess } from './extproc-process.js';
import { loopbackGatewayConfig, poolsYaml, type StaticEndpointSpec } from './gateway.js';
import { freePorts } from './free-ports.js';
import { startModelServer, type Behavior, type ModelServer } from './model-server.js';

export interface ActiveActiveBed {
  readonly servers: ModelServer[];
  readonly pickers: ExtprocProcess[];
  readonly envoy: RunningEnvoy;
  /** Envoy's listener. */
  readonly port: number;
  /** A directory removed with the bed, for files the processes read. */
  readonly dir: string;
  /** Replaces the pool's endpoints (atomically: the processes never read half a file). */
  writePools(endpoints: readonly StaticEndpointSpec[]): Promise<void>;
  stop(): Promise<void>;
}

export interface ActiveActiveOptions {
  readonly name: string;
  readonly model: string;
  /** Envoy's gRPC health check of each llm-extproc; default the rendered config's. */
  readonly healthCheckIntervalMs?: number;
  /** More of the processes' `picker` section, given the bed's directory (e.g. for a key file written there). */
  readonly picker?: (dir: string) => Promise<Record<string, unknown>>;
  /** More top-level config sections (e.g. `quarantine`). */
  readonly config?: Record<string, unknown>;
  /** What every model server does (default: answers at once). */
  readonly behavior?: Behavior;
  /**
   * Each process listens on a port chosen here and names it as its `listen.peerAddress`
   * (LLM_EXTPROC_PEER_ADDRESS), as the chart does with the pod IP: access-log entries find the
   * process that picked their stream. Default off.
   */
  readonly peerForwarding?: boolean;
}

export async function startActiveActiveBed(options: ActiveActiveOptions): Promise<ActiveActiveBed> {
  const dir = await mkdtemp(join(tmpdir(), `llm-extproc-${options.name}-`));
  const servers: ModelServer[] = [];
  const pickers: ExtprocProcess[] = [];
  let envoy: RunningEnvoy | undefined;
  const stop = async (): Promise<void> => {
    await envoy?.stop();
    await Promise.all(pickers.map((p) => p.kill()));
    await Promise.all(servers.map((s) => s.close()));
    await rm(dir, { recursive: true, force: true });
  };
  try {
    for (const id of ['ms-a', 'ms-b', 'ms-c'])
      servers.push(
        await startModelServer({ id, models: [options.model], ...(options.behavior === undefined ? {} : { behavior: options.behavior }) }),
      );
    const endpointsFile = join(dir, 'endpoints.yaml');
    const writePools = async (endpoints: readonly StaticEndpointSpec[]): Promise<void> => {
      const temp = join(dir, `.endpoints-${process.hrtime.bigint()}.yaml`);
      await writeFile(temp, poolsYaml([{ name: 'pool', models: [options.model], endpoints }]));
      await rename(temp, endpointsFile);
    };
    await writePools(servers.map((s) => ({ address: s.address })));
    const configPath = join(dir, 'llm-extproc.yaml');
    await writeFile(
      configPath,
      toYaml({
        listen: { grpc: '127.0.0.1:0', http: '127.0.0.1:0' },
        static: { path: endpointsFile },
        picker: { metrics: { enabled: false }, ...(await options.picker?.(dir)) },
        shutdownDrainSeconds: 0,
        shutdownGraceSeconds: 1,
        ...options.config,
      }),
    );
    const ports = options.peerForwarding === true ? await freePorts(3) : [];
    for (let i = 0; i < 3; i++) {
      const own = ports[i] === undefined ? undefined : `127.0.0.1:${ports[i]}`;
      const env: Record<string, string> = own === undefined ? {} : { LLM_EXTPROC_GRPC_ADDRESS: own, LLM_EXTPROC_PEER_ADDRESS: own };
      pickers.push(await startExtprocProcess({ configPath, env }));
    }
    const rendered = loopbackGatewayConfig(
      pickers[0].grpcAddress,
      servers.map((s) => s.address),
      options.healthCheckIntervalMs === undefined ? {} : { extProcHealthCheckIntervalMs: options.healthCheckIntervalMs },
    );
    envoy = await startEnvoy({
      configYaml: toYaml(
        withAllPickers(
          rendered,
          pickers.map((p) => p.grpcAddress),
        ),
      ),
      name: options.name,
    });
    const running = envoy;
    await running.waitForStat('cluster.llm_extproc.membership_healthy', (v) => v === 3);
    return { servers, pickers, envoy: running, port: running.listenerPort('llm_gateway'), dir, writePools, stop };
  } catch (err) {
    await stop();
    throw err;
  }
}
