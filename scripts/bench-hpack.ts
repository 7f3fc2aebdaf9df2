// CPU cost of decoding the request header block of an Envoy ext_proc gRPC call with our HPACK
// decoder (src/http2/hpack.ts), and of encoding our response headers and trailers. Pure CPU,
// in this process; figures are CPU time (process.cpuUsage) per block, so a busy machine slows the
// run but barely moves them.
//
// Run: `npm run build && node dist/scripts/bench-hpack.js [iterations]`.

import { HpackDecoder } from '../src/http2/hpack.js';
import { encodeHeaderBlock } from '../src/http2/hpack-encoder.js';
import { hpackInteger, hpackString, literalWithIndexing } from '../test/support/hpack-encode.js';

// What Envoy's gRPC client sends on an ext_proc stream (values typical of a local cluster).
const ENVOY_FIELDS: ReadonlyArray<readonly [string, string]> = [
  [':path', '/envoy.service.ext_proc.v3.ExternalProcessor/Process'],
  [':authority', 'llm-extproc'],
  ['content-type', 'application/grpc'],
  ['te', 'trailers'],
  ['grpc-timeout', '30000m'],
  ['x-envoy-internal', 'true'],
  ['x-forwarded-for', '10.244.0.17'],
  ['x-envoy-expected-rq-timeout-ms', '30000'],
];
const REQUEST_ID = ['x-request-id', '4b7a3c1e-9d2f-4e8a-b6c5-0f1d2e3a4b5c'] as const;
const STATIC_POST_HTTP = Buffer.from([0x83, 0x86]); // :method POST, :scheme http (RFC 7541 Appendix A)

/** A connection's first request: every field a Huffman-coded literal that enters the dynamic table. */
const firstBlock = Buffer.concat([STATIC_POST_HTTP, ...ENVOY_FIELDS.map(([name, value]) => literalWithIndexing(name, value, true))]);

/** Every later request: the same fields indexed from the dynamic table, and a fresh request id as a
 *  literal without indexing (so the block decodes the same way every time it is repeated). */
const steadyBlock = Buffer.concat([
  STATIC_POST_HTTP,
  ...ENVOY_FIELDS.map((_, i) => hpackInteger(0x80, 7, 62 + ENVOY_FIELDS.length - 1 - i)),
  Buffer.from([0x00]),
  hpackString(REQUEST_ID[0], true),
  hpackString(REQUEST_ID[1], true),
]);

const RESPONSE_HEADERS: ReadonlyArray<readonly [string, string]> = [
  [':status', '200'],
  ['content-type', 'application/grpc'],
];
const RESPONSE_TRAILERS: ReadonlyArray<readonly [string, string]> = [
  ['grpc-status', '0'],
  ['grpc-message', ''],
];

/** CPU nanoseconds per call of `work`, after a warm-up of a tenth of the iterations. */
function cpuNsPerCall(iterations: number, work: () => unknown): number {
  let sink = 0;
  for (let i = 0; i < iterations / 10; i++) sink += work() === undefined ? 0 : 1;
  const before = process.cpuUsage();
  for (let i = 0; i < iterations; i++) sink += work() === undefined ? 0 : 1;
  const used = process.cpuUsage(before);
  if (sink < 0) console.log(sink); // keeps the results alive
  return ((used.user + used.system) * 1000) / iterations;
}

const iterations = Number(process.argv[2] ?? 500_000);
const steady = new HpackDecoder();
steady.decode(firstBlock);

const rows: Array<[string, number, number]> = [
  [
    'decode: first request on a connection (Huffman literals, indexed)',
    firstBlock.length,
    cpuNsPerCall(iterations / 10, () => new HpackDecoder().decode(firstBlock)),
  ],
  [
    'decode: later request (dynamic-table indices + Huffman request id)',
    steadyBlock.length,
    cpuNsPerCall(iterations, () => steady.decode(steadyBlock)),
  ],
  [
    'encode: response headers (:status 200, content-type)',
    encodeHeaderBlock(RESPONSE_HEADERS).length,
    cpuNsPerCall(iterations, () => encodeHeaderBlock(RESPONSE_HEADERS)),
  ],
  [
    'encode: trailers (grpc-status 0, grpc-message)',
    encodeHeaderBlock(RESPONSE_TRAILERS).length,
    cpuNsPerCall(iterations, () => encodeHeaderBlock(RESPONSE_TRAILERS)),
  ],
];
console.log(`HPACK, CPU ns per block (${iterations} iterations, node ${process.version})`);
for (const [what, octets, ns] of rows)
  console.log(`${what.padEnd(70)} ${String(octets).padStart(4)} octets ${ns.toFixed(0).padStart(7)} ns`);
