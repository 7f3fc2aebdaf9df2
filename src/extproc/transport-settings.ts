// Settings both gRPC transports apply, chosen for Envoy as the (only) client.

const MiB = 1024 * 1024;

/**
 * Limits both transports apply, chosen for Envoy as the (only) client. A buffered body arrives as
 * a single message; Envoy's buffer limit is the real cap (our configs keep it at or below 64 MiB),
 * this only has to stay well above it plus headers and attributes.
 */
export const MAX_RECEIVE_MESSAGE_BYTES = 128 * MiB;
/** Our keepalive pings find dead peers so their streams end (processors get `cancelled`). */
export const KEEPALIVE_INTERVAL_MS = 30_000;
export const KEEPALIVE_TIMEOUT_MS = 10_000;
/** After releasing the last streams at shutdown, how long the sessions get to flush those final frames. */
export const RELEASE_FLUSH_MS = 500;
