// A bounded frame fuzzer against the real program's native HTTP/2 (src/http2): fast-check builds
// sequences of HTTP/2 frames — gRPC requests, DATA, resets, SETTINGS, PING, WINDOW_UPDATE,
// PRIORITY, GOAWAY, CONTINUATION, PUSH_PROMISE, unknown types — and mutates some of them (flags,
// stream ids, length fields, truncation, flipped bytes). Each sequence goes over a fresh TCP
// connection, which is then half-closed. After every sequence: the server closed that connection
// (it did not hang on it), the process is still running, and a gRPC health check on a fresh
// connection answers SERVING.
//
// By default a fixed seed and a small budget keep it a few seconds in `npm test`; longer runs:
// LLM_EXTPROC_FUZZ_RUNS=20000 (and LLM_EXTPROC_FUZZ_SEED=<n> for other sequences), docs/testing.md.

import assert from 'node:assert/strict';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import fc from 'fast-check';
import { stringify as toYaml } from 'yaml';
import { EXT_PROC_SERVICE_NAME } from '../../src/extproc/protocol-names.js';
import { startExtprocProcess, type ExtprocProcess } from '../support/extproc-process.js';
import { healthClient } from '../support/grpc-health-client.js';
import { frame, grpcRequestHeaders, headersFrame, rawH2Connect } from '../support/h2-frames.js';

const RUNS = Number(process.env['LLM_EXTPROC_FUZZ_RUNS'] ?? '300');
const SEED = Number(process.env['LLM_EXTPROC_FUZZ_SEED'] ?? '21');
/** How long the server may take to close a connection we half-closed: far above any real answer. */
const CLOSE_WITHIN_MS = 5_000;

const PROCESS_PATH = `/${EXT_PROC_SERVICE_NAME}/Process`;
const HEALTH_PATH = '/grpc.health.v1.Health/Check';
const TYPE = {
  DATA: 0,
  HEADERS: 1,
  PRIORITY: 2,
  RST_STREAM: 3,
  SETTINGS: 4,
  PUSH_PROMISE: 5,
  PING: 6,
  GOAWAY: 7,
  WINDOW_UPDATE: 8,
  CONTINUATION: 9,
};

const u32 = (value: number): Buffer => {
  const bytes = Buffer.alloc(4);
  bytes.writeUInt32BE(value >>> 0);
  return bytes;
};

/** Mostly small odd ids (streams a client may open), some even, zero, and anywhere in the 31-bit space. */
const streamId = fc.oneof(
  { weight: 6, arbitrary: fc.integer({ min: 0, max: 7 }).map((n) => 2 * n + 1) },
  { weight: 1, arbitrary: fc.constantFrom(0, 2, 4) },
  { weight: 1, arbitrary: fc.integer({ min: 0, max: 0x7fffffff }) },
);

const requestFields = fc.constantFrom(
  grpcRequestHeaders(PROCESS_PATH),
  grpcRequestHeaders(HEALTH_PATH),
  grpcRequestHeaders(PROCESS_PATH).filter(([name]) => name !== ':scheme'),
  grpcRequestHeaders(PROCESS_PATH).filter(([name]) => name !== ':method'),
  [...grpcRequestHeaders(PROCESS_PATH), ['content-length', '3'] as [string, string]],
  [['content-type', 'application/grpc'] as [string, string], ...grpcRequestHeaders(PROCESS_PATH)],
  [...grpcRequestHeaders(PROCESS_PATH), ['connection', 'keep-alive'] as [string, string]],
  [
    [':method', 'GET'],
    [':scheme', 'http'],
    [':path', '/'],
    [':authority', 'localhost'],
  ] as Array<[string, string]>,
);

/** A gRPC message (5-byte prefix + body), or bytes with no shape at all. */
const dataPayload = fc.oneof(
  fc.uint8Array({ maxLength: 64 }).map((body) => Buffer.concat([Buffer.from([0]), u32(body.length), Buffer.from(body)])),
  fc.uint8Array({ maxLength: 300 }).map((bytes) => Buffer.from(bytes)),
);

