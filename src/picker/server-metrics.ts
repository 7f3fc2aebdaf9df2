// What a model server's Prometheus endpoint says about its load, per server flavour. Pure: text in,
// ServerLoad out. Parsing is done by parse-prometheus-text-format (the only importer of it).
//
//   vllm    vllm:num_requests_waiting · vllm:num_requests_running · vllm:kv_cache_usage_perc
//           (older servers: vllm:gpu_cache_usage_perc) · vllm:lora_requests_info{running_lora_adapters,
//           waiting_lora_adapters, max_lora}, the sample with the newest value (a timestamp) wins ·
//           vllm:cache_config_info{num_gpu_blocks} (the prefix cache's capacity, for precise mode)
//   sglang  sglang:num_queue_reqs · sglang:num_running_reqs · sglang:token_usage
//   tgi     tgi_queue_size · tgi_batch_current_size (no KV-cache gauge)
// Servers labelling by model_name are summed across models (queues) or maxed (KV-cache use).
// Only the lines of those families reach the parser: a vLLM 0.32 page is about 55 KB in 640 lines,
// nearly all of it histograms we never read, and parsing it whole cost 1.2 ms of CPU (and its
// garbage) per scrape, per server, in every llm-extproc process (docs/benchmarks.md).

import parsePrometheusTextFormat from 'parse-prometheus-text-format';
import type { PrometheusFamily } from 'parse-prometheus-text-format';
import type { ServerLoad } from './signals.js';

export const METRICS_FORMATS = ['vllm', 'sglang', 'tgi'] as const;
export type MetricsFormat = (typeof METRICS_FORMATS)[number];

interface FormatNames {
  readonly waiting: string;
  readonly running: string;
  /** Tried in order; the first present wins. */
  readonly kvCache: readonly string[];
  readonly lora?: string;
  /** An info gauge whose labels describe the cache (`num_gpu_blocks`, `block_size`). */
  readonly cacheConfig?: string;
}

const NAMES: Record<MetricsFormat, FormatNames> = {
  vllm: {
    waiting: 'vllm:num_requests_waiting',
    running: 'vllm:num_requests_running',
    kvCache: ['vllm:kv_cache_usage_perc', 'vllm:gpu_cache_usage_perc'],
    lora: 'vllm:lora_requests_info',
    cacheConfig: 'vllm:cache_config_info',
  },
  sglang: { waiting: 'sglang:num_queue_reqs', running: 'sglang:num_running_reqs', kvCache: ['sglang:token_usage'] },
  tgi: { waiting: 'tgi_queue_size', running: 'tgi_batch_current_size', kvCache: [] },
};

export class MetricsParseError extends Error {
  override readonly name = 'MetricsParseError';
}

function values(family: PrometheusFamily | undefined): number[] {
  if (family === undefined) return [];
  const out: number[] = [];
  for (const sample of family.metrics) {
    const n = Number(sample.value);
    if (sample.value !== undefined && Number.isFinite(n)) out.push(n);
  }
  return out;
}

function adapterList(text: string | undefined): string[] {
  if (text === undefined || text === '') return [];
  return text
    .split(',')
    .map((a) => a.trim())
    .filter((a) => a !== '');
}

/** Every family name a format reads. */
function wantedNames(n: FormatNames): readonly string[] {
  const names = [n.waiting, n.running, ...n.kvCache, ...(n.lora === undefined ? [] : [n.lora])];
  return n.cacheConfig === undefined ? names : [...names, n.cacheConfig];
}

const WANTED: Record<MetricsFormat, readonly string[]> = {
  vllm: wantedNames(NAMES.vllm),
  sglang: wantedNames(NAMES.sglang),
  tgi: wantedNames(NAMES.tgi),
};

/** Whether `text` at `at` holds `name` ending there (a sample's `{`, or the space before a value or a comment's type). */
function nameAt(text: string, at: number, name: string): boolean {
  if (!text.startsWith(name, at)) return false;
  const next = text.charCodeAt(at + name.length);
  return next === 0x7b /* { */ || next === 0x20 || next === 0x09;
}

/**
 * The lines of `text` that belong to the families `names`: their samples, and their `# HELP` and
 * `# TYPE` lines. One pass, no per-line strings for the lines left out.
 */
export function familyLines(text: string, names: readonly string[]): string {
  const kept: string[] = [];
  let start = 0;
  while (start < text.length) {
    let end = text.indexOf('\n', start);
    if (end < 0) end = text.length;
    // `# HELP name …` and `# TYPE name …`: the name is at the same place in both.
    const at = text.startsWith('# HELP ', start) || text.startsWith('# TYPE ', start) ? start + 7 : start;
    if (at < end && names.some((name) => nameAt(text, at, name))) kept.push(text.slice(start, end));
    start = end + 1;
  }
  return kept.length === 0 ? '' : `${kept.join('\n')}\n`;
}

/** Parses one scrape. Throws MetricsParseError when the text is not Prometheus text or lacks the queue gauge. */
export function parseServerMetrics(text: string, format: MetricsFormat): ServerLoad {
  let families: PrometheusFamily[];
  try {
    families = parsePrometheusTextFormat(familyLines(text, WANTED[format]));
  } catch (err) {
    throw new MetricsParseError(`not Prometheus text format: ${err instanceof Error ? err.message : String(err)}`);
  }
  const byName = new Map(families.map((f) => [f.name, f]));
  const names = NAMES[format];
  const waiting = values(byName.get(names.waiting));
  // Without the queue gauge we would be guessing: treat the scrape as failed.
  if (waiting.length === 0) throw new MetricsParseError(`no ${names.waiting} in the scrape (is the metrics format "${format}" right?)`);
  const running = values(byName.get(names.running));
  let kvCacheUsage: number | undefined;
  for (const name of names.kvCache) {
    const usage = values(byName.get(name));
    if (usage.length > 0) {
      kvCacheUsage = Math.max(...usage);
      break;
    }
  }
  let runningAdapters: string[] = [];
  let waitingAdapters: string[] = [];
  let maxAdapters: number | undefined;
  const lora = names.lora === undefined ? undefined : byName.get(names.lora);
  if (lora !== undefined) {
    // One sample per change of the adapter set; its value is the time of the change: newest wins.
    let newest = -Infinity;
    for (const sample of lora.metrics) {
      const at = Number(sample.value);
      if (!Number.isFinite(at) || at < newest) continue;
      newest = at;
      runningAdapters = adapterList(sample.labels?.running_lora_adapters);
      waitingAdapters = adapterList(sample.labels?.waiting_lora_adapters);
      const max = Number(sample.labels?.max_lora);
      maxAdapters = sample.labels?.max_lora !== undefined && Number.isFinite(max) && max > 0 ? max : undefined;
    }
  }
  const cacheLabels = names.cacheConfig === undefined ? undefined : byName.get(names.cacheConfig)?.metrics[0]?.labels;
  const cacheBlocks = Number(cacheLabels?.num_gpu_blocks);
  const cacheBlockSize = Number(cacheLabels?.block_size);
  return {
    ...(Number.isInteger(cacheBlocks) && cacheBlocks > 0 ? { cacheBlocks } : {}),
    ...(Number.isInteger(cacheBlockSize) && cacheBlockSize > 0 ? { cacheBlockSize } : {}),
    waiting: waiting.reduce((a, b) => a + b, 0),
    running: running.reduce((a, b) => a + b, 0),
    kvCacheUsage,
    runningAdapters,
    waitingAdapters,
    maxAdapters,
  };
}
