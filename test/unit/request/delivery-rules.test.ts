// The delivery rules (src/request/delivery-rules.ts): every delivery Envoy can announce has one, and
// the compiler holds both ends. A delivery added to its union without a rule does not compile
// (tsc: "Property 'collect-grpc' is missing in type …"), and a value added to a part of a rule
// does not compile until every switch that applies that part handles it (unhandled() takes only
// `never`). The @ts-expect-error lines below are those compile errors: were either check to go,
// the build would fail on an unused directive.

import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { streamModes } from '../../../src/extproc/body-modes.js';
import type { RequestBodyDelivery } from '../../../src/extproc/body-modes.js';
import { BODY_SEND_MODES } from '../../../src/extproc/messages.js';
import { REQUEST_RULES, RESPONSE_RULES, unhandled } from '../../../src/request/delivery-rules.js';
import type { RequestRule, ResponseRule, RuleTable } from '../../../src/request/delivery-rules.js';

// @ts-expect-error a request delivery added to the union ('collect-grpc') has no rule in the table
const WITH_A_NEW_DELIVERY: RuleTable<RequestBodyDelivery | 'collect-grpc', RequestRule> = REQUEST_RULES;

/** A switch over a rule's part with a value added to it, that no case handles. */
function holdWithANewValue(hold: ResponseRule['hold'] | 'hold-in-a-file'): string {
  switch (hold) {
    case 'ask-envoy':
    case 'envoy-holds':
    case 'we-hold':
    case 'nothing-to-hold':
      return hold;
    default:
      // @ts-expect-error 'hold-in-a-file' is not handled: unhandled() takes only never
      return unhandled(hold);
  }
}

describe('delivery rules', () => {
  it('has a rule for every request and response body mode Envoy can announce, with and without early bodies', () => {
    for (const request of BODY_SEND_MODES) {
      for (const response of BODY_SEND_MODES) {
        for (const early of [false, true]) {
          const modes = streamModes({
            request_body_mode: request,
            response_body_mode: response,
            send_body_without_waiting_for_header_response: early,
          });
          assert.ok(REQUEST_RULES[modes.request] !== undefined, `${request}/${response}/${early}: request rule`);
          assert.ok(RESPONSE_RULES[modes.response] !== undefined, `${request}/${response}/${early}: response rule`);
        }
      }
    }
    assert.ok(REQUEST_RULES[streamModes(undefined).request] !== undefined, 'nothing announced: our shipped configuration');
  });

  it('holds what it must: the pick needs the whole body, a judged answer must reach nobody before it is judged', () => {
    // Where the header reply is held, it carries the pick; where Envoy's timer runs, flow control keeps below it.
    assert.deepEqual(
      Object.entries(REQUEST_RULES).map(([delivery, rule]) => [delivery, rule.headers, rule.body, rule.timed]),
      [
        ['envoy-buffers', 'continue', 'body-reply', true],
        ['ask-for-buffered', 'ask-for-buffered', 'body-reply', true],
        ['collect-streamed', 'hold', 'answer-each-chunk', true],
        ['collect-duplex', 'hold', 'send-back', false],
      ],
    );
    assert.deepEqual(
      Object.entries(RESPONSE_RULES).map(([delivery, rule]) => [delivery, rule.body, rule.chunks, rule.hold]),
      [
        ['streamed', 'reaches-us', 'envoy-forwards', 'ask-envoy'],
        ['buffered', 'reaches-us', 'envoy-forwards', 'envoy-holds'],
        ['duplex', 'reaches-us', 'we-send', 'we-hold'],
        ['none', 'never', 'envoy-forwards', 'nothing-to-hold'],
      ],
    );
  });

  it('the compile-time checks above are real code paths: the table is the production one, and unhandled() throws', () => {
    assert.equal(WITH_A_NEW_DELIVERY, REQUEST_RULES);
    assert.equal(holdWithANewValue('we-hold'), 'we-hold');
    assert.throws(() => holdWithANewValue('hold-in-a-file'), /delivery rule value not handled: hold-in-a-file/);
  });
});
