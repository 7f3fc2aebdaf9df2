// The kubelet's side of a pod's life, played against a real API server: create the pod (already
// bound to a node, as after scheduling), then report its status through the `status` subresource
// exactly as a kubelet does (phase, conditions, containerStatuses, podIP), and finish a graceful
// deletion once "the containers have stopped". The statuses come from pod-builders.ts, so the
// fake-API tests and the real-API tests describe pods the same way.

import type { CoreV1Api } from '@kubernetes/client-node';
import type { V1Pod, V1PodStatus } from '@kubernetes/client-node';
import type { PodJson, PodOptions } from './pod-builders.js';

/** The node every test pod is bound to. No Node object is needed for that. */
export const NODE_NAME = 'node-1';

export interface TestPod {
  readonly name: string;
  readonly namespace: string;
  readonly labels: Readonly<Record<string, string>>;
  readonly ip: string;
}

export class FakeKubelet {
  constructor(private readonly core: CoreV1Api) {}

  /**
   * Creates the pod bound to NODE_NAME (so a graceful delete waits for "the kubelet", leaving it
   * Terminating) and reports the status `builder` describes.
   */
  async createPod(pod: TestPod, builder: (o: PodOptions) => PodJson): Promise<V1Pod> {
    const built = builder(options(pod));
    await this.core.createNamespacedPod({
      namespace: pod.namespace,
      body: {
        metadata: { name: pod.name, namespace: pod.namespace, labels: { ...pod.labels } },
        spec: {
          nodeName: NODE_NAME,
          automountServiceAccountToken: false,
          terminationGracePeriodSeconds: 30,
          containers: built.spec.containers.map((c) => ({ name: c.name, image: c.image, ports: c.ports })),
        },
      },
    });
    return this.setStatus(pod, builder);
  }

  /** Replaces the pod's status with the one `builder` describes (a kubelet status sync). */
  async setStatus(pod: TestPod, builder: (o: PodOptions) => PodJson): Promise<V1Pod> {
    // Builders speak API JSON (timestamps as strings); client-node's serializer passes strings
    // through unchanged where its types say Date, so the wire format is the same.
    const status = builder(options(pod)).status as unknown as V1PodStatus;
    // Read-modify-write with the resourceVersion: a conflicting write fails (409) and we retry.
    for (let attempt = 1; ; attempt++) {
      const current = await this.core.readNamespacedPodStatus({ namespace: pod.namespace, name: pod.name });
      try {
        return await this.core.replaceNamespacedPodStatus({
          namespace: pod.namespace,
          name: pod.name,
          body: { ...current, status },
        });
      } catch (err) {
        if ((err as { code?: number }).code !== 409 || attempt >= 5) throw err;
      }
    }
  }

  /** A user's `kubectl delete pod`: the API server marks it Terminating and waits for the kubelet. */
  async requestDeletion(pod: TestPod): Promise<void> {
    await this.core.deleteNamespacedPod({ namespace: pod.namespace, name: pod.name, gracePeriodSeconds: 30 });
  }

  /** The kubelet's final delete after the containers stopped: the pod leaves the API. */
  async finishDeletion(pod: TestPod): Promise<void> {
    await this.core.deleteNamespacedPod({ namespace: pod.namespace, name: pod.name, gracePeriodSeconds: 0 });
  }
}

function options(pod: TestPod): PodOptions {
  return { name: pod.name, namespace: pod.namespace, labels: { ...pod.labels }, ip: pod.ip };
}
