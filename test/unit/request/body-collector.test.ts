// The request body collected from the pieces Envoy sends: whatever the pieces and whether a length
// was declared, the body is the bytes in order; a body that came whole is not copied.
import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import fc from 'fast-check';
import { BodyCollector } from '../../../src/request/body-collector.js';
import { splitBytes } from '../../support/split-bytes.js';

function collect(pieces: readonly Buffer[], declared: number | undefined, max = 1 << 20): BodyCollector {
  const collector = new BodyCollector(declared, max);
  for (const piece of pieces) collector.add(Buffer.from(piece)); // each its own read, as off the socket
  return collector;
}

void describe('BodyCollector', () => {
  void it('any split of a body, with its length declared or not, gives back the body and counts every piece', () => {
    fc.assert(
      fc.property(fc.uint8Array({ maxLength: 70_000 }), fc.array(fc.nat(), { maxLength: 12 }), fc.boolean(), (bytes, cuts, declare) => {
        const body = Buffer.from(bytes);
        const pieces = splitBytes(body, cuts);
        const collector = collect(pieces, declare ? body.length : undefined);
        assert.ok(collector.body().equals(body));
        assert.equal(collector.bytes, body.length);
        assert.equal(collector.pieces, pieces.length);
      }),
      { numRuns: 300 },
    );
  });

  void it('empty pieces count as pieces (STREAMED answers each message) and add no bytes', () => {
    const collector = collect([Buffer.alloc(0), Buffer.from('{"model"'), Buffer.alloc(0), Buffer.from(':"m"}')], undefined);
    assert.equal(collector.pieces, 4);
    assert.equal(collector.body().toString(), '{"model":"m"}');
  });

  void it('a body that came in one piece is handed back as it came; a small view of a large read is copied', () => {
    const whole = Buffer.from('x'.repeat(100_000));
    const one = new BodyCollector(undefined, 1 << 20);
    one.add(whole);
    assert.equal(one.body(), whole);
    const read = Buffer.alloc(64 * 1024);
    const small = read.subarray(0, 100);
    const kept = new BodyCollector(undefined, 1 << 20);
    kept.add(small);
    assert.notEqual(kept.body().buffer, read.buffer);
    assert.ok(kept.body().equals(small));
  });

  void it('a declared length sizes the buffer once; without one it doubles, never past the limit', () => {
    const body = Buffer.from('y'.repeat(200_000));
    const pieces = splitBytes(body, [16_384, 32_768, 49_152, 65_536, 150_000]);
    assert.equal(collect(pieces, body.length).body().buffer.byteLength, body.length);
    const undeclared = collect(pieces, undefined, 210_000).body();
    assert.ok(undeclared.equals(body));
    assert.ok(undeclared.buffer.byteLength <= 210_000);
  });
});
