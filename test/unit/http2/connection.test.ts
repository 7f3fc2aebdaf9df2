// Our HTTP/2 connection (src/http2/connection.ts) against node:http2's client (nghttp2: a
// conformant peer with Huffman, indexing, CONTINUATION, flow control and PING) and, for what no
// conformant client sends, a raw frame writer. The server under test echoes each request body
// back and ends with a trailer carrying what it received, so every test checks bytes end to end.
import assert from 'node:assert/strict';
import { createHash, randomBytes } from 'node:crypto';
import http2 from 'node:http2';
import type { ClientHttp2Session, ClientHttp2Stream } from 'node:http2';
import { connect, createServer } from 'node:net';
import type { AddressInfo, Server, Socket } from 'node:net';
import { after, before, describe, it } from 'node:test';
import { Http2Connection } from '../../../src/http2/connection.js';
import type { Http2ConnectionOptions } from '../../../src/http2/connection.js';
import type { Http2Stream, StreamClose } from '../../../src/http2/stream.js';
import { ErrorCode } from '../../../src/http2/frames.js';
import { encodeHeaderBlock } from '../../../src/http2/hpack-encoder.js';
import {
  dataFrame,
  FLAG,
  frame,
  FRAME,
  headersFrame,
  parseFrames,
  rawConnection,
  rawH2Connect,
  rstStreamFrame,
  sendResetBatches,
} from '../../support/h2-frames.js';
import type { RawH2Connection } from '../../support/h2-frames.js';
import { waitUntil } from '../../support/wait-until.js';

interface Observed {
  readonly closes: StreamClose[];
  readonly ends: number[];
  readonly connections: Http2Connection[];
  /** The server side of each connection's socket. */
  readonly sockets: Socket[];
}

type Behaviour = (stream: Http2Stream, headers: ReadonlyArray<readonly [string, string]>) => void;

/** Echo: answers headers at once, sends each body chunk back, ends with `x-received-bytes` and `x-sha256` trailers. */
const echo: Behaviour = (stream, headers) => {
  const hash = createHash('sha256');
  let bytes = 0;
  const requestHeaderBytes = headers.reduce((sum, [name, value]) => sum + name.length + value.length, 0);
  stream.respond(
    encodeHeaderBlock([
      [':status', '200'],
      ['x-request-header-bytes', String(requestHeaderBytes)],
    ]),
  );
  const previous = stream.handlers;
  stream.handlers = {
    onData: (chunk) => {
      bytes += chunk.length;
      hash.update(chunk);
      stream.write(chunk);
    },
    onEnd: () => {
      previous.onEnd();
      stream.end(
        encodeHeaderBlock([
          ['x-received-bytes', String(bytes)],
          ['x-sha256', hash.digest('hex')],
        ]),
      );
    },
    onClose: (close) => previous.onClose(close),
  };
};

