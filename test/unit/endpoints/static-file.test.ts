// The static endpoints file: what each shorthand means, and an error that points at the exact
// entry for every mistake an operator can make in it.
import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { parseStaticEndpoints, StaticFileError } from '../../../src/endpoints/static-file.js';
import type { ObservedEndpoint } from '../../../src/endpoints/model.js';

function rejects(text: string, message: string | RegExp): void {
  assert.throws(
    () => parseStaticEndpoints(text),
    (err: unknown) => {
      assert.ok(err instanceof StaticFileError, `expected a StaticFileError, got ${String(err)}`);
      assert.equal(err.name, 'StaticFileError');
      if (typeof message === 'string') assert.equal(err.message, message);
      else assert.match(err.message, message);
      return true;
    },
  );
}

/** A one-pool file whose single endpoint entry is `entry` (YAML flow syntax). */
function oneEndpoint(entry: string): string {
  return `pools:\n  - name: p\n    models: [m]\n    endpoints:\n      - ${entry}\n`;
}

function endpointOf(entry: string): ObservedEndpoint {
  const pools = parseStaticEndpoints(oneEndpoint(entry));
  const endpoint = pools[0]?.endpoints[0];
  assert.ok(endpoint !== undefined);
  return endpoint;
}

const SOURCE_STATES = ['Pending', 'Starting', 'NotReady', 'CrashLoop', 'Ready', 'Terminating', 'Gone'] as const;

describe('parseStaticEndpoints: pools', () => {
  it('reads pools, their models and endpoints in file order', () => {
    const pools = parseStaticEndpoints(`
pools:
  - name: llama
    models: [llama-3-8b, llama-3-8b-instruct]
    endpoints:
      - 10.0.0.1:8000
      - 10.0.0.2:8000
  - name: phi
    models: [phi-3]
    endpoints: []
  - name: empty
    models: [tiny]
`);
    assert.deepEqual(pools, [
      {
        name: 'llama',
        models: ['llama-3-8b', 'llama-3-8b-instruct'],
        endpoints: [
          { id: '10.0.0.1:8000', address: '10.0.0.1:8000', state: 'Ready', reason: '' },
          { id: '10.0.0.2:8000', address: '10.0.0.2:8000', state: 'Ready', reason: '' },
        ],
      },
      { name: 'phi', models: ['phi-3'], endpoints: [] },
      { name: 'empty', models: ['tiny'], endpoints: [] },
    ]);
  });

  it('an empty pool list is a valid (empty) fleet', () => {
    assert.deepEqual(parseStaticEndpoints('pools: []\n'), []);
  });
});

