// Configuration as an operator meets it: defaults, the YAML file, environment overrides, and an
// error message that names the offending field for every invalid input.
import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { resolve } from 'node:path';
import { buildConfig, ConfigError } from '../../../src/config/config.js';
import type { Config } from '../../../src/config/config.js';

type Env = Record<string, string | undefined>;

/** Asserts buildConfig fails with a ConfigError whose message matches exactly (string) or the pattern. */
function rejects(fileText: string | undefined, env: Env, message: string | RegExp): void {
  assert.throws(
    () => buildConfig(fileText, env),
    (err: unknown) => {
      assert.ok(err instanceof ConfigError, `expected a ConfigError, got ${String(err)}`);
      assert.equal(err.name, 'ConfigError');
      if (typeof message === 'string') assert.equal(err.message, message);
      else assert.match(err.message, message);
      return true;
    },
  );
}

const MiB = 1024 * 1024;

/** The smallest valid kubernetes section, for cases that test something else in it. */
const K8S_POOL = `
kubernetes:
  pools:
    - name: llama
      namespace: models
      selector: { app: vllm }
      models: [llama-3-8b]
`;

describe('buildConfig: defaults', () => {
  const inputs: ReadonlyArray<{ name: string; fileText: string | undefined }> = [
    { name: 'no file', fileText: undefined },
    { name: 'empty file', fileText: '' },
    { name: 'comment-only file', fileText: '# nothing here\n' },
    { name: 'explicit null document', fileText: '~\n' },
    { name: 'empty sections', fileText: 'listen:\nrouting: {}\nquarantine: ~\n' },
  ];
  for (const { name, fileText } of inputs) {
    it(name, () => {
      const config = buildConfig(fileText, {});
      assert.deepEqual(config.listen, {
        grpc: '0.0.0.0:9002',
        http: '0.0.0.0:9090',
        debugEndpoints: false,
        transport: 'native',
        maxConnections: 1024,
        idleTimeoutMs: 300_000,
      });
      assert.equal(config.logLevel, 'info');
      assert.deepEqual(config.source, { kind: 'static', path: resolve('endpoints.yaml') }, 'no config file: from the working directory');
      assert.deepEqual(config.routing, {
        fallbacks: 2,
        maxRequestBodyBytes: 8 * MiB,
        maxInspectedBodyBytes: 4 * MiB,
        destinationFormat: 'list',
        streamUsagePools: [],
        modelRewrites: [],
      });
      assert.deepEqual(config.metrics, { deprecatedNames: true });
      assert.deepEqual(config.quarantine, { threshold: 3, baseMs: 10_000, maxMs: 300_000, checkPath: '', checkTimeoutMs: 500 });
      assert.equal(config.shutdownGraceMs, 20_000);
    });
  }
});

describe('buildConfig: file values', () => {
  it('reads every setting, converting seconds to milliseconds', () => {
    const config = buildConfig(
      `
listen:
  grpc: unix:///run/llm-extproc.sock
  http: 127.0.0.1:9191
  debugEndpoints: true
  transport: grpc-js
  maxConnections: 8
  idleTimeoutSeconds: 1.5
logLevel: debug
static:
  path: /etc/llm-extproc/endpoints.yaml
routing:
  fallbacks: 0
  maxRequestBodyBytes: 1048576
  maxInspectedBodyBytes: 0
  streamUsagePools: [llama, models/phi]
  modelRewrites:
    - matches: [{ model: { value: m } }]
      targets: [{ modelRewrite: m-v1, weight: 90 }, { modelRewrite: m-v2, weight: 10 }]
quarantine:
  consecutiveFailures: 5
  baseSeconds: 1.5
  maxSeconds: 60
  checkPath: /health
  checkTimeoutSeconds: 0.25
shutdownGraceSeconds: 0
`,
      {},
    );
    assert.deepEqual(config.listen, {
      grpc: 'unix:///run/llm-extproc.sock',
      http: '127.0.0.1:9191',
      debugEndpoints: true,
      transport: 'grpc-js',
      maxConnections: 8,
      idleTimeoutMs: 1500,
    });
    assert.equal(config.logLevel, 'debug');
    assert.deepEqual(config.source, { kind: 'static', path: '/etc/llm-extproc/endpoints.yaml' });
    assert.deepEqual(config.routing, {
      fallbacks: 0,
      maxRequestBodyBytes: MiB,
      maxInspectedBodyBytes: 0,
      destinationFormat: 'list',
      streamUsagePools: ['llama', 'models/phi'],
      modelRewrites: [
        {
          matches: [{ model: { value: 'm' } }],
          targets: [
            { modelRewrite: 'm-v1', weight: 90 },
            { modelRewrite: 'm-v2', weight: 10 },
          ],
        },
      ],
    });
    assert.deepEqual(config.quarantine, { threshold: 5, baseMs: 1_500, maxMs: 60_000, checkPath: '/health', checkTimeoutMs: 250 });
    assert.equal(config.shutdownGraceMs, 0);
  });

  it('accepts numbers written as strings (e.g. from templated Helm values)', () => {
    const config = buildConfig('routing:\n  fallbacks: "3"\nshutdownGraceSeconds: "5"\n', {});
    assert.equal(config.routing.fallbacks, 3);
    assert.equal(config.shutdownGraceMs, 5_000);
  });

  for (const level of ['fatal', 'error', 'warn', 'info', 'debug', 'trace', 'silent'] as const) {
    it(`logLevel ${level}`, () => {
      assert.equal(buildConfig(`logLevel: ${level}\n`, {}).logLevel, level);
    });
  }
});

