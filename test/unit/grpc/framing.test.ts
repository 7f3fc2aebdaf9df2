// The gRPC length-prefix framer: whatever way HTTP/2 DATA frames split or merge the byte stream,
// the deframer yields exactly the messages that were framed, in order; bad prefixes are refused.
import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import fc from 'fast-check';
import { frameMessage, GrpcFramingError, MessageDeframer } from '../../../src/grpc/framing.js';
import { splitBytes } from '../../support/split-bytes.js';

function deframeAll(chunks: readonly Buffer[], max = 1 << 20): { messages: Buffer[]; idle: boolean } {
  const deframer = new MessageDeframer(max);
  const messages: Buffer[] = [];
  // Copies, because views into a chunk are only promised until the chunk is reused.
  for (const chunk of chunks) deframer.push(chunk, (message) => messages.push(Buffer.from(message)));
  return { messages, idle: deframer.idle };
}

void describe('gRPC message framing', () => {
  void it('frames a message as flag 0, big-endian length, bytes', () => {
    assert.deepEqual(frameMessage(Buffer.from('hi')), Buffer.from([0, 0, 0, 0, 2, 0x68, 0x69]));
    assert.deepEqual(frameMessage(Buffer.alloc(0)), Buffer.from([0, 0, 0, 0, 0]));
  });

  void it('any split of the framed byte stream yields the same messages, in order', () => {
    fc.assert(
      fc.property(
        fc.array(fc.uint8Array({ maxLength: 300 }), { maxLength: 12 }),
        fc.array(fc.nat(), { maxLength: 40 }),
        (messages, cuts) => {
          const stream = Buffer.concat(messages.map((m) => frameMessage(m)));
          const result = deframeAll(splitBytes(stream, cuts));
          assert.deepEqual(
            result.messages,
            messages.map((m) => Buffer.from(m)),
          );
          assert.equal(result.idle, true);
        },
      ),
      { numRuns: 500 },
    );
  });

  void it('a message split over chunks is copied out as they come: it views none of them, so they may be reused', () => {
    const message = Buffer.from('x'.repeat(40_000));
    const chunks = splitBytes(frameMessage(message), [10_000, 20_000, 30_000]).map((c) => Buffer.from(c));
    const deframer = new MessageDeframer(1 << 20);
    const out: Buffer[] = [];
    for (const chunk of chunks) {
      deframer.push(chunk, (m) => out.push(m));
      chunk.fill(0); // the socket's next read reuses its memory
    }
    assert.equal(out.length, 1);
    assert.ok(out[0].equals(message));
    assert.ok(chunks.every((chunk) => chunk.buffer !== out[0].buffer));
  });

  void it('a message larger than what is allocated ahead (8 MiB) is grown into as its bytes arrive, and comes out whole', () => {
    const message = Buffer.alloc(9 * 1024 * 1024 + 7);
    for (let i = 0; i < message.length; i += 4096) message.writeUInt32BE(i, i);
    const framed = frameMessage(message);
    const cuts = Array.from({ length: Math.ceil(framed.length / 65_536) }, (_, i) => (i + 1) * 65_536);
    const { messages, idle } = deframeAll(splitBytes(framed, cuts), 16 * 1024 * 1024);
    assert.equal(idle, true);
    assert.equal(messages.length, 1);
    assert.ok(messages[0].equals(message));
  });

  void it('a stream cut inside a prefix or a message is not idle, and holds back the incomplete message', () => {
    fc.assert(
      fc.property(fc.uint8Array({ minLength: 1, maxLength: 200 }), fc.nat(), (message, cut) => {
        const framed = frameMessage(message);
        const at = 1 + (cut % (framed.length - 1)); // strictly inside
        const result = deframeAll([framed.subarray(0, at)]);
        assert.deepEqual(result.messages, []);
        assert.equal(result.idle, false);
      }),
    );
  });

  void it('refuses a message above the limit from its prefix alone, with RESOURCE_EXHAUSTED', () => {
    const prefix = Buffer.from([0, 0, 0, 0, 0]);
    prefix.writeUInt32BE(1025, 1);
    assert.throws(
      () => deframeAll([prefix], 1024),
      (err: unknown) => err instanceof GrpcFramingError && err.code === 'RESOURCE_EXHAUSTED',
    );
    assert.deepEqual(deframeAll([frameMessage(Buffer.alloc(1024))], 1024).messages.length, 1);
  });

  void it('refuses a compressed or otherwise flagged message with INTERNAL, however the prefix is split', () => {
    for (const flag of [1, 2, 0x80]) {
      const framed = frameMessage(Buffer.from('x'));
      framed[0] = flag;
      for (const chunks of [[framed], [framed.subarray(0, 1), framed.subarray(1)], [framed.subarray(0, 3), framed.subarray(3)]]) {
        assert.throws(
          () => deframeAll(chunks),
          (err: unknown) => err instanceof GrpcFramingError && err.code === 'INTERNAL',
        );
      }
    }
  });
});
