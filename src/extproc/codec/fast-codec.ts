// The ext_proc hot path's codec: the hand-written ProcessingRequest decoder and ProcessingResponse
// encoder, each falling back to the reflection codec (protobufjs via @grpc/proto-loader) for any
// message it leaves to it, so what goes over the wire never depends on which one ran.

import type { ProcessingRequest, ProcessingResponse } from '../messages.js';
import { decodeProcessingRequest } from './decode-request.js';
import { encodeProcessingResponse } from './encode-response.js';
import { Unsupported, Writer } from '../../grpc/protobuf-wire.js';

export interface CodecCounters {
  /** Messages handed to the reflection codec, by direction. */
  fallbackDecodes: number;
  fallbackEncodes: number;
}

export function fastRequestDeserializer(
  reflection: (buf: Buffer) => ProcessingRequest,
  counters?: CodecCounters,
): (buf: Buffer) => ProcessingRequest {
  return (buf) => {
    try {
      return decodeProcessingRequest(buf);
    } catch (err) {
      if (!(err instanceof Unsupported)) throw err;
      if (counters !== undefined) counters.fallbackDecodes++;
      return reflection(buf);
    }
  };
}

export function fastResponseSerializer(
  reflection: (value: ProcessingResponse) => Buffer,
  counters?: CodecCounters,
): (value: ProcessingResponse) => Buffer {
  // One scratch writer per serializer: serializers run synchronously, never interleaved.
  const writer = new Writer();
  return (value) => {
    writer.reset();
    try {
      encodeProcessingResponse(writer, value);
    } catch (err) {
      if (!(err instanceof Unsupported)) throw err;
      if (counters !== undefined) counters.fallbackEncodes++;
      return reflection(value);
    }
    return writer.finish();
  };
}