describe('buildConfig: environment overrides', () => {
  const file = 'listen:\n  grpc: 0.0.0.0:1\n  http: 0.0.0.0:2\nlogLevel: warn\nstatic:\n  path: from-file.yaml\n';
  const cases: ReadonlyArray<{ name: string; env: Env; pick: (c: Config) => unknown; expected: unknown }> = [
    {
      name: 'file values without env',
      env: {},
      pick: (c) => [c.listen.grpc, c.listen.http, c.logLevel, c.source],
      expected: ['0.0.0.0:1', '0.0.0.0:2', 'warn', { kind: 'static', path: resolve('from-file.yaml') }],
    },
    {
      name: 'LLM_EXTPROC_GRPC_ADDRESS',
      env: { LLM_EXTPROC_GRPC_ADDRESS: 'unix:///tmp/x.sock' },
      pick: (c) => c.listen,
      expected: {
        grpc: 'unix:///tmp/x.sock',
        http: '0.0.0.0:2',
        debugEndpoints: false,
        transport: 'native',
        maxConnections: 1024,
        idleTimeoutMs: 300_000,
      },
    },
    {
      name: 'LLM_EXTPROC_HTTP_ADDRESS',
      env: { LLM_EXTPROC_HTTP_ADDRESS: '127.0.0.1:0' },
      pick: (c) => c.listen,
      expected: {
        grpc: '0.0.0.0:1',
        http: '127.0.0.1:0',
        debugEndpoints: false,
        transport: 'native',
        maxConnections: 1024,
        idleTimeoutMs: 300_000,
      },
    },
    { name: 'LLM_EXTPROC_LOG_LEVEL', env: { LLM_EXTPROC_LOG_LEVEL: 'trace' }, pick: (c) => c.logLevel, expected: 'trace' },
    {
      name: 'LLM_EXTPROC_ENDPOINTS_FILE',
      env: { LLM_EXTPROC_ENDPOINTS_FILE: '/srv/e.yaml' },
      pick: (c) => c.source,
      expected: { kind: 'static', path: '/srv/e.yaml' },
    },
    {
      name: 'an empty LLM_EXTPROC_ENDPOINTS_FILE counts as unset',
      env: { LLM_EXTPROC_ENDPOINTS_FILE: '' },
      pick: (c) => c.source,
      expected: { kind: 'static', path: resolve('from-file.yaml') },
    },
    {
      name: 'unrelated variables are ignored',
      env: { LLM_EXTPROC_FALLBACKS: '9', HOME: '/root' },
      pick: (c) => c.routing.fallbacks,
      expected: 2,
    },
  ];
  for (const c of cases) {
    it(c.name, () => {
      assert.deepEqual(c.pick(buildConfig(file, c.env)), c.expected);
    });
  }

  it('LLM_EXTPROC_ENDPOINTS_FILE wins over a kubernetes section', () => {
    const config = buildConfig(K8S_POOL, { LLM_EXTPROC_ENDPOINTS_FILE: '/srv/e.yaml' });
    assert.deepEqual(config.source, { kind: 'static', path: '/srv/e.yaml' });
  });

  it('an env override replaces an invalid file value rather than failing on it', () => {
    const config = buildConfig('listen:\n  grpc: 42\n', { LLM_EXTPROC_GRPC_ADDRESS: '0.0.0.0:7' });
    assert.equal(config.listen.grpc, '0.0.0.0:7');
  });

  it('a bad LLM_EXTPROC_LOG_LEVEL is rejected', () => {
    rejects(
      undefined,
      { LLM_EXTPROC_LOG_LEVEL: 'loud' },
      'LLM_EXTPROC_LOG_LEVEL: expected one of fatal, error, warn, info, debug, trace, silent, got "loud"',
    );
  });

  it('an empty LLM_EXTPROC_GRPC_ADDRESS counts as unset, like LLM_EXTPROC_ENDPOINTS_FILE', () => {
    const config = buildConfig(file, { LLM_EXTPROC_GRPC_ADDRESS: '', LLM_EXTPROC_HTTP_ADDRESS: '' });
    assert.deepEqual(config.listen, {
      grpc: '0.0.0.0:1',
      http: '0.0.0.0:2',
      debugEndpoints: false,
      transport: 'native',
      maxConnections: 1024,
      idleTimeoutMs: 300_000,
    });
  });
});

