import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import type { V1Pod } from '@kubernetes/client-node';
import { ENDPOINT_STATES } from '../../../src/endpoints/model.js';
import { classifyPod, MEANINGFUL_TRANSITIONS, shorten } from '../../../src/endpoints/pod-state.js';
import type { PodEndpointState, PodFacts } from '../../../src/endpoints/pod-state.js';
import { crashLoopPod, notReadyPod, pendingPod, readyPod, startingPod, succeededPod, terminatingPod } from '../../support/pod-builders.js';
import type { ContainerStatusJson, PodJson } from '../../support/pod-builders.js';

const base = { name: 'vllm-0', namespace: 'models', labels: { app: 'vllm' } };

function first(statuses: ContainerStatusJson[] | undefined): ContainerStatusJson {
  const c = statuses?.[0];
  assert.ok(c, 'builder produced a container status');
  return c;
}

/** Pods in states the plain builders do not cover, derived from them the way the kubelet would. */
const variants = {
  unscheduledNoConditions(): PodJson {
    const pod = pendingPod(base);
    pod.status.conditions = [];
    return pod;
  },
  initRunning(): PodJson {
    const pod = startingPod(base);
    pod.spec.initContainers = [
      { name: 'fetch-weights', image: 'busybox' },
      { name: 'warmup', image: 'busybox' },
    ];
    pod.status.conditions = pod.status.conditions.map((c) =>
      c.type === 'Initialized' ? { ...c, status: 'False' as const, reason: 'ContainersNotInitialized' } : c,
    );
    pod.status.initContainerStatuses = [
      {
        ...first(startingPod(base).status.containerStatuses),
        name: 'fetch-weights',
        state: { running: { startedAt: '2025-01-01T00:00:00Z' } },
      },
      { ...first(startingPod(base).status.containerStatuses), name: 'warmup', state: { waiting: { reason: 'PodInitializing' } } },
    ];
    first(pod.status.containerStatuses).state = { waiting: { reason: 'PodInitializing' } };
    return pod;
  },
  initCrashing(): PodJson {
    const pod = variants.initRunning();
    const init = pod.status.initContainerStatuses?.[0];
    assert.ok(init);
    init.state = { waiting: { reason: 'CrashLoopBackOff', message: 'back-off 10s' } };
    init.lastState = { terminated: { reason: 'Error', exitCode: 1 } };
    return pod;
  },
  imagePullBackOff(): PodJson {
    const pod = startingPod(base);
    first(pod.status.containerStatuses).state = {
      waiting: { reason: 'ImagePullBackOff', message: 'Back-off pulling image "vllm/vllm-openai:typo"' },
    };
    return pod;
  },
  errImagePull(): PodJson {
    const pod = startingPod(base);
    first(pod.status.containerStatuses).state = { waiting: { reason: 'ErrImagePull', message: 'manifest unknown' } };
    return pod;
  },
  exitedWithError(): PodJson {
    const pod = notReadyPod(base);
    first(pod.status.containerStatuses).state = { terminated: { reason: 'Error', exitCode: 1 } };
    return pod;
  },
  exitedCleanly(): PodJson {
    const pod = notReadyPod(base);
    first(pod.status.containerStatuses).state = { terminated: { reason: 'Completed', exitCode: 0 } };
    return pod;
  },
  evicted(): PodJson {
    const pod = notReadyPod(base);
    pod.status.phase = 'Failed';
    pod.status.reason = 'Evicted';
    pod.status.message = 'The node was low on resource: memory. Threshold quantity: 100Mi, available: 50Mi.';
    return pod;
  },
  startupProbePending(): PodJson {
    const pod = notReadyPod(base);
    const c = first(pod.status.containerStatuses);
    c.started = false;
    c.restartCount = 1;
    return pod;
  },
  readyWithoutIp(): PodJson {
    const pod = readyPod(base);
    delete pod.status.podIP;
    delete pod.status.podIPs;
    return pod;
  },
  readinessGateUnmet(): PodJson {
    const pod = readyPod(base);
    pod.spec.readinessGates = [{ conditionType: 'example.com/lb-registered' }];
    pod.status.conditions = pod.status.conditions.map((c) =>
      c.type === 'Ready'
        ? {
            ...c,
            status: 'False' as const,
            reason: 'ReadinessGatesNotReady',
            message: 'corresponding condition of pod readiness gate "example.com/lb-registered" does not exist.',
          }
        : c,
    );
    return pod;
  },
  readinessGateMet(): PodJson {
    const pod = readyPod(base);
    pod.spec.readinessGates = [{ conditionType: 'example.com/lb-registered' }];
    pod.status.conditions.push({ type: 'example.com/lb-registered', status: 'True', lastTransitionTime: '2025-01-01T00:00:00Z' });
    return pod;
  },
  nodeLost(): PodJson {
    const pod = readyPod(base);
    pod.status.conditions = pod.status.conditions.map((c) =>
      c.type === 'Ready' ? { ...c, status: 'Unknown' as const, reason: 'NodeLost' } : c,
    );
    return pod;
  },
  terminatingCrashLoop(): PodJson {
    const pod = crashLoopPod(base);
    pod.metadata.deletionTimestamp = '2025-01-01T00:00:00Z';
    return pod;
  },
  terminatingPending(): PodJson {
    const pod = pendingPod(base);
    pod.metadata.deletionTimestamp = '2025-01-01T00:00:00Z';
    return pod;
  },
  terminatingSucceeded(): PodJson {
    const pod = succeededPod(base);
    pod.metadata.deletionTimestamp = '2025-01-01T00:00:00Z';
    return pod;
  },
};

