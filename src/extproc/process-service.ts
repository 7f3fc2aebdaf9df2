// The ext_proc Process method: bytes in, calls to the stream's processor, bytes out. One
// ProcessCall per stream (= one HTTP request through Envoy) feeds each decoded message to the
// stream's processor, hands back what it returns in order, and makes sure the processor hears
// exactly one StreamEnd whatever way the stream ends. The transports (grpc/) drive it through the
// BidiCall interface and know nothing of what the messages mean.
import type { Logger } from 'pino';
import { PeerResetError } from '../grpc/bidi-call.js';
import type { BidiCall, BidiMethod, CallErrorCode, CallSink } from '../grpc/bidi-call.js';
import { asError } from '../util/error-message.js';
import { LogThrottle } from '../util/log-throttle.js';
import { decodeProcessingRequest } from './codec/decode-request.js';
import type { ProcessingRequest, ProcessingResponse } from './messages.js';
import { EXT_PROC_SERVICE_NAME } from './protocol-names.js';
import { frameReply } from './reply-frames.js';
import type { ProcessorFactory, StreamEnd, StreamProcessor } from './stream-processor.js';

const PROCESS_PATH = `/${EXT_PROC_SERVICE_NAME}/Process`;

export interface ProcessServiceOptions {
  processorFactory: ProcessorFactory;
  logger: Logger;
  /** Told about every stream that ends in error (processor threw, transport failure). */
  onStreamError?: (err: Error) => void;
}

interface ProcessCallContext {
  readonly processorFactory: ProcessorFactory;
  readonly logger: Logger;
  readonly onStreamError: ((err: Error) => void) | undefined;
  /** At most one 'ext_proc stream failed' line per interval: a peer can reset streams by the thousand. */
  readonly failureLog: LogThrottle<'transport_failed'>;
  /** Release functions of the open streams (shutdown calls them at the grace deadline). */
  readonly openStreams: Set<() => void>;
}

/** The Process method of one server. */
export function processMethod(options: ProcessServiceOptions): BidiMethod<ProcessingRequest, ProcessingResponse> {
  const context: ProcessCallContext = {
    processorFactory: options.processorFactory,
    logger: options.logger,
    onStreamError: options.onStreamError,
    failureLog: new LogThrottle(),
    openStreams: new Set(),
  };
  return {
    path: PROCESS_PATH,
    decode: decodeProcessingRequest,
    frame: frameReply,
    start: (sink) => new ProcessCall(sink, context),
    get openCalls() {
      return context.openStreams.size;
    },
    releaseOpenCalls: () => {
      for (const release of [...context.openStreams]) release();
    },
  };
}

const INTERNAL_DETAILS = 'ext_proc processor failed';

class ProcessCall implements BidiCall<ProcessingRequest> {
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
    private readonly sink: CallSink<ProcessingResponse>,
    private readonly context: ProcessCallContext,
  ) {
    try {
      this.processor = context.processorFactory({ send: (replies) => this.sendLater(replies) });
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
    this.write(responses, request.request);
  }

  /** Replies the processor sends after the call that brought their message (a queued request). */
  private sendLater(responses: readonly ProcessingResponse[]): void {
    if (this.finished || responses.length === 0) return;
    this.write(responses, 'later');
  }

  private write(responses: readonly ProcessingResponse[], messageKind: string | undefined): void {
    let roomLeft = true;
    try {
      for (const response of responses) roomLeft = this.sink.write(response) && roomLeft;
    } catch (thrown) {
      // A reply the encoder rejects (a processor bug) costs this stream, never the process.
      const error = asError(thrown);
      this.context.logger.error({ err: error, messageKind }, 'writing a reply failed; ending the stream with INTERNAL');
      this.fail(error);
      return;
    }
    // Envoy is not reading our replies fast enough: stop reading its messages until it does.
    if (!roomLeft) this.sink.pauseUntilDrain();
  }

  inputEnded(): boolean {
    if (!this.open) return false;
    this.open = false; // Envoy sends nothing more, and we have answered everything it sent
    return true;
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
  transportFailed(err: Error): void {
    if (this.finished) return;
    // A peer's reset is Envoy giving the stream up: the request's own outcome line (request
    // cancelled, request failed) says why, so it is no warning of its own.
    if (err instanceof PeerResetError) this.context.logger.debug({ err }, 'ext_proc stream reset by Envoy');
    else {
      const suppressed = this.context.failureLog.admit('transport_failed', performance.now());
      if (suppressed === undefined) this.context.logger.debug({ err }, 'ext_proc stream failed');
      else this.context.logger.warn(suppressed === 0 ? { err } : { err, suppressed }, 'ext_proc stream failed');
    }
    this.finish({ kind: 'error', error: err });
    this.context.onStreamError?.(err);
  }

  /** A message could not be handled (processor threw, undecodable or oversized bytes): end with an error status. */
  fail(error: Error, code: CallErrorCode = 'INTERNAL', details = INTERNAL_DETAILS): void {
    if (this.finished) return;
    this.finish({ kind: 'error', error, code });
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
