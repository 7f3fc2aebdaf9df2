// Envoy's access-log entries as llm-extproc reads them: messages encoded from the .proto subset
// (proto/envoy/service/accesslog/v3, an oracle independent of our hand-written decoder) decode to
// the request id, status, details and Envoy's flag bitmask; and the call hears every entry and
// answers once, when Envoy half-closes.

import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { loadSync } from '@grpc/proto-loader';
import type { MethodDefinition } from '@grpc/proto-loader';
import { accessLogMethod, decodeAccessLogs, FORWARDED_LOG_NAME } from '../../../src/extproc/access-log-service.js';
import { REPLICA_KEY } from '../../../src/extproc/protocol-names.js';
import type { AccessLogEntry } from '../../../src/extproc/access-log-service.js';
import type { CallSink } from '../../../src/grpc/bidi-call.js';
import { RESPONSE_FLAGS, responseFlagNames } from '../../../src/errors/envoy-response-flags.js';
import { PROTO_LOADER_OPTIONS } from '../../support/proto-definitions.js';

const SERVICE = 'envoy.service.accesslog.v3.AccessLogService';
const definitions = loadSync(['envoy/service/accesslog/v3/als.proto'], { ...PROTO_LOADER_OPTIONS });
const streamAccessLogs = (definitions[SERVICE] as Record<string, MethodDefinition<object, object>>).StreamAccessLogs;

function encode(message: object): Buffer {
  return streamAccessLogs.requestSerialize(message);
}

const CLIENT_LEFT = {
  common_properties: { upstream_cluster: 'llm_backends', response_flags: { downstream_connection_termination: true }, route_name: 'r' },
  protocol_version: 'HTTP11',
  request: { authority: 'gw', path: '/v1/chat/completions', request_id: 'req-1' },
  response: { response_code: { value: 200 }, response_body_bytes: '1234', response_code_details: 'downstream_remote_disconnect' },
};

const LOCAL_REPLY = {
  common_properties: { response_flags: { upstream_remote_reset: true, upstream_connection_termination: true } },
  request: { request_id: 'req-2' },
  response: { response_code: { value: 502 }, response_code_details: 'upstream_reset_after_response_started{remote_reset}' },
};

/** An entry's facts, without the view of its bytes. */
function facts({ wire: _wire, ...rest }: AccessLogEntry): Omit<AccessLogEntry, 'wire'> {
  return rest;
}

/** The stream's dynamic metadata as Envoy logs it, with the replica's address where it picked. */
function pickedBy(replica: string): object {
  const string = (value: string): object => ({ stringValue: value });
  return {
    filter_metadata: {
      'envoy.lb': { fields: { 'x-gateway-destination-endpoint': string('10.0.0.9:8000'), [REPLICA_KEY]: string(replica) } },
      'envoy.filters.http.other': { fields: { [REPLICA_KEY]: string('not-this-one:1') } },
    },
  };
}

