// HPACK (RFC 7541): the decoder against every example of the RFC's Appendix C, each malformation
// it must refuse, the header-list bound, round trips of our encoder and of Huffman coding, and an
// oracle: a real encoder (node:http2, i.e. nghttp2, with Huffman, indexing, eviction and a table
// size update) sending hundreds of requests over one connection to a raw socket whose header
// blocks we decode.
import assert from 'node:assert/strict';
import { once } from 'node:events';
import { connect, constants as h2constants, sensitiveHeaders } from 'node:http2';
import type { ClientHttp2Stream, OutgoingHttpHeaders } from 'node:http2';
import { createServer } from 'node:net';
import type { AddressInfo, Socket } from 'node:net';
import { describe, it } from 'node:test';
import fc from 'fast-check';
import { HeaderListTooLargeError, HpackDecoder, HpackError } from '../../../src/http2/hpack.js';
import { encodeHeaderBlock } from '../../../src/http2/hpack-encoder.js';
import {
  HUFFMAN_EOS,
  huffmanBits,
  huffmanEncode,
  hpackInteger,
  hpackString,
  literalWithIndexing,
  octetsFromBits,
} from '../../support/hpack-encode.js';

type Fields = Array<[string, string]>;

function hex(text: string): Buffer {
  return Buffer.from(text.replace(/\s+/g, ''), 'hex');
}

interface Step {
  readonly block: string;
  readonly fields: Fields;
  /** The dynamic table after the block, newest first, and its size, as the RFC states them. */
  readonly table: Fields;
  readonly size: number;
}

/** Decodes the RFC's consecutive blocks on one decoder, checking fields and table after each. */
function decodeSeries(steps: readonly Step[], maxTableSize?: number): void {
  const decoder = new HpackDecoder(maxTableSize === undefined ? {} : { maxTableSize });
  for (const [i, step] of steps.entries()) {
    assert.deepEqual(decoder.decode(hex(step.block)), step.fields, `fields of block ${i + 1}`);
    assert.deepEqual(decoder.dynamicTableEntries(), step.table, `table after block ${i + 1}`);
    assert.equal(decoder.dynamicTableSize, step.size, `table size after block ${i + 1}`);
  }
}

// C.3 and C.4 decode to the same lists and tables; only the encoding differs.
const REQUEST_FIELDS: readonly Fields[] = [
  [
    [':method', 'GET'],
    [':scheme', 'http'],
    [':path', '/'],
    [':authority', 'www.example.com'],
  ],
  [
    [':method', 'GET'],
    [':scheme', 'http'],
    [':path', '/'],
    [':authority', 'www.example.com'],
    ['cache-control', 'no-cache'],
  ],
  [
    [':method', 'GET'],
    [':scheme', 'https'],
    [':path', '/index.html'],
    [':authority', 'www.example.com'],
    ['custom-key', 'custom-value'],
  ],
];
const REQUEST_TABLES: ReadonlyArray<{ table: Fields; size: number }> = [
  { table: [[':authority', 'www.example.com']], size: 57 },
  {
    table: [
      ['cache-control', 'no-cache'],
      [':authority', 'www.example.com'],
    ],
    size: 110,
  },
  {
    table: [
      ['custom-key', 'custom-value'],
      ['cache-control', 'no-cache'],
      [':authority', 'www.example.com'],
    ],
    size: 164,
  },
];

function requestSteps(blocks: readonly string[]): Step[] {
  return blocks.map((block, i) => ({ block, fields: REQUEST_FIELDS[i], ...REQUEST_TABLES[i] }));
}

