// The gRPC edge against a real grpc-js client built from the same wire definitions, over TCP and
// over a unix socket, plus encode/decode round trips that pin the JS shapes of the messages.
import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import http2 from 'node:http2';
import { connect } from 'node:net';
import { existsSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Client, credentials, status as GrpcStatus } from '@grpc/grpc-js';
import type { ClientDuplexStream, ClientReadableStream, ServiceError, StatusObject } from '@grpc/grpc-js';
import type { MessageTypeDefinition } from '@grpc/proto-loader';
import { pino } from 'pino';
import type { Logger } from 'pino';
import type { ProcessingRequest, ProcessingResponse } from '../../../src/extproc/messages.js';
import type { ProcessorFactory, StreamEnd, StreamProcessor } from '../../../src/extproc/stream-processor.js';
import { startExtProcServer } from '../../../src/extproc/server.js';
import type { HealthSource, RunningGrpcServer } from '../../../src/grpc/server.js';
import type { GrpcTransport } from '../../../src/config/config.js';
import { GRPC_TRANSPORTS } from '../../../src/config/schema.js';
import {
  dataFrame,
  FLAG,
  frame,
  FRAME,
  grpcRequestHeaders,
  headersFrame,
  parseFrames,
  rawH2Connect,
  rstStreamFrame,
} from '../../support/h2-frames.js';
import { frameMessage } from '../../../src/grpc/framing.js';
import { waitUntil } from '../../support/wait-until.js';
import { EXT_PROC_SERVICE_NAME, loadWireDefinitions } from '../../support/proto-definitions.js';
import type { HealthCheckRequest, HealthCheckResponse } from '../../support/proto-definitions.js';

const wire = loadWireDefinitions();
const processMethod = wire.externalProcessor.Process;
const checkMethod = wire.health.Check;
const watchMethod = wire.health.Watch;

// ---------------------------------------------------------------------------------------------
// helpers

interface Deferred<T> {
  promise: Promise<T>;
  resolve(value: T): void;
}

function deferred<T>(): Deferred<T> {
  let resolve!: (value: T) => void;
  const promise = new Promise<T>((r) => {
    resolve = r;
  });
  return { promise, resolve };
}

/** What one StreamProcessor saw, in order: 'process' / 'finish:<kind>' entries plus the data. */
interface RecordedStream {
  log: string[];
  requests: ProcessingRequest[];
  ends: StreamEnd[];
  finished: Promise<StreamEnd>;
}

type ReplyFn = (request: ProcessingRequest, index: number) => ProcessingResponse[];

function recordingFactory(reply: ReplyFn): { factory: ProcessorFactory; streams: RecordedStream[]; firstStream: Promise<RecordedStream> } {
  const streams: RecordedStream[] = [];
  const first = deferred<RecordedStream>();
  const factory: ProcessorFactory = () => {
    const done = deferred<StreamEnd>();
    const stream: RecordedStream = { log: [], requests: [], ends: [], finished: done.promise };
    streams.push(stream);
    if (streams.length === 1) first.resolve(stream);
    const processor: StreamProcessor = {
      process(request) {
        stream.log.push('process');
        stream.requests.push(request);
        return reply(request, stream.requests.length - 1);
      },
      finish(end) {
        stream.log.push(`finish:${end.kind}`);
        stream.ends.push(end);
        done.resolve(end);
      },
    };
    return processor;
  };
  return { factory, streams, firstStream: first.promise };
}

/** Echo-style replies: each request body comes back prefixed, so order is visible end to end. */
const echoReply: ReplyFn = (request, index) => {
  if (request.request_headers !== undefined) {
    return [{ request_headers: { response: { header_mutation: { set_headers: [setHeader('x-seq', String(index))] } } } }];
  }
  const body = request.request_body?.body ?? Buffer.alloc(0);
  return [
    { request_body: { response: { status: 'CONTINUE', body_mutation: { body: Buffer.concat([Buffer.from(`reply-${index}:`), body]) } } } },
  ];
};

function setHeader(key: string, value: string): { header: { key: string; raw_value: Buffer }; append: { value: boolean } } {
  return { header: { key, raw_value: Buffer.from(value) }, append: { value: false } };
}

function headersMessage(path: string): ProcessingRequest {
  return { request_headers: { headers: { headers: [{ key: ':path', raw_value: Buffer.from(path) }] } } };
}

function bodyMessage(text: string, endOfStream: boolean): ProcessingRequest {
  return { request_body: { body: Buffer.from(text), end_of_stream: endOfStream } };
}

class FlippableHealth implements HealthSource {
  private serving = false;
  private readonly listeners = new Set<() => void>();
  readonly unsubscribed = deferred<void>();

  set(serving: boolean): void {
    this.serving = serving;
    for (const listener of [...this.listeners]) listener();
  }

  isServing(): boolean {
    return this.serving;
  }

  onChange(listener: () => void): () => void {
    this.listeners.add(listener);
    return () => {
      this.listeners.delete(listener);
      this.unsubscribed.resolve();
    };
  }

  get listenerCount(): number {
    return this.listeners.size;
  }
}

