import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import fc from 'fast-check';
import { SseInspector } from '../../../src/inspect/sse-inspector.js';
import type { BodyVerdict } from '../../../src/inspect/verdict.js';
import { splitBytes } from '../../support/split-bytes.js';

function chunk(content: string): string {
  return `data: ${JSON.stringify({ id: 'c1', object: 'chat.completion.chunk', choices: [{ index: 0, delta: { content } }] })}\n\n`;
}

function inspect(...parts: Array<string | Buffer>): SseInspector {
  const inspector = new SseInspector();
  for (const p of parts) inspector.feed(typeof p === 'string' ? Buffer.from(p, 'utf8') : p);
  return inspector;
}

function assertVerdict(verdict: BodyVerdict, kind: 'ok' | 'stream_incomplete' | 'upstream_error_event'): void {
  if (kind === 'ok') assert.deepEqual(verdict, { ok: true });
  else {
    assert.equal(verdict.ok, false);
    if (!verdict.ok) assert.equal(verdict.kind, kind);
  }
}

void describe('SseInspector: chat completions', () => {
  void it('accepts a stream that ends with [DONE]', () => {
    const i = inspect(chunk('Hel'), chunk('lo'), 'data: [DONE]\n\n');
    assertVerdict(i.finish(), 'ok');
    assert.ok(i.sawTerminator);
    assert.equal(i.firstErrorEvent, undefined);
    assert.equal(i.eventsSeen, 3);
  });

  void it('flags a stream without [DONE] as incomplete, saying what is missing', () => {
    const i = inspect(chunk('Hel'), chunk('lo'));
    const v = i.finish();
    assertVerdict(v, 'stream_incomplete');
    if (!v.ok) assert.match(v.detail, /\[DONE\]/);
    assert.ok(!i.sawTerminator);
  });

  void it('flags an empty stream as incomplete', () => {
    const v = inspect().finish();
    assertVerdict(v, 'stream_incomplete');
    if (!v.ok) assert.match(v.detail, /no complete event/);
  });

  void it('treats a final [DONE] without its blank line as terminated', () => {
    assertVerdict(inspect(chunk('x'), 'data: [DONE]\n').finish(), 'ok');
    assertVerdict(inspect(chunk('x'), 'data: [DONE]').finish(), 'ok');
  });

  void it('flags a stream cut inside an event', () => {
    assertVerdict(inspect(chunk('x'), 'data: {"choices":[{"del').finish(), 'stream_incomplete');
    assertVerdict(inspect(chunk('x'), 'data: [DO').finish(), 'stream_incomplete');
  });

  void it('reports an error event even when [DONE] follows', () => {
    const i = inspect(
      chunk('x'),
      'data: {"error":{"message":"CUDA out of memory","type":"InternalServerError","code":500}}\n\n',
      'data: [DONE]\n\n',
    );
    const v = i.finish();
    assertVerdict(v, 'upstream_error_event');
    assert.equal(i.firstErrorEvent?.message, 'CUDA out of memory');
    assert.equal(i.firstErrorEvent?.code, '500');
    assert.equal(i.firstErrorEvent?.type, 'InternalServerError');
    if (!v.ok) assert.match(v.detail, /CUDA out of memory/);
  });

  void it('keeps the first of several error events', () => {
    const i = inspect('data: {"error":{"message":"first"}}\n\n', 'data: {"error":"second"}\n\n');
    i.finish();
    assert.equal(i.firstErrorEvent?.message, 'first');
  });

  void it('recognises older vLLM error objects and string errors', () => {
    const old = inspect(chunk('x'), 'data: {"object":"error","message":"bad things","type":"BadRequestError","param":null,"code":400}\n\n');
    assertVerdict(old.finish(), 'upstream_error_event');
    assert.equal(old.firstErrorEvent?.message, 'bad things');
    const str = inspect('data: {"error":"plain words"}\n\n');
    str.finish();
    assert.equal(str.firstErrorEvent?.message, 'plain words');
  });

  void it('recognises named error events, JSON or not', () => {
    const json = inspect(chunk('x'), 'event: error\ndata: {"message":"overloaded"}\n\n');
    assertVerdict(json.finish(), 'upstream_error_event');
    assert.equal(json.firstErrorEvent?.message, 'overloaded');
    assert.equal(json.firstErrorEvent?.event, 'error');
    const text = inspect('event: error\ndata: it broke\n\n');
    text.finish();
    assert.equal(text.firstErrorEvent?.message, 'it broke');
  });

  void it('does not mistake content about errors, or a null error, for an error event', () => {
    const i = inspect(
      chunk('He said "error" twice: error'),
      chunk('{"error": 1}'),
      'data: {"error":null,"choices":[]}\n\n',
      'data: [DONE]\n\n',
    );
    assertVerdict(i.finish(), 'ok');
  });

  void it('copes with CRLF and CR line endings, comments and ids', () => {
    assertVerdict(inspect(': ping\r\n\r\n', 'id: 1\r\ndata: {"choices":[]}\r\n\r\n', 'data: [DONE]\r\n\r\n').finish(), 'ok');
    assertVerdict(inspect('data: {"choices":[]}\r\r', 'data: [DONE]\r\r').finish(), 'ok');
  });

  void it('does not JSON-parse ordinary deltas', () => {
    const original = JSON.parse;
    let calls = 0;
    JSON.parse = ((text: string, reviver?: (this: unknown, key: string, value: unknown) => unknown) => {
      calls += 1;
      return original(text, reviver) as unknown;
    }) as typeof JSON.parse;
    try {
      const i = new SseInspector();
      for (let n = 0; n < 1000; n++) i.feed(Buffer.from(chunk(`token ${n} with an error-free "quote"`)));
      i.feed(Buffer.from('data: [DONE]\n\n'));
      assertVerdict(i.finish(), 'ok');
    } finally {
      JSON.parse = original;
    }
    assert.equal(calls, 0);
  });
});

