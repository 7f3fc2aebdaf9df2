// The seam between the Process method (process-service.ts) and the per-stream request logic
// (request/): the method only forwards; the processor owns all decisions and returns data.
import type { CallErrorCode } from '../grpc/bidi-call.js';
import type { ProcessingRequest, ProcessingResponse } from './messages.js';

/** Why a stream ended; the processor hears exactly one of these per stream. */
export type StreamEnd =
  /** Envoy half-closed: it will send nothing more; the edge closes with OK. */
  | { kind: 'half-closed' }
  /** Envoy reset/cancelled the stream (HTTP stream over, upstream reset, timeout…). */
  | { kind: 'cancelled' }
  /**
   * Transport failure (no `code`: the stream is gone, no status reaches Envoy), or a message we
   * could not handle (`code`: the status the edge ends the stream with).
   */
  | { kind: 'error'; error: Error; code?: CallErrorCode }
  /** We ended the stream with OK at shutdown; Envoy finishes the HTTP response without us. */
  | { kind: 'released' };

/** One instance per ext_proc stream, i.e. per HTTP request; its state dies with the stream. */
export interface StreamProcessor {
  /**
   * Handle one message from Envoy and return the replies to send, in order (normally exactly
   * one; none in observability mode, or while the answer waits: it then goes out through LaterReplies). Must be synchronous and fast: Envoy's per-message timeout
   * defaults to 200 ms. Throwing fails the stream with gRPC status INTERNAL.
   */
  process(request: ProcessingRequest): ProcessingResponse[];
  /** Called exactly once, after the last process() call; nothing is sent after it. */
  finish(end: StreamEnd): void;
}

/**
 * How a processor answers a message later than the process() call that brought it (a request
 * waiting in a queue): the replies go out in order, as process() would have returned them. Ignored
 * once the stream ended.
 */
export interface LaterReplies {
  send(replies: readonly ProcessingResponse[]): void;
}

export type ProcessorFactory = (later: LaterReplies) => StreamProcessor;
