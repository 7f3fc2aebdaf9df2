// composeSinks: every outcome reaches every sink that listens to it, in the order they were given;
// a sink that ignores an outcome is never called for it.

import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { composeSinks, IGNORED } from '../../../src/request/outcome-sink.js';
import type { OutcomeSink, RequestRecord } from '../../../src/request/outcome-sink.js';

/** A sink that writes `name:outcome` for the outcomes it listens to, and ignores the others. */
function listening(name: string, heard: string[], to: ReadonlySet<keyof OutcomeSink>): OutcomeSink {
  const note =
    (outcome: keyof OutcomeSink) =>
    (...args: unknown[]): void => {
      // The values only (the record is an object): `handled(request_body,0.5)`.
      const values = args.filter((a) => a !== undefined && typeof a !== 'object');
      heard.push(`${name}:${outcome}${values.length > 0 ? `(${values.join(',')})` : ''}`);
    };
  const on = (outcome: keyof OutcomeSink) => (to.has(outcome) ? note(outcome) : IGNORED);
  return {
    opened: on('opened'),
    handled: on('handled'),
    routed: on('routed'),
    queued: on('queued'),
    servedOutsidePick: on('servedOutsidePick'),
    attempt: on('attempt'),
    finished: on('finished'),
    closed: on('closed'),
  };
}

const RECORD: RequestRecord = { trace: undefined, routed: undefined, model: undefined, requestBytes: undefined };

describe('composeSinks', () => {
  it('hands each outcome to the sinks that listen to it, in order', () => {
    const heard: string[] = [];
    const a = listening('a', heard, new Set(['opened', 'handled', 'closed']));
    const b = listening('b', heard, new Set(['handled', 'queued']));
    const sink = composeSinks([a, b]);
    sink.opened();
    sink.handled('request_body', 0.5);
    sink.queued(RECORD);
    sink.closed(RECORD, { releasedModel: 'm', code: 'OK', seconds: 0.5 });
    sink.finished(RECORD, {} as Parameters<OutcomeSink['finished']>[1]);
    assert.deepEqual(heard, ['a:opened', 'a:handled(request_body,0.5)', 'b:handled(request_body,0.5)', 'b:queued', 'a:closed']);
  });

  it("calls a lone listener's own function, and nothing for an outcome nobody listens to", () => {
    const heard: string[] = [];
    const a = listening('a', heard, new Set(['handled']));
    const sink = composeSinks([a, listening('b', heard, new Set())]);
    assert.equal(sink.handled, a.handled, 'no call in between on the per-message path');
    assert.equal(sink.attempt, IGNORED);
    assert.equal(composeSinks([]).finished, IGNORED);
  });
});
