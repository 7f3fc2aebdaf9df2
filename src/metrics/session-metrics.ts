// Session affinity's metrics (routing/sessions.ts): what became of each request that named a
// session, and the per-process memory of sessions named by client-chosen ids. Every label value is
// one of a fixed few: a session id never becomes a label.

import { Counter, Gauge } from 'prom-client';
import type { Registry } from 'prom-client';

export class SessionMetrics {
  private readonly picks: Counter<'result'>;
  private readonly forgottenTotal: Counter<'reason'>;
  private rememberedSource: () => number = () => 0;

  constructor(registry: Registry) {
    this.picks = new Counter({
      name: 'llm_extproc_session_requests_total',
      help:
        'Requests that named a session (picker.session.header), by result: kept (went to the replica of its earlier turns), moved ' +
        '(that replica was not Ready or saturated: placed elsewhere, the session follows), new (first turn, or a forgotten id), ' +
        'unknown_token (a token that names no pod of the pool under any key: forged, an old key, or the pod is gone).',
      labelNames: ['result'] as const,
      registers: [registry],
    });
    this.forgottenTotal = new Counter({
      name: 'llm_extproc_sessions_forgotten_total',
      help: 'Sessions named by client-chosen ids forgotten, by reason: ttl (unused for picker.session.ttlSeconds), capacity (picker.session.maxSessions reached: the least recently used goes).',
      labelNames: ['reason'] as const,
      registers: [registry],
    });
    const remembered: Gauge = new Gauge({
      name: 'llm_extproc_sessions_remembered',
      help: 'Sessions named by client-chosen ids this process remembers now (at most picker.session.maxSessions; tokens need no memory).',
      registers: [registry],
      collect: () => remembered.set(this.rememberedSource()),
    });
  }

  reportRememberedFrom(source: () => number): void {
    this.rememberedSource = source;
  }

  placed(result: 'kept' | 'moved' | 'new' | 'unknown_token'): void {
    this.picks.inc({ result });
  }

  forgotten(reason: 'ttl' | 'capacity'): void {
    this.forgottenTotal.inc({ reason });
  }
}