// C.5 and C.6 likewise, with a 256-octet table that evicts.
const DATE_21 = 'Mon, 21 Oct 2013 20:13:21 GMT';
const DATE_22 = 'Mon, 21 Oct 2013 20:13:22 GMT';
const LOCATION = 'https://www.example.com';
const COOKIE = 'foo=ASDJKHQKBZXOQWEOPIUAXQWEOIU; max-age=3600; version=1';
const RESPONSE_STEPS: ReadonlyArray<Omit<Step, 'block'>> = [
  {
    fields: [
      [':status', '302'],
      ['cache-control', 'private'],
      ['date', DATE_21],
      ['location', LOCATION],
    ],
    table: [
      ['location', LOCATION],
      ['date', DATE_21],
      ['cache-control', 'private'],
      [':status', '302'],
    ],
    size: 222,
  },
  {
    fields: [
      [':status', '307'],
      ['cache-control', 'private'],
      ['date', DATE_21],
      ['location', LOCATION],
    ],
    table: [
      [':status', '307'],
      ['location', LOCATION],
      ['date', DATE_21],
      ['cache-control', 'private'],
    ],
    size: 222,
  },
  {
    fields: [
      [':status', '200'],
      ['cache-control', 'private'],
      ['date', DATE_22],
      ['location', LOCATION],
      ['content-encoding', 'gzip'],
      ['set-cookie', COOKIE],
    ],
    table: [
      ['set-cookie', COOKIE],
      ['content-encoding', 'gzip'],
      ['date', DATE_22],
    ],
    size: 215,
  },
];

function responseSteps(blocks: readonly string[]): Step[] {
  return blocks.map((block, i) => ({ block, ...RESPONSE_STEPS[i] }));
}

describe('HPACK decoder: RFC 7541 Appendix C examples', () => {
  it('C.2.1 literal header field with indexing adds the field to the dynamic table', () => {
    decodeSeries([
      {
        block: '400a 6375 7374 6f6d 2d6b 6579 0d63 7573 746f 6d2d 6865 6164 6572',
        fields: [['custom-key', 'custom-header']],
        table: [['custom-key', 'custom-header']],
        size: 55,
      },
    ]);
  });

  it('C.2.2 literal header field without indexing leaves the table empty', () => {
    decodeSeries([{ block: '040c 2f73 616d 706c 652f 7061 7468', fields: [[':path', '/sample/path']], table: [], size: 0 }]);
  });

  it('C.2.3 literal header field never indexed leaves the table empty', () => {
    decodeSeries([{ block: '1008 7061 7373 776f 7264 0673 6563 7265 74', fields: [['password', 'secret']], table: [], size: 0 }]);
  });

  it('C.2.4 indexed header field from the static table', () => {
    decodeSeries([{ block: '82', fields: [[':method', 'GET']], table: [], size: 0 }]);
  });

  it('C.3.1–C.3.3 requests without Huffman coding share one dynamic table', () => {
    decodeSeries(
      requestSteps([
        '8286 8441 0f77 7777 2e65 7861 6d70 6c65 2e63 6f6d',
        '8286 84be 5808 6e6f 2d63 6163 6865',
        '8287 85bf 400a 6375 7374 6f6d 2d6b 6579 0c63 7573 746f 6d2d 7661 6c75 65',
      ]),
    );
  });

  it('C.4.1–C.4.3 requests with Huffman coding decode to the same lists and tables', () => {
    decodeSeries(
      requestSteps([
        '8286 8441 8cf1 e3c2 e5f2 3a6b a0ab 90f4 ff',
        '8286 84be 5886 a8eb 1064 9cbf',
        '8287 85bf 4088 25a8 49e9 5ba9 7d7f 8925 a849 e95b b8e8 b4bf',
      ]),
    );
  });

  it('C.5.1–C.5.3 responses without Huffman coding evict from a 256-octet table', () => {
    decodeSeries(
      responseSteps([
        `4803 3330 3258 0770 7269 7661 7465 611d 4d6f 6e2c 2032 3120 4f63 7420 3230 3133
         2032 303a 3133 3a32 3120 474d 546e 1768 7474 7073 3a2f 2f77 7777 2e65 7861 6d70 6c65 2e63 6f6d`,
        '4803 3330 37c1 c0bf',
        `88c1 611d 4d6f 6e2c 2032 3120 4f63 7420 3230 3133 2032 303a 3133 3a32 3220 474d
         54c0 5a04 677a 6970 7738 666f 6f3d 4153 444a 4b48 514b 425a 584f 5157 454f 5049
         5541 5851 5745 4f49 553b 206d 6178 2d61 6765 3d33 3630 303b 2076 6572 7369 6f6e 3d31`,
      ]),
      256,
    );
  });

  it('C.6.1–C.6.3 responses with Huffman coding evict the same way', () => {
    decodeSeries(
      responseSteps([
        `4882 6402 5885 aec3 771a 4b61 96d0 7abe 9410 54d4 44a8 2005 9504 0b81 66e0 82a6
         2d1b ff6e 919d 29ad 1718 63c7 8f0b 97c8 e9ae 82ae 43d3`,
        '4883 640e ffc1 c0bf',
        `88c1 6196 d07a be94 1054 d444 a820 0595 040b 8166 e084 a62d 1bff c05a 839b d9ab
         77ad 94e7 821d d7f2 e6c7 b335 dfdf cd5b 3960 d5af 2708 7f36 72c1 ab27 0fb5 291f
         9587 3160 65c0 03ed 4ee5 b106 3d50 07`,
      ]),
      256,
    );
  });
});

