// `npm run simulate`: replays one synthetic multi-tenant workload (scripts/simulate/sim.ts)
// against simulated model servers under three picking policies (round-robin, least in-flight, and
// our pipeline) and prints a comparison table; then the same workload with one server three times
// slower, under least in-flight and the pipeline with and without its latency signal; then the
// saturated multi-tenant scenario (scripts/simulate/tenants.ts: an interactive, a flooding batch and
// a sheddable tenant) without flow control and with it, behind 1 and 3 llm-extproc replicas; then
// multi-turn sessions (scripts/simulate/sessions.ts) without session affinity and with it.
// Each picking row (both of those scenarios) is the mean over --draws router draws: the same
// workload with the routers' random stream changed, ± the standard error of that mean.
// --write also puts the tables in docs/benchmarks.md (between the simulate markers) and draws
// docs/picker-simulation.svg and docs/flow-control-simulation.svg.
// Flags: --seed N, --servers N (both scenarios), --requests N and --draws N (the picking workload), --write.

import { readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { replaceBetweenMarkers } from './bench/stats.js';
import { renderSimulationSvg } from './simulate/chart.js';
import { simulateDraws } from './simulate/draws.js';
import type { DrawSummary, Estimate } from './simulate/draws.js';
import { DEFAULT_SIM, POLICIES, SLOW_REPLICA_POLICIES, workload } from './simulate/sim.js';
import type { SimConfig } from './simulate/sim.js';
import { renderTenantSvg, tenantRuns, tenantTables } from './simulate/tenant-report.js';
import { DEFAULT_TENANT_SIM } from './simulate/tenants.js';
import { DEFAULT_SESSION_SIM, SESSION_POLICIES, simulateSessions } from './simulate/sessions.js';
import { repoRoot } from './repo-root.js';
import { parseScriptOptions } from './script-options.js';

// Router draws per picking row. With 3 llm-extproc replicas the pipeline's p99 queue wait leads
// least in-flight's by a few percent, about what one draw's p99 moves: 5 draws left the gap at
// ~1.3 standard errors, 10 put it at ~3. The whole run then takes ~90 s on 2 cores (1 draw: 9 s).
const DEFAULT_DRAWS = 10;

const { values: flags } = parseScriptOptions(import.meta.url, {
  options: {
    seed: { type: 'string', default: String(DEFAULT_SIM.seed) },
    servers: { type: 'string', default: String(DEFAULT_SIM.servers) },
    requests: { type: 'string', default: String(DEFAULT_SIM.requests) },
    draws: { type: 'string', default: String(DEFAULT_DRAWS) },
    write: { type: 'boolean', default: false },
  },
});

function whole(name: string, text: string): number {
  const n = Number(text);
  if (!Number.isInteger(n) || n < 1) throw new Error(`--${name}: expected a whole number ≥ 1, got ${JSON.stringify(text)}`);
  return n;
}

const config: SimConfig = {
  ...DEFAULT_SIM,
  seed: whole('seed', flags.seed),
  servers: whole('servers', flags.servers),
  requests: whole('requests', flags.requests),
};
const draws = whole('draws', flags.draws);
const requests = workload(config);
// One llm-extproc, and three (each with its own in-flight view, as the chart's replicas run).
const ROUTERS = [1, 3] as const;
const results: DrawSummary[] = ROUTERS.flatMap((routers) =>
  POLICIES.map((policy) => simulateDraws({ ...config, routers }, policy, requests, draws)),
);

const ms = (v: number): string => (v >= 100 ? v.toFixed(0) : v.toFixed(1));
const pct = (v: number): string => (v * 100).toFixed(1);
// Mean ± standard error over the draws (the mean alone for one draw).
const withError = (e: Estimate, format: (v: number) => string, unit = ''): string =>
  draws > 1 ? `${format(e.mean)} ± ${format(e.stderr)}${unit}` : `${format(e.mean)}${unit}`;
const drawNote =
  draws > 1
    ? ` Each row: mean ± standard error over ${draws} router draws (the same workload; which llm-extproc replica takes each arrival and the picker's tie-breaks drawn anew).`
    : '';
const args = process.argv.slice(2).filter((a) => a !== '--write');
const table = [
  `Command: \`npm run simulate -- --write${args.length > 0 ? ` ${args.join(' ')}` : ''}\` · ${config.requests.toLocaleString('en-US')} requests, ${config.servers} servers × ${config.slots} slots, ` +
    `${config.tenants} tenants (Zipf) with 500–4,000-token system prompts plus ${(config.shortShare * 100).toFixed(0)} % short single-turn prompts (2–40 tokens, 40 common openings), vLLM-style prefix cache (whole blocks, LRU) of ${config.cacheBlocks} blocks of 16 tokens per server, Poisson arrivals ${config.calmRate}/s calm and ${config.burstRate}/s in bursts (mean period ${config.periodSeconds} s), ` +
    `prefill ${config.prefillMsPerToken} ms/token, decode ${config.decodeMsPerToken} ms/token, metrics scraped every ${config.scrapeMs} ms, seed ${config.seed}.${drawNote}`,
  '',
  '| llm-extproc replicas | policy | mean queue wait ms | p99 queue wait ms | mean TTFT ms | p99 TTFT ms | cache hit ratio (blocks) | max/min load |',
  '| ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: |',
  ...results.map(
    ({ mean: r, estimates: e }) =>
      `| ${r.routers} | ${r.policy} | ${withError(e.meanWaitMs, ms)} | ${withError(e.p99WaitMs, ms)} | ${withError(e.meanTtftMs, ms)} | ${withError(e.p99TtftMs, ms)} | ${withError(e.cacheHitRatio, pct, ' %')} | ${e.maxMinLoad.mean.toFixed(2)} |`,
  ),
  '',
  '![Simulation with 3 llm-extproc replicas: queue wait, time to first token and prefix-cache hits per policy](picker-simulation.svg)',
].join('\n');
process.stdout.write(`${table}\n`);

// The same workload with one server three times slower (prefill and every token), and what the
// latency signal (picker.weights.latency, demotion of replicas much slower than their pool) does.
const SLOW_FACTOR = 3;
const slowScenarios: ReadonlyArray<{ readonly name: string; readonly config: SimConfig }> = [
  { name: 'the workload above', config: { ...config, slowServers: 1, slowFactor: SLOW_FACTOR } },
  { name: 'short prompts only (no shared system prompts)', config: { ...config, shortShare: 1, slowServers: 1, slowFactor: SLOW_FACTOR } },
];
const slowRows = slowScenarios.flatMap(({ name, config: scenario }) => {
  const scenarioRequests = scenario === slowScenarios[0].config ? requests : workload(scenario);
  return ROUTERS.flatMap((routers) =>
    SLOW_REPLICA_POLICIES.map((policy) => ({ name, summary: simulateDraws({ ...scenario, routers }, policy, scenarioRequests, draws) })),
  );
});
const slowTable = [
  `Command: \`npm run simulate -- --write${args.length > 0 ? ` ${args.join(' ')}` : ''}\` · one of the ${config.servers} servers ${SLOW_FACTOR}× slower (prefill and decode); the pipeline's latency tracker at its defaults.${drawNote}`,
  '',
  `| workload | llm-extproc replicas | policy | mean TTFT ms | p99 TTFT ms | p99 queue wait ms | cache hit ratio (blocks) | share served by the slow server (fair: ${((1 / config.servers) * 100).toFixed(1)} %) |`,
  '| --- | ---: | --- | ---: | ---: | ---: | ---: | ---: |',
  ...slowRows.map(
    ({ name, summary: { mean: r, estimates: e } }) =>
      `| ${name} | ${r.routers} | ${r.policy} | ${withError(e.meanTtftMs, ms)} | ${withError(e.p99TtftMs, ms)} | ${withError(e.p99WaitMs, ms)} | ${withError(e.cacheHitRatio, pct, ' %')} | ${pct(r.slowShare)} % |`,
  ),
].join('\n');
process.stdout.write(`\n${slowTable}\n`);

// The pool saturated by one tenant's flood: what flow control changes for the others.
const tenantConfig = { ...DEFAULT_TENANT_SIM, seed: config.seed, servers: config.servers };
const runs = tenantRuns(tenantConfig);
const tenantTable = tenantTables(tenantConfig, runs, `npm run simulate -- --write${args.length > 0 ? ` ${args.join(' ')}` : ''}`);
process.stdout.write(`\n${tenantTable}\n`);

// Multi-turn sessions whose turns share nothing with other sessions: what session affinity keeps.
const sessionConfig = { ...DEFAULT_SESSION_SIM, seed: config.seed, servers: config.servers };
const sessionRows = SESSION_POLICIES.map((policy) => simulateSessions(sessionConfig, policy));
const sessionTable = [
  `Command: \`npm run simulate -- --write${args.length > 0 ? ` ${args.join(' ')}` : ''}\` · ${sessionConfig.sessions.toLocaleString('en-US')} conversations of ${sessionConfig.turns} turns ` +
    `(${sessionConfig.sessionRate}/s new, think time ${sessionConfig.thinkSeconds} s), each turn the conversation so far plus a new message of ${sessionConfig.messageTokens.join('–')} tokens ` +
    `unrelated to any other conversation, answers of ${sessionConfig.answerTokens.join('–')} tokens; ${sessionConfig.servers} servers × ${sessionConfig.slots} slots, ${sessionConfig.cacheBlocks} cache blocks each; ` +
    `${sessionConfig.routers} llm-extproc replicas, each turn to one at random, the client sending back each answer's token; seed ${sessionConfig.seed}.`,
  '',
  '| policy | turns | later turns on the server of the turn before | cache hit ratio (blocks, later turns) | mean TTFT ms | p99 TTFT ms |',
  '| --- | ---: | ---: | ---: | ---: | ---: |',
  ...sessionRows.map(
    (r) =>
      `| ${r.policy} | ${r.turns.toLocaleString('en-US')} | ${pct(r.sameServer)} % | ${pct(r.cacheHitRatio)} % | ${ms(r.meanTtftMs)} | ${ms(r.p99TtftMs)} |`,
  ),
].join('\n');
process.stdout.write(`\n${sessionTable}\n`);

if (flags.write) {
  const root = repoRoot();
  const doc = join(root, 'docs', 'benchmarks.md');
  const withMain = replaceBetweenMarkers(readFileSync(doc, 'utf8'), '<!-- simulate:start -->', '<!-- simulate:end -->', table);
  const withSlow = replaceBetweenMarkers(withMain, '<!-- simulate-slow:start -->', '<!-- simulate-slow:end -->', slowTable);
  const withTenants = replaceBetweenMarkers(withSlow, '<!-- simulate-tenants:start -->', '<!-- simulate-tenants:end -->', tenantTable);
  writeFileSync(
    doc,
    replaceBetweenMarkers(withTenants, '<!-- simulate-sessions:start -->', '<!-- simulate-sessions:end -->', sessionTable),
  );
  writeFileSync(
    join(root, 'docs', 'picker-simulation.svg'),
    renderSimulationSvg(results.map((s) => s.mean).filter((r) => r.routers === 3)),
  );
  writeFileSync(join(root, 'docs', 'flow-control-simulation.svg'), renderTenantSvg(runs));
  process.stderr.write(`wrote ${doc}, docs/picker-simulation.svg and docs/flow-control-simulation.svg\n`);
}
