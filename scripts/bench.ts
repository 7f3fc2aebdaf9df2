// `npm run bench`: the latency llm-extproc adds to every request and every streamed chunk,
// measured against the same Envoy without the ext_proc filter.
//
// Setups run side by side, each with its own real Envoy (our shipped config from
// renderGatewayConfig) in front of one local model server (a separate process):
//   baseline  the rendered config with the ext_proc filter and its cluster deleted, nothing else changed
//   tcp       llm-extproc as its own process, reached over TCP loopback (standalone placement)
//   grpcjs    as tcp, with the gRPC listener on @grpc/grpc-js (`listen.transport: grpc-js`) instead
//             of our own HTTP/2 (the default, `native`): the transport A/B
//   uds       llm-extproc as its own process, reached over a Unix domain socket (sidecar placement)
//   workers   llm-extproc with --workers N (node:cluster), over a Unix domain socket
//   duplex    as tcp, with the ext_proc filter in FULL_DUPLEX_STREAMED both ways (the InferencePool
//             gateways' mode: bodies stream through llm-extproc) instead of BUFFERED / STREAMED
//   tls       as tcp, with TLS between Envoy and llm-extproc (self-signed, not verified)
//   flow      as tcp, with flow control on (picker.flowControl) and a pool that never saturates
//             (judged by our in-flight counts, maxInFlight far above the load): what the admission
//             check costs on every request while nothing queues
//   traced    as tcp, with tracing on at 100% sampling, exporting every span over OTLP/HTTP
//             (only with --tracing): the cost of tracing
// The load generator (this process) drives each Envoy with keep-alive HTTP/1.1 clients; measured
// phases are interleaved across setups in rounds so drift on a shared machine hits all of them.
//
// Flags: --requests N (non-streaming requests per setup and concurrency, default 5000),
// --concurrency N[,N...] (besides 1; default 8,16), --streams N (streams per setup and stream
// concurrency, default 64), --stream-concurrency N (besides 1; default 8,32,64), --events N (SSE events
// per stream, default 64), --event-delay-ms N (default 2), --warmup N (default 500), --rounds N
// (default 4), --write (rewrite the results block of docs/benchmarks.md), --cpu-prof (profile both
// llm-extproc processes, print their hottest functions; results are then not written),
// --envoy-runtime key=value (repeatable; a static runtime layer for every Envoy), --server PATH
// (the server entry script to run instead of dist/src/main.js, e.g. another build to compare),
// --compare-server PATH (another server entry run beside tcp and duplex: an A/B in one run),
// --node-options 'FLAGS' (NODE_OPTIONS of every llm-extproc process and of the bare-Node one;
// default the Helm chart's `nodeOptions`, as its pods run: scripts/bench/chart-node-options.ts;
// '' for V8's own defaults on this machine),
// --compare-env KEY=VALUE (repeatable; environment of the --compare-server processes only, e.g. an
// allocator setting such as MALLOC_ARENA_MAX, which must be in the environment at exec: with the
// same build as --compare-server it is the A/B of that setting),
// --workers N (llm-extproc workers of the `workers` setup, default 2; 1 leaves that setup out),
// --envoy-concurrency N (Envoy worker threads of every setup, default 2: one per core, as Envoy
// runs by default; each Envoy worker holds its own connection to llm-extproc), --no-modes (leave
// out the duplex, tls and flow setups), --setups a,b,… (run only these setups besides the baseline, e.g.
// `--setups tcp,grpcjs` for a quick transport A/B), --external-extproc HOST:PORT (one more
// setup: the same Envoy config pointed at an ext_proc server started elsewhere, e.g. the do-nothing
// Go server of scripts/bench/go-floor, to measure the floor of the ext_proc hop itself; its CPU and
// metrics are not read; with --no-modes off, a second one runs it under FULL_DUPLEX_STREAMED), --long-prompts N
// (requests per body size and setup for the long-prompt rows: chat requests of 32 KiB, 256 KiB and
// 1 MiB, one at a time; default 40; 0 leaves them out), --only-long-prompts (run only those rows,
// on the baseline, tcp (BUFFERED), duplex (FULL_DUPLEX_STREAMED) and external setups: a short run),
// --tracing (add the `traced` setup: every request traced and exported; `--setups tcp,traced` for a
// quick A/B), --tracing-endpoint URL (its OTLP/HTTP traces URL, e.g. a real collector's
// http://127.0.0.1:4318/v1/traces; default: a sink process started here that accepts and discards).

import { spawnSync } from 'node:child_process';
import { mkdirSync, readFileSync, readdirSync, writeFileSync } from 'node:fs';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { request } from 'node:http';
import { release, tmpdir } from 'node:os';
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';
import { stringify as toYaml } from 'yaml';
import { DEFAULT_GATEWAY_OPTIONS, renderGatewayConfig } from '../tools/envoy-config/gateway-config.js';
import type { GatewayConfigOptions } from '../tools/envoy-config/gateway-config.js';
import { envoyBinaryPath } from '../test/support/envoy-binary.js';
import { freePort } from '../test/support/free-ports.js';
import { startEnvoy } from '../test/support/envoy-process.js';
import type { RunningEnvoy } from '../test/support/envoy-process.js';
import { poolsYaml } from '../test/support/gateway.js';
import { metricValue } from '../test/support/prometheus.js';
import { waitUntil } from '../test/support/wait-until.js';
import { withoutExtProc } from './bench/baseline-config.js';
import { isCpuProfile, summarizeProfile } from './bench/cpu-profile.js';
import { pickBench, writePickReport } from './bench/pick.js';
import { LONG_PROMPT_BYTES, longPromptBody, renderLongPromptReport } from './bench/long-prompts.js';
import type { LongPromptPhase } from './bench/long-prompts.js';
import { parseProbeLine, renderMemoryTable } from './bench/memory.js';
import type { MemoryPoint, MemoryRow, MemorySample } from './bench/memory.js';
import { closedLoop, keepAliveAgent, runRequests, timedRequest, timedStream } from './bench/load.js';
import type { Target } from './bench/load.js';
import { spawnNode, treeCpuSeconds, treePeakRssBytes, treeRssBytes } from './bench/processes.js';
import type { ManagedChild } from './bench/processes.js';
import { renderReport, SETUP_LABELS } from './bench/report.js';
import type { CpuUse, RequestPhase, RunInfo, SetupKey, SetupResults, StreamPhase } from './bench/report.js';
import { addServerDelta, serverSnapshot } from './bench/server-stats.js';
import type { ServerSnapshot } from './bench/server-stats.js';
import { histogramDelta, parseHistogram, replaceBetweenMarkers } from './bench/stats.js';
import type { HistogramSnapshot } from './bench/stats.js';
import { chartNodeOptions } from './bench/chart-node-options.js';
import { repoRoot } from './repo-root.js';
import { errorMessage } from '../src/util/error-message.js';
import { parseScriptOptions } from './script-options.js';

