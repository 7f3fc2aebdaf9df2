// An ext_proc server that passes everything through to one fixed model server and records, per
// stream, every message Envoy sent and how the stream ended. It answers in whatever body modes
// Envoy announces (echoing full-duplex bodies back as `streamed_response` chunks), so it runs behind
// every gateway profile. What it measures: what Envoy tells an external processor when a response
// is cut (docs/errors.md, "Cut streams"). Built on our own gRPC server and reply builders, with
// none of llm-extproc's request logic in the way, so what it hears is Envoy's doing alone.

import { pino } from 'pino';
import { streamModes } from '../../src/extproc/body-modes.js';
import type { StreamModes } from '../../src/extproc/body-modes.js';
import { CONTINUE_REQUEST_BODY, CONTINUE_RESPONSE_BODY, CONTINUE_RESPONSE_HEADERS } from '../../src/extproc/constant-replies.js';
import type { ProcessingRequest, ProcessingResponse, ProtoStruct } from '../../src/extproc/messages.js';
import { streamedBody } from '../../src/extproc/replies.js';
import { startExtProcServer } from '../../src/extproc/server.js';
import { openTlsIdentity } from '../../src/grpc/tls-identity.js';
import type { StreamEnd, StreamProcessor } from '../../src/extproc/stream-processor.js';
import { routingReply } from '../../src/request/decision-replies.js';

/** One message Envoy sent, reduced to what a processor could act on. */
export interface HeardMessage {
  readonly kind: NonNullable<ProcessingRequest['request']>;
  readonly endOfStream: boolean;
  readonly bytes: number;
  /** Envoy's attributes on this message (response_headers only, when the gateway asks for them). */
  readonly attributes?: Record<string, unknown>;
  /** performance.now() when it arrived. */
  readonly at: number;
}

export interface HeardStream {
  readonly modes: StreamModes;
  readonly messages: HeardMessage[];
  /** How the stream ended (undefined while open); `at` is performance.now() then. */
  end: { readonly kind: StreamEnd['kind']; readonly detail?: string; readonly at: number } | undefined;
}

export interface RecordingExtProc {
  readonly address: string;
  /** Every stream, in the order Envoy opened them. */
  readonly streams: HeardStream[];
  close(): Promise<void>;
}

export interface RecordingOptions {
  /** Serve TLS with a self-signed certificate (gateways that always dial the picker over TLS). */
  readonly tls?: boolean;
}

export async function startRecordingExtProc(backend: string, options: RecordingOptions = {}): Promise<RecordingExtProc> {
  const streams: HeardStream[] = [];
  const logger = pino({ level: 'silent' });
  const tls = options.tls === true ? await openTlsIdentity({ mode: 'self-signed' }, logger) : undefined;
  const server = await startExtProcServer({
    address: '127.0.0.1:0',
    logger,
    ...(tls === undefined ? {} : { tls }),
    health: { isServing: () => true, onChange: () => () => undefined },
    processorFactory: () => {
      const heard: HeardStream = { modes: streamModes(undefined), messages: [], end: undefined };
      streams.push(heard);
      return new RecordingProcessor(heard, backend);
    },
  });
  return { address: server.address, streams, close: () => server.shutdown(0) };
}

class RecordingProcessor implements StreamProcessor {
  constructor(
    private heard: HeardStream,
    private readonly backend: string,
  ) {}

  process(request: ProcessingRequest): ProcessingResponse[] {
    if (request.protocol_config !== undefined) this.heard = Object.assign(this.heard, { modes: streamModes(request.protocol_config) });
    const kind = request.request;
    if (kind === undefined) return [];
    const body = request.request_body ?? request.response_body;
    const headers = request.request_headers ?? request.response_headers;
    const endOfStream = body?.end_of_stream ?? headers?.end_of_stream ?? kind.endsWith('trailers');
    const attributes = plainAttributes(request.attributes);
    this.heard.messages.push({
      kind,
      endOfStream,
      bytes: body?.body?.length ?? 0,
      ...(attributes === undefined ? {} : { attributes }),
      at: performance.now(),
    });
    switch (kind) {
      case 'request_headers':
        // The pick goes in the header reply: every profile reads it from there (header or metadata).
        return [routingReply('request_headers', [this.backend], 'list')];
      case 'request_body':
        return this.heard.modes.request === 'collect-duplex'
          ? streamedBody('request', request.request_body?.body ?? Buffer.alloc(0), endOfStream)
          : [CONTINUE_REQUEST_BODY];
      case 'response_headers':
        return [CONTINUE_RESPONSE_HEADERS];
      case 'response_body': {
        // Full duplex: the chunk goes back as it came. Here an error event could be appended, had
        // Envoy marked a cut answer's last chunk; it never does (docs/errors.md, "Cut streams").
        if (this.heard.modes.response !== 'duplex') return [CONTINUE_RESPONSE_BODY];
        return streamedBody('response', request.response_body?.body ?? Buffer.alloc(0), endOfStream);
      }
      case 'request_trailers':
        return [{ request_trailers: {} }];
      case 'response_trailers':
        return [{ response_trailers: {} }];
    }
  }

  finish(end: StreamEnd): void {
    this.heard.end = { kind: end.kind, ...(end.kind === 'error' ? { detail: end.error.message } : {}), at: performance.now() };
  }
}

/** Envoy's attribute Struct as plain values (`{ 'response.flags': 0, ... }`). */
function plainAttributes(attributes: Record<string, ProtoStruct> | undefined): Record<string, unknown> | undefined {
  const fields = attributes?.['envoy.filters.http.ext_proc']?.fields;
  if (fields === undefined) return undefined;
  const out: Record<string, unknown> = {};
  for (const [key, value] of Object.entries(fields)) out[key] = value.stringValue ?? value.numberValue ?? value.boolValue ?? value;
  return out;
}
