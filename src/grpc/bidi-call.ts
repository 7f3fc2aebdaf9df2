// The seam between a transport and a bidirectional-streaming gRPC method, written once for every
// transport: the transport turns its stream's events into the calls of BidiCall, and does what the
// call asks of it through CallSink. What the messages mean is the method's business (for us, the
// ext_proc Process method in extproc/process-service.ts); the transport only moves them.

import type { FramedMessage } from './framing.js';

/** The error statuses a call ends with. */
export type CallErrorCode = 'INTERNAL' | 'RESOURCE_EXHAUSTED';

/**
 * The peer reset the stream with an error code other than CANCEL or NO_ERROR: it gave the call up.
 * Envoy does so in full-duplex mode (RST_STREAM INTERNAL_ERROR) when the HTTP stream the call
 * served ended early, a client that left included.
 */
export class PeerResetError extends Error {
  constructor(readonly http2Code: number) {
    super(`stream reset by the peer (HTTP/2 error code ${http2Code})`);
  }
}

/** What the transport does for the call. */
export interface CallSink<Res> {
  /** Sends one reply; false when the transport's write buffer is full (then pauseUntilDrain follows). */
  write(reply: Res): boolean;
  /** Stop reading the client's messages until our replies drain; resume only while the call is open. */
  pauseUntilDrain(): void;
  /** End the stream with status OK. */
  endOk(): void;
  /**
   * End the stream with an error status. `details` is generic for our own failures (the cause is
   * only logged); for protocol errors (oversized or malformed frames) it describes the frame.
   */
  endError(code: CallErrorCode, details: string): void;
}

/** One call, as its transport drives it. */
export interface BidiCall<Req> {
  /** The call still takes messages. Cleared on any end, never set again. */
  readonly open: boolean;
  /** The call has ended, and its method has been told how. */
  readonly isFinished: boolean;
  message(request: Req): void;
  /** The client will send nothing more. True when the call was still open (a half-close may follow). */
  inputEnded(): boolean;
  /** The client half-closed and every message it sent was answered: end with OK. */
  halfClosed(): void;
  /** The client reset or cancelled the stream. */
  cancelled(): void;
  /** The transport failed (not the client, not us). */
  transportFailed(err: Error): void;
  /** A message could not be handled (undecodable, oversized, cut short, or the method threw): end with an error status. */
  fail(error: Error, code?: CallErrorCode, details?: string): void;
}

/** A bidirectional-streaming method the server serves. */
export interface BidiMethod<Req, Res> {
  /** `/package.Service/Method`. */
  readonly path: string;
  /** One request message from its bytes; throws for bytes that are not one. */
  decode(bytes: Buffer): Req;
  /** One reply as a length-prefixed gRPC message (framing.ts): the native transport writes it as is. */
  frame(reply: Res): FramedMessage;
  /** A new call whose replies go to `sink`; it may have ended already (isFinished). */
  start(sink: CallSink<Res>): BidiCall<Req>;
  /** Calls not yet ended. */
  readonly openCalls: number;
  /** Shutdown's deadline: end every open call with OK now (the method decides what that means to it). */
  releaseOpenCalls(): void;
  /**
   * Shutdown began (GOAWAY sent): a method whose calls never end on their own (a log stream) ends
   * them now, so they do not hold the connection open for the whole grace period.
   */
  shutdownStarted?(): void;
}

/** The service part of a method's path (`package.Service`), which health answers for. */
export function serviceOf(path: string): string {
  return path.slice(1, path.lastIndexOf('/'));
}