/** A block of one literal field without indexing, name `x`, whose value is the given Huffman octets. */
function blockWithHuffmanValue(octets: Buffer): Buffer {
  return Buffer.concat([Buffer.from([0x00]), hpackString('x', false), hpackInteger(0x80, 7, octets.length), octets]);
}

function assertRejects(block: Buffer, message: RegExp, decoder = new HpackDecoder()): void {
  assert.throws(
    () => decoder.decode(block),
    (err: unknown) => err instanceof HpackError && message.test(err.message),
  );
}

describe('HPACK decoder: malformed blocks throw HpackError', () => {
  it('rejects index 0 and indices beyond the static and dynamic tables', () => {
    assertRejects(Buffer.from([0x80]), /index 0/);
    assertRejects(Buffer.from([0xbe]), /index 62 is beyond the 61/); // §6.1 indexed, empty dynamic table
    assertRejects(Buffer.from([0x7e, 0x00]), /index 62/); // §6.2.1 indexed name
    assertRejects(Buffer.from([0x0f, 0x2f, 0x00]), /index 62/); // §6.2.2 indexed name (15 + 47)
    assertRejects(Buffer.from([0x1f, 0x2f, 0x00]), /index 62/); // §6.2.3 indexed name
    const decoder = new HpackDecoder();
    assert.deepEqual(decoder.decode(literalWithIndexing('a', 'b', false)), [['a', 'b']]);
    assert.deepEqual(decoder.decode(Buffer.from([0xbe])), [['a', 'b']]);
    assertRejects(Buffer.from([0xbf]), /index 63 is beyond the 62/, decoder);
  });

  it('accepts integers up to 2^31 − 1 and rejects larger ones and over-long encodings', () => {
    const limit = 2 ** 31 - 1;
    const decoder = new HpackDecoder({ maxTableSize: limit });
    assert.deepEqual(decoder.decode(Buffer.concat([hpackInteger(0x20, 5, limit), Buffer.from([0x82])])), [[':method', 'GET']]);
    assertRejects(hpackInteger(0x20, 5, limit + 1), /exceeds 2\^31/, decoder);
    // Zero-valued continuation octets: a value in range, but more octets than any valid one needs.
    assertRejects(Buffer.from([0x3f, 0x80, 0x80, 0x80, 0x80, 0x80, 0x00]), /beyond 5 octets/, decoder);
  });

  it('rejects a block that ends inside an integer, before a string or inside one', () => {
    assertRejects(Buffer.from([0xff]), /ends inside an integer/);
    assertRejects(Buffer.from([0xff, 0x80]), /ends inside an integer/);
    assertRejects(Buffer.from([0x04]), /ends before a string/); // `:path` name, no value
    assertRejects(Buffer.from([0x00, 0x05, 0x61]), /runs past the end/);
    assertRejects(Buffer.from([0x00, 0x01, 0x61, 0x7f]), /ends inside an integer/);
  });

  it('accepts size updates only at the start of a block and never above the limit', () => {
    const decoder = new HpackDecoder({ maxTableSize: 4096 });
    // Two updates in a row (§4.2: the smallest, then the final size), then a field.
    assert.deepEqual(decoder.decode(Buffer.concat([Buffer.from([0x20]), hpackInteger(0x20, 5, 4096), Buffer.from([0x82])])), [
      [':method', 'GET'],
    ]);
    assertRejects(Buffer.from([0x82, 0x20]), /size update after a header field/, decoder);
    assertRejects(hpackInteger(0x20, 5, 4097), /exceeds the limit 4096/, new HpackDecoder({ maxTableSize: 4096 }));
  });

  it('rejects Huffman strings holding EOS, with padding over 7 bits, or padding that is not all 1-bits', () => {
    const a = 0x61;
    // Control: 'a' (5 bits) and three 1-bits of padding.
    assert.deepEqual(new HpackDecoder().decode(blockWithHuffmanValue(octetsFromBits(huffmanBits([a])))), [['x', 'a']]);
    assertRejects(blockWithHuffmanValue(octetsFromBits(huffmanBits([a, HUFFMAN_EOS]))), /contains EOS/);
    assertRejects(blockWithHuffmanValue(octetsFromBits(huffmanBits([a]) + '11111111')), /padding/);
    assertRejects(blockWithHuffmanValue(Buffer.from([0xff])), /padding/);
    assertRejects(blockWithHuffmanValue(octetsFromBits(huffmanBits([a]), '0')), /padding/);
  });

  it('decodes values with NUL, CR and LF as sent (the HTTP layer judges them)', () => {
    const value = 'a\0b\r\nc';
    assert.deepEqual(new HpackDecoder().decode(literalWithIndexing('x', value, true)), [['x', value]]);
  });
});

