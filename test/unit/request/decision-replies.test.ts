// A routing reply is built once per destination list and sent many times: its wire bytes must be
// those of a freshly built equal reply, and lists that differ must never share a reply.

import assert from 'node:assert/strict';
import { it } from 'node:test';
import { routingReply, routingReplyWithChanges } from '../../../src/request/decision-replies.js';
import { encodeReply } from '../../../src/extproc/reply-frames.js';
import { REPLICA_KEY } from '../../../src/extproc/protocol-names.js';
import { loadWireDefinitions } from '../../support/proto-definitions.js';

const A = '10.0.0.1:8000';
const B = '10.0.0.2:8000';

it('reuses the reply of a destination list and encodes it like a fresh copy', () => {
  const { Process } = loadWireDefinitions().externalProcessor;
  const first = routingReply('request_body', [A, B, A], 'list');
  assert.equal(routingReply('request_body', [A, B, A], 'list'), first);
  const fresh = structuredClone(first);
  assert.deepEqual(encodeReply(first), Process.responseSerialize(fresh));
  assert.deepEqual(encodeReply(first), encodeReply(first));
  assert.deepEqual(Process.responseDeserialize(encodeReply(first)), {
    request_body: {
      response: {
        header_mutation: {
          set_headers: [{ header: { key: 'x-gateway-destination-endpoint', raw_value: Buffer.from(A) }, append: { value: false } }],
        },
      },
    },
    dynamic_metadata: {
      fields: {
        'envoy.lb': {
          structValue: { fields: { 'x-gateway-destination-endpoint': { stringValue: `${A},${B},${A}`, kind: 'stringValue' } } },
          kind: 'structValue',
        },
      },
    },
    response: 'request_body',
  });
});

it('keeps apart replies that differ in phase, order, length or format', () => {
  const replies = [
    routingReply('request_body', [A, B, A], 'list'),
    routingReply('request_headers', [A, B, A], 'list'),
    routingReply('request_body', [B, A, B], 'list'),
    routingReply('request_body', [A, B], 'list'),
    routingReply('request_body', [A, B, A], 'single'),
  ];
  assert.equal(new Set(replies).size, replies.length);
  const metadata = (reply: (typeof replies)[number]) => reply.dynamic_metadata?.fields?.['envoy.lb']?.structValue?.fields;
  assert.deepEqual(metadata(replies[3]), { 'x-gateway-destination-endpoint': { stringValue: `${A},${B}` } });
  assert.deepEqual(metadata(replies[4]), { 'x-gateway-destination-endpoint': { stringValue: A } });
  assert.equal(routingReply('request_body', [A, B, A], 'single'), routingReply('request_body', [A, A, B], 'single'));
});

it("a request's own reply: our trace context and the new length in the one header mutation, never shared", () => {
  const { Process } = loadWireDefinitions().externalProcessor;
  const trace = { set: [['traceparent', `00-${'a'.repeat(32)}-${'b'.repeat(16)}-01`] as const], remove: ['tracestate'] };
  const reply = routingReplyWithChanges('request_headers', [A, B], 'list', { contentLength: 42, trace });
  assert.notEqual(routingReplyWithChanges('request_headers', [A, B], 'list', { contentLength: 42, trace }), reply);
  const mutation = Process.responseDeserialize(encodeReply(reply)).request_headers?.response?.header_mutation;
  assert.deepEqual(
    mutation?.set_headers?.map((h) => [h.header?.key, h.header?.raw_value?.toString()]),
    [
      ['x-gateway-destination-endpoint', A],
      ['content-length', '42'],
      ['traceparent', `00-${'a'.repeat(32)}-${'b'.repeat(16)}-01`],
    ],
  );
  assert.deepEqual(mutation?.remove_headers, ['tracestate']);
  // Without a trace, a body change's reply is what it always was: no removal, no trace header.
  const plain = routingReplyWithChanges('request_headers', [A, B], 'list', { contentLength: 42 });
  assert.equal(plain.request_headers?.response?.header_mutation?.remove_headers, undefined);
  assert.equal(plain.request_headers?.response?.header_mutation?.set_headers?.length, 2);
});

it("names the replica that picked (listen.peerAddress) beside the pick, in the shared and the request's own reply, kept apart per replica", () => {
  const metadata = (reply: ReturnType<typeof routingReply>) => reply.dynamic_metadata?.fields?.['envoy.lb']?.structValue?.fields;
  const self = '10.0.1.5:9002';
  const named = routingReply('request_headers', [A, B], 'list', self);
  assert.deepEqual(metadata(named), {
    'x-gateway-destination-endpoint': { stringValue: `${A},${B}` },
    [REPLICA_KEY]: { stringValue: self },
  });
  assert.equal(routingReply('request_headers', [A, B], 'list', self), named, 'reused');
  assert.notEqual(routingReply('request_headers', [A, B], 'list', '10.0.1.6:9002'), named, 'another replica gets its own');
  assert.equal(metadata(routingReply('request_headers', [A, B], 'list'))?.[REPLICA_KEY], undefined, 'none without a peer address');
  const own = routingReplyWithChanges('request_headers', [A], 'single', { contentLength: 1, replica: self });
  assert.equal(metadata(own)?.[REPLICA_KEY]?.stringValue, self);
});
