// `npm run bench:kube`: the Kubernetes endpoint cache at scale, against a real kube-apiserver and
// etcd (scripts/install-kube.mjs builds them once). It creates N pods (default 10,000) over several
// pools, starts llm-extproc as its own process on them, and then changes pod readiness through the
// status subresource at a steady rate (default 50 per second), as kubelets would. It measures:
//   - time to first sync: from spawning llm-extproc to its endpoint cache being synced;
//   - propagation: from just before a status write is sent to the API server until the first
//     endpoint view that holds the new state is published in llm-extproc (what the picker reads
//     on its next request);
//   - llm-extproc's CPU (from /proc) and RSS while the changes flow.
//
// llm-extproc runs with the NODE_OPTIONS the Helm chart sets (charts/llm-extproc/values.yaml), so
// its memory is what a deployment sees, and with metrics scraping off: the pods' addresses have no
// model servers behind them, and scraping is not what this measures.
//
// Flags: --pods N (10000), --pools N (4), --rate N changes/s (50), --seconds N (60),
// --write (replace the results block in docs/benchmarks.md), --heap-snapshot FILE (write a heap
// snapshot of llm-extproc right after its first sync, for finding what holds memory).

import { fork } from 'node:child_process';
import type { ChildProcess } from 'node:child_process';
import { readFileSync, writeFileSync } from 'node:fs';
import { writeFile } from 'node:fs/promises';
import { cpus, loadavg } from 'node:os';
import { join } from 'node:path';
import { performance } from 'node:perf_hooks';
import { stringify as toYaml } from 'yaml';
import { KubeControlPlane } from '../test/support/kube-control-plane.js';
import { NODE_NAME } from '../test/support/kube-kubelet.js';
import { notReadyPod, readyPod } from '../test/support/pod-builders.js';
import type { PodOptions } from '../test/support/pod-builders.js';
import { ApiWriter } from './bench-kube/api-writer.js';
import { cpuSeconds } from './bench/processes.js';
import { summarize } from './bench/stats.js';
import type { Summary } from './bench/stats.js';
import { chartNodeOptions } from './bench/chart-node-options.js';
import { repoRoot } from './repo-root.js';
import { parseScriptOptions } from './script-options.js';

const NAMESPACE = 'bench';
const START_MARKER = '<!-- bench:kube:start -->';
const END_MARKER = '<!-- bench:kube:end -->';

const { values: flags } = parseScriptOptions(import.meta.url, {
  options: {
    pods: { type: 'string', default: '10000' },
    pools: { type: 'string', default: '4' },
    rate: { type: 'string', default: '50' },
    seconds: { type: 'string', default: '60' },
    write: { type: 'boolean', default: false },
    'heap-snapshot': { type: 'string' },
  },
});
const PODS = Number(flags.pods);
const POOLS = Number(flags.pools);
const RATE = Number(flags.rate);
const SECONDS = Number(flags.seconds);

function now(): number {
  return performance.timeOrigin + performance.now();
}

function podName(i: number): string {
  return `vllm-${String(i).padStart(5, '0')}`;
}

function poolOf(i: number): number {
  return i % POOLS;
}

/** A loopback address per pod (never connected to here; it only has to be a valid pod IP). */
function podIp(i: number): string {
  return `127.1.${Math.floor(i / 250)}.${(i % 250) + 1}`;
}

function podOptions(i: number): PodOptions {
  return { name: podName(i), namespace: NAMESPACE, labels: { app: 'vllm', pool: `p${poolOf(i)}` }, ip: podIp(i) };
}

/** Runs `task(i)` for i in [0, count) with at most `concurrency` in flight. */
async function pool(count: number, concurrency: number, task: (i: number) => Promise<void>): Promise<void> {
  let next = 0;
  await Promise.all(
    Array.from({ length: concurrency }, async () => {
      while (next < count) await task(next++);
    }),
  );
}

/**
 * Retries an API call the server refused for load (429, 5xx including 504 timeouts) or that failed
 * in transit; on a shared machine an overloaded API server does both. `AlreadyExists` (409) after
 * a retry means the first attempt went through.
 */
async function withRetries(what: string, call: () => Promise<unknown>): Promise<void> {
  for (let attempt = 1; ; attempt++) {
    try {
      await call();
      return;
    } catch (err) {
      const code = (err as { code?: unknown }).code;
      if (code === 409 && attempt > 1) return;
      const retryable = code === 429 || (typeof code === 'number' && code >= 500) || typeof code === 'string';
      if (!retryable || attempt >= 8) throw err;
      process.stderr.write(`bench:kube: ${what} failed (${String(code)}); retrying\n`);
      await new Promise((resolve) => setTimeout(resolve, 500 * attempt));
    }
  }
}

