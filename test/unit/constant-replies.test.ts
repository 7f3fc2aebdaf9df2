// The pre-encoded "continue" replies must be byte-for-byte what protobufjs would send.

import assert from 'node:assert/strict';
import { it } from 'node:test';
import { CONSTANT_REPLIES } from '../../src/extproc/constant-replies.js';
import { loadWireDefinitions } from '../../src/extproc/wire.js';

it('cached constant replies encode exactly like freshly built equal replies, and decode back to them', () => {
  const { Process } = loadWireDefinitions().externalProcessor;
  for (const reply of CONSTANT_REPLIES) {
    const fresh = JSON.parse(JSON.stringify(reply)) as typeof reply;
    const cached = Process.responseSerialize(reply);
    assert.deepEqual(cached, Process.responseSerialize(fresh));
    assert.ok(cached.length > 0, 'the oneof case is on the wire even with an empty CommonResponse');
    const decoded = Process.responseDeserialize(cached) as Record<string, unknown>;
    assert.deepEqual(
      Object.keys(decoded).filter((k) => k !== 'response'),
      Object.keys(reply),
    );
  }
});
