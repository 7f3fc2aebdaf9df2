// `npm run bench:cache`: picking policies judged by real vLLM's own prefix-cache counters
// (test/support/cache-bench.ts). Three vLLM servers (the test bed's tiny model, 64-block caches
// that evict), a workload of tenants with shared system prompts and multi-turn conversations
// beside short single-turn chats, sent through a real Envoy and 1 or 3 llm-extproc processes per
// policy: round-robin (Envoy alone), least in-flight, approximate (prefix affinity from the
// prompt's characters) and precise (the servers' KV events and the model's tokenizer). Prints the
// table; --write puts it in docs/benchmarks.md (between the bench-cache markers).
// Flags: --processes 1,3  --policies round-robin,least-in-flight,approximate,precise  --write
// --model DIR: serve another model that shares the tiny model's tokenizer (e.g. a larger random
//   Llama whose prefill costs measurable time); --blocks N: KV-cache blocks per server (default 64);
// --workload tenants=9,tenantSessions=60,…: the workload's shape (WorkloadShape's fields);
// --client-usage: clients ask for the usage chunk, as most SDK clients do (llm-extproc then measures
//   prefill per token), and the table adds the hit ratio the answers report per kind of session.
// --users N: sessions open at once (default 9, one per request slot); with more, a turn's follow-up
//   waits behind other users' ready turns instead of taking the slot its answer freed at once.
// --cpu-prof DIR: a V8 CPU profile of every llm-extproc process, written to DIR when it stops.
// --tokenize: instead, the prompt's token ids in process against one server's POST /tokenize
// (scripts/bench/tokenize.ts): CPU, added latency, exactness over 1,000 chat requests.

import { readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { replaceBetweenMarkers } from './bench/stats.js';
import { compareTokenizers } from './bench/tokenize.js';
import { repoRoot } from './repo-root.js';
import {
  CACHE_POLICIES,
  cacheServerSpecs,
  chatRequests,
  DEFAULT_CACHE_BLOCKS,
  DEFAULT_REQUEST_SLOTS,
  DEFAULT_WORKLOAD,
  resetForRun,
  runWorkload,
  startFleet,
  workloadSessions,
} from '../test/support/cache-bench.js';
import type { CachePolicy, CacheRun, WorkloadShape } from '../test/support/cache-bench.js';
import { KvEventSubscriber } from '../test/support/kv-events.js';
import { startVllmServers, stopVllmServers, VLLM_BLOCK_TOKENS, vllmInstall } from '../test/support/vllm-server.js';
import { parseScriptOptions } from './script-options.js';

const { values: flags } = parseScriptOptions(import.meta.url, {
  options: {
    processes: { type: 'string', default: '1,3' },
    policies: { type: 'string', default: CACHE_POLICIES.join(',') },
    write: { type: 'boolean', default: false },
    tokenize: { type: 'boolean', default: false },
    'cpu-prof': { type: 'string' },
    model: { type: 'string' },
    blocks: { type: 'string', default: String(DEFAULT_CACHE_BLOCKS) },
    workload: { type: 'string', default: '' },
    'client-usage': { type: 'boolean', default: false },
    users: { type: 'string', default: String(DEFAULT_REQUEST_SLOTS) },
  },
});

if (flags.tokenize) {
  await benchTokenize();
  process.exit(0);
}

// Profiles are written at a clean exit: fleets stop their processes with SIGTERM first (cache-bench.ts).
const profileDir = flags['cpu-prof'];
const nodeArgs = profileDir === undefined ? [] : ['--cpu-prof', `--cpu-prof-dir=${profileDir}`];
const processCounts = flags.processes.split(',').map(Number);
const policies = flags.policies.split(',') as CachePolicy[];
for (const p of policies)
  if (!CACHE_POLICIES.includes(p)) throw new Error(`--policies: unknown policy ${p} (known: ${CACHE_POLICIES.join(', ')})`);

const blocks = Number(flags.blocks);
if (!Number.isInteger(blocks) || blocks < 32)
  throw new Error(`--blocks: expected an integer of at least 32 (one 1,024-token prompt), got ${flags.blocks}`);
const shape = workloadShape(flags.workload);
const clientUsage = flags['client-usage'];
const users = Number(flags.users);
if (!Number.isInteger(users) || users < DEFAULT_REQUEST_SLOTS)
  throw new Error(`--users: expected an integer of at least ${DEFAULT_REQUEST_SLOTS} (the clients' request slots), got ${flags.users}`);
const install = await vllmInstall();
process.stderr.write('starting 3 vLLM servers…\n');
const servers = await startVllmServers(
  cacheServerSpecs(install.model, 3, { blocks, ...(flags.model === undefined ? {} : { model: flags.model }) }),
);
const subscribers = await Promise.all(servers.map((s) => KvEventSubscriber.connect(s.kvEventsEndpoint)));
const sessions = workloadSessions(shape);
const runs: CacheRun[] = [];
try {
  for (const processes of processCounts) {
    for (const policy of policies) {
      // Round-robin is Envoy alone: one row whatever the processes.
      if (policy === 'round-robin' && processes !== processCounts[0]) continue;
      const fleet = await startFleet(servers, { policy, processes, tokenizerDir: install.model, nodeArgs });
      try {
        await resetForRun(servers, fleet, policy === 'precise');
        const run = await runWorkload(servers, fleet, policy, policy === 'round-robin' ? 0 : processes, sessions, subscribers, {
          users,
          clientUsage,
        });
        runs.push(run);
        process.stderr.write(
          `${policy} × ${processes}: hit ratio ${(run.hitRatio * 100).toFixed(1)} %, p99 TTFT ${run.ttftP99Ms.toFixed(0)} ms\n`,
        );
      } finally {
        await fleet.stop();
      }
    }
  }
} finally {
  await Promise.all(subscribers.map((s) => s.close()));
  await stopVllmServers(servers);
}

const pct = (v: number): string => `${(v * 100).toFixed(1)} %`;
const given = process.argv.slice(2).filter((a) => a !== '--write');
const command = `npm run bench:cache${flags.write || given.length > 0 ? ' --' : ''}${given.length > 0 ? ` ${given.join(' ')}` : ''}${flags.write ? ' --write' : ''}`;
const modelText = flags.model === undefined ? "the test bed's tiny model" : `the model in ${flags.model} (the tiny model's tokenizer)`;
const byKind = (r: CacheRun): string =>
  r.classHitRatios === undefined ? '' : ` ${pct(r.classHitRatios.tenants)} · ${pct(r.classHitRatios.conversations)} |`;
const table = [
  `Command: \`${command}\` · real vLLM ${install.vllm} (CPU), ${modelText}, 3 servers × ${blocks} blocks of ${VLLM_BLOCK_TOKENS} tokens (caches that evict) · ${sessions.length} sessions per run: ${shape.tenantSessions} sessions of ${shape.tenants} tenants with ~600-token system prompts (${shape.tenantTurns} turns), ${shape.conversations} conversations of ${shape.conversationTurns} turns behind a one-line system prompt (each turn resends the answers so far) and ${shape.shortChats} short single-turn chats; ${users === DEFAULT_REQUEST_SLOTS ? `${users} clients at once, each sending its next turn as soon as the answer arrives` : `${users} users, ${DEFAULT_REQUEST_SLOTS} requests at once, a finished turn's follow-up queued behind the other users' ready turns`}, streamed, 8 tokens per answer. Hit ratio: vLLM's own \`prefix_cache_hits_total / prefix_cache_queries_total\` (tokens) over the run, all servers; evicted: blocks the servers' KV events report removed during the run. Caches emptied before each run.${clientUsage ? " Clients ask for usage (`stream_options.include_usage`); by kind: the cached share of prompt tokens the answers report (`prompt_tokens_details.cached_tokens`), tenants' sessions · conversations." : ''}`,
  '',
  `| policy | llm-extproc processes | vLLM prefix-cache hit ratio | per server |${clientUsage ? ' by kind |' : ''} blocks evicted | TTFT p50 ms | TTFT p99 ms | requests/s | failed |`,
  `| --- | ---: | ---: | --- |${clientUsage ? ' --- |' : ''} ---: | ---: | ---: | ---: | ---: |`,
  ...runs.map(
    (r) =>
      `| ${r.policy} | ${r.processes === 0 ? '— (Envoy alone)' : r.processes} | ${pct(r.hitRatio)} | ${r.serverHitRatios.map(pct).join(' · ')} |${byKind(r)} ${r.evictions} | ${r.ttftP50Ms.toFixed(0)} | ${r.ttftP99Ms.toFixed(0)} | ${r.requestsPerSecond.toFixed(1)} | ${r.failed} |`,
  ),
].join('\n');
process.stdout.write(`${table}\n`);
if (flags.write) writeBetween('bench-cache', table);

/** `--workload tenants=9,shortChats=30`: the default shape with those fields changed. */
function workloadShape(text: string): WorkloadShape {
  const shape: Record<string, number> = { ...DEFAULT_WORKLOAD };
  for (const pair of text.split(',').filter((p) => p !== '')) {
    const [key, value] = pair.split('=');
    if (!Object.hasOwn(shape, key) || !/^\d+$/.test(value ?? '')) {
      throw new Error(`--workload: expected name=count pairs of ${Object.keys(DEFAULT_WORKLOAD).join(', ')}; got ${pair}`);
    }
    shape[key] = Number(value);
  }
  if (shape['tenants'] < 1) throw new Error('--workload: tenants must be at least 1 (tenant sessions are spread over them)');
  return shape as unknown as WorkloadShape;
}

function writeBetween(marker: string, text: string): void {
  const doc = join(repoRoot(), 'docs', 'benchmarks.md');
  writeFileSync(doc, replaceBetweenMarkers(readFileSync(doc, 'utf8'), `<!-- ${marker}:start -->`, `<!-- ${marker}:end -->`, text));
  process.stderr.write(`wrote ${doc}\n`);
}

async function benchTokenize(): Promise<void> {
  const install = await vllmInstall();
  process.stderr.write('starting 1 vLLM server…\n');
  const [server] = await startVllmServers(cacheServerSpecs(install.model, 1));
  const requests = chatRequests(1000);
  let result: Awaited<ReturnType<typeof compareTokenizers>>;
  try {
    result = await compareTokenizers(install.model, server, requests);
  } finally {
    await stopVllmServers([server]);
  }
  const text = [
    `Command: \`npm run bench:cache -- --tokenize${flags.write ? ' --write' : ''}\` · real vLLM ${install.vllm} (CPU), the test bed's tiny model (byte-level BPE, 2,048 tokens) · ${requests.length} chat requests of the cache workload (mean ${result.meanTokens.toFixed(0)} tokens after the chat template), one at a time; the server's /tokenize ids are the reference. CPU: llm-extproc's own per request (the server's work for /tokenize comes on top). Tokenizer files loaded in ${result.loadMs.toFixed(0)} ms.`,
    '',
    '| way | CPU µs / request (ours) | latency p50 ms | latency p99 ms | same ids as the server |',
    '| --- | ---: | ---: | ---: | ---: |',
    ...result.rows.map(
      (r) => `| ${r.way} | ${r.cpuMicros.toFixed(0)} | ${r.p50Ms.toFixed(3)} | ${r.p99Ms.toFixed(3)} | ${r.sameIds} / ${r.requests} |`,
    ),
  ].join('\n');
  process.stdout.write(`${text}\n`);
  if (flags.write) writeBetween('bench-tokenize', text);
}
