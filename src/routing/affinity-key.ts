// The affinity key of a prompt, cut the way a model server caches it. vLLM (and SGLang's paged
// mode) keep a prompt's KV cache in blocks of a fixed number of tokens and reuse only whole
// blocks: a prompt shorter than one block leaves nothing another request can reuse, and the tail
// of a longer one that does not fill its last block is recomputed every time. So only whole blocks
// count here. A prompt whose shared part holds no whole block has no key: it is placed by load
// alone, which keeps a flood of identical short prompts ("hi") spread over the replicas instead
// of pinned to one owner.
//
// We see characters, the server sees tokens: a block is `blockTokens × charsPerToken` characters
// (UTF-16 code units) of the text the request reader extracted (prompt-prefix material: roles and
// contents joined with U+001F). The estimate should err high (more characters per token than the
// tokenizer really produces), so that what we call a whole block is one on the server. Token-id
// prompts are cut in exact blocks of `blockTokens` ids. The key is the 32-bit FNV-1a hash of the
// first min(whole blocks, keyBlocks) blocks of a conversation's opening (its messages up to the
// first user message, or up to the first answer when the opening alone holds no whole block; a
// completion prompt is its own opening): two prompts whose openings agree on their first keyBlocks
// blocks, or agree entirely and hold the same number of whole blocks, share the key, so every turn
// of a conversation shares its first turn's (its second's, when the opening holds no whole block
// and the key waits for the first answer). What the key's owner is credited with is the shared
// part's whole blocks (request/prompt-prefix.ts).
// The text is only hashed: nothing here keeps, returns or logs it.

import type { PoolView } from '../endpoints/model.js';
import type { CacheBlockSize } from '../picker/scorer-table.js';
import { cacheBlockFor } from '../picker/settings.js';
import type { PickerSettings } from '../picker/settings.js';

/** The leading part of a prompt's shared part (see request/prompt-prefix.ts), bounded in length. */
export type PromptPrefix =
  | { readonly kind: 'none' }
  /**
   * Pieces (role, content, part) each followed by U+001F, so `ab`+`c` ≠ `a`+`bc`, and where the
   * shared part, the opening and the first exchange end in it (characters).
   */
  | {
      readonly kind: 'text';
      readonly text: string;
      readonly shared: number;
      readonly opening: number;
      readonly exchange: number;
    }
  /** A completion prompt given as token ids. */
  | { readonly kind: 'tokens'; readonly tokens: readonly number[] };

export const NO_PROMPT: PromptPrefix = { kind: 'none' };

/** Characters (UTF-16 code units) in one block. */
export function blockChars(size: CacheBlockSize): number {
  return Math.max(1, Math.round(size.blockTokens * size.charsPerToken));
}

/** How much of a prompt the affinity key can depend on: what the request reader must extract. */
export interface PrefixLimit {
  readonly chars: number;
  readonly tokens: number;
  /** The whole prompt is read too, as the server will tokenize it (precise mode). */
  readonly whole?: boolean;
}

export function prefixLimit(sizes: readonly CacheBlockSize[], keyBlocks: number): PrefixLimit {
  let chars = 0;
  let tokens = 0;
  for (const size of sizes) {
    chars = Math.max(chars, blockChars(size) * keyBlocks);
    tokens = Math.max(tokens, size.blockTokens * keyBlocks);
  }
  return { chars, tokens };
}

const FNV_OFFSET = 0x811c9dc5;
const FNV_PRIME = 0x01000193;

/** Whole blocks the prefix's shared part holds (only as far as it was extracted). */
export function wholeBlocks(prefix: PromptPrefix, size: CacheBlockSize): number {
  if (prefix.kind === 'text') return Math.floor(prefix.shared / blockChars(size));
  if (prefix.kind === 'tokens') return Math.floor(prefix.tokens.length / Math.max(1, size.blockTokens));
  return 0;
}