const MODEL = 'bench-model';
const MESSAGE_METRIC = 'llm_extproc_message_processing_seconds';
const DOC_START = '<!-- bench:start -->';
const DOC_END = '<!-- bench:end -->';
const LONG_DOC_START = '<!-- bench-long:start -->';
const LONG_DOC_END = '<!-- bench-long:end -->';
const MEMORY_DOC_START = '<!-- bench-memory:start -->';
const MEMORY_DOC_END = '<!-- bench-memory:end -->';
/** The setups the long-prompt rows run on: Envoy alone, both body modes, the floor in both. */
const LONG_PROMPT_SETUPS: ReadonlySet<SetupKey> = new Set([
  'baseline',
  'tcp',
  'tcp-compare',
  'duplex',
  'duplex-compare',
  'external',
  'external-duplex',
]);
/** The setups whose memory the issue's targets are about: the default server, BUFFERED and FULL_DUPLEX_STREAMED. */
const MEMORY_TARGET_SETUPS: ReadonlySet<SetupKey> = new Set(['tcp', 'duplex']);

// ── options ──────────────────────────────────────────────────────────────────────────────────

const { values: flags } = parseScriptOptions(import.meta.url, {
  options: {
    requests: { type: 'string', default: '5000' },
    concurrency: { type: 'string', default: '8,16' },
    streams: { type: 'string', default: '64' },
    'stream-concurrency': { type: 'string', default: '8,32,64' },
    events: { type: 'string', default: '64' },
    'event-delay-ms': { type: 'string', default: '2' },
    warmup: { type: 'string', default: '500' },
    rounds: { type: 'string', default: '4' },
    write: { type: 'boolean', default: false },
    'cpu-prof': { type: 'boolean', default: false },
    'envoy-runtime': { type: 'string', multiple: true, default: [] },
    server: { type: 'string' },
    'compare-server': { type: 'string' },
    'compare-env': { type: 'string', multiple: true, default: [] },
    'node-options': { type: 'string' },
    workers: { type: 'string', default: '2' },
    'envoy-concurrency': { type: 'string', default: '2' },
    'no-modes': { type: 'boolean', default: false },
    setups: { type: 'string' },
    'external-extproc': { type: 'string' },
    'long-prompts': { type: 'string', default: '40' },
    'only-long-prompts': { type: 'boolean', default: false },
    tracing: { type: 'boolean', default: false },
    'tracing-endpoint': { type: 'string' },
  },
  allowPositionals: false,
});

function positiveInt(name: string, text: string, min = 1): number {
  const n = Number(text);
  if (!Number.isInteger(n) || n < min) throw new Error(`--${name}: expected an integer ≥ ${min}, got ${JSON.stringify(text)}`);
  return n;
}

function levels(name: string, text: string): number[] {
  return [...new Set([1, ...text.split(',').map((t) => positiveInt(name, t.trim()))])].sort((a, b) => a - b);
}

/** `--envoy-runtime key=value` (repeatable): a static runtime layer for every Envoy, to try Envoy-side fixes. */
function runtimeLayer(pairs: readonly string[]): Record<string, string | number | boolean> {
  const layer: Record<string, string | number | boolean> = {};
  for (const pair of pairs) {
    const eq = pair.indexOf('=');
    if (eq <= 0) throw new Error(`--envoy-runtime: expected key=value, got ${JSON.stringify(pair)}`);
    const text = pair.slice(eq + 1);
    layer[pair.slice(0, eq)] = text === 'true' ? true : text === 'false' ? false : Number.isFinite(Number(text)) ? Number(text) : text;
  }
  return layer;
}

/** `--compare-env KEY=VALUE` (repeatable) as an environment. */
function envPairs(pairs: readonly string[]): Record<string, string> {
  const env: Record<string, string> = {};
  for (const pair of pairs) {
    const eq = pair.indexOf('=');
    if (eq <= 0) throw new Error(`--compare-env: expected KEY=VALUE, got ${JSON.stringify(pair)}`);
    env[pair.slice(0, eq)] = pair.slice(eq + 1);
  }
  return env;
}

