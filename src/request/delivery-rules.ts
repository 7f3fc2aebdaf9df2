// What each body delivery (extproc/body-modes.ts: what Envoy announced on the stream) means for
// us: what we hold, how we pass what we do not change, and when the answer is known. One rule per
// delivery, in tables typed on the delivery unions: a delivery added to a union without its rule
// does not compile. Each part of a rule is a small union, applied by an exhaustive switch in the
// phases (request-phase.ts, response-phase.ts), so a new value does not compile until every place
// that applies it says what it does.

import type { RequestBodyDelivery, ResponseBodyDelivery } from '../extproc/body-modes.js';

/** What one request-body delivery means to us. */
export interface RequestRule {
  /**
   * Our reply to the request headers: let them go on (Envoy then buffers the body for us), ask
   * Envoy to buffer the body (a mode override), or hold the reply: it will carry the pick, which
   * needs the whole body.
   */
  readonly headers: 'continue' | 'ask-for-buffered' | 'hold';
  /**
   * How the pick and the body go on once the body is whole: in the body reply (Envoy holds the
   * body), or in the held header reply, then a reply per collected chunk (STREAMED: Envoy forwards
   * the chunks as they are answered) or the body sent back whole (full duplex: we stream it back).
   */
  readonly body: 'body-reply' | 'answer-each-chunk' | 'send-back';
  /** Envoy's ext_proc message timer runs while we hold the request (flow control's TTL stays below it). */
  readonly timed: boolean;
}

/** What one response-body delivery means to us. */
export interface ResponseRule {
  /** Whether the body reaches us at all: if not, the answer can never be judged. */
  readonly body: 'reaches-us' | 'never';
  /** How a chunk we do not change goes on: Envoy forwards it once answered, or we send it back ourselves. */
  readonly chunks: 'envoy-forwards' | 'we-send';
  /**
   * How a body we must see whole before anything reaches the client (a JSON answer, an error's
   * text) is held: we ask Envoy to buffer it (a mode override), Envoy already does, or we hold the
   * header reply and the chunks ourselves.
   */
  readonly hold: 'ask-envoy' | 'envoy-holds' | 'we-hold' | 'nothing-to-hold';
}

/** One rule for every value of a delivery union: a missing one does not compile. */
export type RuleTable<Delivery extends string, Rule> = { readonly [D in Delivery]: Rule };

export const REQUEST_RULES: RuleTable<RequestBodyDelivery, RequestRule> = {
  'envoy-buffers': { headers: 'continue', body: 'body-reply', timed: true },
  'ask-for-buffered': { headers: 'ask-for-buffered', body: 'body-reply', timed: true },
  'collect-streamed': { headers: 'hold', body: 'answer-each-chunk', timed: true },
  'collect-duplex': { headers: 'hold', body: 'send-back', timed: false },
};

export const RESPONSE_RULES: RuleTable<ResponseBodyDelivery, ResponseRule> = {
  streamed: { body: 'reaches-us', chunks: 'envoy-forwards', hold: 'ask-envoy' },
  buffered: { body: 'reaches-us', chunks: 'envoy-forwards', hold: 'envoy-holds' },
  duplex: { body: 'reaches-us', chunks: 'we-send', hold: 'we-hold' },
  none: { body: 'never', chunks: 'envoy-forwards', hold: 'nothing-to-hold' },
};

/** Where a switch over a rule's part has handled every value: a value left out does not compile. */
export function unhandled(value: never): never {
  throw new Error(`delivery rule value not handled: ${String(value)}`);
}
