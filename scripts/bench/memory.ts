// The memory table of `npm run bench`: resident set, heap in use after a full GC and memory outside
// the heap, for every llm-extproc process and a bare Node process of the same run, at three
// points — idle after start, after the request and stream load, after the long-prompt rows.
// Pure: probe lines and samples in, Markdown out (the probe is memory-probe.ts).

export type MemoryPoint = 'idle' | 'load' | 'long';

export interface MemorySample {
  /** Resident set of the process tree as the kernel counts it, before any forced GC. */
  readonly rssBytes: number;
  /** V8 heap in use after two full GCs (absent for a process tree the probe cannot speak for: cluster workers). */
  readonly heapUsedBytes: number | undefined;
  /** Memory outside the V8 heap held by JS objects (Buffers), after the same GCs. */
  readonly externalBytes: number | undefined;
}

export interface ProbeReading {
  readonly rssBytes: number;
  readonly heapUsedBytes: number;
  readonly externalBytes: number;
}

/** The probe's line (`memory-probe {json}`), or undefined when it is not one. */
export function parseProbeLine(line: string): ProbeReading | undefined {
  const m = /^memory-probe (\{.*\})$/.exec(line.trim());
  if (m === null) return undefined;
  const parsed = JSON.parse(m[1]) as Partial<Record<keyof ProbeReading, unknown>>;
  const { rssBytes, heapUsedBytes, externalBytes } = parsed;
  if (typeof rssBytes !== 'number' || typeof heapUsedBytes !== 'number' || typeof externalBytes !== 'number') return undefined;
  return { rssBytes, heapUsedBytes, externalBytes };
}

export interface MemoryRow {
  readonly label: string;
  readonly samples: Partial<Record<MemoryPoint, MemorySample>>;
  /** Peak resident set over the run (VmHWM), when read. */
  readonly peakBytes: number | undefined;
  /** Whether the issue's RSS targets apply to this row (the default server, in both body modes). */
  readonly targeted: boolean;
}

/** RSS ceilings per point (issue 34), on this 2-vCPU reference machine. */
export const RSS_TARGET_BYTES: Readonly<Record<MemoryPoint, number>> = {
  idle: 65 * 1024 * 1024,
  load: 75 * 1024 * 1024,
  long: 95 * 1024 * 1024,
};

const POINT_NAMES: Readonly<Record<MemoryPoint, string>> = {
  idle: 'idle after start',
  load: 'after the request and stream load',
  long: 'after the long-prompt rows',
};

const mib = (bytes: number | undefined): string => (bytes === undefined || !Number.isFinite(bytes) ? '–' : (bytes / 1048576).toFixed(1));

export function renderMemoryTable(
  rows: readonly MemoryRow[],
  points: readonly MemoryPoint[],
  command: string,
  nodeOptions: string,
): string {
  const header = ['process'];
  for (const point of points) header.push(`RSS ${point} MiB`, 'heap after GC', 'external');
  header.push('peak RSS MiB');
  const body = rows.map((row) => {
    const cells = [row.label];
    for (const point of points) {
      const s = row.samples[point];
      const over = row.targeted && s !== undefined && s.rssBytes > RSS_TARGET_BYTES[point];
      cells.push(s === undefined ? '–' : `${mib(s.rssBytes)}${over ? ' (over)' : ''}`, mib(s?.heapUsedBytes), mib(s?.externalBytes));
    }
    cells.push(mib(row.peakBytes));
    return cells;
  });
  const line = (cells: readonly string[]): string => `| ${cells.join(' | ')} |`;
  const targets = points.map((p) => `≤ ${RSS_TARGET_BYTES[p] / 1048576} MiB ${POINT_NAMES[p]}`).join(', ');
  const verdicts = rows
    .filter((row) => row.targeted)
    .map((row) => {
      const missed = points.filter((p) => (row.samples[p]?.rssBytes ?? 0) > RSS_TARGET_BYTES[p]);
      return `${row.label}: ${missed.length === 0 ? 'met' : `not met (${missed.map((p) => POINT_NAMES[p]).join(', ')})`}`;
    });
  return [
    `Command: \`${command}\`. MiB = 2²⁰ bytes. RSS is the process's resident set (\`/proc/<pid>/status\` VmRSS; a cluster primary with its workers) read as it was; "heap after GC" and "external" are \`process.memoryUsage()\` after two full garbage collections, which a preload of the bench asks for (\`scripts/bench/memory-probe.ts\`, \`--expose-gc\`), run after the RSS was read.`,
    `Every process ran with ${nodeOptions === '' ? 'no NODE_OPTIONS' : `NODE_OPTIONS \`${nodeOptions}\``} (by default the Helm chart's \`nodeOptions\`, as its pods run; \`--node-options\` sets others). The bare-Node row is an empty script with the same preload: Node's own floor on this machine. Targets (RSS of the default server, both body modes): ${targets}. ${verdicts.join('; ')}.`,
    '',
    line(header),
    line(header.map((_, i) => (i === 0 ? '---' : '---:'))),
    ...body.map(line),
  ].join('\n');
}