function captureLogger(): { logger: Logger; lines: () => Array<Record<string, unknown>> } {
  const raw: string[] = [];
  const logger = pino({ level: 'debug' }, { write: (line: string) => void raw.push(line) });
  return { logger, lines: () => raw.map((line) => JSON.parse(line) as Record<string, unknown>) };
}

const silentLogger = pino({ level: 'silent' });

type Transport = 'tcp' | 'unix';

interface Harness {
  server: RunningGrpcServer;
  client: Client;
  close(): Promise<void>;
}

async function startHarness(
  impl: GrpcTransport,
  transport: Transport,
  opts: { factory?: ProcessorFactory; health?: HealthSource; logger?: Logger; onStreamError?: (err: Error) => void } = {},
): Promise<Harness> {
  const dir = transport === 'unix' ? mkdtempSync(join(tmpdir(), 'llm-extproc-grpc-')) : undefined;
  const server = await startExtProcServer({
    transport: impl,
    address: dir !== undefined ? `unix://${join(dir, 'ext-proc.sock')}` : '127.0.0.1:0',
    processorFactory: opts.factory ?? recordingFactory(echoReply).factory,
    health: opts.health ?? new FlippableHealth(),
    logger: opts.logger ?? silentLogger,
    ...(opts.onStreamError !== undefined ? { onStreamError: opts.onStreamError } : {}),
  });
  const client = new Client(server.address, credentials.createInsecure());
  return {
    server,
    client,
    async close() {
      client.close();
      await server.shutdown(1_000);
      if (dir !== undefined) rmSync(dir, { recursive: true, force: true });
    },
  };
}

interface OpenStream {
  call: ClientDuplexStream<ProcessingRequest, ProcessingResponse>;
  replies: ProcessingResponse[];
  status: Promise<StatusObject>;
  /** Resolves once at least `count` replies have arrived. */
  replyCount(count: number): Promise<void>;
}

function openProcessStream(client: Client): OpenStream {
  const call = client.makeBidiStreamRequest(processMethod.path, processMethod.requestSerialize, processMethod.responseDeserialize);
  const replies: ProcessingResponse[] = [];
  const waiters: Array<{ count: number; done: () => void }> = [];
  const status = deferred<StatusObject>();
  call.on('data', (reply: ProcessingResponse) => {
    replies.push(reply);
    for (const waiter of waiters) if (replies.length >= waiter.count) waiter.done();
  });
  call.on('status', (s: StatusObject) => status.resolve(s));
  call.on('error', () => {}); // the final status arrives through 'status'
  return {
    call,
    replies,
    status: status.promise,
    replyCount: (count) =>
      new Promise<void>((resolve) => {
        if (replies.length >= count) resolve();
        else waiters.push({ count, done: resolve });
      }),
  };
}

/** A request through plain node:http2, for bytes no gRPC client sends; resolves with the response headers merged with the trailers. */
function http2Call(address: string, method: string, path: string, body: Buffer): Promise<http2.IncomingHttpHeaders> {
  const session = address.startsWith('unix://')
    ? http2.connect('http://localhost', { createConnection: () => connect(address.slice('unix://'.length)) })
    : http2.connect(`http://${address}`);
  return new Promise<http2.IncomingHttpHeaders>((resolve, reject) => {
    let headers: http2.IncomingHttpHeaders = {};
    session.on('error', reject);
    const request = session.request(
      { ':method': method, ':path': path, 'content-type': 'application/grpc', te: 'trailers' },
      { endStream: body.length === 0 },
    );
    request.on('response', (h) => (headers = h));
    request.on('trailers', (trailers: http2.IncomingHttpHeaders) => (headers = { ...headers, ...trailers }));
    request.on('close', () => resolve(headers));
    request.on('error', reject);
    request.resume();
    if (body.length > 0) request.end(body);
  }).finally(() => session.close());
}

function check(client: Client, service: string): Promise<HealthCheckResponse> {
  return new Promise((resolve, reject) => {
    client.makeUnaryRequest(
      checkMethod.path,
      checkMethod.requestSerialize,
      checkMethod.responseDeserialize,
      { service },
      (err: ServiceError | null, value?: HealthCheckResponse) => {
        if (err) reject(err);
        else resolve(value ?? {});
      },
    );
  });
}

function watch(client: Client, service: string): { call: ClientReadableStream<HealthCheckResponse>; next(): Promise<HealthCheckResponse> } {
  const request: HealthCheckRequest = { service };
  const call = client.makeServerStreamRequest(watchMethod.path, watchMethod.requestSerialize, watchMethod.responseDeserialize, request);
  const queue: HealthCheckResponse[] = [];
  const waiting: Array<(value: HealthCheckResponse) => void> = [];
  call.on('data', (message: HealthCheckResponse) => {
    const waiter = waiting.shift();
    if (waiter) waiter(message);
    else queue.push(message);
  });
  call.on('error', () => {}); // cancelling our own call ends it with CANCELLED
  return {
    call,
    next: () => {
      const queued = queue.shift();
      return queued !== undefined ? Promise.resolve(queued) : new Promise((resolve) => waiting.push(resolve));
    },
  };
}

