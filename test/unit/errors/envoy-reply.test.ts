import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import type { ErrorKind } from '../../../src/errors/catalog.js';
import {
  classifyEnvoyReply,
  isEnvoyLocalReply,
  isViaUpstream,
  RESPONSE_FLAGS,
  responseFlagNames,
} from '../../../src/errors/envoy-reply.js';
import type { EnvoyReplyFacts } from '../../../src/errors/envoy-reply.js';

const F = RESPONSE_FLAGS;

interface Case {
  name: string;
  facts: EnvoyReplyFacts;
  kind: ErrorKind | undefined;
  /** Substring the detail must contain. */
  detail?: string;
}

const CASES: Case[] = [
  // --- by code_details (what Envoy really writes; spaces become `_`) ---
  {
    name: 'connection refused, one replica',
    facts: {
      status: 503,
      flags: F.UF,
      codeDetails: 'upstream_reset_before_response_started{remote_connection_failure|delayed_connect_error:_Connection_refused}',
    },
    kind: 'upstream_connect_failed',
    detail: 'connection refused',
  },
  {
    name: 'connection refused on every fallback (UF+URX)',
    facts: {
      status: 503,
      flags: F.UF | F.URX,
      codeDetails: 'upstream_reset_before_response_started{remote_connection_failure|delayed_connect_error:_Connection_refused}',
    },
    kind: 'all_replicas_failed',
    detail: 'connection refused',
  },
  {
    name: 'older Envoy: connection_failure with errno 111, comma separator',
    facts: {
      status: 503,
      flags: F.UF,
      codeDetails: 'upstream_reset_before_response_started{connection_failure,delayed_connect_error:_111}',
    },
    kind: 'upstream_connect_failed',
    detail: 'connection refused',
  },
  {
    name: 'network unreachable with remote address',
    facts: {
      status: 503,
      flags: F.UF,
      codeDetails:
        'upstream_reset_before_response_started{remote_connection_failure|immediate_connect_error:_Network_is_unreachable|remote_address:[fdc4:f303:9324::254]:42349}',
    },
    kind: 'upstream_connect_failed',
    detail: 'network unreachable',
  },
  {
    name: 'address with .111. is not errno 111',
    facts: {
      status: 503,
      flags: F.UF,
      codeDetails: 'upstream_reset_before_response_started{remote_connection_failure|remote_address:10.111.0.1:8000}',
    },
    kind: 'upstream_connect_failed',
    detail: 'connection failed',
  },
  {
    name: 'connect timeout',
    facts: { status: 503, flags: F.UF, codeDetails: 'upstream_reset_before_response_started{connection_timeout}' },
    kind: 'upstream_connect_failed',
    detail: 'timed out',
  },
  {
    name: 'TLS handshake failure',
    facts: {
      status: 503,
      flags: F.UF | F.URX,
      codeDetails:
        'upstream_reset_before_response_started{remote_connection_failure|TLS_error:|268435703:SSL_routines:OPENSSL_internal:WRONG_VERSION_NUMBER:TLS_error_end}',
    },
    kind: 'all_replicas_failed',
    detail: 'TLS',
  },
  {
    name: 'connection closed before response (UC)',
    facts: { status: 503, flags: F.UC, codeDetails: 'upstream_reset_before_response_started{connection_termination}' },
    kind: 'upstream_reset',
    detail: 'closed',
  },
  {
    name: 'access-log spelling with a space',
    facts: { status: 503, codeDetails: 'upstream_reset_before_response_started{connection termination}' },
    kind: 'upstream_reset',
  },
  {
    name: 'remote reset (UR)',
    facts: { status: 503, flags: F.UR, codeDetails: 'upstream_reset_before_response_started{remote_reset}' },
    kind: 'upstream_reset',
  },
  {
    name: 'upstream protocol error',
    facts: { status: 502, flags: F.UPE, codeDetails: 'upstream_reset_before_response_started{protocol_error}' },
    kind: 'upstream_reset',
    detail: 'protocol',
  },
  {
    name: 'circuit breaker overflow (UO)',
    facts: { status: 503, flags: F.UO, codeDetails: 'upstream_reset_before_response_started{overflow}' },
    kind: 'overloaded',
    detail: 'circuit breaker',
  },
  {
    name: 'no healthy upstream (UH)',
    facts: { status: 503, flags: F.UH, codeDetails: 'no_healthy_upstream' },
    kind: 'no_healthy_upstream',
  },
  {
    name: 'route timeout (UT)',
    facts: { status: 504, flags: F.UT, codeDetails: 'response_timeout' },
    kind: 'upstream_timeout',
    detail: 'route timeout',
  },
  {
    name: 'per-try timeout',
    facts: { status: 504, flags: F.UT, codeDetails: 'upstream_per_try_timeout' },
    kind: 'upstream_timeout',
    detail: 'per-try',
  },
  {
    name: 'max stream duration',
    facts: { status: 504, flags: F.UMSDR, codeDetails: 'upstream_max_stream_duration_reached' },
    kind: 'upstream_timeout',
  },
  {
    name: 'ext_proc unreachable',
    facts: { status: 500, codeDetails: 'ext_proc_error_gRPC_error_14' },
    kind: 'gateway_unavailable',
    detail: 'unreachable',
  },
  {
    name: 'ext_proc message timeout',
    facts: { status: 504, codeDetails: 'ext_proc_error_per-message_timeout_exceeded' },
    kind: 'gateway_unavailable',
    detail: 'message timeout',
  },
  { name: 'request too large for Envoy buffer', facts: { status: 413, codeDetails: 'request_payload_too_large' }, kind: 'body_too_large' },
  { name: 'no route', facts: { status: 404, flags: F.NR, codeDetails: 'route_not_found' }, kind: 'route_not_found' },
  { name: 'missing cluster', facts: { status: 503, flags: F.NC, codeDetails: 'cluster_not_found' }, kind: 'gateway_misconfigured' },
  { name: 'maintenance mode', facts: { status: 503, flags: F.UO, codeDetails: 'maintenance_mode' }, kind: 'overloaded' },
  {
    name: 'reset after headers',
    facts: { status: 200, flags: F.UR, codeDetails: 'upstream_reset_after_response_started{remote_reset}' },
    kind: 'stream_broken',
  },

  // --- from the upstream: never reclassified ---
  {
    name: 'via_upstream 503 with Envoy-looking text and flags',
    facts: { status: 503, flags: F.URX, codeDetails: 'via_upstream', bodyText: 'no healthy upstream' },
    kind: undefined,
  },
  { name: 'via_upstream 200', facts: { status: 200, codeDetails: 'via_upstream' }, kind: undefined },
  { name: "other filter's deliberate reply", facts: { status: 403, codeDetails: 'ext_authz_denied' }, kind: undefined },
  { name: 'no evidence at all', facts: { status: 503 }, kind: undefined },

  // --- flags only (code_details attribute not configured) ---
  { name: 'flags UF+URX', facts: { status: 503, flags: F.UF | F.URX }, kind: 'all_replicas_failed' },
  { name: 'flags UF', facts: { status: 503, flags: F.UF }, kind: 'upstream_connect_failed' },
  { name: 'flags UF+UO: the connect failure is the result', facts: { status: 503, flags: F.UF | F.UO }, kind: 'upstream_connect_failed' },
  { name: 'flags UH', facts: { status: 503, flags: F.UH }, kind: 'no_healthy_upstream' },
  { name: 'flags UT', facts: { status: 504, flags: F.UT }, kind: 'upstream_timeout' },
  { name: 'flags UO with 503', facts: { status: 503, flags: F.UO }, kind: 'overloaded' },
  { name: 'flags UO on an upstream 500 (blocked retry)', facts: { status: 500, flags: F.UO }, kind: undefined },
  { name: 'flags URX alone (retried 5xx from upstream)', facts: { status: 503, flags: F.URX }, kind: undefined },
  {
    name: 'unknown details fall back to flags',
    facts: { status: 503, flags: F.UH, codeDetails: 'some_future_detail' },
    kind: 'no_healthy_upstream',
  },

  // --- text only (last resort) ---
  {
    name: 'text: connect failure errno 111',
    facts: {
      status: 503,
      bodyText:
        'upstream connect error or disconnect/reset before headers. reset reason: connection failure, transport failure reason: delayed connect error: 111',
    },
    kind: 'upstream_connect_failed',
    detail: 'connection refused',
  },
  {
    name: 'text: retried connect failure',
    facts: {
      status: 503,
      bodyText:
        'upstream connect error or disconnect/reset before headers. retried and the latest reset reason: remote connection failure, transport failure reason: delayed connect error: Connection refused',
    },
    kind: 'all_replicas_failed',
    detail: 'connection refused',
  },
  {
    name: 'text: connection termination',
    facts: { status: 503, bodyText: 'upstream connect error or disconnect/reset before headers. reset reason: connection termination' },
    kind: 'upstream_reset',
  },
  {
    name: 'text: overflow',
    facts: { status: 503, bodyText: 'upstream connect error or disconnect/reset before headers. reset reason: overflow' },
    kind: 'overloaded',
  },
  { name: 'text: no healthy upstream', facts: { status: 503, bodyText: 'no healthy upstream' }, kind: 'no_healthy_upstream' },
  { name: 'text: timeout', facts: { status: 504, bodyText: 'upstream request timeout' }, kind: 'upstream_timeout' },
  { name: 'text on a 200 is content', facts: { status: 200, bodyText: 'no healthy upstream' }, kind: undefined },
  { name: "text: Envoy's buffer-limit 413", facts: { status: 413, bodyText: 'Payload Too Large' }, kind: 'body_too_large' },
  {
    name: "a 413 with other text is the upstream's",
    facts: { status: 413, bodyText: '<html>413 Request Entity Too Large</html>' },
    kind: undefined,
  },
  { name: 'unrelated 503 text', facts: { status: 503, bodyText: '<html>Service Unavailable</html>' }, kind: undefined },
];

