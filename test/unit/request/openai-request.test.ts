// Reading the model and stream flag out of OpenAI-style request bodies, and the client error for
// every body we cannot route.
import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { readInferenceRequest } from '../../../src/request/openai-request.js';
import { GatewayError } from '../../../src/errors/gateway-error.js';
import type { ErrorKind } from '../../../src/errors/catalog.js';

/** What the default picker settings extract: 16 blocks of 16 tokens at 4 characters each. */
const LIMIT = { chars: 1024, tokens: 256 };

const body = (value: unknown): Buffer => Buffer.from(typeof value === 'string' ? value : JSON.stringify(value), 'utf8');

describe('readInferenceRequest: bodies of each OpenAI endpoint', () => {
  const cases: ReadonlyArray<{ name: string; body: unknown; model: string; stream: boolean }> = [
    {
      name: 'chat completion',
      body: { model: 'llama-3-8b', messages: [{ role: 'user', content: 'hi' }] },
      model: 'llama-3-8b',
      stream: false,
    },
    {
      name: 'streamed chat completion',
      body: { model: 'llama-3-8b', messages: [], stream: true, stream_options: { include_usage: true } },
      model: 'llama-3-8b',
      stream: true,
    },
    {
      name: 'legacy completion',
      body: { model: 'gpt-3.5-turbo-instruct', prompt: 'Say this is a test', max_tokens: 7 },
      model: 'gpt-3.5-turbo-instruct',
      stream: false,
    },
    { name: 'streamed legacy completion', body: { prompt: ['a', 'b'], stream: true, model: 'phi-3' }, model: 'phi-3', stream: true },
    {
      name: 'embeddings',
      body: { model: 'bge-small', input: ['one', 'two'], encoding_format: 'float' },
      model: 'bge-small',
      stream: false,
    },
    {
      name: 'responses API',
      body: { model: 'llama-3-8b', input: 'Tell me a story', stream: true, store: false },
      model: 'llama-3-8b',
      stream: true,
    },
    { name: 'stream: false', body: { model: 'm', stream: false }, model: 'm', stream: false },
    { name: 'stream as a string is not streaming', body: { model: 'm', stream: 'true' }, model: 'm', stream: false },
    { name: 'stream: 1 is not streaming', body: { model: 'm', stream: 1 }, model: 'm', stream: false },
    { name: 'stream: null', body: { model: 'm', stream: null }, model: 'm', stream: false },
    {
      name: 'model names keep their case, slashes and colons',
      body: { model: 'meta-llama/Llama-3.1-8B-Instruct:lora-1' },
      model: 'meta-llama/Llama-3.1-8B-Instruct:lora-1',
      stream: false,
    },
    { name: 'model with surrounding spaces is kept as sent', body: { model: ' llama ' }, model: ' llama ', stream: false },
    { name: 'unicode model name', body: { model: 'modèle-日本' }, model: 'modèle-日本', stream: false },
    { name: 'whitespace around the JSON', body: '\n  {"model":"m","stream":true}  \n', model: 'm', stream: true },
    { name: 'nested "model" keys do not count', body: { metadata: { model: 'other' }, model: 'real' }, model: 'real', stream: false },
  ];
  for (const c of cases) {
    it(c.name, () => {
      const { model, stream } = readInferenceRequest(body(c.body), LIMIT);
      assert.deepEqual({ model, stream }, { model: c.model, stream: c.stream });
    });
  }
});

