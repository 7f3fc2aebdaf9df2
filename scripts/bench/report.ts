// Renders benchmark results as Markdown. Pure: results in, text out. Differences are always
// against the baseline (Envoy without ext_proc) measured in the same run.

import { histogramQuantile, summarize } from './stats.js';
import type { HistogramSnapshot, Summary } from './stats.js';
import type { ServerPhaseStats } from './server-stats.js';

export type SetupKey =
  | 'baseline'
  | 'tcp'
  | 'tcp-compare'
  | 'grpcjs'
  | 'uds'
  | 'workers'
  | 'duplex'
  | 'duplex-compare'
  | 'tls'
  | 'flow'
  | 'traced'
  | 'external'
  | 'external-duplex';

export const SETUP_LABELS: Readonly<Record<SetupKey, string>> = {
  baseline: 'baseline (Envoy, no ext_proc)',
  tcp: 'llm-extproc, TCP loopback',
  'tcp-compare': 'llm-extproc (--compare-server build), TCP loopback',
  grpcjs: 'llm-extproc on grpc-js, TCP loopback',
  uds: 'llm-extproc, Unix socket',
  workers: 'llm-extproc workers, Unix socket',
  duplex: 'llm-extproc, TCP, FULL_DUPLEX_STREAMED',
  'duplex-compare': 'llm-extproc (--compare-server build), TCP, FULL_DUPLEX_STREAMED',
  tls: 'llm-extproc, TCP + TLS',
  flow: 'llm-extproc, TCP, flow control on (never saturated)',
  traced: 'llm-extproc, TCP, tracing at 100% sampling (OTLP)',
  external: 'another ext_proc server (--external-extproc), TCP loopback',
  'external-duplex': 'another ext_proc server (--external-extproc), TCP, FULL_DUPLEX_STREAMED',
};

export interface CpuUse {
  /** CPU seconds used during the measured phases. */
  readonly envoySeconds: number;
  /** Absent for the baseline. */
  readonly serverSeconds: number | undefined;
}

export interface RequestPhase {
  readonly latenciesMs: number[];
  wallMs: number;
  errors: number;
  firstError: string | undefined;
  cpu: CpuUse;
  /** Event-loop delay and GC inside llm-extproc during the phase (absent for the baseline). */
  server: ServerPhaseStats | undefined;
}

export interface StreamPhase {
  readonly ttfbMs: number[];
  readonly totalMs: number[];
  readonly eventLatencyMs: number[];
  readonly interArrivalMs: number[];
  streams: number;
  wallMs: number;
  errors: number;
  firstError: string | undefined;
  cpu: CpuUse;
  server: ServerPhaseStats | undefined;
}

export interface SetupResults {
  readonly key: SetupKey;
  /** By concurrency. */
  readonly requests: Map<number, RequestPhase>;
  readonly streams: Map<number, StreamPhase>;
  /** Server-side `llm_extproc_message_processing_seconds` observed during the measured phases, by message. */
  messages: Map<string, HistogramSnapshot> | undefined;
  /** Envoy's view of the ext_proc side streams over the whole run (warm-up included). */
  sideStreams: SideStreamStats | undefined;
  /** Peak resident memory (VmHWM) over the run; llm-extproc's sums its cluster workers. */
  peakRss: { envoyBytes: number; serverBytes: number | undefined } | undefined;
}

export interface SideStreamStats {
  readonly started: number;
  readonly failed: number;
  /** RST_STREAMs Envoy sent on the ext_proc connection (`cluster.llm_extproc.http2.tx_reset`). */
  readonly resetsSent: number;
  /** GOAWAYs Envoy received from llm-extproc (`cluster.llm_extproc.upstream_cx_close_notify`). */
  readonly goawaysReceived: number;
  readonly connections: number;
}

