// The life of one request through Envoy, as a typed state machine shared by every body mode.
// Each state carries exactly the data it needs; `onMessage` and `onStreamEnd` are transitions
// from (state, input) to the next state, the replies for Envoy and the outcomes learnt — no I/O,
// no clocks, no logging. This module dispatches each message to its phase (request-phase.ts,
// response-phase.ts; blame in attribution.ts). The processor (request-processor.ts) feeds messages
// in, returns the replies and records the outcomes in one place. The routing dependency is the
// only call out: it picks.

import { GatewayError } from '../errors/gateway-error.js';
import type { ProcessingRequest } from '../extproc/messages.js';
import type { StreamEnd } from '../extproc/stream-processor.js';
import { StepBuilder, exchangeOf, requestOf } from './stream-state.js';
import type { MachineContext, Step, StreamState } from './stream-state.js';
import { brokenMidStream } from './attribution.js';
import { requestBody, requestHeaders, requestTrailers } from './request-phase.js';
import { responseBody, responseHeaders, responseTrailers } from './response-phase.js';

// ── transitions ─────────────────────────────────────────────────────────────────────────────

export function onMessage(ctx: MachineContext, state: StreamState, message: ProcessingRequest): Step {
  const out = new StepBuilder(state);
  switch (message.request) {
    case 'request_headers':
      requestHeaders(ctx, out, state, message);
      break;
    case 'request_body':
      requestBody(ctx, out, state, message.request_body ?? {});
      break;
    case 'request_trailers':
      requestTrailers(ctx, out, state);
      break;
    case 'response_headers':
      responseHeaders(ctx, out, state, message);
      break;
    case 'response_body':
      responseBody(ctx, out, state, message.response_body ?? {});
      break;
    case 'response_trailers':
      responseTrailers(out, state);
      break;
    default:
      throw new GatewayError('internal_error', `ext_proc message of unknown type ${String(message.request)}`);
  }
  return out.build();
}

/** The stream ended (Envoy half-closed, cancelled, failed, or we released it at shutdown). */
export function onStreamEnd(state: StreamState, end: StreamEnd): Step {
  const out = new StepBuilder({ kind: 'Done' });
  if (state.kind === 'Done') return out.build();
  const request = requestOf(state);
  if (end.kind === 'released') {
    out.finish(request, exchangeOf(state), 'released_at_shutdown');
    return out.build();
  }
  switch (state.kind) {
    case 'AwaitingRequestHeaders':
    case 'CollectingRequestBody':
      out.finish(request, undefined, 'cancelled_before_routing');
      break;
    case 'Queued':
      out.finish(request, { request: state.read.request, routed: undefined, model: state.read.inference.model }, 'cancelled_in_queue');
      break;
    case 'AwaitingResponse':
    case 'ReadingErrorText':
      out.finish(request, state.exchange, state.exchange.routed === undefined ? 'cancelled_before_routing' : 'cancelled_before_response');
      break;
    case 'HoldingJson':
      brokenMidStream(out, state.served);
      break;
    case 'Streaming':
      if (state.pending === undefined) break; // already recorded (another filter's answer)
      if (state.watch.kind === 'json-copy' && state.watch.envoyStreamsRest) {
        // Larger than Envoy's buffer: Envoy streamed the rest without us and we cannot tell a
        // clean end from a reset. Neither success nor failure is recorded for the replica.
        out.finish(request, state.served.exchange, 'unverified', state.served);
        break;
      }
      brokenMidStream(out, state.served);
      break;
  }
  return out.build();
}
