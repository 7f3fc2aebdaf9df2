// The example manifests of docs/install.md (docs/install/), read as objects: the live gateway beds
// apply them as a user would (changing only the Gateway's listener port to a free one), and
// test/e2e/install-guide.test.ts applies every one to a real kube-apiserver. One source, so the
// guide cannot drift from what the suite runs.

import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { repoRoot } from '../../scripts/repo-root.js';
import { parseManifests, type K8sObject } from './helm.js';

export const INSTALL_GUIDE_DIR = join(repoRoot(), 'docs', 'install');

/** The objects of one of the guide's files (path relative to docs/install/). */
export function guideManifests(file: string): K8sObject[] {
  return parseManifests(readFileSync(join(INSTALL_GUIDE_DIR, file), 'utf8'));
}

/** The one object of `kind` in `objects`; throws when there is none or several. */
export function guideObject<T extends K8sObject = K8sObject>(objects: readonly K8sObject[], kind: string): T {
  const found = objects.filter((o) => o.kind === kind);
  if (found.length !== 1) throw new Error(`the install guide's file has ${found.length} ${kind} objects, expected one`);
  return found[0] as T;
}

/** The objects with every Gateway listener on `port` (a test binds a free port, not 80). */
export function withListenerPort(objects: readonly K8sObject[], port: number): K8sObject[] {
  return objects.map((o) => {
    if (o.kind !== 'Gateway') return o;
    const spec = o['spec'] as { listeners: Array<Record<string, unknown>> };
    return { ...o, spec: { ...spec, listeners: spec.listeners.map((l) => ({ ...l, port })) } };
  });
}
