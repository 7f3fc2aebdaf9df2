// Settings both gRPC transports apply, chosen for Envoy as the (only) client.

const MiB = 1024 * 1024;

/**
 * Limits both transports (native, grpc-js) apply, chosen for Envoy as the (only) client. A buffered body arrives as
 * a single message; Envoy's buffer limit is the real cap (our configs keep it at or below 64 MiB),
 * this only has to stay well above it plus headers and attributes.
 */
export const MAX_RECEIVE_MESSAGE_BYTES = 128 * MiB;
/** Our keepalive pings find dead peers so their streams end (processors get `cancelled`). */
export const KEEPALIVE_INTERVAL_MS = 30_000;
export const KEEPALIVE_TIMEOUT_MS = 10_000;
/** After releasing the last streams at shutdown, how long the sessions get to flush those final frames. */
export const RELEASE_FLUSH_MS = 500;

/**
 * Per-stream receive window of the HTTP/2 transports. A buffered body is one message: with the
 * protocol's 64 KiB default Envoy would wait for a WINDOW_UPDATE round trip every 64 KiB of a 5 MB
 * body. Finite, so a peer we stop reading (backpressure) still stops sending.
 */
export const STREAM_WINDOW_BYTES = 16 * MiB;
/** Connection receive window: room for several large bodies at once on Envoy's one connection. */
export const CONNECTION_WINDOW_BYTES = 128 * MiB;
/**
 * Streams one connection may have open at once: each is one HTTP request in flight at Envoy, and
 * Envoy opens another connection when it needs more (our rendered config caps the cluster at 2048
 * requests anyway). Bounds the memory one connection can hold.
 */
export const MAX_CONCURRENT_STREAMS = 4096;
/** Far above what Envoy's ext_proc client sends, so no request dies on a header-size limit. */
export const MAX_HEADER_LIST_BYTES = 1 * MiB;
