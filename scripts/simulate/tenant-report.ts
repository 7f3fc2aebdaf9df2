// The saturated multi-tenant scenario's runs (which replica counts and settings), its tables for
// docs/benchmarks.md and its chart (docs/flow-control-simulation.svg).

import { renderBarChart, type Panel } from './chart.js';
import { simulateTenants, tenantWorkload, type TenantSimConfig, type TenantSimResult, type TenantStats } from './tenants.js';

export interface TenantRun {
  /** Short name for the chart's legend. */
  readonly label: string;
  readonly maxInFlight: number;
  readonly result: TenantSimResult;
}

/**
 * Without flow control and with it, 1 and 3 llm-extproc replicas. With 3, first the 1-replica
 * setting kept (each replica then sends every server as many as it runs), then maxInFlight = the
 * servers' slots ÷ replicas (rounded up), then that with all the batch tenant's streams on one replica.
 */
export function tenantRuns(config: TenantSimConfig): TenantRun[] {
  const requests = tenantWorkload(config);
  const split = Math.ceil(config.slots / 3);
  const runs: ReadonlyArray<Omit<TenantRun, 'result'> & { readonly config: Partial<TenantSimConfig> }> = [
    { label: '1 replica, off', maxInFlight: config.maxInFlight, config: { routers: 1, flowControl: false } },
    { label: '3 replicas, off', maxInFlight: config.maxInFlight, config: { routers: 3, flowControl: false } },
    { label: '1 replica, on', maxInFlight: config.maxInFlight, config: { routers: 1, flowControl: true } },
    {
      label: `3 replicas, on (maxInFlight ${config.maxInFlight})`,
      maxInFlight: config.maxInFlight,
      config: { routers: 3, flowControl: true },
    },
    { label: `3 replicas, on (maxInFlight ${split})`, maxInFlight: split, config: { routers: 3, flowControl: true } },
    {
      label: `3, on (${split}), batch on one`,
      maxInFlight: split,
      config: { routers: 3, flowControl: true, spread: 'batch-on-one' },
    },
  ];
  return runs.map(({ label, maxInFlight, config: own }) => ({
    label,
    maxInFlight,
    result: simulateTenants({ ...config, ...own, maxInFlight }, requests),
  }));
}

const ms = (v: number): string => (v >= 100 ? Math.round(v).toLocaleString('en-US') : v.toFixed(1));
const rate = (v: number): string => v.toFixed(1);

function setting(run: TenantRun): string {
  const r = run.result;
  if (!r.flowControl) return 'off';
  return `on, maxInFlight ${run.maxInFlight}${r.spread === 'batch-on-one' ? ", all the batch tenant's streams on replica 1" : ''}`;
}

function tenant(r: TenantSimResult, name: TenantStats['tenant']): TenantStats {
  return r.tenants.find((t) => t.tenant === name) as TenantStats;
}

export function tenantTables(config: TenantSimConfig, runs: readonly TenantRun[], command: string): string {
  const capacity = runs[0].result.capacity;
  const head =
    `Command: \`${command}\` · ${config.servers} servers × ${config.slots} slots (capacity ≈ ${rate(capacity)} requests/s: prompts of 100–900 tokens, ` +
    `outputs of 10 + ~120 tokens, prefill ${config.prefillMsPerToken} ms/token, decode ${config.decodeMsPerToken} ms/token; KV cache ${config.kvTokens.toLocaleString('en-US')} tokens per server), ` +
    `Poisson arrivals for ${config.durationSeconds} s: interactive ${config.load.interactive}× capacity, sheddable (priority −1) ${config.load.sheddable}×, ` +
    `and batch ${config.load.batch}× capacity from ${config.floodFromSeconds} s to ${config.floodUntilSeconds} s (the flood); interactive and batch are priority 0, ` +
    `tenants by the fairness header; flow control at its defaults (queueDepth 5, KV 80 %, TTL ${config.ttlMs} ms: timedTtlSeconds of our buffered configs, ` +
    `maxQueued ${config.maxQueued} per replica) with the maxInFlight shown; metrics scraped every ${config.scrapeMs} ms; seed ${config.seed}.`;
  const perTenant = [
    '| llm-extproc replicas | flow control | tenant | sent | served | p50 TTFT ms | p99 TTFT ms | served/s in the flood (asked) | 429 shed | 429 queue full | 429 TTL |',
    '| ---: | --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |',
    ...runs.flatMap((run) =>
      run.result.tenants.map(
        (t) =>
          `| ${run.result.routers} | ${setting(run)} | ${t.tenant} | ${t.sent.toLocaleString('en-US')} | ${t.served.toLocaleString('en-US')} | ${ms(t.p50TtftMs)} | ${ms(t.p99TtftMs)} | ` +
          `${rate(t.floodThroughput)} (${rate(t.floodDemand)}) | ${t.shed} | ${t.queueFull} | ${t.expired} |`,
      ),
    ),
  ];
  const summary = [
    "| llm-extproc replicas | flow control | Jain's fairness index, interactive and batch, in the flood | pool served/s in the flood | interactive p99 TTFT ms | sheddable shed |",
    '| ---: | --- | ---: | ---: | ---: | ---: |',
    ...runs.map((run) => {
      const r = run.result;
      const shed = tenant(r, 'sheddable');
      return `| ${r.routers} | ${setting(run)} | ${r.jain.toFixed(3)} | ${rate(r.floodThroughput)} | ${ms(tenant(r, 'interactive').p99TtftMs)} | ${shed.shed} of ${shed.sent} |`;
    }),
  ];
  return [
    head,
    '',
    ...summary,
    '',
    ...perTenant,
    '',
    '![Saturated multi-tenant simulation: interactive p99 TTFT, batch throughput, fairness and shedding, with and without flow control, 1 and 3 llm-extproc replicas](flow-control-simulation.svg)',
  ].join('\n');
}

const PANELS: ReadonlyArray<Panel<TenantRun>> = [
  {
    title: 'interactive p99 TTFT (s)',
    value: (run) => tenant(run.result, 'interactive').p99TtftMs / 1000,
    format: (v) => (v >= 10 ? v.toFixed(0) : v.toFixed(2)),
    higherIsBetter: false,
  },
  {
    title: 'interactive served/s in the flood',
    value: (run) => tenant(run.result, 'interactive').floodThroughput,
    format: (v) => v.toFixed(1),
    higherIsBetter: true,
  },
  {
    title: 'batch served/s in the flood',
    value: (run) => tenant(run.result, 'batch').floodThroughput,
    format: (v) => v.toFixed(1),
    higherIsBetter: true,
  },
  { title: "Jain's fairness index", value: (run) => run.result.jain, format: (v) => v.toFixed(2), higherIsBetter: true },
];

export function renderTenantSvg(runs: readonly TenantRun[]): string {
  return renderBarChart(runs, PANELS, (run) => run.label, { panelWidth: 300, barWidth: 34, legendColumns: 3, legendWidth: 390 });
}
