// A body piece kept across messages must not keep its whole socket read alive.
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { retainedPiece } from '../../../src/util/retained-piece.js';

void describe('retainedPiece', () => {
  void it('copies a small view out of a large read buffer, bytes unchanged', () => {
    const read = Buffer.alloc(64 * 1024, 0x61);
    read.write('data: {"x":1}\n\n', 30_000);
    const event = read.subarray(30_000, 30_015);
    const kept = retainedPiece(event);
    assert.equal(kept.toString(), 'data: {"x":1}\n\n');
    assert.notEqual(kept.buffer, read.buffer, 'no longer a view of the 64 KiB read');
    assert.ok(kept.buffer.byteLength < read.buffer.byteLength);
    read.fill(0);
    assert.equal(kept.toString(), 'data: {"x":1}\n\n', 'later reuse of the read does not change the kept piece');
  });

  void it('keeps a piece that is most of its buffer as it is (a buffered body: no copy)', () => {
    const body = Buffer.from(new ArrayBuffer(10_000));
    const view = body.subarray(100);
    assert.equal(retainedPiece(view), view);
  });
});