const opts = {
  requests: positiveInt('requests', flags.requests),
  concurrency: levels('concurrency', flags.concurrency),
  streams: positiveInt('streams', flags.streams),
  streamConcurrency: levels('stream-concurrency', flags['stream-concurrency']),
  events: positiveInt('events', flags.events),
  eventDelayMs: positiveInt('event-delay-ms', flags['event-delay-ms'], 0),
  warmup: positiveInt('warmup', flags.warmup, 0),
  rounds: positiveInt('rounds', flags.rounds),
  write: flags.write,
  cpuProf: flags['cpu-prof'],
  envoyRuntime: runtimeLayer(flags['envoy-runtime']),
  /** Entry script of the server under test (default: this checkout's dist/src/main.js). */
  server: flags.server,
  /** A second server entry (e.g. the previous build's dist/src/main.js) run beside `tcp` and `duplex`: an A/B within one run. */
  compareServer: flags['compare-server'],
  /** Environment of the --compare-server processes only (`--compare-env KEY=VALUE`). */
  compareEnv: envPairs(flags['compare-env']),
  /** NODE_OPTIONS of every llm-extproc process (a --compare-env NODE_OPTIONS wins on its side) and of bare Node. */
  nodeOptions: flags['node-options'] ?? chartNodeOptions(repoRoot()).join(' '),
  workers: positiveInt('workers', flags.workers),
  envoyConcurrency: positiveInt('envoy-concurrency', flags['envoy-concurrency']),
  modes: !flags['no-modes'],
  /** Setups to run besides the baseline; undefined = all. */
  only: flags.setups === undefined ? undefined : new Set(flags.setups.split(',').map((key) => key.trim())),
  /** An ext_proc server we do not start or read (HOST:PORT): the `external` setup. */
  externalExtProc: flags['external-extproc'],
  longPrompts: positiveInt('long-prompts', flags['long-prompts'], 0),
  onlyLongPrompts: flags['only-long-prompts'],
  tracing: flags.tracing || flags['tracing-endpoint'] !== undefined,
  tracingEndpoint: flags['tracing-endpoint'],
};
if (Object.keys(opts.compareEnv).length > 0 && opts.compareServer === undefined) throw new Error('--compare-env needs --compare-server');
if (opts.onlyLongPrompts && opts.longPrompts === 0) throw new Error('--only-long-prompts needs --long-prompts above 0');
if (opts.write && opts.cpuProf) throw new Error('--write and --cpu-prof do not mix: a profiled server is slower than a real one');

const CHAT_BODY = Buffer.from(
  JSON.stringify({ model: MODEL, messages: [{ role: 'user', content: 'Say hello in one short sentence.' }], max_tokens: 32 }),
);
const STREAM_BODY = Buffer.from(
  JSON.stringify({ model: MODEL, stream: true, messages: [{ role: 'user', content: 'Count slowly, please.' }], max_tokens: 128 }),
);

// ── cleanup: whatever happens, Envoys, servers and the model server go away ─────────────────────

const cleanups: (() => Promise<unknown>)[] = [];
let cleaning: Promise<void> | undefined;

function runCleanup(): Promise<void> {
  cleaning ??= (async () => {
    for (const step of cleanups.reverse()) {
      try {
        await step();
      } catch (err) {
        process.stderr.write(`cleanup step failed: ${errorMessage(err)}\n`);
      }
    }
  })();
  return cleaning;
}

// process.on (not once): startEnvoy's own signal hook re-raises the signal when it is the last
// listener, which would kill us before the servers are stopped.
let interrupted = false;
for (const signal of ['SIGINT', 'SIGTERM'] as const) {
  process.on(signal, () => {
    interrupted = true;
    process.stderr.write(`\n${signal}: stopping Envoys and servers\n`);
    void runCleanup().finally(() => process.exit(130));
  });
}

// ── helpers ──────────────────────────────────────────────────────────────────────────────────

function httpGet(url: string): Promise<{ status: number; body: string }> {
  return new Promise((resolve, reject) => {
    const req = request(url, { agent: false, timeout: 5_000 }, (res) => {
      const chunks: Buffer[] = [];
      res.on('data', (c: Buffer) => chunks.push(c));
      res.on('end', () => resolve({ status: res.statusCode ?? 0, body: Buffer.concat(chunks).toString('utf8') }));
      res.on('error', reject);
    });
    req.on('timeout', () => req.destroy(new Error(`GET ${url} timed out`)));
    req.on('error', reject);
    req.end();
  });
}

type Yaml = Record<string, unknown>;

function gatewayConfig(extProc: string, upstreamAddress: string, extra: Partial<GatewayConfigOptions> = {}): Yaml {
  const config = renderGatewayConfig({
    ...DEFAULT_GATEWAY_OPTIONS,
    listener: { address: '127.0.0.1', port: 0 },
    admin: { address: '127.0.0.1', port: 0 },
    extProc,
    backends: { kind: 'static', addresses: [upstreamAddress] },
    ...extra,
  });
  if (Object.keys(opts.envoyRuntime).length === 0) return config;
  return { ...config, layered_runtime: { layers: [{ name: 'bench', static_layer: opts.envoyRuntime }] } };
}

interface Server {
  readonly child: ManagedChild;
  /** What Envoy dials: `127.0.0.1:port` or `unix:///path`. */
  readonly grpcAddress: string;
  readonly httpPort: number;
}

interface ServerLaunch {
  readonly name: string;
  /** What Envoy dials: `127.0.0.1:port` or `unix:///path`. */
  readonly grpcAddress: string;
  readonly endpointsFile: string;
  /** The server entry script (this checkout's dist/src/main.js, --server or --compare-server). */
  readonly entry: string;
  readonly profileDir: string | undefined;
  readonly workers?: number;
  readonly configFile?: string;
  /** Environment on top of the bench's own (--compare-env). */
  readonly env?: Readonly<Record<string, string>>;
}

/** Node flags of every process whose memory the bench reads: the probe that answers SIGUSR2. */
function probeArgs(root: string): string[] {
  return ['--expose-gc', '--import', pathToFileURL(join(root, 'dist', 'scripts', 'bench', 'memory-probe.js')).href];
}

async function startServer(root: string, launch: ServerLaunch): Promise<Server> {
  const { name, grpcAddress, endpointsFile, profileDir, workers = 1, configFile } = launch;
  const httpPort = await freePort();
  const child = spawnNode(name, launch.entry, {
    args: configFile === undefined ? [] : ['--config', configFile],
    env: {
      LLM_EXTPROC_ENDPOINTS_FILE: endpointsFile,
      LLM_EXTPROC_GRPC_ADDRESS: grpcAddress,
      LLM_EXTPROC_HTTP_ADDRESS: `127.0.0.1:${httpPort}`,
      LLM_EXTPROC_LOG_LEVEL: 'warn',
      LLM_EXTPROC_WORKERS: String(workers),
      NODE_OPTIONS: opts.nodeOptions,
      ...launch.env,
    },
    nodeArgs: [
      ...probeArgs(root),
      ...(profileDir === undefined ? [] : ['--cpu-prof', '--cpu-prof-dir', profileDir, '--cpu-prof-name', `${name}.cpuprofile`]),
    ],
  });
  cleanups.push(() => child.stop());
  const exited = new AbortController();
  child.child.once('exit', (code, signal) => exited.abort(new Error(`${name} exited (${String(code ?? signal)})\n${child.logs()}`)));
  await waitUntil(async () => ((await httpGet(`http://127.0.0.1:${httpPort}/readyz`)).status === 200 ? true : undefined), {
    description: `${name} /readyz`,
    timeoutMs: 20_000,
    signal: exited.signal,
  });
  return { child, grpcAddress, httpPort };
}

