import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { createParser } from 'eventsource-parser';
import type { EventSourceMessage } from 'eventsource-parser';
import { CATALOG, ERROR_KINDS, ERROR_TYPES, catalogEntry, isErrorKind } from '../../../src/errors/catalog.js';
import { GatewayError, INTERNAL_ERROR_MESSAGE } from '../../../src/errors/gateway-error.js';
import { ERROR_CODE_HEADER, renderError, renderSseErrorEvent, sseEventPrefixFor } from '../../../src/errors/render.js';
import type { RenderedError } from '../../../src/errors/render.js';

const SECRET = 'SECRET-CAUSE-dial tcp 10.1.2.3:8000 ECONNREFUSED';

function header(rendered: RenderedError, name: string): string | undefined {
  const found = rendered.headers.filter(([n]) => n === name);
  assert.ok(found.length <= 1, `header ${name} appears ${found.length} times`);
  return found[0]?.[1];
}

function parseBody(rendered: RenderedError): { error: Record<string, unknown> } {
  const parsed: unknown = JSON.parse(rendered.body.toString('utf8'));
  assert.equal(typeof parsed, 'object');
  return parsed as { error: Record<string, unknown> };
}

/** Every SSE event a standard parser dispatches from `bytes`, with a final flush. */
function sseEvents(bytes: Buffer): EventSourceMessage[] {
  const events: EventSourceMessage[] = [];
  const parser = createParser({ onEvent: (e) => events.push(e) });
  parser.feed(bytes.toString('utf8'));
  return events;
}

void describe('catalog', () => {
  void it('has one frozen entry per kind, with a known type and code = kind', () => {
    assert.equal(Object.keys(CATALOG).length, ERROR_KINDS.length);
    for (const kind of ERROR_KINDS) {
      const entry = catalogEntry(kind);
      assert.equal(entry.kind, kind);
      assert.equal(entry.code, kind);
      assert.ok((ERROR_TYPES as readonly string[]).includes(entry.type), `${kind}: type ${entry.type}`);
      assert.ok(entry.status >= 400 && entry.status <= 599, `${kind}: status ${entry.status}`);
      assert.ok(entry.cause.length > 0 && entry.action.length > 0 && entry.title.length > 0);
      assert.ok(Object.isFrozen(entry));
      if (entry.retryAfterSeconds !== undefined) assert.ok(entry.retryable, `${kind} has Retry-After but is not retryable`);
    }
    assert.ok(Object.isFrozen(CATALOG));
  });

  void it('keeps the OpenAI model_not_found code exact', () => {
    assert.equal(CATALOG.model_not_found.code, 'model_not_found');
    assert.equal(CATALOG.model_not_found.status, 404);
  });

  void it('recognises kinds', () => {
    assert.ok(isErrorKind('no_ready_replica'));
    assert.ok(!isErrorKind('nope'));
    assert.ok(!isErrorKind(42));
  });
});

