// The tracing section of the config file and the standard OTEL_* variables, through buildConfig as
// the server reads them: defaults, what each one sets, and which wins when both say.
import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { buildConfig, ConfigError } from '../../../src/config/config.js';

const FILE = `
tracing:
  enabled: true
  endpoint: http://collector.file:4318/v1/traces
  sampleRatio: 0.25
  serviceName: from-file
  maxQueueSize: 100
  maxExportBatchSize: 50
  exportTimeoutSeconds: 3
  shutdownFlushSeconds: 1
  propagateToUpstream: false
`;

describe('tracing config', () => {
  it('off by default, with bounded defaults ready for when it is turned on', () => {
    const t = buildConfig(undefined, {}).tracing;
    assert.equal(t.enabled, false);
    assert.equal(t.endpoint, 'http://localhost:4318/v1/traces');
    assert.deepEqual(t.sampler, { kind: 'always_on', ratio: 1, parentBased: true });
    assert.equal(t.serviceName, 'llm-extproc');
    assert.equal(t.maxQueueSize, 2048);
    assert.equal(t.exportTimeoutMs, 10_000);
    assert.equal(t.propagateToUpstream, true, 'on with tracing, unless the file says otherwise');
  });

  it('the file sets every setting; a ratio below 1 samples new traces, parent based', () => {
    const t = buildConfig(FILE, {}).tracing;
    assert.equal(t.enabled, true);
    assert.equal(t.endpoint, 'http://collector.file:4318/v1/traces');
    assert.deepEqual(t.sampler, { kind: 'traceidratio', ratio: 0.25, parentBased: true });
    assert.equal(t.serviceName, 'from-file');
    assert.equal(t.maxQueueSize, 100);
    assert.equal(t.maxExportBatchSize, 50);
    assert.equal(t.exportTimeoutMs, 3000);
    assert.equal(t.shutdownFlushMs, 1000);
    assert.equal(t.propagateToUpstream, false);
  });

  it('OTEL_* variables win over the file', () => {
    const t = buildConfig(FILE, {
      OTEL_EXPORTER_OTLP_ENDPOINT: 'http://collector.env:4318/',
      OTEL_SERVICE_NAME: 'from-env',
      OTEL_TRACES_SAMPLER: 'traceidratio',
      OTEL_TRACES_SAMPLER_ARG: '0.5',
      OTEL_BSP_MAX_QUEUE_SIZE: '10',
      OTEL_BSP_EXPORT_TIMEOUT: '1500',
    }).tracing;
    assert.equal(t.endpoint, 'http://collector.env:4318/v1/traces', 'the base endpoint gets /v1/traces');
    assert.equal(t.serviceName, 'from-env');
    assert.deepEqual(t.sampler, { kind: 'traceidratio', ratio: 0.5, parentBased: false });
    assert.equal(t.maxQueueSize, 10);
    assert.equal(t.maxExportBatchSize, 10, 'a batch never exceeds the queue');
    assert.equal(t.exportTimeoutMs, 1500);
  });

  it('the more specific variable wins: the traces endpoint over the base, OTEL_SERVICE_NAME over the resource', () => {
    const env = {
      OTEL_EXPORTER_OTLP_ENDPOINT: 'http://base:4318',
      OTEL_EXPORTER_OTLP_TRACES_ENDPOINT: 'http://traces:4318/custom',
      OTEL_RESOURCE_ATTRIBUTES: 'deployment.environment=prod,service.name=from-resource',
    };
    const t = buildConfig(FILE, env).tracing;
    assert.equal(t.endpoint, 'http://traces:4318/custom', 'used as is');
    assert.equal(t.serviceName, 'from-resource', 'service.name in OTEL_RESOURCE_ATTRIBUTES wins over the file');
    assert.equal(buildConfig(FILE, { ...env, OTEL_SERVICE_NAME: 'named' }).tracing.serviceName, 'named');
  });

  it('on and off from the environment: OTEL_TRACES_EXPORTER, and OTEL_SDK_DISABLED over everything', () => {
    assert.equal(buildConfig(undefined, { OTEL_TRACES_EXPORTER: 'otlp' }).tracing.enabled, true);
    assert.equal(buildConfig(FILE, { OTEL_TRACES_EXPORTER: 'none' }).tracing.enabled, false);
    assert.equal(buildConfig(FILE, { OTEL_SDK_DISABLED: 'true' }).tracing.enabled, false);
    assert.equal(buildConfig(undefined, { OTEL_SDK_DISABLED: 'TRUE', OTEL_TRACES_EXPORTER: 'otlp' }).tracing.enabled, false);
    assert.equal(buildConfig(FILE, { OTEL_SDK_DISABLED: 'false' }).tracing.enabled, true);
    assert.equal(buildConfig(FILE, { OTEL_TRACES_EXPORTER: '' }).tracing.enabled, true, 'an empty variable counts as unset');
  });

  it('OTEL_TRACES_EXPORTER is a list: one naming otlp turns tracing on and the rest are told as ignored; none alone turns it off', () => {
    const on = buildConfig(undefined, { OTEL_TRACES_EXPORTER: 'console, OTLP,zipkin' }).tracing;
    assert.equal(on.enabled, true);
    assert.deepEqual(on.ignoredExporters, ['console', 'zipkin']);
    assert.deepEqual(buildConfig(undefined, { OTEL_TRACES_EXPORTER: 'otlp,' }).tracing.ignoredExporters, []);
    assert.equal(buildConfig(FILE, { OTEL_TRACES_EXPORTER: ' none ' }).tracing.enabled, false);
    assert.equal(buildConfig(FILE, { OTEL_SDK_DISABLED: 'true', OTEL_TRACES_EXPORTER: 'zipkin' }).tracing.enabled, false, 'disabled wins');
  });

  it('the parentbased_ samplers and their argument', () => {
    const sampler = (name: string, arg?: string) =>
      buildConfig(undefined, { OTEL_TRACES_SAMPLER: name, ...(arg === undefined ? {} : { OTEL_TRACES_SAMPLER_ARG: arg }) }).tracing.sampler;
    assert.deepEqual(sampler('parentbased_traceidratio', '0.1'), { kind: 'traceidratio', ratio: 0.1, parentBased: true });
    assert.deepEqual(sampler('always_off'), { kind: 'always_off', ratio: 1, parentBased: false });
    assert.deepEqual(sampler('parentbased_always_on'), { kind: 'always_on', ratio: 1, parentBased: true });
    assert.deepEqual(sampler('traceidratio'), { kind: 'traceidratio', ratio: 1, parentBased: false }, 'the argument defaults to 1');
  });

  it('values that cannot be honoured are config errors, never ignored', () => {
    const cases: [string | undefined, Record<string, string>, RegExp][] = [
      [undefined, { OTEL_TRACES_SAMPLER: 'jaeger_remote' }, /OTEL_TRACES_SAMPLER: expected one of/],
      [
        undefined,
        { OTEL_TRACES_SAMPLER: 'traceidratio', OTEL_TRACES_SAMPLER_ARG: '2' },
        /OTEL_TRACES_SAMPLER_ARG: expected a number from 0 to 1/,
      ],
      [undefined, { OTEL_TRACES_EXPORTER: 'zipkin' }, /OTEL_TRACES_EXPORTER: llm-extproc exports with otlp/],
      [undefined, { OTEL_TRACES_EXPORTER: 'zipkin,console' }, /OTEL_TRACES_EXPORTER: llm-extproc exports with otlp/],
      [undefined, { OTEL_TRACES_EXPORTER: 'none,otlp' }, /OTEL_TRACES_EXPORTER: none cannot be combined/],
      ['tracing:\n  endpoint: "http://"\n', {}, /^tracing\.endpoint: expected an http\(s\) URL/],
      ['tracing:\n  endpoint: http://collector:99999/v1/traces\n', {}, /^tracing\.endpoint: expected an http\(s\) URL/],
      ['tracing:\n  exportTimeoutSeconds: 2147484\n', {}, /tracing\.exportTimeoutSeconds/],
      ['tracing:\n  scheduledDelaySeconds: 1e9\n', {}, /tracing\.scheduledDelaySeconds/],
      [
        undefined,
        { OTEL_BSP_SCHEDULE_DELAY: '2147483648' },
        /OTEL_BSP_SCHEDULE_DELAY: expected milliseconds above 0 and at most 2147483647/,
      ],
      [undefined, { OTEL_EXPORTER_OTLP_TIMEOUT: '1e12' }, /OTEL_EXPORTER_OTLP_TIMEOUT: expected milliseconds/],
      [undefined, { OTEL_EXPORTER_OTLP_ENDPOINT: 'grpc://x:4317' }, /expected an http\(s\) URL/],
      [undefined, { OTEL_BSP_MAX_QUEUE_SIZE: '0' }, /OTEL_BSP_MAX_QUEUE_SIZE: expected a whole number above 0/],
      ['tracing:\n  endpoint: collector:4318\n', {}, /tracing\.endpoint/],
      ['tracing:\n  sampleRatio: 1.5\n', {}, /tracing\.sampleRatio/],
      ['tracing:\n  maxQueueSize: 0\n', {}, /tracing\.maxQueueSize/],
      ['tracing:\n  enable: true\n', {}, /tracing/],
    ];
    for (const [file, env, pattern] of cases)
      assert.throws(
        () => buildConfig(file, env),
        (err: unknown) => err instanceof ConfigError && pattern.test(err.message),
        `${file} ${JSON.stringify(env)}`,
      );
  });
});
