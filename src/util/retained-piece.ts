// Body pieces the stream machine keeps across ext_proc messages are views: our HTTP/2 connection
// hands each message out as a view of the socket read it came in (up to 64 KiB), and the codec
// hands out the body as a view of the message. Kept for the rest of a stream, a 200-byte SSE event
// would hold its whole read buffer alive, once per stream; so a piece that views much less than its
// backing store is copied once, when it is kept. Large pieces (a buffered body is usually most of
// its read) are kept as they are.

/** `piece`, or a copy of it when it is less than half of the memory it keeps alive. */
export function retainedPiece(piece: Buffer): Buffer {
  return piece.length * 2 < piece.buffer.byteLength ? Buffer.from(piece) : piece;
}
