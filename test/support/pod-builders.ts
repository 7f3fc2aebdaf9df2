// Pods as the Kubernetes API serves them (plain JSON, timestamps as RFC 3339 strings), in each
// lifecycle state, for unit tests and for the fake API server. Every builder returns a fresh
// object, so tests may mutate the result.

export interface ContainerStateJson {
  waiting?: { reason: string; message?: string };
  running?: { startedAt: string };
  terminated?: { reason: string; exitCode: number; message?: string; startedAt?: string; finishedAt?: string };
}

export interface ContainerStatusJson {
  name: string;
  image: string;
  imageID: string;
  ready: boolean;
  started?: boolean;
  restartCount: number;
  state: ContainerStateJson;
  lastState: ContainerStateJson;
}

export interface PodConditionJson {
  type: string;
  status: 'True' | 'False' | 'Unknown';
  reason?: string;
  message?: string;
  lastTransitionTime: string;
}

export interface PodJson {
  apiVersion: 'v1';
  kind: 'Pod';
  metadata: {
    name: string;
    namespace: string;
    labels: Record<string, string>;
    annotations?: Record<string, string>;
    uid?: string;
    resourceVersion?: string;
    creationTimestamp?: string;
    deletionTimestamp?: string;
    deletionGracePeriodSeconds?: number;
  };
  spec: {
    nodeName?: string;
    containers: Array<{ name: string; image: string; ports?: Array<{ containerPort: number; name?: string }> }>;
    initContainers?: Array<{ name: string; image: string }>;
    readinessGates?: Array<{ conditionType: string }>;
  };
  status: {
    phase: 'Pending' | 'Running' | 'Succeeded' | 'Failed' | 'Unknown';
    reason?: string;
    message?: string;
    podIP?: string;
    podIPs?: Array<{ ip: string }>;
    hostIP?: string;
    conditions: PodConditionJson[];
    initContainerStatuses?: ContainerStatusJson[];
    containerStatuses?: ContainerStatusJson[];
  };
}

export interface PodOptions {
  name: string;
  namespace?: string;
  labels?: Record<string, string>;
  /** Pod IP; builders for states that have an IP default to a 10.0.0.x address derived from the name. */
  ip?: string;
  /** Name of the model-server container; defaults to `model-server`. */
  container?: string;
  /** Container port, written into the spec for realism; the source uses the pool's targetPort. */
  port?: number;
}

const T0 = '2025-01-01T00:00:00Z';
const IMAGE = 'vllm/vllm-openai:latest';

function condition(type: string, status: PodConditionJson['status'], reason?: string, message?: string): PodConditionJson {
  return { type, status, ...(reason ? { reason } : {}), ...(message ? { message } : {}), lastTransitionTime: T0 };
}

function defaultIp(name: string): string {
  let hash = 0;
  for (const ch of name) {
    hash = (hash * 31 + ch.charCodeAt(0)) % 250;
  }
  return `10.0.0.${hash + 2}`;
}

function skeleton(o: PodOptions): PodJson {
  const container = o.container ?? 'model-server';
  return {
    apiVersion: 'v1',
    kind: 'Pod',
    metadata: { name: o.name, namespace: o.namespace ?? 'default', labels: { ...(o.labels ?? {}) } },
    spec: { containers: [{ name: container, image: IMAGE, ports: [{ containerPort: o.port ?? 8000, name: 'http' }] }] },
    status: { phase: 'Pending', conditions: [] },
  };
}

function containerStatus(name: string, state: ContainerStateJson, ready: boolean, started: boolean, restartCount = 0): ContainerStatusJson {
  return { name, image: IMAGE, imageID: '', ready, started, restartCount, state, lastState: {} };
}

function scheduled(pod: PodJson, ip: string | undefined): void {
  pod.spec.nodeName = 'node-1';
  pod.status.hostIP = '192.168.0.1';
  if (ip !== undefined && ip !== '') {
    pod.status.podIP = ip;
    pod.status.podIPs = [{ ip }];
  }
}

function containerName(pod: PodJson): string {
  return pod.spec.containers[0]?.name ?? 'model-server';
}