async function scrapeMetrics(server: Server): Promise<string> {
  const res = await httpGet(`http://127.0.0.1:${server.httpPort}/metrics`);
  if (res.status !== 200) throw new Error(`${server.child.name} /metrics answered ${res.status}`);
  return res.body;
}

async function scrapeMessages(server: Server): Promise<Map<string, HistogramSnapshot>> {
  return parseHistogram(await scrapeMetrics(server), MESSAGE_METRIC, 'message');
}

async function scrapeServer(setup: Setup): Promise<ServerSnapshot | undefined> {
  return setup.server === undefined ? undefined : serverSnapshot(await scrapeMetrics(setup.server));
}

interface Setup {
  readonly key: SetupKey;
  readonly envoy: RunningEnvoy;
  readonly target: Target;
  readonly server: Server | undefined;
  readonly results: SetupResults;
  before: Map<string, HistogramSnapshot> | undefined;
}

function cpuNow(setup: Setup): CpuUse {
  // Whole process trees: a cluster primary's workers are its children.
  return {
    envoySeconds: treeCpuSeconds(setup.envoy.pid),
    serverSeconds: setup.server === undefined ? undefined : treeCpuSeconds(setup.server.child.pid),
  };
}

function addCpu(total: CpuUse, from: CpuUse, to: CpuUse): CpuUse {
  return {
    envoySeconds: total.envoySeconds + (to.envoySeconds - from.envoySeconds),
    serverSeconds:
      to.serverSeconds === undefined || from.serverSeconds === undefined
        ? undefined
        : (total.serverSeconds ?? 0) + (to.serverSeconds - from.serverSeconds),
  };
}

function emptyCpu(setup: Setup): CpuUse {
  return { envoySeconds: 0, serverSeconds: setup.server === undefined ? undefined : 0 };
}

function commandOutput(cmd: string, args: readonly string[]): string {
  const res = spawnSync(cmd, args, { encoding: 'utf8' });
  return res.status === 0 ? `${res.stdout}${res.stderr}`.trim() : '';
}

/** One line on when and where a run happened (the long-prompt rows' header). */
function machineLine(): string {
  const info = runInfo(0);
  return `${new Date().toISOString().slice(0, 16).replace('T', ' ')} UTC: ${info.cpus} vCPU (${info.cpuModel}), Node ${info.node}, Envoy ${info.envoy}`;
}

function runInfo(responseBytes: number): RunInfo {
  const cpuinfo = readFileSync('/proc/cpuinfo', 'utf8');
  const envoyVersion = commandOutput(envoyBinaryPath(), ['--version']);
  const args = process.argv.slice(2).filter((a) => a !== '--write');
  return {
    date: new Date().toISOString().slice(0, 10),
    command: `npm run bench -- --write${args.length > 0 ? ` ${args.join(' ')}` : ''}`,
    cpus: Number(commandOutput('nproc', [])) || 0,
    cpuModel: /^model name\s*:\s*(.+)$/m.exec(cpuinfo)?.[1]?.trim() ?? 'unknown CPU',
    kernel: release(),
    node: process.version,
    envoy: /\/(\d+\.\d+\.\d+)\//.exec(envoyVersion)?.[1] ?? (envoyVersion || 'unknown'),
    requestBytes: CHAT_BODY.length,
    responseBytes,
    events: opts.events,
    eventDelayMs: opts.eventDelayMs,
    rounds: opts.rounds,
    workers: opts.workers,
    envoyConcurrency: opts.envoyConcurrency,
  };
}

/** Body size of one non-streaming answer (for the report header). */
function answerBytes(port: number): Promise<number> {
  return new Promise((resolve, reject) => {
    const req = request(
      {
        host: '127.0.0.1',
        port,
        method: 'POST',
        path: '/v1/chat/completions',
        agent: false,
        headers: { 'content-type': 'application/json', 'content-length': CHAT_BODY.length },
      },
      (res) => {
        let bytes = 0;
        res.on('data', (c: Buffer) => (bytes += c.length));
        res.on('end', () => resolve(bytes));
        res.on('error', reject);
      },
    );
    req.on('error', reject);
    req.end(CHAT_BODY);
  });
}

const log = (line: string): void => void process.stderr.write(`${line}\n`);

// ── phases ───────────────────────────────────────────────────────────────────────────────────

async function requestPhase(setup: Setup, concurrency: number, count: number): Promise<void> {
  const phase: RequestPhase =
    setup.results.requests.get(concurrency) ??
    ({ latenciesMs: [], wallMs: 0, errors: 0, firstError: undefined, cpu: emptyCpu(setup), server: undefined } satisfies RequestPhase);
  setup.results.requests.set(concurrency, phase);
  const before = await scrapeServer(setup);
  const from = cpuNow(setup);
  const run = await runRequests(setup.target, CHAT_BODY, count, concurrency);
  phase.cpu = addCpu(phase.cpu, from, cpuNow(setup));
  const after = await scrapeServer(setup);
  if (before !== undefined && after !== undefined) phase.server = addServerDelta(phase.server, before, after);
  phase.latenciesMs.push(...run.latenciesMs);
  phase.wallMs += run.wallMs;
  phase.errors += run.errors;
  phase.firstError ??= run.firstError;
}

