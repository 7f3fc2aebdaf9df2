// Reading vLLM, SGLang and TGI metrics pages into a server's load.
import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { familyLines, MetricsParseError, parseServerMetrics } from '../../../src/picker/server-metrics.js';

const VLLM = `# HELP vllm:num_requests_running Number of requests in model execution batches.
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{engine="0",model_name="llama"} 3.0
# HELP vllm:num_requests_waiting Number of requests waiting to be processed.
# TYPE vllm:num_requests_waiting gauge
vllm:num_requests_waiting{engine="0",model_name="llama"} 7.0
# HELP vllm:kv_cache_usage_perc KV-cache usage. 1 means 100 percent usage.
# TYPE vllm:kv_cache_usage_perc gauge
vllm:kv_cache_usage_perc{engine="0",model_name="llama"} 0.42
# HELP vllm:lora_requests_info Running stats on lora requests.
# TYPE vllm:lora_requests_info gauge
vllm:lora_requests_info{max_lora="4",running_lora_adapters="sql,chat",waiting_lora_adapters=""} 1.7e+09
vllm:lora_requests_info{max_lora="4",running_lora_adapters="old",waiting_lora_adapters="x"} 1.6e+09
# HELP vllm:time_to_first_token_seconds Histogram of time to first token in seconds.
# TYPE vllm:time_to_first_token_seconds histogram
vllm:time_to_first_token_seconds_bucket{le="0.001",model_name="llama"} 0.0
vllm:time_to_first_token_seconds_bucket{le="+Inf",model_name="llama"} 3.0
vllm:time_to_first_token_seconds_count{model_name="llama"} 3.0
vllm:time_to_first_token_seconds_sum{model_name="llama"} 0.3
`;

describe('parseServerMetrics', () => {
  const cases: ReadonlyArray<{ name: string; text: string; format: 'vllm' | 'sglang' | 'tgi'; expected: object }> = [
    {
      name: 'vLLM: queue, batch, KV cache and the newest LoRA sample',
      text: VLLM,
      format: 'vllm',
      expected: { waiting: 7, running: 3, kvCacheUsage: 0.42, runningAdapters: ['sql', 'chat'], waitingAdapters: [], maxAdapters: 4 },
    },
    {
      name: "vLLM's cache capacity in blocks and block size (cache_config_info, as 0.32 labels it)",
      text:
        'vllm:num_requests_waiting 0\nvllm:num_requests_running 0\nvllm:kv_cache_usage_perc 0\n' +
        'vllm:cache_config_info{block_size="32",cache_dtype="auto",enable_prefix_caching="True",engine="0",num_gpu_blocks="256",prefix_caching_hash_algo="sha256"} 1.0\n',
      format: 'vllm',
      expected: {
        cacheBlocks: 256,
        cacheBlockSize: 32,
        waiting: 0,
        running: 0,
        kvCacheUsage: 0,
        runningAdapters: [],
        waitingAdapters: [],
        maxAdapters: undefined,
      },
    },
    {
      name: 'older vLLM: gpu_cache_usage_perc',
      text: 'vllm:num_requests_waiting 1\nvllm:num_requests_running 2\nvllm:gpu_cache_usage_perc 0.9\n',
      format: 'vllm',
      expected: { waiting: 1, running: 2, kvCacheUsage: 0.9, runningAdapters: [], waitingAdapters: [], maxAdapters: undefined },
    },
    {
      name: 'vLLM serving two models: queues add up, KV use is the highest',
      text: 'vllm:num_requests_waiting{model_name="a"} 2\nvllm:num_requests_waiting{model_name="b"} 5\nvllm:kv_cache_usage_perc{model_name="a"} 0.2\nvllm:kv_cache_usage_perc{model_name="b"} 0.6\n',
      format: 'vllm',
      expected: { waiting: 7, running: 0, kvCacheUsage: 0.6, runningAdapters: [], waitingAdapters: [], maxAdapters: undefined },
    },
    {
      name: 'SGLang',
      text: '# TYPE sglang:num_queue_reqs gauge\nsglang:num_queue_reqs{model_name="m"} 4.0\nsglang:num_running_reqs{model_name="m"} 8.0\nsglang:token_usage{model_name="m"} 0.28\n',
      format: 'sglang',
      expected: { waiting: 4, running: 8, kvCacheUsage: 0.28, runningAdapters: [], waitingAdapters: [], maxAdapters: undefined },
    },
    {
      name: 'TGI (no KV-cache gauge)',
      text: '# TYPE tgi_queue_size gauge\ntgi_queue_size 6\ntgi_batch_current_size 2\n',
      format: 'tgi',
      expected: { waiting: 6, running: 2, kvCacheUsage: undefined, runningAdapters: [], waitingAdapters: [], maxAdapters: undefined },
    },
  ];
  for (const c of cases) it(c.name, () => assert.deepEqual(parseServerMetrics(c.text, c.format), c.expected));

  const failures: ReadonlyArray<{ name: string; text: string; format: 'vllm' | 'sglang' | 'tgi'; message: RegExp }> = [
    { name: 'HTML is not Prometheus text', text: '<html>\n<body>oops</body>\n</html>', format: 'vllm', message: /./ },
    { name: 'the wrong flavour has no queue gauge', text: VLLM, format: 'sglang', message: /no sglang:num_queue_reqs in the scrape/ },
    { name: 'an empty page', text: '', format: 'vllm', message: /no vllm:num_requests_waiting/ },
  ];
  for (const f of failures) {
    it(`fails: ${f.name}`, () =>
      assert.throws(
        () => parseServerMetrics(f.text, f.format),
        (err: unknown) => err instanceof MetricsParseError && f.message.test(err.message),
      ));
  }
});

describe('familyLines', () => {
  it('keeps the samples and the HELP and TYPE lines of the families asked for, nothing else', () => {
    assert.equal(
      familyLines(VLLM, ['vllm:num_requests_waiting', 'vllm:lora_requests_info']),
      '# HELP vllm:num_requests_waiting Number of requests waiting to be processed.\n' +
        '# TYPE vllm:num_requests_waiting gauge\n' +
        'vllm:num_requests_waiting{engine="0",model_name="llama"} 7.0\n' +
        '# HELP vllm:lora_requests_info Running stats on lora requests.\n' +
        '# TYPE vllm:lora_requests_info gauge\n' +
        'vllm:lora_requests_info{max_lora="4",running_lora_adapters="sql,chat",waiting_lora_adapters=""} 1.7e+09\n' +
        'vllm:lora_requests_info{max_lora="4",running_lora_adapters="old",waiting_lora_adapters="x"} 1.6e+09\n',
    );
  });
  it('matches whole names only (a longer name that starts the same is another family)', () => {
    const text = 'vllm:num_requests_waiting_by_reason{reason="x"} 3\nvllm:num_requests_waiting 1\nvllm:num_requests_waiting\t2\n';
    assert.equal(familyLines(text, ['vllm:num_requests_waiting']), 'vllm:num_requests_waiting 1\nvllm:num_requests_waiting\t2\n');
  });
  it('a page without them gives nothing', () => assert.equal(familyLines('<html>\n</html>', ['vllm:num_requests_waiting']), ''));
});
