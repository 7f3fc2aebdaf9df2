import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import fc from 'fast-check';
import { inspectJsonBody, isJsonContentType, isSseContentType } from '../../../src/inspect/json-body.js';

function detailOf(body: string | Buffer): string {
  const v = inspectJsonBody(typeof body === 'string' ? Buffer.from(body, 'utf8') : body);
  assert.equal(v.ok, false, `expected a failure for ${JSON.stringify(body.toString())}`);
  if (v.ok) return '';
  assert.equal(v.kind, 'truncated_response');
  return v.detail;
}

void describe('inspectJsonBody', () => {
  void it('accepts valid JSON documents', () => {
    for (const body of ['{"id":"x","choices":[]}', '[1,2]', ' {"a":"ü"}\n', '"str"', '0']) {
      assert.deepEqual(inspectJsonBody(Buffer.from(body)), { ok: true });
    }
  });

  void it('says where a cut-short body stopped, counting bytes', () => {
    const obj = '{"choices":[{"message":{"content":"héllo';
    assert.equal(detailOf(obj), `body ended after ${Buffer.byteLength(obj)} bytes inside a JSON string`);
    assert.equal(detailOf('{"a":1,"b":[1,2'), 'body ended after 15 bytes inside a JSON array');
    assert.equal(detailOf('{"a":1,"b":[1,2]'), 'body ended after 16 bytes inside a JSON object');
    assert.equal(detailOf('{"a":"x\\"'), 'body ended after 9 bytes inside a JSON string');
  });

  void it('describes bodies that are not JSON at all', () => {
    assert.match(detailOf('<html><body>502 Bad Gateway</body></html>'), /HTML/);
    assert.match(detailOf('Internal Server Error'), /starts with "I"/);
    assert.equal(detailOf(''), 'body is empty');
    assert.match(detailOf('  \n'), /whitespace/);
    assert.match(detailOf('{"a":1}}'), /not valid JSON/);
  });

  void it('rejects every proper prefix of a JSON object', () => {
    fc.assert(
      fc.property(
        fc.dictionary(fc.string({ maxLength: 6 }), fc.jsonValue({ maxDepth: 3 }), { minKeys: 1, maxKeys: 4 }),
        fc.nat(),
        (obj, n) => {
          const full = Buffer.from(JSON.stringify(obj), 'utf8');
          const cut = n % full.length; // strictly shorter than the whole
          const v = inspectJsonBody(full.subarray(0, cut));
          assert.equal(v.ok, false);
          assert.deepEqual(inspectJsonBody(full), { ok: true });
        },
      ),
      { numRuns: 300 },
    );
  });
});

void describe('content types', () => {
  void it('recognises JSON with parameters and any case', () => {
    assert.ok(isJsonContentType('application/json'));
    assert.ok(isJsonContentType('Application/JSON; charset=utf-8'));
    assert.ok(isJsonContentType('application/problem+json'));
    assert.ok(!isJsonContentType('text/plain'));
    assert.ok(!isJsonContentType('text/event-stream'));
    assert.ok(!isJsonContentType(undefined));
    assert.ok(!isJsonContentType(''));
  });

  void it('recognises SSE with parameters and any case', () => {
    assert.ok(isSseContentType('text/event-stream'));
    assert.ok(isSseContentType(' Text/Event-Stream ; charset=UTF-8'));
    assert.ok(!isSseContentType('application/json'));
    assert.ok(!isSseContentType(undefined));
  });
});