async function streamPhase(setup: Setup, concurrency: number, count: number): Promise<void> {
  const phase: StreamPhase =
    setup.results.streams.get(concurrency) ??
    ({
      ttfbMs: [],
      totalMs: [],
      eventLatencyMs: [],
      interArrivalMs: [],
      streams: 0,
      wallMs: 0,
      errors: 0,
      firstError: undefined,
      cpu: emptyCpu(setup),
      server: undefined,
    } satisfies StreamPhase);
  setup.results.streams.set(concurrency, phase);
  const before = await scrapeServer(setup);
  const from = cpuNow(setup);
  const run = await closedLoop(
    count,
    concurrency,
    () => timedStream(setup.target, STREAM_BODY),
    (t) => {
      if (t.events !== opts.events) throw new Error(`${setup.key}: a stream delivered ${t.events} of ${opts.events} events`);
      phase.ttfbMs.push(t.ttfbMs);
      phase.totalMs.push(t.totalMs);
      phase.eventLatencyMs.push(...t.eventLatencyMs);
      phase.interArrivalMs.push(...t.interArrivalMs);
      phase.streams++;
    },
  );
  phase.cpu = addCpu(phase.cpu, from, cpuNow(setup));
  phase.wallMs += run.wallMs;
  const after = await scrapeServer(setup);
  if (before !== undefined && after !== undefined) phase.server = addServerDelta(phase.server, before, after);
  phase.errors += run.errors;
  phase.firstError ??= run.firstError;
}

async function warmUp(setup: Setup): Promise<void> {
  const maxConcurrency = Math.max(...opts.concurrency, ...opts.streamConcurrency);
  // Opens every connection the measured phases will reuse, and gets V8's JIT past its cold start.
  const requests = await runRequests(setup.target, CHAT_BODY, Math.max(opts.warmup, maxConcurrency), maxConcurrency);
  const streams = await closedLoop(
    Math.max(...opts.streamConcurrency) * 2,
    Math.max(...opts.streamConcurrency),
    () => timedStream(setup.target, STREAM_BODY),
    () => undefined,
  );
  const errors = requests.errors + streams.errors;
  if (errors > 0)
    throw new Error(
      `${setup.key}: ${errors} errors during warm-up, first: ${requests.firstError ?? streams.firstError ?? '?'}\n--- envoy ---\n${setup.envoy.logs()}\n--- server ---\n${setup.server?.child.logs() ?? ''}`,
    );
}

// ── memory ───────────────────────────────────────────────────────────────────────────────────

/** One process's memory now: RSS as the kernel counts it, then (via the probe) heap and external after GC. */
async function memorySample(child: ManagedChild, probeHeap: boolean): Promise<MemorySample> {
  const rssBytes = treeRssBytes(child.pid);
  if (!probeHeap) return { rssBytes, heapUsedBytes: undefined, externalBytes: undefined };
  const line = child.waitForLine(/^(memory-probe .*)$/);
  process.kill(child.pid, 'SIGUSR2');
  const reading = parseProbeLine(await line);
  if (reading === undefined) throw new Error(`${child.name}: unreadable memory-probe line`);
  return { rssBytes, heapUsedBytes: reading.heapUsedBytes, externalBytes: reading.externalBytes };
}

/** The memory of every server and of the bare Node process, at each point of the run. */
class MemoryLog {
  private readonly samples = new Map<string, Partial<Record<MemoryPoint, MemorySample>>>();
  private readonly points: MemoryPoint[] = [];

  constructor(
    private readonly bare: ManagedChild,
    private readonly servers: readonly { readonly key: SetupKey; readonly server: Server }[],
  ) {}

  async sample(point: MemoryPoint): Promise<void> {
    this.points.push(point);
    log(`memory: ${point}`);
    const take = async (name: string, child: ManagedChild, probeHeap: boolean): Promise<void> => {
      const row = this.samples.get(name) ?? {};
      row[point] = await memorySample(child, probeHeap);
      this.samples.set(name, row);
    };
    await take('bare', this.bare, true);
    // A cluster primary's heap says nothing about its workers': only their RSS is shown.
    for (const { key, server } of this.servers) await take(key, server.child, key !== 'workers');
  }

  render(setups: readonly Setup[]): string {
    const rows: MemoryRow[] = [
      { label: 'bare Node (an empty script)', samples: this.samples.get('bare') ?? {}, peakBytes: undefined, targeted: false },
      ...this.servers.map(({ key, server }) => ({
        label: SETUP_LABELS[key],
        samples: this.samples.get(key) ?? {},
        peakBytes: setups.find((s) => s.key === key)?.results.peakRss?.serverBytes ?? treePeakRssBytes(server.child.pid),
        targeted: MEMORY_TARGET_SETUPS.has(key),
      })),
    ];
    const args = process.argv.slice(2).filter((a) => a !== '--write');
    return renderMemoryTable(rows, this.points, `npm run bench -- --write${args.length > 0 ? ` ${args.join(' ')}` : ''}`, opts.nodeOptions);
  }
}

// ── long prompts ─────────────────────────────────────────────────────────────────────────────

/**
 * The long-prompt rows: every size through every setup, one request at a time, in rounds that
 * rotate the setup order (as the main phases do) after a few warm-up requests of each size.
 */
async function longPromptRows(setups: readonly Setup[]): Promise<string> {
  const bodies = new Map(LONG_PROMPT_BYTES.map((bytes) => [bytes, longPromptBody(MODEL, bytes)]));
  const bySetup = new Map<string, Map<number, LongPromptPhase>>(setups.map((s) => [SETUP_LABELS[s.key], new Map()]));
  for (const setup of setups) {
    log(`long prompts, warm-up: ${SETUP_LABELS[setup.key]}`);
    for (const body of bodies.values()) {
      const warm = await runRequests(setup.target, body, 5, 1);
      if (warm.errors > 0) throw new Error(`${setup.key}: ${warm.errors} long-prompt errors in warm-up, first: ${warm.firstError ?? '?'}`);
    }
  }
  const perRound = Math.max(1, Math.ceil(opts.longPrompts / opts.rounds));
  for (let round = 0; round < opts.rounds; round++) {
    const order = setups.map((_, i) => setups[(i + round) % setups.length]);
    log(`long prompts, round ${round + 1}/${opts.rounds}`);
    for (const [bytes, body] of bodies)
      for (const setup of order) {
        const phases = bySetup.get(SETUP_LABELS[setup.key]);
        if (phases === undefined) continue;
        const phase: LongPromptPhase = phases.get(bytes) ?? { latenciesMs: [], errors: 0, firstError: undefined, cpu: emptyCpu(setup) };
        phases.set(bytes, phase);
        const from = cpuNow(setup);
        const run = await runRequests(setup.target, body, perRound, 1);
        phase.cpu = addCpu(phase.cpu, from, cpuNow(setup));
        phase.latenciesMs.push(...run.latenciesMs);
        phase.errors += run.errors;
        phase.firstError ??= run.firstError;
      }
  }
  const args = process.argv.slice(2).filter((a) => a !== '--write');
  return renderLongPromptReport({
    bySetup,
    baselineLabel: SETUP_LABELS.baseline,
    floorLabel: setups.some((s) => s.key === 'external') ? SETUP_LABELS.external : undefined,
    floorDuplexLabel: setups.some((s) => s.key === 'external-duplex') ? SETUP_LABELS['external-duplex'] : undefined,
    duplexLabels: new Set([SETUP_LABELS.duplex, SETUP_LABELS['external-duplex']]),
    command: `npm run bench -- --write${args.length > 0 ? ` ${args.join(' ')}` : ''}`,
    machine: machineLine(),
    requestsPerSize: perRound * opts.rounds,
  });
}

