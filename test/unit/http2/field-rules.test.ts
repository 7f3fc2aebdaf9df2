// Malformed HTTP/2 requests (RFC 9113 §8.2, §8.3): what Envoy sends passes, each rule catches its case.
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { checkRequestFields, trailerFieldsProblem } from '../../../src/http2/field-rules.js';
import { grpcRequestHeaders } from '../../support/h2-frames.js';

type Fields = Array<[string, string]>;

function requestFieldsProblem(fields: Fields): string | undefined {
  const check = checkRequestFields(fields);
  return check.ok ? undefined : check.problem;
}

const GET: Fields = [
  [':method', 'GET'],
  [':scheme', 'http'],
  [':path', '/'],
];

/** An ext_proc side stream as Envoy 1.40 opens it, with Istio's picker authority. */
const ENVOY_REQUEST: Fields = [
  ...grpcRequestHeaders('/envoy.service.ext_proc.v3.ExternalProcessor/Process', 'outbound|9002||llm-extproc.default.svc.cluster.local'),
  ['grpc-timeout', '1000m'],
  ['x-envoy-internal', 'true'],
  ['x-forwarded-for', '10.0.0.7'],
  ['x-envoy-expected-rq-timeout-ms', '1000'],
];

void describe('HTTP/2 request field rules', () => {
  void it("accept what Envoy sends: its side-stream request and Envoy's trailers", () => {
    assert.deepEqual(checkRequestFields(ENVOY_REQUEST), { ok: true, contentLength: -1 });
    assert.equal(
      trailerFieldsProblem([
        ['grpc-status', '0'],
        ['grpc-message', 'fine, thanks'],
      ]),
      undefined,
    );
  });

  const malformedRequests: Array<[string, Fields, RegExp]> = [
    [
      'upper case in a name',
      [
        [':path', '/x'],
        ['Content-Type', 'application/grpc'],
      ],
      /invalid field name/,
    ],
    [
      'a space in a name',
      [
        [':path', '/x'],
        ['bad name', 'v'],
      ],
      /invalid field name/,
    ],
    [
      'a colon inside a name',
      [
        [':path', '/x'],
        ['a:b', 'v'],
      ],
      /invalid field name/,
    ],
    ['a bare colon as a name', [[':', 'v']], /invalid field name/],
    [
      'a non-ASCII name',
      [
        [':path', '/x'],
        ['caf\u00e9', 'v'],
      ],
      /invalid field name/,
    ],
    [
      'CR LF in a value',
      [
        [':path', '/x'],
        ['x-a', 'one\r\ntwo'],
      ],
      /invalid value/,
    ],
    [
      'NUL in a value',
      [
        [':path', '/x'],
        ['x-a', 'a\0b'],
      ],
      /invalid value/,
    ],
    [
      'a value starting with a space',
      [
        [':path', '/x'],
        ['x-a', ' padded'],
      ],
      /invalid value/,
    ],
    [
      'a value ending with a tab',
      [
        [':path', '/x'],
        ['x-a', 'padded\t'],
      ],
      /invalid value/,
    ],
    [
      'a pseudo-header after a regular field',
      [
        ['x-a', '1'],
        [':path', '/x'],
      ],
      /after a regular field/,
    ],
    [
      'an unknown pseudo-header',
      [
        [':path', '/x'],
        [':status', '200'],
      ],
      /unknown pseudo-header/,
    ],
    [
      'a pseudo-header twice',
      [
        [':path', '/x'],
        [':path', '/y'],
      ],
      /twice/,
    ],
    ['an empty :path', [[':path', '']], /empty :path/],
    [
      'connection',
      [
        [':path', '/x'],
        ['connection', 'keep-alive'],
      ],
      /connection-specific/,
    ],
    [
      'transfer-encoding',
      [
        [':path', '/x'],
        ['transfer-encoding', 'chunked'],
      ],
      /connection-specific/,
    ],
    [
      'upgrade',
      [
        [':path', '/x'],
        ['upgrade', 'h2c'],
      ],
      /connection-specific/,
    ],
    [
      'te other than trailers',
      [
        [':path', '/x'],
        ['te', 'gzip'],
      ],
      /te other than/,
    ],
  ];
  malformedRequests.push(
    ['no :method', GET.slice(1), /no :method/],
    ['no :scheme', [GET[0], GET[2]], /no :scheme/],
    ['no :path', GET.slice(0, 2), /no :path/],
    ['a content-length that is not a number', [...GET, ['content-length', '12a']], /content-length not a number/],
    ['a negative content-length', [...GET, ['content-length', '-1']], /content-length not a number/],
    ['two different content-lengths', [...GET, ['content-length', '3'], ['content-length', '4']], /content-length given twice/],
  );
  for (const [what, fields, problem] of malformedRequests) {
    void it(`refuse a request with ${what}`, () => assert.match(requestFieldsProblem(fields) ?? 'accepted', problem));
  }

  void it('read the declared content-length; CONNECT needs no :scheme or :path', () => {
    assert.deepEqual(checkRequestFields([...GET, ['content-length', '42']]), { ok: true, contentLength: 42 });
    assert.deepEqual(checkRequestFields([...GET, ['content-length', '0']]), { ok: true, contentLength: 0 });
    assert.deepEqual(
      checkRequestFields([
        [':method', 'CONNECT'],
        [':authority', 'example.com:443'],
      ]),
      { ok: true, contentLength: -1 },
    );
  });

  void it('refuse trailers with a pseudo-header, a bad name or a connection-specific field', () => {
    assert.match(trailerFieldsProblem([[':status', '200']]) ?? 'accepted', /pseudo-header :status in trailers/);
    assert.match(trailerFieldsProblem([['Grpc-Status', '0']]) ?? 'accepted', /invalid field name/);
    assert.match(trailerFieldsProblem([['connection', 'close']]) ?? 'accepted', /connection-specific/);
  });
});
