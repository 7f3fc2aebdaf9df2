// What makes a request's header list malformed in HTTP/2 (RFC 9113 §8.2 and §8.3), checked once
// per stream. A malformed request is a stream error of type PROTOCOL_ERROR: the connection and
// its other streams carry on. Envoy never sends one; the checks are for anything else that can
// reach a listener (a standalone deployment is reachable over the network).
//
// A request must carry :method, and unless it is a CONNECT also :scheme and :path (§8.3.1); its
// `content-length`, when present, is returned so the connection can hold the DATA to it (§8.1.1).

type Fields = ReadonlyArray<readonly [string, string]>;

const REQUEST_PSEUDO_HEADERS = new Set([':method', ':scheme', ':authority', ':path']);
/** Connection-specific fields have no meaning in HTTP/2 (§8.2.2). */
const CONNECTION_SPECIFIC = new Set(['connection', 'proxy-connection', 'keep-alive', 'transfer-encoding', 'upgrade']);
/** Controls, space, upper case, DEL and non-ASCII; a colon outside a pseudo-header's first character (§8.2.1). */
// eslint-disable-next-line no-control-regex -- control characters are exactly what the rule forbids
const BAD_NAME_CHAR = /[\x00-\x20A-Z\x7f-\xff:]/;
/** NUL, CR or LF anywhere, or whitespace at either end (§8.2.1). */
const BAD_VALUE = /[\0\r\n]|^[ \t]|[ \t]$/;

function fieldProblem(name: string, value: string): string | undefined {
  const bare = name.startsWith(':') ? name.slice(1) : name;
  if (bare === '' || BAD_NAME_CHAR.test(bare)) return `invalid field name ${JSON.stringify(name)}`;
  if (BAD_VALUE.test(value)) return `invalid value for ${name}`;
  return undefined;
}

/** A request's header fields are well formed; `contentLength` is the declared body length, -1 when none is declared. */
export type RequestFieldsCheck = { readonly ok: true; readonly contentLength: number } | { readonly ok: false; readonly problem: string };

const NO_CONTENT_LENGTH: RequestFieldsCheck = Object.freeze({ ok: true, contentLength: -1 });
const DIGITS = /^[0-9]{1,15}$/;

function malformed(problem: string): RequestFieldsCheck {
  return { ok: false, problem };
}

/** Checks a request's header fields in one pass (§8.2, §8.3.1) and reads its `content-length`. */
export function checkRequestFields(fields: Fields): RequestFieldsCheck {
  const seen = new Set<string>();
  let regularSeen = false;
  let method: string | undefined;
  let contentLength = -1;
  for (const [name, value] of fields) {
    const problem = fieldProblem(name, value);
    if (problem !== undefined) return malformed(problem);
    if (name.startsWith(':')) {
      if (regularSeen) return malformed(`pseudo-header ${name} after a regular field`);
      if (!REQUEST_PSEUDO_HEADERS.has(name)) return malformed(`unknown pseudo-header ${name}`);
      if (seen.has(name)) return malformed(`pseudo-header ${name} twice`);
      if (name === ':path' && value === '') return malformed('empty :path');
      if (name === ':method') method = value;
      seen.add(name);
      continue;
    }
    regularSeen = true;
    if (CONNECTION_SPECIFIC.has(name)) return malformed(`connection-specific field ${name}`);
    if (name === 'te' && value !== 'trailers') return malformed('te other than "trailers"');
    if (name === 'content-length') {
      if (!DIGITS.test(value)) return malformed('content-length not a number');
      const declared = Number(value);
      if (contentLength >= 0 && contentLength !== declared) return malformed('content-length given twice, differently');
      contentLength = declared;
    }
  }
  if (method === undefined) return malformed('no :method');
  if (method !== 'CONNECT' && !seen.has(':scheme')) return malformed('no :scheme');
  if (method !== 'CONNECT' && !seen.has(':path')) return malformed('no :path');
  return contentLength < 0 ? NO_CONTENT_LENGTH : { ok: true, contentLength };
}

/** Why trailer fields are malformed (a trailer block carries no pseudo-headers), or undefined. */
export function trailerFieldsProblem(fields: Fields): string | undefined {
  for (const [name, value] of fields) {
    if (name.startsWith(':')) return `pseudo-header ${name} in trailers`;
    const problem = fieldProblem(name, value);
    if (problem !== undefined) return problem;
    if (CONNECTION_SPECIFIC.has(name)) return `connection-specific field ${name}`;
  }
  return undefined;
}