/** Setup writes in flight at once: enough to keep the API server busy on two cores, not to swamp it. */
const CREATE_CONNECTIONS = 32;

async function createPods(writer: ApiWriter, ready: boolean[]): Promise<void> {
  await pool(PODS, CREATE_CONNECTIONS, async (i) => {
    const built = (ready[i] ? readyPod : notReadyPod)(podOptions(i));
    const name = built.metadata.name;
    await withRetries(`create ${name}`, () =>
      writer.createPod(NAMESPACE, {
        metadata: { name, labels: built.metadata.labels },
        spec: { nodeName: NODE_NAME, automountServiceAccountToken: false, containers: built.spec.containers },
      }),
    );
    await withRetries(`status of ${name}`, () => writer.patchPodStatus(NAMESPACE, name, built.status));
    if ((i + 1) % 1000 === 0) process.stderr.write(`bench:kube: ${i + 1} pods created\n`);
  });
}

interface ChildMessage {
  type: 'started' | 'synced' | 'seen' | 'memory' | 'snapshot';
  at?: number;
  id?: string;
  rss?: number;
  peakRss?: number;
  heapUsed?: number;
  external?: number;
  cpuSeconds?: number;
}

interface MemorySample {
  readonly rssMb: number;
  /** The process's high-water mark (VmHWM) so far. */
  readonly peakRssMb: number;
  readonly heapUsedMb: number;
  /** Memory outside the JS heap that JS objects hold (buffers, mostly). */
  readonly externalMb: number;
  /** llm-extproc's CPU time so far (user + system). */
  readonly cpuSeconds: number;
}

class Extproc {
  /** Replies of each type arrive in request order; each waiter takes the next one. */
  private readonly waiters = new Map<string, Array<(m: ChildMessage) => void>>();
  private readonly seen = new Map<string, (at: number) => void>();

  constructor(readonly child: ChildProcess) {
    child.on('message', (m: ChildMessage) => {
      if (m.type === 'seen' && m.id !== undefined) {
        this.seen.get(m.id)?.(m.at ?? Number.NaN);
        this.seen.delete(m.id);
        return;
      }
      this.waiters.get(m.type)?.shift()?.(m);
    });
  }

  next(type: ChildMessage['type'], timeoutMs = 600_000): Promise<ChildMessage> {
    return new Promise((resolve, reject) => {
      const timer = setTimeout(() => reject(new Error(`llm-extproc sent no ${type} within ${timeoutMs} ms`)), timeoutMs);
      const queue = this.waiters.get(type) ?? [];
      this.waiters.set(type, queue);
      queue.push((m) => {
        clearTimeout(timer);
        resolve(m);
      });
    });
  }

  /** Resolves with the time llm-extproc's view first held `state` for the pod. */
  expect(id: string, pool: string, state: string): Promise<number> {
    const seen = new Promise<number>((resolve) => this.seen.set(id, resolve));
    this.child.send({ type: 'expect', id, pool, state });
    return seen;
  }

  async memory(): Promise<MemorySample> {
    const reply = this.next('memory', 30_000);
    this.child.send({ type: 'memory' });
    const m = await reply;
    const mb = (bytes: number | undefined): number => (bytes ?? Number.NaN) / 2 ** 20;
    return {
      rssMb: mb(m.rss),
      peakRssMb: mb(m.peakRss),
      heapUsedMb: mb(m.heapUsed),
      externalMb: mb(m.external),
      cpuSeconds: m.cpuSeconds ?? Number.NaN,
    };
  }

  async heapSnapshot(path: string): Promise<void> {
    const reply = this.next('snapshot', 300_000);
    this.child.send({ type: 'snapshot', path });
    await reply;
  }
}

interface Results {
  readonly createSeconds: number;
  readonly firstSyncMs: number;
  readonly propagation: Summary;
  readonly apiWrite: Summary;
  readonly changes: number;
  readonly missed: number;
  readonly failedWrites: number;
  readonly cpuPercent: number;
  readonly cpuMsPerChange: number;
  /** The bench's own process (status writer, IPC) while the changes flow. */
  readonly writerCpuPercent: number;
  readonly nodeOptions: readonly string[];
  readonly afterSync: MemorySample;
  readonly rssMaxMb: number;
  readonly atEnd: MemorySample;
}