describe('HPACK decoder: dynamic table bookkeeping', () => {
  it('a size update to 0 empties the table, and its entries can no longer be referenced', () => {
    const decoder = new HpackDecoder();
    decoder.decode(Buffer.concat([literalWithIndexing('a', 'b', false), literalWithIndexing('c', 'd', true)]));
    assert.equal(decoder.dynamicTableSize, 2 * 34);
    assert.deepEqual(decoder.decode(Buffer.from([0x20])), []);
    assert.equal(decoder.dynamicTableSize, 0);
    assertRejects(Buffer.from([0xbe]), /index 62/, decoder);
  });

  it('an entry larger than the table empties it (§4.4) and later entries index from 62 again', () => {
    const decoder = new HpackDecoder({ maxTableSize: 100 });
    decoder.decode(literalWithIndexing('a', 'b', false));
    assert.deepEqual(decoder.decode(literalWithIndexing('big', 'v'.repeat(100), false)), [['big', 'v'.repeat(100)]]);
    assert.deepEqual(decoder.dynamicTableEntries(), []);
    decoder.decode(literalWithIndexing('c', 'd', false));
    assert.deepEqual(decoder.decode(Buffer.from([0xbe])), [['c', 'd']]);
  });

  it('keeps indices right while the ring buffer wraps and grows over many insertions', () => {
    const decoder = new HpackDecoder({ maxTableSize: 40 * 20 });
    for (let i = 0; i < 200; i++) {
      // Each entry is 8 + 32 = 40 octets: the table holds the newest 20.
      decoder.decode(literalWithIndexing(`n${String(i).padStart(3, '0')}`, `v${String(i).padStart(3, '0')}`, i % 2 === 0));
      const held = Math.min(i + 1, 20);
      assert.equal(decoder.dynamicTableSize, held * 40);
      const oldest = i - held + 1;
      assert.deepEqual(decoder.decode(hpackInteger(0x80, 7, 61 + held)), [
        [`n${String(oldest).padStart(3, '0')}`, `v${String(oldest).padStart(3, '0')}`],
      ]);
    }
  });
});

