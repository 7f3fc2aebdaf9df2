// Media-type checks on `content-type` header values: parameters (`; charset=utf-8`) and case
// do not matter. Never parse a body as JSON without checking this first: routers that JSON-parsed Envoy's
// plain-text local replies answered clients with `invalid character 'u' looking for beginning of value`.

/** `Text/Event-Stream; charset=UTF-8` → `text/event-stream`; undefined/empty → ''. */
function mediaType(contentType: string | undefined): string {
  if (contentType === undefined) return '';
  const semi = contentType.indexOf(';');
  return (semi === -1 ? contentType : contentType.slice(0, semi)).trim().toLowerCase();
}

/** `application/json` and structured `+json` types (`application/problem+json`). */
export function isJsonContentType(contentType: string | undefined): boolean {
  const type = mediaType(contentType);
  return type === 'application/json' || (type.startsWith('application/') && type.endsWith('+json'));
}

export function isSseContentType(contentType: string | undefined): boolean {
  return mediaType(contentType) === 'text/event-stream';
}
