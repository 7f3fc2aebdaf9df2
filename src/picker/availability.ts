// Pure explanation of why a model has no routable replica: counts per state and a message that
// names the model and the reasons, e.g.
// "model llama-3-8b has no ready replica: 2 pods — 1 starting (ContainerCreating), 1 terminating".

import type { EndpointState, PoolView } from '../endpoints/model.js';

export interface Unavailability {
  readonly message: string;
  /** Replica count per state, for the structured error body and metrics. */
  readonly replicas: Readonly<Partial<Record<EndpointState, number>>>;
  readonly retryAfterSeconds: number;
}

const STATE_WORDS: Record<EndpointState, string> = {
  Pending: 'pending',
  Starting: 'starting',
  NotReady: 'not ready',
  CrashLoop: 'crash-looping',
  Ready: 'ready',
  Quarantined: 'quarantined',
  Terminating: 'terminating',
  Gone: 'gone',
};

/** Retry hints by state: a starting replica takes a while; a quarantine ends on a known schedule. */
const RETRY_AFTER_SECONDS: Partial<Record<EndpointState, number>> = {
  Pending: 30,
  Starting: 15,
  NotReady: 10,
  CrashLoop: 60,
  Quarantined: 5,
  Terminating: 5,
};
const DEFAULT_RETRY_AFTER_SECONDS = 10;

export function explainUnavailable(model: string, pools: readonly PoolView[]): Unavailability {
  const replicas: Partial<Record<EndpointState, number>> = {};
  const reasons = new Map<EndpointState, Set<string>>();
  let total = 0;
  for (const pool of pools) {
    for (const endpoint of pool.endpoints) {
      total += 1;
      replicas[endpoint.state] = (replicas[endpoint.state] ?? 0) + 1;
      if (endpoint.reason !== '') {
        const set = reasons.get(endpoint.state) ?? new Set<string>();
        set.add(endpoint.reason);
        reasons.set(endpoint.state, set);
      }
    }
  }
  if (total === 0) {
    return { message: `model ${model} has no ready replica: its pool has no pods`, replicas, retryAfterSeconds: 30 };
  }
  const parts = (Object.keys(replicas) as EndpointState[]).map((state) => {
    const why = reasons.get(state);
    const detail = why === undefined ? '' : ` (${[...why].slice(0, 3).join('; ')}${why.size > 3 ? '; …' : ''})`;
    return `${replicas[state]} ${STATE_WORDS[state]}${detail}`;
  });
  const retryAfterSeconds = Math.min(
    ...(Object.keys(replicas) as EndpointState[]).map((s) => RETRY_AFTER_SECONDS[s] ?? DEFAULT_RETRY_AFTER_SECONDS),
  );
  return {
    message: `model ${model} has no ready replica: ${total} ${total === 1 ? 'pod' : 'pods'} — ${parts.join(', ')}`,
    replicas,
    retryAfterSeconds,
  };
}
