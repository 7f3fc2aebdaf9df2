// HPACK building blocks for writing header blocks by hand in tests and benchmarks: integers,
// string literals (raw or Huffman-coded, RFC 7541 §5) and bit strings for deliberately broken
// Huffman data. Our server never Huffman-codes what it sends, so this encoder lives here.
import { HUFFMAN_CODE_LENGTHS, HUFFMAN_CODES } from '../../src/http2/huffman.js';

/** The EOS symbol's number in the Huffman code list. */
export const HUFFMAN_EOS = 256;

/** The Huffman codes of `symbols` (0–255, or 256 for EOS) as a string of '0' and '1'. */
export function huffmanBits(symbols: Iterable<number>): string {
  let bits = '';
  for (const symbol of symbols) bits += HUFFMAN_CODES[symbol].toString(2).padStart(HUFFMAN_CODE_LENGTHS[symbol], '0');
  return bits;
}

/** Packs a bit string into octets, filling the last one with `padding` bits. */
export function octetsFromBits(bits: string, padding: '0' | '1' = '1'): Buffer {
  const padded = bits.padEnd(Math.ceil(bits.length / 8) * 8, padding);
  const octets = Buffer.alloc(padded.length / 8);
  for (let i = 0; i < octets.length; i++) octets[i] = parseInt(padded.slice(i * 8, i * 8 + 8), 2);
  return octets;
}

/** §5.2's Huffman coding of octets, padded with the most significant bits of EOS. */
export function huffmanEncode(octets: Uint8Array): Buffer {
  return octetsFromBits(huffmanBits(octets));
}

/** §5.1: `value` in the low `prefixBits` of an octet whose high bits are `pattern`. */
export function hpackInteger(pattern: number, prefixBits: number, value: number): Buffer {
  const prefixMax = (1 << prefixBits) - 1;
  if (value < prefixMax) return Buffer.from([pattern | value]);
  const octets = [pattern | prefixMax];
  let rest = value - prefixMax;
  while (rest >= 0x80) {
    octets.push((rest % 0x80) | 0x80);
    rest = Math.floor(rest / 0x80);
  }
  octets.push(rest);
  return Buffer.from(octets);
}

/** §5.2: a string literal of latin1 `text`, Huffman-coded or not. */
export function hpackString(text: string, huffman: boolean): Buffer {
  const octets = Buffer.from(text, 'latin1');
  const body = huffman ? huffmanEncode(octets) : octets;
  return Buffer.concat([hpackInteger(huffman ? 0x80 : 0x00, 7, body.length), body]);
}

/** §6.2.1: a literal field with incremental indexing and a new name. */
export function literalWithIndexing(name: string, value: string, huffman: boolean): Buffer {
  return Buffer.concat([Buffer.from([0x40]), hpackString(name, huffman), hpackString(value, huffman)]);
}