describe('buildConfig: kubernetes section', () => {
  it('parses pools, defaults the target port, and keeps optional settings', () => {
    const config = buildConfig(
      `
kubernetes:
  kubeconfigPath: /home/me/.kube/config
  pools:
    - name: llama
      namespace: models
      selector: { app: vllm, model: llama }
      targetPort: 8080
      models: [llama-3-8b, llama-3-8b-instruct]
    - name: phi
      namespace: small
      selector: { app: phi }
      models: [phi-3]
  inferencePools:
    enabled: true
    namespaces: [models, small]
    modelsAnnotation: example.com/models
  backoff: { initialMs: 200, maxMs: 5000 }
  timeouts: { listSeconds: 10, watchSeconds: 120 }
`,
      {},
    );
    assert.deepEqual(config.source, {
      kind: 'kubernetes',
      kubernetes: {
        kubeconfigPath: '/home/me/.kube/config',
        pools: [
          {
            name: 'llama',
            namespace: 'models',
            selector: { app: 'vllm', model: 'llama' },
            targetPort: 8080,
            models: ['llama-3-8b', 'llama-3-8b-instruct'],
          },
          { name: 'phi', namespace: 'small', selector: { app: 'phi' }, targetPort: 8000, models: ['phi-3'] },
        ],
        inferencePools: { enabled: true, namespaces: ['models', 'small'], modelsAnnotation: 'example.com/models' },
        backoff: { initialMs: 200, maxMs: 5000 },
        timeouts: { listSeconds: 10, watchSeconds: 120 },
      },
    });
  });

  it('the minimal section has only pools', () => {
    const config = buildConfig(K8S_POOL, {});
    assert.deepEqual(config.source, {
      kind: 'kubernetes',
      kubernetes: { pools: [{ name: 'llama', namespace: 'models', selector: { app: 'vllm' }, targetPort: 8000, models: ['llama-3-8b'] }] },
    });
  });

  it('inferencePools alone (no static pools) is enough', () => {
    const config = buildConfig('kubernetes:\n  inferencePools:\n    enabled: true\n    namespaces: [models]\n', {});
    assert.deepEqual(config.source, {
      kind: 'kubernetes',
      kubernetes: { pools: [], inferencePools: { enabled: true, namespaces: ['models'] } },
    });
  });

  it('a disabled inferencePools section is dropped', () => {
    const config = buildConfig(`${K8S_POOL}  inferencePools:\n    enabled: false\n    namespaces: [x]\n`, {});
    assert.ok(config.source.kind === 'kubernetes');
    assert.equal(config.source.kubernetes.inferencePools, undefined);
  });
});