export interface RunInfo {
  readonly date: string;
  readonly command: string;
  readonly cpus: number;
  readonly cpuModel: string;
  readonly kernel: string;
  readonly node: string;
  readonly envoy: string;
  readonly requestBytes: number;
  readonly responseBytes: number;
  readonly events: number;
  readonly eventDelayMs: number;
  readonly rounds: number;
  /** llm-extproc workers in the `workers` setup. */
  readonly workers: number;
  readonly envoyConcurrency: number;
}

const ms = (v: number): string => (Number.isFinite(v) ? v.toFixed(3) : '–');
const us = (v: number): string => (Number.isFinite(v) ? Math.round(v).toString() : '–');
const signedUs = (v: number): string => (Number.isFinite(v) ? `${v >= 0 ? '+' : '−'}${Math.abs(Math.round(v))}` : '–');

function table(header: readonly string[], rows: readonly (readonly string[])[]): string {
  const line = (cells: readonly string[]): string => `| ${cells.join(' | ')} |`;
  return [line(header), line(header.map((_, i) => (i === 0 ? '---' : '---:'))), ...rows.map(line)].join('\n');
}

function cpuPer(seconds: number | undefined, units: number): string {
  return seconds === undefined || units === 0 ? '–' : us((seconds * 1e6) / units);
}

