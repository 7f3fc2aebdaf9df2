// How Envoy delivers bodies on this stream, read from the `protocol_config` of its first message.
// Gateways configure ext_proc differently (our config: request BUFFERED, response STREAMED with
// mode overrides; Istio, kgateway and Envoy AI Gateway: FULL_DUPLEX_STREAMED without overrides),
// so every stream decides from what Envoy announces, never from what we hope it was told.

import type { BodySendMode, ProtocolConfiguration } from './messages.js';

/**
 * How the request body reaches us, and so when the routing reply can be sent:
 * - `envoy-buffers`: one body message (BUFFERED, BUFFERED_PARTIAL) after our header reply; the
 *   routing goes in the body reply.
 * - `ask-for-buffered`: STREAMED without early bodies, or NONE: the header reply asks Envoy to
 *   buffer the body instead (needs `allow_mode_override`), then as `envoy-buffers`.
 * - `collect-streamed`: STREAMED with `send_body_without_waiting_for_header_response`: we hold the
 *   header reply until the body ended, then answer headers and every chunk in order.
 * - `collect-duplex`: FULL_DUPLEX_STREAMED: we hold the header reply until the body ended, then
 *   answer headers and stream the body back unchanged.
 */
export type RequestBodyDelivery = 'envoy-buffers' | 'ask-for-buffered' | 'collect-streamed' | 'collect-duplex';

/**
 * How the response body reaches us:
 * - `streamed`: one message per chunk, each answered before Envoy forwards it; the header reply
 *   may switch a JSON answer to BUFFERED_PARTIAL.
 * - `buffered`: the whole body in one message while Envoy holds the headers (BUFFERED,
 *   BUFFERED_PARTIAL); a larger body arrives as a first part without end_of_stream.
 * - `duplex`: FULL_DUPLEX_STREAMED: chunks flow without waiting; we send the body back ourselves.
 * - `none`: the body never reaches us.
 */
export type ResponseBodyDelivery = 'streamed' | 'buffered' | 'duplex' | 'none';

export interface StreamModes {
  readonly request: RequestBodyDelivery;
  readonly response: ResponseBodyDelivery;
  /** What Envoy announced, for logs and docs (`(not announced)` when it sent nothing). */
  readonly announced: string;
}

/** Our own shipped configuration, assumed when Envoy announces nothing (older Envoy versions). */
const DEFAULT_MODES: StreamModes = Object.freeze({ request: 'envoy-buffers', response: 'streamed', announced: '(not announced)' });

export function streamModes(config: ProtocolConfiguration | undefined): StreamModes {
  if (config === undefined) return DEFAULT_MODES;
  const requestMode = config.request_body_mode ?? 'NONE';
  const responseMode = config.response_body_mode ?? 'NONE';
  const early = config.send_body_without_waiting_for_header_response === true;
  // Every stream announces one of a few combinations: each is built once and shared (frozen).
  let byResponse = KNOWN_MODES.get(requestMode);
  if (byResponse === undefined) KNOWN_MODES.set(requestMode, (byResponse = new Map<BodySendMode, ModesByEarlyBody>()));
  let pair = byResponse.get(responseMode);
  if (pair === undefined) byResponse.set(responseMode, (pair = [undefined, undefined]));
  const known = pair[early ? 1 : 0];
  if (known !== undefined) return known;
  const modes: StreamModes = Object.freeze({
    request: requestDelivery(requestMode, early),
    response: responseDelivery(responseMode),
    announced: `request ${requestMode}, response ${responseMode}`,
  });
  pair[early ? 1 : 0] = modes;
  return modes;
}

/** By request mode, response mode, then [without, with] early request bodies. */
type ModesByEarlyBody = [StreamModes | undefined, StreamModes | undefined];
const KNOWN_MODES = new Map<BodySendMode, Map<BodySendMode, ModesByEarlyBody>>();

function requestDelivery(mode: BodySendMode, early: boolean): RequestBodyDelivery {
  switch (mode) {
    case 'BUFFERED':
    case 'BUFFERED_PARTIAL':
      return 'envoy-buffers';
    case 'STREAMED':
      return early ? 'collect-streamed' : 'ask-for-buffered';
    case 'FULL_DUPLEX_STREAMED':
    case 'GRPC':
      return 'collect-duplex';
    case 'NONE':
      return 'ask-for-buffered';
  }
}

function responseDelivery(mode: BodySendMode): ResponseBodyDelivery {
  switch (mode) {
    case 'BUFFERED':
    case 'BUFFERED_PARTIAL':
      return 'buffered';
    case 'STREAMED':
      return 'streamed';
    case 'FULL_DUPLEX_STREAMED':
    case 'GRPC':
      return 'duplex';
    case 'NONE':
      return 'none';
  }
}
