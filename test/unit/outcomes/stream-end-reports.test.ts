// What Envoy's access-log entry means for a stream that broke half-way (breakCause), and how
// entries wait for their stream and streams for their entry (StreamEndReports).

import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { RESPONSE_FLAGS } from '../../../src/errors/envoy-response-flags.js';
import type { ResponseFlagName } from '../../../src/errors/envoy-response-flags.js';
import { breakCause, StreamEndReports } from '../../../src/outcomes/stream-end-reports.js';
import type { EnvoyStreamEnd } from '../../../src/outcomes/stream-end-reports.js';

function end(status: number | undefined, ...flags: ResponseFlagName[]): EnvoyStreamEnd {
  return { requestId: 'r', status, flags: flags.reduce((bits, flag) => bits | RESPONSE_FLAGS[flag], 0), codeDetails: '' };
}

void describe('breakCause', () => {
  const cases: ReadonlyArray<{ name: string; end: EnvoyStreamEnd; cause: ReturnType<typeof breakCause> }> = [
    { name: 'DC alone: the client closed its connection', end: end(200, 'DC'), cause: { by: 'client' } },
    { name: 'DR alone: an HTTP/2 client reset its stream', end: end(200, 'DR'), cause: { by: 'client' } },
    { name: 'UC after the headers went out: a cut stream', end: end(200, 'UC'), cause: { by: 'upstream', result: 'stream_broken' } },
    { name: 'UPE and DC: the model server broke it first', end: end(200, 'UPE', 'DC'), cause: { by: 'upstream', result: 'stream_broken' } },
    { name: 'SI: the stream idle timeout cut it', end: end(200, 'SI'), cause: { by: 'upstream', result: 'stream_broken' } },
    { name: "UR with Envoy's own 502: that reply's code", end: end(502, 'UR'), cause: { by: 'upstream', result: 'upstream_reset' } },
    { name: "SI with Envoy's own 504: that reply's code", end: end(504, 'SI'), cause: { by: 'upstream', result: 'upstream_timeout' } },
    { name: 'no flag at all: not the client', end: end(200), cause: { by: 'upstream', result: 'stream_broken' } },
  ];
  for (const { name, end: entry, cause } of cases) {
    void it(name, () => assert.deepEqual(breakCause(entry, 200), cause));
  }
});

void describe('StreamEndReports', () => {
  void it('listens only while some Envoy streams its log', () => {
    const reports = new StreamEndReports();
    assert.equal(reports.listening, false);
    reports.streams(2);
    assert.equal(reports.listening, true);
    reports.streams(0);
    assert.equal(reports.listening, false);
  });

  void it('an entry that came first is kept for its stream, once', async () => {
    const reports = new StreamEndReports();
    reports.report({ ...end(200, 'DC'), requestId: 'a' });
    assert.deepEqual(await reports.waitFor('a', 1000), { ...end(200, 'DC'), requestId: 'a' });
    assert.equal(await reports.waitFor('a', 1), undefined, 'taken');
  });

  void it('a stream that waits gets its entry when it comes, and nothing past its wait', async () => {
    const reports = new StreamEndReports();
    const waiting = reports.waitFor('b', 60_000);
    reports.report({ ...end(200, 'UC'), requestId: 'b' });
    assert.equal((await waiting)?.requestId, 'b');
    assert.equal(await reports.waitFor('c', 5), undefined);
  });

  void it('entries nobody asked for age out, and entries without a request id are dropped', async () => {
    let now = 0;
    const reports = new StreamEndReports(() => now);
    reports.report({ ...end(200, 'UF'), requestId: 'old' });
    reports.report({ ...end(200, 'DC'), requestId: '' });
    now = 20_000;
    reports.report({ ...end(200, 'DC'), requestId: 'new' });
    assert.equal(await reports.waitFor('old', 1), undefined);
    assert.equal(await reports.waitFor('', 1), undefined);
    assert.equal((await reports.waitFor('new', 1))?.requestId, 'new');
  });
});
