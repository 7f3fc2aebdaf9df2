// What makes a request's header list malformed in HTTP/2 (RFC 9113 §8.2 and §8.3), checked once
// per stream. A malformed request is a stream error of type PROTOCOL_ERROR: the connection and
// its other streams carry on. Envoy never sends one; the checks are for anything else that can
// reach a listener (a standalone deployment is reachable over the network).
//
// Not required here: :method and :scheme. The gRPC layer answers a request that is not a POST, and
// routes by :path alone.

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

/** Why a request's header fields are malformed, or undefined when they are not. */
export function requestFieldsProblem(fields: Fields): string | undefined {
  const seen = new Set<string>();
  let regularSeen = false;
  for (const [name, value] of fields) {
    const problem = fieldProblem(name, value);
    if (problem !== undefined) return problem;
    if (name.startsWith(':')) {
      if (regularSeen) return `pseudo-header ${name} after a regular field`;
      if (!REQUEST_PSEUDO_HEADERS.has(name)) return `unknown pseudo-header ${name}`;
      if (seen.has(name)) return `pseudo-header ${name} twice`;
      if (name === ':path' && value === '') return 'empty :path';
      seen.add(name);
      continue;
    }
    regularSeen = true;
    if (CONNECTION_SPECIFIC.has(name)) return `connection-specific field ${name}`;
    if (name === 'te' && value !== 'trailers') return 'te other than "trailers"';
  }
  return undefined;
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
