// Reading a request body without decoding its long strings must give what JSON.parse gives, with
// each string cut to the bound, and must turn down every document JSON.parse rejects, or bodies
// would be routed (or refused) differently from before.
import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import fc from 'fast-check';
import { parseBoundedJson } from '../../../src/inspect/json-bounded.js';

const NO_WHOLE: ReadonlySet<string> = new Set();

/** JSON.parse's value with every string cut to `max` characters, except top-level `whole` members. */
function cutStrings(value: unknown, max: number, whole: ReadonlySet<string> = NO_WHOLE, top = true): unknown {
  if (typeof value === 'string') return value.slice(0, max);
  if (Array.isArray(value)) return value.map((v) => cutStrings(v, max, whole, false));
  if (typeof value === 'object' && value !== null) {
    const out: Record<string, unknown> = {};
    for (const [k, v] of Object.entries(value)) {
      const kept = top && whole.has(k) && typeof v === 'string' ? v : cutStrings(v, max, whole, false);
      Object.defineProperty(out, k, { value: kept, writable: true, enumerable: true, configurable: true });
    }
    return out;
  }
  return value;
}

function jsonParse(bytes: Buffer): { ok: true; value: unknown } | { ok: false } {
  try {
    return { ok: true, value: JSON.parse(bytes.toString('utf8')) as unknown };
  } catch {
    return { ok: false };
  }
}

function check(bytes: Buffer, max: number, whole: ReadonlySet<string> = NO_WHOLE): void {
  const expected = jsonParse(bytes);
  const got = parseBoundedJson(bytes, { maxStringChars: max, wholeTopLevelStrings: whole });
  const what = `for ${JSON.stringify(bytes.toString('latin1').slice(0, 200))} at ${max}`;
  if (!expected.ok) return assert.equal(got, undefined, what);
  assert.notEqual(got, undefined, what);
  assert.deepStrictEqual(got?.value, cutStrings(expected.value, max, whole), what);
}

void describe('parseBoundedJson', () => {
  void it('gives JSON.parse values for documents whose strings fit', () => {
    for (const text of [
      '{"model":"m","messages":[{"role":"user","content":"h\\u00e9llo \\"q\\" \\\\ \\/ \\b\\f\\n\\r\\t"}],"stream":true}',
      ' [1, -2, 3.5, -0.25e+10, 1E-3, 0, -0, 1e400, true, false, null, "", {}, []]\n',
      '{"a":1,"a":2,"a":{"b":3}}',
      '{"__proto__":{"x":1},"constructor":2}',
      '"\u00e9\ud83d\ude00 \\ud83d\\ude00"',
    ])
      check(Buffer.from(text, 'utf8'), 1000);
  });

  void it('cuts long strings to the bound at every length, through escapes, multi-byte characters and surrogate pairs', () => {
    const pieces = ['a', 'é', '日', '😀', '\\n', '\\"', '\\u00e9', '\\ud83d\\ude00', '\\\\'];
    for (let max = 0; max < 40; max++) {
      for (let p = 0; p < pieces.length; p++) {
        const raw = Array.from({ length: 300 }, (_, k) => pieces[(k * 7 + p) % pieces.length]).join('');
        check(Buffer.from(`{"model":"m","messages":[{"content":"${raw}"}]}`, 'utf8'), max);
      }
    }
  });

  void it('keeps the named top-level strings whole and cuts the same name deeper down', () => {
    const whole = new Set(['model']);
    const long = 'x'.repeat(5000);
    const bytes = Buffer.from(JSON.stringify({ model: long, metadata: { model: long }, prompt: long }));
    check(bytes, 10, whole);
    const value = parseBoundedJson(bytes, { maxStringChars: 10, wholeTopLevelStrings: whole })?.value as Record<string, unknown>;
    assert.equal(value.model, long);
    assert.equal(value.prompt, 'x'.repeat(10));
  });

  void it('turns down bytes that are not UTF-8 JSON as JSON.parse does, and reads invalid UTF-8 in strings as it does', () => {
    check(Buffer.from([0x22, 0xff, 0xfe, 0x22]), 10);
    check(Buffer.from([0x5b, 0xc3, 0xa9, 0x5d]), 10);
    check(Buffer.from('\ufeff{}', 'utf8'), 10);
    check(Buffer.from(`{"a":"${'\u00e9'.repeat(100)}\u00ff"}`, 'latin1'), 20);
  });

  void it('leaves documents deeper than 512 levels to JSON.parse', () => {
    assert.equal(
      parseBoundedJson(Buffer.from('['.repeat(600) + ']'.repeat(600)), { maxStringChars: 1, wholeTopLevelStrings: NO_WHOLE }),
      undefined,
    );
    check(Buffer.from('['.repeat(500) + ']'.repeat(500)), 1);
  });

  void it('agrees with JSON.parse on random JSON and on every cut and byte change of it', () => {
    fc.assert(
      fc.property(fc.jsonValue(), fc.nat(), fc.integer({ min: 0, max: 255 }), fc.integer({ min: 0, max: 20 }), (value, at, byte, max) => {
        const bytes = Buffer.from(JSON.stringify(value, null, at % 3 === 0 ? 1 : undefined) ?? 'null', 'utf8');
        check(bytes, max);
        const cut = at % (bytes.length + 1);
        check(bytes.subarray(0, cut), max);
        const changed = Buffer.from(bytes);
        if (changed.length > 0) changed[cut % changed.length] = byte;
        check(changed, max);
        check(Buffer.concat([bytes.subarray(0, cut), Buffer.from([byte]), bytes.subarray(cut)]), max);
      }),
      { numRuns: 3000 },
    );
  });
});