export function renderReport(info: RunInfo, results: readonly SetupResults[]): string {
  const baseline = results.find((r) => r.key === 'baseline');
  const out: string[] = [];

  out.push(
    `Run ${info.date}: ${info.cpus} vCPU (${info.cpuModel}), Linux ${info.kernel}, Node ${info.node}, Envoy ${info.envoy}.`,
    `Command: \`${info.command}\`. Measured phases were interleaved over ${info.rounds} rounds (setup order rotated each round) after a warm-up.`,
    `Every Envoy ran ${info.envoyConcurrency} worker thread(s); "${SETUP_LABELS.workers}" is llm-extproc with --workers ${info.workers}.`,
    '',
  );
  out.push(renderGoals(results), '');

  // ── non-streaming ──
  out.push(`#### Non-streaming chat completion (${info.requestBytes} B request, ${info.responseBytes} B JSON answer)`, '');
  const reqRows: string[][] = [];
  for (const r of results) {
    for (const [c, phase] of [...r.requests.entries()].sort((a, b) => a[0] - b[0])) {
      const s = summarize(phase.latenciesMs);
      const base = baseline?.requests.get(c);
      const b: Summary | undefined = base === undefined ? undefined : summarize(base.latenciesMs);
      const n = phase.latenciesMs.length;
      reqRows.push([
        SETUP_LABELS[r.key],
        String(c),
        String(n),
        ms(s.p50),
        ms(s.p90),
        ms(s.p99),
        ms(s.mean),
        phase.wallMs > 0 ? Math.round((n * 1000) / phase.wallMs).toString() : '–',
        r.key === 'baseline' || b === undefined ? '' : signedUs((s.p50 - b.p50) * 1000),
        r.key === 'baseline' || b === undefined ? '' : signedUs((s.mean - b.mean) * 1000),
        cpuPer(phase.cpu.envoySeconds, n),
        cpuPer(phase.cpu.serverSeconds, n),
        base === undefined || phase.cpu.serverSeconds === undefined || base.cpu.envoySeconds <= 0
          ? '–'
          : ratio(phase.cpu.serverSeconds / n / (base.cpu.envoySeconds / base.latenciesMs.length)),
        cores(phase.cpu.envoySeconds, phase.wallMs),
        cores(phase.cpu.serverSeconds, phase.wallMs),
        String(phase.errors),
      ]);
    }
  }
  out.push(
    table(
      [
        'setup',
        'conc.',
        'requests',
        'p50 ms',
        'p90 ms',
        'p99 ms',
        'mean ms',
        'req/s',
        'Δp50 µs',
        'Δmean µs',
        'Envoy CPU µs/req',
        'llm-extproc CPU µs/req',
        'llm-extproc CPU ÷ Envoy-alone CPU',
        'Envoy cores busy',
        'llm-extproc cores busy',
        'errors',
      ],
      reqRows,
    ),
    '',
  );

  // ── streaming ──
  out.push(
    `#### Streaming chat completion (${info.events} SSE events + \`[DONE]\`, ${info.eventDelayMs} ms apart at the model server)`,
    '',
  );
  const streamRows: string[][] = [];
  const overheadRows: string[][] = [];
  for (const r of results) {
    for (const [c, phase] of [...r.streams.entries()].sort((a, b) => a[0] - b[0])) {
      const ttfb = summarize(phase.ttfbMs);
      const total = summarize(phase.totalMs);
      const ev = summarize(phase.eventLatencyMs);
      const gap = summarize(phase.interArrivalMs);
      streamRows.push([
        SETUP_LABELS[r.key],
        String(c),
        String(phase.streams),
        ms(ttfb.p50),
        ms(ttfb.p99),
        ms(ev.p50),
        ms(ev.p90),
        ms(ev.p99),
        ms(ev.p999),
        ms(gap.p50),
        ms(gap.p99),
        ms(total.p50),
        String(phase.errors),
      ]);
      const base = baseline?.streams.get(c);
      if (r.key === 'baseline' || base === undefined) continue;
      const bTtfb = summarize(base.ttfbMs);
      const bTotal = summarize(base.totalMs);
      const bEv = summarize(base.eventLatencyMs);
      const chunks = info.events + 1;
      overheadRows.push([
        SETUP_LABELS[r.key],
        String(c),
        signedUs((ttfb.p50 - bTtfb.p50) * 1000),
        signedUs((ev.p50 - bEv.p50) * 1000),
        signedUs((ev.p99 - bEv.p99) * 1000),
        signedUs(((total.p50 - bTotal.p50) * 1000) / info.events),
        signedUs(((total.p50 - bTotal.p50 - (ttfb.p50 - bTtfb.p50)) * 1000) / info.events),
        // Envoy's CPU per stream with ext_proc minus without, spread over the stream's chunks.
        signedUs(
          ((phase.cpu.envoySeconds / Math.max(1, phase.streams) - base.cpu.envoySeconds / Math.max(1, base.streams)) * 1e6) / chunks,
        ),
        cpuPer(phase.cpu.serverSeconds, phase.streams * chunks),
      ]);
    }
  }
  out.push(
    table(
      [
        'setup',
        'conc.',
        'streams',
        'TTFB p50 ms',
        'TTFB p99 ms',
        'event latency p50 ms',
        'p90 ms',
        'p99 ms',
        'p99.9 ms',
        'inter-arrival p50 ms',
        'p99 ms',
        'stream total p50 ms',
        'errors',
      ],
      streamRows,
    ),
    '',
    'Added by ext_proc (vs the baseline at the same concurrency):',
    '',
    table(
      [
        'setup',
        'conc.',
        'ΔTTFB p50 µs',
        'per chunk: Δevent latency p50 µs',
        'Δevent latency p99 µs',
        'Δtotal p50 / events µs',
        '(Δtotal − ΔTTFB) p50 / events µs',
        'extra Envoy CPU µs/chunk',
        'llm-extproc CPU µs/chunk',
      ],
      overheadRows,
    ),
    '',
  );

  out.push(renderTail(results), '', renderMemory(results), '');

  // ── server-side processing ──
  const msgRows: string[][] = [];
  for (const r of results) {
    if (r.messages === undefined) continue;
    for (const [message, h] of [...r.messages.entries()].sort((a, b) => a[0].localeCompare(b[0]))) {
      if (h.count <= 0) continue;
      // Interpolating inside the first bucket would invent a value: say "below its bound" instead.
      const firstBound = h.buckets[0]?.le ?? 0;
      const estimate = (q: number): string => {
        const { value, aboveTop } = histogramQuantile(h, q);
        if (aboveTop) return `>${us(value * 1e6)}`;
        return value <= firstBound ? `≤${us(firstBound * 1e6)}` : `≈${us(value * 1e6)}`;
      };
      msgRows.push([SETUP_LABELS[r.key], message, String(h.count), us((h.sum / h.count) * 1e6), estimate(0.5), estimate(0.99)]);
    }
  }
  const sideRows = results.flatMap((r) =>
    r.sideStreams === undefined
      ? []
      : [
          [
            SETUP_LABELS[r.key],
            String(r.sideStreams.started),
            String(r.sideStreams.failed),
            String(r.sideStreams.resetsSent),
            String(r.sideStreams.goawaysReceived),
            String(r.sideStreams.connections),
          ],
        ],
  );
  if (sideRows.length > 0) {
    out.push(
      '#### ext_proc side streams as Envoy saw them (whole run, warm-up included)',
      '',
      table(
        ['setup', 'streams started', 'streams failed', 'RST_STREAM sent by Envoy', 'GOAWAY from llm-extproc', 'connections opened'],
        sideRows,
      ),
      '',
    );
  }
  out.push(
    '#### Time inside llm-extproc per ext_proc message (`llm_extproc_message_processing_seconds`, all measured phases)',
    '',
    table(['setup', 'message', 'count', 'mean µs', 'p50 µs', 'p99 µs'], msgRows),
  );
  return out.join('\n');
}

