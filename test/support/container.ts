// The project's container image, built and run by a real engine (rootful podman) as Kubernetes runs
// the chart's pod. `scripts/install-podman.mjs` installs the engine and builds (or reuses) the image;
// here we read its report, translate the chart's rendered pod spec into `podman run` flags, and run
// the container on a podman network of its own (198.19.255.0/24, a block pod-network.ts leaves
// free), where the host reaches it at its own address as a gateway reaches a pod, and it reaches
// the host's pod addresses (pod-network.ts) through the bridge.

import { mkdir, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { installerOutput } from './installer-output.js';
import { run, type RunResult } from './helm.js';
import { alive } from './pod-network.js';

export const CONTAINER_NETWORK = 'llm-extproc-e2e';
/** The tests' network: 198.19.255.0/24 (a benchmarking range, never routed). */
const CONTAINER_NET_PREFIX = '198.19.255.';
const CONTAINER_SUBNET = `${CONTAINER_NET_PREFIX}0/24`;
/** Label on every container the tests start: the pid of the test process that owns it. */
const OWNER_LABEL = 'llm-extproc.test.owner';

export type EngineReport =
  | { readonly available: false; readonly reason: string }
  | {
      readonly available: true;
      readonly env: Readonly<Record<string, string>>;
      readonly bases: ReadonlyArray<{ name: string; source: string }>;
    };

export interface ImageReport {
  readonly image: string;
  readonly built: boolean;
  readonly buildSeconds: number;
  readonly sizeBytes: number;
  readonly layers: ReadonlyArray<{ readonly bytes: number; readonly createdBy: string }>;
  readonly labels: Readonly<Record<string, string>>;
}

/** Whether this machine runs containers (podman installed, or installed now as root), and how. */
export async function containerEngine(): Promise<EngineReport> {
  return JSON.parse(await installerOutput('install-podman.mjs', ['--machine-only'])) as EngineReport;
}

/** The project's image for the current tree: built now, or reused when this exact context was built before. */
export async function projectImage(): Promise<ImageReport> {
  return JSON.parse(await installerOutput('install-podman.mjs')) as ImageReport;
}

/** podman with the installer's settings (CONTAINERS_CONF). A non-zero exit is a result, not an exception. */
export function podman(env: Readonly<Record<string, string>>, args: readonly string[]): Promise<RunResult> {
  return run('podman', args, { env: { ...process.env, ...env } });
}

/** Like podman(), but a non-zero exit throws with podman's output. */
export async function podmanOk(env: Readonly<Record<string, string>>, args: readonly string[]): Promise<string> {
  const res = await podman(env, args);
  if (res.code !== 0) throw new Error(`podman ${args.join(' ')} exited ${res.code}: ${res.stderr}${res.stdout}`);
  return res.stdout;
}

/** Creates the tests' podman network once, and removes containers left by test processes that died. */
export async function prepareContainerNetwork(env: Readonly<Record<string, string>>): Promise<void> {
  if ((await podman(env, ['network', 'exists', CONTAINER_NETWORK])).code !== 0) {
    const res = await podman(env, ['network', 'create', '--subnet', CONTAINER_SUBNET, CONTAINER_NETWORK]);
    // Another test process may have created it meanwhile.
    if (res.code !== 0 && (await podman(env, ['network', 'exists', CONTAINER_NETWORK])).code !== 0) {
      throw new Error(`podman network create ${CONTAINER_NETWORK}: ${res.stderr}`);
    }
  }
  const listed = await podmanOk(env, [
    'ps',
    '--all',
    '--filter',
    `label=${OWNER_LABEL}`,
    '--format',
    `{{.ID}} {{index .Labels "${OWNER_LABEL}"}}`,
  ]);
  for (const line of listed.split('\n').filter((l) => l.trim() !== '')) {
    const [id, owner] = line.split(' ');
    if (!alive(Number(owner))) await podman(env, ['rm', '--force', '--time', '0', id]);
  }
}

/** The parts of a rendered pod spec the translation reads. */
export interface PodSpec {
  readonly terminationGracePeriodSeconds?: number;
  readonly securityContext?: SecurityContext;
  readonly containers: readonly ContainerSpec[];
  readonly volumes?: ReadonlyArray<{
    readonly name: string;
    readonly configMap?: { readonly name: string };
    readonly emptyDir?: { readonly sizeLimit?: string; readonly medium?: string };
    readonly [source: string]: unknown;
  }>;
  readonly [field: string]: unknown;
}

interface SecurityContext {
  readonly runAsUser?: number;
  readonly runAsGroup?: number;
  readonly runAsNonRoot?: boolean;
  readonly readOnlyRootFilesystem?: boolean;
  readonly allowPrivilegeEscalation?: boolean;
  readonly capabilities?: { readonly drop?: readonly string[]; readonly add?: readonly string[] };
  readonly seccompProfile?: { readonly type: string };
  readonly fsGroup?: number;
}

export interface ContainerSpec {
  readonly name: string;
  readonly args?: readonly string[];
  readonly command?: readonly string[];
  readonly env?: ReadonlyArray<{ readonly name: string; readonly value?: string; readonly valueFrom?: unknown }>;
  readonly securityContext?: SecurityContext;
  readonly volumeMounts?: ReadonlyArray<{ readonly name: string; readonly mountPath: string; readonly readOnly?: boolean }>;
  readonly resources?: { readonly limits?: Readonly<Record<string, string>> };
  readonly readinessProbe?: { readonly httpGet?: { readonly path: string; readonly port: string | number } };
  readonly livenessProbe?: { readonly httpGet?: { readonly path: string; readonly port: string | number } };
  readonly [field: string]: unknown;
}

/**
 * Container fields that need no flag: the image (the test runs the one it built), scheduling and
 * probe settings (the test calls the probes' paths itself), ports (the container's own address
 * serves them, as a pod's does).
 */
const CONTAINER_FIELDS_WITHOUT_FLAG = new Set([
  'name',
  'image',
  'imagePullPolicy',
  'ports',
  'livenessProbe',
  'readinessProbe',
  'startupProbe',
]);
const MAPPED_CONTAINER_FIELDS = new Set(['args', 'command', 'env', 'securityContext', 'volumeMounts', 'resources']);

/** `512Mi` → `512m` (podman's binary units), `1Gi` → `1g`. */
function podmanSize(quantity: string): string {
  const m = /^(\d+)(Ki|Mi|Gi)?$/.exec(quantity);
  if (m === null) throw new Error(`cannot translate the quantity ${quantity} for podman`);
  return `${m[1]}${{ Ki: 'k', Mi: 'm', Gi: 'g' }[m[2] ?? ''] ?? 'b'}`;
}

/**
 * `podman run` flags that run `container` of `pod` as a kubelet would: its user and group, read-only
 * root, capabilities, no privilege escalation, seccomp (podman's default profile is the runtime
 * default), environment, memory limit, and each mount (ConfigMaps from `configMapDirs`, read-only;
 * emptyDirs as tmpfs of their size limit). A field the translation does not know fails it, so the
 * test never silently runs something other than what the chart renders.
 */
export function podmanRunFlags(
  pod: PodSpec,
  container: ContainerSpec,
  configMapDirs: ReadonlyMap<string, string>,
  podIP?: string,
): string[] {
  for (const field of Object.keys(container)) {
    if (!CONTAINER_FIELDS_WITHOUT_FLAG.has(field) && !MAPPED_CONTAINER_FIELDS.has(field)) {
      throw new Error(`the container e2e does not translate the container field ${field}`);
    }
  }
  const security = { ...pod.securityContext, ...container.securityContext };
  const flags: string[] = [];
  if (security.runAsUser !== undefined) flags.push('--user', `${security.runAsUser}:${security.runAsGroup ?? security.runAsUser}`);
  if (security.runAsNonRoot === true && (security.runAsUser ?? 0) === 0)
    throw new Error('runAsNonRoot without a non-zero runAsUser: the kubelet would refuse the pod');
  if (security.readOnlyRootFilesystem === true) flags.push('--read-only');
  if (security.allowPrivilegeEscalation === false) flags.push('--security-opt', 'no-new-privileges');
  for (const cap of security.capabilities?.drop ?? []) flags.push(`--cap-drop=${cap.toLowerCase()}`);
  for (const cap of security.capabilities?.add ?? []) flags.push(`--cap-add=${cap.toLowerCase()}`);
  if (security.seccompProfile !== undefined && security.seccompProfile.type !== 'RuntimeDefault') {
    throw new Error(`seccomp profile ${security.seccompProfile.type} is not translated`);
  }
  // As the kubelet does: the downward API's pod IP (the container then runs at that address), and
  // $(NAME) in a value expanded from the variables before it (an unknown name stays as written).
  const defined = new Map<string, string>();
  for (const e of container.env ?? []) {
    let value = e.value;
    if (value === undefined && fieldPath(e.valueFrom) === 'status.podIP') {
      if (podIP === undefined) throw new Error(`env ${e.name}: the pod IP is asked for; pass podIP`);
      if (!flags.includes('--ip')) flags.push('--ip', podIP);
      value = podIP;
    }
    if (value === undefined) throw new Error(`env ${e.name}: only literal values and status.podIP are translated`);
    value = value.replace(/\$\((\w+)\)/g, (ref, name: string) => defined.get(name) ?? ref);
    defined.set(e.name, value);
    flags.push('--env', `${e.name}=${value}`);
  }
  const memory = container.resources?.limits?.['memory'];
  if (memory !== undefined) flags.push('--memory', podmanSize(memory));
  for (const mount of container.volumeMounts ?? []) {
    const volume = pod.volumes?.find((v) => v.name === mount.name);
    if (volume?.configMap !== undefined) {
      const dir = configMapDirs.get(volume.configMap.name);
      if (dir === undefined) throw new Error(`no directory for ConfigMap ${volume.configMap.name}`);
      // ConfigMap volumes are always read-only in Kubernetes.
      flags.push('--volume', `${dir}:${mount.mountPath}:ro`);
    } else if (volume?.emptyDir !== undefined) {
      const size = volume.emptyDir.sizeLimit === undefined ? '' : `,size=${podmanSize(volume.emptyDir.sizeLimit)}`;
      flags.push('--tmpfs', `${mount.mountPath}:rw,mode=1777${size}`);
    } else {
      throw new Error(`volume ${mount.name}: only ConfigMap and emptyDir volumes are translated`);
    }
  }
  if (container.command !== undefined) flags.push('--entrypoint', JSON.stringify(container.command));
  return flags;
}

function fieldPath(valueFrom: unknown): unknown {
  const ref = (valueFrom as { fieldRef?: { fieldPath?: unknown } } | undefined)?.fieldRef;
  return ref?.fieldPath;
}

/**
 * An address on CONTAINER_NETWORK for this test process's container (the pod IP a kubelet would
 * give it): one per process, so test files running side by side do not take the same one.
 */
export function podIpForThisProcess(): string {
  return `${CONTAINER_NET_PREFIX}${10 + (process.pid % 240)}`;
}

/** Writes a ConfigMap's data as the kubelet projects it: one file per key. */
export async function writeConfigMap(dir: string, data: Readonly<Record<string, string>>): Promise<string> {
  await mkdir(dir, { recursive: true, mode: 0o755 });
  for (const [key, value] of Object.entries(data)) await writeFile(join(dir, key), value, { mode: 0o644 });
  return dir;
}

export interface RunningContainer {
  readonly id: string;
  /** The container's address on CONTAINER_NETWORK. */
  readonly ip: string;
  /** The container's main process as the host sees it (for /proc/<pid>/status). */
  readonly hostPid: number;
}

/** `podman run -d` on the tests' network, labelled with our pid; returns its id, address and host pid. */
export async function runContainer(
  env: Readonly<Record<string, string>>,
  image: string,
  flags: readonly string[],
  args: readonly string[],
): Promise<RunningContainer> {
  const id = (
    await podmanOk(env, [
      'run',
      '--detach',
      '--network',
      CONTAINER_NETWORK,
      '--label',
      `${OWNER_LABEL}=${process.pid}`,
      ...flags,
      image,
      ...args,
    ])
  ).trim();
  const ip = (
    await podmanOk(env, ['inspect', '--format', `{{(index .NetworkSettings.Networks "${CONTAINER_NETWORK}").IPAddress}}`, id])
  ).trim();
  const hostPid = Number((await podmanOk(env, ['inspect', '--format', '{{.State.Pid}}', id])).trim());
  return { id, ip, hostPid };
}