describe('readInferenceRequest: errors', () => {
  const cases: ReadonlyArray<{ name: string; body: Buffer; kind: ErrorKind; message: string | RegExp; param?: string }> = [
    {
      name: 'empty body',
      body: Buffer.alloc(0),
      kind: 'missing_body',
      message: 'request body is empty; send an OpenAI-style JSON object with a "model" field',
    },
    { name: 'not JSON', body: body('model=llama'), kind: 'invalid_json', message: /^request body is not valid JSON: / },
    {
      name: 'truncated JSON',
      body: body('{"model":"llama","messages":[{"role":"user","content":"hi'),
      kind: 'invalid_json',
      message: /^request body is not valid JSON: /,
    },
    { name: 'whitespace only', body: body('   \n'), kind: 'invalid_json', message: /^request body is not valid JSON: / },
    {
      name: 'JSON with a trailing comma',
      body: body('{"model":"m",}'),
      kind: 'invalid_json',
      message: /^request body is not valid JSON: /,
    },
    { name: 'a JSON array', body: body([{ model: 'm' }]), kind: 'invalid_json', message: 'request body must be a JSON object' },
    { name: 'a JSON string', body: body('"llama"'), kind: 'invalid_json', message: 'request body must be a JSON object' },
    { name: 'a JSON number', body: body('42'), kind: 'invalid_json', message: 'request body must be a JSON object' },
    { name: 'JSON null', body: body('null'), kind: 'invalid_json', message: 'request body must be a JSON object' },
    {
      name: 'no model field',
      body: body({ messages: [] }),
      kind: 'missing_model',
      message: 'request body has no "model" field; name the model to use',
      param: 'model',
    },
    {
      name: 'empty object',
      body: body({}),
      kind: 'missing_model',
      message: 'request body has no "model" field; name the model to use',
      param: 'model',
    },
    {
      name: 'model: null',
      body: body({ model: null }),
      kind: 'missing_model',
      message: 'request body has no "model" field; name the model to use',
      param: 'model',
    },
    {
      name: 'model is a number',
      body: body({ model: 3 }),
      kind: 'invalid_model',
      message: '"model" must be a non-empty string',
      param: 'model',
    },
    {
      name: 'model is an object',
      body: body({ model: { name: 'llama' } }),
      kind: 'invalid_model',
      message: '"model" must be a non-empty string',
      param: 'model',
    },
    {
      name: 'model is a list',
      body: body({ model: ['llama'] }),
      kind: 'invalid_model',
      message: '"model" must be a non-empty string',
      param: 'model',
    },
    {
      name: 'model is a boolean',
      body: body({ model: true }),
      kind: 'invalid_model',
      message: '"model" must be a non-empty string',
      param: 'model',
    },
    {
      name: 'model is empty',
      body: body({ model: '' }),
      kind: 'invalid_model',
      message: '"model" must be a non-empty string',
      param: 'model',
    },
    {
      name: 'model is blank',
      body: body({ model: ' \t' }),
      kind: 'invalid_model',
      message: '"model" must be a non-empty string',
      param: 'model',
    },
  ];
  for (const c of cases) {
    it(c.name, () => {
      assert.throws(
        () => readInferenceRequest(c.body, LIMIT),
        (err: unknown) => {
          assert.ok(err instanceof GatewayError, `expected a GatewayError, got ${String(err)}`);
          assert.equal(err.kind, c.kind);
          assert.equal(err.entry.status, 400);
          if (typeof c.message === 'string') assert.equal(err.message, c.message);
          else assert.match(err.message, c.message);
          assert.equal(err.details?.param, c.param);
          return true;
        },
      );
    });
  }

  it('an invalid JSON error keeps the parser error as cause, for logs', () => {
    assert.throws(
      () => readInferenceRequest(body('{nope'), LIMIT),
      (err: unknown) => err instanceof GatewayError && err.cause instanceof SyntaxError,
    );
  });

  // A client error message must stay short whatever the client sent: no echo of a huge body.
  const MiB = 1024 * 1024;
  const huge: ReadonlyArray<{ name: string; body: Buffer; kind: ErrorKind }> = [
    { name: 'a megabyte of garbage', body: Buffer.alloc(MiB, 'x'), kind: 'invalid_json' },
    {
      name: 'a megabyte-long unterminated string',
      body: body(`{"model":"m","messages":[{"content":"${'y'.repeat(MiB)}`),
      kind: 'invalid_json',
    },
    {
      name: 'garbage after a megabyte of valid JSON',
      body: body(`{"model":"m","pad":"${'z'.repeat(MiB)}"} trailing`),
      kind: 'invalid_json',
    },
    { name: 'a megabyte array', body: body(`[${'1,'.repeat(MiB / 2)}1]`), kind: 'invalid_json' },
    { name: 'a megabyte object as model', body: body({ model: { blob: 'w'.repeat(MiB) } }), kind: 'invalid_model' },
    { name: 'a megabyte body without model', body: body({ messages: [{ content: 'v'.repeat(MiB) }] }), kind: 'missing_model' },
    {
      name: 'a raw newline at the end of a megabyte string',
      body: body(`{"model":"m","messages":[{"role":"user","content":"${'u'.repeat(MiB)}\n"}]}`),
      kind: 'invalid_json',
    },
    {
      name: 'a bad escape at the end of a megabyte string',
      body: body(`{"model":"m","messages":[{"role":"user","content":"${'u'.repeat(MiB)}\\q"}]}`),
      kind: 'invalid_json',
    },
  ];
  for (const c of huge) {
    it(`no echo of ${c.name}`, () => {
      assert.throws(
        () => readInferenceRequest(c.body, LIMIT),
        (err: unknown) => {
          assert.ok(err instanceof GatewayError);
          assert.equal(err.kind, c.kind);
          assert.ok(err.message.length < 300, `message is ${err.message.length} chars`);
          assert.ok(JSON.stringify(err.details ?? {}).length < 100);
          return true;
        },
      );
    });
  }
});

describe('readInferenceRequest: long prompts', () => {
  const MiB = 1024 * 1024;
  const chat = (document: string, model = 'm'): Buffer =>
    body({
      model,
      stream: true,
      messages: [
        { role: 'system', content: 'Answer from the document.' },
        { role: 'user', content: document },
        { role: 'user', content: 'Summarise it.' },
      ],
    });

  it('reads the same prompt prefix from a megabyte context as JSON.parse would, cut at the limit', () => {
    const document = 'é "quoted" \\ 😀 line\n'.repeat(MiB / 24);
    const read = readInferenceRequest(chat(document), LIMIT);
    const expected = `system\u001fAnswer from the document.\u001fuser\u001f${document}`.slice(0, LIMIT.chars);
    assert.deepEqual(read.prompt, { kind: 'text', text: expected, shared: LIMIT.chars, opening: LIMIT.chars, exchange: LIMIT.chars });
    assert.equal(read.stream, true);
  });

  it('keeps a long model name whole while the prompt is cut', () => {
    const model = `org/${'m'.repeat(5000)}`;
    assert.equal(readInferenceRequest(chat('d'.repeat(MiB), model), LIMIT).model, model);
  });

  it('gives one key to contexts that differ only past the limit', () => {
    const head = 'shared '.repeat(400);
    const a = readInferenceRequest(chat(`${head}${'a'.repeat(MiB)}`), LIMIT).prompt;
    const b = readInferenceRequest(chat(`${head}${'b'.repeat(MiB)}`), LIMIT).prompt;
    assert.deepEqual(a, b);
  });
});