describe('HPACK decoder: header list bound', () => {
  it('throws HeaderListTooLargeError after the whole block, and the next block decodes against an in-sync table', () => {
    const value = 'v'.repeat(100);
    const decoder = new HpackDecoder({ maxListBytes: 100 + 5 + 32 });
    // At the bound exactly: accepted.
    assert.deepEqual(decoder.decode(Buffer.concat([Buffer.from([0x00]), hpackString('x-big', false), hpackString(value, true)])), [
      ['x-big', value],
    ]);
    // One octet over, with an indexed entry added after the field that crossed the bound.
    const over = Buffer.concat([literalWithIndexing('x-big', value + 'w', true), literalWithIndexing('x-after', '1', false)]);
    assert.throws(() => decoder.decode(over), HeaderListTooLargeError);
    assert.deepEqual(decoder.dynamicTableEntries(), [
      ['x-after', '1'],
      ['x-big', value + 'w'],
    ]);
    assert.deepEqual(decoder.decode(Buffer.from([0xbe])), [['x-after', '1']]);
  });
});

describe('HPACK encoder (encodeHeaderBlock)', () => {
  it('uses an indexed field for exact static matches and literals without indexing otherwise', () => {
    const block = encodeHeaderBlock([
      [':status', '200'],
      ['content-type', 'application/grpc'],
      ['grpc-status', '0'],
      [':status', '503'],
    ]);
    const expected = Buffer.concat([
      Buffer.from([0x88]), // §6.1 static index 8
      Buffer.from([0x0f, 0x10]), // §6.2.2 name index 31 = 15 + 16
      hpackString('application/grpc', false),
      Buffer.from([0x00]), // §6.2.2 new name
      hpackString('grpc-status', false),
      hpackString('0', false),
      Buffer.from([0x08]), // name index 8 (`:status`)
      hpackString('503', false),
    ]);
    assert.deepEqual(block, expected);
  });

  it('throws on names that are not lower-case field names and on values with CR, LF, NUL or non-latin1 chars', () => {
    for (const name of ['', 'Content-Type', 'a b', 'a:b', '::a', 'a\r', 'é']) {
      assert.throws(() => encodeHeaderBlock([[name, 'v']]), TypeError, JSON.stringify(name));
    }
    for (const value of ['a\rb', 'a\nb', 'a\0b', 'ā']) {
      assert.throws(() => encodeHeaderBlock([['x', value]]), TypeError, JSON.stringify(value));
    }
  });

  it('round-trips arbitrary valid fields through the decoder, leaving its dynamic table empty', () => {
    const staticName = fc.constantFrom(':status', ':path', 'content-type', 'accept-encoding', 'www-authenticate', 'grpc-status');
    const tokenChar = fc.constantFrom(..."abcdefghijklmnopqrstuvwxyz0123456789!#$%&'*+-.^_`|~".split(''));
    const name = fc.oneof(staticName, fc.string({ unit: tokenChar, minLength: 1, maxLength: 150 }));
    const valueChar = fc.integer({ min: 0, max: 0xff }).filter((c) => c !== 0 && c !== 10 && c !== 13);
    const value = fc.oneof(
      fc.constantFrom('200', '404', 'gzip, deflate', '/', ''),
      fc.string({ unit: valueChar.map((c) => String.fromCharCode(c)), maxLength: 300 }),
    );
    const decoder = new HpackDecoder();
    fc.assert(
      fc.property(fc.array(fc.tuple(name, value), { maxLength: 12 }), (fields) => {
        assert.deepEqual(decoder.decode(encodeHeaderBlock(fields)), fields);
        assert.equal(decoder.dynamicTableSize, 0);
      }),
      { numRuns: 500 },
    );
  });
});

