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

/** A listener's address as our config writes it. */
export type ListenAddress =
  { readonly kind: 'tcp'; readonly host: string; readonly port: number } | { readonly kind: 'unix'; readonly path: string };

/**
 * `host:port` (IPv6 in brackets; port 0 = any free one), or `unix:///abs/path.sock` /
 * `unix:rel/path.sock` (gRPC's naming; the path is returned as written). undefined when it is
 * neither: the one parser behind the config check and the listeners, so they cannot disagree.
 */
export function parseListenAddress(address: string): ListenAddress | undefined {
  if (address.startsWith('unix:')) {
    const path = address.startsWith('unix://') ? address.slice('unix://'.length) : address.slice('unix:'.length);
    return path === '' ? undefined : { kind: 'unix', path };
  }
  const { host, port } = splitHostPort(address);
  if (host === '' || !Number.isInteger(port) || port > 65535) return undefined;
  return { kind: 'tcp', host, port };
}