const ratio = (v: number): string => (Number.isFinite(v) ? `${v.toFixed(2)}×` : '–');

function cores(seconds: number | undefined, wallMs: number): string {
  return seconds === undefined || wallMs <= 0 ? '–' : ((seconds * 1000) / wallMs).toFixed(2);
}

/** A quantile in ms from one of the server's histograms ("≤" the first bound when below it). */
function quantileMs(h: HistogramSnapshot | undefined, q: number): string {
  if (h === undefined || h.count <= 0) return '–';
  const { value, aboveTop } = histogramQuantile(h, q);
  const firstBound = h.buckets[0]?.le ?? 0;
  if (aboveTop) return `>${ms(value * 1000)}`;
  return value <= firstBound ? `≤${ms(firstBound * 1000)}` : ms(value * 1000);
}

/** GC pause time as a share of the phase's wall time. */
function gcShare(server: ServerPhaseStats | undefined, wallMs: number): string {
  return server === undefined || wallMs <= 0 ? '–' : `${((server.gcSeconds * 1000 * 100) / wallMs).toFixed(1)} %`;
}

/** Per-chunk tail against Envoy alone, next to what llm-extproc's event loop and GC did meanwhile. */
function renderTail(results: readonly SetupResults[]): string {
  const baseline = results.find((r) => r.key === 'baseline');
  const rows: string[][] = [];
  for (const r of results) {
    if (r.key === 'baseline') continue;
    for (const [c, phase] of [...r.streams.entries()].sort((a, b) => a[0] - b[0])) {
      const ev = summarize(phase.eventLatencyMs);
      const base = baseline?.streams.get(c);
      const b = base === undefined ? undefined : summarize(base.eventLatencyMs);
      rows.push([
        SETUP_LABELS[r.key],
        `${c} streams`,
        ms(ev.p99),
        b === undefined ? '–' : ratio(ev.p99 / b.p99),
        ms(ev.p999),
        b === undefined ? '–' : ratio(ev.p999 / b.p999),
        quantileMs(phase.server?.turnaround, 0.5),
        quantileMs(phase.server?.turnaround, 0.99),
        quantileMs(phase.server?.loop, 0.99),
        quantileMs(phase.server?.loop, 0.999),
        gcShare(phase.server, phase.wallMs),
        cores(phase.cpu.serverSeconds, phase.wallMs),
      ]);
    }
    for (const [c, phase] of [...r.requests.entries()].sort((a, b) => a[0] - b[0])) {
      rows.push([
        SETUP_LABELS[r.key],
        `${c} requests`,
        '',
        '',
        '',
        '',
        quantileMs(phase.server?.turnaround, 0.5),
        quantileMs(phase.server?.turnaround, 0.99),
        quantileMs(phase.server?.loop, 0.99),
        quantileMs(phase.server?.loop, 0.999),
        gcShare(phase.server, phase.wallMs),
        cores(phase.cpu.serverSeconds, phase.wallMs),
      ]);
    }
  }
  return [
    '#### Per-chunk tail against Envoy alone, and what happened inside llm-extproc in the same phases',
    '',
    '*Inside llm-extproc* is `llm_extproc_message_turnaround_seconds`: from the read callback that brought an ext_proc message to the socket write of its reply, over every reply of the phase (routing and health replies included; a lower bound of our share of the round trip; `–` on the transports that do not report it).',
    '',
    table(
      [
        'setup',
        'load',
        'chunk p99 ms',
        '÷ Envoy alone',
        'chunk p99.9 ms',
        '÷ Envoy alone',
        'inside llm-extproc p50 ms',
        'p99 ms',
        'event-loop delay p99 ms',
        'p99.9 ms',
        'GC pauses (share of wall time)',
        'llm-extproc cores busy',
      ],
      rows,
    ),
  ].join('\n');
}