async function run(): Promise<Results> {
  const plane = await KubeControlPlane.start({ apiserverArgs: ['--max-requests-inflight=1000', '--max-mutating-requests-inflight=500'] });
  // Open loop: a status write never waits for a free connection (keep-alive keeps the count low).
  const writer = new ApiWriter({ server: plane.server, ca: plane.ca, token: plane.adminToken, connections: 256 });
  try {
    await plane.createNamespace(NAMESPACE);
    // Four in five pods start Ready.
    const ready = Array.from({ length: PODS }, (_, i) => i % 5 !== 0);
    const createStart = now();
    await createPods(writer, ready);
    const createSeconds = (now() - createStart) / 1000;

    const kubeconfigPath = await plane.writeKubeconfig('bench-kubeconfig.yaml');
    const configPath = join(plane.dir, 'llm-extproc.yaml');
    await writeFile(
      configPath,
      toYaml({
        listen: { grpc: '127.0.0.1:0', http: '127.0.0.1:0' },
        // The pods' IPs have no model servers behind them: scraping would only measure failing connects.
        picker: { metrics: { enabled: false } },
        kubernetes: {
          kubeconfigPath,
          pools: Array.from({ length: POOLS }, (_, p) => ({
            name: `p${p}`,
            namespace: NAMESPACE,
            selector: { app: 'vllm', pool: `p${p}` },
            targetPort: 8000,
            models: [`model-${p}`],
          })),
        },
      }),
    );
    const script = join(repoRoot(), 'dist', 'scripts', 'bench-kube', 'extproc-child.js');
    const spawnedAt = now();
    const nodeOptions = chartNodeOptions(repoRoot());
    const child = fork(script, [configPath], { execArgv: nodeOptions, stdio: ['ignore', 'inherit', 'inherit', 'ipc'] });
    const extproc = new Extproc(child);
    try {
      const synced = await extproc.next('synced');
      const firstSyncMs = (synced.at ?? Number.NaN) - spawnedAt;
      const pid = child.pid ?? -1;
      const afterSync = await extproc.memory();
      const snapshotPath = flags['heap-snapshot'];
      if (snapshotPath !== undefined) {
        // Writing a snapshot collects garbage first and grows RSS for a while: figures below read high.
        await extproc.heapSnapshot(snapshotPath);
        process.stderr.write(`bench:kube: heap snapshot written to ${snapshotPath}\n`);
      }

      // Steady changes: every pod at most once (a shuffled order), open loop at RATE per second.
      const order = Array.from({ length: PODS }, (_, i) => i);
      for (let i = order.length - 1; i > 0; i--) {
        const j = Math.floor(Math.random() * (i + 1));
        [order[i], order[j]] = [order[j] ?? 0, order[i] ?? 0];
      }
      const total = Math.min(PODS, Math.round(RATE * SECONDS));
      const propagation: number[] = [];
      const apiWrite: number[] = [];
      let rssMax = afterSync.rssMb;
      let sampling = false;
      const sampler = setInterval(() => {
        if (sampling) return;
        sampling = true;
        extproc.memory().then(
          (m) => {
            rssMax = Math.max(rssMax, m.rssMb);
            sampling = false;
          },
          (err: unknown) => process.stderr.write(`bench:kube: memory sample failed: ${String(err)}\n`),
        );
      }, 1000);
      const cpuStart = cpuSeconds(pid);
      const writerCpuStart = process.cpuUsage();
      const wallStart = now();
      const inFlight: Array<Promise<void>> = [];
      let missed = 0;
      let failedWrites = 0;
      for (let k = 0; k < total; k++) {
        const due = wallStart + (k * 1000) / RATE;
        const wait = due - now();
        if (wait > 0) await new Promise((resolve) => setTimeout(resolve, wait));
        const i = order[k] ?? 0;
        const turnReady = !ready[i];
        ready[i] = turnReady;
        const name = podName(i);
        const state = turnReady ? 'Ready' : 'NotReady';
        const seen = extproc.expect(`${NAMESPACE}/${name}`, `p${poolOf(i)}`, state);
        const t0 = now();
        inFlight.push(
          (async () => {
            try {
              await writer.patchPodStatus(NAMESPACE, name, (turnReady ? readyPod : notReadyPod)(podOptions(i)).status);
            } catch (err) {
              // An overloaded API server may refuse a write (429, 504): counted, not measured.
              failedWrites++;
              process.stderr.write(`bench:kube: status write failed: ${String((err as { code?: unknown }).code ?? err)}\n`);
              return;
            }
            apiWrite.push(now() - t0);
            const timeout = new Promise<number>((resolve) => setTimeout(() => resolve(Number.NaN), 30_000));
            const at = await Promise.race([seen, timeout]);
            if (Number.isNaN(at)) missed++;
            else propagation.push(at - t0);
          })(),
        );
      }
      await Promise.all(inFlight);
      const wallSeconds = (now() - wallStart) / 1000;
      const extprocCpu = cpuSeconds(pid) - cpuStart;
      const writerCpu = process.cpuUsage(writerCpuStart);
      clearInterval(sampler);
      const atEnd = await extproc.memory();
      return {
        createSeconds,
        firstSyncMs,
        propagation: summarize(propagation),
        apiWrite: summarize(apiWrite),
        changes: total,
        missed,
        failedWrites,
        cpuPercent: (extprocCpu / wallSeconds) * 100,
        cpuMsPerChange: (extprocCpu * 1000) / Math.max(1, total - failedWrites),
        writerCpuPercent: ((writerCpu.user + writerCpu.system) / 1e6 / wallSeconds) * 100,
        nodeOptions,
        afterSync,
        rssMaxMb: Math.max(rssMax, atEnd.rssMb),
        atEnd,
      };
    } finally {
      child.kill('SIGTERM');
    }
  } finally {
    writer.close();
    await plane.stop();
  }
}