void describe('classifyEnvoyReply', () => {
  for (const c of CASES) {
    void it(c.name, () => {
      const result = classifyEnvoyReply(c.facts);
      assert.equal(result?.kind, c.kind);
      if (result !== undefined) {
        if (c.detail !== undefined) assert.ok(result.detail.includes(c.detail), `detail "${result.detail}" lacks "${c.detail}"`);
        // The detail is our phrase, never Envoy's raw text.
        assert.ok(!/[{}|]|reset_before|reset reason:|_error:/.test(result.detail), `raw Envoy text in "${result.detail}"`);
        assert.ok(result.detail.length > 0 && result.detail.length < 120);
      }
    });
  }
});

void describe('local reply evidence', () => {
  void it('tells local replies from upstream responses', () => {
    assert.ok(isViaUpstream({ status: 503, codeDetails: 'via_upstream' }));
    assert.ok(!isEnvoyLocalReply({ status: 503, codeDetails: 'via_upstream' }));
    assert.ok(isEnvoyLocalReply({ status: 403, codeDetails: 'ext_authz_denied' }));
    assert.ok(!isEnvoyLocalReply({ status: 503 }));
  });
});

void describe('RESPONSE_FLAGS', () => {
  void it('follows CoreResponseFlag order: bit i for enum value i', () => {
    const names = Object.keys(RESPONSE_FLAGS) as Array<keyof typeof RESPONSE_FLAGS>;
    names.forEach((name, i) => assert.equal(RESPONSE_FLAGS[name], 2 ** i, name));
    assert.equal(names.indexOf('UF'), 5);
    assert.equal(names.indexOf('URX'), 15);
  });

  void it('names set flags for logs', () => {
    assert.deepEqual(responseFlagNames(F.UF | F.URX), ['UF', 'URX']);
    assert.deepEqual(responseFlagNames(0), []);
  });
});
