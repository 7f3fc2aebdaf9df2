// `host:port` as our config, endpoint files and Envoy use it, split once and the same way
// everywhere: the port follows the last colon, and an IPv6 host may come in brackets.

export interface HostPort {
  /** Without brackets (`::1`, not `[::1]`). */
  readonly host: string;
  /** The text after the last colon; `Number.NaN` when it is not a whole number. */
  readonly port: number;
}

export function splitHostPort(address: string): HostPort {
  const colon = address.lastIndexOf(':');
  if (colon < 0) return { host: address.replace(/^\[|\]$/g, ''), port: Number.NaN };
  const portText = address.slice(colon + 1);
  const port = /^\d+$/.test(portText) ? Number(portText) : Number.NaN;
  return { host: address.slice(0, colon).replace(/^\[|\]$/g, ''), port };
}