interface Case {
  readonly name: string;
  readonly pod: PodFacts;
  readonly state: PodEndpointState;
  /** The reason must match this exactly (string) or this pattern. */
  readonly reason: string | RegExp;
}

const cases: readonly Case[] = [
  {
    name: 'unschedulable pod',
    pod: pendingPod(base),
    state: 'Pending',
    reason: 'Unschedulable: 0/3 nodes are available: 3 Insufficient nvidia.com/gpu',
  },
  {
    name: 'pod the scheduler has not looked at',
    pod: variants.unscheduledNoConditions(),
    state: 'Pending',
    reason: 'waiting to be scheduled',
  },
  { name: 'pod with no status at all', pod: {}, state: 'Pending', reason: 'waiting to be scheduled' },
  { name: 'container being created', pod: startingPod(base), state: 'Starting', reason: 'ContainerCreating: container model-server' },
  { name: 'init containers running', pod: variants.initRunning(), state: 'Starting', reason: 'Init:0/2 (running fetch-weights)' },
  {
    name: 'startup probe not passed',
    pod: variants.startupProbePending(),
    state: 'Starting',
    reason: 'startup probe not passed yet: container model-server',
  },
  { name: 'Ready=True but no pod IP', pod: variants.readyWithoutIp(), state: 'Starting', reason: 'no pod IP yet' },
  { name: 'readiness probe failing', pod: notReadyPod(base), state: 'NotReady', reason: 'readiness probe failing: container model-server' },
  {
    name: 'readiness gate unmet',
    pod: variants.readinessGateUnmet(),
    state: 'NotReady',
    reason: 'readiness gates unmet: example.com/lb-registered',
  },
  { name: 'node stopped reporting', pod: variants.nodeLost(), state: 'NotReady', reason: 'pod status unknown (node not reporting)' },
  {
    name: 'container exited 0 and is restarting',
    pod: variants.exitedCleanly(),
    state: 'NotReady',
    reason: 'container model-server exited (Completed)',
  },
  {
    name: 'crash loop',
    pod: crashLoopPod(base),
    state: 'CrashLoop',
    reason: 'CrashLoopBackOff: container model-server (last exit: OOMKilled, code 137)',
  },
  {
    name: 'init container crash loop',
    pod: variants.initCrashing(),
    state: 'CrashLoop',
    reason: 'CrashLoopBackOff: init container fetch-weights (last exit: Error, code 1)',
  },
  { name: 'image pull back-off', pod: variants.imagePullBackOff(), state: 'CrashLoop', reason: 'ImagePullBackOff: container model-server' },
  { name: 'image pull error', pod: variants.errImagePull(), state: 'CrashLoop', reason: 'ErrImagePull: container model-server' },
  {
    name: 'container exited with an error',
    pod: variants.exitedWithError(),
    state: 'CrashLoop',
    reason: 'Error: container model-server exited with code 1',
  },
  {
    name: 'evicted (phase Failed)',
    pod: variants.evicted(),
    state: 'CrashLoop',
    reason: 'pod failed: Evicted: The node was low on resource: memory',
  },
  { name: 'ready', pod: readyPod(base), state: 'Ready', reason: 'ready' },
  { name: 'ready with its readiness gate met', pod: variants.readinessGateMet(), state: 'Ready', reason: 'ready' },
  { name: 'ready pod being deleted', pod: terminatingPod(base), state: 'Terminating', reason: 'pod is being deleted' },
  { name: 'crash-looping pod being deleted', pod: variants.terminatingCrashLoop(), state: 'Terminating', reason: 'pod is being deleted' },
  { name: 'pending pod being deleted', pod: variants.terminatingPending(), state: 'Terminating', reason: 'pod is being deleted' },
  { name: 'finished pod still being deleted', pod: variants.terminatingSucceeded(), state: 'Terminating', reason: 'pod is being deleted' },
  { name: 'completed pod', pod: succeededPod(base), state: 'Gone', reason: 'pod completed (phase Succeeded)' },
];

