import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { errorMessage } from '../../../src/util/error-message.js';
import { splitHostPort } from '../../../src/util/host-port.js';

describe('splitHostPort', () => {
  it('splits at the last colon and unwraps bracketed IPv6 hosts', () => {
    assert.deepEqual(splitHostPort('10.0.0.5:8000'), { host: '10.0.0.5', port: 8000 });
    assert.deepEqual(splitHostPort('[::1]:9002'), { host: '::1', port: 9002 });
    assert.deepEqual(splitHostPort('vllm.models.svc:80'), { host: 'vllm.models.svc', port: 80 });
    assert.deepEqual(splitHostPort(':9090'), { host: '', port: 9090 });
  });

  it('a missing or non-numeric port is NaN', () => {
    assert.ok(Number.isNaN(splitHostPort('10.0.0.5').port));
    assert.ok(Number.isNaN(splitHostPort('10.0.0.5:http').port));
    assert.ok(Number.isNaN(splitHostPort('10.0.0.5:').port));
  });
});

describe('errorMessage', () => {
  it("uses an Error's message and stringifies anything else", () => {
    assert.equal(errorMessage(new TypeError('bad')), 'bad');
    assert.equal(errorMessage('text'), 'text');
    assert.equal(errorMessage(42), '42');
    assert.equal(errorMessage(undefined), 'undefined');
  });
});