void describe('renderError', () => {
  for (const kind of ERROR_KINDS) {
    void it(`renders ${kind} as OpenAI-style JSON without the cause`, () => {
      const entry = CATALOG[kind];
      const err = new GatewayError(kind, `message for ${kind}`, { cause: new Error(SECRET) });
      const rendered = renderError(err);
      assert.equal(rendered.status, entry.status);
      const body = parseBody(rendered);
      assert.deepEqual(Object.keys(body), ['error']);
      assert.equal(body.error['message'], `message for ${kind}`);
      assert.equal(body.error['type'], entry.type);
      assert.equal(body.error['code'], entry.code);
      assert.equal(body.error['param'], null);
      assert.equal(header(rendered, 'content-type'), 'application/json');
      assert.equal(header(rendered, 'content-length'), String(rendered.body.length));
      assert.equal(header(rendered, 'cache-control'), 'no-store');
      assert.equal(header(rendered, ERROR_CODE_HEADER), entry.code);
      const retryAfter = header(rendered, 'retry-after');
      if (entry.retryAfterSeconds === undefined) assert.equal(retryAfter, undefined);
      else assert.equal(retryAfter, String(entry.retryAfterSeconds));
      const everything = rendered.body.toString('utf8') + JSON.stringify(rendered.headers);
      assert.ok(!everything.includes('SECRET-CAUSE'), 'cause leaked');
      for (const [name] of rendered.headers) assert.equal(name, name.toLowerCase());
    });
  }

  void it("carries llm-d's x-llm-d-request-dropped-reason on drops only, with llm-d's status for each reason", () => {
    const statusOf: Record<string, number> = { 'rejected-no-endpoints': 503, 'rejected-saturated': 429, 'rejected-ttl-expired': 429 };
    const dropped = new Map<string, string>();
    for (const kind of ERROR_KINDS) {
      const rendered = renderError(new GatewayError(kind, `message for ${kind}`));
      const reason = header(rendered, 'x-llm-d-request-dropped-reason');
      if (reason === undefined) continue;
      dropped.set(kind, reason);
      assert.equal(rendered.status, statusOf[reason], `${kind} → ${reason}`);
    }
    assert.deepEqual(Object.fromEntries(dropped), {
      no_ready_replica: 'rejected-no-endpoints',
      pool_overloaded: 'rejected-saturated',
      shed: 'rejected-saturated',
      pool_saturated: 'rejected-saturated',
      queue_timeout: 'rejected-ttl-expired',
    });
  });

  void it('merges details under error without letting them overwrite the standard fields', () => {
    const err = new GatewayError('upstream_error', 'wrapped', {
      details: { upstream_status: 500, model: 'm', code: 'hijack', message: 'hijack', type: 'hijack', param: 'x', skipped: undefined },
    });
    const body = parseBody(renderError(err));
    assert.equal(body.error['upstream_status'], 500);
    assert.equal(body.error['model'], 'm');
    assert.equal(body.error['code'], 'upstream_error');
    assert.equal(body.error['message'], 'wrapped');
    assert.equal(body.error['type'], CATALOG.upstream_error.type);
    assert.equal(body.error['param'], null);
    assert.ok(!('skipped' in body.error));
  });

  void it('still renders valid JSON when details cannot be serialised', () => {
    const cyclic: Record<string, unknown> = {};
    cyclic['self'] = cyclic;
    for (const details of [{ big: 10n }, { cyclic }]) {
      const rendered = renderError(new GatewayError('internal_error', 'boom', { details }));
      const body = parseBody(rendered);
      assert.equal(body.error['code'], 'internal_error');
      assert.equal(header(rendered, 'content-length'), String(rendered.body.length));
    }
  });

  void it('counts content-length in bytes for non-ASCII messages', () => {
    const rendered = renderError(new GatewayError('model_not_found', 'Modèle « 模型 » introuvable 🚫'));
    assert.equal(header(rendered, 'content-length'), String(Buffer.byteLength(rendered.body.toString('utf8'))));
    assert.equal(parseBody(rendered).error['message'], 'Modèle « 模型 » introuvable 🚫');
  });

  void it('takes Retry-After from options, then the error, then the catalog, rounding up', () => {
    const withOwn = new GatewayError('no_ready_replica', 'x', { retryAfterSeconds: 14.2 });
    assert.equal(header(renderError(withOwn), 'retry-after'), '15');
    assert.equal(header(renderError(withOwn, { retryAfterSeconds: 3 }), 'retry-after'), '3');
    const plain = new GatewayError('upstream_timeout', 'x');
    assert.equal(header(renderError(plain), 'retry-after'), undefined);
    assert.equal(header(renderError(plain, { retryAfterSeconds: 7 }), 'retry-after'), '7');
  });

  void it('echoes the request id in the body', () => {
    const body = parseBody(renderError(new GatewayError('internal_error', 'x'), { requestId: 'req-123' }));
    assert.equal(body.error['request_id'], 'req-123');
  });

  void it('adds Allow: POST to method_not_allowed', () => {
    assert.equal(header(renderError(new GatewayError('method_not_allowed', 'use POST')), 'allow'), 'POST');
  });
});

