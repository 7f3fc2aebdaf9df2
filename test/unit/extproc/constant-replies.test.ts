// The pre-encoded "continue" replies must be byte-for-byte what protobufjs would send, and the
// framing of replies built once must be what framing them afresh gives.

import assert from 'node:assert/strict';
import { it } from 'node:test';
import { CONSTANT_REPLIES, reusedReply } from '../../../src/extproc/constant-replies.js';
import { encodeReply, frameReply } from '../../../src/extproc/reply-frames.js';
import { frameMessage, joinedFrame } from '../../../src/grpc/framing.js';
import type { ProcessingResponse } from '../../../src/extproc/messages.js';
import { loadWireDefinitions } from '../../support/proto-definitions.js';

it('cached constant replies encode exactly like freshly built equal replies, and decode back to them', () => {
  const { Process } = loadWireDefinitions().externalProcessor;
  for (const reply of CONSTANT_REPLIES) {
    const fresh = JSON.parse(JSON.stringify(reply)) as typeof reply;
    const cached = encodeReply(reply);
    assert.deepEqual(cached, Process.responseSerialize(fresh));
    assert.ok(cached.length > 0, 'the oneof case is on the wire even with an empty CommonResponse');
    const decoded = Process.responseDeserialize(cached) as Record<string, unknown>;
    assert.deepEqual(
      Object.keys(decoded).filter((k) => k !== 'response'),
      Object.keys(reply),
    );
  }
});

it('a reply built once is framed a single time, and any other reply afresh, with the same bytes either way', () => {
  const { Process } = loadWireDefinitions().externalProcessor;
  const routing = reusedReply({ request_body: { response: { header_mutation: { set_headers: [] } } } });
  for (const reply of [...CONSTANT_REPLIES, routing]) {
    const first = frameReply(reply);
    assert.ok(joinedFrame(first).equals(frameMessage(Process.responseSerialize(reply))), 'a length-prefixed message of the reply');
    assert.equal(frameReply(reply), first, 'framed once, the same buffer on every send');
  }
  const fresh = JSON.parse(JSON.stringify(routing)) as ProcessingResponse;
  const framed = frameReply(fresh);
  assert.ok(joinedFrame(framed).equals(joinedFrame(frameReply(routing))), 'equal replies frame to equal bytes');
  assert.notEqual(frameReply(fresh), framed, 'a reply not marked as reused is framed on every send');
});
