// One ext_proc Process stream's lifecycle, independent of the transport carrying it: feed each
// message to the stream's processor, hand back what it returns in order, and make sure the
// processor hears exactly one StreamEnd whatever way the stream ends. The transports (grpc-js,
// native HTTP/2) only translate their events into the calls below and do what the sink is told.
import type { Logger } from 'pino';
import type { ProcessingRequest, ProcessingResponse } from './messages.js';
import type { ProcessorFactory, StreamEnd, StreamProcessor } from './stream-processor.js';

/** What the transport does for the call. */
export interface ProcessCallSink {
  /** Sends one reply; false when the transport's write buffer is full (then pauseUntilDrain follows). */
  write(reply: ProcessingResponse): boolean;
  /** Stop reading Envoy's messages until our replies drain; resume only while `call.open`. */
  pauseUntilDrain(): void;
  /** End the stream with status OK. */
  endOk(): void;
  /**
   * End the stream with an error status. `details` is generic for our own failures (the cause is
   * only logged); for protocol errors (oversized or malformed frames) it describes the frame.
   */
  endError(code: 'INTERNAL' | 'RESOURCE_EXHAUSTED', details: string): void;
}

export interface ProcessCallContext {
  processorFactory: ProcessorFactory;
  logger: Logger;
  onStreamError: ((err: Error) => void) | undefined;
  /** Release functions of the open streams (shutdown calls them at the grace deadline). */
  openStreams: Set<() => void>;
}

/** The context of every Process call of one server. */
export function processCallContext(
  options: { processorFactory: ProcessorFactory; onStreamError?: (err: Error) => void },
  logger: Logger,
): ProcessCallContext {
  return { processorFactory: options.processorFactory, logger, onStreamError: options.onStreamError, openStreams: new Set() };
}

export const INTERNAL_DETAILS = 'ext_proc processor failed';

export class ProcessCall {
  /** We may still process and write. Cleared on any end, never set again. */
  open = true;
  private finished = false;
  private readonly processor: StreamProcessor | undefined;
  private readonly release = (): void => {
    if (this.finished) return;
    // Shutdown: end the stream with OK. Envoy then stops sending us this request's messages and
    // completes the client's response on its own (cancelling would abort the client's response).
    this.finish({ kind: 'released' });
    this.sink.endOk();
  };

  constructor(
    private readonly sink: ProcessCallSink,
    private readonly context: ProcessCallContext,
  ) {
    try {
      this.processor = context.processorFactory();
    } catch (thrown) {
      const error = asError(thrown);
      context.logger.error({ err: error }, 'creating the stream processor failed; ending the stream with INTERNAL');
      context.onStreamError?.(error);
      this.open = false;
      this.finished = true;
      sink.endError('INTERNAL', INTERNAL_DETAILS);
      return;
    }
    context.openStreams.add(this.release);
  }

  get isFinished(): boolean {
    return this.finished;
  }

  message(request: ProcessingRequest): void {
    if (!this.open || this.processor === undefined) return;
    let responses: ProcessingResponse[];
    try {
      responses = this.processor.process(request);
    } catch (thrown) {
      const error = asError(thrown);
      this.context.logger.error({ err: error, messageKind: request.request }, 'stream processor threw; ending the stream with INTERNAL');
      this.fail(error);
      return;
    }
    let roomLeft = true;
    try {
      for (const response of responses) roomLeft = this.sink.write(response) && roomLeft;
    } catch (thrown) {
      // A reply the encoder rejects (a processor bug) costs this stream, never the process.
      const error = asError(thrown);
      this.context.logger.error({ err: error, messageKind: request.request }, 'writing a reply failed; ending the stream with INTERNAL');
      this.fail(error);
      return;
    }
    // Envoy is not reading our replies fast enough: stop reading its messages until it does.
    if (!roomLeft) this.sink.pauseUntilDrain();
  }

  /** Envoy half-closed and was answered: finish, then end with OK. */
  halfClosed(): void {
    this.open = false;
    if (this.finished) return;
    this.finish({ kind: 'half-closed' });
    this.sink.endOk();
  }

  cancelled(): void {
    this.finish({ kind: 'cancelled' });
  }

  /** The transport failed (not us): finish with the error and report it. */
  transportFailed(err: Error, logger: Logger): void {
    if (this.finished) return;
    logger.warn({ err }, 'ext_proc stream failed');
    this.finish({ kind: 'error', error: err });
    this.context.onStreamError?.(err);
  }

  /** A message could not be handled (processor threw, undecodable or oversized bytes): end with an error status. */
  fail(error: Error, code: 'INTERNAL' | 'RESOURCE_EXHAUSTED' = 'INTERNAL', details = INTERNAL_DETAILS): void {
    if (this.finished) return;
    this.finish({ kind: 'error', error });
    this.context.onStreamError?.(error);
    this.sink.endError(code, details);
  }

  private finish(end: StreamEnd): void {
    this.open = false;
    if (this.finished) return;
    this.finished = true;
    this.context.openStreams.delete(this.release);
    try {
      this.processor?.finish(end);
    } catch (thrown) {
      this.context.logger.error({ err: asError(thrown), end: end.kind }, 'stream processor finish() threw');
    }
  }
}

export function asError(thrown: unknown): Error {
  return thrown instanceof Error ? thrown : new Error(String(thrown));
}