void describe('decodeAccessLogs', () => {
  void it("reads each HTTP entry's request id, status, details and flags, skipping the rest", () => {
    const { forwarded, entries } = decodeAccessLogs(
      encode({ identifier: { log_name: 'llm_extproc_stream_ends' }, http_logs: { log_entry: [CLIENT_LEFT, LOCAL_REPLY] } }),
    );
    assert.equal(forwarded, false, "Envoy's own log name");
    assert.deepEqual(entries.map(facts), [
      { requestId: 'req-1', status: 200, flags: RESPONSE_FLAGS.DC, codeDetails: 'downstream_remote_disconnect', owner: '' },
      {
        requestId: 'req-2',
        status: 502,
        flags: RESPONSE_FLAGS.UR | RESPONSE_FLAGS.UC,
        codeDetails: 'upstream_reset_after_response_started{remote_reset}',
        owner: '',
      },
    ]);
  });

  void it("reads the replica that picked the stream from its envoy.lb metadata, and keeps the entry's bytes as sent", () => {
    const entry = { ...CLIENT_LEFT, common_properties: { ...CLIENT_LEFT.common_properties, metadata: pickedBy('10.1.2.3:9002') } };
    const message = encode({ http_logs: { log_entry: [entry] } });
    const { entries } = decodeAccessLogs(message);
    assert.equal(entries[0]?.owner, '10.1.2.3:9002');
    const wire = entries[0]?.wire ?? Buffer.alloc(0);
    // The one entry is the message's tail: HTTPAccessLogEntries { log_entry(1) = these bytes }.
    assert.ok(wire.length > 0 && message.subarray(message.length - wire.length).equals(wire));
    assert.equal(wire[0], (1 << 3) | 2, 'starts with its common_properties');
  });

  void it("marks a message a peer forwarded by its identifier's log name", () => {
    const batch = decodeAccessLogs(encode({ identifier: { log_name: FORWARDED_LOG_NAME }, http_logs: { log_entry: [CLIENT_LEFT] } }));
    assert.equal(batch.forwarded, true);
    assert.equal(batch.entries[0]?.requestId, 'req-1');
  });

  void it("maps every ResponseFlags field to Envoy's bitmask (field n = bit n-1; downstream_remote_reset = DR), unauthorized_details included", () => {
    const fields = [
      'failed_local_healthcheck', 'no_healthy_upstream', 'upstream_request_timeout', 'local_reset', 'upstream_remote_reset',
      'upstream_connection_failure', 'upstream_connection_termination', 'upstream_overflow', 'no_route_found', 'delay_injected',
      'fault_injected', 'rate_limited', 'unauthorized_details', 'rate_limit_service_error', 'downstream_connection_termination',
      'upstream_retry_limit_exceeded', 'stream_idle_timeout', 'invalid_envoy_request_headers', 'downstream_protocol_error',
      'upstream_max_stream_duration_reached', 'response_from_cache_filter', 'no_filter_config_found', 'duration_timeout',
      'upstream_protocol_error', 'no_cluster_found', 'overload_manager', 'dns_resolution_failure', 'downstream_remote_reset',
    ]; // prettier-ignore
    const expected = ['LH', 'UH', 'UT', 'LR', 'UR', 'UF', 'UC', 'UO', 'NR', 'DI', 'FI', 'RL', 'UAEX', 'RLSE', 'DC', 'URX', 'SI', 'IH', 'DPE', 'UMSDR', 'RFCF', 'NFCF', 'DT', 'UPE', 'NC', 'OM', 'DF', 'DR']; // prettier-ignore
    fields.forEach((field, i) => {
      const value = field === 'unauthorized_details' ? { reason: 'EXTERNAL_SERVICE' } : true;
      const [entry] = decodeAccessLogs(
        encode({ http_logs: { log_entry: [{ common_properties: { response_flags: { [field]: value } } }] } }),
      ).entries;
      assert.deepEqual(responseFlagNames(entry?.flags ?? 0), [expected[i]], field);
    });
  });

  void it('an entry without request or response: empty id, no status', () => {
    assert.deepEqual(decodeAccessLogs(encode({ http_logs: { log_entry: [{}] } })).entries.map(facts), [
      { requestId: '', status: undefined, flags: 0, codeDetails: '', owner: '' },
    ]);
  });

  void it('bytes that are not a message throw', () => {
    assert.throws(() => decodeAccessLogs(Buffer.from([0x12, 0x05, 0x0a])), /malformed protobuf message/);
  });
});

void describe('the StreamAccessLogs call', () => {
  void it('hands every entry on, counts its open streams, and answers once (empty) when Envoy half-closes', () => {
    const heard: AccessLogEntry[] = [];
    const open: number[] = [];
    const method = accessLogMethod({ entry: (entry) => heard.push(entry), streams: (n) => open.push(n) });
    const writes: unknown[] = [];
    let endedOk = 0;
    const sink: CallSink<null> = {
      write: (reply) => writes.push(reply) > 0,
      pauseUntilDrain: () => undefined,
      endOk: () => endedOk++,
      endError: () => assert.fail('no error end'),
    };
    assert.equal(method.path, `/${SERVICE}/StreamAccessLogs`);
    const call = method.start(sink);
    assert.equal(method.openCalls, 1);
    call.message(method.decode(encode({ http_logs: { log_entry: [CLIENT_LEFT] } })));
    call.message(method.decode(encode({ http_logs: { log_entry: [LOCAL_REPLY] } })));
    assert.deepEqual(
      heard.map((e) => e.requestId),
      ['req-1', 'req-2'],
    );
    assert.equal(call.inputEnded(), true);
    call.halfClosed();
    assert.deepEqual(writes, [null]);
    assert.equal(method.frame(null).length, 5, 'an empty message: the 5-byte gRPC frame header only');
    assert.equal(endedOk, 1);
    assert.equal(method.openCalls, 0);
    assert.deepEqual(open, [1, 0]);
  });

  void it('shutdown ends open log streams at once (Envoy never ends them), with OK', () => {
    const method = accessLogMethod({ entry: () => undefined });
    let endedOk = 0;
    method.start({ write: () => true, pauseUntilDrain: () => undefined, endOk: () => endedOk++, endError: () => undefined });
    method.shutdownStarted?.();
    assert.equal(endedOk, 1);
    assert.equal(method.openCalls, 0);
  });
});
