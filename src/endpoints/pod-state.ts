// The endpoint state machine: one pure function from a pod's status to the state users see in
// errors and metrics, with a short reason taken from the pod itself. No Kubernetes client types
// here (the watch hands us either deserialized V1Pods or raw JSON; both fit `PodFacts`), so the
// whole thing is testable with plain tables.

import type { EndpointState } from './model.js';

/** A state a source can report; `Quarantined` belongs to the store's passive health. */
export type PodEndpointState = Exclude<EndpointState, 'Quarantined'>;

export interface PodClassification {
  readonly state: PodEndpointState;
  readonly reason: string;
}

/** The container-state shapes of a V1ContainerStatus we read. */
export interface ContainerStateFacts {
  readonly waiting?: { readonly reason?: string | null; readonly message?: string | null } | null;
  readonly running?: object | null;
  readonly terminated?: {
    readonly reason?: string | null;
    readonly exitCode?: number | null;
    readonly message?: string | null;
  } | null;
}

export interface ContainerStatusFacts {
  readonly name: string;
  readonly ready?: boolean | null;
  /** False while a startup probe has not passed yet. */
  readonly started?: boolean | null;
  readonly restartCount?: number | null;
  readonly state?: ContainerStateFacts | null;
  readonly lastState?: ContainerStateFacts | null;
}

export interface PodConditionFacts {
  readonly type: string;
  readonly status: string;
  readonly reason?: string | null;
  readonly message?: string | null;
}

/**
 * The minimal structural subset of a V1Pod the classifier needs. Both client-node's
 * deserialized `V1Pod` (timestamps as `Date`) and raw watch JSON (timestamps as strings) fit.
 */
export interface PodFacts {
  readonly metadata?: {
    readonly deletionTimestamp?: Date | string | null;
  } | null;
  readonly spec?: {
    readonly readinessGates?: ReadonlyArray<{ readonly conditionType: string }> | null;
  } | null;
  readonly status?: {
    readonly phase?: string | null;
    readonly podIP?: string | null;
    readonly reason?: string | null;
    readonly message?: string | null;
    readonly conditions?: readonly PodConditionFacts[] | null;
    readonly initContainerStatuses?: readonly ContainerStatusFacts[] | null;
    readonly containerStatuses?: readonly ContainerStatusFacts[] | null;
  } | null;
}

/**
 * Waiting reasons that mean "this will not become ready without someone fixing something".
 * Image pull failures are here on purpose: the kubelet keeps retrying, but a wrong image name or
 * missing credentials never heal on their own, and users need to see them as failures, not as
 * a slow start.
 */
const FAILURE_WAITING_REASONS: ReadonlySet<string> = new Set([
  'CrashLoopBackOff',
  'ImagePullBackOff',
  'ErrImagePull',
  'ErrImageNeverPull',
  'InvalidImageName',
  'CreateContainerConfigError',
  'CreateContainerError',
  'RunContainerError',
  'PreStartHookError',
  'PostStartHookError',
]);

/** Longest reason we pass on: reasons end up in error messages and log lines. */
const MAX_REASON_LENGTH = 160;

export function classifyPod(pod: PodFacts): PodClassification {
  const status = pod.status ?? {};
  const conditions = status.conditions ?? [];
  const phase = status.phase ?? '';

  // Deletion wins over everything: even a Ready pod must stop receiving new requests once its
  // deletion is requested, because its endpoint is about to disappear.
  if (pod.metadata?.deletionTimestamp) {
    return { state: 'Terminating', reason: 'pod is being deleted' };
  }
  if (phase === 'Succeeded') {
    return { state: 'Gone', reason: 'pod completed (phase Succeeded)' };
  }
  if (phase === 'Failed') {
    const why = joinReason(status.reason, status.message);
    return { state: 'CrashLoop', reason: why === '' ? 'pod failed (phase Failed)' : shorten(`pod failed: ${why}`) };
  }

  const ready = findCondition(conditions, 'Ready');
  if (ready?.status === 'True') {
    const ip = status.podIP ?? '';
    return ip === '' ? { state: 'Starting', reason: 'no pod IP yet' } : { state: 'Ready', reason: 'ready' };
  }

  const scheduled = findCondition(conditions, 'PodScheduled');
  if (scheduled?.status === 'False') {
    return { state: 'Pending', reason: shorten(joinReason(scheduled.reason ?? 'Unschedulable', scheduled.message)) };
  }
  if ((phase === 'Pending' || phase === '') && scheduled === undefined) {
    return { state: 'Pending', reason: 'waiting to be scheduled' };
  }

  const initStatuses = status.initContainerStatuses ?? [];
  const containerStatuses = status.containerStatuses ?? [];

  const failure = findFailure(initStatuses, 'init container') ?? findFailure(containerStatuses, 'container');
  if (failure !== undefined) {
    return { state: 'CrashLoop', reason: shorten(failure) };
  }

  const initialized = findCondition(conditions, 'Initialized');
  if (initialized?.status === 'False') {
    return { state: 'Starting', reason: initProgress(initStatuses) };
  }

  const waiting = containerStatuses.find((c) => c.state?.waiting);
  if (waiting !== undefined) {
    const why = waiting.state?.waiting?.reason ?? 'waiting';
    return { state: 'Starting', reason: `${why}: container ${waiting.name}` };
  }
  if (phase === 'Pending') {
    return { state: 'Starting', reason: containerStatuses.length === 0 ? 'ContainerCreating' : 'starting containers' };
  }
  const unstarted = containerStatuses.find((c) => c.state?.running && c.started === false);
  if (unstarted !== undefined) {
    return { state: 'Starting', reason: `startup probe not passed yet: container ${unstarted.name}` };
  }

  if (ready?.status === 'Unknown' || phase === 'Unknown') {
    return { state: 'NotReady', reason: 'pod status unknown (node not reporting)' };
  }

  const exited = containerStatuses.find((c) => c.state?.terminated);
  if (exited !== undefined) {
    return { state: 'NotReady', reason: `container ${exited.name} exited (${exited.state?.terminated?.reason ?? 'Completed'})` };
  }
  const notReady = containerStatuses.filter((c) => c.ready !== true).map((c) => c.name);
  if (notReady.length > 0) {
    return { state: 'NotReady', reason: `readiness probe failing: container ${notReady.join(', ')}` };
  }

  const unmetGates = (pod.spec?.readinessGates ?? [])
    .map((g) => g.conditionType)
    .filter((type) => findCondition(conditions, type)?.status !== 'True');
  if (unmetGates.length > 0) {
    return { state: 'NotReady', reason: shorten(`readiness gates unmet: ${unmetGates.join(', ')}`) };
  }

  const why = joinReason(ready?.reason, ready?.message);
  return { state: 'NotReady', reason: why === '' ? 'not ready' : shorten(`not ready: ${why}`) };
}