// ── main ─────────────────────────────────────────────────────────────────────────────────────

async function main(): Promise<void> {
  // Pick time first, while no Envoy or server competes for the CPU (scripts/bench/pick.ts).
  if (!opts.onlyLongPrompts) {
    const pickReport = pickBench(log);
    process.stdout.write(`${pickReport}\n\n`);
    if (opts.write) log(`wrote ${writePickReport(pickReport)}`);
  }
  const root = repoRoot();
  const dir = await mkdtemp(join(tmpdir(), 'llm-extproc-bench-'));
  cleanups.push(() => rm(dir, { recursive: true, force: true }));
  const profileDir = opts.cpuProf ? join(root, '.cache', 'bench', `profiles-${Date.now()}`) : undefined;
  if (profileDir !== undefined) mkdirSync(profileDir, { recursive: true });

  const upstream = spawnNode('model-server', join(root, 'dist', 'scripts', 'bench', 'upstream-process.js'), {
    args: ['--events', String(opts.events), '--event-delay-ms', String(opts.eventDelayMs)],
  });
  cleanups.push(() => upstream.stop());
  const upstreamAddress = await upstream.waitForLine(/^address=(\S+)$/);
  const endpointsFile = join(dir, 'endpoints.yaml');
  await writeFile(endpointsFile, poolsYaml([{ name: 'bench', models: [MODEL], endpoints: [{ address: upstreamAddress }] }]));

  // A --compare-server twin runs wherever its setup runs.
  const twinOf: Partial<Record<SetupKey, SetupKey>> = { 'tcp-compare': 'tcp', 'duplex-compare': 'duplex' };
  const wanted = (key: SetupKey): boolean =>
    (opts.only === undefined || opts.only.has(twinOf[key] ?? key)) && (!opts.onlyLongPrompts || LONG_PROMPT_SETUPS.has(key));
  log(`starting llm-extproc setups and their Envoys…`);
  const plans: { key: SetupKey; config: Yaml; server: Server | undefined }[] = [
    { key: 'baseline', config: withoutExtProc(gatewayConfig('127.0.0.1:1', upstreamAddress)), server: undefined },
  ];
  const ownEntry = opts.server ?? join(root, 'dist', 'src', 'main.js');
  /** An llm-extproc process over TCP loopback (unless `grpcAddress` says otherwise). */
  const launch = async (name: string, more: Partial<ServerLaunch> = {}): Promise<Server> =>
    startServer(root, {
      name,
      grpcAddress: `127.0.0.1:${await freePort()}`,
      endpointsFile,
      entry: ownEntry,
      profileDir,
      ...more,
    });
  if (wanted('tcp')) {
    const tcpServer = await launch('llm-extproc-tcp');
    plans.push({ key: 'tcp', config: gatewayConfig(tcpServer.grpcAddress, upstreamAddress), server: tcpServer });
  }
  if (opts.compareServer !== undefined && wanted('tcp-compare')) {
    const server = await launch('llm-extproc-tcp-compare', { entry: opts.compareServer, env: opts.compareEnv });
    plans.push({ key: 'tcp-compare', config: gatewayConfig(server.grpcAddress, upstreamAddress), server });
  }
  // The transport A/B: the same server with another `listen.transport`, over TCP like `tcp`.
  for (const [key, transport] of [['grpcjs', 'grpc-js']] as const) {
    if (!wanted(key)) continue;
    const transportConfig = join(dir, `${transport}.yaml`);
    await writeFile(transportConfig, toYaml({ listen: { transport } }));
    const server = await launch(`llm-extproc-${key}`, { configFile: transportConfig });
    plans.push({ key, config: gatewayConfig(server.grpcAddress, upstreamAddress), server });
  }
  if (wanted('uds')) {
    const udsServer = await launch('llm-extproc-uds', { grpcAddress: `unix://${join(dir, 'grpc.sock')}` });
    plans.push({ key: 'uds', config: gatewayConfig(udsServer.grpcAddress, upstreamAddress), server: udsServer });
  }
  if (opts.workers > 1 && wanted('workers')) {
    // --cpu-prof would profile only the primary, which does no ext_proc work: not offered here.
    const workersServer = await launch('llm-extproc-workers', {
      grpcAddress: `unix://${join(dir, 'grpc-workers.sock')}`,
      profileDir: undefined,
      workers: opts.workers,
    });
    plans.push({ key: 'workers', config: gatewayConfig(workersServer.grpcAddress, upstreamAddress), server: workersServer });
  }
  if (opts.modes && wanted('duplex')) {
    const duplexServer = await launch('llm-extproc-duplex');
    plans.push({
      key: 'duplex',
      config: gatewayConfig(duplexServer.grpcAddress, upstreamAddress, { bodyModes: 'full-duplex' }),
      server: duplexServer,
    });
  }
  if (opts.modes && opts.compareServer !== undefined && wanted('duplex-compare')) {
    const server = await launch('llm-extproc-duplex-compare', { entry: opts.compareServer, env: opts.compareEnv });
    plans.push({ key: 'duplex-compare', config: gatewayConfig(server.grpcAddress, upstreamAddress, { bodyModes: 'full-duplex' }), server });
  }
  if (opts.modes && wanted('tls')) {
    const tlsConfig = join(dir, 'tls.yaml');
    await writeFile(tlsConfig, toYaml({ listen: { tls: { enabled: true } } }));
    const tlsServer = await launch('llm-extproc-tls', { configFile: tlsConfig });
    plans.push({
      key: 'tls',
      config: gatewayConfig(tlsServer.grpcAddress, upstreamAddress, { extProcTls: { kind: 'unverified' } }),
      server: tlsServer,
    });
  }
  if (opts.modes && wanted('flow')) {
    // The bench's model server reports no metrics: judged by in-flight counts alone (a failing
    // scrape would count as full), with a limit no phase reaches, so every request takes the fast path.
    const flowConfig = join(dir, 'flow.yaml');
    await writeFile(
      flowConfig,
      toYaml({
        picker: {
          pools: { bench: { metricsFormat: 'none' } },
          flowControl: { enabled: true, saturation: { maxInFlight: 4 * Math.max(...opts.concurrency, ...opts.streamConcurrency) } },
        },
      }),
    );
    const flowServer = await launch('llm-extproc-flow', { configFile: flowConfig });
    plans.push({ key: 'flow', config: gatewayConfig(flowServer.grpcAddress, upstreamAddress), server: flowServer });
  }
  if (opts.tracing && wanted('traced')) {
    let endpoint = opts.tracingEndpoint;
    if (endpoint === undefined) {
      const sink = spawnNode('otlp-sink', join(root, 'dist', 'scripts', 'bench', 'otlp-sink.js'));
      cleanups.push(() => sink.stop());
      endpoint = `http://${await sink.waitForLine(/^address=(\S+)$/)}/v1/traces`;
    }
    const tracedConfig = join(dir, 'traced.yaml');
    // 100% sampling; a queue large enough that a sink that keeps up never drops (the drop count is printed).
    await writeFile(tracedConfig, toYaml({ tracing: { enabled: true, endpoint, sampleRatio: 1, maxQueueSize: 8192 } }));
    const tracedServer = await launch('llm-extproc-traced', { configFile: tracedConfig });
    plans.push({ key: 'traced', config: gatewayConfig(tracedServer.grpcAddress, upstreamAddress), server: tracedServer });
  }
  if (opts.externalExtProc !== undefined) {
    plans.push({ key: 'external', config: gatewayConfig(opts.externalExtProc, upstreamAddress), server: undefined });
    if (opts.modes)
      plans.push({
        key: 'external-duplex',
        config: gatewayConfig(opts.externalExtProc, upstreamAddress, { bodyModes: 'full-duplex' }),
        server: undefined,
      });
  }
  // Memory: every server and a bare Node process beside them, idle after start (before any Envoy).
  const bare = spawnNode('bare-node', join(root, 'dist', 'scripts', 'bench', 'idle-process.js'), {
    nodeArgs: probeArgs(root),
    env: { NODE_OPTIONS: opts.nodeOptions },
  });
  cleanups.push(() => bare.stop());
  await bare.waitForLine(/^(idle)$/);
  const memory = new MemoryLog(
    bare,
    plans.flatMap((plan) => (plan.server === undefined ? [] : [{ key: plan.key, server: plan.server }])),
  );
  await memory.sample('idle');

  const maxSockets = Math.max(...opts.concurrency, ...opts.streamConcurrency);
  const setups: Setup[] = [];
  for (const plan of plans) {
    const envoy = await startEnvoy({
      configYaml: toYaml(plan.config),
      name: `bench-${plan.key}`,
      logLevel: 'warning',
      concurrency: opts.envoyConcurrency,
    });
    cleanups.push(() => envoy.stop());
    const agent = keepAliveAgent(maxSockets);
    cleanups.push(() => Promise.resolve(agent.destroy()));
    const target: Target = { port: envoy.listenerPort('llm_gateway'), agent };
    await waitUntil(async () => ((await timedRequest(target, CHAT_BODY)) > 0 ? true : undefined), {
      description: `${plan.key}: a 200 through Envoy`,
      timeoutMs: 20_000,
    });
    setups.push({
      key: plan.key,
      envoy,
      target,
      server: plan.server,
      results: { key: plan.key, requests: new Map(), streams: new Map(), messages: undefined, sideStreams: undefined, peakRss: undefined },
      before: undefined,
    });
  }

  // After the request and stream load (unless only the long prompts run): what a busy server holds.
  const longSetups = setups.filter((s) => LONG_PROMPT_SETUPS.has(s.key));
  const runLongPrompts = async (): Promise<string | undefined> => {
    if (opts.longPrompts === 0) return undefined;
    const report = await longPromptRows(longSetups);
    await memory.sample('long');
    process.stdout.write(`${report}\n\n`);
    return report;
  };
  if (opts.onlyLongPrompts) {
    const longReport = await runLongPrompts();
    const memoryReport = memory.render(setups);
    process.stdout.write(`${memoryReport}\n\n`);
    if (opts.write) {
      if (longReport !== undefined) writeDocBlock(root, LONG_DOC_START, LONG_DOC_END, longReport);
      writeDocBlock(root, MEMORY_DOC_START, MEMORY_DOC_END, memoryReport);
    }
    await runCleanup();
    if (profileDir !== undefined) printProfiles(profileDir);
    return;
  }

  for (const setup of setups) {
    log(`warm-up: ${SETUP_LABELS[setup.key]}`);
    await warmUp(setup);
    if (setup.server !== undefined) setup.before = await scrapeMessages(setup.server);
  }

  const perRound = (total: number): number => Math.max(1, Math.ceil(total / opts.rounds));
  for (let round = 0; round < opts.rounds; round++) {
    // Rotate the order so no setup always runs first (or right after the heaviest one).
    const order = setups.map((_, i) => setups[(i + round) % setups.length]);
    log(`round ${round + 1}/${opts.rounds}: ${order.map((s) => s.key).join(' → ')}`);
    for (const c of opts.concurrency) for (const setup of order) await requestPhase(setup, c, perRound(opts.requests));
    for (const c of opts.streamConcurrency) for (const setup of order) await streamPhase(setup, c, perRound(opts.streams));
  }

  await memory.sample('load');

  for (const setup of setups) {
    if (setup.server === undefined) continue;
    const after = await scrapeMessages(setup.server);
    setup.results.messages = new Map([...after].map(([message, h]) => [message, histogramDelta(h, setup.before?.get(message))]));
    const stats = await setup.envoy.stats('ext_proc\\.streams_|^cluster\\.llm_extproc\\.');
    setup.results.sideStreams = {
      started: stats['http.llm_gateway.ext_proc.streams_started'] ?? 0,
      failed: stats['http.llm_gateway.ext_proc.streams_failed'] ?? 0,
      resetsSent: stats['cluster.llm_extproc.http2.tx_reset'] ?? 0,
      goawaysReceived: stats['cluster.llm_extproc.upstream_cx_close_notify'] ?? 0,
      connections: stats['cluster.llm_extproc.upstream_cx_total'] ?? 0,
    };
  }

  // The flow row measures the fast path only if nothing queued (or was refused) there.
  const flow = setups.find((s) => s.key === 'flow')?.server;
  if (flow !== undefined) {
    const events = metricValue(await scrapeMetrics(flow), 'llm_extproc_flow_requests_total');
    if (events > 0)
      throw new Error(
        `flow: ${events} flow-control events (queued or refused): the pool saturated, the row would not measure the fast path`,
      );
  }

  // The long prompts last, so the figures after the load are not theirs.
  const longReport = await runLongPrompts();
  for (const setup of setups) {
    setup.results.peakRss = {
      envoyBytes: treePeakRssBytes(setup.envoy.pid),
      serverBytes: setup.server === undefined ? undefined : treePeakRssBytes(setup.server.child.pid),
    };
  }
  const memoryReport = memory.render(setups);

  const report = renderReport(
    runInfo(await answerBytes(setups[0].target.port)),
    setups.map((s) => s.results),
  );
  process.stdout.write(`${report}\n\n${memoryReport}\n`);
  const traced = setups.find((s) => s.key === 'traced')?.server;
  if (traced !== undefined) {
    // The cost above is honest only if the spans were really sent: say how many got through.
    const text = await scrapeMetrics(traced);
    const sample = (pattern: RegExp): number => Number(pattern.exec(text)?.[1] ?? NaN);
    log(
      `traced: ${sample(/^llm_extproc_trace_spans_exported_total (\S+)$/m)} spans exported, ` +
        `${sample(/^llm_extproc_trace_spans_dropped_total\{reason="queue_full"\} (\S+)$/m)} dropped (queue full), ` +
        `${sample(/^llm_extproc_trace_spans_dropped_total\{reason="export_failed"\} (\S+)$/m)} lost in failed exports`,
    );
  }
  for (const setup of setups) {
    const failed = [...setup.results.requests, ...setup.results.streams].filter(([, p]) => p.errors > 0);
    for (const [c, p] of failed) log(`WARNING ${setup.key} concurrency ${c}: ${p.errors} errors, first: ${p.firstError ?? '?'}`);
    if (failed.length === 0) continue;
    // Enough to tell whose failure it was without rerunning.
    const stats = await setup.envoy.stats('ext_proc|upstream_rq_5xx|downstream_rq_5xx|llm_extproc\\.(upstream_cx|http2)');
    log(`${setup.key} Envoy stats: ${JSON.stringify(Object.fromEntries(Object.entries(stats).filter(([, v]) => v !== 0)))}`);
    log(`${setup.key} Envoy log tail:\n${setup.envoy.logs().split('\n').slice(-20).join('\n')}`);
    if (setup.server !== undefined)
      log(`${setup.key} llm-extproc log tail:\n${setup.server.child.logs().split('\n').slice(-20).join('\n')}`);
  }

  if (opts.write) {
    writeDocBlock(root, DOC_START, DOC_END, report);
    if (longReport !== undefined) writeDocBlock(root, LONG_DOC_START, LONG_DOC_END, longReport);
    writeDocBlock(root, MEMORY_DOC_START, MEMORY_DOC_END, memoryReport);
  }

  await runCleanup();
  if (profileDir !== undefined) printProfiles(profileDir);
}

