// Our replies as framed gRPC messages: the one cache of reply bytes. A reply built once and sent
// many times (constant-replies.ts: the "continue" replies, one per streamed chunk, and each routing
// reply of one destination list) is encoded and framed the first time it is sent and its bytes
// reused after; every other reply is encoded and framed per message.
import { FRAME_HEADER_BYTES, joinedFrame } from '../grpc/framing.js';
import type { FramedMessage } from '../grpc/framing.js';
import { Writer } from '../grpc/protobuf-wire.js';
import { encodeProcessingResponse } from './codec/encode-response.js';
import { framedStreamedBody, streamedBodyReply } from './codec/streamed-body-frame.js';
import { isReusedReply } from './constant-replies.js';
import type { ProcessingResponse } from './messages.js';

const framed = new WeakMap<ProcessingResponse, Buffer>();
// One scratch writer: encoding is synchronous, never interleaved.
const writer = new Writer();

/**
 * From this size a streamed body is written as a view of its own bytes (codec/streamed-body-frame.ts)
 * rather than copied into its frame. A choice, not a measurement: SSE events and small answers
 * (well under it) keep the one-Buffer path they were measured on; a 64 KiB chunk of a long body is
 * over it.
 */
const BODY_VIEW_MIN_BYTES = 16 * 1024;

/** The reply as a length-prefixed gRPC message (joined, a view past FRAME_HEADER_BYTES is the bare message). */
export function frameReply(reply: ProcessingResponse): FramedMessage {
  const cached = framed.get(reply);
  if (cached !== undefined) return cached;
  const streamed = streamedBodyReply(reply, BODY_VIEW_MIN_BYTES);
  if (streamed !== undefined) return framedStreamedBody(writer, streamed);
  writer.reset();
  encodeProcessingResponse(writer, reply);
  const bytes = writer.finishFramed();
  if (isReusedReply(reply)) framed.set(reply, bytes);
  return bytes;
}

/** The reply's protobuf encoding alone, for transports that frame messages themselves (grpc-js). */
export function encodeReply(reply: ProcessingResponse): Buffer {
  return joinedFrame(frameReply(reply)).subarray(FRAME_HEADER_BYTES);
}
