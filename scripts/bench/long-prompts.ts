// The long-prompt rows of `npm run bench`: chat requests whose context is 32 KiB, 256 KiB and
// 1 MiB, one at a time, through every setup of the run. Users of other pickers report time to
// first token and CPU growing with context length; these rows say what a long body costs us:
// latency added to Envoy alone, and CPU per request in llm-extproc and in Envoy.
// Pure apart from the body builder's output: results in, Markdown out.

import { summarize } from './stats.js';
import type { CpuUse } from './report.js';

export const LONG_PROMPT_BYTES: readonly number[] = [32 * 1024, 256 * 1024, 1024 * 1024];

/** Sentences of varied words, so the context is not one repeated token (escapes included, as real documents have). */
const SENTENCES = [
  'The quarterly report shows revenue growth in every region except the north-east.',
  'Section 4.2 describes how the "retry budget" is shared between callers.\n',
  'Operators should rotate the credentials at least every ninety days; see appendix C.',
  'A tab-separated table follows:\tregion\tunits\tprice\n',
  'Nothing in this paragraph is load-bearing, but it is long enough to matter for caching.',
  'Überprüfen Sie die Konfiguration, bevor Sie den Dienst neu starten — 設定を確認してください。',
];

/**
 * A chat request of about `bytes` bytes: a system prompt, a user turn carrying a long document,
 * the assistant's acknowledgement and the new question, as a retrieval-augmented chat sends it.
 */
export function longPromptBody(model: string, bytes: number): Buffer {
  const shell = (document: string): string =>
    JSON.stringify({
      model,
      messages: [
        { role: 'system', content: 'You are a careful analyst. Answer from the document only.' },
        { role: 'user', content: `Here is the document:\n${document}` },
        { role: 'assistant', content: 'I have read the document. What would you like to know?' },
        { role: 'user', content: 'Summarise the risks it mentions in three bullet points.' },
      ],
      max_tokens: 32,
    });
  const parts: string[] = [];
  let length = 0;
  // The serialised size of the document grows with escapes and multi-byte characters: measure the
  // whole body and stop at the first sentence that reaches the target.
  const overhead = Buffer.byteLength(shell(''));
  for (let i = 0; length + overhead < bytes; i++) {
    const sentence = `${SENTENCES[i % SENTENCES.length]} (${i}) `;
    parts.push(sentence);
    length += Buffer.byteLength(JSON.stringify(sentence)) - 2;
  }
  return Buffer.from(shell(parts.join('')));
}

export interface LongPromptPhase {
  readonly latenciesMs: number[];
  errors: number;
  firstError: string | undefined;
  cpu: CpuUse;
}

export interface LongPromptResults {
  /** Setup label → body size → phase. */
  readonly bySetup: ReadonlyMap<string, ReadonlyMap<number, LongPromptPhase>>;
  readonly baselineLabel: string;
  /** The setup whose latency is the floor of an ext_proc hop (the do-nothing Go server), BUFFERED, when measured. */
  readonly floorLabel: string | undefined;
  /** The same floor under FULL_DUPLEX_STREAMED, when measured. */
  readonly floorDuplexLabel: string | undefined;
  /** Setups in FULL_DUPLEX_STREAMED: compared with the duplex floor. */
  readonly duplexLabels: ReadonlySet<string>;
  readonly command: string;
  /** When and where: date, CPUs, Node and Envoy versions. */
  readonly machine: string;
  readonly requestsPerSize: number;
}

const size = (bytes: number): string => (bytes >= 1024 * 1024 ? `${bytes / (1024 * 1024)} MiB` : `${bytes / 1024} KiB`);
const ms = (v: number): string => (Number.isFinite(v) ? v.toFixed(2) : '–');
const signedMs = (v: number): string => (Number.isFinite(v) ? `${v >= 0 ? '+' : '−'}${Math.abs(v).toFixed(2)}` : '–');
/** The tail of the added latency against its median; blank when the median is noise (≤ 0). */
const tailRatio = (p90: number, p50: number): string =>
  Number.isFinite(p90) && Number.isFinite(p50) && p50 > 0 ? `${(Math.max(0, p90) / p50).toFixed(2)}×` : '';