async function startServer(
  behaviour: Behaviour,
  options: Partial<Omit<Http2ConnectionOptions, 'onStream'>> = {},
): Promise<{ server: Server; url: string; address: string; observed: Observed }> {
  const observed: Observed = { closes: [], ends: [], connections: [], sockets: [] };
  const server = createServer((socket) => {
    observed.sockets.push(socket);
    const connection = new Http2Connection(socket, {
      streamWindow: 16 * 1024 * 1024,
      connectionWindow: 128 * 1024 * 1024,
      maxHeaderListBytes: 1024 * 1024,
      ...options,
      onStream: (stream, headers) => {
        stream.handlers = {
          onData: () => undefined,
          onEnd: () => observed.ends.push(stream.id),
          onClose: (close) => observed.closes.push(close),
        };
        behaviour(stream, headers);
      },
    });
    observed.connections.push(connection);
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as AddressInfo;
  return { server, url: `http://127.0.0.1:${port}`, address: `127.0.0.1:${port}`, observed };
}

interface Exchange {
  readonly status: number | undefined;
  readonly headers: http2.IncomingHttpHeaders;
  readonly body: Buffer;
  readonly trailers: http2.IncomingHttpHeaders;
}

/** Sends `body` on a new stream of `session` and collects the whole response. */
function exchange(session: ClientHttp2Session, body: Buffer, extraHeaders: http2.OutgoingHttpHeaders = {}): Promise<Exchange> {
  return new Promise((resolve, reject) => {
    const stream: ClientHttp2Stream = session.request({ ':method': 'POST', ':path': '/echo', ...extraHeaders });
    const chunks: Buffer[] = [];
    let headers: http2.IncomingHttpHeaders = {};
    let trailers: http2.IncomingHttpHeaders = {};
    stream.on('response', (h) => (headers = h));
    stream.on('trailers', (t: http2.IncomingHttpHeaders) => (trailers = t));
    stream.on('data', (chunk: Buffer) => chunks.push(chunk));
    stream.on('end', () => resolve({ status: Number(headers[':status']), headers, body: Buffer.concat(chunks), trailers }));
    stream.on('error', reject);
    stream.end(body);
  });
}

function sha256(bytes: Buffer): string {
  return createHash('sha256').update(bytes).digest('hex');
}

void describe('HTTP/2 connection with a conformant peer (node:http2 client)', () => {
  let harness: Awaited<ReturnType<typeof startServer>>;
  before(async () => {
    harness = await startServer(echo);
  });
  after(() => harness.server.close());

  void it('echoes many concurrent streams on one connection, each body whole and in order', async (t) => {
    const session = http2.connect(harness.url);
    t.after(() => session.close());
    const bodies = Array.from({ length: 50 }, (_, i) => randomBytes(1 + i * 997));
    const results = await Promise.all(bodies.map((body) => exchange(session, body)));
    results.forEach((result, i) => {
      assert.equal(result.status, 200);
      assert.ok(result.body.equals(bodies[i]), `stream ${i}: body echoed byte for byte`);
      assert.equal(result.trailers['x-received-bytes'], String(bodies[i].length));
      assert.equal(result.trailers['x-sha256'], sha256(bodies[i]));
    });
  });

  void it('a reply larger than the peer’s window waits for its WINDOW_UPDATEs and arrives whole', async (t) => {
    // 1 KiB stream window: the 300 KiB echo needs hundreds of grants from the client.
    const session = http2.connect(harness.url, { settings: { initialWindowSize: 1024 } });
    t.after(() => session.close());
    const body = randomBytes(300 * 1024);
    const result = await exchange(session, body);
    assert.ok(result.body.equals(body), 'every byte, in order');
    assert.equal(result.trailers['x-sha256'], sha256(body), 'trailers only after the held-back data');
  });

  void it('a window of 0 holds replies back until the peer raises SETTINGS_INITIAL_WINDOW_SIZE', async (t) => {
    const session = http2.connect(harness.url, { settings: { initialWindowSize: 0 } });
    t.after(() => session.close());
    const body = randomBytes(50_000);
    const pending = exchange(session, body);
    // The request is sent (and echoed into our queue) before the window opens.
    await new Promise<void>((resolve) => session.once('remoteSettings', () => resolve()));
    session.settings({ initialWindowSize: 65_535 });
    const result = await pending;
    assert.ok(result.body.equals(body));
  });

  void it('a request header block split into CONTINUATION frames is decoded whole', async (t) => {
    const session = http2.connect(harness.url);
    t.after(() => session.close());
    // 40 KB of header value: more than one 16 KiB frame, so nghttp2 sends HEADERS + CONTINUATION.
    const big = 'x'.repeat(40_000);
    const result = await exchange(session, Buffer.from('hi'), { 'x-big': big });
    assert.equal(result.status, 200);
    const requestHeaderBytes = Number(result.headers['x-request-header-bytes']);
    assert.ok(requestHeaderBytes > 40_000, `decoded ${requestHeaderBytes} header bytes`);
    assert.equal(result.body.toString(), 'hi');
  });

  void it('answers the peer’s PING, and the peer answers ours', async (t) => {
    const session = http2.connect(harness.url);
    t.after(() => session.close());
    await exchange(session, Buffer.from('warm'));
    const roundTrip = await new Promise<number>((resolve, reject) =>
      session.ping((err, duration) => (err === null ? resolve(duration) : reject(err))),
    );
    assert.ok(roundTrip >= 0);
    const connection = harness.observed.connections.at(-1)!;
    await new Promise<void>((resolve) => assert.equal(connection.ping(resolve), true));
  });
});

void describe('HTTP/2 connection flow control on receive', () => {
  void it('grants the window back as it reads: a body 16× the stream window and 8× the connection window arrives whole', async (t) => {
    const harness = await startServer(echo, { streamWindow: 64 * 1024, connectionWindow: 128 * 1024 });
    t.after(() => harness.server.close());
    const session = http2.connect(harness.url);
    t.after(() => session.close());
    const body = randomBytes(1024 * 1024);
    const result = await exchange(session, body);
    assert.equal(result.trailers['x-received-bytes'], String(body.length));
    assert.equal(result.trailers['x-sha256'], sha256(body));
  });

  void it('a header list over the limit resets only that stream; the next request on the connection is served', async (t) => {
    const harness = await startServer(echo, { maxHeaderListBytes: 4096 });
    t.after(() => harness.server.close());
    const session = http2.connect(harness.url, { maxSendHeaderBlockLength: 1024 * 1024 });
    t.after(() => session.close());
    await assert.rejects(
      exchange(session, Buffer.from('a'), { 'x-big': 'y'.repeat(8000) }),
      /ENHANCE_YOUR_CALM|NGHTTP2_ENHANCE_YOUR_CALM|code 11/,
    );
    const result = await exchange(session, Buffer.from('still here'), { 'x-small': 'z' });
    assert.equal(result.body.toString(), 'still here', 'the HPACK table stayed in sync');
  });
});

/** A SETTINGS frame that sets SETTINGS_INITIAL_WINDOW_SIZE (4) to `size`. */
function initialWindow(size: number): Buffer {
  const payload = Buffer.alloc(6);
  payload.writeUInt16BE(4, 0);
  payload.writeUInt32BE(size, 2);
  return frame(FRAME.SETTINGS, 0, 0, payload);
}

/** A PING and its ACK: everything the server wrote before answering it has arrived. */
async function pingRoundTrip(raw: RawH2Connection): Promise<void> {
  const acks = parseFrames(raw.received()).filter((f) => f.type === 6).length;
  raw.write(PING);
  await raw.until((received) => parseFrames(received).filter((f) => f.type === 6).length > acks);
}

void describe('HTTP/2 connection flow control on send', () => {
  void it('a SETTINGS change can take a stream window below zero: later grants first pay that back', async (t) => {
    const harness = await startServer(echo);
    t.after(() => harness.server.close());
    const raw = await rawH2Connect(harness.address);
    t.after(() => raw.close());
    const windowUpdate = (increment: number): Buffer => {
      const payload = Buffer.alloc(4);
      payload.writeUInt32BE(increment);
      return frame(8, 0, 1, payload);
    };
    const echoed = (): number =>
      parseFrames(raw.received())
        .filter((f) => f.type === FRAME.DATA && f.streamId === 1)
        .reduce((sum, f) => sum + f.payload.length, 0);
    const sync = (): Promise<void> => pingRoundTrip(raw);
    raw.write(Buffer.concat([initialWindow(100), headersFrame(1, POST_X), dataFrame(1, Buffer.alloc(300, 1))]));
    await sync();
    assert.equal(echoed(), 100, 'the 100-byte window, then the rest waits');
    raw.write(initialWindow(0)); // the stream window goes from 0 to -100
    raw.write(windowUpdate(150)); // -100 + 150: 50 more may go
    await sync();
    assert.equal(echoed(), 150);
    raw.write(initialWindow(1000)); // +1000: the remaining 150 go
    await sync();
    assert.equal(echoed(), 300);
  });
});

void describe('HTTP/2 connection: padding', () => {
  void it('padded HEADERS (with priority) and padded DATA: the body arrives without its padding, and the padding is granted back as window', async (t) => {
    const harness = await startServer(echo, { streamWindow: 1024 });
    t.after(() => harness.server.close());
    const raw = await rawH2Connect(harness.address);
    t.after(() => raw.close());
    const PADDED = 0x8;
    const PRIORITY = 0x20;
    const padded = (data: Buffer, padding: number): Buffer => Buffer.concat([Buffer.from([padding]), data, Buffer.alloc(padding)]);
    const block = headersFrame(1, POST_X).subarray(9);
    const priority = Buffer.from([0, 0, 0, 0, 16]);
    raw.write(
      frame(FRAME.HEADERS, FLAG.END_HEADERS | PADDED | PRIORITY, 1, Buffer.concat([Buffer.from([3]), priority, block, Buffer.alloc(3)])),
    );
    // Three frames of one byte each and 200 bytes of padding: 603 bytes of window used, past half of 1024.
    for (const byte of ['a', 'b', 'c']) raw.write(frame(FRAME.DATA, PADDED, 1, padded(Buffer.from(byte), 200)));
    await raw.until((received) => parseFrames(received).some((f) => f.type === 8 && f.streamId === 1));
    const grant = parseFrames(raw.received()).find((f) => f.type === 8 && f.streamId === 1)!;
    assert.equal(grant.payload.readUInt32BE(0), 3 * 202, 'the whole payloads, padding and pad length included');
    raw.write(frame(FRAME.DATA, PADDED | FLAG.END_STREAM, 1, padded(Buffer.from('d'), 10)));
    await raw.until((received) =>
      parseFrames(received).some((f) => f.streamId === 1 && f.type === FRAME.HEADERS && (f.flags & FLAG.END_STREAM) !== 0),
    );
    const body = Buffer.concat(
      parseFrames(raw.received())
        .filter((f) => f.type === FRAME.DATA && f.streamId === 1)
        .map((f) => f.payload),
    );
    assert.equal(body.toString(), 'abcd', 'the echo carries the data bytes only');
  });
});

void describe('HTTP/2 connection lifecycle', () => {
  void it('close(): GOAWAY, the open stream finishes, new streams are refused, then the connection ends', async (t) => {
    let held: Http2Stream | undefined;
    const harness = await startServer((stream, headers) => {
      held = stream;
      echo(stream, headers);
    });
    t.after(() => harness.server.close());
    const session = http2.connect(harness.url);
    const goaway = new Promise<number>((resolve) => session.once('goaway', (code: number) => resolve(code)));
    const sessionClosed = new Promise<void>((resolve) => session.once('close', () => resolve()));
    const stream = session.request({ ':method': 'POST', ':path': '/echo' });
    const chunks: Buffer[] = [];
    stream.on('data', (chunk: Buffer) => chunks.push(chunk));
    const ended = new Promise<void>((resolve) => stream.on('end', () => resolve()));
    stream.write('before ');
    await new Promise<void>((resolve) => stream.once('response', () => resolve()));
    assert.ok(held !== undefined);
    harness.observed.connections[0].close();
    assert.equal(await goaway, ErrorCode.NO_ERROR);
    stream.end('after');
    await ended;
    assert.equal(Buffer.concat(chunks).toString(), 'before after', 'the open stream completed after GOAWAY');
    await sessionClosed;
    assert.deepEqual(harness.observed.closes, [{ kind: 'done' }]);
  });

  void it('close() is two-step: GOAWAY(2^31-1) and a PING; a stream opened before the peer heard is served; then GOAWAY(last id) refuses later ones', async (t) => {
    // RFC 9113 §6.8: a single GOAWAY naming the last stream seen would refuse a stream the peer
    // opened at the same moment (for Envoy a failed ext_proc call during every rolling update).
    const harness = await startServer(echo);
    t.after(() => harness.server.close());
    const raw = await rawH2Connect(harness.address);
    t.after(() => raw.close());
    const request = (id: number): Buffer => Buffer.concat([headersFrame(id, POST_X), dataFrame(id, Buffer.from('hi'), true)]);
    // Stream 1 stays open (its request not ended) and keeps the connection up through the shutdown.
    raw.write(Buffer.concat([headersFrame(1, POST_X), dataFrame(1, Buffer.from('one'))]));
    await raw.until((received) => parseFrames(received).some((f) => f.streamId === 1 && f.type === FRAME.DATA));
    harness.observed.connections[0].close();
    await raw.until((received) => parseFrames(received).some((f) => f.type === 6 && (f.flags & 1) === 0));
    const notice = parseFrames(raw.received()).filter((f) => f.type === FRAME.GOAWAY);
    assert.equal(notice.length, 1);
    assert.equal(notice[0].payload.readUInt32BE(0), 2 ** 31 - 1, 'the first GOAWAY promises to serve every stream still in flight');
    assert.equal(notice[0].payload.readUInt32BE(4), ErrorCode.NO_ERROR);
    const shutdownPing = parseFrames(raw.received()).find((f) => f.type === 6 && (f.flags & 1) === 0)!;
    // The peer opened stream 3 before it read the GOAWAY: it is served.
    raw.write(request(3));
    await raw.until((received) => parseFrames(received).some((f) => f.streamId === 3 && (f.flags & FLAG.END_STREAM) !== 0));
    assert.equal(parseFrames(raw.received()).filter((f) => f.streamId === 3 && f.type === FRAME.RST_STREAM).length, 0);
    // The PING's ACK proves the peer has read the first GOAWAY: the final one names stream 3.
    raw.write(frame(6, 1, 0, shutdownPing.payload));
    await raw.until((received) => parseFrames(received).filter((f) => f.type === FRAME.GOAWAY).length === 2);
    const final = parseFrames(raw.received()).filter((f) => f.type === FRAME.GOAWAY)[1];
    assert.equal(final.payload.readUInt32BE(0), 3);
    // A stream opened after the final GOAWAY is refused (safe for the peer to retry elsewhere) and
    // never reaches the handler; the open stream 1 still completes.
    raw.write(request(5));
    await raw.until(() => framesOn(raw, 5).length > 0);
    assert.deepEqual(framesOn(raw, 5), [[FRAME.RST_STREAM, 0]], 'stream 5: a reset, no response');
    const refusal = parseFrames(raw.received()).find((f) => f.streamId === 5 && f.type === FRAME.RST_STREAM)!;
    assert.equal(refusal.payload.readUInt32BE(0), ErrorCode.REFUSED_STREAM);
    assert.deepEqual(harness.observed.ends.sort(), [3], 'only streams 1 and 3 were handled; 1 is still open');
    raw.write(dataFrame(1, Buffer.from(' done'), true));
    await raw.closed();
    const echoed = parseFrames(raw.received()).filter((f) => f.type === FRAME.DATA && f.streamId === 1);
    assert.equal(Buffer.concat(echoed.map((f) => f.payload)).toString(), 'one done', 'the stream open across the shutdown completed');
    assert.deepEqual(harness.observed.ends.sort(), [1, 3]);
  });

  void it('an END_STREAM and a RST_STREAM in one read: the reset wins, the end is never told', async (t) => {
    const harness = await startServer(() => undefined);
    t.after(() => harness.server.close());
    const raw = await rawH2Connect(harness.address);
    t.after(() => raw.close());
    raw.write(Buffer.concat([headersFrame(1, POST_X), dataFrame(1, Buffer.from('x'), true), rstStreamFrame(1)]));
    raw.write(PING);
    await raw.until(hasPingAck);
    assert.deepEqual(harness.observed.closes, [{ kind: 'reset', code: ErrorCode.CANCEL }]);
    assert.deepEqual(harness.observed.ends, []);
  });

  void it('a complete response before the request ended asks the peer to stop with RST_STREAM NO_ERROR', async (t) => {
    const harness = await startServer(answerOk);
    t.after(() => harness.server.close());
    const raw = await rawH2Connect(harness.address);
    t.after(() => raw.close());
    raw.write(headersFrame(1, POST_X));
    await raw.until((received) => parseFrames(received).some((f) => f.type === FRAME.RST_STREAM));
    assert.deepEqual(framesOn(raw, 1), [
      [FRAME.HEADERS, 0],
      [FRAME.HEADERS, FLAG.END_STREAM],
      [FRAME.RST_STREAM, 0],
    ]);
    const reset = parseFrames(raw.received()).find((f) => f.streamId === 1 && f.type === FRAME.RST_STREAM)!;
    assert.equal(reset.payload.readUInt32BE(0), ErrorCode.NO_ERROR);
    // Data the peer sent before it heard is dropped without error.
    raw.write(dataFrame(1, Buffer.from('late')));
    raw.write(PING);
    await raw.until(hasPingAck);
    assert.equal(parseFrames(raw.received()).filter((f) => f.type === FRAME.GOAWAY).length, 0);
  });
});

void describe('HTTP/2 connection: a unary call answered from its only DATA frame', () => {
  void it('a response completed while reading a DATA frame with END_STREAM sends no RST_STREAM: the request was whole', async (t) => {
    // A unary call (a health Check: kubelet's and grpc-go's probes) is answered from inside
    // onData; the END_STREAM on that same frame means the stream is closed both ways, so asking
    // the peer to stop sending (RST_STREAM NO_ERROR, RFC 9113 §8.1) would be a wasted frame.
    const harness = await startServer((stream) => {
      const handlers = stream.handlers;
      stream.handlers = {
        ...handlers,
        onData: () => answerOk(stream),
      };
    });
    t.after(() => harness.server.close());
    const raw = await rawH2Connect(harness.address);
    t.after(() => raw.close());
    raw.write(Buffer.concat([headersFrame(1, POST_X), dataFrame(1, Buffer.from('ping'), true)]));
    raw.write(PING);
    await raw.until(hasPingAck);
    assert.deepEqual(framesOn(raw, 1), [
      [FRAME.HEADERS, 0],
      [FRAME.HEADERS, FLAG.END_STREAM],
    ]);
    assert.deepEqual(harness.observed.closes, [{ kind: 'done' }]);
  });
});

void describe('HTTP/2 connection: a request whose HEADERS carry END_STREAM, answered at once', () => {
  void it('sends no RST_STREAM after the response: the request was whole', async (t) => {
    // An unknown method or a wrong content type is answered from onStream; a request without a
    // body has END_STREAM on its HEADERS, so the stream is then done both ways.
    const harness = await startServer((stream) =>
      stream.respond(
        encodeHeaderBlock([
          [':status', '200'],
          ['grpc-status', '12'],
        ]),
        true,
      ),
    );
    t.after(() => harness.server.close());
    const raw = await rawH2Connect(harness.address);
    t.after(() => raw.close());
    raw.write(
      headersFrame(
        1,
        [
          [':method', 'POST'],
          [':scheme', 'http'],
          [':path', '/nope'],
        ],
        true,
      ),
    );
    raw.write(PING);
    await raw.until(hasPingAck);
    assert.deepEqual(framesOn(raw, 1), [[FRAME.HEADERS, FLAG.END_STREAM]]);
    assert.deepEqual(harness.observed.closes, [{ kind: 'done' }]);
  });
});

void describe('HTTP/2 connection errors end the connection with GOAWAY and the right code', () => {
  const cases: ReadonlyArray<{ name: string; bytes: () => Buffer; code: number; preface?: boolean }> = [
    {
      name: 'an HTTP/1.1 request instead of the preface',
      bytes: () => Buffer.from('GET / HTTP/1.1\r\nHost: x\r\n\r\n'),
      code: ErrorCode.PROTOCOL_ERROR,
      preface: false,
    },
    { name: 'DATA on a stream never opened', bytes: () => dataFrame(5, Buffer.from('x')), code: ErrorCode.PROTOCOL_ERROR },
    { name: 'a frame above SETTINGS_MAX_FRAME_SIZE', bytes: () => dataFrame(1, Buffer.alloc(20_000)), code: ErrorCode.FRAME_SIZE_ERROR },
    { name: 'a client stream with an even id', bytes: () => headersFrame(2, [[':method', 'POST']]), code: ErrorCode.PROTOCOL_ERROR },
    {
      name: 'CONTINUATION without HEADERS',
      bytes: () => frame(9, FLAG.END_HEADERS, 1, Buffer.from([0x82])),
      code: ErrorCode.PROTOCOL_ERROR,
    },
    {
      name: 'an undecodable header block',
      bytes: () => frame(FRAME.HEADERS, FLAG.END_HEADERS, 1, Buffer.from([0x80])),
      code: ErrorCode.COMPRESSION_ERROR,
    },
    { name: 'a WINDOW_UPDATE of 0 on the connection', bytes: () => frame(8, 0, 0, Buffer.alloc(4)), code: ErrorCode.PROTOCOL_ERROR },
    { name: 'a PING of the wrong length', bytes: () => frame(6, 0, 0, Buffer.alloc(4)), code: ErrorCode.FRAME_SIZE_ERROR },
  ];
  for (const { name, bytes, code, preface = true } of cases) {
    void it(name, async (t) => {
      const harness = await startServer(echo);
      t.after(() => harness.server.close());
      const raw = preface ? await rawH2Connect(harness.address) : await rawConnect(harness.address);
      t.after(() => raw.close());
      raw.write(bytes());
      await raw.closed(ABUSE_BOUND_MS);
      const goaway = parseFrames(raw.received()).find((f) => f.type === FRAME.GOAWAY);
      assert.ok(goaway !== undefined, 'a GOAWAY before the close');
      assert.equal(goaway.payload.readUInt32BE(4), code);
    });
  }
});

/** A plain socket: nothing sent, not even the preface. */
async function rawConnect(address: string): Promise<RawH2Connection> {
  const socket = connect(Number(address.slice(address.lastIndexOf(':') + 1)), address.slice(0, address.lastIndexOf(':')));
  await new Promise<void>((resolve, reject) => socket.once('connect', resolve).once('error', reject));
  return rawConnection(socket);
}

/**
 * How long an abused connection may take to end: the guards act on the read that crosses their
 * limit, so this only absorbs a busy machine; a guard switched off fails here, with a message.
 */
const ABUSE_BOUND_MS = 5_000;

/** A PING's ACK: proof the server has read every frame sent before the PING. */
const PING = frame(6, 0, 0, Buffer.alloc(8));
function hasPingAck(received: Buffer): boolean {
  return parseFrames(received).some((f) => f.type === 6 && (f.flags & 1) === 1);
}

void describe('HTTP/2 connection under abuse (memory stays bounded)', () => {
  void it(
    'endless empty CONTINUATION frames end the connection with ENHANCE_YOUR_CALM instead of piling up',
    { timeout: 30_000 },
    async (t) => {
      const harness = await startServer(echo);
      t.after(() => harness.server.close());
      const raw = await rawH2Connect(harness.address);
      t.after(() => raw.close());
      // A HEADERS without END_HEADERS, then CONTINUATIONs that carry nothing: no byte limit is ever
      // reached, so only a limit on the frames themselves stops the header block growing.
      raw.write(frame(FRAME.HEADERS, 0, 1, Buffer.from([0x83])));
      const emptyContinuations = Buffer.concat(Array.from({ length: 4096 }, () => frame(CONTINUATION, 0, 1)));
      const closed = raw.closed().then(() => true);
      for (let batch = 0; batch < 64 && !(await Promise.race([closed, Promise.resolve(false)])); batch++) {
        raw.write(emptyContinuations);
        await new Promise<void>((resolve) => setImmediate(resolve));
      }
      await raw.closed(ABUSE_BOUND_MS);
      const goaway = parseFrames(raw.received()).find((f) => f.type === FRAME.GOAWAY);
      assert.ok(goaway !== undefined, 'a GOAWAY before the close');
      assert.equal(goaway.payload.readUInt32BE(4), ErrorCode.ENHANCE_YOUR_CALM);
    },
  );

  void it('a peer that sends PINGs but never reads the ACKs: the server stops reading it once its writes back up', async (t) => {
    const harness = await startServer(echo);
    t.after(() => harness.server.close());
    const address = harness.address;
    const client = connect(Number(address.slice(address.lastIndexOf(':') + 1)), '127.0.0.1');
    t.after(() => client.destroy());
    client.on('error', () => undefined);
    await new Promise<void>((resolve) => client.once('connect', () => resolve()));
    client.pause(); // never reads what the server sends
    client.write(Buffer.concat([Buffer.from('PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n'), frame(FRAME.SETTINGS, 0, 0)]));
    const pings = Buffer.concat(Array.from({ length: 8192 }, () => PING));
    const serverSocket = (): Socket | undefined => harness.observed.sockets[0];
    // Without a bound, every PING read is another ACK kept in the server's memory for a peer that
    // will never take it. Send until the server's writes back up (its kernel buffers are full).
    const deadline = Date.now() + ABUSE_BOUND_MS;
    while (serverSocket()?.writableNeedDrain !== true) {
      assert.ok(Date.now() < deadline, `the server's writes did not back up within ${ABUSE_BOUND_MS} ms of PINGs`);
      if (client.writableLength < 4 * 1024 * 1024) client.write(pings);
      await new Promise<void>((resolve) => setImmediate(resolve));
    }
    assert.equal(serverSocket()!.isPaused(), true, 'the server stopped reading the peer until its writes drain');
  });
});

const CONTINUATION = 9;

/** The request header fields of a POST to /x. */
const POST_X: ReadonlyArray<readonly [string, string]> = [
  [':method', 'POST'],
  [':scheme', 'http'],
  [':path', '/x'],
];

/** A complete response at once: headers, then trailers with grpc-status 0. */
function answerOk(stream: Http2Stream): void {
  stream.respond(encodeHeaderBlock([[':status', '200']]));
  stream.end(encodeHeaderBlock([['grpc-status', '0']]));
}

/** The type and END_STREAM flag of each frame the server sent on `streamId`. */
function framesOn(raw: RawH2Connection, streamId: number): Array<[number, number]> {
  return parseFrames(raw.received())
    .filter((f) => f.streamId === streamId)
    .map((f) => [f.type, f.flags & FLAG.END_STREAM]);
}

void describe('HTTP/2 connection turnaround (the time a message spends with us)', () => {
  void it('every reply written while a read is handled is told once, with a time; a reply written later is not', async (t) => {
    const told: Array<{ seconds: number; replies: number }> = [];
    // Echo at once, except for a chunk starting with "later", answered on the next turn of the loop.
    const deferredEcho: Behaviour = (stream) => {
      stream.respond(encodeHeaderBlock([[':status', '200']]));
      const previous = stream.handlers;
      stream.handlers = {
        ...previous,
        onData: (chunk) => {
          const copy = Buffer.from(chunk);
          if (copy.toString('latin1').startsWith('later')) setImmediate(() => stream.write(copy));
          else stream.write(copy);
        },
      };
    };
    const harness = await startServer(deferredEcho, { onReadAnswered: (seconds, replies) => told.push({ seconds, replies }) });
    t.after(() => harness.server.close());
    const raw = await rawH2Connect(harness.address);
    t.after(() => raw.close());
    const echoedChunks = (): number => parseFrames(raw.received()).filter((f) => f.type === FRAME.DATA && f.streamId === 1).length;
    raw.write(
      Buffer.concat([
        headersFrame(1, POST_X),
        dataFrame(1, Buffer.from('one')),
        dataFrame(1, Buffer.from('two')),
        dataFrame(1, Buffer.from('three')),
      ]),
    );
    await raw.until(() => echoedChunks() === 3);
    const total = (): number => told.reduce((sum, entry) => sum + entry.replies, 0);
    assert.equal(total(), 3, 'each of the three echoes counted once, however the reads fell');
    for (const entry of told) {
      assert.ok(entry.replies >= 1, 'a told write carries at least one reply');
      assert.ok(Number.isFinite(entry.seconds) && entry.seconds >= 0, `a time since the read: ${entry.seconds}`);
    }
    raw.write(dataFrame(1, Buffer.from('later')));
    await raw.until(() => echoedChunks() === 4);
    // A PING's ACK is written after the read it came in: by then the deferred echo has been told, or never will be.
    raw.write(PING);
    await raw.until(hasPingAck);
    assert.equal(total(), 3, 'the echo written after an await belongs to no read');
  });
});

void describe('HTTP/2 connection: one message written in pieces (a long body as a view)', () => {
  // Each chunk read is answered with one message in three pieces: 10 bytes, 20,000 bytes, 2 bytes.
  const piecesOf = (chunk: Buffer): Buffer[] => [Buffer.alloc(10, 0x68), Buffer.alloc(20_000, chunk[0]), Buffer.from([0x10, 1])];
  const answerInPieces: Behaviour = (stream) => {
    stream.respond(encodeHeaderBlock([[':status', '200']]));
    const previous = stream.handlers;
    stream.handlers = { ...previous, onData: (chunk) => stream.writeParts(piecesOf(Buffer.from(chunk))) };
  };
  const dataOn = (raw: RawH2Connection): Buffer[] =>
    parseFrames(raw.received())
      .filter((f) => f.type === FRAME.DATA && f.streamId === 1)
      .map((f) => f.payload);

  void it('goes out as the DATA frames one write of the joined bytes gives, and is told as one reply', async (t) => {
    const told: Array<{ seconds: number; replies: number }> = [];
    const harness = await startServer(answerInPieces, { onReadAnswered: (seconds, replies) => told.push({ seconds, replies }) });
    t.after(() => harness.server.close());
    const raw = await rawH2Connect(harness.address);
    t.after(() => raw.close());
    raw.write(Buffer.concat([headersFrame(1, POST_X), dataFrame(1, Buffer.from('a')), dataFrame(1, Buffer.from('b'))]));
    await raw.until(() => dataOn(raw).reduce((sum, p) => sum + p.length, 0) === 2 * 20_012);
    const payloads = dataOn(raw);
    // 20,012 bytes at the default 16,384-byte frame size: two frames per message, as one Buffer would give.
    assert.deepEqual(
      payloads.map((p) => p.length),
      [16_384, 3_628, 16_384, 3_628],
    );
    assert.deepEqual(Buffer.concat(payloads), Buffer.concat([...piecesOf(Buffer.from('a')), ...piecesOf(Buffer.from('b'))]));
    assert.equal(
      told.reduce((sum, entry) => sum + entry.replies, 0),
      2,
      'each message counted once',
    );
  });

  void it('short of window, waits and then sends the rest in order', async (t) => {
    const harness = await startServer(answerInPieces);
    t.after(() => harness.server.close());
    const raw = await rawH2Connect(harness.address);
    t.after(() => raw.close());
    const sent = (): number => dataOn(raw).reduce((sum, p) => sum + p.length, 0);
    const sync = (): Promise<void> => pingRoundTrip(raw);
    raw.write(Buffer.concat([initialWindow(5_000), headersFrame(1, POST_X), dataFrame(1, Buffer.from('c'))]));
    await sync();
    assert.equal(sent(), 5_000, 'what the window allows, then the rest waits');
    raw.write(initialWindow(65_535)); // the stream's window grows by 60,535: the rest may go
    await raw.until(() => sent() === 20_012);
    assert.deepEqual(Buffer.concat(dataOn(raw)), Buffer.concat(piecesOf(Buffer.from('c'))));
  });
});

void describe('HTTP/2 connection turnaround after a pause', () => {
  void it('reads handed over back to back (after the connection paused reading) are all told, in one write', async (t) => {
    const told: Array<{ seconds: number; replies: number }> = [];
    const harness = await startServer(echo, { onReadAnswered: (seconds, replies) => told.push({ seconds, replies }) });
    t.after(() => harness.server.close());
    const raw = await rawH2Connect(harness.address);
    t.after(() => raw.close());
    raw.write(headersFrame(1, POST_X));
    await raw.until(() => framesOn(raw, 1).length > 0); // answered: the stream is open
    const socket = harness.observed.sockets[0];
    socket.pause();
    const echoes = (): number => parseFrames(raw.received()).filter((f) => f.type === FRAME.DATA && f.streamId === 1).length;
    const total = (): number => told.reduce((sum, entry) => sum + entry.replies, 0);
    const before = total();
    for (let i = 0; i < 8; i++) {
      const buffered = socket.readableLength;
      raw.write(dataFrame(1, Buffer.from(`piece ${i}`)));
      await waitUntil(() => (socket.readableLength > buffered ? true : undefined), { description: 'the paused socket buffers the piece' });
    }
    socket.resume();
    await raw.until(() => echoes() === 8);
    assert.equal(total() - before, 8, 'every echo counted, however the reads came');
  });
});

/** Answers a stream only once its request has ended, as a full-duplex processor holds its first reply until the body is in. */
const answerAtEnd: Behaviour = (stream) => {
  const previous = stream.handlers;
  stream.handlers = { ...previous, onEnd: () => answerOk(stream) };
};

void describe('HTTP/2 connection limits on streams', () => {
  void it('advertises SETTINGS_MAX_CONCURRENT_STREAMS, refuses one stream over it with REFUSED_STREAM, and takes a new one once a slot frees', async (t) => {
    const harness = await startServer(echo, { maxConcurrentStreams: 3 });
    t.after(() => harness.server.close());
    const raw = await rawH2Connect(harness.address);
    t.after(() => raw.close());
    await raw.until((received) => parseFrames(received).some((f) => f.type === FRAME.SETTINGS));
    const settings = parseFrames(raw.received()).find((f) => f.type === FRAME.SETTINGS && (f.flags & 1) === 0)!;
    const advertised = new Map<number, number>();
    for (let at = 0; at + 6 <= settings.payload.length; at += 6)
      advertised.set(settings.payload.readUInt16BE(at), settings.payload.readUInt32BE(at + 2));
    assert.equal(advertised.get(0x3), 3, 'SETTINGS_MAX_CONCURRENT_STREAMS');
    // Streams 1, 3 and 5 stay open (answered, not ended); 7 is one too many.
    raw.write(Buffer.concat([1, 3, 5, 7].map((id) => headersFrame(id, POST_X))));
    await raw.until((received) => parseFrames(received).some((f) => f.type === FRAME.RST_STREAM && f.streamId === 7));
    const refusal = parseFrames(raw.received()).find((f) => f.type === FRAME.RST_STREAM && f.streamId === 7)!;
    assert.equal(refusal.payload.readUInt32BE(0), ErrorCode.REFUSED_STREAM, 'refused: safe for the client to retry');
    assert.deepEqual(
      parseFrames(raw.received())
        .filter((f) => f.type === FRAME.RST_STREAM)
        .map((f) => f.streamId),
      [7],
      'only the stream over the limit',
    );
    // Stream 1 ends, which frees a slot: stream 9 is served whole.
    raw.write(dataFrame(1, Buffer.from('a'), true));
    await raw.until(() => framesOn(raw, 1).some(([type, end]) => type === FRAME.HEADERS && end === FLAG.END_STREAM));
    raw.write(Buffer.concat([headersFrame(9, POST_X), dataFrame(9, Buffer.from('nine'), true)]));
    await raw.until(() => framesOn(raw, 9).some(([type, end]) => type === FRAME.HEADERS && end === FLAG.END_STREAM));
    const echoed = parseFrames(raw.received()).filter((f) => f.type === FRAME.DATA && f.streamId === 9);
    assert.equal(Buffer.concat(echoed.map((f) => f.payload)).toString(), 'nine');
  });

  for (const [what, framesFor] of [
    ['HEADERS then RST_STREAM', (id: number) => [headersFrame(id, POST_X), rstStreamFrame(id)]],
    [
      'HEADERS, one byte of DATA, then RST_STREAM',
      (id: number) => [headersFrame(id, POST_X), dataFrame(id, Buffer.from('x')), rstStreamFrame(id)],
    ],
    [
      'HEADERS, a whole request ended, then RST_STREAM before the answer',
      (id: number) => [headersFrame(id, POST_X), dataFrame(id, Buffer.alloc(64, 1), true), rstStreamFrame(id)],
    ],
  ] as const) {
    void it(`rapid reset (${what}): streams reset before our answer end the connection with ENHANCE_YOUR_CALM`, async (t) => {
      const harness = await startServer(answerAtEnd);
      t.after(() => harness.server.close());
      const raw = await rawH2Connect(harness.address);
      t.after(() => raw.close());
      // Five batches of 100 opened-and-reset streams (sendResetBatches).
      await sendResetBatches(
        raw,
        (id) => [...framesFor(id)],
        (streams) => assert.equal(harness.observed.connections[0]?.closed, false, `still open after ${streams} resets`),
      );
      await raw.closed(ABUSE_BOUND_MS);
      const goaway = parseFrames(raw.received()).find((f) => f.type === FRAME.GOAWAY);
      assert.ok(goaway !== undefined, 'a GOAWAY before the close');
      assert.equal(goaway.payload.readUInt32BE(4), ErrorCode.ENHANCE_YOUR_CALM);
      assert.match(goaway.payload.subarray(8).toString(), /rapid reset/);
    });
  }

  /** Sends `frames`, then proves with a PING that the server has read all of it. */
  const sendAndSync = async (raw: RawH2Connection, frames: Buffer[]): Promise<void> => {
    const acks = parseFrames(raw.received()).filter((f) => f.type === 6 && (f.flags & 1) === 1).length;
    raw.write(Buffer.concat([...frames, PING]));
    await raw.until((received) => parseFrames(received).filter((f) => f.type === 6 && (f.flags & 1) === 1).length > acks);
  };
  /** Opens `count` streams from `firstId` on, each sent as `framesFor(id)`, in synced batches of 100; returns the next id. */
  const sendStreams = async (
    raw: RawH2Connection,
    firstId: number,
    count: number,
    framesFor: (id: number) => Buffer[],
  ): Promise<number> => {
    let id = firstId;
    for (let sent = 0; sent < count; sent += 100) {
      const frames: Buffer[] = [];
      for (let i = 0; i < Math.min(100, count - sent); i++, id += 2) frames.push(...framesFor(id));
      await sendAndSync(raw, frames);
    }
    return id;
  };
  const servedStill = async (raw: RawH2Connection, id: number): Promise<void> => {
    raw.write(Buffer.concat([headersFrame(id, POST_X), dataFrame(id, Buffer.from('still here'), true)]));
    await raw.until(() => framesOn(raw, id).some(([type, end]) => type === FRAME.HEADERS && end === FLAG.END_STREAM));
    assert.equal(
      parseFrames(raw.received()).some((f) => f.type === FRAME.GOAWAY),
      false,
      'no GOAWAY',
    );
  };

  void it("Envoy's cancellations never count: 2,000 streams ended as Envoy ends them, after our answer to their last message", async (t) => {
    for (const [what, framesFor] of [
      // Envoy's close() without graceful close: END_STREAM, then RST_STREAM CANCEL, in one write.
      ['a message answered, then END_STREAM and RST_STREAM', (id: number) => [dataFrame(id, Buffer.alloc(0), true), rstStreamFrame(id)]],
      // A client that hangs up mid-response: the last message was answered, then RST_STREAM.
      ['a message answered, then RST_STREAM', (id: number) => [rstStreamFrame(id)]],
    ] as const) {
      const harness = await startServer(echo);
      t.after(() => harness.server.close());
      const raw = await rawH2Connect(harness.address);
      t.after(() => raw.close());
      let id = 1;
      for (let sent = 0; sent < 2000; sent += 100) {
        const first = id;
        const opened: Buffer[] = [];
        for (let i = 0; i < 100; i++, id += 2) opened.push(headersFrame(id, POST_X), dataFrame(id, Buffer.from('part')));
        await sendAndSync(raw, opened); // echo answers each message at once
        const ended: Buffer[] = [];
        for (let closing = first; closing < id; closing += 2) ended.push(...framesFor(closing));
        await sendAndSync(raw, ended);
      }
      await t.test(what, () => servedStill(raw, id));
    }
  });

  void it('rapid resets under half of the streams opened do not end the connection: 500 among 1,100', async (t) => {
    const harness = await startServer(answerAtEnd);
    t.after(() => harness.server.close());
    const raw = await rawH2Connect(harness.address);
    t.after(() => raw.close());
    const afterWhole = await sendStreams(raw, 1, 600, (id) => [headersFrame(id, POST_X), dataFrame(id, Buffer.from('whole'), true)]);
    const next = await sendStreams(raw, afterWhole, 500, (id) => [headersFrame(id, POST_X), rstStreamFrame(id)]);
    await servedStill(raw, next);
  });
});

void describe('HTTP/2 connection and malformed requests', () => {
  void it('a malformed request or trailer block resets only its stream with PROTOCOL_ERROR; the connection serves on', async (t) => {
    const harness = await startServer(echo);
    t.after(() => harness.server.close());
    const raw = await rawH2Connect(harness.address);
    t.after(() => raw.close());
    const resetCode = (id: number): number | undefined =>
      parseFrames(raw.received())
        .find((f) => f.type === FRAME.RST_STREAM && f.streamId === id)
        ?.payload.readUInt32BE(0);
    // An upper-case name; a connection-specific field; a pseudo-header in trailers.
    raw.write(headersFrame(1, [...POST_X, ['X-Upper', '1']]));
    raw.write(headersFrame(3, [...POST_X, ['connection', 'close']]));
    raw.write(Buffer.concat([headersFrame(5, POST_X), headersFrame(5, [[':path', '/again']], true)]));
    await raw.until(() => [1, 3, 5].every((id) => resetCode(id) !== undefined));
    assert.deepEqual([1, 3, 5].map(resetCode), [ErrorCode.PROTOCOL_ERROR, ErrorCode.PROTOCOL_ERROR, ErrorCode.PROTOCOL_ERROR]);
    assert.equal(harness.observed.ends.includes(5), false, 'malformed trailers do not end the request as if it were whole');
    raw.write(Buffer.concat([headersFrame(7, POST_X), dataFrame(7, Buffer.from('fine'), true)]));
    await raw.until(() => framesOn(raw, 7).some(([type, end]) => type === FRAME.HEADERS && end === FLAG.END_STREAM));
    const echoed = parseFrames(raw.received()).filter((f) => f.type === FRAME.DATA && f.streamId === 7);
    assert.equal(Buffer.concat(echoed.map((f) => f.payload)).toString(), 'fine');
  });
});
