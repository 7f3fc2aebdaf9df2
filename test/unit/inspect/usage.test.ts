// Token usage and content events read from answers: JSON bodies, SSE streams cut at every byte
// boundary, Responses API events, and usage that is missing or malformed.

import { test } from 'node:test';
import assert from 'node:assert/strict';
import { findUsage, usageOf } from '../../../src/inspect/usage.js';
import { SseInspector } from '../../../src/inspect/sse-inspector.js';

const chatUsage = { prompt_tokens: 12, completion_tokens: 5, total_tokens: 17, prompt_tokens_details: { cached_tokens: 8 } };

test('usageOf reads chat/completions and Responses usage objects', () => {
  assert.deepEqual(usageOf(chatUsage), { input: 12, output: 5, cached: 8 });
  assert.deepEqual(usageOf({ prompt_tokens: 3, completion_tokens: 0, total_tokens: 3 }), { input: 3, output: 0, cached: undefined });
  assert.deepEqual(usageOf({ input_tokens: 9, output_tokens: 4, input_tokens_details: { cached_tokens: 2 } }), {
    input: 9,
    output: 4,
    cached: 2,
  });
  // Embeddings: prompt tokens only.
  assert.deepEqual(usageOf({ prompt_tokens: 6, total_tokens: 6 }), { input: 6, output: 0, cached: undefined });
});

test('usageOf refuses missing or malformed counts (never reads them as zero)', () => {
  for (const bad of [
    undefined,
    null,
    42,
    [],
    {},
    { prompt_tokens: '12', completion_tokens: 5 },
    { prompt_tokens: -1, completion_tokens: 5 },
    { prompt_tokens: 1.5, completion_tokens: 5 },
    { input_tokens: 3 },
    { output_tokens: 3 },
  ]) {
    assert.equal(usageOf(bad), undefined, JSON.stringify(bad));
  }
  assert.equal(usageOf({ prompt_tokens: 2, completion_tokens: 1, prompt_tokens_details: { cached_tokens: 'x' } })?.cached, undefined);
});

test('findUsage finds the answer-level usage of a JSON body without being fooled by text', () => {
  const answer = {
    id: 'c1',
    choices: [{ message: { role: 'assistant', content: 'a "usage": {"prompt_tokens": 999} in the text' } }],
    usage: chatUsage,
  };
  assert.deepEqual(findUsage(Buffer.from(JSON.stringify(answer))), { input: 12, output: 5, cached: 8 });
  assert.deepEqual(findUsage(JSON.stringify(answer, null, 2)), { input: 12, output: 5, cached: 8 });
  // A key spelled in the text but escaped is never taken; without a real usage there is none.
  const textOnly = { choices: [{ message: { content: '"usage": {"prompt_tokens": 1, "completion_tokens": 1}' } }] };
  assert.equal(findUsage(Buffer.from(JSON.stringify(textOnly))), undefined);
  assert.equal(
    findUsage(Buffer.from('{"\\"usage":{"prompt_tokens":1,"completion_tokens":1}}')),
    undefined,
    'a key that only ends in usage',
  );
  assert.equal(findUsage(Buffer.from('{"usage":null,"choices":[]}')), undefined);
  assert.equal(findUsage(Buffer.from('{"usage":{"prompt_tokens":3,"completion_tokens"')), undefined, 'cut short');
  assert.equal(findUsage(Buffer.from('{"usage":{"prompt_tokens":"3","completion_tokens":1}}')), undefined, 'malformed');
  assert.deepEqual(findUsage('{"response":{"status":"completed","usage":{"input_tokens":5,"output_tokens":7}}}'), {
    input: 5,
    output: 7,
    cached: undefined,
  });
});

/** Feeds `stream` cut at `at` (two chunks), returns the inspector after finish(). */
function inspectSplit(stream: Buffer, at: number): SseInspector {
  const inspector = new SseInspector();
  inspector.feed(stream.subarray(0, at));
  inspector.feed(stream.subarray(at));
  inspector.finish();
  return inspector;
}

function sse(...events: string[]): Buffer {
  return Buffer.from(events.map((e) => `${e}\n\n`).join(''));
}