const perRequestMs = (seconds: number | undefined, n: number): string =>
  seconds === undefined || n === 0 ? '–' : ((seconds * 1000) / n).toFixed(2);

export function renderLongPromptReport(r: LongPromptResults): string {
  const header = [
    'setup',
    'body',
    'n',
    'p50 ms',
    'p90 ms',
    'p99 ms',
    'added p50 ms',
    'added p90 ms',
    'added p90 ÷ added p50 (target ≤ 1.5×)',
    'added mean ms',
    'added p50 vs floor',
    'Envoy CPU ms/req',
    'ext_proc CPU ms/req',
  ];
  const rows: string[][] = [];
  const base = r.bySetup.get(r.baselineLabel);
  for (const bytes of LONG_PROMPT_BYTES) {
    const b = base?.get(bytes);
    const bs = b === undefined ? undefined : summarize(b.latenciesMs);
    /** The floor's added p50 at this size in the body mode of `label`. */
    const floorAdded = (label: string): number | undefined => {
      const floorLabel = r.duplexLabels.has(label) ? r.floorDuplexLabel : r.floorLabel;
      const f = floorLabel === undefined ? undefined : r.bySetup.get(floorLabel)?.get(bytes);
      return f === undefined || bs === undefined ? undefined : summarize(f.latenciesMs).p50 - bs.p50;
    };
    for (const [label, phases] of r.bySetup) {
      const phase = phases.get(bytes);
      if (phase === undefined) continue;
      const s = summarize(phase.latenciesMs);
      const n = phase.latenciesMs.length;
      const isBase = label === r.baselineLabel;
      const added = bs === undefined ? Number.NaN : s.p50 - bs.p50;
      const addedP90 = bs === undefined ? Number.NaN : s.p90 - bs.p90;
      const isFloor = label === r.floorLabel || label === r.floorDuplexLabel;
      const floor = isBase || isFloor ? undefined : floorAdded(label);
      rows.push([
        label,
        size(bytes),
        String(n),
        ms(s.p50),
        ms(s.p90),
        ms(s.p99),
        isBase ? '' : signedMs(added),
        isBase ? '' : signedMs(addedP90),
        isBase ? '' : tailRatio(addedP90, added),
        isBase || bs === undefined ? '' : signedMs(s.mean - bs.mean),
        // A ratio of a negative (noise below Envoy alone) means nothing: left blank.
        floor === undefined || floor <= 0 || added <= 0 ? '' : `${(added / floor).toFixed(2)}×`,
        perRequestMs(phase.cpu.envoySeconds, n),
        perRequestMs(phase.cpu.serverSeconds, n),
      ]);
    }
  }
  const line = (cells: readonly string[]): string => `| ${cells.join(' | ')} |`;
  const errors = [...r.bySetup].flatMap(([label, phases]) =>
    [...phases]
      .filter(([, p]) => p.errors > 0)
      .map(([bytes, p]) => `${label} at ${size(bytes)}: ${p.errors} errors (${p.firstError ?? '?'})`),
  );
  return [
    `Run ${r.machine}. Command: \`${r.command}\`. ${r.requestsPerSize} requests per body size and setup, one at a time, interleaved across setups; latency is request start to last answer byte at the client.`,
    '"added" is against Envoy alone at the same size; "vs floor" divides by the added p50 of the do-nothing Go ext_proc server (scripts/bench/go-floor) in the same body mode; CPU is per request, over the measured requests (not read for the Go server).',
    '',
    line(header),
    line(header.map((_, i) => (i < 2 ? '---' : '---:'))),
    ...rows.map(line),
    ...(errors.length === 0 ? [] : ['', `Errors: ${errors.join('; ')}`]),
  ].join('\n');
}
