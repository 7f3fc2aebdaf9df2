// grpc.health.v1 Check and Watch on one HTTP/2 stream, for the transport that frames gRPC itself
// (our own HTTP/2, native-transport.ts): collect the call's one request message from DATA chunks,
// answer through the transport's reply side, stop a watch when the stream goes. What the answers
// are is health-service.ts's business.
import { asError } from '../util/error-message.js';
import { frameMessage, GrpcFramingError, MessageDeframer } from './framing.js';
import { decodeHealthCheckRequest, encodeHealthCheckResponse } from './health-messages.js';
import type { HealthCheckResponse } from './health-messages.js';
import type { HealthService } from './health-service.js';
import { GRPC_STATUS } from './status.js';

/** The response side of a gRPC call, as each transport writes it. */
export interface GrpcReply {
  write(frame: Buffer): unknown;
  end(code: number, message?: string): void;
}

const MAX_REQUEST_BYTES = 1024 * 1024;

export class HealthCall {
  private readonly deframer = new MessageDeframer(MAX_REQUEST_BYTES);
  private received = false;
  private stopWatch: (() => void) | undefined;

  constructor(
    private readonly method: 'Check' | 'Watch',
    private readonly health: HealthService,
    private readonly reply: GrpcReply,
  ) {}

  /** A chunk of the request body; the first whole message is the request, anything after it is ignored. */
  data(chunk: Buffer): void {
    if (this.received) return;
    try {
      this.deframer.push(chunk, (bytes) => {
        if (this.received) return;
        this.received = true;
        this.answer(bytes);
      });
    } catch (thrown) {
      this.received = true;
      const error = asError(thrown);
      this.reply.end(thrown instanceof GrpcFramingError ? GRPC_STATUS[thrown.code] : GRPC_STATUS.INTERNAL, error.message);
    }
  }

  /** The client finished sending. */
  end(): void {
    if (!this.received) this.reply.end(GRPC_STATUS.INTERNAL, 'no request message');
  }

  /** The stream is gone, however: a watch stops. */
  closed(): void {
    this.stopWatch?.();
    this.stopWatch = undefined;
  }

  private answer(bytes: Buffer): void {
    const request = decodeHealthCheckRequest(bytes);
    if (this.method === 'Watch') {
      const watch = this.health.watch(
        request,
        (response: HealthCheckResponse) => void this.reply.write(frameMessage(encodeHealthCheckResponse(response))),
        () => this.reply.end(GRPC_STATUS.OK),
      );
      this.stopWatch = () => watch.stop();
      return;
    }
    const answer = this.health.check(request);
    if (!answer.found) {
      this.reply.end(GRPC_STATUS.NOT_FOUND, answer.details);
      return;
    }
    this.reply.write(frameMessage(encodeHealthCheckResponse(answer.response)));
    this.reply.end(GRPC_STATUS.OK);
  }
}
