// Facts about one response, computed once from its headers, Envoy's attributes (when the gateway
// asks for them) and forwarded metadata. Pure.

import type { EnvoyReplyFacts } from '../errors/envoy-reply.js';
import { ERROR_CODE_HEADER } from '../errors/render.js';
import type { HttpHeaders, ProcessingRequest } from '../extproc/messages.js';
import { DESTINATION_METADATA_NAMESPACE, SERVED_ENDPOINT_KEY } from '../extproc/protocol-names.js';
import { attributeNumber, attributeString, headerValue, metadataValue } from '../extproc/message-fields.js';

/** What the response headers (and Envoy's attributes, when configured) say about the answer. */
export interface ResponseFacts {
  readonly status: number;
  readonly contentType: string;
  readonly compressed: boolean;
  readonly contentLength: number | undefined;
  readonly hasContentLength: boolean;
  readonly ours: boolean;
  readonly codeDetails: string | undefined;
  readonly flags: number | undefined;
  /** The host that answered: Envoy's `upstream.address` attribute, or the gateway's `-served` metadata. */
  readonly servedAddress: string | undefined;
  readonly endOfStream: boolean;
}

export function responseFacts(message: ProcessingRequest, headersMessage: HttpHeaders): ResponseFacts {
  const headers = headersMessage.headers;
  const encoding = headerValue(headers, 'content-encoding');
  const lengthHeader = headerValue(headers, 'content-length');
  const length = Number(lengthHeader ?? NaN);
  const attributes = message.attributes;
  return {
    status: Number(headerValue(headers, ':status') ?? '0'),
    contentType: headerValue(headers, 'content-type') ?? '',
    compressed: encoding !== undefined && isCompressed(encoding),
    contentLength: Number.isFinite(length) ? length : undefined,
    hasContentLength: lengthHeader !== undefined,
    ours: headerValue(headers, ERROR_CODE_HEADER) !== undefined,
    codeDetails: attributeString(attributes, 'response.code_details'),
    flags: attributeNumber(attributes, 'response.flags'),
    servedAddress:
      nonEmpty(attributeString(attributes, 'upstream.address')) ??
      nonEmpty(metadataValue(message.metadata_context?.filter_metadata, DESTINATION_METADATA_NAMESPACE, SERVED_ENDPOINT_KEY)),
    endOfStream: headersMessage.end_of_stream === true,
  };
}

/** What classifying the answer as Envoy's own reply needs (attributes absent, not undefined). */
export function envoyReplyFacts(facts: ResponseFacts): EnvoyReplyFacts {
  const out: EnvoyReplyFacts = { status: facts.status };
  if (facts.codeDetails !== undefined) out.codeDetails = facts.codeDetails;
  if (facts.flags !== undefined) out.flags = facts.flags;
  return out;
}

function isCompressed(contentEncoding: string): boolean {
  const encoding = contentEncoding.trim().toLowerCase();
  return encoding !== '' && encoding !== 'identity';
}

function nonEmpty(value: string | undefined): string | undefined {
  return value === undefined || value === '' ? undefined : value;
}