describe('Huffman decoding', () => {
  it('decodes the Huffman coding of arbitrary octet strings back to the same octets', () => {
    const decoder = new HpackDecoder();
    fc.assert(
      fc.property(fc.uint8Array({ maxLength: 200 }), (octets) => {
        const block = blockWithHuffmanValue(huffmanEncode(octets));
        assert.deepEqual(decoder.decode(block), [['x', Buffer.from(octets).toString('latin1')]]);
      }),
      { numRuns: 1000 },
    );
  });

  it('decodes a 100 KB Huffman-coded value (beyond the reused scratch buffer) and a short one after it', () => {
    const decoder = new HpackDecoder();
    const long = 'b~'.repeat(50_000);
    assert.deepEqual(decoder.decode(blockWithHuffmanValue(huffmanEncode(Buffer.from(long, 'latin1')))), [['x', long]]);
    assert.deepEqual(decoder.decode(blockWithHuffmanValue(huffmanEncode(Buffer.from('short', 'latin1')))), [['x', 'short']]);
  });

  it('decodes every one of the 256 symbols, whose codes run from 5 to 30 bits', () => {
    const all = Buffer.from(Array.from({ length: 256 }, (_, i) => i));
    assert.deepEqual(new HpackDecoder().decode(blockWithHuffmanValue(huffmanEncode(all))), [['x', all.toString('latin1')]]);
  });
});

// --- The oracle: nghttp2 (through node:http2) as the encoder -------------------------------------

const FRAME_HEADERS = 0x1;
const FRAME_SETTINGS = 0x4;
const FRAME_CONTINUATION = 0x9;
const FLAG_ACK = 0x1;
const FLAG_END_HEADERS = 0x4;
const FLAG_PADDED = 0x8;
const FLAG_PRIORITY = 0x20;
const PREFACE_LENGTH = 24;

interface CapturedBlock {
  readonly streamId: number;
  readonly block: Buffer;
  /** HEADERS plus CONTINUATION frames the block came in. */
  readonly frames: number;
}

function settingsFrame(flags: number, settings: ReadonlyArray<readonly [number, number]>): Buffer {
  const frame = Buffer.alloc(9 + settings.length * 6);
  frame.writeUIntBE(settings.length * 6, 0, 3);
  frame[3] = FRAME_SETTINGS;
  frame[4] = flags;
  for (const [i, [id, value]] of settings.entries()) {
    frame.writeUInt16BE(id, 9 + i * 6);
    frame.writeUInt32BE(value, 11 + i * 6);
  }
  return frame;
}

/**
 * The server side of a connection that never answers a request: it sends its SETTINGS, acks the
 * client's, and collects each header block (HEADERS and CONTINUATION payloads joined, padding and
 * priority fields removed) in the order they arrive.
 */