describe('buildConfig: validation errors name the field', () => {
  const pool = (extra: string): string =>
    `kubernetes:\n  pools:\n    - name: llama\n      namespace: models\n      selector: { app: vllm }\n      models: [m]\n${extra}`;
  const cases: ReadonlyArray<{ name: string; fileText: string; message: string | RegExp }> = [
    { name: 'invalid YAML', fileText: 'listen: [unclosed\n', message: /^config file is not valid YAML: .+/ },
    {
      name: 'duplicate keys are invalid YAML',
      fileText: 'logLevel: info\nlogLevel: debug\n',
      message: /^config file is not valid YAML: .+/,
    },
    { name: 'top level is a list', fileText: '- listen\n', message: 'config file: expected a mapping at the top level' },
    { name: 'top level is a scalar', fileText: 'hello\n', message: 'config file: expected a mapping at the top level' },
    { name: 'listen is a scalar', fileText: 'listen: 9002\n', message: 'listen: expected a mapping' },
    { name: 'routing is a list', fileText: 'routing: [1]\n', message: 'routing: expected a mapping' },
    { name: 'quarantine is a string', fileText: 'quarantine: off\n', message: 'quarantine: expected a mapping' },
    { name: 'listen.grpc is a number', fileText: 'listen:\n  grpc: 9002\n', message: 'listen.grpc: expected a non-empty string' },
    { name: 'listen.http is empty', fileText: 'listen:\n  http: ""\n', message: 'listen.http: expected a non-empty string' },
    {
      name: 'listen.transport unknown',
      fileText: 'listen:\n  transport: grpc\n',
      message: 'listen.transport: expected native or grpc-js, got "grpc"',
    },
    {
      name: 'logLevel unknown',
      fileText: 'logLevel: verbose\n',
      message: 'logLevel: expected one of fatal, error, warn, info, debug, trace, silent, got "verbose"',
    },
    {
      name: 'logLevel upper case',
      fileText: 'logLevel: DEBUG\n',
      message: 'logLevel: expected one of fatal, error, warn, info, debug, trace, silent, got "DEBUG"',
    },
    { name: 'negative fallbacks', fileText: 'routing:\n  fallbacks: -1\n', message: 'routing.fallbacks: expected a number ≥ 0, got -1' },
    {
      name: 'fallbacks as words',
      fileText: 'routing:\n  fallbacks: two\n',
      message: 'routing.fallbacks: expected a number ≥ 0, got "two"',
    },
    {
      name: 'fallbacks as a boolean',
      fileText: 'routing:\n  fallbacks: true\n',
      message: 'routing.fallbacks: expected a number ≥ 0, got true',
    },
    {
      name: 'zero body limit',
      fileText: 'routing:\n  maxRequestBodyBytes: 0\n',
      message: 'routing.maxRequestBodyBytes: expected a number ≥ 1, got 0',
    },
    {
      name: 'negative inspection limit',
      fileText: 'routing:\n  maxInspectedBodyBytes: -5\n',
      message: 'routing.maxInspectedBodyBytes: expected a number ≥ 0, got -5',
    },
    {
      name: 'zero failure threshold',
      fileText: 'quarantine:\n  consecutiveFailures: 0\n',
      message: 'quarantine.consecutiveFailures: expected a number ≥ 1, got 0',
    },
    {
      name: 'negative base backoff',
      fileText: 'quarantine:\n  baseSeconds: -1\n',
      message: 'quarantine.baseSeconds: expected a number ≥ 0, got -1',
    },
    {
      name: 'infinite max backoff',
      fileText: 'quarantine:\n  maxSeconds: .inf\n',
      message: /^quarantine\.maxSeconds: expected a number ≥ 0/,
    },
    { name: 'NaN max backoff', fileText: 'quarantine:\n  maxSeconds: .nan\n', message: /^quarantine\.maxSeconds: expected a number ≥ 0/ },
    {
      name: 'negative shutdown grace',
      fileText: 'shutdownGraceSeconds: -2\n',
      message: 'shutdownGraceSeconds: expected a number ≥ 0, got -2',
    },
    { name: 'static is a string', fileText: 'static: endpoints.yaml\n', message: 'static: expected a mapping' },
    { name: 'static.path empty', fileText: 'static:\n  path: ""\n', message: 'static.path: expected a non-empty string' },
    { name: 'kubernetes is a list', fileText: 'kubernetes: [a]\n', message: 'kubernetes: expected a mapping' },
    {
      name: 'kubernetes without pools',
      fileText: 'kubernetes: {}\n',
      message: 'kubernetes.pools: define at least one pool, or enable inferencePools',
    },
    {
      name: 'kubernetes with an empty pool list',
      fileText: 'kubernetes:\n  pools: []\n',
      message: 'kubernetes.pools: define at least one pool, or enable inferencePools',
    },
    { name: 'kubernetes null', fileText: 'kubernetes:\n', message: 'kubernetes.pools: define at least one pool, or enable inferencePools' },
    { name: 'pools is a mapping', fileText: 'kubernetes:\n  pools: { llama: {} }\n', message: 'kubernetes.pools: expected a list' },
    { name: 'pool is a scalar', fileText: 'kubernetes:\n  pools: [llama]\n', message: 'kubernetes.pools[0]: expected a mapping' },
    {
      name: 'pool without selector',
      fileText: 'kubernetes:\n  pools:\n    - { name: a, namespace: n, models: [m] }\n',
      message: 'kubernetes.pools[0].selector: required (label key: value pairs)',
    },
    {
      name: 'empty selector',
      fileText: 'kubernetes:\n  pools:\n    - { name: a, namespace: n, selector: {}, models: [m] }\n',
      message: 'kubernetes.pools[0].selector: required (label key: value pairs)',
    },
    {
      name: 'selector value not a string',
      fileText: 'kubernetes:\n  pools:\n    - { name: a, namespace: n, selector: { tier: 1 }, models: [m] }\n',
      message: 'kubernetes.pools[0].selector.tier: expected a string',
    },
    {
      name: 'pool without name',
      fileText: 'kubernetes:\n  pools:\n    - { namespace: n, selector: { a: b }, models: [m] }\n',
      message: 'kubernetes.pools[0].name: required',
    },
    {
      name: 'pool with empty namespace',
      fileText: 'kubernetes:\n  pools:\n    - { name: a, namespace: "", selector: { a: b }, models: [m] }\n',
      message: 'kubernetes.pools[0].namespace: expected a non-empty string',
    },
    {
      name: 'pool with port 0',
      fileText: 'kubernetes:\n  pools:\n    - { name: a, namespace: n, selector: { a: b }, targetPort: 0, models: [m] }\n',
      message: 'kubernetes.pools[0].targetPort: expected a number ≥ 1, got 0',
    },
    {
      name: 'pool without models',
      fileText: 'kubernetes:\n  pools:\n    - { name: a, namespace: n, selector: { a: b } }\n',
      message: 'kubernetes.pools[0].models: expected a list of non-empty strings',
    },
    {
      name: 'pool with an empty model name',
      fileText: 'kubernetes:\n  pools:\n    - { name: a, namespace: n, selector: { a: b }, models: [""] }\n',
      message: 'kubernetes.pools[0].models: expected a list of non-empty strings',
    },
    {
      name: 'the second pool is named by index',
      fileText:
        'kubernetes:\n  pools:\n    - { name: a, namespace: n, selector: { a: b }, models: [m] }\n    - { name: b, namespace: n, selector: { a: b }, models: m }\n',
      message: 'kubernetes.pools[1].models: expected a list of non-empty strings',
    },
    {
      name: 'inferencePools namespaces not a list',
      fileText: 'kubernetes:\n  inferencePools: { enabled: true, namespaces: models }\n',
      message: 'kubernetes.inferencePools.namespaces: expected a list of non-empty strings',
    },
    { name: 'backoff without maxMs', fileText: pool('  backoff: { initialMs: 100 }\n'), message: 'kubernetes.backoff.maxMs: required' },
    {
      name: 'two pools with one name',
      fileText:
        'kubernetes:\n  pools:\n    - { name: a, namespace: n, selector: { a: b }, models: [m] }\n    - { name: a, namespace: o, selector: { a: b }, models: [m] }\n',
      message: 'kubernetes.pools[1].name: "a" is already the name of kubernetes.pools[0] (pool names must be unique)',
    },
    {
      name: 'inferencePools enabled without namespaces',
      fileText: 'kubernetes:\n  inferencePools: { enabled: true }\n',
      message: 'kubernetes.inferencePools.namespaces: list at least one namespace whose InferencePools to watch',
    },
    {
      name: 'inferencePools.enabled as a string',
      fileText: 'kubernetes:\n  inferencePools: { enabled: "yes", namespaces: [m] }\n',
      message: 'kubernetes.inferencePools.enabled: expected true or false, got "yes"',
    },
    {
      name: 'TLS enabled as a word',
      fileText: 'listen:\n  tls: { enabled: on }\n',
      message: 'listen.tls.enabled: expected true or false, got "on"',
    },
    {
      name: 'a pool model list holding null',
      fileText: 'kubernetes:\n  pools:\n    - { name: a, namespace: n, selector: { a: b }, models: [~] }\n',
      message: 'kubernetes.pools[0].models: expected a list of non-empty strings',
    },
    {
      name: 'backoff max below initial',
      fileText: pool('  backoff: { initialMs: 500, maxMs: 100 }\n'),
      message: 'kubernetes.backoff.maxMs: must be ≥ initialMs (500)',
    },
    {
      name: 'backoff initial zero',
      fileText: pool('  backoff: { initialMs: 0, maxMs: 100 }\n'),
      message: 'kubernetes.backoff.initialMs: expected a number ≥ 1, got 0',
    },
    {
      name: 'check path not absolute',
      fileText: 'quarantine:\n  checkPath: health\n',
      message: 'quarantine.checkPath: expected a path starting with "/" (or empty for a TCP connect)',
    },
    {
      name: 'check timeout zero',
      fileText: 'quarantine:\n  checkTimeoutSeconds: 0\n',
      message: 'quarantine.checkTimeoutSeconds: expected a number of seconds above 0',
    },
    {
      name: 'watch timeout zero',
      fileText: pool('  timeouts: { watchSeconds: 0 }\n'),
      message: 'kubernetes.timeouts.watchSeconds: expected a number ≥ 1, got 0',
    },
  ];
  for (const c of cases) {
    it(c.name, () => rejects(c.fileText, {}, c.message));
  }

  it('a logLevel of the wrong type is rejected, not silently replaced by info', () => {
    for (const value of ['3', 'true', '[debug]']) rejects(`logLevel: ${value}\n`, {}, /^logLevel: /);
  });

  it('a targetPort above 65535 or not an integer is rejected', () => {
    rejects(pool('').replace('models: [m]', 'models: [m]\n      targetPort: 70000'), {}, /^kubernetes\.pools\[0\]\.targetPort: /);
    rejects(pool('').replace('models: [m]', 'models: [m]\n      targetPort: 8000.5'), {}, /^kubernetes\.pools\[0\]\.targetPort: /);
  });
});

