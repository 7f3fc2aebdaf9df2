// The ext_proc messages Envoy sends, as plain values in the shapes of src/extproc/messages.ts, for
// tests and benchmarks that drive our processor or server with them. Header values travel in
// `raw_value`, as Envoy sends them.
import type { HeaderMap, ProcessingRequest, ProtoStruct, ProtocolConfiguration } from '../../src/extproc/messages.js';

export function headerMap(pairs: Record<string, string>): HeaderMap & { headers: Array<{ key: string; raw_value: Buffer }> } {
  return { headers: Object.entries(pairs).map(([key, value]) => ({ key, raw_value: Buffer.from(value, 'latin1') })) };
}

export function requestHeaders(
  pairs: Record<string, string>,
  endOfStream = false,
  protocolConfig?: ProtocolConfiguration,
): ProcessingRequest {
  return {
    request: 'request_headers',
    request_headers: { headers: headerMap(pairs), end_of_stream: endOfStream },
    ...(protocolConfig === undefined ? {} : { protocol_config: protocolConfig }),
  };
}

export function requestBody(body: string | object, endOfStream = true): ProcessingRequest {
  return {
    request: 'request_body',
    request_body: { body: Buffer.from(typeof body === 'string' ? body : JSON.stringify(body)), end_of_stream: endOfStream },
  };
}

/** The response attributes our configs ask for (`response_attributes`). */
export interface ReplyAttributes {
  details?: string;
  flags?: number;
  upstream?: string;
}

/** Attributes as Envoy's ext_proc filter sends them: one Struct under the filter's name. */
export function envoyAttributes(attrs: ReplyAttributes): Record<string, ProtoStruct> {
  const fields: NonNullable<ProtoStruct['fields']> = {};
  if (attrs.details !== undefined) fields['response.code_details'] = { stringValue: attrs.details };
  if (attrs.flags !== undefined) fields['response.flags'] = { numberValue: attrs.flags };
  if (attrs.upstream !== undefined) fields['upstream.address'] = { stringValue: attrs.upstream };
  return { 'envoy.filters.http.ext_proc': { fields } };
}

/** `attrs: null` sends no attributes at all (a filter configured without response_attributes). */
export function responseHeaders(
  status: number,
  pairs: Record<string, string>,
  attrs: ReplyAttributes | null,
  endOfStream = false,
): ProcessingRequest {
  const message: ProcessingRequest = {
    request: 'response_headers',
    response_headers: { headers: headerMap({ ':status': String(status), ...pairs }), end_of_stream: endOfStream },
  };
  if (attrs !== null) message.attributes = envoyAttributes(attrs);
  return message;
}

export function responseBody(body: string | Buffer, endOfStream: boolean): ProcessingRequest {
  return {
    request: 'response_body',
    response_body: { body: typeof body === 'string' ? Buffer.from(body) : body, end_of_stream: endOfStream },
  };
}