function isMessageType(def: unknown): def is MessageTypeDefinition<object, object> {
  return typeof def === 'object' && def !== null && 'format' in def && def.format === 'Protocol Buffer 3 DescriptorProto';
}

function messageType(name: string): MessageTypeDefinition<object, object> {
  const def = wire.packageDefinition[name];
  assert.ok(isMessageType(def), `${name} is a message type`);
  return def;
}

for (const impl of GRPC_TRANSPORTS) {
  // Every behaviour below must hold for both implementations.
  // ---------------------------------------------------------------------------------------------
  // Process stream, over TCP and a Unix socket

  for (const transport of ['tcp', 'unix'] as const) {
    void describe(`${impl}: ext_proc Process stream over ${transport}`, () => {
      void it('forwards messages in order, writes every reply in order, and finishes half-closed', async (t) => {
        // Two replies for the last message prove the edge writes everything process() returns, in order.
        const recording = recordingFactory((request, index) => {
          const replies = echoReply(request, index);
          return request.request_body?.end_of_stream === true ? [...replies, ...echoReply(request, index + 100)] : replies;
        });
        const harness = await startHarness(impl, transport, { factory: recording.factory });
        t.after(() => harness.close());
        const stream = openProcessStream(harness.client);
        stream.call.write(headersMessage('/v1/chat/completions'));
        stream.call.write(bodyMessage('{"model":', false));
        stream.call.write(bodyMessage('"m"}', true));
        stream.call.end(); // what Envoy does once the HTTP stream is done
        const status = await stream.status;
        const processed = await recording.firstStream;

        assert.equal(status.code, GrpcStatus.OK);
        assert.deepEqual(
          processed.requests.map((r) => r.request),
          ['request_headers', 'request_body', 'request_body'],
        );
        assert.deepEqual(processed.requests[0]?.request_headers?.headers?.headers?.[0]?.raw_value, Buffer.from('/v1/chat/completions'));
        assert.deepEqual(
          processed.requests.slice(1).map((r) => r.request_body?.body?.toString()),
          ['{"model":', '"m"}'],
        );
        assert.deepEqual(
          stream.replies.map((r) => r.request_body?.response?.body_mutation?.body?.toString() ?? r.response),
          ['request_headers', 'reply-1:{"model":', 'reply-2:"m"}', 'reply-102:"m"}'],
        );
        assert.deepEqual(
          stream.replies[0]?.request_headers?.response?.header_mutation?.set_headers?.[0]?.header.raw_value,
          Buffer.from('0'),
        );
        assert.deepEqual(processed.log, ['process', 'process', 'process', 'finish:half-closed']);
      });

      // Envoy resets a side stream with RST_STREAM alone, or (without the graceful close) with
      // END_STREAM and RST_STREAM in one write; in full-duplex mode, when the client left, with
      // INTERNAL_ERROR. A raw client sends exactly that. None is a warning: the request's own
      // outcome line says why it ended.
      const resets = [
        { how: 'RST_STREAM alone', frames: (): Buffer => rstStreamFrame(1), end: 'cancelled' },
        {
          how: 'END_STREAM and RST_STREAM in one write',
          frames: (late: Buffer): Buffer => Buffer.concat([dataFrame(1, late, true), rstStreamFrame(1)]),
          end: 'cancelled',
        },
        // grpc-js reports every reset by the peer as a cancellation.
        {
          how: 'RST_STREAM INTERNAL_ERROR',
          frames: (): Buffer => rstStreamFrame(1, http2.constants.NGHTTP2_INTERNAL_ERROR),
          end: impl === 'native' ? 'error' : 'cancelled',
        },
      ] as const;
      for (const { how, frames, end: expectedEnd } of resets) {
        void it(`a reset (${how}) finishes the processor as ${expectedEnd}, once, nothing is processed after it, and nothing is logged at warn`, async () => {
          const recording = recordingFactory(echoReply);
          const captured = captureLogger();
          const harness = await startHarness(impl, transport, { factory: recording.factory, logger: captured.logger });
          const connection = await rawH2Connect(harness.server.address);
          try {
            const processMessage = (request: ProcessingRequest): Buffer => frameMessage(processMethod.requestSerialize(request));
            connection.write(
              Buffer.concat([
                headersFrame(1, grpcRequestHeaders(processMethod.path)),
                dataFrame(1, processMessage(headersMessage('/v1/completions'))),
              ]),
            );
            const processed = await recording.firstStream;
            await waitUntil(() => (processed.requests.length === 1 ? true : undefined), { description: 'the first message processed' });
            const late = processMessage(bodyMessage('late', true));
            connection.write(frames(late));
            const end = await processed.finished;
            // Shutting down waits for the server side of every stream, so the log below is final.
            await harness.server.shutdown(1_000);

            assert.equal(end.kind, expectedEnd);
            assert.equal(processed.ends.length, 1);
            assert.equal(processed.log.at(-1), `finish:${expectedEnd}`);
            assert.ok(processed.requests.length >= 1 && processed.requests.length <= 2);
            assert.deepEqual(
              captured.lines().filter((line) => Number(line.level) >= 40),
              [],
            );
          } finally {
            connection.close();
            await harness.close();
          }
        });
      }

      void it('a slow reader holds back the replies without losing or reordering any', async (t) => {
        // 24 replies of 512 KiB are far more than the HTTP/2 windows and socket buffers hold while the client does not read.
        const big = Buffer.alloc(512 * 1024, 'x');
        const recording = recordingFactory((request, index) =>
          request.request_headers !== undefined
            ? echoReply(request, index)
            : [{ request_body: { response: { body_mutation: { body: Buffer.concat([Buffer.from(`${index}:`), big]) } } } }],
        );
        const harness = await startHarness(impl, transport, { factory: recording.factory });
        t.after(() => harness.close());
        const stream = openProcessStream(harness.client);
        stream.call.pause();
        stream.call.write(headersMessage('/v1/chat/completions'));
        for (let i = 0; i < 24; i++) stream.call.write(bodyMessage(`chunk ${i}`, i === 23));
        const processed = await recording.firstStream;
        await waitUntil(() => (processed.requests.length >= 1 ? true : undefined), { description: 'processing to start' });
        stream.call.resume();
        await stream.replyCount(25);
        stream.call.end();
        assert.equal((await stream.status).code, GrpcStatus.OK);
        const bodies = stream.replies.slice(1).map((r) => r.request_body?.response?.body_mutation?.body ?? Buffer.alloc(0));
        assert.deepEqual(
          bodies.map((b) => b.subarray(0, b.indexOf(':') + 1).toString()),
          Array.from({ length: 24 }, (_, i) => `${i + 1}:`),
        );
        assert.ok(bodies.every((b, i) => b.length === big.length + `${i + 1}:`.length));
        assert.equal(processed.log.at(-1), 'finish:half-closed');
      });

      void it('a message above the size limit ends the stream with RESOURCE_EXHAUSTED before any of it is processed', async (t) => {
        const recording = recordingFactory(echoReply);
        const streamErrors: Error[] = [];
        const harness = await startHarness(impl, transport, { factory: recording.factory, onStreamError: (err) => streamErrors.push(err) });
        t.after(() => harness.close());
        // Only the prefix of a 200 MiB message: the limit is checked before any of it is held.
        const prefix = Buffer.alloc(5);
        prefix.writeUInt32BE(200 * 1024 * 1024, 1);
        const response = await http2Call(harness.server.address, 'POST', processMethod.path, prefix);
        assert.equal(response['grpc-status'], String(GrpcStatus.RESOURCE_EXHAUSTED));
        const processed = await recording.firstStream;
        assert.equal(processed.ends.length, 1);
        assert.equal(processed.requests.length, 0);
      });

      void it('a compressed message (no compression was negotiated) ends the stream with an error status, unprocessed', async () => {
        const recording = recordingFactory(echoReply);
        const harness = await startHarness(impl, transport, { factory: recording.factory });
        try {
          const framed = frameMessage(processMethod.requestSerialize(headersMessage('/v1/models')));
          framed[0] = 1; // compressed flag
          const response = await http2Call(harness.server.address, 'POST', processMethod.path, framed);
          assert.ok(
            [String(GrpcStatus.INTERNAL), String(GrpcStatus.UNIMPLEMENTED)].includes(String(response['grpc-status'])),
            `grpc-status ${String(response['grpc-status'])}`,
          );
          const processed = await recording.firstStream;
          assert.equal(processed.ends.length, 1);
          assert.equal(processed.requests.length, 0);
        } finally {
          await harness.close();
        }
      });

      void it('a throwing processor ends the stream with INTERNAL, finishes it with the error, and logs it', async () => {
        const boom = new Error('picker exploded at 10.0.0.7');
        const recording = recordingFactory((request, index) => {
          if (index === 1) throw boom;
          return echoReply(request, index);
        });
        const captured = captureLogger();
        const streamErrors: Error[] = [];
        const harness = await startHarness(impl, transport, {
          factory: recording.factory,
          logger: captured.logger,
          onStreamError: (err) => streamErrors.push(err),
        });
        try {
          const stream = openProcessStream(harness.client);
          stream.call.write(headersMessage('/v1/chat/completions'));
          await stream.replyCount(1);
          stream.call.write(bodyMessage('{}', true));
          const status = await stream.status;
          const end = await (await recording.firstStream).finished;

          assert.equal(status.code, GrpcStatus.INTERNAL);
          assert.ok(!status.details.includes('10.0.0.7'), 'the cause stays in our logs, not in the gRPC status');
          assert.deepEqual(end, { kind: 'error', error: boom, code: 'INTERNAL' });
          assert.deepEqual(streamErrors, [boom]);
          assert.equal(stream.replies.length, 1);
          const errorLines = captured.lines().filter((line) => line.level === 50);
          assert.equal(errorLines.length, 1);
          assert.match(JSON.stringify(errorLines[0]), /picker exploded/);
        } finally {
          await harness.close();
        }
      });

      void it('a reply that cannot be encoded ends the stream with INTERNAL and finishes it once; the server keeps serving', async (t) => {
        // A processor bug (a reply the protobuf encoder rejects) must cost one request, not the process.
        const unencodable = { request_headers: 'not a message' } as unknown as ProcessingResponse;
        const recording = recordingFactory((request, index) => (index === 1 ? [unencodable] : echoReply(request, index)));
        const streamErrors: Error[] = [];
        const harness = await startHarness(impl, transport, { factory: recording.factory, onStreamError: (err) => streamErrors.push(err) });
        t.after(() => harness.close());
        const stream = openProcessStream(harness.client);
        stream.call.write(headersMessage('/v1/chat/completions'));
        await stream.replyCount(1);
        stream.call.write(bodyMessage('{}', true));
        const status = await stream.status;
        const processed = await recording.firstStream;
        await processed.finished;

        assert.equal(status.code, GrpcStatus.INTERNAL);
        assert.equal(processed.ends.length, 1);
        assert.equal(stream.replies.length, 1);
        // The next request is served as usual.
        const next = openProcessStream(harness.client);
        next.call.write(headersMessage('/v1/models'));
        next.call.end();
        assert.equal((await next.status).code, GrpcStatus.OK);
        assert.equal(next.replies.length, 1);
      });
    });
  }

  // ---------------------------------------------------------------------------------------------
  // health

  void describe(`${impl}: grpc.health.v1.Health`, () => {
    void it('Check follows the health source for "" and for the ext_proc service', async (t) => {
      const health = new FlippableHealth();
      const harness = await startHarness(impl, 'tcp', { health });
      t.after(() => harness.close());
      assert.deepEqual(await check(harness.client, ''), { status: 'NOT_SERVING' });
      assert.deepEqual(await check(harness.client, EXT_PROC_SERVICE_NAME), { status: 'NOT_SERVING' });
      health.set(true);
      assert.deepEqual(await check(harness.client, ''), { status: 'SERVING' });
      assert.deepEqual(await check(harness.client, EXT_PROC_SERVICE_NAME), { status: 'SERVING' });
    });

    void it('answers "liveness" SERVING while not ready, "readiness" like "", and liveness turns NOT_SERVING at shutdown', async (t) => {
      const health = new FlippableHealth();
      const harness = await startHarness(impl, 'tcp', { health });
      t.after(() => harness.close());
      assert.deepEqual(await check(harness.client, 'liveness'), { status: 'SERVING' });
      assert.deepEqual(await check(harness.client, 'readiness'), { status: 'NOT_SERVING' });
      health.set(true);
      assert.deepEqual(await check(harness.client, 'readiness'), { status: 'SERVING' });
      const live = watch(harness.client, 'liveness');
      assert.deepEqual(await live.next(), { status: 'SERVING' });
      const ready = watch(harness.client, 'readiness');
      assert.deepEqual(await ready.next(), { status: 'SERVING' });
      health.set(false);
      assert.deepEqual(await ready.next(), { status: 'NOT_SERVING' });
      await harness.server.shutdown(1_000);
      assert.deepEqual(await live.next(), { status: 'NOT_SERVING' });
    });

    void it('Check answers NOT_FOUND for any other service name', async (t) => {
      const harness = await startHarness(impl, 'unix');
      t.after(() => harness.close());
      await assert.rejects(check(harness.client, 'some.other.Service'), (err: ServiceError) => err.code === GrpcStatus.NOT_FOUND);
    });

    void it('Watch sends the current status, then each change, and unsubscribes when the client cancels', async (t) => {
      const health = new FlippableHealth();
      const harness = await startHarness(impl, 'tcp', { health });
      t.after(() => harness.close());
      const watcher = watch(harness.client, EXT_PROC_SERVICE_NAME);
      assert.deepEqual(await watcher.next(), { status: 'NOT_SERVING' });
      assert.equal(health.listenerCount, 1);
      health.set(true);
      assert.deepEqual(await watcher.next(), { status: 'SERVING' });
      health.set(true); // no change: nothing is sent
      health.set(false);
      assert.deepEqual(await watcher.next(), { status: 'NOT_SERVING' });
      watcher.call.cancel();
      await health.unsubscribed.promise;
      assert.equal(health.listenerCount, 0);
    });

    void it('Watch on an unknown service reports SERVICE_UNKNOWN and keeps the call open', async (t) => {
      const health = new FlippableHealth();
      const harness = await startHarness(impl, 'tcp', { health });
      t.after(() => harness.close());
      const watcher = watch(harness.client, 'some.other.Service');
      assert.deepEqual(await watcher.next(), { status: 'SERVICE_UNKNOWN' });
      assert.equal(health.listenerCount, 0);
      const ended = new Promise<StatusObject>((resolve) => watcher.call.on('status', resolve));
      // Server shutdown is what ends it (cleanly), not the unknown name.
      await harness.server.shutdown(1_000);
      assert.equal((await ended).code, GrpcStatus.OK);
    });
  });

  // ---------------------------------------------------------------------------------------------
  // lifecycle

  void describe(`${impl}: gRPC server lifecycle`, () => {
    void it('shutdown releases streams still open after the grace period with status OK, so Envoy finishes them', async (t) => {
      const recording = recordingFactory(echoReply);
      const harness = await startHarness(impl, 'tcp', { factory: recording.factory });
      t.after(() => harness.close());
      const stream = openProcessStream(harness.client);
      stream.call.write(headersMessage('/v1/models'));
      await stream.replyCount(1);
      await harness.server.shutdown(50); // the stream never half-closes
      const end = await (await recording.firstStream).finished;
      assert.equal(end.kind, 'released');
      assert.equal((await stream.status).code, GrpcStatus.OK);
    });

    void it('after the final GOAWAY a new stream is refused and never processed; the stream open across the shutdown completes', async (t) => {
      const recording = recordingFactory(echoReply);
      const harness = await startHarness(impl, 'tcp', { factory: recording.factory });
      t.after(() => harness.close());
      const raw = await rawH2Connect(harness.server.address);
      t.after(() => raw.close());
      const processMessage = (request: ProcessingRequest): Buffer => frameMessage(processMethod.requestSerialize(request));
      const sent = (type: number): Array<{ flags: number; streamId: number; payload: Buffer }> =>
        parseFrames(raw.received()).filter((f) => f.type === type);
      raw.write(
        Buffer.concat([
          headersFrame(1, grpcRequestHeaders(processMethod.path)),
          dataFrame(1, processMessage(headersMessage('/v1/models'))),
        ]),
      );
      const first = await recording.firstStream;
      await waitUntil(() => (first.requests.length === 1 ? true : undefined), { description: 'the first message processed' });
      const stopped = harness.server.shutdown(30_000);
      // Act as a peer that has read each GOAWAY: acknowledge every PING (our HTTP/2's two-step
      // close waits for that ACK before its final GOAWAY) until one names stream 1 as the last.
      const acked = new Set<string>();
      await raw.until(() => {
        for (const ping of sent(FRAME.PING).filter((f) => (f.flags & FLAG.ACK) === 0)) {
          const key = ping.payload.toString('hex');
          if (acked.has(key)) continue;
          acked.add(key);
          raw.write(frame(FRAME.PING, FLAG.ACK, 0, ping.payload));
        }
        return sent(FRAME.GOAWAY).some((g) => g.payload.readUInt32BE(0) === 1);
      });
      const pingAcks = (): number => sent(FRAME.PING).filter((f) => (f.flags & FLAG.ACK) !== 0).length;
      const acksBefore = pingAcks();
      raw.write(
        Buffer.concat([
          headersFrame(3, grpcRequestHeaders(processMethod.path)),
          dataFrame(3, processMessage(headersMessage('/v1/late'))),
          frame(FRAME.PING, 0, 0, Buffer.alloc(8, 3)),
        ]),
      );
      await raw.until(() => pingAcks() > acksBefore); // the server has read stream 3
      const onThree = parseFrames(raw.received()).filter((f) => f.streamId === 3);
      if (impl === 'native') {
        // RFC 9113 §8.7: REFUSED_STREAM tells the peer nothing was processed, so it may retry elsewhere.
        assert.deepEqual(
          onThree.map((f) => [f.type, f.payload.readUInt32BE(0)]),
          [[FRAME.RST_STREAM, 0x7]],
        );
      } else {
        // nghttp2 (under grpc-js and node:http2) ignores streams above its GOAWAY's last stream id
        // (RFC 9113 §6.8 allows it): no answer at all, which the peer reads the same way.
        assert.deepEqual(onThree, [], 'stream 3 got no frame');
      }
      assert.equal(recording.streams.length, 1, 'no processor was made for stream 3');
      raw.write(dataFrame(1, processMessage(bodyMessage('last', true)), true));
      await stopped;
      await raw.closed();
      const trailers = parseFrames(raw.received()).filter(
        (f) => f.streamId === 1 && f.type === FRAME.HEADERS && (f.flags & FLAG.END_STREAM) !== 0,
      );
      assert.equal(trailers.length, 1, 'stream 1 was answered to its end');
      assert.equal(first.log.at(-1), 'finish:half-closed');
    });

    void it('answers an unknown method with UNIMPLEMENTED and a non-POST request with 405, without calling the method', async (t) => {
      const recording = recordingFactory(echoReply);
      const harness = await startHarness(impl, 'tcp', { factory: recording.factory });
      t.after(() => harness.close());
      const unknown = new Promise<ServiceError | null>((resolve) => {
        harness.client.makeUnaryRequest(
          '/some.Service/Method',
          (value: Buffer) => value,
          (value: Buffer) => value,
          Buffer.alloc(0),
          (err: ServiceError | null) => resolve(err),
        );
      });
      assert.equal((await unknown)?.code, GrpcStatus.UNIMPLEMENTED);
      for (const method of ['GET', 'PUT']) {
        const response = await http2Call(
          harness.server.address,
          method,
          processMethod.path,
          method === 'PUT' ? frameMessage(processMethod.requestSerialize(headersMessage('/v1/models'))) : Buffer.alloc(0),
        );
        assert.equal(response[':status'], 405, method);
        assert.equal(response['grpc-status'], String(GrpcStatus.UNIMPLEMENTED), method);
      }
      assert.equal(recording.streams.length, 0, 'no Process call was started for them');
    });

    void it('reports the real TCP port and a dialable unix address', async () => {
      const tcp = await startHarness(impl, 'tcp');
      const unix = await startHarness(impl, 'unix');
      try {
        assert.ok(tcp.server.port !== undefined && tcp.server.port > 0);
        assert.equal(tcp.server.address, `127.0.0.1:${tcp.server.port}`);
        assert.equal(unix.server.port, undefined);
        assert.match(unix.server.address, /^unix:\/\/\/.+ext-proc\.sock$/);
        assert.deepEqual(await check(unix.client, ''), { status: 'NOT_SERVING' });
      } finally {
        await tcp.close();
        await unix.close();
      }
      assert.ok(!existsSync(unix.server.address.slice('unix://'.length)), 'the socket file is removed on shutdown');
    });

    void it('replaces a unix socket left behind by a dead process, and refuses one that is alive', async () => {
      const dir = mkdtempSync(join(tmpdir(), 'llm-extproc-grpc-'));
      const socketPath = join(dir, 'ext-proc.sock');
      try {
        // A process that dies by SIGKILL cannot remove its socket file.
        const holder = spawn(
          process.execPath,
          ['-e', `require('node:net').createServer().listen(${JSON.stringify(socketPath)}, () => console.log('up'))`],
          {
            stdio: ['ignore', 'pipe', 'inherit'],
          },
        );
        await new Promise<void>((resolve) => holder.stdout.once('data', () => resolve()));
        const live = startExtProcServer({
          transport: impl,
          address: `unix://${socketPath}`,
          processorFactory: recordingFactory(echoReply).factory,
          health: new FlippableHealth(),
          logger: silentLogger,
        });
        await assert.rejects(live, /in use/);
        const exited = new Promise<void>((resolve) => holder.once('exit', () => resolve()));
        holder.kill('SIGKILL');
        await exited;
        assert.ok(existsSync(socketPath));

        const server = await startExtProcServer({
          transport: impl,
          address: `unix://${socketPath}`,
          processorFactory: recordingFactory(echoReply).factory,
          health: new FlippableHealth(),
          logger: silentLogger,
        });
        const client = new Client(server.address, credentials.createInsecure());
        try {
          assert.deepEqual(await check(client, ''), { status: 'NOT_SERVING' });
        } finally {
          client.close();
          await server.shutdown(1_000);
        }
      } finally {
        rmSync(dir, { recursive: true, force: true });
      }
    });
  });
}