void describe('SseInspector: Responses API', () => {
  const named = (type: string, body: Record<string, unknown> = {}): string =>
    `event: ${type}\ndata: ${JSON.stringify({ type, ...body })}\n\n`;
  const unnamed = (type: string, body: Record<string, unknown> = {}): string => `data: ${JSON.stringify({ type, ...body })}\n\n`;
  const created = { response: { id: 'r1', status: 'in_progress', error: null } };

  for (const [label, ev] of [
    ['named', named],
    ['unnamed', unnamed],
  ] as const) {
    void it(`${label}: response.completed terminates`, () => {
      const i = inspect(
        ev('response.created', created),
        ev('response.output_text.delta', { delta: 'hi' }),
        ev('response.completed', created),
      );
      assertVerdict(i.finish(), 'ok');
      assert.ok(i.sawTerminator);
    });

    void it(`${label}: response.incomplete is a normal end`, () => {
      assertVerdict(
        inspect(
          ev('response.created', created),
          ev('response.incomplete', { response: { incomplete_details: { reason: 'max_output_tokens' } } }),
        ).finish(),
        'ok',
      );
    });

    void it(`${label}: response.failed is an error event with the response's message`, () => {
      const i = inspect(
        ev('response.created', created),
        ev('response.failed', { response: { status: 'failed', error: { code: 'server_error', message: 'model crashed' } } }),
      );
      assertVerdict(i.finish(), 'upstream_error_event');
      assert.equal(i.firstErrorEvent?.message, 'model crashed');
      assert.equal(i.firstErrorEvent?.code, 'server_error');
    });

    void it(`${label}: an error event is an error`, () => {
      const i = inspect(ev('response.created', created), ev('error', { code: 'ERR', message: 'rate limited', param: null }));
      assertVerdict(i.finish(), 'upstream_error_event');
      assert.equal(i.firstErrorEvent?.message, 'rate limited');
    });

    void it(`${label}: no terminal event is incomplete, named as such`, () => {
      const v = inspect(ev('response.created', created), ev('response.output_text.delta', { delta: 'hi' })).finish();
      assertVerdict(v, 'stream_incomplete');
      if (!v.ok) assert.match(v.detail, /terminal response event/);
    });
  }
});

void describe('SseInspector: bookkeeping', () => {
  void it('keeps the last bytes fed, across small chunks', () => {
    const i = inspect('data: [DONE]\n', '\n');
    assert.equal(i.lastBytes.toString(), 'E]\n\n');
    const j = inspect('ab');
    assert.equal(j.lastBytes.toString(), 'ab');
    assert.equal(j.bytesSeen, 2);
  });

  void it('is idempotent on finish and refuses feeding afterwards', () => {
    const i = inspect(chunk('x'));
    const first = i.finish();
    assert.equal(i.finish(), first);
    assert.throws(() => i.feed(Buffer.from('data: [DONE]\n\n')));
  });

  void it('gives up (ok) on an event larger than its buffer instead of guessing', () => {
    const i = new SseInspector({ maxBufferedChars: 64 });
    i.feed(Buffer.from(`data: ${'x'.repeat(200)}`));
    i.feed(Buffer.from('\n\n'));
    assert.ok(i.abandoned);
    assertVerdict(i.finish(), 'ok');
  });

  void it('reassembles multi-byte UTF-8 split at every byte', () => {
    const message = 'ошибка 🚫 模型崩溃';
    const bytes = Buffer.from(`data: ${JSON.stringify({ error: { message } })}\n\n`, 'utf8');
    for (let cut = 1; cut < bytes.length; cut++) {
      const i = inspect(bytes.subarray(0, cut), bytes.subarray(cut));
      assertVerdict(i.finish(), 'upstream_error_event');
      assert.equal(i.firstErrorEvent?.message, message, `cut at ${cut}`);
    }
    const oneByOne = new SseInspector();
    for (const b of bytes) oneByOne.feed(Buffer.from([b]));
    oneByOne.finish();
    assert.equal(oneByOne.firstErrorEvent?.message, message);
  });

  void it('ignores a UTF-8 byte-order mark at the start, even when split', () => {
    const bytes = Buffer.concat([Buffer.from([0xef, 0xbb, 0xbf]), Buffer.from('data: [DONE]\n\n')]);
    assertVerdict(inspect(bytes.subarray(0, 1), bytes.subarray(1, 2), bytes.subarray(2)).finish(), 'ok');
  });
});

