// The command line as a newcomer meets it: `llm-extproc --help`, `--version`, a mistyped flag,
// `--check-config` on good, bad and missing files, and the server refusing a bad config. Each runs
// the real program (`node dist/src/main.js`) and asserts its exit status, stdout and stderr.

import assert from 'node:assert/strict';
import { readdirSync, readFileSync, statSync } from 'node:fs';
import { mkdir, mkdtemp, rm, writeFile } from 'node:fs/promises';
import { createServer } from 'node:net';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { makeSelfSignedIdentity } from '../../src/grpc/tls-identity.js';
import { repoRoot } from '../../scripts/repo-root.js';
import { runExtprocCommand, startExtprocProcess } from '../support/extproc-process.js';
import type { CommandResult } from '../support/extproc-process.js';

const PACKAGE = JSON.parse(readFileSync(join(repoRoot(), 'package.json'), 'utf8')) as { version: string };
/** What the primary hands its workers; not a setting. */
const INTERNAL_VARIABLES = new Set(['LLM_EXTPROC_WORKER_INDEX']);

/** Every LLM_EXTPROC_* and OTEL_* variable the server's source reads (so --help cannot fall behind the code). */
function variablesInSource(dir = join(repoRoot(), 'src')): Set<string> {
  const found = new Set<string>();
  for (const entry of readdirSync(dir)) {
    const path = join(dir, entry);
    if (statSync(path).isDirectory()) for (const name of variablesInSource(path)) found.add(name);
    else if (entry.endsWith('.ts'))
      for (const match of readFileSync(path, 'utf8').matchAll(/(?:LLM_EXTPROC|OTEL)_[A-Z_]+/g)) found.add(match[0]);
  }
  for (const name of INTERNAL_VARIABLES) found.delete(name);
  return found;
}

const SYNOPSIS = /^Usage: llm-extproc \[--config PATH\]/m;

/** A refused command line: exit 2, exactly `llm-extproc: <message>` then the short usage, no stack trace. */
function assertUsageError(result: CommandResult, message: string): void {
  assert.equal(result.code, 2, result.stderr);
  assert.equal(result.stdout, '');
  const [first, ...rest] = result.stderr.split('\n');
  assert.equal(first, `llm-extproc: ${message}`);
  assert.match(rest.join('\n'), SYNOPSIS);
  assert.doesNotMatch(result.stderr, /^\s+at /m, 'no stack trace');
  assert.doesNotMatch(result.stderr, /ERR_PARSE_ARGS/);
}

/** A refused configuration: exit 1, one line on stderr, nothing on stdout. */
function assertConfigError(result: CommandResult, message: string | RegExp): void {
  assert.equal(result.code, 1, `${result.stdout}\n${result.stderr}`);
  assert.equal(result.stdout, '');
  const lines = result.stderr.trimEnd().split('\n');
  assert.equal(lines.length, 1, result.stderr);
  if (typeof message === 'string') assert.equal(lines[0], message);
  else assert.match(lines[0], message);
}

describe('llm-extproc --help and --version', () => {
  for (const flag of ['--help', '-h']) {
    it(`${flag}: the usage, every flag and every environment variable, exit 0`, async () => {
      const result = await runExtprocCommand([flag]);
      assert.equal(result.code, 0, result.stderr);
      assert.equal(result.stderr, '');
      assert.match(result.stdout, SYNOPSIS);
      for (const option of ['-c, --config PATH', '--workers N|auto', '--check-config', '-h, --help', '-V, --version'])
        assert.ok(result.stdout.includes(option), `--help lists ${option}`);
      const variables = variablesInSource();
      assert.ok(variables.size >= 6, `found the variables in src: ${[...variables].join(', ')}`);
      for (const name of variables) assert.ok(result.stdout.includes(name), `--help lists ${name}`);
      assert.match(result.stdout, /^Exit status: 0 .*\n1 invalid configuration .* 2 a command line/m);
    });
  }

  for (const flag of ['--version', '-V']) {
    it(`${flag}: the package version, exit 0`, async () => {
      const result = await runExtprocCommand([flag]);
      assert.deepEqual(
        { code: result.code, stdout: result.stdout, stderr: result.stderr },
        { code: 0, stdout: `llm-extproc ${PACKAGE.version} (node ${process.version})\n`, stderr: '' },
      );
    });
  }

  it('--help wins over the other flags (and starts nothing)', async () => {
    const result = await runExtprocCommand(['--config', '/nonexistent.yaml', '--help']);
    assert.equal(result.code, 0);
    assert.match(result.stdout, SYNOPSIS);
  });
});

