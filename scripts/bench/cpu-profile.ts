// Summarises a V8 .cpuprofile (what `node --cpu-prof` writes): self time per function and per
// code area (our source, grpc-js, protobufjs, ...). Pure: parsed JSON in, rows out. Idle time is
// left out so the shares are of the time the server was actually working.

interface CallFrame {
  readonly functionName: string;
  readonly url: string;
  readonly lineNumber: number;
}

interface ProfileNode {
  readonly id: number;
  readonly callFrame: CallFrame;
}

export interface CpuProfile {
  readonly nodes: readonly ProfileNode[];
  readonly samples: readonly number[];
  readonly timeDeltas: readonly number[];
}

export interface ProfileRow {
  readonly name: string;
  readonly selfMs: number;
  /** Share of non-idle sampled time, 0..1. */
  readonly share: number;
}

export interface ProfileSummary {
  readonly busyMs: number;
  readonly functions: readonly ProfileRow[];
  readonly areas: readonly ProfileRow[];
}

export function isCpuProfile(value: unknown): value is CpuProfile {
  const v = value as Partial<CpuProfile> | null;
  return typeof v === 'object' && v !== null && Array.isArray(v.nodes) && Array.isArray(v.samples) && Array.isArray(v.timeDeltas);
}

/** Which part of the program a frame belongs to, from its script URL. */
export function codeArea(frame: CallFrame): string {
  const url = frame.url;
  if (url === '') return frame.functionName.startsWith('(') ? frame.functionName : '(native/builtin)';
  const pkg = /node_modules\/((?:@[^/]+\/)?[^/]+)\//.exec(url);
  if (pkg !== null) return pkg[1];
  // node:internal/http2/core → node:internal/http2; node:events → node:events
  if (url.startsWith('node:')) return url.split('/').slice(0, 2).join('/');
  const ours = /\/dist\/(src\/[^/]+)\//.exec(url);
  if (ours !== null) return `llm-extproc ${ours[1]}`;
  return url;
}

function frameName(frame: CallFrame): string {
  const file =
    frame.url === ''
      ? ''
      : ` ${frame.url
          .replace(/^.*node_modules\//, '')
          .replace(/^file:\/\/.*\/dist\//, '')
          .replace(/^node:/, 'node:')}:${frame.lineNumber + 1}`;
  return `${frame.functionName || '(anonymous)'}${file}`;
}

function top(totals: Map<string, number>, busy: number, limit: number): ProfileRow[] {
  return [...totals.entries()]
    .sort((a, b) => b[1] - a[1])
    .slice(0, limit)
    .map(([name, us]) => ({ name, selfMs: us / 1000, share: busy === 0 ? 0 : us / busy }));
}

export function summarizeProfile(profile: CpuProfile, limit = 15): ProfileSummary {
  const byId = new Map(profile.nodes.map((n) => [n.id, n.callFrame]));
  const fns = new Map<string, number>();
  const areas = new Map<string, number>();
  let busy = 0;
  for (let i = 0; i < profile.samples.length; i++) {
    const frame = byId.get(profile.samples[i]);
    // timeDeltas[i] is the time since the previous sample: the best per-sample weight available.
    const us = profile.timeDeltas[i] ?? 0;
    if (frame === undefined || frame.functionName === '(idle)') continue;
    busy += us;
    const name = frameName(frame);
    fns.set(name, (fns.get(name) ?? 0) + us);
    const area = codeArea(frame);
    areas.set(area, (areas.get(area) ?? 0) + us);
  }
  return { busyMs: busy / 1000, functions: top(fns, busy, limit), areas: top(areas, busy, limit) };
}
