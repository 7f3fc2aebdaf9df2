// Discovery of a server's KV-event publisher: what vLLM 0.32's GET /kv_event_sources returns
// (docs/picking.md, recorded from a real server) read into the port to dial and the topic.

import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { publisherOf } from '../../../src/kv-cache/kv-events-source.js';

const VLLM_BODY = {
  '0': {
    enable_kv_cache_events: true,
    publisher: 'zmq',
    endpoint: 'tcp://*:5557',
    replay_endpoint: null,
    buffer_steps: 10000,
    hwm: 100000,
    max_queue_size: 100000,
    topic: 'kv@tiny',
  },
};

describe('a server’s KV-event publisher, from GET /kv_event_sources', () => {
  it('reads rank 0’s port from its (wildcard) endpoint and its topic', () => {
    assert.deepEqual(publisherOf(VLLM_BODY), { port: 5557, topic: 'kv@tiny' });
    assert.deepEqual(publisherOf({ '0': { ...VLLM_BODY['0'], endpoint: 'tcp://0.0.0.0:6001' } }), { port: 6001, topic: 'kv@tiny' });
  });

  it('finds no port when events are off, the endpoint is not TCP, or the body is not vLLM’s', () => {
    assert.equal(publisherOf({ '0': { ...VLLM_BODY['0'], enable_kv_cache_events: false } }).port, undefined);
    assert.equal(publisherOf({ '0': { ...VLLM_BODY['0'], endpoint: 'ipc:///tmp/kv' } }).port, undefined);
    for (const body of [null, 'text', [], {}, { '0': null }, { '1': VLLM_BODY['0'] }])
      assert.deepEqual(publisherOf(body), { port: undefined, topic: undefined }, JSON.stringify(body));
  });
});
