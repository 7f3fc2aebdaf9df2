// The `picker:` configuration section: defaults, every setting, and errors that name the field.
import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { buildConfig, ConfigError } from '../../../src/config/config.js';
import { METRICS_FLAVOURS } from '../../../src/config/schema.js';
import { METRICS_FORMATS } from '../../../src/picker/server-metrics.js';
import { cacheBlockFor, DEFAULT_PICKER_SETTINGS, metricsFormatFor, poolPolicy, poolSettings } from '../../../src/picker/settings.js';

describe('picker config', () => {
  it('defaults when absent', () => {
    assert.deepEqual(buildConfig(undefined, {}).picker, DEFAULT_PICKER_SETTINGS);
    assert.deepEqual(buildConfig('picker: {}\n', {}).picker, DEFAULT_PICKER_SETTINGS);
  });

  it("objectiveHeader '' turns objective names off", () => {
    assert.equal(buildConfig("picker:\n  flowControl: { objectiveHeader: '' }\n", {}).picker.flowControl.objectiveHeader, '');
  });

  it('reads every setting', () => {
    const config = buildConfig(
      [
        'picker:',
        '  weights: { queue: 2, kvCache: 0.5, inFlight: 1, prefix: 6, lora: 0, latency: 3, session: 50 }',
        '  session: { header: x-conversation, aliases: [x-session-id, x-chat], ttlSeconds: 60, maxSessions: 500, keyFile: /etc/llm-extproc/session/keys, queueDepth: 3, kvCacheUsage: 0.9 }',
        '  latency: { halfLifeSeconds: 4, minSamples: 5, outlierFactor: 3, recoverFactor: 2, probeIntervalSeconds: 0.5 }',
        '  prefix: { keyBlocks: 4, blockTokens: 32, charsPerToken: 3.5, loadFactor: 1.5, loadSlack: 3, maxQueue: 4, prefillMsPerToken: 0.25, queueMsPerRequest: 50, requestMs: 900 }',
        '  lora: { maxAdaptersPerServer: 8 }',
        '  metrics: { enabled: true, format: sglang, path: /stats, intervalSeconds: 2, timeoutSeconds: 0.25, staleAfterSeconds: 10, concurrency: 4 }',
        '  pools:',
        '    llama: { metricsFormat: vllm, maxQueueDepth: 64, blockTokens: 64, charsPerToken: 2.5 }',
        '    legacy: { metricsFormat: none, flowControl: true, saturation: { maxInFlight: 3 } }',
        '  flowControl:',
        '    enabled: false',
        '    tenantHeader: x-tenant',
        '    priorityHeader: x-priority',
        '    defaultPriority: 1',
        '    priorityByModel: { batch: -1 }',
        '    priorityByHeaderValue: { chat: 10 }',
        '    ttlSeconds: 5',
        '    timedTtlSeconds: 0.5',
        '    maxQueued: 50',
        '    maxQueuedBytes: 1000000',
        '    saturation: { queueDepth: 2, kvCacheUsage: 0.9, maxInFlight: 8 }',
        '    tenantLabels: 5',
        '',
      ].join('\n'),
      {},
    );
    assert.deepEqual(config.picker, {
      weights: { queue: 2, kvCache: 0.5, inFlight: 1, prefix: 6, lora: 0, latency: 3, session: 50 },
      session: {
        header: 'x-conversation',
        aliases: ['x-session-id', 'x-chat'],
        ttlMs: 60_000,
        maxSessions: 500,
        keyFile: '/etc/llm-extproc/session/keys',
        queueDepth: 3,
        kvCacheUsage: 0.9,
      },
      precise: undefined,
      prefix: {
        keyBlocks: 4,
        blockTokens: 32,
        charsPerToken: 3.5,
        loadFactor: 1.5,
        loadSlack: 3,
        maxQueue: 4,
        prefillMsPerToken: 0.25,
        queueMsPerRequest: 50,
        requestMs: 900,
      },
      lora: { maxAdaptersPerServer: 8 },
      latency: {
        ...DEFAULT_PICKER_SETTINGS.latency,
        halfLifeMs: 4000,
        minSamples: 5,
        outlierFactor: 3,
        recoverFactor: 2,
        probeIntervalMs: 500,
      },
      metrics: { enabled: true, format: 'sglang', path: '/stats', intervalMs: 2000, timeoutMs: 250, staleAfterMs: 10_000, concurrency: 4 },
      flowControl: {
        enabled: false,
        tenantHeader: 'x-tenant',
        priorityHeader: 'x-priority',
        objectiveHeader: 'x-llm-d-inference-objective',
        defaultPriority: 1,
        priorityByModel: { batch: -1 },
        priorityByHeaderValue: { chat: 10 },
        ttlMs: 5000,
        timedTtlMs: 500,
        maxQueued: 50,
        maxQueuedBytes: 1_000_000,
        saturation: { queueDepth: 2, kvCacheUsage: 0.9, maxInFlight: 8 },
        tenantLabels: 5,
      },
      pools: {
        llama: { metricsFormat: 'vllm', maxQueueDepth: 64, blockTokens: 64, charsPerToken: 2.5 },
        legacy: { metricsFormat: 'none', flowControl: true, saturation: { maxInFlight: 3 } },
      },
    });
    // Flow control: off where the default says so, on where the pool turns it on, with the pool's
    // limits over the defaults; an unscraped pool is judged by in-flight counts alone.
    assert.deepEqual(poolPolicy(config.picker, 'llama'), { maxQueueDepth: 64 });
    assert.deepEqual(poolPolicy(config.picker, 'legacy'), {
      saturation: { queueDepth: 2, kvCacheUsage: 0.9, maxInFlight: 3, scraped: false },
    });
    // The cache block is the pool's own, else picker.prefix's.
    assert.deepEqual(cacheBlockFor(config.picker, 'llama'), { blockTokens: 64, charsPerToken: 2.5 });
    assert.deepEqual(cacheBlockFor(config.picker, 'legacy'), { blockTokens: 32, charsPerToken: 3.5 });
    assert.deepEqual(cacheBlockFor(DEFAULT_PICKER_SETTINGS, 'any'), { blockTokens: 16, charsPerToken: 4 });
    assert.equal(metricsFormatFor(config.picker, 'llama'), 'vllm');
    assert.equal(metricsFormatFor(config.picker, 'legacy'), undefined);
    assert.equal(metricsFormatFor(config.picker, 'other'), 'sglang');
    assert.deepEqual(poolSettings(config.picker, 'toString'), {});
  });

  it('precise: the events’ timings in seconds, pending blocks on by default and off at 0', () => {
    const precise = (events: string) =>
      buildConfig(`picker:\n  precise:\n    tokenizerDir: /models/tok\n    events: ${events}\n`, {}).picker.precise;
    assert.deepEqual(precise('{ port: 5557, silenceSeconds: 4, rebuildSeconds: 20, heartbeatSeconds: 0.5, pendingSeconds: 2 }'), {
      tokenizerDir: '/models/tok',
      events: { port: 5557, discover: false, topic: '', silenceMs: 4000, rebuildMs: 20_000, heartbeatMs: 500, pendingMs: 2000 },
    });
    assert.equal(precise('{ discover: true }')?.events.pendingMs, 5000);
    assert.equal(precise('{ discover: true, pendingSeconds: 0 }')?.events.pendingMs, 0);
    assert.throws(() => precise('{ discover: true, pendingSeconds: -1 }'), /pendingSeconds/);
  });

  it('latency: a recover factor at or above the outlier factor is refused, naming both', () => {
    assert.throws(
      () => buildConfig('picker:\n  latency: { outlierFactor: 2, recoverFactor: 2 }\n', {}),
      (err: unknown) => err instanceof Error && /picker\.latency\.recoverFactor: must be < outlierFactor \(2\)/.test(err.message),
    );
    assert.equal(buildConfig('picker:\n  latency: { outlierFactor: 3, recoverFactor: 2.5 }\n', {}).picker.latency.recoverFactor, 2.5);
  });

  it('the schema accepts exactly the flavours the parser knows', () => {
    assert.deepEqual([...METRICS_FLAVOURS], [...METRICS_FORMATS]);
  });

  it('scraping off: no pool is scraped', () => {
    const config = buildConfig('picker:\n  metrics:\n    enabled: false\n  pools:\n    p: { metricsFormat: tgi }\n', {});
    assert.equal(metricsFormatFor(config.picker, 'p'), undefined);
  });

  it('staleness defaults to three intervals when that is longer than 5 s', () => {
    assert.equal(buildConfig('picker:\n  metrics:\n    intervalSeconds: 4\n', {}).picker.metrics.staleAfterMs, 12_000);
  });

  const errors: ReadonlyArray<{ yaml: string; message: RegExp }> = [
    { yaml: 'picker: 3', message: /^picker: expected a mapping/ },
    { yaml: 'picker:\n  weight: {}', message: /^picker\.weight: unknown setting/ },
    { yaml: 'picker:\n  weights: { queue: -1 }', message: /^picker\.weights\.queue: expected a number ≥ 0/ },
    { yaml: 'picker:\n  weights: { prefx: 1 }', message: /^picker\.weights\.prefx: unknown setting/ },
    { yaml: 'picker:\n  session: { header: X-Session }', message: /^picker\.session\.header: expected a lower-case HTTP header name/ },
    { yaml: 'picker:\n  session: { ttlSeconds: 0 }', message: /^picker\.session\.ttlSeconds: expected a number ≥ 1/ },
    { yaml: 'picker:\n  prefix: { keyBlocks: 65 }', message: /^picker\.prefix\.keyBlocks: expected a number ≤ 64, got 65/ },
    { yaml: 'picker:\n  prefix: { blockTokens: 0 }', message: /^picker\.prefix\.blockTokens: expected a number ≥ 1, got 0/ },
    { yaml: 'picker:\n  prefix: { charsPerToken: 0.1 }', message: /^picker\.prefix\.charsPerToken: expected a number ≥ 0.5, got 0.1/ },
    { yaml: 'picker:\n  pools:\n    p: { blockTokens: 2.5 }', message: /^picker\.pools\.p\.blockTokens: expected a whole number/ },
    { yaml: 'picker:\n  prefix: { loadFactor: 0.5 }', message: /^picker\.prefix\.loadFactor: expected a number ≥ 1/ },
    { yaml: 'picker:\n  metrics: { format: ollama }', message: /^picker\.metrics\.format: expected one of vllm, sglang, tgi/ },
    { yaml: 'picker:\n  metrics: { enabled: yes-please }', message: /^picker\.metrics\.enabled: expected true or false/ },
    { yaml: 'picker:\n  metrics: { path: metrics }', message: /^picker\.metrics\.path: expected a path starting with \// },
    {
      yaml: 'picker:\n  metrics: { intervalSeconds: 10, staleAfterSeconds: 5 }',
      message: /^picker\.metrics\.staleAfterSeconds: must be ≥ intervalSeconds/,
    },
    {
      yaml: 'picker:\n  flowControl: { tenantHeader: X-Tenant }',
      message: /^picker\.flowControl\.tenantHeader: expected a lower-case HTTP header name/,
    },
    {
      yaml: 'picker:\n  flowControl: { saturation: { kvCacheUsage: 1.5 } }',
      message: /^picker\.flowControl\.saturation\.kvCacheUsage: expected a number ≤ 1/,
    },
    { yaml: 'picker:\n  flowControl: { priorityByModel: { m: high } }', message: /^picker\.flowControl\.priorityByModel\.m: / },
    {
      yaml: 'picker:\n  flowControl: { objectiveHeader: X-Objective }',
      message: /^picker\.flowControl\.objectiveHeader: expected a lower-case HTTP header name, or ''/,
    },
    { yaml: 'picker:\n  metrics: { concurrency: 0 }', message: /^picker\.metrics\.concurrency: expected a number ≥ 1, got 0/ },
    {
      yaml: 'picker:\n  pools:\n    p: { maxQueueDepth: 2.5 }',
      message: /^picker\.pools\.p\.maxQueueDepth: expected a whole number, got 2.5/,
    },
    {
      yaml: 'picker:\n  pools:\n    p: { metricsFormat: x }',
      message: /^picker\.pools\.p\.metricsFormat: expected one of vllm, sglang, tgi, none/,
    },
    { yaml: 'picker:\n  pools:\n    p: { queueLimit: 3 }', message: /^picker\.pools\.p\.queueLimit: unknown setting/ },
  ];
  for (const e of errors) {
    it(`refuses ${JSON.stringify(e.yaml)}`, () => {
      assert.throws(
        () => buildConfig(e.yaml, {}),
        (err: unknown) => err instanceof ConfigError && e.message.test(err.message),
      );
    });
  }
});
