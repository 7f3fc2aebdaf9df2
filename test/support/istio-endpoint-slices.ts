// The EndpointSlice controller's part (kube-controller-manager), played against the real API
// server: for every Service with a selector in a namespace, one EndpointSlice listing the matching
// pods that have an IP and are not finished, with the conditions the controller writes — `ready`
// (Ready=True and not terminating, or the Service publishes not-ready addresses), `serving`
// (Ready=True), `terminating` (deletionTimestamp set) — and each Service port resolved against the
// pod's container ports (a named targetPort by name). Gateways (istiod here) read these to build
// their clusters. The tests call reconcile() after they change pods, where the controller would
// react to a watch event; nothing runs in the background.

import { DiscoveryV1Api } from '@kubernetes/client-node';
import type { DiscoveryV1EndpointPort, V1Endpoint, V1EndpointSlice, V1Pod, V1Service } from '@kubernetes/client-node';
import { stringify as toYaml } from 'yaml';
import type { KubeControlPlane } from './kube-control-plane.js';

const MANAGED_BY = 'endpointslice-controller.k8s.io';

function matches(selector: Record<string, string>, labels: Record<string, string> | undefined): boolean {
  return Object.entries(selector).every(([k, v]) => labels?.[k] === v);
}

function podReady(pod: V1Pod): boolean {
  return pod.status?.conditions?.some((c) => c.type === 'Ready' && c.status === 'True') ?? false;
}

/** The container port a Service port reaches on this pod, or undefined when the pod has none by that name. */
function targetPortOf(pod: V1Pod, target: number | string | undefined, servicePort: number): number | undefined {
  if (target === undefined) return servicePort;
  if (typeof target === 'number') return target;
  if (/^\d+$/.test(target)) return Number(target);
  for (const container of pod.spec?.containers ?? []) {
    const port = container.ports?.find((p) => p.name === target);
    if (port !== undefined) return port.containerPort;
  }
  return undefined;
}

/** The slice the controller would write for `service` given the namespace's pods (pure). */
export function endpointSliceFor(service: V1Service, pods: readonly V1Pod[]): V1EndpointSlice {
  const selector = service.spec?.selector ?? {};
  const members = pods.filter(
    (p) =>
      matches(selector, p.metadata?.labels) && (p.status?.podIP ?? '') !== '' && !['Succeeded', 'Failed'].includes(p.status?.phase ?? ''),
  );
  const first = members[0];
  const ports: DiscoveryV1EndpointPort[] = (service.spec?.ports ?? []).flatMap((sp) => {
    const port = first === undefined ? undefined : targetPortOf(first, sp.targetPort, sp.port);
    return [
      {
        ...(sp.name === undefined ? {} : { name: sp.name }),
        protocol: sp.protocol ?? 'TCP',
        ...(port === undefined ? {} : { port }),
        ...(sp.appProtocol === undefined ? {} : { appProtocol: sp.appProtocol }),
      },
    ];
  });
  const endpoints: V1Endpoint[] = members.map((pod) => {
    const terminating = pod.metadata?.deletionTimestamp !== undefined;
    const ready = podReady(pod);
    return {
      addresses: [pod.status!.podIP!],
      conditions: { ready: service.spec?.publishNotReadyAddresses === true || (ready && !terminating), serving: ready, terminating },
      nodeName: pod.spec?.nodeName ?? '',
      targetRef: { kind: 'Pod', namespace: pod.metadata?.namespace ?? '', name: pod.metadata?.name ?? '', uid: pod.metadata?.uid ?? '' },
    };
  });
  const name = service.metadata!.name!;
  return {
    apiVersion: 'discovery.k8s.io/v1',
    kind: 'EndpointSlice',
    metadata: {
      name: `${name}-slice`,
      namespace: service.metadata!.namespace!,
      labels: { 'kubernetes.io/service-name': name, 'endpointslice.kubernetes.io/managed-by': MANAGED_BY },
      ownerReferences: [
        { apiVersion: 'v1', kind: 'Service', name, uid: service.metadata!.uid!, controller: true, blockOwnerDeletion: true },
      ],
    },
    addressType: 'IPv4',
    endpoints,
    ports,
  };
}

export class EndpointSliceController {
  constructor(private readonly plane: KubeControlPlane) {}

  /**
   * Writes the slice of every selector Service in `namespace` from its current pods; returns them.
   * `adjust` lets a test write what a lagging or disagreeing controller would (a stale view).
   */
  async reconcile(namespace: string, adjust: (slice: V1EndpointSlice) => V1EndpointSlice = (s) => s): Promise<V1EndpointSlice[]> {
    const core = this.plane.core();
    const [services, pods] = await Promise.all([core.listNamespacedService({ namespace }), core.listNamespacedPod({ namespace })]);
    const slices = services.items
      .filter((s) => Object.keys(s.spec?.selector ?? {}).length > 0)
      .map((s) => adjust(endpointSliceFor(s, pods.items)));
    if (slices.length > 0) await this.plane.apply(slices.map((s) => toYaml(s)).join('---\n'), 'endpointslice-controller');
    return slices;
  }

  /** The slices currently stored for a Service (for assertions and diagnostics). */
  async slicesOf(namespace: string, service: string): Promise<V1EndpointSlice[]> {
    const discovery = this.plane.kubeConfig().makeApiClient(DiscoveryV1Api);
    const list = await discovery.listNamespacedEndpointSlice({ namespace, labelSelector: `kubernetes.io/service-name=${service}` });
    return list.items;
  }
}