describe('parseStaticEndpoints: endpoint entries', () => {
  const cases: ReadonlyArray<{ name: string; entry: string; expected: ObservedEndpoint }> = [
    {
      name: 'address shorthand',
      entry: '10.0.0.1:8000',
      expected: { id: '10.0.0.1:8000', address: '10.0.0.1:8000', state: 'Ready', reason: '' },
    },
    {
      name: 'host name',
      entry: 'vllm-0.models.svc:8000',
      expected: { id: 'vllm-0.models.svc:8000', address: 'vllm-0.models.svc:8000', state: 'Ready', reason: '' },
    },
    { name: 'IPv6 loopback', entry: '"[::1]:8000"', expected: { id: '[::1]:8000', address: '[::1]:8000', state: 'Ready', reason: '' } },
    {
      name: 'IPv6 full',
      entry: '"[2001:db8::7]:443"',
      expected: { id: '[2001:db8::7]:443', address: '[2001:db8::7]:443', state: 'Ready', reason: '' },
    },
    {
      name: 'mapping with address only',
      entry: '{ address: 10.0.0.1:8000 }',
      expected: { id: '10.0.0.1:8000', address: '10.0.0.1:8000', state: 'Ready', reason: '' },
    },
    {
      name: 'name becomes the id',
      entry: '{ address: 10.0.0.1:8000, name: vllm-0 }',
      expected: { id: 'vllm-0', address: '10.0.0.1:8000', state: 'Ready', reason: '' },
    },
    {
      name: 'empty name falls back to the address',
      entry: '{ address: 10.0.0.1:8000, name: "" }',
      expected: { id: '10.0.0.1:8000', address: '10.0.0.1:8000', state: 'Ready', reason: '' },
    },
    {
      name: 'state with a reason',
      entry: '{ address: 10.0.0.1:8000, state: Starting, reason: loading weights }',
      expected: { id: '10.0.0.1:8000', address: '10.0.0.1:8000', state: 'Starting', reason: 'loading weights' },
    },
    {
      name: 'state without a reason gets a default reason',
      entry: '{ address: 10.0.0.1:8000, state: CrashLoop }',
      expected: { id: '10.0.0.1:8000', address: '10.0.0.1:8000', state: 'CrashLoop', reason: 'marked in the endpoints file' },
    },
    {
      name: 'ready: false means NotReady',
      entry: '{ address: 10.0.0.1:8000, ready: false }',
      expected: { id: '10.0.0.1:8000', address: '10.0.0.1:8000', state: 'NotReady', reason: 'marked in the endpoints file' },
    },
    {
      name: 'ready: true means Ready',
      entry: '{ address: 10.0.0.1:8000, ready: true }',
      expected: { id: '10.0.0.1:8000', address: '10.0.0.1:8000', state: 'Ready', reason: '' },
    },
    {
      name: 'ready: false with a reason',
      entry: '{ address: 10.0.0.1:8000, ready: false, reason: drained }',
      expected: { id: '10.0.0.1:8000', address: '10.0.0.1:8000', state: 'NotReady', reason: 'drained' },
    },
    {
      name: 'an explicit state wins over ready',
      entry: '{ address: 10.0.0.1:8000, ready: false, state: Terminating }',
      expected: { id: '10.0.0.1:8000', address: '10.0.0.1:8000', state: 'Terminating', reason: 'marked in the endpoints file' },
    },
    { name: 'lowest port', entry: '10.0.0.1:1', expected: { id: '10.0.0.1:1', address: '10.0.0.1:1', state: 'Ready', reason: '' } },
    {
      name: 'highest port',
      entry: '10.0.0.1:65535',
      expected: { id: '10.0.0.1:65535', address: '10.0.0.1:65535', state: 'Ready', reason: '' },
    },
  ];
  for (const c of cases) {
    it(c.name, () => assert.deepEqual(endpointOf(c.entry), c.expected));
  }

  for (const state of SOURCE_STATES) {
    it(`state ${state} is accepted`, () => assert.equal(endpointOf(`{ address: 10.0.0.1:8000, state: ${state} }`).state, state));
  }
});

