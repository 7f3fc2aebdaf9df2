// The request side of a streaming call on a transport that frames gRPC itself (our own HTTP/2):
// DATA chunks in, each decoded message to the call, and the check when the client's side ends.
// The transport only feeds it its stream's data and end events.
import type { Logger } from 'pino';
import { asError } from '../util/error-message.js';
import type { BidiCall } from './bidi-call.js';
import { GrpcFramingError, MessageDeframer } from './framing.js';
import { MAX_RECEIVE_MESSAGE_BYTES } from './transport-settings.js';

export class MessageInput<Req> {
  private readonly deframer = new MessageDeframer(MAX_RECEIVE_MESSAGE_BYTES);

  constructor(
    private readonly call: BidiCall<Req>,
    private readonly decode: (bytes: Buffer) => Req,
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
        this.logger.error({ err: error }, 'handling a gRPC message failed; ending the stream with INTERNAL');
        this.call.fail(error);
        return;
      }
      this.logger.warn({ err: thrown }, 'unreadable gRPC frame; ending the stream');
      this.call.fail(thrown, thrown.code, thrown.message);
    }
  }

  /**
   * The client's side ended. True when the call may half-close: it was open and no message was cut
   * short (that one fails the call here).
   */
  ended(): boolean {
    if (!this.call.inputEnded()) return false;
    if (!this.deframer.idle) {
      this.call.fail(new Error('gRPC stream ended inside a message'), 'INTERNAL', 'stream ended inside a message');
      return false;
    }
    return true;
  }

  private readonly onMessage = (bytes: Buffer): void => {
    if (!this.call.open) return;
    let request: Req;
    try {
      request = this.decode(bytes);
    } catch (thrown) {
      const error = asError(thrown);
      this.logger.warn({ err: error }, 'undecodable gRPC message; ending the stream with INTERNAL');
      this.call.fail(error);
      return;
    }
    this.call.message(request);
  };
}
