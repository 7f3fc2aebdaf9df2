// grpc.health.v1's messages are hand-coded (src/grpc/health-messages.ts): they must read and write
// what protobufjs does with the same proto (the oracle, test/support/proto-definitions.ts).
import assert from 'node:assert/strict';
import { it } from 'node:test';
import fc from 'fast-check';
import {
  decodeHealthCheckRequest,
  decodeHealthCheckResponse,
  encodeHealthCheckRequest,
  encodeHealthCheckResponse,
} from '../../../src/grpc/health-messages.js';
import type { ServingStatus } from '../../../src/grpc/health-messages.js';
import { loadWireDefinitions } from '../../support/proto-definitions.js';

const { Check } = loadWireDefinitions().health;
const STATUSES: ServingStatus[] = ['UNKNOWN', 'SERVING', 'NOT_SERVING', 'SERVICE_UNKNOWN'];

it('every serving status encodes as protobufjs encodes it, and both decode it the same', () => {
  for (const status of STATUSES) {
    const ours = encodeHealthCheckResponse({ status });
    assert.deepEqual(ours, Check.responseSerialize({ status }), status);
    assert.deepEqual(decodeHealthCheckResponse(ours), Check.responseDeserialize(ours), status);
  }
});

it('property: any service name reads and writes as protobufjs reads and writes it', () => {
  fc.assert(
    fc.property(fc.string(), (service) => {
      const onWire = Check.requestSerialize({ service });
      assert.deepStrictEqual(decodeHealthCheckRequest(onWire), Check.requestDeserialize(onWire));
      assert.deepEqual(encodeHealthCheckRequest({ service }), onWire);
    }),
  );
});

it('skips fields it does not know, as protobufjs does', () => {
  const unknown = Buffer.from([0x10, 0x07, 0x1a, 0x01, 0x78]); // field 2 varint 7, field 3 "x"
  const onWire = Buffer.concat([unknown, Check.requestSerialize({ service: 'readiness' })]);
  assert.deepStrictEqual(decodeHealthCheckRequest(onWire), { service: 'readiness' });
});