function renderMemory(results: readonly SetupResults[]): string {
  const mb = (bytes: number | undefined): string => (bytes === undefined ? '–' : (bytes / 1024 / 1024).toFixed(0));
  const rows = results.map((r) => [SETUP_LABELS[r.key], mb(r.peakRss?.envoyBytes), mb(r.peakRss?.serverBytes)]);
  return [
    '#### Peak resident memory over the whole run (VmHWM; llm-extproc workers summed with their primary)',
    '',
    table(['setup', 'Envoy MB', 'llm-extproc MB'], rows),
  ].join('\n');
}

/** A ratio against the ≤ 1.5× target; '–' when it was not measured (an external server's CPU). */
function verdict(value: number): string {
  return Number.isFinite(value) ? `${ratio(value)} ${value <= 1.5 ? '(met)' : '(not met)'}` : '–';
}

/** The targets, as ratios to Envoy alone measured in the same run. */
function renderGoals(results: readonly SetupResults[]): string {
  const baseline = results.find((r) => r.key === 'baseline');
  const rows: string[][] = [];
  for (const r of results) {
    if (r.key === 'baseline' || baseline === undefined) continue;
    const s8 = r.streams.get(8);
    const b8 = baseline.streams.get(8);
    const q16 = r.requests.get(16);
    const b16 = baseline.requests.get(16);
    const chunkRatio =
      s8 === undefined || b8 === undefined ? Number.NaN : summarize(s8.eventLatencyMs).p99 / summarize(b8.eventLatencyMs).p99;
    const cpuRatio =
      q16 === undefined || b16 === undefined || q16.cpu.serverSeconds === undefined
        ? Number.NaN
        : q16.cpu.serverSeconds / q16.latenciesMs.length / (b16.cpu.envoySeconds / b16.latenciesMs.length);
    const failed = [...r.requests.values(), ...r.streams.values()].reduce((n, p) => n + p.errors, 0);
    rows.push([
      SETUP_LABELS[r.key],
      verdict(chunkRatio),
      verdict(cpuRatio),
      q16 === undefined ? '–' : cores(q16.cpu.serverSeconds, q16.wallMs),
      String(failed),
    ]);
  }
  return [
    '#### Targets (ratios to Envoy alone in this run)',
    '',
    table(
      [
        'setup',
        'chunk p99 at 8 streams ÷ Envoy alone (target ≤ 1.5×)',
        'llm-extproc CPU per request at 16 ÷ Envoy-alone CPU per request (target ≤ 1.5×)',
        'llm-extproc cores busy at 16',
        'failed requests',
      ],
      rows,
    ),
  ].join('\n');
}
