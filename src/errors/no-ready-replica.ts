// Building the `no_ready_replica` error from the replica states of a model's pools.
//
// One stable code for every reason, not one code per reason: clients and alerts match a single
// `no_ready_replica`, while the reasons stay machine-readable in `error.replicas` (a count per
// state, always the same keys) and human-readable in the message. A per-reason code would force
// every client to learn a growing list for what is, to them, the same situation: "wait, then
// retry". What does differ per reason is *how long* to wait, so Retry-After depends on it.

import type { EndpointState } from '../endpoints/model.js';
import { GatewayError } from './gateway-error.js';

export type ReplicaCounts = Partial<Record<EndpointState, number>>;

/** States reported in `error.replicas`. `Gone` replicas have left the cache, so they are not counted. */
export const REPORTED_STATES = [
  'Ready',
  'Pending',
  'Starting',
  'NotReady',
  'CrashLoop',
  'Quarantined',
  'Terminating',
] as const satisfies readonly EndpointState[];

type ReportedState = (typeof REPORTED_STATES)[number];

/** snake_case keys of `error.replicas` (JSON style of OpenAI bodies). */
export const REPLICA_STATE_KEYS: Readonly<Record<ReportedState, string>> = {
  Ready: 'ready',
  Pending: 'pending',
  Starting: 'starting',
  NotReady: 'not_ready',
  CrashLoop: 'crash_loop',
  Quarantined: 'quarantined',
  Terminating: 'terminating',
};

/**
 * Retry-After per non-ready state: roughly how soon a replica in that state becomes Ready.
 * Quarantine and readiness flaps clear in seconds; a starting model server is loading weights
 * (tens of seconds to minutes); pending pods wait for scheduling or image pulls; crash loops and
 * terminating pods need a replacement. The smallest value over the present states wins: the
 * soonest replica to recover is the one the client waits for.
 */
export const RETRY_AFTER_BY_STATE: Readonly<Record<Exclude<ReportedState, 'Ready'>, number>> = {
  Quarantined: 5,
  NotReady: 5,
  Starting: 15,
  Pending: 30,
  CrashLoop: 30,
  Terminating: 30,
};

/** Retry-After when the model has no replica at all (scaled to zero, or every pod gone). */
export const RETRY_AFTER_NO_REPLICAS = 30;

const STATE_WORDS: Readonly<Record<ReportedState, string>> = {
  Ready: 'ready but not routable',
  Pending: 'pending',
  Starting: 'starting',
  NotReady: 'not ready',
  CrashLoop: 'crash-looping',
  Quarantined: 'quarantined',
  Terminating: 'terminating',
};

/** A replica as the explanation needs it: its state and the short reason the source gave. */
export interface ReplicaFacts {
  readonly state: EndpointState;
  readonly reason?: string;
}

const MAX_REASONS_PER_STATE = 3;

export function countReplicaStates(endpoints: Iterable<{ readonly state: EndpointState }>): ReplicaCounts {
  const counts: ReplicaCounts = {};
  for (const { state } of endpoints) counts[state] = (counts[state] ?? 0) + 1;
  return counts;
}

export function noReadyReplicaRetryAfter(counts: ReplicaCounts): number {
  let best: number | undefined;
  for (const state of Object.keys(RETRY_AFTER_BY_STATE) as Array<keyof typeof RETRY_AFTER_BY_STATE>) {
    if ((counts[state] ?? 0) > 0) best = Math.min(best ?? Infinity, RETRY_AFTER_BY_STATE[state]);
  }
  return best ?? RETRY_AFTER_NO_REPLICAS;
}

/** `error.replicas`: every reported state, zero included, so clients see a stable shape. */
function replicaBreakdown(counts: ReplicaCounts): Record<string, number> {
  const out: Record<string, number> = {};
  for (const state of REPORTED_STATES) out[REPLICA_STATE_KEYS[state]] = counts[state] ?? 0;
  return out;
}

/**
 * e.g. `model llama-3-8b has no ready replica: 2 pods — 1 starting (ContainerCreating),
 * 1 terminating (pod is being deleted). Retry in about 15 s.` Distinct reasons per state are
 * listed (at most three), so the message stays short for large pools.
 */
function noReadyReplicaMessage(model: string, replicas: readonly ReplicaFacts[], retryAfterSeconds: number): string {
  const wait = `Retry in about ${retryAfterSeconds} s.`;
  const reported = replicas.filter((r): r is ReplicaFacts & { state: ReportedState } =>
    (REPORTED_STATES as readonly string[]).includes(r.state),
  );
  if (reported.length === 0) return `model ${model} has no ready replica: its pool has no pods. ${wait}`;
  const parts: string[] = [];
  for (const state of REPORTED_STATES) {
    const inState = reported.filter((r) => r.state === state);
    if (inState.length === 0) continue;
    const reasons = [...new Set(inState.map((r) => r.reason ?? '').filter((r) => r !== ''))];
    const shown = reasons.slice(0, MAX_REASONS_PER_STATE).join('; ') + (reasons.length > MAX_REASONS_PER_STATE ? '; …' : '');
    parts.push(`${inState.length} ${STATE_WORDS[state]}${shown === '' ? '' : ` (${shown})`}`);
  }
  const pods = `${reported.length} ${reported.length === 1 ? 'pod' : 'pods'}`;
  return `model ${model} has no ready replica: ${pods} — ${parts.join(', ')}. ${wait}`;
}

export function noReadyReplicaError(model: string, replicas: readonly ReplicaFacts[], options?: { cause?: unknown }): GatewayError {
  const counts = countReplicaStates(replicas);
  const retryAfterSeconds = noReadyReplicaRetryAfter(counts);
  return new GatewayError('no_ready_replica', noReadyReplicaMessage(model, replicas, retryAfterSeconds), {
    ...(options !== undefined && 'cause' in options ? { cause: options.cause } : {}),
    details: { model, replicas: replicaBreakdown(counts) },
    retryAfterSeconds,
  });
}
