// Precise prefix matching for one request: its prompt tokenized as the model server will
// (file-tokenizer.ts), cut in the servers' blocks and looked up in the index their KV events keep
// (prefix-index.ts). What routing asks before a pick, and tells after it. Servers whose events are
// not trusted now get no precise figure: the picker places them as it would without events
// (approximate affinity), and the pick is counted by how its primary was judged.

import { isRoutable } from '../endpoints/model.js';
import type { PoolView } from '../endpoints/model.js';
import type { PrefixMatch } from '../picker/scorer-table.js';
import type { PromptTokenizer } from './file-tokenizer.js';
import type { PrefixIndex } from './prefix-index.js';
import type { PromptSource } from './prompt-source.js';

/** How a pick's primary was judged: from its own events, or without them (approximate affinity, load). */
export type PickMode = 'precise' | 'approximate';

export interface PrecisePrefixObserver {
  picked?(pool: string, mode: PickMode): void;
}

export class PrecisePrefix {
  constructor(
    private readonly index: PrefixIndex,
    private readonly tokenizer: PromptTokenizer,
    private readonly observer: PrecisePrefixObserver = {},
    private readonly now: () => number = () => performance.now(),
  ) {}

  /** The prompt's matches on the candidates of `pools`; undefined when no candidate's events are trusted, or the prompt cannot be tokenized here. */
  match(pools: readonly PoolView[], source: PromptSource | undefined, adapter: string | undefined): PrefixMatch | undefined {
    if (source === undefined) return undefined;
    const candidates: string[] = [];
    let trusted = false;
    for (const pool of pools)
      for (const endpoint of pool.endpoints) {
        if (!isRoutable(endpoint)) continue;
        candidates.push(endpoint.address);
        if (!trusted && this.index.phase(endpoint.address) === 'trusted') trusted = true;
      }
    // Tokenizing costs the most here: not for a pick no trusted server can use.
    if (!trusted) return undefined;
    const tokens = this.tokenizer.tokenize(source);
    if (tokens === undefined) return undefined;
    return this.index.match(tokens, adapter, candidates, this.now());
  }

  /** The pick went to `primary` (of `pool`), judged with `match` (absent: without events). */
  routed(primary: string, pool: string, match: PrefixMatch | undefined): void {
    const precise = match !== undefined && match.matchedTokens(primary) !== undefined;
    if (precise) this.index.routed(primary, match, this.now());
    this.observer.picked?.(pool, precise ? 'precise' : 'approximate');
  }
}
