// The frame reader (src/http2/frames.ts) cuts a connection's byte stream into frames however
// the reads split it, and copies only what a split forces it to.
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { describe, it } from 'node:test';
import { ConnectionError, encodeFrame, ErrorCode, FrameReader, FrameType } from '../../../src/http2/frames.js';

interface Read {
  readonly type: number;
  readonly flags: number;
  readonly streamId: number;
  readonly payload: Buffer;
}

function readAll(reader: FrameReader, chunks: Buffer[]): Read[] {
  const frames: Read[] = [];
  for (const chunk of chunks) {
    reader.push(chunk, (type, flags, streamId, payload) => frames.push({ type, flags, streamId, payload: Buffer.from(payload) }));
  }
  return frames;
}

void describe('FrameReader', () => {
  const frames = [
    encodeFrame(FrameType.HEADERS, 0x4, 1, randomBytes(40)),
    encodeFrame(FrameType.DATA, 0, 1, randomBytes(3000)),
    encodeFrame(FrameType.SETTINGS, 0x1, 0),
    encodeFrame(FrameType.DATA, 0x1, 3, randomBytes(16_384)),
    encodeFrame(FrameType.PING, 0, 0, randomBytes(8)),
  ];
  const stream = Buffer.concat(frames);

  void it('yields the same frames whatever two reads the byte stream is split into', () => {
    const whole = readAll(new FrameReader(16_384), [stream]);
    assert.equal(whole.length, frames.length);
    for (let cut = 0; cut <= stream.length; cut += 7) {
      const split = readAll(new FrameReader(16_384), [stream.subarray(0, cut), stream.subarray(cut)]);
      assert.deepEqual(split, whole, `split at byte ${cut}`);
    }
  });

  void it('yields the same frames when the bytes arrive one at a time', () => {
    const bytes = Array.from(stream, (b) => Buffer.from([b]));
    assert.deepEqual(readAll(new FrameReader(16_384), bytes), readAll(new FrameReader(16_384), [stream]));
  });

  void it('after a frame split over two reads, the later frames of the second read are views of it, not copies', () => {
    // Under load every read ends inside a frame; copying the whole next read to finish that one
    // frame would copy every byte received once more.
    const cut = frames[0].length + 100; // inside the 3000-byte DATA frame
    const second = Buffer.from(stream.subarray(cut));
    const seen: Buffer[] = [];
    const reader = new FrameReader(16_384);
    reader.push(stream.subarray(0, cut), () => undefined);
    reader.push(second, (_type, _flags, _streamId, payload) => seen.push(payload));
    assert.equal(seen.length, 4);
    for (const payload of seen.slice(1)) assert.equal(payload.buffer, second.buffer, 'a view of the read it came in');
  });

  void it('refuses a frame above the limit from its header alone, even when the header is split', () => {
    const big = encodeFrame(FrameType.DATA, 0, 1, Buffer.alloc(20_000)).subarray(0, 9);
    const reader = new FrameReader(16_384);
    reader.push(big.subarray(0, 4), () => undefined);
    assert.throws(
      () => reader.push(big.subarray(4), () => undefined),
      (err: unknown) => err instanceof ConnectionError && err.code === ErrorCode.FRAME_SIZE_ERROR,
    );
  });
});