void describe('classifyPod: one state per pod status', () => {
  for (const c of cases) {
    void it(`${c.name} → ${c.state}`, () => {
      const got = classifyPod(c.pod);
      assert.equal(got.state, c.state);
      if (typeof c.reason === 'string') {
        assert.equal(got.reason, c.reason);
      } else {
        assert.match(got.reason, c.reason);
      }
    });
  }

  void it('covers every state a source can report', () => {
    const covered = new Set(cases.map((c) => c.state));
    for (const state of ENDPOINT_STATES.filter((s) => s !== 'Quarantined')) {
      assert.ok(covered.has(state), `no case for ${state}`);
    }
  });

  void it('only Ready pods have state Ready, and every Ready pod has an IP and no deletion timestamp', () => {
    for (const c of cases) {
      const got = classifyPod(c.pod);
      const hasIp = (c.pod.status?.podIP ?? '') !== '';
      const deleting = Boolean(c.pod.metadata?.deletionTimestamp);
      const readyTrue = c.pod.status?.conditions?.some((k) => k.type === 'Ready' && k.status === 'True') ?? false;
      assert.equal(got.state === 'Ready', hasIp && !deleting && readyTrue, c.name);
    }
  });

  void it('accepts client-node V1Pod objects (Date timestamps) as they come from a list', () => {
    const fromList: V1Pod = {
      metadata: { name: 'vllm-0', namespace: 'models', deletionTimestamp: new Date('2025-01-01T00:00:00Z') },
      status: { phase: 'Running', podIP: '10.0.0.9', conditions: [{ type: 'Ready', status: 'True' }] },
    };
    assert.deepEqual(classifyPod(fromList), { state: 'Terminating', reason: 'pod is being deleted' });
    const ready: V1Pod = { ...fromList, metadata: { name: 'vllm-0' } };
    assert.deepEqual(classifyPod(ready), { state: 'Ready', reason: 'ready' });
  });
});

void describe('shorten', () => {
  void it('keeps the first sentence of long scheduler messages', () => {
    assert.equal(
      shorten('0/3 nodes are available: 3 Insufficient cpu. preemption: not helpful.'),
      '0/3 nodes are available: 3 Insufficient cpu',
    );
  });
  void it('collapses whitespace and caps the length', () => {
    const long = `a  ${'x'.repeat(300)}`;
    const got = shorten(long, 20);
    assert.equal(got.length, 20);
    assert.ok(got.startsWith('a x'));
    assert.ok(got.endsWith('…'));
  });
});

/** A pod's life as the kubelet reports it: each step is the pod's full status at that moment. */
interface Story {
  readonly name: string;
  readonly steps: ReadonlyArray<readonly [PodEndpointState, PodFacts]>;
}

