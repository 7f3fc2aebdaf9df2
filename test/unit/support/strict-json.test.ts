// The strict JSON reader the log tests use: it must refuse what JSON.parse quietly accepts.
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { parseStrictJson, StrictJsonError } from '../../support/strict-json.js';

describe('parseStrictJson', () => {
  it('reads valid JSON like JSON.parse', () => {
    const text = '{"level":30,"component":"grpc-server","err":{"type":"Error","stack":"x"},"list":[{"a":1},{"a":2}]}';
    assert.deepEqual(parseStrictJson(text), JSON.parse(text));
  });

  const refused: ReadonlyArray<{ name: string; text: string; message: RegExp }> = [
    { name: 'a key twice at the top', text: '{"component":"extproc","component":"grpc-server"}', message: /duplicate key "component"/ },
    { name: 'a key twice in a nested object', text: '{"err":{"code":1,"code":2}}', message: /duplicate key "code"/ },
    { name: 'a key twice in an object inside a list', text: '[{"a":1},{"a":2,"a":3}]', message: /duplicate key "a"/ },
    { name: 'the same key spelt with an escape', text: '{"ab":1,"a\\u0062":2}', message: /duplicate key "ab"/ },
    { name: 'not JSON', text: '{"a":1,}', message: /^not JSON/ },
    { name: 'a comment', text: '{"a":1} // x', message: /^not JSON/ },
  ];
  for (const c of refused) {
    it(`refuses ${c.name}`, () => {
      assert.throws(
        () => parseStrictJson(c.text),
        (err: unknown) => err instanceof StrictJsonError && c.message.test(err.message),
      );
      if (!c.message.source.startsWith('^not')) assert.doesNotThrow(() => JSON.parse(c.text), 'JSON.parse alone accepts it');
    });
  }

  it('the same key in sibling objects is fine', () => {
    assert.deepEqual(parseStrictJson('{"a":{"x":1},"b":{"x":2}}'), { a: { x: 1 }, b: { x: 2 } });
  });
});