describe('parseStaticEndpoints: errors point at the entry', () => {
  const STATES = SOURCE_STATES.join(', ');
  const cases: ReadonlyArray<{ name: string; text: string; message: string | RegExp }> = [
    { name: 'invalid YAML', text: 'pools: [\n', message: /^not valid YAML: .+/ },
    { name: 'empty file', text: '', message: 'pools: expected a list of pools at the top level' },
    { name: 'no pools key', text: 'endpoints: []\n', message: 'pools: expected a list of pools at the top level' },
    { name: 'pools is a mapping', text: 'pools: { a: 1 }\n', message: 'pools: expected a list of pools at the top level' },
    { name: 'top level is a list', text: '- name: p\n', message: 'pools: expected a list of pools at the top level' },
    { name: 'pool is a scalar', text: 'pools: [p]\n', message: 'pools[0]: expected a mapping' },
    { name: 'pool without name', text: 'pools:\n  - models: [m]\n', message: 'pools[0].name: required' },
    { name: 'pool with a numeric name', text: 'pools:\n  - { name: 7, models: [m] }\n', message: 'pools[0].name: required' },
    {
      name: 'duplicate pool names',
      text: 'pools:\n  - { name: p, models: [m] }\n  - { name: p, models: [n] }\n',
      message: 'pools[1].name: duplicate pool name p',
    },
    {
      name: 'pool without models',
      text: 'pools:\n  - { name: p }\n',
      message: 'pools[0].models: expected a non-empty list of model names',
    },
    {
      name: 'pool with no models',
      text: 'pools:\n  - { name: p, models: [] }\n',
      message: 'pools[0].models: expected a non-empty list of model names',
    },
    {
      name: 'pool with a model that is not a string',
      text: 'pools:\n  - { name: p, models: [m, 3] }\n',
      message: 'pools[0].models: expected a non-empty list of model names',
    },
    {
      name: 'models is a string',
      text: 'pools:\n  - { name: p, models: m }\n',
      message: 'pools[0].models: expected a non-empty list of model names',
    },
    {
      name: 'endpoints is a mapping',
      text: 'pools:\n  - { name: p, models: [m], endpoints: { a: 1 } }\n',
      message: 'pools[0].endpoints: expected a list',
    },
    { name: 'endpoint is a number', text: oneEndpoint('8000'), message: 'pools[0].endpoints[0]: expected an address string or a mapping' },
    {
      name: 'endpoint is a list',
      text: oneEndpoint('[10.0.0.1, 8000]'),
      message: 'pools[0].endpoints[0]: expected an address string or a mapping',
    },
    {
      name: 'address without port',
      text: oneEndpoint('10.0.0.1'),
      message: 'pools[0].endpoints[0].address: expected "host:port", got "10.0.0.1"',
    },
    {
      name: 'mapping without address',
      text: oneEndpoint('{ name: vllm-0 }'),
      message: 'pools[0].endpoints[0].address: expected "host:port", got undefined',
    },
    {
      name: 'port that is not a number',
      text: oneEndpoint('10.0.0.1:http'),
      message: 'pools[0].endpoints[0].address: expected "host:port", got "10.0.0.1:http"',
    },
    {
      name: 'port with six digits',
      text: oneEndpoint('10.0.0.1:800000'),
      message: 'pools[0].endpoints[0].address: expected "host:port", got "10.0.0.1:800000"',
    },
    { name: 'port 0', text: oneEndpoint('10.0.0.1:0'), message: 'pools[0].endpoints[0].address: port 0 out of range' },
    { name: 'port 65536', text: oneEndpoint('10.0.0.1:65536'), message: 'pools[0].endpoints[0].address: port 65536 out of range' },
    {
      name: 'IPv6 without brackets',
      text: oneEndpoint('"::1:8000"'),
      message: 'pools[0].endpoints[0].address: expected "host:port", got "::1:8000"',
    },
    {
      name: 'URL instead of an address',
      text: oneEndpoint('http://10.0.0.1:8000'),
      message: 'pools[0].endpoints[0].address: expected "host:port", got "http://10.0.0.1:8000"',
    },
    {
      name: 'space in the host',
      text: oneEndpoint('"my host:8000"'),
      message: 'pools[0].endpoints[0].address: expected "host:port", got "my host:8000"',
    },
    {
      name: 'unknown state',
      text: oneEndpoint('{ address: 10.0.0.1:8000, state: Broken }'),
      message: `pools[0].endpoints[0].state: expected one of ${STATES}`,
    },
    {
      name: "Quarantined is ours, not the file's",
      text: oneEndpoint('{ address: 10.0.0.1:8000, state: Quarantined }'),
      message: `pools[0].endpoints[0].state: expected one of ${STATES}`,
    },
    {
      name: 'state in lower case',
      text: oneEndpoint('{ address: 10.0.0.1:8000, state: ready }'),
      message: `pools[0].endpoints[0].state: expected one of ${STATES}`,
    },
    {
      name: 'state not a string',
      text: oneEndpoint('{ address: 10.0.0.1:8000, state: 1 }'),
      message: `pools[0].endpoints[0].state: expected one of ${STATES}`,
    },
    {
      name: 'the path names the second pool and its first endpoint',
      text: 'pools:\n  - { name: a, models: [m], endpoints: [10.0.0.1:8000] }\n  - { name: b, models: [m], endpoints: [{ address: "bad" }] }\n',
      message: 'pools[1].endpoints[0].address: expected "host:port", got "bad"',
    },
    {
      name: 'the path names the third endpoint',
      text: 'pools:\n  - { name: a, models: [m], endpoints: [10.0.0.1:8000, 10.0.0.2:8000, "10.0.0.3:99999"] }\n',
      message: 'pools[0].endpoints[2].address: port 99999 out of range',
    },
  ];
  for (const c of cases) {
    it(c.name, () => rejects(c.text, c.message));
  }

  it('the same endpoint listed twice in one pool is rejected, like a duplicate pool name', () =>
    rejects('pools:\n  - { name: a, models: [m], endpoints: [10.0.0.1:8000, 10.0.0.1:8000] }\n', /^pools\[0\]\.endpoints\[1\]/));
});