/** Whole blocks the key is cut from: the opening's, or the first exchange's when the opening holds none. */
function keyMaterialBlocks(prefix: PromptPrefix, size: CacheBlockSize): number {
  if (prefix.kind !== 'text') return wholeBlocks(prefix, size);
  const chars = blockChars(size);
  const opening = Math.floor(prefix.opening / chars);
  return opening > 0 ? opening : Math.floor(prefix.exchange / chars);
}

/**
 * The affinity key: the hash of the first min(whole blocks, keyBlocks) blocks of the prompt's
 * opening (see above), or undefined when it holds no whole block (or keyBlocks is 0).
 */
export function affinityKey(prefix: PromptPrefix, size: CacheBlockSize, keyBlocks: number): number | undefined {
  const blocks = Math.min(keyMaterialBlocks(prefix, size), keyBlocks);
  if (blocks <= 0) return undefined;
  let hash = FNV_OFFSET;
  if (prefix.kind === 'text') {
    const end = blocks * blockChars(size);
    for (let i = 0; i < end; i++) hash = Math.imul(hash ^ prefix.text.charCodeAt(i), FNV_PRIME);
  } else if (prefix.kind === 'tokens') {
    const end = blocks * size.blockTokens;
    for (let i = 0; i < end; i++) {
      const token = prefix.tokens[i];
      hash = Math.imul(hash ^ (token & 0xffff), FNV_PRIME);
      hash = Math.imul(hash ^ ((token >>> 16) & 0xffff), FNV_PRIME);
    }
  }
  return hash >>> 0;
}

/**
 * How much of a prompt the affinity key may depend on, under these settings: what the request
 * reader extracts. Without prefix affinity no prompt is read at all; pools the config names may
 * cut their cache in larger blocks than the default: enough for the largest.
 */
export function promptLimit(settings: PickerSettings): PrefixLimit {
  if (!(settings.weights.prefix > 0)) return prefixLimit([], 0);
  const sizes = [cacheBlockFor(settings, ''), ...Object.keys(settings.pools).map((pool) => cacheBlockFor(settings, pool))];
  const limit = prefixLimit(sizes, settings.prefix.keyBlocks);
  return settings.precise === undefined ? limit : { ...limit, whole: true };
}

/**
 * The tokens of the prompt's shared part, estimated (what the affinity key's owner may hold, in
 * the cost model): its whole blocks as extracted, or, when the extraction stopped at its limit,
 * the body's size in tokens (the shared part of a long prompt is most of its body).
 */
export function sharedTokensOf(
  settings: PickerSettings,
  pools: readonly PoolView[],
  prompt: PromptPrefix,
  limit: PrefixLimit,
  bodyBytes: number | undefined,
): number {
  const size = cacheBlockOf(settings, pools);
  const whole = wholeBlocks(prompt, size) * size.blockTokens;
  const full = prompt.kind === 'text' ? prompt.shared >= limit.chars : prompt.kind === 'tokens' && prompt.tokens.length >= limit.tokens;
  if (!full || bodyBytes === undefined) return whole;
  const fromBody = Math.floor(bodyBytes / size.charsPerToken / size.blockTokens) * size.blockTokens;
  return fromBody > whole ? fromBody : whole;
}

/** The affinity key of a prompt for a model served by `pools`, cut in their cache blocks. */
export function affinityKeyOf(settings: PickerSettings, pools: readonly PoolView[], prompt: PromptPrefix): number | undefined {
  return affinityKey(prompt, cacheBlockOf(settings, pools), settings.prefix.keyBlocks);
}

/**
 * The cache block of a model's pools. When they differ (rare: one model on servers configured
 * apart), the largest: a block whole at that size is whole on every one of them.
 */
function cacheBlockOf(settings: PickerSettings, pools: readonly PoolView[]): CacheBlockSize {
  let size = cacheBlockFor(settings, pools.length > 0 ? pools[0].name : '');
  for (let i = 1; i < pools.length; i++) {
    const other = cacheBlockFor(settings, pools[i].name);
    if (blockChars(other) > blockChars(size)) size = other;
  }
  return size;
}