function writeDocBlock(root: string, start: string, end: string, content: string): void {
  const docPath = join(root, 'docs', 'benchmarks.md');
  writeFileSync(docPath, replaceBetweenMarkers(readFileSync(docPath, 'utf8'), start, end, content));
  log(`wrote ${start} … ${end} in ${docPath}`);
}

function printProfiles(profileDir: string): void {
  for (const file of readdirSync(profileDir).filter((f) => f.endsWith('.cpuprofile'))) {
    const parsed: unknown = JSON.parse(readFileSync(join(profileDir, file), 'utf8'));
    if (!isCpuProfile(parsed)) continue;
    const summary = summarizeProfile(parsed, 20);
    process.stdout.write(`\n### CPU profile ${file} (${summary.busyMs.toFixed(0)} ms busy; ${join(profileDir, file)})\n\nBy area:\n`);
    for (const row of summary.areas)
      process.stdout.write(`  ${(row.share * 100).toFixed(1).padStart(5)}%  ${row.selfMs.toFixed(0).padStart(6)} ms  ${row.name}\n`);
    process.stdout.write('Top functions (self time):\n');
    for (const row of summary.functions)
      process.stdout.write(`  ${(row.share * 100).toFixed(1).padStart(5)}%  ${row.selfMs.toFixed(0).padStart(6)} ms  ${row.name}\n`);
  }
}

main().catch(async (err: unknown) => {
  // After Ctrl-C the run fails as its processes disappear; the signal handler reports and exits.
  if (interrupted) return;
  process.stderr.write(`bench failed: ${err instanceof Error ? (err.stack ?? err.message) : String(err)}\n`);
  await runCleanup();
  process.exit(1);
});
