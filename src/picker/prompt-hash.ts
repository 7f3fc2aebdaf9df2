// Prompt prefix hashing for cache affinity. The prompt's shared part (chat messages, completion
// prompt, Responses input) is fed, piece by piece, through a streaming 32-bit FNV-1a hash cut into blocks
// of `blockChars` characters; block i's hash chains block i-1's, so two prompts share the hash of
// block i exactly when they share their first i blocks (up to collisions). Only the first
// `maxBlocks` blocks are read: the affinity key needs no more, and a huge prompt costs no more
// than a short one. The text is only hashed: nothing here keeps, returns or logs it.
//
// In a conversation the last message is the new turn: no server has it cached, and it differs from
// request to request, so it is left out whenever earlier messages exist. What remains (system
// prompt, earlier turns) is what requests share and what a server's prefix cache holds.

export interface PromptHashOptions {
  /** Characters per block (UTF-16 code units). */
  readonly blockChars: number;
  /** Blocks hashed at most. */
  readonly maxBlocks: number;
}

const FNV_OFFSET = 0x811c9dc5;
const FNV_PRIME = 0x01000193;
/** Separates pieces (role from content, message from message) so `ab`+`c` ≠ `a`+`bc`. */
const SEPARATOR = 0x1f;

class BlockHasher {
  readonly blocks: number[] = [];
  private hash = FNV_OFFSET;
  private inBlock = 0;

  constructor(private readonly options: PromptHashOptions) {}

  get full(): boolean {
    return this.blocks.length >= this.options.maxBlocks;
  }

  private unit(code: number): void {
    this.hash = Math.imul(this.hash ^ (code & 0xffff), FNV_PRIME) >>> 0;
    if (++this.inBlock === this.options.blockChars) {
      this.blocks.push(this.hash);
      // The next block starts from this one's hash: the chain.
      this.inBlock = 0;
    }
  }

  text(value: string): void {
    for (let i = 0; i < value.length && !this.full; i++) this.unit(value.charCodeAt(i));
    if (!this.full) this.unit(SEPARATOR);
  }

  number(value: number): void {
    if (this.full) return;
    this.unit(value & 0xffff);
    this.unit((value >>> 16) & 0xffff);
  }

  /** A last partial block counts too: identical short prompts still share a key. */
  finish(): readonly number[] {
    if (this.inBlock > 0 && !this.full) this.blocks.push(this.hash);
    return this.blocks;
  }
}

function isRecord(value: unknown): value is Record<string, unknown> {
  return typeof value === 'object' && value !== null && !Array.isArray(value);
}

/** Message content: a string, or parts (`{type:'text', text}`, images by URL, ...). */
function feedContent(h: BlockHasher, content: unknown): void {
  if (typeof content === 'string') return h.text(content);
  if (!Array.isArray(content)) return;
  for (const part of content) {
    if (h.full) return;
    if (typeof part === 'string') h.text(part);
    else if (isRecord(part)) {
      if (typeof part.text === 'string') h.text(part.text);
      else if (isRecord(part.image_url) && typeof part.image_url.url === 'string') h.text(part.image_url.url);
      else if (typeof part.type === 'string') h.text(part.type);
    }
  }
}

function feedMessages(h: BlockHasher, all: readonly unknown[]): void {
  const messages = all.length > 1 ? all.slice(0, -1) : all;
  for (const message of messages) {
    if (h.full) return;
    if (!isRecord(message)) continue;
    if (typeof message.role === 'string') h.text(message.role);
    feedContent(h, message.content);
  }
}

/** A completion/embedding prompt: a string, a list of strings (first), or token ids. */
function feedPrompt(h: BlockHasher, prompt: unknown): void {
  if (typeof prompt === 'string') return h.text(prompt);
  if (!Array.isArray(prompt) || prompt.length === 0) return;
  const first: unknown = prompt[0];
  if (typeof first === 'string') return h.text(first);
  if (typeof first === 'number') {
    for (const token of prompt) if (typeof token === 'number') h.number(token);
    return;
  }
  if (Array.isArray(first)) for (const token of first) if (typeof token === 'number') h.number(token);
}

/**
 * Chained block hashes of the prompt in an OpenAI-style request body, at most `maxBlocks` of them;
 * empty when the body carries no prompt we recognise.
 */
export function promptBlockHashes(body: Readonly<Record<string, unknown>>, options: PromptHashOptions): readonly number[] {
  if (options.maxBlocks <= 0 || options.blockChars <= 0) return [];
  const h = new BlockHasher(options);
  if (Array.isArray(body.messages)) feedMessages(h, body.messages);
  else if (body.prompt !== undefined) feedPrompt(h, body.prompt);
  else {
    // Responses API: instructions come first in the model's context, then the input.
    if (typeof body.instructions === 'string') h.text(body.instructions);
    if (Array.isArray(body.input) && body.input.some(isRecord)) feedMessages(h, body.input);
    else if (body.input !== undefined) feedPrompt(h, body.input);
  }
  return h.finish();
}
