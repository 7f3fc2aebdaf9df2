// Usage injection: the request body gains stream_options.include_usage by splicing bytes (the rest
// byte-identical), and the usage-only chunk is filtered out of the answer however it is chunked.

import { test } from 'node:test';
import assert from 'node:assert/strict';
import { readInferenceRequest } from '../../../src/request/openai-request.js';
import { withStreamUsage } from '../../../src/request/usage-injection.js';
import { UsageChunkFilter } from '../../../src/inspect/usage-chunk-filter.js';
import { splitBytes } from '../../support/split-bytes.js';

function inject(text: string): string | undefined {
  const body = Buffer.from(text);
  return withStreamUsage(body, readInferenceRequest(body, { chars: 1024, tokens: 256 }))?.toString();
}

test('withStreamUsage adds include_usage and leaves every other byte as the client wrote it', () => {
  const cases: ReadonlyArray<readonly [string, string]> = [
    ['{"model":"m","stream":true,"messages":[]}', '{"model":"m","stream":true,"messages":[],"stream_options":{"include_usage":true}}'],
    // Whitespace, key order, number spelling and escapes survive.
    [
      '{ "stream" : true ,\n "model": "m\\u00e9", "n": 1.50, "messages": [{"content": "}"}] }\n',
      '{ "stream" : true ,\n "model": "m\\u00e9", "n": 1.50, "messages": [{"content": "}"}],"stream_options":{"include_usage":true} }\n',
    ],
    ['{"model":"m","stream":true,"stream_options":{}}', '{"model":"m","stream":true,"stream_options":{"include_usage":true}}'],
    [
      '{"model":"m","stream":true,"stream_options":{"continuous_usage_stats":false}}',
      '{"model":"m","stream":true,"stream_options":{"continuous_usage_stats":false,"include_usage":true}}',
    ],
    [
      '{"model":"m","stream":true,"stream_options":{"include_usage":false}}',
      '{"model":"m","stream":true,"stream_options":{"include_usage":true}}',
    ],
    ['{"model":"m","stream":true,"stream_options":null}', '{"model":"m","stream":true,"stream_options":{"include_usage":true}}'],
    // The last of duplicate keys is the one JSON.parse (and the server) reads.
    [
      '{"model":"m","stream":true,"stream_options":{"include_usage":true},"stream_options":{"include_usage":false}}',
      '{"model":"m","stream":true,"stream_options":{"include_usage":true},"stream_options":{"include_usage":true}}',
    ],
  ];
  for (const [input, expected] of cases) {
    const out = inject(input);
    assert.equal(out, expected, input);
    const parsed = JSON.parse(out ?? '') as { stream_options: { include_usage: unknown } };
    assert.equal(parsed.stream_options.include_usage, true);
  }
});

test('withStreamUsage changes nothing that needs no change or cannot be changed safely', () => {
  for (const input of [
    '{"model":"m","stream":false,"messages":[]}',
    '{"model":"m","messages":[]}',
    '{"model":"m","stream":true,"stream_options":{"include_usage":true}}',
    '{"model":"m","stream":true,"stream_options":"yes"}',
    '{"model":"m","stream":true,"stream_options":{"include_usage":"yes"}}',
    // A key spelled with escapes: JSON.parse reads stream_options, the bytes do not spell it.
    '{"model":"m","stream":true,"stream\\u005foptions":{}}',
  ]) {
    assert.equal(inject(input), undefined, input);
  }
});

const usageChunk = 'data: {"id":"c","object":"chat.completion.chunk","choices":[],"usage":{"prompt_tokens":3,"completion_tokens":2}}\n\n';
const contentChunk = (c: string) =>
  `data: {"id":"c","object":"chat.completion.chunk","choices":[{"index":0,"delta":{"content":"${c}"}}]}\n\n`;

test('UsageChunkFilter removes exactly the usage-only chunk, cut at every byte boundary', () => {
  const original = `${contentChunk('a')}${contentChunk('b')}${usageChunk}data: [DONE]\n\n`;
  const expected = `${contentChunk('a')}${contentChunk('b')}data: [DONE]\n\n`;
  const bytes = Buffer.from(original);
  for (let a = 0; a <= bytes.length; a++) {
    for (const b of [a, a + 17, a + 101]) {
      const filter = new UsageChunkFilter();
      const parts = splitBytes(bytes, [a, b]);
      const out = parts.map((p, i) => filter.push(p, i === parts.length - 1));
      assert.equal(Buffer.concat(out).toString(), expected, `cuts ${a}, ${b}`);
      assert.equal(filter.holding, 0);
    }
  }
});

