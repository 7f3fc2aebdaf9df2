// The byte-level JSON check must never call a document whole that JSON.parse rejects, and must
// recognise what JSON.parse accepts (short of the documented exceptions), or answers we pass
// would be judged differently from before.
import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import fc from 'fast-check';
import { isWellFormedJson } from '../../../src/inspect/json-syntax.js';

function parses(bytes: Buffer): boolean {
  const text = bytes.toString('utf8');
  if (text.trim() === '') return false;
  try {
    JSON.parse(text);
    return true;
  } catch {
    return false;
  }
}

const check = (bytes: Buffer): void =>
  assert.equal(isWellFormedJson(bytes), parses(bytes), `for ${JSON.stringify(bytes.toString('latin1'))}`);

void describe('isWellFormedJson', () => {
  void it('agrees with JSON.parse on hand-picked documents and near misses', () => {
    const cases = [
      '{"id":"x","choices":[{"index":0,"message":{"content":"h\\u00e9llo \\"q\\" \\\\ \\/ \\b\\f\\n\\r\\t"}}],"n":null}',
      ' [1, -2, 3.5, -0.25e+10, 1E-3, 0, true, false, null, "", {}, []]\n\r\t',
      '"str"',
      '0',
      '-0',
      '12',
      'true',
      'null',
      '{"a":{"b":[[[]]]}}',
      '{"__proto__":1,"a":1,"a":2}',
      '',
      ' ',
      '{',
      '}',
      '[',
      '[1,]',
      '{"a":1,}',
      '{"a"}',
      '{"a":}',
      '{a:1}',
      "{'a':1}",
      '[1 2]',
      '01',
      '1.',
      '.5',
      '-',
      '1e',
      '1e+',
      '+1',
      '0x10',
      'NaN',
      'Infinity',
      'tru',
      'nulll',
      'True',
      '"\\x"',
      '"\\u12g4"',
      '"\\u123"',
      '"a\nb"',
      '"a\tb"',
      '"unterminated',
      '{"a":1}}',
      '[1]]',
      '{"a":1} x',
      '1 2',
      '[{"a":1]',
      '{"a":[1}',
      '"\u00e9\ud83d\ude00"',
    ];
    for (const text of cases) check(Buffer.from(text, 'utf8'));
  });

  void it('agrees with JSON.parse on bytes that are not UTF-8 or not ASCII', () => {
    check(Buffer.from([0x22, 0xff, 0xfe, 0x22])); // invalid UTF-8 inside a string
    check(Buffer.from([0x22, 0xc3, 0x22])); // a cut multi-byte sequence right before the quote
    check(Buffer.from([0x5b, 0xc3, 0xa9, 0x5d])); // é outside a string
    check(Buffer.concat([Buffer.from([0xef, 0xbb, 0xbf]), Buffer.from('{}')]).subarray(3)); // the view, not the BOM
    check(Buffer.from('\u00a0{}', 'utf8')); // no-break space is not JSON whitespace
  });

  void it('calls a document with a BOM or deeper than 512 levels not well-formed (the caller looks closer)', () => {
    assert.equal(isWellFormedJson(Buffer.from('\ufeff{}', 'utf8')), false);
    assert.equal(isWellFormedJson(Buffer.from('['.repeat(600) + ']'.repeat(600))), false);
    assert.equal(isWellFormedJson(Buffer.from('['.repeat(500) + ']'.repeat(500))), true);
  });

  void it('finds a control character, quote or backslash anywhere in a long string, at every alignment', () => {
    // Long runs are read a word at a time: every byte position and start offset must still count.
    const backing = Buffer.alloc(200 + 8);
    for (let offset = 0; offset < 4; offset++) {
      for (const special of [0x00, 0x0a, 0x1f, 0x22, 0x5c]) {
        for (let at = 1; at < 199; at++) {
          const doc = backing.subarray(offset, offset + 200);
          doc.fill(0x61);
          doc[0] = 0x22;
          doc[199] = 0x22;
          doc[at] = special;
          check(doc);
        }
      }
      const plain = backing.subarray(offset, offset + 200).fill(0xc3);
      plain[0] = 0x22;
      plain[199] = 0x22;
      check(plain); // bytes of 0x80 and above are string content, never special
    }
  });

  void it('agrees with JSON.parse on random JSON and on every cut and byte change of it', () => {
    fc.assert(
      fc.property(fc.jsonValue(), fc.nat(), fc.integer({ min: 0, max: 255 }), (value, at, byte) => {
        const bytes = Buffer.from(JSON.stringify(value, null, at % 3 === 0 ? 1 : undefined) ?? 'null', 'utf8');
        check(bytes);
        const cut = at % (bytes.length + 1);
        check(bytes.subarray(0, cut));
        const changed = Buffer.from(bytes);
        if (changed.length > 0) changed[cut % changed.length] = byte;
        check(changed);
        check(Buffer.concat([bytes.subarray(0, cut), Buffer.from([byte]), bytes.subarray(cut)]));
      }),
      { numRuns: 3000 },
    );
  });
});