const chatChunk = (content: string): string =>
  `data: ${JSON.stringify({ id: 'c', object: 'chat.completion.chunk', choices: [{ index: 0, delta: { content }, finish_reason: null }], usage: null })}`;

test('SSE chat stream: content events and the final usage chunk, however the stream is cut', () => {
  const stream = sse(
    chatChunk('Hel'),
    chatChunk('lo "usage":{"prompt_tokens":1} é'),
    chatChunk('!'),
    `data: ${JSON.stringify({ id: 'c', object: 'chat.completion.chunk', choices: [], usage: chatUsage })}`,
    'data: [DONE]',
  );
  for (let at = 0; at <= stream.length; at++) {
    const inspector = inspectSplit(stream, at);
    assert.equal(inspector.contentEvents, 3, `cut at ${at}`);
    assert.deepEqual(inspector.usage, { input: 12, output: 5, cached: 8 }, `cut at ${at}`);
    assert.equal(inspector.sawTerminator, true);
  }
});

test('SSE stream without usage says so (undefined), and a malformed usage chunk is not counted', () => {
  const none = inspectSplit(sse(chatChunk('a'), chatChunk('b'), 'data: [DONE]'), 7);
  assert.equal(none.usage, undefined);
  assert.equal(none.contentEvents, 2);
  const malformed = inspectSplit(sse(chatChunk('a'), 'data: {"choices":[],"usage":{"prompt_tokens":"many"}}', 'data: [DONE]'), 30);
  assert.equal(malformed.usage, undefined);
  const broken = inspectSplit(sse(chatChunk('a'), 'data: {"choices":[],"usage":{"prompt_tokens":4,', 'data: [DONE]'), 30);
  assert.equal(broken.usage, undefined);
  assert.equal(broken.contentEvents, 1, 'an unparsable payload is not content');
});

test('SSE: vLLM continuous usage (usage in every chunk) counts content and keeps the last report', () => {
  const withUsage = (content: string, output: number): string =>
    `data: ${JSON.stringify({ choices: [{ delta: { content } }], usage: { prompt_tokens: 4, completion_tokens: output } })}`;
  const inspector = inspectSplit(sse(withUsage('a', 1), withUsage('b', 2), withUsage('c', 3), 'data: [DONE]'), 11);
  assert.equal(inspector.contentEvents, 3);
  assert.deepEqual(inspector.usage, { input: 4, output: 3, cached: undefined });
});

test('SSE Responses API: deltas are content, lifecycle events are not, usage from response.completed', () => {
  const response = (status: string, usage: unknown) => ({ id: 'r', object: 'response', status, output: [], usage });
  const named = sse(
    `event: response.created\ndata: ${JSON.stringify({ type: 'response.created', response: response('in_progress', null) })}`,
    `event: response.output_text.delta\ndata: ${JSON.stringify({ type: 'response.output_text.delta', delta: 'Hi' })}`,
    `event: response.output_text.delta\ndata: ${JSON.stringify({ type: 'response.output_text.delta', delta: ' there' })}`,
    `event: response.output_text.done\ndata: ${JSON.stringify({ type: 'response.output_text.done', text: 'Hi there' })}`,
    `event: response.completed\ndata: ${JSON.stringify({
      type: 'response.completed',
      response: response('completed', { input_tokens: 7, output_tokens: 2, input_tokens_details: { cached_tokens: 3 } }),
    })}`,
  );
  const unnamed = Buffer.from(named.toString().replace(/^event: .*\n/gm, ''));
  for (const stream of [named, unnamed]) {
    for (let at = 0; at <= stream.length; at += 3) {
      const inspector = inspectSplit(stream, at);
      assert.equal(inspector.contentEvents, 2, `cut at ${at}`);
      assert.deepEqual(inspector.usage, { input: 7, output: 2, cached: 3 }, `cut at ${at}`);
      assert.equal(inspector.finish().ok, true);
    }
  }
});

test('SSE: error events and [DONE] are not content', () => {
  const inspector = inspectSplit(sse(chatChunk('a'), 'data: {"error":{"message":"boom"}}', 'event: error\ndata: {}', 'data: [DONE]'), 5);
  assert.equal(inspector.contentEvents, 1);
  assert.equal(inspector.finish().ok, false);
});