describe('llm-extproc: a command line it cannot run gets one line and the usage, exit 2', () => {
  const cases: ReadonlyArray<{ args: string[]; message: string }> = [
    { args: ['--bogus'], message: 'unknown option --bogus' },
    { args: ['-x'], message: 'unknown option -x' },
    { args: ['--config'], message: '--config needs a value (--config PATH)' },
    { args: ['--config', '--workers', '2'], message: '--config needs a value (--config PATH)' },
    { args: ['--workers', '0'], message: '--workers: expected a positive integer or "auto", got "0"' },
    { args: ['--help=yes'], message: '--help takes no value' },
    { args: ['-c', 'a.yaml', '-c', 'b.yaml'], message: '--config given twice' },
    { args: ['serve'], message: 'unexpected argument "serve"' },
  ];
  for (const c of cases) {
    it(c.args.join(' '), async () => assertUsageError(await runExtprocCommand(c.args), c.message));
  }
});

describe('llm-extproc --check-config', () => {
  let dir = '';
  let endpoints = '';
  before(async () => {
    dir = await mkdtemp(join(tmpdir(), 'llm-extproc-cli-'));
    endpoints = join(dir, 'endpoints.yaml');
    await writeFile(
      endpoints,
      'pools:\n  - name: llama\n    models: [llama-3-8b]\n    endpoints:\n      - 10.0.0.1:8000\n      - { address: 10.0.0.2:8000, state: NotReady }\n',
    );
  });
  after(() => rm(dir, { recursive: true, force: true }));

  async function configFile(name: string, text: string): Promise<string> {
    const path = join(dir, name);
    await writeFile(path, text);
    return path;
  }

  it('a good file: exit 0, the effective config with every default on stdout, the endpoints counted', async () => {
    const path = await configFile('good.yaml', `static:\n  path: ${endpoints}\nquarantine:\n  baseSeconds: 20\n`);
    const result = await runExtprocCommand(['--check-config', '--config', path], { env: { LLM_EXTPROC_LOG_LEVEL: 'debug' } });
    assert.equal(result.code, 0, result.stderr);
    assert.equal(result.stderr, `llm-extproc: configuration is valid (${path})\n`);
    const report = JSON.parse(result.stdout) as {
      configFile: string;
      workers: number;
      config: {
        listen: { grpc: string; http: string; transport: string };
        logLevel: string;
        source: unknown;
        quarantine: { baseMs: number; maxMs: number; threshold: number };
        shutdownGraceMs: number;
        picker: { prefix: { keyBlocks: number } };
      };
      endpoints: unknown;
    };
    assert.equal(report.configFile, path);
    assert.equal(report.workers, 1);
    assert.deepEqual(
      report.config.listen,
      {
        grpc: '0.0.0.0:9002',
        http: '0.0.0.0:9090',
        debugEndpoints: false,
        transport: 'native',
        maxConnections: 1024,
        idleTimeoutMs: 300000,
      },
      'defaults filled in',
    );
    assert.equal(report.config.logLevel, 'debug', 'the environment override applied');
    assert.deepEqual(report.config.source, { kind: 'static', path: endpoints });
    assert.deepEqual(report.config.quarantine, { threshold: 3, baseMs: 20_000, maxMs: 300_000, checkPath: '', checkTimeoutMs: 500 });
    assert.equal(report.config.shutdownGraceMs, 20_000);
    assert.equal(report.config.picker.prefix.keyBlocks, 16, 'picker defaults too');
    assert.deepEqual(report.endpoints, {
      source: 'static',
      file: endpoints,
      pools: [{ name: 'llama', models: ['llama-3-8b'], endpoints: 2, ready: 1 }],
    });
  });

  it('starts nothing: a good file whose ports are taken still checks out', async () => {
    const holder = createServer();
    await new Promise<void>((resolve) => holder.listen(0, '127.0.0.1', resolve));
    try {
      const port = (holder.address() as AddressInfo).port;
      const path = await configFile(
        'taken.yaml',
        `listen:\n  grpc: 127.0.0.1:${port}\n  http: 127.0.0.1:0\nstatic:\n  path: ${endpoints}\n`,
      );
      const result = await runExtprocCommand(['--check-config', '-c', path]);
      assert.equal(result.code, 0, result.stderr);
    } finally {
      holder.close();
    }
  });

  it('a Kubernetes source: the config is checked, the API server is not contacted', async () => {
    const path = await configFile(
      'kube.yaml',
      'kubernetes:\n  kubeconfigPath: /nonexistent/kubeconfig\n  pools:\n    - { name: p, namespace: m, selector: { app: vllm }, models: [x] }\n',
    );
    const result = await runExtprocCommand(['--check-config', '-c', path]);
    assert.equal(result.code, 0, result.stderr);
    assert.deepEqual((JSON.parse(result.stdout) as { endpoints: unknown }).endpoints, { source: 'kubernetes', contacted: false });
  });

  it('a bad file: exit 1 and one line naming the file and the field', async () => {
    const path = await configFile('bad.yaml', `static:\n  path: ${endpoints}\nquarantine:\n  baseSeconds: 20\n  maxSeconds: 10\n`);
    assertConfigError(
      await runExtprocCommand(['--check-config', '--config', path]),
      `llm-extproc: invalid configuration (${path}): quarantine.maxSeconds: must be ≥ quarantine.baseSeconds (20), got 10`,
    );
    const misspelt = await configFile('misspelt.yaml', 'routng:\n  fallbacks: 1\n');
    assertConfigError(
      await runExtprocCommand(['--check-config', '--config', misspelt]),
      /^llm-extproc: invalid configuration \(.*misspelt\.yaml\): routng: unknown setting \(expected one of listen, /,
    );
    const notYaml = await configFile('not-yaml.yaml', 'listen: [\n');
    assertConfigError(
      await runExtprocCommand(['--check-config', '--config', notYaml]),
      /^llm-extproc: invalid configuration \(.*not-yaml\.yaml\): config file is not valid YAML: /,
    );
  });

  it('a missing file: exit 1 and one line saying it cannot be read', async () => {
    const path = join(dir, 'missing.yaml');
    assertConfigError(
      await runExtprocCommand(['--check-config', '--config', path]),
      `llm-extproc: invalid configuration (${path}): cannot read the config file: ENOENT: no such file or directory, open '${path}'`,
    );
    // LLM_EXTPROC_CONFIG names the file when --config does not.
    assertConfigError(
      await runExtprocCommand(['--check-config'], { env: { LLM_EXTPROC_CONFIG: path } }),
      `llm-extproc: invalid configuration (${path}): cannot read the config file: ENOENT: no such file or directory, open '${path}'`,
    );
  });

  it('a bad or missing endpoints file, a bad LLM_EXTPROC_WORKERS: exit 1 naming what to fix', async () => {
    const badEndpoints = await configFile('bad-endpoints.yaml', 'pools:\n  - name: p\n    models: [m]\n    endpoints: [nowhere]\n');
    const path = await configFile('ok.yaml', `static:\n  path: ${badEndpoints}\n`);
    assertConfigError(
      await runExtprocCommand(['--check-config', '-c', path]),
      `llm-extproc: endpoints file ${badEndpoints}: pools[0].endpoints[0].address: expected "host:port", got "nowhere"`,
    );
    const gone = join(dir, 'gone.yaml');
    assertConfigError(
      await runExtprocCommand(['--check-config', '-c', path], { env: { LLM_EXTPROC_ENDPOINTS_FILE: gone } }),
      `llm-extproc: endpoints file ${gone}: ENOENT: no such file or directory, open '${gone}'`,
    );
    const good = await configFile('good-endpoints.yaml', `static:\n  path: ${endpoints}\n`);
    assertConfigError(
      await runExtprocCommand(['--check-config', '-c', good], { env: { LLM_EXTPROC_WORKERS: 'many' } }),
      `llm-extproc: invalid configuration (${good}): workers: expected a positive integer or "auto", got "many"`,
    );
  });

  it('TLS files that are not a pair: exit 1 naming both files', async () => {
    const [one, other] = await Promise.all([makeSelfSignedIdentity(['a']), makeSelfSignedIdentity(['b'])]);
    const certFile = join(dir, 'tls.crt');
    const keyFile = join(dir, 'tls.key');
    await writeFile(certFile, one.cert);
    await writeFile(keyFile, other.key);
    const path = await configFile(
      'tls.yaml',
      `listen:\n  tls: { enabled: true, certFile: ${certFile}, keyFile: ${keyFile} }\nstatic:\n  path: ${endpoints}\n`,
    );
    assertConfigError(
      await runExtprocCommand(['--check-config', '-c', path]),
      new RegExp(`^llm-extproc: listen\\.tls: gRPC TLS: ${certFile} and ${keyFile} are not a usable certificate and key: `),
    );
    await writeFile(keyFile, one.key);
    assert.equal((await runExtprocCommand(['--check-config', '-c', path])).code, 0, 'the matching pair passes');
  });
});

describe('one validation path: every bad configuration stops --check-config and a real start with the same line', () => {
  let dir = '';
  let elsewhere = '';
  let endpoints = '';
  before(async () => {
    dir = await mkdtemp(join(tmpdir(), 'llm-extproc-same-check-'));
    elsewhere = await mkdtemp(join(tmpdir(), 'llm-extproc-cwd-'));
    endpoints = join(dir, 'endpoints.yaml');
    await writeFile(endpoints, 'pools:\n  - name: p\n    models: [m]\n    endpoints: [127.0.0.1:1]\n');
    const [one, other] = await Promise.all([makeSelfSignedIdentity(['a']), makeSelfSignedIdentity(['b'])]);
    await writeFile(join(dir, 'tls.crt'), one.cert);
    await writeFile(join(dir, 'tls.key'), other.key);
    await writeFile(join(dir, 'bad-endpoints.yaml'), 'pools:\n  - name: p\n    models: [m]\n    endpoints: [nowhere]\n');
    // Tokenizer directories for precise prefix matching: one without its tokenizer.json, one whose tokenizer.json is not JSON.
    await mkdir(join(dir, 'tokenizer-missing'));
    await writeFile(join(dir, 'tokenizer-missing', 'tokenizer_config.json'), '{}');
    await mkdir(join(dir, 'tokenizer-broken'));
    await writeFile(join(dir, 'tokenizer-broken', 'tokenizer_config.json'), '{}');
    await writeFile(join(dir, 'tokenizer-broken', 'tokenizer.json'), '{"model": ');
  });
  after(async () => {
    await rm(dir, { recursive: true, force: true });
    await rm(elsewhere, { recursive: true, force: true });
  });

  const grpcForms = 'host:port or unix:///path/to.sock (port 1-65535, or 0 for any free port)';
  /** The config file's text (`$E`: the good endpoints file), the environment, and the line expected after `llm-extproc: `. */
  const cases: ReadonlyArray<{ name: string; config: string; env?: Record<string, string>; line: (path: string) => string }> = [
    {
      name: 'a gRPC port above 65535',
      config: 'listen:\n  grpc: "127.0.0.1:99999"\nstatic:\n  path: $E\n',
      line: (path) => `invalid configuration (${path}): listen.grpc: expected ${grpcForms}, got "127.0.0.1:99999"`,
    },
    {
      name: 'LLM_EXTPROC_GRPC_ADDRESS=nonsense',
      config: 'static:\n  path: $E\n',
      env: { LLM_EXTPROC_GRPC_ADDRESS: 'nonsense' },
      line: (path) => `invalid configuration (${path}): LLM_EXTPROC_GRPC_ADDRESS: expected ${grpcForms}, got "nonsense"`,
    },
    {
      name: 'LLM_EXTPROC_HTTP_ADDRESS without a port',
      config: 'static:\n  path: $E\n',
      env: { LLM_EXTPROC_HTTP_ADDRESS: 'localhost' },
      line: (path) =>
        `invalid configuration (${path}): LLM_EXTPROC_HTTP_ADDRESS: expected host:port (port 1-65535, or 0 for any free port), got "localhost"`,
    },
    {
      name: 'gRPC and HTTP on the same port',
      config: 'listen:\n  grpc: "127.0.0.1:19402"\n  http: "127.0.0.1:19402"\nstatic:\n  path: $E\n',
      line: (path) =>
        `invalid configuration (${path}): listen.http: port 19402 is also listen.grpc's port; give each listener its own port`,
    },
    {
      name: 'kubernetes and static together',
      config: 'static:\n  path: $E\nkubernetes:\n  pools:\n    - { name: p, namespace: m, selector: { app: vllm }, models: [x] }\n',
      line: (path) => `invalid configuration (${path}): static: set together with kubernetes; choose one endpoint source`,
    },
    {
      name: 'a relative static.path: looked for beside the config file, not in the working directory',
      config: 'static:\n  path: missing/endpoints.yaml\n',
      line: () =>
        `endpoints file ${join(dir, 'missing', 'endpoints.yaml')}: ENOENT: no such file or directory, open '${join(dir, 'missing', 'endpoints.yaml')}'`,
    },
    {
      name: 'an endpoints file with a bad address',
      config: 'static:\n  path: bad-endpoints.yaml\n',
      line: () => `endpoints file ${join(dir, 'bad-endpoints.yaml')}: pools[0].endpoints[0].address: expected "host:port", got "nowhere"`,
    },
    {
      name: 'LLM_EXTPROC_ENDPOINTS_FILE naming nothing (relative: from the working directory)',
      config: 'static:\n  path: $E\n',
      env: { LLM_EXTPROC_ENDPOINTS_FILE: 'gone.yaml' },
      line: () =>
        `endpoints file ${join(elsewhere, 'gone.yaml')}: ENOENT: no such file or directory, open '${join(elsewhere, 'gone.yaml')}'`,
    },
    {
      name: 'TLS files that are not a pair (relative to the config file)',
      config: 'listen:\n  tls: { enabled: true, certFile: tls.crt, keyFile: tls.key }\nstatic:\n  path: $E\n',
      line: () => `listen.tls: gRPC TLS: ${join(dir, 'tls.crt')} and ${join(dir, 'tls.key')} are not a usable certificate and key: `,
    },
    {
      name: 'precise prefix matching with a tokenizer directory without tokenizer.json (relative to the config file)',
      config: 'static:\n  path: $E\npicker:\n  precise:\n    tokenizerDir: tokenizer-missing\n    events: { port: 5557 }\n',
      line: () =>
        `picker.precise.tokenizerDir: cannot read ${join(dir, 'tokenizer-missing', 'tokenizer.json')}: ENOENT: no such file or directory, open '${join(dir, 'tokenizer-missing', 'tokenizer.json')}'`,
    },
    {
      name: 'precise prefix matching with a tokenizer.json that is not JSON',
      config: 'static:\n  path: $E\npicker:\n  precise:\n    tokenizerDir: tokenizer-broken\n    events: { port: 5557 }\n',
      line: () => `picker.precise.tokenizerDir: ${join(dir, 'tokenizer-broken', 'tokenizer.json')} is not JSON: `,
    },
  ];
  for (const [i, c] of cases.entries()) {
    it(c.name, async () => {
      const path = join(dir, `case-${i}.yaml`);
      await writeFile(path, c.config.replaceAll('$E', endpoints));
      const options = { cwd: elsewhere, ...(c.env === undefined ? {} : { env: c.env }) };
      const expected = `llm-extproc: ${c.line(path)}`;
      // TLS errors end with OpenSSL's reason, which varies: the part we write is compared exactly.
      const message = expected.endsWith(': ') ? new RegExp(`^${expected.replace(/[.*+?^${}()|[\]\\]/g, '\\$&')}`) : expected;
      assertConfigError(await runExtprocCommand(['--check-config', '--config', path], options), message);
      assertConfigError(await runExtprocCommand(['--config', path], options), message);
    });
  }

  it('a relative static.path beside the config file: both find it, from any working directory', async () => {
    const path = join(dir, 'relative.yaml');
    await writeFile(path, 'listen:\n  grpc: "127.0.0.1:0"\n  http: "127.0.0.1:0"\nstatic:\n  path: endpoints.yaml\n');
    const check = await runExtprocCommand(['--check-config', '--config', path], { cwd: elsewhere });
    assert.equal(check.code, 0, check.stderr);
    assert.deepEqual((JSON.parse(check.stdout) as { config: { source: unknown } }).config.source, { kind: 'static', path: endpoints });
    const server = await startExtprocProcess({ configPath: path, cwd: elsewhere });
    try {
      await server.waitForLog(/endpoint cache synced/);
      assert.equal((await fetch(`http://127.0.0.1:${server.httpPort}/readyz`)).status, 200);
    } finally {
      await server.kill();
    }
  });

  it('a port another process holds: the server exits 1 with one line, no stack', async () => {
    const holder = createServer();
    await new Promise<void>((resolve) => holder.listen(0, '127.0.0.1', resolve));
    try {
      const port = (holder.address() as AddressInfo).port;
      for (const [listener, other] of [
        ['grpc', 'http'],
        ['http', 'grpc'],
      ] as const) {
        const path = join(dir, `taken-${listener}.yaml`);
        await writeFile(path, `listen:\n  ${listener}: "127.0.0.1:${port}"\n  ${other}: "127.0.0.1:0"\nstatic:\n  path: ${endpoints}\n`);
        const result = await runExtprocCommand(['--config', path]);
        assert.equal(result.code, 1, result.stderr);
        assert.equal(
          result.stderr,
          `llm-extproc: cannot listen on 127.0.0.1:${port}: listen EADDRINUSE: address already in use 127.0.0.1:${port}\n`,
        );
        assert.doesNotMatch(result.stdout, /"level":60|\n\s+at /, 'no fatal JSON line, no stack');
      }
    } finally {
      holder.close();
    }
  });
});

describe('llm-extproc (the server) on a bad configuration', () => {
  let dir = '';
  before(async () => {
    dir = await mkdtemp(join(tmpdir(), 'llm-extproc-cli-run-'));
  });
  after(() => rm(dir, { recursive: true, force: true }));

  it('exits 1 with the same one line as --check-config, before it opens any socket', async () => {
    const path = join(dir, 'bad.yaml');
    await writeFile(path, 'quarantine:\n  maxSeconds: 5\n');
    const expected = `llm-extproc: invalid configuration (${path}): quarantine.maxSeconds: must be ≥ quarantine.baseSeconds (10), got 5`;
    assertConfigError(await runExtprocCommand(['--config', path]), expected);
    assertConfigError(await runExtprocCommand(['--check-config', '--config', path]), expected);
  });

  it('exits 1 when the config file cannot be read', async () => {
    const path = join(dir, 'absent.yaml');
    assertConfigError(
      await runExtprocCommand(['--config', path]),
      `llm-extproc: invalid configuration (${path}): cannot read the config file: ENOENT: no such file or directory, open '${path}'`,
    );
  });

  it('exits 1 on a bad environment override, naming the variable', async () => {
    assertConfigError(
      await runExtprocCommand([], { env: { LLM_EXTPROC_LOG_LEVEL: 'loud' } }),
      'llm-extproc: invalid configuration: LLM_EXTPROC_LOG_LEVEL: expected one of fatal, error, warn, info, debug, trace, silent, got "loud"',
    );
  });
});