describe('buildConfig: the result is deeply frozen', () => {
  it('every nested object and array rejects writes', () => {
    const config = buildConfig(K8S_POOL, {});
    assert.ok(config.source.kind === 'kubernetes');
    const k8s = config.source.kubernetes;
    const firstPool = k8s.pools[0];
    assert.ok(firstPool !== undefined);
    const nested: Array<[string, object]> = [
      ['config', config],
      ['listen', config.listen],
      ['routing', config.routing],
      ['quarantine', config.quarantine],
      ['source', config.source],
      ['kubernetes', k8s],
      ['pools', k8s.pools],
      ['pools[0]', firstPool],
      ['pools[0].selector', firstPool.selector],
      ['pools[0].models', firstPool.models],
    ];
    for (const [where, value] of nested) assert.ok(Object.isFrozen(value), `${where} is frozen`);
    assert.throws(() => {
      (config.routing as { fallbacks: number }).fallbacks = 9;
    }, TypeError);
    assert.throws(() => firstPool.models.push('x'), TypeError);
    assert.equal(config.routing.fallbacks, 2);
  });
});

describe('buildConfig: misspelt nested settings are refused, not ignored', () => {
  const base = 'kubernetes:\n  pools:\n    - { name: a, namespace: n, selector: { a: b }, models: [m]';
  const cases: Array<[string, string]> = [
    ['static:\n  pth: x.yaml\n', 'static.pth: unknown setting'],
    [`${base}, targetport: 9000 }\n`, 'kubernetes.pools[0].targetport: unknown setting'],
    [`${base} }\n  kubeconfig: /k\n`, 'kubernetes.kubeconfig: unknown setting'],
    [`${base} }\n  inferencePools: { enable: true }\n`, 'kubernetes.inferencePools.enable: unknown setting'],
    [`${base} }\n  timeouts: { watchSecond: 5 }\n`, 'kubernetes.timeouts.watchSecond: unknown setting'],
    [`${base} }\n  backoff: { initialMs: 1, maxMs: 2, max: 3 }\n`, 'kubernetes.backoff.max: unknown setting'],
    ['routing:\n  fallbacks: 1.5\n', 'routing.fallbacks: expected a whole number, got 1.5'],
    ['quarantine:\n  consecutiveFailures: 2.5\n', 'quarantine.consecutiveFailures: expected a whole number, got 2.5'],
  ];
  for (const [text, message] of cases) {
    it(message, () => {
      assert.throws(
        () => buildConfig(text, {}),
        (err: Error) => err instanceof ConfigError && err.message.startsWith(message),
      );
    });
  }
});

