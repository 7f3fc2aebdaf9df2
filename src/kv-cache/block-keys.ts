// Our key for a KV-cache block: a hash of the block's token ids chained with its parent's key, as
// vLLM chains its own block hashes. We do not recompute vLLM's hash (sha256 over Python pickles, or
// a per-process seed for xxhash): every BlockStored carries its tokens, so the index keys blocks by
// this hash of the same token chain, and a request's blocks, cut from its own token ids, get the
// same keys. Two prompts agree on a block's key exactly when they agree on every token up to the
// end of that block (and on the LoRA adapter, which vLLM also hashes into every block).
//
// A key is a safe integer (53 bits: two 32-bit multiply-xorshift lanes, 21 + 32 bits kept), so
// keys are plain numbers in a Map. The chance that two different chains share a key is about
// n² / 2^54 for n live blocks: under 10^-5 for a million.

/** The key a chain starts from: the adapter's name, when the blocks belong to a LoRA adapter. */
export function rootKey(loraName: string | null | undefined): number {
  if (loraName === null || loraName === undefined || loraName === '') return 0;
  let a = 0x9e3779b9;
  let b = 0x85ebca6b;
  for (let i = 0; i < loraName.length; i++) {
    const c = loraName.charCodeAt(i);
    a = Math.imul(a ^ c, 0x01000193);
    b = Math.imul(b ^ c, 0x5bd1e995);
  }
  return join(a, b);
}

function join(a: number, b: number): number {
  return (a >>> 11) * 4294967296 + (b >>> 0);
}

/** The key of the block whose tokens are `tokens[from, from + blockSize)`, after the block keyed `parent`. */
export function blockKey(parent: number, tokens: ArrayLike<number>, from: number, blockSize: number): number {
  // The parent's two halves seed the lanes, so equal blocks after different parents differ.
  let a = (Math.floor(parent / 4294967296) ^ 0x27d4eb2f) | 0;
  let b = (parent >>> 0) ^ 0x165667b1;
  const end = from + blockSize;
  for (let i = from; i < end; i++) {
    const t = tokens[i] | 0;
    a = Math.imul(a ^ t, 0x01000193);
    a ^= a >>> 15;
    b = Math.imul(b ^ t, 0x5bd1e995);
    b ^= b >>> 13;
  }
  a = Math.imul(a ^ (a >>> 16), 0x85ebca6b);
  b = Math.imul(b ^ (b >>> 16), 0xc2b2ae35);
  return join(a ^ (a >>> 13), b ^ (b >>> 16));
}

/**
 * The keys of the whole blocks of `tokens` (a tail shorter than a block has none: vLLM caches only
 * whole blocks), at most `maxBlocks` of them, chained from `root`.
 */
export function blockKeys(tokens: ArrayLike<number>, blockSize: number, root: number, maxBlocks = Infinity): number[] {
  const count = Math.min(Math.floor(tokens.length / blockSize), maxBlocks);
  const keys = new Array<number>(count);
  let parent = root;
  for (let i = 0; i < count; i++) keys[i] = parent = blockKey(parent, tokens, i * blockSize, blockSize);
  return keys;
}
