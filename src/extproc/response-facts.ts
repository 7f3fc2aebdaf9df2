// Facts about one response, computed once from its headers, Envoy's attributes (when the gateway
// asks for them) and forwarded metadata. Pure.

import { ERROR_CODE_HEADER } from '../errors/render.js';
import type { HttpHeaders, ProcessingRequest } from './messages.js';
import { DESTINATION_METADATA_NAMESPACE, SERVED_ENDPOINT_KEY } from './protocol-names.js';
import { attributeNumber, attributeString, headerLookup, metadataValue } from './wire-values.js';

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
  const headers = headerLookup(headersMessage.headers);
  const encoding = (headers.get('content-encoding') ?? 'identity').trim().toLowerCase();
  const length = Number(headers.get('content-length') ?? NaN);
  const attributes = message.attributes;
  return {
    status: Number(headers.get(':status') ?? '0'),
    contentType: headers.get('content-type') ?? '',
    compressed: encoding !== '' && encoding !== 'identity',
    contentLength: Number.isFinite(length) ? length : undefined,
    hasContentLength: headers.has('content-length'),
    ours: headers.has(ERROR_CODE_HEADER),
    codeDetails: attributeString(attributes, 'response.code_details'),
    flags: attributeNumber(attributes, 'response.flags'),
    servedAddress:
      nonEmpty(attributeString(attributes, 'upstream.address')) ??
      nonEmpty(metadataValue(message.metadata_context?.filter_metadata, DESTINATION_METADATA_NAMESPACE, SERVED_ENDPOINT_KEY)),
    endOfStream: headersMessage.end_of_stream === true,
  };
}

/** The attributes as EnvoyReplyFacts wants them (absent, not undefined). */
export function definedFacts(facts: ResponseFacts): { codeDetails?: string; flags?: number } {
  return {
    ...(facts.codeDetails === undefined ? {} : { codeDetails: facts.codeDetails }),
    ...(facts.flags === undefined ? {} : { flags: facts.flags }),
  };
}

function nonEmpty(value: string | undefined): string | undefined {
  return value === undefined || value === '' ? undefined : value;
}