test('UsageChunkFilter passes chunks that end on an event boundary as the same buffer, and keeps other choices:[] events', () => {
  const filter = new UsageChunkFilter();
  const chunk = Buffer.from(contentChunk('x'));
  assert.equal(filter.push(chunk, false), chunk, 'no copy for a whole event');
  // A chunk with no choices and no usage (some servers' first chunk) is not the usage chunk.
  const keep = Buffer.from('data: {"choices":[],"usage":null}\n\n');
  assert.equal(filter.push(keep, false).toString(), keep.toString());
  // CRLF framing.
  const crlf = Buffer.from(`${usageChunk.replace(/\n/g, '\r\n')}data: [DONE]\r\n\r\n`);
  assert.equal(filter.push(crlf, true).toString(), 'data: [DONE]\r\n\r\n');
});

// vLLM 0.32's shapes (test/e2e/vllm-drift.test.ts): the last token's chunk carries finish_reason,
// and the stream's last chunk system_fingerprint, so asking for usage moves the fingerprint.
const finishChunk = (extra: string) =>
  `data: {"id":"c","object":"chat.completion.chunk","choices":[{"index":0,"delta":{"content":"z"},"logprobs":null,"finish_reason":"length","stop_reason":null,"token_ids":null}]${extra}}\n\n`;
const fingerprint = ',"system_fingerprint":"vllm-0.32.0-35e16d4a"';
const vllmUsageChunk = `data: {"id":"c","object":"chat.completion.chunk","created":1,"model":"m","choices":[],"usage":{"prompt_tokens":10,"total_tokens":13,"completion_tokens":3}${fingerprint}}\n\n`;

test('UsageChunkFilter gives the finish chunk the fingerprint vLLM moved to the usage chunk: the stream the client would have had', () => {
  const injected = `${contentChunk('a')}${finishChunk('')}${vllmUsageChunk}data: [DONE]\n\n`;
  const asked = `${contentChunk('a')}${finishChunk(fingerprint)}data: [DONE]\n\n`;
  const bytes = Buffer.from(injected);
  for (let a = 0; a <= bytes.length; a++) {
    for (const b of [a, a + 29, a + 150]) {
      const filter = new UsageChunkFilter();
      const parts = splitBytes(bytes, [a, b]);
      const out = parts.map((p, i) => filter.push(p, i === parts.length - 1));
      assert.equal(Buffer.concat(out).toString(), asked, `cuts ${a}, ${b}`);
      assert.equal(filter.holding, 0);
    }
  }
});

test('UsageChunkFilter holds a finish chunk only until the next event, and changes it only when the usage chunk follows with a fingerprint', () => {
  // The finish chunk waits for the next event; [DONE] releases it unchanged when no usage chunk came.
  let filter = new UsageChunkFilter();
  assert.equal(filter.push(Buffer.from(`${contentChunk('a')}${finishChunk('')}`), false).toString(), contentChunk('a'));
  assert.equal(filter.holding, finishChunk('').length);
  assert.equal(filter.push(Buffer.from('data: [DONE]\n\n'), false).toString(), `${finishChunk('')}data: [DONE]\n\n`);
  assert.equal(filter.holding, 0);
  // A finish chunk that has its own fingerprint keeps it; the usage chunk's is not added twice.
  filter = new UsageChunkFilter();
  const own = finishChunk(',"system_fingerprint":"own"');
  assert.equal(filter.push(Buffer.from(`${own}${vllmUsageChunk}data: [DONE]\n\n`), true).toString(), `${own}data: [DONE]\n\n`);
  // A usage chunk without a fingerprint (other servers) is removed and nothing is added.
  filter = new UsageChunkFilter();
  assert.equal(
    filter.push(Buffer.from(`${finishChunk('')}${usageChunk}data: [DONE]\n\n`), true).toString(),
    `${finishChunk('')}data: [DONE]\n\n`,
  );
  // The end of the stream releases a held finish chunk.
  filter = new UsageChunkFilter();
  assert.equal(filter.push(Buffer.from(finishChunk('')), false).length, 0);
  assert.equal(filter.push(Buffer.alloc(0), true).toString(), finishChunk(''));
});
