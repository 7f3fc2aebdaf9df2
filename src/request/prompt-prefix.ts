// The prompt-prefix material of an OpenAI-style request: the leading part of the prompt's shared
// part, as much as the affinity key can depend on (routing/affinity-key.ts cuts it in cache blocks).
//
// In a conversation the last message is the new turn: no server has it cached, and it differs
// from request to request, so it is left out whenever earlier messages exist. What remains (system
// prompt, earlier turns) is what requests share and what a server's prefix cache holds. A single
// message (or a completion prompt) is the whole shared part.
//
// The affinity key is cut from the conversation's opening instead (routing/affinity-key.ts): the
// messages up to its first user message, and up to the first answer after it when that is all
// that makes a whole block. Every later turn of the conversation starts with the same opening, so
// its key, and its owner on every llm-extproc replica, stays put while the history grows; a key
// cut from the shared part would change whenever the history crossed a block.

import type { PrefixLimit, PromptPrefix } from '../routing/affinity-key.js';
import { NO_PROMPT } from '../routing/affinity-key.js';

/** Follows every piece, so piece boundaries change the key. */
const SEPARATOR = '\u001f';

/** Collects text pieces up to a character limit, and where its parts end. */
class TextPrefix {
  private readonly pieces: string[] = [];
  length = 0;
  /** Where the shared part, the opening and the first exchange end (characters of the text). */
  shared = -1;
  opening = -1;
  exchange = -1;

  constructor(private readonly limit: number) {}

  get full(): boolean {
    return this.length >= this.limit;
  }

  add(value: string): void {
    if (this.full) return;
    const room = this.limit - this.length;
    const piece = value.length < room ? value + SEPARATOR : value.slice(0, room);
    this.pieces.push(piece);
    this.length += piece.length;
  }

  result(): PromptPrefix {
    if (this.length === 0) return NO_PROMPT;
    const shared = this.shared < 0 ? this.length : this.shared;
    const opening = this.opening < 0 ? shared : this.opening;
    const exchange = this.exchange < 0 ? opening : this.exchange;
    return { kind: 'text', text: this.pieces.join(''), shared, opening, exchange };
  }
}

function isRecord(value: unknown): value is Record<string, unknown> {
  return typeof value === 'object' && value !== null && !Array.isArray(value);
}

/** Message content: a string, or parts (`{type:'text', text}`, images by URL, ...). */
function addContent(out: TextPrefix, content: unknown): void {
  if (typeof content === 'string') return out.add(content);
  if (!Array.isArray(content)) return;
  for (const part of content) {
    if (out.full) return;
    if (typeof part === 'string') out.add(part);
    else if (isRecord(part)) {
      if (typeof part.text === 'string') out.add(part.text);
      else if (isRecord(part.image_url) && typeof part.image_url.url === 'string') out.add(part.image_url.url);
      else if (typeof part.type === 'string') out.add(part.type);
    }
  }
}

/**
 * The messages' pieces: the shared part (all but the last message, when there are several) and
 * the opening (through the first user message) and first exchange (through the first answer after
 * it), whichever reaches further, with where each ends.
 */
function addMessages(out: TextPrefix, all: readonly unknown[]): void {
  const shared = all.length > 1 ? all.length - 1 : all.length;
  for (let i = 0; i < all.length && !out.full; i++) {
    if (i === shared) out.shared = out.length;
    // The last message is read only for the opening: the new turn of a conversation already opened is not.
    if (i >= shared && out.opening >= 0) break;
    const message = all[i];
    if (!isRecord(message)) continue;
    if (typeof message.role === 'string') out.add(message.role);
    addContent(out, message.content);
    if (out.opening < 0) {
      if (message.role === 'user') out.opening = out.length;
    } else if (out.exchange < 0 && message.role === 'assistant') out.exchange = out.length;
  }
}

/**
 * A completion/embedding prompt: a string, a list of strings (the first), or token ids. Text goes
 * into `out` (the result is then `out`'s); token ids are their own result.
 */
function promptOf(prompt: unknown, out: TextPrefix, limit: PrefixLimit): PromptPrefix {
  if (typeof prompt === 'string') out.add(prompt);
  if (!Array.isArray(prompt) || prompt.length === 0) return out.result();
  const first: unknown = prompt[0];
  if (typeof first === 'string') {
    out.add(first);
    return out.result();
  }
  const ids: unknown[] = typeof first === 'number' ? prompt : Array.isArray(first) ? first : [];
  const tokens: number[] = [];
  for (let i = 0; i < ids.length && tokens.length < limit.tokens; i++) {
    const id = ids[i];
    if (typeof id === 'number') tokens.push(id);
  }
  return tokens.length === 0 ? out.result() : { kind: 'tokens', tokens };
}

/** The prompt-prefix material of a parsed request body; `none` when it carries no prompt we recognise. */
export function promptPrefixOf(body: Readonly<Record<string, unknown>>, limit: PrefixLimit): PromptPrefix {
  if (limit.chars <= 0) return NO_PROMPT;
  const out = new TextPrefix(limit.chars);
  if (Array.isArray(body.messages)) addMessages(out, body.messages);
  else if (body.prompt !== undefined) return promptOf(body.prompt, out, limit);
  else {
    // Responses API: instructions come first in the model's context, then the input.
    if (typeof body.instructions === 'string') out.add(body.instructions);
    if (Array.isArray(body.input) && body.input.some(isRecord)) addMessages(out, body.input);
    else if (body.input !== undefined) return promptOf(body.input, out, limit);
  }
  return out.result();
}
