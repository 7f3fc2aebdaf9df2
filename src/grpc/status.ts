// The gRPC status codes our native transport sends (the numbers are fixed by the gRPC protocol;
// grpc-js's `status` enum has the same values), and how a status travels in trailers.

export const GRPC_STATUS = Object.freeze({
  OK: 0,
  CANCELLED: 1,
  NOT_FOUND: 5,
  RESOURCE_EXHAUSTED: 8,
  UNIMPLEMENTED: 12,
  INTERNAL: 13,
});

/** Trailer fields for a status; the message is percent-encoded as the protocol requires. */
export function statusTrailers(code: number, message?: string): Record<string, string> {
  return message === undefined || message === ''
    ? { 'grpc-status': String(code) }
    : { 'grpc-status': String(code), 'grpc-message': encodeStatusMessage(message) };
}

/** gRPC's percent-encoding of grpc-message: printable ASCII except '%' stays, the rest is %XX of UTF-8. */
function encodeStatusMessage(message: string): string {
  let out = '';
  for (const byte of Buffer.from(message, 'utf8')) {
    out +=
      byte >= 0x20 && byte <= 0x7e && byte !== 0x25 ? String.fromCharCode(byte) : `%${byte.toString(16).toUpperCase().padStart(2, '0')}`;
  }
  return out;
}