/** Unschedulable: no node has room (the scheduler's PodScheduled=False condition). */
export function pendingPod(o: PodOptions): PodJson {
  const pod = skeleton(o);
  pod.status.conditions = [
    condition(
      'PodScheduled',
      'False',
      'Unschedulable',
      '0/3 nodes are available: 3 Insufficient nvidia.com/gpu. preemption: 0/3 nodes are available: 3 No preemption victims found for incoming pod.',
    ),
  ];
  return pod;
}

/** Scheduled, container being created (image pull, volume mounts). */
export function startingPod(o: PodOptions): PodJson {
  const pod = skeleton(o);
  scheduled(pod, undefined);
  const c = containerName(pod);
  pod.status.conditions = [
    condition('PodReadyToStartContainers', 'False'),
    condition('Initialized', 'True'),
    condition('Ready', 'False', 'ContainersNotReady', `containers with unready status: [${c}]`),
    condition('ContainersReady', 'False', 'ContainersNotReady', `containers with unready status: [${c}]`),
    condition('PodScheduled', 'True'),
  ];
  pod.status.containerStatuses = [containerStatus(c, { waiting: { reason: 'ContainerCreating' } }, false, false)];
  return pod;
}

/** Running, but the readiness probe fails (e.g. the model is still loading). */
export function notReadyPod(o: PodOptions): PodJson {
  const pod = skeleton(o);
  scheduled(pod, o.ip ?? defaultIp(o.name));
  const c = containerName(pod);
  pod.status.phase = 'Running';
  pod.status.conditions = [
    condition('PodReadyToStartContainers', 'True'),
    condition('Initialized', 'True'),
    condition('Ready', 'False', 'ContainersNotReady', `containers with unready status: [${c}]`),
    condition('ContainersReady', 'False', 'ContainersNotReady', `containers with unready status: [${c}]`),
    condition('PodScheduled', 'True'),
  ];
  pod.status.containerStatuses = [containerStatus(c, { running: { startedAt: T0 } }, false, true)];
  return pod;
}

/** Running and Ready=True with an IP: routable. */
export function readyPod(o: PodOptions): PodJson {
  const pod = skeleton(o);
  scheduled(pod, o.ip ?? defaultIp(o.name));
  const c = containerName(pod);
  pod.status.phase = 'Running';
  pod.status.conditions = [
    condition('PodReadyToStartContainers', 'True'),
    condition('Initialized', 'True'),
    condition('Ready', 'True'),
    condition('ContainersReady', 'True'),
    condition('PodScheduled', 'True'),
  ];
  pod.status.containerStatuses = [containerStatus(c, { running: { startedAt: T0 } }, true, true)];
  return pod;
}

/** The model server keeps crashing (last exit OOMKilled) and the kubelet backs off. */
export function crashLoopPod(o: PodOptions): PodJson {
  const pod = notReadyPod(o);
  const c = containerName(pod);
  const status = containerStatus(
    c,
    { waiting: { reason: 'CrashLoopBackOff', message: `back-off 40s restarting failed container=${c}` } },
    false,
    false,
    3,
  );
  status.lastState = { terminated: { reason: 'OOMKilled', exitCode: 137, startedAt: T0, finishedAt: T0 } };
  pod.status.containerStatuses = [status];
  return pod;
}

/** A Ready pod whose deletion was requested: must not receive new traffic. */
export function terminatingPod(o: PodOptions): PodJson {
  const pod = readyPod(o);
  pod.metadata.deletionTimestamp = T0;
  pod.metadata.deletionGracePeriodSeconds = 30;
  return pod;
}

/** All containers exited 0 and will not restart. */
export function succeededPod(o: PodOptions): PodJson {
  const pod = skeleton(o);
  scheduled(pod, o.ip ?? defaultIp(o.name));
  const c = containerName(pod);
  pod.status.phase = 'Succeeded';
  pod.status.conditions = [
    condition('Initialized', 'True', 'PodCompleted'),
    condition('Ready', 'False', 'PodCompleted'),
    condition('ContainersReady', 'False', 'PodCompleted'),
    condition('PodScheduled', 'True'),
  ];
  pod.status.containerStatuses = [containerStatus(c, { terminated: { reason: 'Completed', exitCode: 0 } }, false, false)];
  return pod;
}