void describe('GatewayError', () => {
  void it('from() keeps a GatewayError as is', () => {
    const err = new GatewayError('model_not_found', 'no such model');
    assert.equal(GatewayError.from(err), err);
  });

  void it('from() turns anything else into internal_error with a generic message and the original cause', () => {
    for (const thrown of [new TypeError(SECRET), SECRET, { weird: true }, undefined]) {
      const err = GatewayError.from(thrown);
      assert.equal(err.kind, 'internal_error');
      assert.equal(err.message, INTERNAL_ERROR_MESSAGE);
      assert.equal(err.cause, thrown);
      assert.ok(!renderError(err).body.toString('utf8').includes('SECRET-CAUSE'));
    }
  });

  void it('carries kind, details and no cause unless given', () => {
    const err = new GatewayError('invalid_model', 'bad', { details: { model: 3 } });
    assert.equal(err.kind, 'invalid_model');
    assert.deepEqual(err.details, { model: 3 });
    assert.ok(!('cause' in err));
    assert.ok(err instanceof Error);
    assert.equal(err.name, 'GatewayError');
    assert.equal(err.entry, CATALOG.invalid_model);
  });
});

void describe('sseEventPrefixFor', () => {
  const cases: Array<[tail: string, prefix: string]> = [
    ['', ''],
    ['data: [DONE]\n\n', ''],
    ['{"x":1}\r\n\r\n', ''],
    ['{"x":1}\r\r', ''],
    ['{"x":1}\n', '\n'],
    ['{"x":1}\r\n', '\n'],
    ['{"x":1}\r', '\n\n'],
    ['{"x":1}', '\n\n'],
  ];
  for (const [tail, prefix] of cases) {
    void it(`after ${JSON.stringify(tail)} writes ${JSON.stringify(prefix)}`, () => {
      assert.equal(sseEventPrefixFor(Buffer.from(tail)).toString(), prefix);
    });
  }
});

void describe('renderSseErrorEvent', () => {
  const err = new GatewayError('stream_incomplete', 'The stream ended early.', { cause: new Error(SECRET) });

  void it('is one data-only event with an error object and no [DONE]', () => {
    const bytes = renderSseErrorEvent(err);
    const text = bytes.toString('utf8');
    assert.ok(text.startsWith('data: '));
    assert.ok(text.endsWith('\n\n'));
    assert.ok(!text.includes('event:'));
    assert.ok(!text.includes('[DONE]'));
    assert.ok(!text.includes('SECRET-CAUSE'));
    const events = sseEvents(bytes);
    assert.equal(events.length, 1);
    const payload = JSON.parse(events[0]?.data ?? '') as { error: Record<string, unknown> };
    assert.equal(payload.error['code'], 'stream_incomplete');
    assert.equal(payload.error['type'], CATALOG.stream_incomplete.type);
    assert.equal(payload.error['message'], 'The stream ended early.');
  });

  // Whatever the upstream's last bytes, a standard SSE parser must see our event on its own.
  const upstreamEndings = [
    'data: {"a":1}\n\n',
    'data: {"a":1}\n',
    'data: {"a":1}',
    'data: {"a":1}\r\n\r\n',
    'data: {"a":1}\r\n',
    'data: {"a":1}\r',
    ': keep-alive\n',
  ];
  for (const upstream of upstreamEndings) {
    void it(`is dispatched separately after ${JSON.stringify(upstream)}`, () => {
      const sent = Buffer.from(upstream);
      const all = Buffer.concat([sent, renderSseErrorEvent(err, sent.subarray(-4))]);
      const events = sseEvents(all);
      const last = events.at(-1);
      assert.ok(last !== undefined);
      const payload = JSON.parse(last.data) as { error: { code: string } };
      assert.equal(payload.error.code, 'stream_incomplete');
      const upstreamEvents = events.slice(0, -1);
      for (const e of upstreamEvents) assert.equal(e.data, '{"a":1}');
    });
  }
});
