// The Envoy config renderer: the properties our routing and error guarantees rely on.

import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { CATALOG } from '../../../src/errors/catalog.js';
import { DEFAULT_GATEWAY_OPTIONS, renderGatewayConfig, type GatewayConfigOptions } from '../../../tools/envoy-config/gateway-config.js';

type Node = Record<string, unknown>;
const at = (value: unknown, ...path: Array<string | number>): unknown =>
  path.reduce<unknown>((node, key) => (node as Record<string | number, unknown> | undefined)?.[key], value);

function render(overrides: Partial<GatewayConfigOptions> = {}): Node {
  return renderGatewayConfig({
    ...DEFAULT_GATEWAY_OPTIONS,
    extProc: '127.0.0.1:9002',
    backends: { kind: 'static', addresses: ['10.0.0.1:8000'] },
    ...overrides,
  });
}

function hcm(config: Node): Node {
  return at(config, 'static_resources', 'listeners', 0, 'filter_chains', 0, 'filters', 0, 'typed_config') as Node;
}

function cluster(config: Node, name: string): Node {
  return (at(config, 'static_resources', 'clusters') as Node[]).find((c) => c.name === name)!;
}

describe('renderGatewayConfig', () => {
  it('runs ext_proc before the router, fails closed, buffers the request body and reads our routing metadata', () => {
    const filters = at(hcm(render()), 'http_filters') as Node[];
    assert.deepEqual(
      filters.map((f) => f.name),
      ['envoy.filters.http.ext_proc', 'envoy.filters.http.router'],
    );
    const ext = filters[0].typed_config as Node;
    assert.equal(ext.failure_mode_allow, false);
    assert.equal(ext.allow_mode_override, true);
    assert.equal(at(ext, 'processing_mode', 'request_body_mode'), 'BUFFERED');
    assert.equal(at(ext, 'processing_mode', 'response_body_mode'), 'STREAMED');
    assert.deepEqual(ext.response_attributes, ['response.code_details', 'response.flags', 'upstream.address']);
    assert.deepEqual(at(ext, 'metadata_options', 'receiving_namespaces', 'untyped'), ['envoy.lb']);
  });

  it('retries only failures where nothing reached the model server, as many times as configured', () => {
    const route = at(hcm(render({ maxRetries: 2 })), 'route_config', 'virtual_hosts', 0, 'routes', 0, 'route') as Node;
    assert.equal(at(route, 'retry_policy', 'retry_on'), 'connect-failure,refused-stream,reset-before-request');
    assert.equal(at(route, 'retry_policy', 'num_retries'), 2);
    assert.equal(route.timeout, `${DEFAULT_GATEWAY_OPTIONS.routeTimeoutSeconds}s`);
  });

  it('points override_host at the metadata first, then the header', () => {
    const policy = at(
      cluster(render(), 'llm_backends'),
      'load_balancing_policy',
      'policies',
      0,
      'typed_extension_config',
      'typed_config',
    ) as Node;
    assert.deepEqual(policy.override_host_sources, [
      { metadata: { key: 'envoy.lb', path: [{ key: 'x-gateway-destination-endpoint' }] } },
      { header: 'x-gateway-destination-endpoint' },
    ]);
  });

  it('reaches llm-extproc over HTTP/2 by IP, DNS name or Unix socket', () => {
    assert.equal(cluster(render(), 'llm_extproc').type, 'STATIC');
    assert.equal(at(cluster(render({ extProc: 'llm-extproc.ns.svc:9002' }), 'llm_extproc'), 'cluster_type', 'name'), 'envoy.clusters.dns');
    const uds = cluster(render({ extProc: 'unix:///run/x.sock' }), 'llm_extproc');
    assert.equal(uds.type, 'STATIC');
    assert.deepEqual(at(uds, 'load_assignment', 'endpoints', 0, 'lb_endpoints', 0, 'endpoint', 'address'), {
      pipe: { path: '/run/x.sock' },
    });
    assert.ok(
      at(
        uds,
        'typed_extension_protocol_options',
        'envoy.extensions.upstreams.http.v3.HttpProtocolOptions',
        'explicit_http_config',
        'http2_protocol_options',
      ),
    );
  });

  it('renders local replies that bypass ext_proc as catalog JSON, leaving our own answers alone', () => {
    const mappers = at(hcm(render()), 'local_reply_config', 'mappers') as Node[];
    assert.match(String(at(mappers[0], 'filter', 'extension_filter', 'typed_config', 'expression')), /llm_extproc/);
    assert.equal(mappers[0].body_format_override, undefined, 'the first mapper matches our answers and changes nothing');
    const named = mappers.slice(1, -1);
    assert.ok(named.length > 0, 'mappers for named Envoy replies');
    for (const mapper of mappers.slice(1)) {
      const error = at(mapper, 'body_format_override', 'json_format', 'error') as { code: string; type: string };
      const entry = Object.values(CATALOG).find((e) => e.code === error.code);
      assert.ok(entry, `mapper code ${error.code} is in the catalog`);
      assert.equal(error.type, entry.type);
      assert.equal(at(mapper, 'body_format_override', 'content_type'), 'application/json');
    }
    // Each named reply gets its catalog status; only the catch-all keeps Envoy's.
    for (const mapper of named) {
      const code = (at(mapper, 'body_format_override', 'json_format', 'error') as { code: string }).code;
      assert.equal(mapper.status_code, Object.values(CATALOG).find((e) => e.code === code)?.status, `status of the ${code} mapper`);
    }
    // The last mapper catches any flagged Envoy reply we did not name, keeping its status.
    assert.deepEqual(at(mappers.at(-1), 'filter'), { response_flag_filter: {} });
    assert.equal(mappers.at(-1)!.status_code, undefined);
  });

  it('uses ORIGINAL_DST on our header for the original_dst variant', () => {
    const backends = cluster(render({ backends: { kind: 'original_dst' } }), 'llm_backends');
    assert.equal(backends.type, 'ORIGINAL_DST');
    assert.deepEqual(backends.original_dst_lb_config, { use_http_header: true, http_header_name: 'x-gateway-destination-endpoint' });
  });
});