describe('gRPC TLS, pool scope and destination format', () => {
  it('reads TLS with files, self-signed TLS, and plaintext', () => {
    const files = buildConfig('listen:\n  tls:\n    enabled: true\n    certFile: /tls/tls.crt\n    keyFile: /tls/tls.key\n', {});
    assert.deepEqual(files.listen.tls, { mode: 'files', certFile: '/tls/tls.crt', keyFile: '/tls/tls.key' });
    assert.deepEqual(buildConfig('listen:\n  tls:\n    enabled: true\n', {}).listen.tls, { mode: 'self-signed' });
    assert.equal(buildConfig('listen:\n  tls:\n    enabled: false\n', {}).listen.tls, undefined);
  });

  it('rejects half a TLS key pair and files without enabled', () => {
    assert.throws(() => buildConfig('listen:\n  tls:\n    enabled: true\n    certFile: /a\n', {}), /both certFile and keyFile/);
    assert.throws(() => buildConfig('listen:\n  tls:\n    certFile: /a\n    keyFile: /b\n', {}), /listen\.tls\.enabled/);
  });

  it('reads the pool scope and the destination format', () => {
    const config = buildConfig('routing:\n  pool: models/llama\n  destinationFormat: single\n', {});
    assert.equal(config.routing.pool, 'models/llama');
    assert.equal(config.routing.destinationFormat, 'single');
    assert.throws(() => buildConfig('routing:\n  destinationFormat: csv\n', {}), /routing\.destinationFormat: expected list or single/);
  });
});

