// The request side of a Process call on either HTTP/2 transport (our own connection and
// node:http2): gRPC frames in, each decoded message to the ProcessCall, and the check when Envoy's
// side ends. The transports only feed it their stream's data and end events.
import type { Logger } from 'pino';
import { GrpcFramingError, MessageDeframer } from './framing.js';
import type { ProcessingRequest } from '../extproc/messages.js';
import { asError } from '../extproc/process-service.js';
import type { ProcessCall } from '../extproc/process-service.js';
import { MAX_RECEIVE_MESSAGE_BYTES } from './transport-settings.js';

export class ProcessInput {
  private readonly deframer = new MessageDeframer(MAX_RECEIVE_MESSAGE_BYTES);

  constructor(
    private readonly call: ProcessCall,
    private readonly deserialize: (bytes: Buffer) => ProcessingRequest,
    private readonly logger: Logger,
  ) {}

  /** A piece of the request body. Never throws: anything that goes wrong ends this call only. */
  data(chunk: Buffer): void {
    if (!this.call.open) return;
    try {
      this.deframer.push(chunk, this.onMessage);
    } catch (thrown) {
      if (!(thrown instanceof GrpcFramingError)) {
        const error = asError(thrown);
        this.logger.error({ err: error }, 'handling an ext_proc message failed; ending the stream with INTERNAL');
        this.call.fail(error);
        return;
      }
      this.logger.warn({ err: thrown }, 'unreadable ext_proc frame; ending the stream');
      this.call.fail(thrown, thrown.code, thrown.message);
    }
  }

  /**
   * Envoy's side ended. True when the call may half-close: it was open and no message was cut
   * short (that one fails the call here).
   */
  ended(): boolean {
    if (!this.call.open) return false;
    this.call.open = false; // Envoy sends nothing more, and we have answered everything it sent
    if (!this.deframer.idle) {
      this.call.fail(new Error('ext_proc stream ended inside a message'), 'INTERNAL', 'stream ended inside a message');
      return false;
    }
    return true;
  }

  private readonly onMessage = (bytes: Buffer): void => {
    if (!this.call.open) return;
    let request: ProcessingRequest;
    try {
      request = this.deserialize(bytes);
    } catch (thrown) {
      const error = asError(thrown);
      this.logger.warn({ err: error }, 'undecodable ext_proc message; ending the stream with INTERNAL');
      this.call.fail(error);
      return;
    }
    this.call.message(request);
  };
}
