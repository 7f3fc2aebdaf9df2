// The NODE_OPTIONS a pod of the Helm chart runs llm-extproc with (charts/llm-extproc/values.yaml,
// `nodeOptions`). The benches run llm-extproc with them so that their memory and CPU figures are a
// deployment's: the heap limit there (--max-old-space-size) is read only when the process starts,
// and it changes how V8 grows the old generation (below 256 MiB or so of room V8 grows it by
// 2 MiB steps instead of 8). A pod without the chart's setting gets much the same from Node, which
// sizes the heap from the container's memory limit (a 256 MiB cgroup gives a 268 MiB heap limit).
// On a machine without a memory limit V8 sizes it from the machine's memory instead, and grows the
// heap as no pod of the chart does.

import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { parse as parseYaml } from 'yaml';

/** The chart's `nodeOptions`, split into flags (empty when the chart sets none). */
export function chartNodeOptions(root: string): string[] {
  const values = parseYaml(readFileSync(join(root, 'charts', 'llm-extproc', 'values.yaml'), 'utf8')) as { nodeOptions?: unknown };
  return typeof values.nodeOptions === 'string' ? values.nodeOptions.split(/\s+/).filter((o) => o !== '') : [];
}