describe('buildConfig: rules that span fields hold at their boundary and fail just past it', () => {
  const cases: Array<{ name: string; accepted: string; refused: string; message: string | RegExp }> = [
    {
      name: 'quarantine.maxSeconds ≥ baseSeconds',
      accepted: 'quarantine: { baseSeconds: 20, maxSeconds: 20 }\n',
      refused: 'quarantine: { baseSeconds: 20, maxSeconds: 19.5 }\n',
      message: 'quarantine.maxSeconds: must be ≥ quarantine.baseSeconds (20), got 19.5',
    },
    {
      name: 'quarantine.maxSeconds alone is held against the default baseSeconds (10)',
      accepted: 'quarantine: { maxSeconds: 10 }\n',
      refused: 'quarantine: { maxSeconds: 5 }\n',
      message: 'quarantine.maxSeconds: must be ≥ quarantine.baseSeconds (10), got 5',
    },
    {
      name: 'quarantine.baseSeconds alone is held against the default maxSeconds (300)',
      accepted: 'quarantine: { baseSeconds: 300 }\n',
      refused: 'quarantine: { baseSeconds: 301 }\n',
      message: 'quarantine.maxSeconds: must be ≥ quarantine.baseSeconds (301), got 300',
    },
    {
      name: 'kubernetes.backoff.maxMs ≥ initialMs',
      accepted: `${K8S_POOL}  backoff: { initialMs: 500, maxMs: 500 }\n`,
      refused: `${K8S_POOL}  backoff: { initialMs: 500, maxMs: 499 }\n`,
      message: 'kubernetes.backoff.maxMs: must be ≥ initialMs (500)',
    },
    {
      name: 'picker.metrics.staleAfterSeconds ≥ intervalSeconds',
      accepted: 'picker:\n  metrics: { intervalSeconds: 5, staleAfterSeconds: 5 }\n',
      refused: 'picker:\n  metrics: { intervalSeconds: 5, staleAfterSeconds: 4.9 }\n',
      message: /^picker\.metrics\.staleAfterSeconds: must be ≥ intervalSeconds/,
    },
    {
      name: 'TLS files need enabled: true',
      accepted: 'listen:\n  tls: { enabled: true, certFile: /a, keyFile: /b }\n',
      refused: 'listen:\n  tls: { certFile: /a, keyFile: /b }\n',
      message: 'listen.tls.enabled: set it to true to use certFile/keyFile',
    },
    {
      name: 'TLS files come as a pair',
      accepted: 'listen:\n  tls: { enabled: true }\n',
      refused: 'listen:\n  tls: { enabled: true, keyFile: /b }\n',
      message: 'listen.tls: give both certFile and keyFile, or neither for a self-signed certificate',
    },
    {
      name: 'a client CA (mutual TLS) needs the serving pair from files',
      accepted: 'listen:\n  tls: { enabled: true, certFile: /a, keyFile: /b, clientCaFile: /ca }\n',
      refused: 'listen:\n  tls: { enabled: true, clientCaFile: /ca }\n',
      message: 'listen.tls.clientCaFile: needs listen.tls.enabled with certFile and keyFile (mutual TLS serves a certificate of its own)',
    },
    {
      name: 'enabled InferencePools name a namespace',
      accepted: 'kubernetes:\n  inferencePools: { enabled: true, namespaces: [models] }\n',
      refused: 'kubernetes:\n  inferencePools: { enabled: true }\n',
      message: 'kubernetes.inferencePools.namespaces: list at least one namespace whose InferencePools to watch',
    },
  ];
  for (const c of cases) {
    it(c.name, () => {
      assert.doesNotThrow(() => buildConfig(c.accepted, {}));
      rejects(c.refused, {}, c.message);
    });
  }
});

describe('buildConfig: listen addresses, one endpoint source (what would fail at start fails here)', () => {
  const grpcForms = 'host:port or unix:///path/to.sock (port 1-65535, or 0 for any free port)';
  const accepted = ['0.0.0.0:9002', '[::]:9002', '127.0.0.1:0', 'localhost:65535', 'unix:///run/llm-extproc/grpc.sock'];
  for (const address of accepted)
    it(`listen.grpc ${address} is accepted`, () => {
      assert.equal(buildConfig(`listen:\n  grpc: "${address}"\n`, {}).listen.grpc, address);
    });

  const cases: ReadonlyArray<{ name: string; fileText?: string; env?: Env; message: string }> = [
    {
      name: 'a port above 65535',
      fileText: 'listen:\n  grpc: "127.0.0.1:99999"\n',
      message: `listen.grpc: expected ${grpcForms}, got "127.0.0.1:99999"`,
    },
    { name: 'no port', fileText: 'listen:\n  grpc: localhost\n', message: `listen.grpc: expected ${grpcForms}, got "localhost"` },
    { name: 'no host', fileText: 'listen:\n  grpc: ":9002"\n', message: `listen.grpc: expected ${grpcForms}, got ":9002"` },
    {
      name: 'a named port',
      fileText: 'listen:\n  grpc: "0.0.0.0:grpc"\n',
      message: `listen.grpc: expected ${grpcForms}, got "0.0.0.0:grpc"`,
    },
    { name: 'a socket without a path', fileText: 'listen:\n  grpc: "unix:"\n', message: `listen.grpc: expected ${grpcForms}, got "unix:"` },
    {
      name: 'the HTTP listener on a Unix socket',
      fileText: 'listen:\n  http: unix:///tmp/ops.sock\n',
      message: 'listen.http: expected host:port (port 1-65535, or 0 for any free port), got "unix:///tmp/ops.sock"',
    },
    {
      name: 'LLM_EXTPROC_GRPC_ADDRESS, named as the variable',
      env: { LLM_EXTPROC_GRPC_ADDRESS: 'nonsense' },
      message: `LLM_EXTPROC_GRPC_ADDRESS: expected ${grpcForms}, got "nonsense"`,
    },
    {
      name: 'LLM_EXTPROC_HTTP_ADDRESS, named as the variable',
      env: { LLM_EXTPROC_HTTP_ADDRESS: '0.0.0.0:70000' },
      message: 'LLM_EXTPROC_HTTP_ADDRESS: expected host:port (port 1-65535, or 0 for any free port), got "0.0.0.0:70000"',
    },
    {
      name: 'both listeners on one port (different hosts too: the default host binds them all)',
      fileText: 'listen:\n  grpc: "127.0.0.1:9100"\n  http: "0.0.0.0:9100"\n',
      message: "listen.http: port 9100 is also listen.grpc's port; give each listener its own port",
    },
    {
      name: 'the environment moving a listener onto the other one',
      env: { LLM_EXTPROC_HTTP_ADDRESS: '0.0.0.0:9002' },
      message: "listen.http: port 9002 is also listen.grpc's port; give each listener its own port",
    },
    {
      name: 'static and kubernetes together',
      fileText: `static:\n  path: e.yaml\n${K8S_POOL}`,
      message: 'static: set together with kubernetes; choose one endpoint source',
    },
    ...['10.0.0.1', '10.0.0.1:0', 'unix:///tmp/g.sock', '10.0.0.1:70000'].map((address) => ({
      name: `a peer address peers cannot dial: ${address}`,
      fileText: `listen:\n  peerAddress: "${address}"\n`,
      message: `listen.peerAddress: expected the host:port peers reach this replica's gRPC port on (port 1-65535), got "${address}"`,
    })),
    {
      name: 'LLM_EXTPROC_PEER_ADDRESS, named as the variable',
      env: { LLM_EXTPROC_PEER_ADDRESS: 'nonsense' },
      message: `LLM_EXTPROC_PEER_ADDRESS: expected the host:port peers reach this replica's gRPC port on (port 1-65535), got "nonsense"`,
    },
    {
      name: 'a peer address with mutual TLS (peers present no client certificate)',
      fileText:
        'listen:\n  peerAddress: "10.0.0.1:9002"\n  tls:\n    enabled: true\n    certFile: c.pem\n    keyFile: k.pem\n    clientCaFile: ca.pem\n',
      message:
        'listen.peerAddress: peers forward access-log entries to each other with no client certificate, and listen.tls.clientCaFile makes every replica require one; unset one of them',
    },
  ];
  for (const c of cases) it(c.name, () => rejects(c.fileText, c.env ?? {}, c.message));

  it('a peer address from the file or the environment (which wins), with TLS or without', () => {
    assert.equal(buildConfig('listen:\n  peerAddress: "10.0.0.1:9002"\n', {}).listen.peerAddress, '10.0.0.1:9002');
    const env = { LLM_EXTPROC_PEER_ADDRESS: '[fd00::1]:9002' };
    assert.equal(buildConfig('listen:\n  peerAddress: "10.0.0.1:9002"\n', env).listen.peerAddress, '[fd00::1]:9002');
    assert.equal(buildConfig('listen:\n  tls:\n    enabled: true\n', env).listen.peerAddress, '[fd00::1]:9002');
    assert.equal(buildConfig(undefined, {}).listen.peerAddress, undefined, 'absent by default: nothing is guessed');
  });

  it('two listeners on port 0, or gRPC on a socket, never clash', () => {
    assert.equal(buildConfig('listen:\n  grpc: "127.0.0.1:0"\n  http: "127.0.0.1:0"\n', {}).listen.http, '127.0.0.1:0');
    assert.equal(buildConfig('listen:\n  grpc: unix:///tmp/g.sock\n  http: "0.0.0.0:9002"\n', {}).listen.http, '0.0.0.0:9002');
  });
});