// ---- property: any split of a stream gives the same result as the unsplit stream ----

type ModelEvent =
  | { t: 'delta'; content: string }
  | { t: 'comment'; text: string }
  | { t: 'error'; message: string }
  | { t: 'named-error'; message: string }
  | { t: 'done' };

const eventArb: fc.Arbitrary<ModelEvent> = fc.oneof(
  { weight: 6, arbitrary: fc.record({ t: fc.constant('delta' as const), content: fc.string({ unit: 'grapheme', maxLength: 12 }) }) },
  { weight: 1, arbitrary: fc.record({ t: fc.constant('comment' as const), text: fc.stringMatching(/^[a-z ]{0,8}$/) }) },
  {
    weight: 1,
    arbitrary: fc.record({ t: fc.constant('error' as const), message: fc.string({ unit: 'grapheme', minLength: 1, maxLength: 12 }) }),
  },
  {
    weight: 1,
    arbitrary: fc.record({ t: fc.constant('named-error' as const), message: fc.string({ unit: 'grapheme', minLength: 1, maxLength: 12 }) }),
  },
  { weight: 1, arbitrary: fc.constant({ t: 'done' as const }) },
);

function encode(events: readonly ModelEvent[], eol: string): Buffer {
  const lines: string[] = [];
  for (const e of events) {
    switch (e.t) {
      case 'delta':
        lines.push(`data: ${JSON.stringify({ choices: [{ delta: { content: e.content } }] })}`, '');
        break;
      case 'comment':
        lines.push(`: ${e.text}`, '');
        break;
      case 'error':
        lines.push(`data: ${JSON.stringify({ error: { message: e.message, type: 'server_error' } })}`, '');
        break;
      case 'named-error':
        lines.push('event: error', `data: ${JSON.stringify({ message: e.message })}`, '');
        break;
      case 'done':
        lines.push('data: [DONE]', '');
        break;
    }
  }
  return Buffer.from(lines.map((l) => l + eol).join(''), 'utf8');
}

/** What the verdict must be, computed from the model rather than from the bytes. */
function expected(events: readonly ModelEvent[]): { kind: 'ok' | 'stream_incomplete' | 'upstream_error_event'; message?: string } {
  const firstError = events.find((e) => e.t === 'error' || e.t === 'named-error');
  if (firstError !== undefined && (firstError.t === 'error' || firstError.t === 'named-error')) {
    return { kind: 'upstream_error_event', message: firstError.message.trim() === '' ? undefined : firstError.message };
  }
  return { kind: events.some((e) => e.t === 'done') ? 'ok' : 'stream_incomplete' };
}

void describe('SseInspector: property', () => {
  void it('any split of a stream gives the same verdict as the whole, and the one the model predicts', () => {
    fc.assert(
      fc.property(
        fc.array(eventArb, { maxLength: 12 }),
        fc.constantFrom('\n', '\r\n', '\r'),
        fc.array(fc.nat(), { maxLength: 20 }),
        (events, eol, cuts) => {
          const bytes = encode(events, eol);
          const whole = inspect(bytes);
          const wholeVerdict = whole.finish();
          const pieces = inspect(...splitBytes(bytes, cuts));
          const piecesVerdict = pieces.finish();

          assert.deepEqual(piecesVerdict, wholeVerdict);
          assert.deepEqual(pieces.firstErrorEvent, whole.firstErrorEvent);
          assert.equal(pieces.sawTerminator, whole.sawTerminator);
          assert.deepEqual(pieces.lastBytes, whole.lastBytes);

          const want = expected(events);
          assertVerdict(wholeVerdict, want.kind);
          if (want.message !== undefined) assert.equal(whole.firstErrorEvent?.message, want.message);
        },
      ),
      { numRuns: 500 },
    );
  });
});