const frames = fc.oneof(
  fc.tuple(streamId, requestFields, fc.boolean()).map(([id, fields, end]) => headersFrame(id, fields, end)),
  fc.tuple(streamId, dataPayload, fc.integer({ min: 0, max: 0xff })).map(([id, data, flags]) => frame(TYPE.DATA, flags & 0x09, id, data)),
  fc.tuple(streamId, fc.integer({ min: 0, max: 14 })).map(([id, code]) => frame(TYPE.RST_STREAM, 0, id, u32(code))),
  fc
    .tuple(fc.array(fc.tuple(fc.integer({ min: 0, max: 8 }), fc.nat()), { maxLength: 4 }), fc.boolean())
    .map(([pairs, ack]) =>
      frame(TYPE.SETTINGS, ack ? 1 : 0, 0, Buffer.concat(pairs.map(([id, value]) => Buffer.concat([Buffer.from([0, id]), u32(value)])))),
    ),
  fc
    .tuple(fc.boolean(), fc.uint8Array({ minLength: 8, maxLength: 8 }))
    .map(([ack, data]) => frame(TYPE.PING, ack ? 1 : 0, 0, Buffer.from(data))),
  fc
    .tuple(streamId, fc.oneof(fc.constant(0), fc.integer({ min: 1, max: 0x7fffffff })))
    .map(([id, inc]) => frame(TYPE.WINDOW_UPDATE, 0, id, u32(inc))),
  fc
    .tuple(streamId, streamId, fc.integer({ min: 0, max: 255 }))
    .map(([id, dep, weight]) => frame(TYPE.PRIORITY, 0, id, Buffer.concat([u32(dep), Buffer.from([weight])]))),
  fc
    .tuple(streamId, fc.integer({ min: 0, max: 14 }))
    .map(([last, code]) => frame(TYPE.GOAWAY, 0, 0, Buffer.concat([u32(last), u32(code)]))),
  fc
    .tuple(streamId, fc.uint8Array({ maxLength: 40 }), fc.boolean())
    .map(([id, block, endHeaders]) => frame(TYPE.CONTINUATION, endHeaders ? 4 : 0, id, Buffer.from(block))),
  fc.tuple(streamId, streamId).map(([id, promised]) => frame(TYPE.PUSH_PROMISE, 4, id, u32(promised))),
  fc
    .tuple(fc.integer({ min: 10, max: 255 }), streamId, fc.uint8Array({ maxLength: 20 }))
    .map(([type, id, payload]) => frame(type, 0xff, id, Buffer.from(payload))),
);

/** A mutation of one frame's bytes: the header's fields, its end, or any byte. */
const mutation = fc.oneof(
  fc.integer({ min: 0, max: 0xff }).map((flags) => (f: Buffer) => Buffer.concat([f.subarray(0, 4), Buffer.from([flags]), f.subarray(5)])),
  fc.integer({ min: 0, max: 0xffffff }).map((length) => (f: Buffer) => {
    const copy = Buffer.from(f);
    copy.writeUIntBE(length, 0, 3);
    return copy;
  }),
  fc.nat().map((cut) => (f: Buffer) => f.subarray(0, cut % (f.length + 1))),
  fc.tuple(fc.nat(), fc.integer({ min: 0, max: 0xff })).map(([at, value]) => (f: Buffer) => {
    const copy = Buffer.from(f);
    copy[at % copy.length] = value;
    return copy;
  }),
);

/** A sequence of frames, about one in five mutated. */
const sequence = fc.array(
  fc.tuple(frames, fc.option(mutation, { freq: 4 })).map(([f, mutate]) => (mutate === null ? f : mutate(f))),
  { minLength: 1, maxLength: 40 },
);

void describe('HTTP/2 frame fuzzer (native transport)', () => {
  let dir: string;
  let proc: ExtprocProcess;
  let grpcAddress: string;

  before(async () => {
    dir = await mkdtemp(join(tmpdir(), 'llm-extproc-fuzz-'));
    await writeFile(join(dir, 'endpoints.yaml'), 'pools: []\n');
    await writeFile(
      join(dir, 'config.yaml'),
      toYaml({
        listen: { grpc: '127.0.0.1:0', http: '127.0.0.1:0', transport: 'native' },
        logLevel: 'info',
        static: { path: join(dir, 'endpoints.yaml') },
      }),
    );
    proc = await startExtprocProcess({ configPath: join(dir, 'config.yaml') });
    const address = proc.logLines().find((line) => line.msg === 'llm-extproc started')?.['grpc'];
    assert.ok(typeof address === 'string');
    grpcAddress = address;
  });

  after(async () => {
    await proc.kill();
    await rm(dir, { recursive: true, force: true });
  });

  void it(`${RUNS} random and mutated frame sequences (seed ${SEED}): each connection is closed by the server, the process stays up, and a fresh connection is served`, async () => {
    let exited = false;
    void proc.exited.then(() => (exited = true));
    await fc.assert(
      fc.asyncProperty(sequence, async (sent) => {
        const raw = await rawH2Connect(grpcAddress);
        try {
          raw.write(Buffer.concat(sent));
          raw.end();
          await raw.closed(CLOSE_WITHIN_MS);
        } finally {
          raw.close();
        }
        assert.equal(exited, false, `the process exited:\n${proc.output()}`);
        const client = healthClient(grpcAddress);
        try {
          assert.equal(await client.check(), 'SERVING');
        } finally {
          client.close();
        }
      }),
      { seed: SEED, numRuns: RUNS },
    );
    const fatal = proc.logLines().filter((line) => (line.level ?? 0) >= 60);
    assert.deepEqual(fatal, [], 'no fatal log line (an uncaught exception logs one)');
    assert.deepEqual(proc.rejectedLines(), [], 'every log line is JSON');
  });
});