describe('buildConfig: relative paths start from the config file’s folder; environment paths from the working directory', () => {
  const base = { configDir: '/etc/llm', cwd: '/work', home: '/home/op' };
  const tls = 'listen:\n  tls: { enabled: true, certFile: tls/tls.crt, keyFile: /abs/tls.key, clientCaFile: ~/ca.crt }\n';
  it('static.path, the default endpoints file, TLS files, `~/`', () => {
    assert.deepEqual(buildConfig('static:\n  path: pools/e.yaml\n', {}, base).source, { kind: 'static', path: '/etc/llm/pools/e.yaml' });
    assert.deepEqual(buildConfig('', {}, base).source, { kind: 'static', path: '/etc/llm/endpoints.yaml' });
    assert.deepEqual(buildConfig(tls, {}, base).listen.tls, {
      mode: 'files',
      certFile: '/etc/llm/tls/tls.crt',
      keyFile: '/abs/tls.key',
      clientCaFile: '/home/op/ca.crt',
    });
  });

  it('kubernetes.kubeconfigPath and a relative gRPC socket', () => {
    const config = buildConfig(`listen:\n  grpc: unix:run/g.sock\n${K8S_POOL}  kubeconfigPath: ../kube/config\n`, {}, base);
    assert.equal(config.listen.grpc, 'unix:///etc/llm/run/g.sock');
    assert.equal(config.source.kind === 'kubernetes' ? config.source.kubernetes.kubeconfigPath : undefined, '/etc/kube/config');
  });

  it('LLM_EXTPROC_ENDPOINTS_FILE and LLM_EXTPROC_GRPC_ADDRESS: from the working directory', () => {
    const config = buildConfig('', { LLM_EXTPROC_ENDPOINTS_FILE: 'e.yaml', LLM_EXTPROC_GRPC_ADDRESS: 'unix:g.sock' }, base);
    assert.deepEqual(config.source, { kind: 'static', path: '/work/e.yaml' });
    assert.equal(config.listen.grpc, 'unix:///work/g.sock');
  });
});
