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
  /** An info gauge whose labels describe the cache (`num_gpu_blocks`). */
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

/** Parses one scrape. Throws MetricsParseError when the text is not Prometheus text or lacks the queue gauge. */
export function parseServerMetrics(text: string, format: MetricsFormat): ServerLoad {
  let families: PrometheusFamily[];
  try {
    families = parsePrometheusTextFormat(text);
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
  const cacheBlocks = Number(
    names.cacheConfig === undefined ? undefined : byName.get(names.cacheConfig)?.metrics[0]?.labels?.num_gpu_blocks,
  );
  return {
    ...(Number.isInteger(cacheBlocks) && cacheBlocks > 0 ? { cacheBlocks } : {}),
    waiting: waiting.reduce((a, b) => a + b, 0),
    running: running.reduce((a, b) => a + b, 0),
    kvCacheUsage,
    runningAdapters,
    waitingAdapters,
    maxAdapters,
  };
}