// ---------------------------------------------------------------------------------------------
// message shapes

void describe('wire message shapes (PROTO_LOADER_OPTIONS)', () => {
  void it('a ProcessingResponse with header mutation, dynamic metadata, immediate response and mode override round-trips', () => {
    // Built with the untyped message serializer because google.protobuf.Value fields are
    // camelCase in protobufjs's bundled struct.proto (see proto-contract.test.ts).
    const sent = {
      request_headers: {
        response: {
          status: 'CONTINUE',
          header_mutation: {
            set_headers: [setHeader('x-gateway-destination-endpoint', '10.0.0.7:8000,10.0.0.8:8000')],
            remove_headers: ['content-length'],
          },
          clear_route_cache: true,
        },
      },
      dynamic_metadata: {
        fields: {
          'envoy.lb': { structValue: { fields: { 'x-gateway-destination-endpoint': { stringValue: '10.0.0.7:8000,10.0.0.8:8000' } } } },
        },
      },
      mode_override: { response_header_mode: 'SEND', response_body_mode: 'STREAMED', response_trailer_mode: 'SKIP' },
      override_message_timeout: { seconds: 2, nanos: 500 },
    };
    const decoded = processMethod.responseDeserialize(messageType('envoy.service.ext_proc.v3.ProcessingResponse').serialize(sent));
    assert.deepEqual(decoded, {
      response: 'request_headers',
      request_headers: {
        response: {
          status: 'CONTINUE',
          header_mutation: {
            set_headers: [
              {
                header: { key: 'x-gateway-destination-endpoint', raw_value: Buffer.from('10.0.0.7:8000,10.0.0.8:8000') },
                append: { value: false },
              },
            ],
            remove_headers: ['content-length'],
          },
          clear_route_cache: true,
        },
      },
      dynamic_metadata: {
        fields: {
          'envoy.lb': {
            kind: 'structValue',
            structValue: {
              fields: { 'x-gateway-destination-endpoint': { kind: 'stringValue', stringValue: '10.0.0.7:8000,10.0.0.8:8000' } },
            },
          },
        },
      },
      mode_override: { response_header_mode: 'SEND', response_body_mode: 'STREAMED', response_trailer_mode: 'SKIP' },
      override_message_timeout: { seconds: '2', nanos: 500 }, // int64 as a string (longs: String)
    });
    assert.ok(Buffer.isBuffer(decoded.request_headers?.response?.header_mutation?.set_headers?.[0]?.header.raw_value));

    const immediate: ProcessingResponse = {
      immediate_response: {
        status: { code: 503 },
        headers: { set_headers: [setHeader('content-type', 'application/json')] },
        body: Buffer.from('{"error":{}}'),
        details: 'no_ready_endpoint',
      },
    };
    assert.deepEqual(processMethod.responseDeserialize(processMethod.responseSerialize(immediate)), {
      response: 'immediate_response',
      immediate_response: {
        // Encoded from a number; decoded as the enum's name (enums: String).
        status: { code: 'ServiceUnavailable' },
        headers: {
          set_headers: [{ header: { key: 'content-type', raw_value: Buffer.from('application/json') }, append: { value: false } }],
        },
        body: Buffer.from('{"error":{}}'),
        details: 'no_ready_endpoint',
      },
    });
    // proto3 enums are open: a code without a name still travels, and decodes as the number.
    const odd = processMethod.responseDeserialize(processMethod.responseSerialize({ immediate_response: { status: { code: 599 } } }));
    assert.deepEqual(odd.immediate_response?.status, { code: 599 });

    const replaceBody: ProcessingResponse = {
      response_body: { response: { status: 'CONTINUE_AND_REPLACE', body_mutation: { body: Buffer.from('data: [DONE]\n\n') } } },
    };
    assert.deepEqual(processMethod.responseDeserialize(processMethod.responseSerialize(replaceBody)), {
      response: 'response_body',
      response_body: {
        response: { status: 'CONTINUE_AND_REPLACE', body_mutation: { mutation: 'body', body: Buffer.from('data: [DONE]\n\n') } },
      },
    });
  });

  void it('a ProcessingRequest as Envoy sends it decodes with raw_value Buffers, attributes and discriminators', () => {
    const sent = {
      response_headers: {
        headers: {
          headers: [
            { key: ':status', raw_value: Buffer.from('503') },
            { key: 'content-type', raw_value: Buffer.from('text/plain') },
          ],
        },
        end_of_stream: false,
      },
      metadata_context: {
        filter_metadata: { 'envoy.lb': { fields: { 'x-gateway-destination-endpoint': { stringValue: '10.0.0.7:8000' } } } },
      },
      attributes: {
        'envoy.filters.http.ext_proc': {
          fields: {
            'response.code': { numberValue: 503 },
            'response.code_details': { stringValue: 'upstream_reset_before_response_started{remote_connection_failure}' },
          },
        },
      },
      protocol_config: { request_body_mode: 'BUFFERED', response_body_mode: 'STREAMED' },
    };
    const decoded = processMethod.requestDeserialize(messageType('envoy.service.ext_proc.v3.ProcessingRequest').serialize(sent));
    assert.deepEqual(decoded, {
      request: 'response_headers',
      response_headers: {
        headers: {
          headers: [
            { key: ':status', raw_value: Buffer.from('503') },
            { key: 'content-type', raw_value: Buffer.from('text/plain') },
          ],
        },
        end_of_stream: false, // protobufjs writes explicitly set defaults; Envoy's C++ encoder omits them
      },
      metadata_context: {
        filter_metadata: {
          'envoy.lb': { fields: { 'x-gateway-destination-endpoint': { kind: 'stringValue', stringValue: '10.0.0.7:8000' } } },
        },
      },
      attributes: {
        'envoy.filters.http.ext_proc': {
          fields: {
            'response.code': { kind: 'numberValue', numberValue: 503 },
            'response.code_details': {
              kind: 'stringValue',
              stringValue: 'upstream_reset_before_response_started{remote_connection_failure}',
            },
          },
        },
      },
      protocol_config: { request_body_mode: 'BUFFERED', response_body_mode: 'STREAMED' },
    });
    // defaults: false leaves zero values out entirely, e.g. an empty body chunk.
    assert.deepEqual(processMethod.requestDeserialize(processMethod.requestSerialize({ request_body: {} })), {
      request: 'request_body',
      request_body: {},
    });
  });

  void it('snake_case google.protobuf.Value fields are silently dropped on encode', () => {
    // Guards the trap: protobufjs's bundled struct.proto names these fields in camelCase.
    const structType = messageType('google.protobuf.Struct');
    const snake = structType.deserialize(structType.serialize({ fields: { k: { string_value: 'v' } } }));
    const camel = structType.deserialize(structType.serialize({ fields: { k: { stringValue: 'v' } } }));
    assert.deepEqual(snake, { fields: { k: {} } });
    assert.deepEqual(camel, { fields: { k: { kind: 'stringValue', stringValue: 'v' } } });
  });

  void it('the oneof discriminator is ignored on encode: the member that is set decides', () => {
    const decoded = processMethod.responseDeserialize(
      messageType('envoy.service.ext_proc.v3.ProcessingResponse').serialize({
        response: 'immediate_response',
        request_body: { response: {} },
      }),
    );
    assert.equal(decoded.response, 'request_body');
    assert.equal(decoded.immediate_response, undefined);
  });
});