function report(r: Results): string {
  const ms = (v: number): string => `${v.toFixed(1)} ms`;
  return [
    `Measured ${new Date().toISOString().slice(0, 10)} on ${cpus().length} vCPUs (${cpus()[0]?.model ?? 'unknown CPU'}), shared with kube-apiserver and etcd; Node ${process.version}.`,
    '',
    '| what | value |',
    '| --- | --- |',
    `| pods / pools | ${PODS} / ${POOLS} (one namespace, label-selected) |`,
    `| creating the pods (create + status patch each, ${CREATE_CONNECTIONS} in parallel, keep-alive) | ${r.createSeconds.toFixed(0)} s |`,
    `| time to first sync (spawn → endpoint cache synced) | ${(r.firstSyncMs / 1000).toFixed(2)} s |`,
    `| status changes | ${r.changes} at ${RATE}/s (${r.failedWrites} refused by the API server, ${r.missed} not seen within 30 s) |`,
    `| machine load average (1 min) at the end | ${loadavg()[0]?.toFixed(1) ?? '?'} |`,
    `| status change → picker can use it, p50 | ${ms(r.propagation.p50)} |`,
    `| status change → picker can use it, p90 | ${ms(r.propagation.p90)} |`,
    `| status change → picker can use it, p99 | ${ms(r.propagation.p99)} |`,
    `| status change → picker can use it, max | ${ms(r.propagation.max)} |`,
    `| of which the API write itself (status patch round trip), p50 / p99 | ${ms(r.apiWrite.p50)} / ${ms(r.apiWrite.p99)} |`,
    `| llm-extproc CPU while changes flow | ${r.cpuPercent.toFixed(1)} % of one core (${r.cpuMsPerChange.toFixed(2)} ms per change) |`,
    `| the bench's status writer, CPU while changes flow | ${r.writerCpuPercent.toFixed(1)} % of one core |`,
    `| llm-extproc CPU time to first sync (process start included) | ${r.afterSync.cpuSeconds.toFixed(2)} s |`,
    `| llm-extproc node options (the Helm chart's) | \`${r.nodeOptions.join(' ')}\` |`,
    `| llm-extproc RSS after first sync / max while changes flow | ${r.afterSync.rssMb.toFixed(0)} MB / ${r.rssMaxMb.toFixed(0)} MB |`,
    `| llm-extproc peak RSS (VmHWM, whole run) | ${r.atEnd.peakRssMb.toFixed(0)} MB |`,
    `| llm-extproc JS heap used / external after sync, and at the end | ${r.afterSync.heapUsedMb.toFixed(0)} / ${r.afterSync.externalMb.toFixed(0)} MB, ${r.atEnd.heapUsedMb.toFixed(0)} / ${r.atEnd.externalMb.toFixed(0)} MB |`,
  ].join('\n');
}

const results = await run();
const text = report(results);
process.stdout.write(`${text}\n`);
if (flags.write) {
  const path = join(repoRoot(), 'docs', 'benchmarks.md');
  const doc = readFileSync(path, 'utf8');
  const start = doc.indexOf(START_MARKER);
  const end = doc.indexOf(END_MARKER);
  if (start < 0 || end < start) throw new Error(`docs/benchmarks.md has no ${START_MARKER} … ${END_MARKER} block`);
  writeFileSync(path, `${doc.slice(0, start + START_MARKER.length)}\n${text}\n${doc.slice(end)}`);
  process.stdout.write('wrote docs/benchmarks.md\n');
}
