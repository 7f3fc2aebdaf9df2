// Flow control's metrics (routing/flow-control.ts): queue lengths, waits and what became of each
// request that met a saturated pool, by pool, priority and tenant. Tenants come from a request
// header, so their label is bounded: the first `tenantLabels` tenants seen are named, every other
// one is counted as `other` (a client cannot mint series at will).

import { Counter, Gauge, Histogram } from 'prom-client';
import type { Registry } from 'prom-client';

export const OTHER_TENANT = 'other';

/** The first `limit` tenants seen keep their name; the rest share `other`. */
export class TenantLabels {
  private readonly named = new Set<string>();

  constructor(private readonly limit: number) {}

  of(tenant: string): string {
    if (this.named.has(tenant)) return tenant;
    if (this.named.size < this.limit && tenant !== OTHER_TENANT) {
      this.named.add(tenant);
      return tenant;
    }
    return OTHER_TENANT;
  }
}

type Labels = 'pool' | 'priority' | 'tenant';

type Ending = 'dispatched' | 'expired' | 'cancelled' | 'failed' | 'shed' | 'pool_saturated';

/**
 * llm-d's `outcome` for each way a request leaves our flow control. `failed` (the dispatch found
 * no replica to pick) and `shed` (a sheddable request met a saturated pool) have no exact llm-d
 * counterpart and are its catch-alls.
 */
const LLM_D_OUTCOME: Readonly<Record<Ending, string>> = {
  dispatched: 'Dispatched',
  expired: 'EvictedTTL',
  cancelled: 'EvictedContextCancelled',
  failed: 'EvictedOther',
  shed: 'RejectedOther',
  pool_saturated: 'RejectedCapacity',
};

export interface QueueLength {
  readonly pool: string;
  readonly priority: number;
  readonly tenant: string;
  readonly length: number;
}

export class FlowMetrics {
  private readonly tenants: TenantLabels;
  private lengthsSource: () => Iterable<QueueLength> = () => [];

  private readonly events: Counter<Labels | 'event'>;
  private readonly waits: Histogram<Labels | 'outcome'>;
  /** llm-d's `llm_d_epp_flow_control_requests_total`, counted at the same calls as `events`. */
  private readonly llmdRequests: Counter<'outcome' | 'priority' | 'inference_pool'>;

  constructor(registry: Registry, tenantLabels: number) {
    this.tenants = new TenantLabels(tenantLabels);
    this.events = new Counter({
      name: 'llm_extproc_flow_requests_total',
      help:
        'Requests that met a saturated pool (flow control), by pool, priority, tenant and event: queued, dispatched (left the ' +
        'queue with a pick), expired (TTL: 429 queue_timeout), cancelled (client hung up), failed (no replica at dispatch), ' +
        'shed (sheddable: 429 shed), pool_saturated (queue full: 429 pool_saturated).',
      labelNames: ['pool', 'priority', 'tenant', 'event'] as const,
      registers: [registry],
    });
    this.llmdRequests = new Counter({
      name: 'llm_d_epp_flow_control_requests_total',
      help:
        'Requests that met a saturated pool (flow control), by how they left it (llm-d name and outcomes: Dispatched, ' +
        'EvictedTTL, EvictedContextCancelled, EvictedOther = no replica at dispatch, RejectedCapacity = queue full, ' +
        'RejectedOther = shed). Requests routed at once, past an unsaturated pool, are not counted.',
      labelNames: ['outcome', 'priority', 'inference_pool'] as const,
      registers: [registry],
    });
    this.waits = new Histogram({
      name: 'llm_extproc_flow_queue_wait_seconds',
      help: 'Time requests waited in a saturated pool queue, by pool, priority, tenant and how they left it.',
      labelNames: ['pool', 'priority', 'tenant', 'outcome'] as const,
      buckets: [0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60],
      registers: [registry],
    });
    const lengths: Gauge<Labels> = new Gauge({
      name: 'llm_extproc_flow_queue_length',
      help: 'Requests waiting now in saturated pool queues, by pool, priority and tenant.',
      labelNames: ['pool', 'priority', 'tenant'] as const,
      registers: [registry],
      collect: () => {
        lengths.reset();
        for (const row of this.lengthsSource()) {
          lengths.inc({ pool: row.pool, priority: String(row.priority), tenant: this.tenants.of(row.tenant) }, row.length);
        }
      },
    });
  }

  reportLengthsFrom(source: () => Iterable<QueueLength>): void {
    this.lengthsSource = source;
  }

  queued(pool: string, priority: number, tenant: string): void {
    this.events.inc({ pool, priority: String(priority), tenant: this.tenants.of(tenant), event: 'queued' });
  }

  left(pool: string, priority: number, tenant: string, how: 'dispatched' | 'expired' | 'cancelled' | 'failed', waitSeconds: number): void {
    const labels = { pool, priority: String(priority), tenant: this.tenants.of(tenant) };
    this.events.inc({ ...labels, event: how });
    this.llmdRequests.inc({ outcome: LLM_D_OUTCOME[how], priority: labels.priority, inference_pool: pool });
    this.waits.observe({ ...labels, outcome: how }, waitSeconds);
  }

  rejected(pool: string, priority: number, tenant: string, reason: 'shed' | 'pool_saturated'): void {
    this.events.inc({ pool, priority: String(priority), tenant: this.tenants.of(tenant), event: reason });
    this.llmdRequests.inc({ outcome: LLM_D_OUTCOME[reason], priority: String(priority), inference_pool: pool });
  }
}
