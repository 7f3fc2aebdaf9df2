// An HTTP/2 client that writes frames exactly as given, for what no gRPC client can be told to
// do: reset a stream the way Envoy does (RST_STREAM alone, or END_STREAM and RST_STREAM in one
// write), or send frames the protocol forbids. Headers go out as HPACK literals (no table, no
// Huffman); whatever the server sends back is kept as raw bytes and not interpreted.
import { connect } from 'node:net';
import type { Socket } from 'node:net';

const PREFACE = Buffer.from('PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n');
export const FRAME = Object.freeze({ DATA: 0, HEADERS: 1, RST_STREAM: 3, SETTINGS: 4, PING: 6, GOAWAY: 7 });
export const FLAG = Object.freeze({ END_STREAM: 0x1, ACK: 0x1, END_HEADERS: 0x4 });
export const NGHTTP2_CANCEL = 8;

export function frame(type: number, flags: number, streamId: number, payload: Buffer = Buffer.alloc(0)): Buffer {
  const header = Buffer.alloc(9);
  header.writeUIntBE(payload.length, 0, 3);
  header[3] = type;
  header[4] = flags;
  header.writeUInt32BE(streamId, 5);
  return Buffer.concat([header, payload]);
}

/** A HEADERS frame (END_HEADERS) of literal fields without indexing. */
export function headersFrame(streamId: number, fields: ReadonlyArray<readonly [string, string]>, endStream = false): Buffer {
  const block = Buffer.concat(fields.map(([name, value]) => Buffer.concat([Buffer.from([0]), hpackString(name), hpackString(value)])));
  return frame(FRAME.HEADERS, FLAG.END_HEADERS | (endStream ? FLAG.END_STREAM : 0), streamId, block);
}

export function dataFrame(streamId: number, data: Buffer, endStream = false): Buffer {
  return frame(FRAME.DATA, endStream ? FLAG.END_STREAM : 0, streamId, data);
}

export function rstStreamFrame(streamId: number, code = NGHTTP2_CANCEL): Buffer {
  const payload = Buffer.alloc(4);
  payload.writeUInt32BE(code);
  return frame(FRAME.RST_STREAM, 0, streamId, payload);
}

/** The request headers of a gRPC call to `path`. */
export function grpcRequestHeaders(path: string, authority = 'localhost'): Array<[string, string]> {
  return [
    [':method', 'POST'],
    [':scheme', 'http'],
    [':path', path],
    [':authority', authority],
    ['content-type', 'application/grpc'],
    ['te', 'trailers'],
  ];
}

export interface RawH2Connection {
  /** Writes the bytes in one socket write (so the server reads them together). */
  write(bytes: Buffer): void;
  /** Everything the server sent so far. */
  received(): Buffer;
  /**
   * Resolves once the server has closed the connection; rejects when it has not within `withinMs`
   * (a bound of the test's own, so a server that keeps the connection fails with a message, not
   * by the runner's timeout).
   */
  closed(withinMs?: number): Promise<void>;
  /**
   * Resolves when what the server sent so far satisfies `condition` (checked on every read);
   * rejects if it closes first, or when `withinMs` pass first.
   */
  until(condition: (received: Buffer) => boolean, withinMs?: number): Promise<void>;
  /** Half-closes: no more bytes from us (the server sees end of stream and should close too). */
  end(): void;
  close(): void;
}

/** How long a raw connection waits for the server by default: far above any answer's time here, far below the runner's timeout. */
const DEFAULT_WAIT_MS = 10_000;

/** `promise`, or a rejection naming `what` once `ms` have passed. */
export function within<T>(promise: Promise<T>, ms: number, what: string): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  const deadline = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(new Error(`timed out after ${ms} ms waiting for ${what}`)), ms);
  });
  return Promise.race([promise, deadline]).finally(() => clearTimeout(timer));
}