function collectHeaderBlocks(
  socket: Socket,
  ourSettings: ReadonlyArray<readonly [number, number]>,
  onBlock: (b: CapturedBlock) => void,
): void {
  let pending = Buffer.alloc(0);
  let prefaceSeen = false;
  let open: { streamId: number; fragments: Buffer[] } | undefined;
  socket.write(settingsFrame(0, ourSettings));
  socket.on('data', (chunk: Buffer) => {
    pending = Buffer.concat([pending, chunk]);
    if (!prefaceSeen) {
      if (pending.length < PREFACE_LENGTH) return;
      pending = pending.subarray(PREFACE_LENGTH);
      prefaceSeen = true;
    }
    while (pending.length >= 9) {
      const length = pending.readUIntBE(0, 3);
      if (pending.length < 9 + length) return;
      const type = pending[3];
      const flags = pending[4];
      const streamId = pending.readUInt32BE(5) & 0x7fffffff;
      let payload = pending.subarray(9, 9 + length);
      pending = pending.subarray(9 + length);
      if (type === FRAME_SETTINGS && (flags & FLAG_ACK) === 0) socket.write(settingsFrame(FLAG_ACK, []));
      if (type === FRAME_HEADERS) {
        assert.equal(open, undefined, 'HEADERS while a header block is still open');
        const padLength = (flags & FLAG_PADDED) !== 0 ? payload[0] : 0;
        payload = payload.subarray((flags & FLAG_PADDED) !== 0 ? 1 : 0, payload.length - padLength);
        if ((flags & FLAG_PRIORITY) !== 0) payload = payload.subarray(5);
        open = { streamId, fragments: [payload] };
      } else if (type === FRAME_CONTINUATION) {
        assert.equal(open?.streamId, streamId, 'CONTINUATION for the open header block');
        open.fragments.push(payload);
      } else {
        assert.equal(open, undefined, `frame type ${type} inside a header block`);
        continue;
      }
      if ((flags & FLAG_END_HEADERS) !== 0) {
        onBlock({ streamId: open.streamId, block: Buffer.concat(open.fragments), frames: open.fragments.length });
        open = undefined;
      }
    }
  });
}

/** A request as node:http2 takes it, and the header list it must produce on the wire. */
interface OracleRequest {
  readonly headers: OutgoingHttpHeaders;
  readonly expected: Fields;
}

/** Node sends pseudo-headers first, then the rest in key order, each array value as repeated fields. */
function oracleRequest(pseudo: Fields, regular: ReadonlyArray<readonly [string, string | string[]]>, sensitive: string[]): OracleRequest {
  const headers: OutgoingHttpHeaders = Object.fromEntries([...pseudo, ...regular]);
  // node:http2 sends the fields named under this symbol as never-indexed literals (§6.2.3).
  if (sensitive.length > 0) (headers as Record<symbol, unknown>)[sensitiveHeaders] = sensitive;
  const expected: Fields = [...pseudo];
  for (const [name, value] of regular) for (const one of Array.isArray(value) ? value : [value]) expected.push([name, one]);
  return { headers, expected };
}

function oracleRequests(count: number): OracleRequest[] {
  // Small pools so fields repeat (the dynamic table is used and, at 512 octets, evicts), plus
  // fresh random names and values (Huffman coding of arbitrary visible latin1).
  const valueChar = fc.constantFrom(...'\t !"#$%&\'()*+,-./0123456789:;<=>?@AZaz[\\]^_`{|}~\x80\xa0\xe9\xff'.split(''));
  const freshValue = fc.string({ unit: valueChar, maxLength: 120 });
  const value = fc.oneof(fc.constantFrom('application/json', 'gzip', 'yes', '', 'a-much-longer-pooled-value-0123456789'), freshValue);
  const multiName = fc.oneof(
    fc.constantFrom('x-trace', 'x-tenant', 'x-model', 'accept', 'cache-control'),
    fc.stringMatching(/^x-[a-z0-9-]{1,24}$/),
  );
  const singleName = fc.constantFrom('user-agent', 'authorization', 'content-type');
  const regular = fc.uniqueArray(
    fc.oneof(fc.tuple(multiName, fc.oneof(value, fc.array(value, { minLength: 2, maxLength: 3 }))), fc.tuple(singleName, value)),
    { selector: ([name]) => name, maxLength: 8 },
  );
  const pseudo = fc.tuple(
    fc.constantFrom('GET', 'POST', 'PUT'),
    fc.constantFrom('http', 'https'),
    fc.oneof(fc.constantFrom('/', '/v1/chat/completions'), fc.stringMatching(/^\/[a-z0-9/?=&]{0,40}$/)),
    fc.constantFrom('localhost', 'api.example.com:8443'),
  );
  const request = fc.tuple(pseudo, regular, fc.boolean()).map(([[method, scheme, path, authority], fields, markSensitive]) =>
    oracleRequest(
      [
        [':method', method],
        [':scheme', scheme],
        [':path', path],
        [':authority', authority],
      ],
      fields,
      markSensitive ? fields.slice(0, 2).map(([name]) => name) : [],
    ),
  );
  return fc.sample(request, { seed: 7541, numRuns: count });
}

