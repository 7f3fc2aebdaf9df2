// The one model of the ext_proc messages we exchange with Envoy: plain TypeScript shapes, which our
// codec (codec/) decodes and encodes. They are the shapes @grpc/proto-loader gives with the
// options of test/support/proto-definitions.ts, the codec's test oracle (snake_case field names,
// enums as strings, bytes as Buffer, oneofs named by a discriminator property). The request layer
// sees only these values; no transport library touches them.

export interface HeaderValue {
  key: string;
  value?: string;
  raw_value?: Buffer;
}

export interface HeaderMap {
  headers?: HeaderValue[];
}

export interface HttpHeaders {
  headers?: HeaderMap;
  /** Deprecated upstream (attributes come in ProcessingRequest.attributes); decoded if sent. */
  attributes?: Record<string, ProtoStruct>;
  end_of_stream?: boolean;
}

export interface HttpBody {
  body?: Buffer;
  end_of_stream?: boolean;
  /** GRPC body mode only. */
  end_of_stream_without_message?: boolean;
  /** GRPC body mode only. */
  grpc_message_compressed?: boolean;
}

export interface HttpTrailers {
  trailers?: HeaderMap;
}

/**
 * google.protobuf.Value / Struct as proto-loader decodes them. Unlike our own protos these
 * well-known types come from protobufjs's bundled definitions, whose field names are camelCase
 * even with `keepCase: true` (checked against Envoy 1.40's attributes).
 */
export interface ProtoValue {
  kind?: 'nullValue' | 'numberValue' | 'stringValue' | 'boolValue' | 'structValue' | 'listValue';
  nullValue?: 'NULL_VALUE' | number;
  numberValue?: number;
  stringValue?: string;
  boolValue?: boolean;
  structValue?: ProtoStruct;
  listValue?: { values?: ProtoValue[] };
}

export interface ProtoStruct {
  fields?: Record<string, ProtoValue>;
}

/** Announced in the first message of a stream: the body modes the filter is configured with. */
export interface ProtocolConfiguration {
  request_body_mode?: BodySendMode;
  response_body_mode?: BodySendMode;
  send_body_without_waiting_for_header_response?: boolean;
}

/** config.core.v3.Metadata: namespaces the filter forwards (`metadata_options.forwarding_namespaces`). */
export interface Metadata {
  filter_metadata?: Record<string, ProtoStruct>;
}

export interface ProcessingRequest {
  request?: 'request_headers' | 'response_headers' | 'request_body' | 'response_body' | 'request_trailers' | 'response_trailers';
  request_headers?: HttpHeaders;
  response_headers?: HttpHeaders;
  request_body?: HttpBody;
  response_body?: HttpBody;
  request_trailers?: HttpTrailers;
  response_trailers?: HttpTrailers;
  /** Keyed by filter name; Envoy uses `envoy.filters.http.ext_proc`. */
  attributes?: Record<string, ProtoStruct>;
  observability_mode?: boolean;
  metadata_context?: Metadata;
  protocol_config?: ProtocolConfiguration;
}

export interface HeaderValueOption {
  header: HeaderValue;
  append?: { value: boolean };
}

export interface HeaderMutation {
  set_headers?: HeaderValueOption[];
  remove_headers?: string[];
}

/** A body chunk sent back in FULL_DUPLEX_STREAMED mode (≤ 64 KiB each). */
export interface StreamedBodyResponse {
  body?: Buffer;
  end_of_stream?: boolean;
  /** GRPC body mode only. */
  end_of_stream_without_message?: boolean;
  /** GRPC body mode only. */
  grpc_message_compressed?: boolean;
}

export interface BodyMutation {
  mutation?: 'body' | 'clear_body' | 'streamed_response';
  body?: Buffer;
  clear_body?: boolean;
  streamed_response?: StreamedBodyResponse;
}

export type CommonResponseStatus = 'CONTINUE' | 'CONTINUE_AND_REPLACE';

export interface CommonResponse {
  status?: CommonResponseStatus;
  header_mutation?: HeaderMutation;
  body_mutation?: BodyMutation;
  clear_route_cache?: boolean;
}

export interface HeadersResponse {
  response?: CommonResponse;
}

export interface BodyResponse {
  response?: CommonResponse;
}

export interface TrailersResponse {
  header_mutation?: HeaderMutation;
}

export interface ImmediateResponse {
  status: { code: number };
  headers?: HeaderMutation;
  body?: Buffer;
  details?: string;
}

/** ProcessingMode.BodySendMode, each at its enum number: the one list the codec, the replies and tools/ use. */
export const BODY_SEND_MODES = ['NONE', 'STREAMED', 'BUFFERED', 'BUFFERED_PARTIAL', 'FULL_DUPLEX_STREAMED', 'GRPC'] as const;
export type BodySendMode = (typeof BODY_SEND_MODES)[number];
/** ProcessingMode.HeaderSendMode, each at its enum number. */
export const HEADER_SEND_MODES = ['DEFAULT', 'SEND', 'SKIP'] as const;
export type HeaderSendMode = (typeof HEADER_SEND_MODES)[number];

export interface ProcessingMode {
  request_header_mode?: HeaderSendMode;
  response_header_mode?: HeaderSendMode;
  request_body_mode?: BodySendMode;
  response_body_mode?: BodySendMode;
  request_trailer_mode?: HeaderSendMode;
  response_trailer_mode?: HeaderSendMode;
}

export interface ProcessingResponse {
  response?:
    | 'request_headers'
    | 'response_headers'
    | 'request_body'
    | 'response_body'
    | 'request_trailers'
    | 'response_trailers'
    | 'immediate_response';
  request_headers?: HeadersResponse;
  response_headers?: HeadersResponse;
  request_body?: BodyResponse;
  response_body?: BodyResponse;
  request_trailers?: TrailersResponse;
  response_trailers?: TrailersResponse;
  immediate_response?: ImmediateResponse;
  dynamic_metadata?: ProtoStruct;
  mode_override?: ProcessingMode;
}
