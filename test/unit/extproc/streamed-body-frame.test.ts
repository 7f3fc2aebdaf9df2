// A streamed body framed in pieces around its own bytes (src/extproc/codec/streamed-body-frame.ts):
// the pieces, written in order, are byte for byte the framed message the encoder and protobufjs
// (the oracle) produce for the same reply, the body piece is the caller's Buffer itself (not a
// copy), and any reply of another shape is left to the encoder.

import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import fc from 'fast-check';
import { framedStreamedBody, streamedBodyReply } from '../../../src/extproc/codec/streamed-body-frame.js';
import { frameMessage, joinedFrame } from '../../../src/grpc/framing.js';
import { Writer } from '../../../src/grpc/protobuf-wire.js';
import { frameReply } from '../../../src/extproc/reply-frames.js';
import { streamedBody } from '../../../src/extproc/replies.js';
import type { ProcessingResponse } from '../../../src/extproc/messages.js';
import { loadWireDefinitions } from '../../support/proto-definitions.js';

const wire = loadWireDefinitions();
const responseType = wire.packageDefinition['envoy.service.ext_proc.v3.ProcessingResponse'] as unknown as {
  serialize(value: object): Buffer;
};

/** A scratch writer, as reply-frames.ts passes its own. */
const writer = new Writer();

/** The oracle: protobufjs's bytes for the reply, with the gRPC prefix. */
const oracleFrame = (reply: ProcessingResponse): Buffer => frameMessage(responseType.serialize(reply));

/** Body lengths around each varint width boundary of every nested length, and the 64 KiB chunk. */
const lengths = fc.oneof(fc.constantFrom(0, 1, 100, 127, 128, 16_370, 16_383, 16_384, 16_400, 65_536), fc.integer({ min: 0, max: 70_000 }));

void describe('a streamed body framed around its own bytes', () => {
  void it('writes the bytes protobufjs writes for the same reply, for every length, direction and end flag', () => {
    fc.assert(
      fc.property(
        lengths,
        fc.constantFrom<'request' | 'response'>('request', 'response'),
        fc.constantFrom(true, false, undefined),
        (n, direction, end) => {
          const body = Buffer.alloc(n, n % 251);
          const streamed = { body, ...(end === undefined ? {} : { end_of_stream: end }) };
          const reply: ProcessingResponse = { [`${direction}_body`]: { response: { body_mutation: { streamed_response: streamed } } } };
          const shape = streamedBodyReply(reply, 0);
          assert.ok(shape !== undefined);
          assert.equal(streamedBodyReply(reply, n + 1), undefined, 'a body under the size asked for stays with the encoder');
          const pieces = framedStreamedBody(writer, shape);
          assert.deepEqual(Buffer.concat(pieces), oracleFrame(reply));
          assert.equal(pieces[1], body, 'the body piece is the Buffer given, not a copy');
        },
      ),
      { numRuns: 300 },
    );
  });

  void it('is how frameReply sends the 64 KiB replies of a long FULL_DUPLEX_STREAMED body, and small ones as one Buffer', () => {
    const long = Buffer.alloc(3 * 65_536 + 20_000, 7); // the last chunk 20,000 bytes: over the view threshold too
    const replies = streamedBody('request', long, true);
    assert.equal(replies.length, 4);
    for (const [i, reply] of replies.entries()) {
      const frame = frameReply(reply);
      assert.ok(!Buffer.isBuffer(frame), `reply ${i} in pieces`);
      assert.equal(frame[1].buffer, long.buffer, 'a view of the collected body');
      assert.deepEqual(joinedFrame(frame), oracleFrame(reply));
    }
    const atThreshold = frameReply(streamedBody('response', Buffer.alloc(16 * 1024, 3), false)[0]);
    const under = frameReply(streamedBody('response', Buffer.alloc(16 * 1024 - 1, 3), false)[0]);
    assert.ok(!Buffer.isBuffer(atThreshold) && Buffer.isBuffer(under), 'from 16 KiB a view, below it one Buffer');
    const small = streamedBody('response', Buffer.from('data: {"x":1}\n\n'), false)[0];
    const frame = frameReply(small);
    assert.ok(Buffer.isBuffer(frame), 'a small chunk is copied into one frame');
    assert.deepEqual(frame, oracleFrame(small));
  });

  void it('leaves every other reply to the encoder', () => {
    const body = Buffer.alloc(20_000, 1);
    const others: ProcessingResponse[] = [
      { request_body: { response: { status: 'CONTINUE_AND_REPLACE', body_mutation: { streamed_response: { body } } } } },
      { request_body: { response: { body_mutation: { streamed_response: { body } }, clear_route_cache: true } } },
      { request_body: { response: { body_mutation: { streamed_response: { body } }, header_mutation: { remove_headers: ['x'] } } } },
      { request_body: { response: { body_mutation: { body } } } },
      { request_body: { response: { body_mutation: { streamed_response: { body, end_of_stream_without_message: true } } } } },
      { request_body: { response: { body_mutation: { streamed_response: { body, grpc_message_compressed: false } } } } },
      { request_body: { response: { body_mutation: { streamed_response: { body }, clear_body: false } } } },
      { request_body: { response: { body_mutation: { streamed_response: { body }, body } } } },
      {
        request_body: { response: { body_mutation: { streamed_response: { body } } } },
        response_body: { response: { body_mutation: { streamed_response: { body } } } },
      },
      { request_body: { response: { body_mutation: { streamed_response: { body } } } }, dynamic_metadata: { fields: {} } },
      { request_body: { response: { body_mutation: { streamed_response: { end_of_stream: true } } } } },
      { request_body: { response: { body_mutation: { streamed_response: { body } } } }, mode_override: { response_body_mode: 'NONE' } },
      { request_body: { response: {} } },
      { request_headers: { response: {} } },
    ];
    for (const reply of others) {
      assert.equal(streamedBodyReply(reply, 0), undefined, JSON.stringify(Object.keys(reply)));
      const frame = frameReply(reply);
      assert.ok(Buffer.isBuffer(frame));
      assert.deepEqual(frame, oracleFrame(reply));
    }
  });
});