function findCondition(conditions: readonly PodConditionFacts[], type: string): PodConditionFacts | undefined {
  return conditions.find((c) => c.type === type);
}

/** A container that needs intervention: failure waiting reason, or exited non-zero (Error, OOMKilled). */
function findFailure(statuses: readonly ContainerStatusFacts[], kind: string): string | undefined {
  for (const c of statuses) {
    const waitingReason = c.state?.waiting?.reason ?? '';
    if (FAILURE_WAITING_REASONS.has(waitingReason)) {
      const last = c.lastState?.terminated;
      const lastExit = last ? ` (last exit: ${last.reason ?? 'Error'}, code ${last.exitCode ?? '?'})` : '';
      return `${waitingReason}: ${kind} ${c.name}${lastExit}`;
    }
    const terminated = c.state?.terminated;
    if (terminated && (terminated.exitCode ?? 0) !== 0) {
      return `${terminated.reason ?? 'Error'}: ${kind} ${c.name} exited with code ${terminated.exitCode ?? '?'}`;
    }
  }
  return undefined;
}

/** `Init:1/3 (running model-download)`, like kubectl prints it. */
function initProgress(initStatuses: readonly ContainerStatusFacts[]): string {
  if (initStatuses.length === 0) {
    return 'PodInitializing';
  }
  const done = initStatuses.filter((c) => c.state?.terminated?.exitCode === 0).length;
  const current = initStatuses.find((c) => c.state?.terminated?.exitCode !== 0);
  const detail = current === undefined ? '' : ` (${current.state?.running ? 'running' : 'waiting for'} ${current.name})`;
  return `Init:${done}/${initStatuses.length}${detail}`;
}

function joinReason(reason: string | null | undefined, message: string | null | undefined): string {
  const parts = [reason ?? '', message ?? ''].map((s) => s.trim()).filter((s) => s !== '');
  return parts.join(': ');
}

/**
 * Scheduler and kubelet messages run long ("0/3 nodes are available: 3 Insufficient
 * nvidia.com/gpu. preemption: 0/3 nodes ..."). The first sentence says what users need.
 */
export function shorten(text: string, max = MAX_REASON_LENGTH): string {
  const oneLine = text.replace(/\s+/g, ' ').trim();
  const firstSentence = oneLine.split(/\.(?:\s|$)/)[0] ?? oneLine;
  return firstSentence.length <= max ? firstSentence : `${firstSentence.slice(0, max - 1)}…`;
}

/**
 * Every (from, to) change the classifier is expected to produce as a pod lives its life.
 * Tests drive a pod through each one. `Gone` here means phase Succeeded; `Terminating` is final
 * for the classifier (a deleted pod leaves the cache, which the source handles and tests).
 */
export const MEANINGFUL_TRANSITIONS: ReadonlyArray<readonly [PodEndpointState, PodEndpointState]> = [
  ['Pending', 'Starting'],
  ['Pending', 'Terminating'],
  ['Starting', 'NotReady'],
  ['Starting', 'Ready'],
  ['Starting', 'CrashLoop'],
  ['Starting', 'Terminating'],
  ['NotReady', 'Ready'],
  ['NotReady', 'CrashLoop'],
  ['NotReady', 'Terminating'],
  ['Ready', 'NotReady'],
  ['Ready', 'CrashLoop'],
  ['Ready', 'Starting'],
  ['Ready', 'Terminating'],
  ['Ready', 'Gone'],
  ['CrashLoop', 'Starting'],
  ['CrashLoop', 'NotReady'],
  ['CrashLoop', 'Ready'],
  ['CrashLoop', 'Terminating'],
];