/** Connects over plaintext TCP or a Unix socket (`unix:///path`) and sends the preface and empty SETTINGS. */
export function rawH2Connect(address: string): Promise<RawH2Connection> {
  return new Promise((resolve, reject) => {
    const socket: Socket = address.startsWith('unix://')
      ? connect(address.slice('unix://'.length))
      : connect(Number(address.slice(address.lastIndexOf(':') + 1)), address.slice(0, address.lastIndexOf(':')));
    socket.once('error', reject);
    socket.once('connect', () => {
      socket.write(Buffer.concat([PREFACE, frame(FRAME.SETTINGS, 0, 0)]));
      resolve(rawConnection(socket));
    });
  });
}

/** Wraps a connected socket; nothing is written on it. */
export function rawConnection(socket: Socket): RawH2Connection {
  const chunks: Buffer[] = [];
  socket.on('data', (chunk: Buffer) => chunks.push(chunk));
  const closed = new Promise<void>((done) => socket.once('close', () => done()));
  const received = (): Buffer => Buffer.concat(chunks);
  return {
    write: (bytes) => void socket.write(bytes),
    received,
    closed: (withinMs = DEFAULT_WAIT_MS) => within(closed, withinMs, 'the server to close the connection'),
    until: (condition, withinMs = DEFAULT_WAIT_MS) => {
      let check = (): void => undefined;
      const met = new Promise<void>((resolve, reject) => {
        check = (): void => {
          if (!condition(received())) return;
          socket.off('data', check);
          resolve();
        };
        socket.on('data', check);
        void closed.then(() => reject(new Error('the server closed the connection first')));
        check();
      });
      return within(met, withinMs, 'what the server sent to meet the condition').finally(() => socket.off('data', check));
    },
    end: () => void socket.end(),
    close: () => void socket.destroy(),
  };
}

function hpackString(text: string): Buffer {
  const bytes = Buffer.from(text, 'latin1');
  if (bytes.length >= 127) throw new Error('raw HPACK helper: strings of 127 bytes or more are not supported');
  return Buffer.concat([Buffer.from([bytes.length]), bytes]);
}

/** The frames in bytes a server sent (a trailing partial frame is left out). */
export function parseFrames(bytes: Buffer): Array<{ type: number; flags: number; streamId: number; payload: Buffer }> {
  const frames = [];
  let at = 0;
  while (bytes.length - at >= 9) {
    const length = bytes.readUIntBE(at, 3);
    if (bytes.length - at < 9 + length) break;
    frames.push({
      type: bytes[at + 3],
      flags: bytes[at + 4],
      streamId: bytes.readUInt32BE(at + 5) & 0x7fffffff,
      payload: bytes.subarray(at + 9, at + 9 + length),
    });
    at += 9 + length;
  }
  return frames;
}

/**
 * A rapid-reset attack as both transports' tests send it: `batches` batches of `perBatch` streams,
 * each stream's frames from `framesFor(id)` (odd ids from 1). After every batch but the last, a PING
 * whose ACK proves the server read the batch, then `afterBatch(streamsSoFar)` for the caller's
 * check that the connection is still up. The last reset is the last frame sent, so the server has
 * read everything when it closes (unread bytes would make its kernel answer with a TCP reset,
 * which can destroy the GOAWAY in flight).
 */
export async function sendResetBatches(
  raw: RawH2Connection,
  framesFor: (streamId: number) => Buffer[],
  afterBatch: (streamsSoFar: number) => void,
  { batches = 5, perBatch = 100 }: { batches?: number; perBatch?: number } = {},
): Promise<void> {
  const ping = frame(FRAME.PING, 0, 0, Buffer.alloc(8, 7));
  const pingAcks = (): number => parseFrames(raw.received()).filter((f) => f.type === FRAME.PING && (f.flags & 1) === 1).length;
  let id = 1;
  for (let batch = 0; batch < batches; batch++) {
    const frames: Buffer[] = [];
    for (let i = 0; i < perBatch; i++, id += 2) frames.push(...framesFor(id));
    raw.write(Buffer.concat(frames));
    if (batch === batches - 1) return;
    raw.write(ping);
    await raw.until(() => pingAcks() === batch + 1);
    afterBatch((batch + 1) * perBatch);
  }
}