describe('HPACK decoder against nghttp2 (node:http2 client)', () => {
  it('decodes exactly the headers of 400 requests on one connection: Huffman, indexing, eviction, size update, CONTINUATION', async (t) => {
    const requests = oracleRequests(400);
    // One request whose block (30 KB even Huffman-coded) needs CONTINUATION frames.
    requests.splice(
      200,
      0,
      oracleRequest(
        [
          [':method', 'POST'],
          [':scheme', 'http'],
          [':path', '/big'],
          [':authority', 'localhost'],
        ],
        [['x-big', 'b'.repeat(40_000)]],
        [],
      ),
    );

    // A 512-octet table: nghttp2 starts its first block with a size update and evicts often.
    const tableSize = 512;
    const blocks: CapturedBlock[] = [];
    let allArrived: () => void = () => undefined;
    const arrived = new Promise<void>((resolve) => (allArrived = resolve));
    const server = createServer((socket) => {
      socket.on('error', () => undefined);
      collectHeaderBlocks(
        socket,
        [
          [h2constants.NGHTTP2_SETTINGS_HEADER_TABLE_SIZE, tableSize],
          [h2constants.NGHTTP2_SETTINGS_MAX_CONCURRENT_STREAMS, 10_000],
        ],
        (block) => {
          blocks.push(block);
          if (blocks.length === requests.length) allArrived();
        },
      );
    });
    server.listen(0, '127.0.0.1');
    await once(server, 'listening');
    t.after(() => server.close());

    const client = connect(`http://127.0.0.1:${(server.address() as AddressInfo).port}`);
    client.on('error', () => undefined);
    t.after(() => client.destroy());
    // Our SETTINGS (the table size) reach nghttp2's encoder before the first request.
    await once(client, 'remoteSettings');
    const streams: ClientHttp2Stream[] = requests.map((request) => {
      const stream = client.request(request.headers, { endStream: true });
      stream.on('error', () => undefined);
      return stream;
    });
    await arrived;

    const expectedByStream = new Map(streams.map((stream, i) => [stream.id, requests[i].expected]));
    const decoder = new HpackDecoder({ maxTableSize: tableSize });
    let sawEviction = false;
    let previousOldest: [string, string] | undefined;
    for (const { streamId, block } of blocks) {
      assert.deepEqual(decoder.decode(block), expectedByStream.get(streamId), `header block of stream ${streamId}`);
      assert.ok(decoder.dynamicTableSize <= tableSize);
      const oldest = decoder.dynamicTableEntries().at(-1);
      if (previousOldest !== undefined && (oldest === undefined || oldest[0] !== previousOldest[0] || oldest[1] !== previousOldest[1])) {
        sawEviction = true;
      }
      previousOldest = oldest;
    }
    // The test is only as strong as what nghttp2 did: it must have started with a size update
    // (001xxxxx), indexed enough fields to evict some, split a block into CONTINUATIONs, and
    // Huffman-coded strings.
    assert.equal(blocks[0].block[0] & 0xe0, 0x20, 'first block starts with a dynamic table size update');
    assert.ok(sawEviction, 'the dynamic table evicted entries');
    assert.ok(requests.some((r) => r.expected.some(([name]) => name === 'x-tenant')));
    assert.ok(!blocks.some((b) => b.block.includes('x-tenant', 0, 'latin1')), 'names went Huffman-coded');
    assert.ok(
      blocks.some((b) => b.frames > 1),
      'a header block came in CONTINUATION frames',
    );
  });
});