const stories: readonly Story[] = [
  {
    name: 'scale-up, model loads, then scale-down',
    steps: [
      ['Pending', pendingPod(base)],
      ['Starting', startingPod(base)],
      ['NotReady', notReadyPod(base)],
      ['Ready', readyPod(base)],
      ['Terminating', terminatingPod(base)],
    ],
  },
  {
    name: 'init containers, then a fast readiness probe',
    steps: [
      ['Starting', variants.initRunning()],
      ['Starting', startingPod(base)],
      ['Ready', readyPod(base)],
    ],
  },
  {
    name: 'crashes while starting, recovers after a few restarts',
    steps: [
      ['Starting', startingPod(base)],
      ['CrashLoop', crashLoopPod(base)],
      ['Starting', variants.startupProbePending()],
      ['CrashLoop', variants.exitedWithError()],
      ['NotReady', notReadyPod(base)],
      ['CrashLoop', crashLoopPod(base)],
      ['Ready', readyPod(base)],
    ],
  },
  {
    name: 'a ready pod runs out of memory and is deleted',
    steps: [
      ['Ready', readyPod(base)],
      ['CrashLoop', crashLoopPod(base)],
      ['Terminating', variants.terminatingCrashLoop()],
    ],
  },
  {
    name: 'a ready pod restarts its container (startup probe again)',
    steps: [
      ['Ready', readyPod(base)],
      ['Starting', variants.startupProbePending()],
      ['Ready', readyPod(base)],
    ],
  },
  {
    name: 'readiness flaps, then a gate is withdrawn',
    steps: [
      ['Ready', readyPod(base)],
      ['NotReady', notReadyPod(base)],
      ['Ready', readyPod(base)],
      ['NotReady', variants.readinessGateUnmet()],
    ],
  },
  {
    name: 'scaled down before it was scheduled',
    steps: [
      ['Pending', pendingPod(base)],
      ['Terminating', variants.terminatingPending()],
    ],
  },
  {
    name: 'scaled down while its container was being created',
    steps: [
      ['Starting', startingPod(base)],
      ['Terminating', { ...startingPod(base), metadata: { ...startingPod(base).metadata, deletionTimestamp: '2025-01-01T00:00:00Z' } }],
    ],
  },
  {
    name: 'scaled down while loading the model',
    steps: [
      ['NotReady', notReadyPod(base)],
      ['Terminating', { ...notReadyPod(base), metadata: { ...notReadyPod(base).metadata, deletionTimestamp: '2025-01-01T00:00:00Z' } }],
    ],
  },
  {
    name: 'the server exits cleanly and the pod completes',
    steps: [
      ['Ready', readyPod(base)],
      ['Gone', succeededPod(base)],
    ],
  },
  {
    name: 'a ready pod is evicted',
    steps: [
      ['Ready', readyPod(base)],
      ['CrashLoop', variants.evicted()],
    ],
  },
];

void describe('classifyPod: transitions along a pod’s life', () => {
  for (const story of stories) {
    void it(story.name, () => {
      const got = story.steps.map(([, pod]) => classifyPod(pod).state);
      assert.deepEqual(
        got,
        story.steps.map(([state]) => state),
      );
    });
  }

  void it('the stories exercise every meaningful transition', () => {
    const seen = new Set<string>();
    for (const story of stories) {
      for (let i = 1; i < story.steps.length; i++) {
        const from = classifyPod(story.steps[i - 1]?.[1] ?? {}).state;
        const to = classifyPod(story.steps[i]?.[1] ?? {}).state;
        if (from !== to) seen.add(`${from}→${to}`);
      }
    }
    const missing = MEANINGFUL_TRANSITIONS.map(([a, b]) => `${a}→${b}`).filter((t) => !seen.has(t));
    assert.deepEqual(missing, []);
    const unlisted = [...seen].filter((t) => !MEANINGFUL_TRANSITIONS.some(([a, b]) => `${a}→${b}` === t));
    assert.deepEqual(unlisted, [], 'a story produced a transition the list does not declare');
  });

  void it('every source-reported state appears in some transition', () => {
    const inTransitions = new Set(MEANINGFUL_TRANSITIONS.flat());
    for (const state of ENDPOINT_STATES.filter((s) => s !== 'Quarantined')) {
      assert.ok(inTransitions.has(state), `${state} is in no transition`);
    }
  });
});
