// The model's own tokenizer and chat template, in process: `tokenizer.json` and
// `tokenizer_config.json` (and `chat_template.jinja`, where the model keeps its template apart) read
// from a directory the chart mounts, run by @huggingface/tokenizers (pure JS) and
// @huggingface/jinja. The token ids are the ones the server caches: the chat template rendered as
// vLLM renders it (special tokens written by the template, none added), a completion's text with
// the tokenizer's special tokens. Both libraries are imported only here, and only when precise
// mode names a tokenizer directory.
//
// Speed: a long system prompt shared by many requests is tokenized once. The rendered text is cut
// at the tokenizer's added tokens (<|user|>, <|end|>…), which the tokenizer never merges with their
// neighbours anyway, and each piece's ids are kept in a bounded cache. Whether this tokenizer cuts
// that way is checked when it is loaded (the whole text and its pieces must give the same ids);
// where it does not, every prompt is tokenized whole.

import { readFile } from 'node:fs/promises';
import { join } from 'node:path';
import type { PromptSource } from './prompt-source.js';

export interface PromptTokenizer {
  /** The prompt's token ids as the server will cache them; undefined when this tokenizer cannot say (no chat template, a template error). */
  tokenize(prompt: PromptSource): readonly number[] | undefined;
}

/** Why a tokenizer directory cannot be used (said at start, with the path). */
export class TokenizerFilesError extends Error {
  override readonly name = 'TokenizerFilesError';
}

interface Encoder {
  encode(text: string, options: { add_special_tokens: boolean }): { ids: number[] };
}

interface Renderer {
  render(items: Record<string, unknown>): string;
}

/** Pieces at least this long are kept in the cache (shorter ones cost less to tokenize than to look up and keep). */
const CACHED_PIECE_CHARS = 64;
/** The cache holds at most this many characters of pieces (about 8 MiB of text, and its ids). */
const CACHE_CHARS = 4 * 1024 * 1024;

function isRecord(value: unknown): value is Record<string, unknown> {
  return typeof value === 'object' && value !== null && !Array.isArray(value);
}

/** A special token in tokenizer_config.json: a string, or an AddedToken object with its content. */
function tokenText(value: unknown): string | undefined {
  if (typeof value === 'string') return value;
  if (isRecord(value) && typeof value.content === 'string') return value.content;
  return undefined;
}

function escapeRegExp(text: string): string {
  return text.replace(/[.*+?^${}()|[\]\\]/g, '\\$&');
}

async function readJson(dir: string, name: string): Promise<Record<string, unknown>> {
  const path = join(dir, name);
  let text: string;
  try {
    text = await readFile(path, 'utf8');
  } catch (err) {
    throw new TokenizerFilesError(`cannot read ${path}: ${err instanceof Error ? err.message : String(err)}`);
  }
  let value: unknown;
  try {
    value = JSON.parse(text);
  } catch (err) {
    throw new TokenizerFilesError(`${path} is not JSON: ${err instanceof Error ? err.message : String(err)}`);
  }
  if (!isRecord(value)) throw new TokenizerFilesError(`${path} is not a JSON object`);
  return value;
}

/** The chat template: chat_template.jinja beside the tokenizer, else tokenizer_config.json's (a string, or named templates: `default`). */
async function chatTemplate(dir: string, config: Record<string, unknown>): Promise<string | undefined> {
  const file = await readFile(join(dir, 'chat_template.jinja'), 'utf8').catch(() => undefined);
  if (file !== undefined) return file;
  const value = config.chat_template;
  if (typeof value === 'string') return value;
  if (Array.isArray(value)) {
    const named = value.filter(isRecord);
    const chosen = named.find((t) => t.name === 'default') ?? named[0];
    if (chosen !== undefined && typeof chosen.template === 'string') return chosen.template;
  }
  return undefined;
}

export class FileTokenizer implements PromptTokenizer {
  private readonly cache = new Map<string, readonly number[]>();
  private cachedChars = 0;
  /** Splits text at the added tokens (capturing them); undefined = tokenize whole. */
  private splitter: RegExp | undefined;

  private constructor(
    private readonly encoder: Encoder,
    private readonly template: Renderer | undefined,
    /** Added tokens' ids by content. */
    private readonly added: ReadonlyMap<string, number>,
    /** What the template reads besides the request: bos_token, eos_token… */
    private readonly specials: Readonly<Record<string, string>>,
  ) {
    const contents = [...added.keys()].filter((c) => c !== '').sort((a, b) => b.length - a.length);
    this.splitter = contents.length === 0 ? undefined : new RegExp(`(${contents.map(escapeRegExp).join('|')})`);
  }

  /** What this process loaded for its config, by directory (see `shared`). */
  private static readonly loaded = new Map<string, Promise<FileTokenizer>>();

  /**
   * The tokenizer in `dir`, loaded once per process: the server's start checks the config
   * (check-config.ts: a config naming unusable files stops there), then runs with the very
   * tokenizer the check loaded (start-precise.ts).
   */
  static shared(dir: string): Promise<FileTokenizer> {
    let loading = FileTokenizer.loaded.get(dir);
    if (loading === undefined) {
      loading = FileTokenizer.load(dir);
      FileTokenizer.loaded.set(dir, loading);
      // A failed load is not kept: the files may be fixed, and the next start reads them again.
      loading.catch(() => FileTokenizer.loaded.delete(dir));
    }
    return loading;
  }

  /** Reads the tokenizer in `dir` and checks that it cuts at its added tokens as the cache assumes. */
  static async load(dir: string): Promise<FileTokenizer> {
    // Read together, refused in a fixed order: a directory missing both files always names tokenizer.json.
    const [tokenizerRead, configRead] = await Promise.allSettled([readJson(dir, 'tokenizer.json'), readJson(dir, 'tokenizer_config.json')]);
    if (tokenizerRead.status === 'rejected') throw tokenizerRead.reason;
    if (configRead.status === 'rejected') throw configRead.reason;
    const [tokenizerJson, config] = [tokenizerRead.value, configRead.value];
    const template = await chatTemplate(dir, config);
    const [tokenizers, jinja] = await Promise.all([
      import('@huggingface/tokenizers'),
      template === undefined ? undefined : import('@huggingface/jinja'),
    ]);
    // Its published types import their own files without extensions, which NodeNext resolution
    // cannot follow: the one constructor used is typed here.
    const { Tokenizer } = tokenizers as unknown as { Tokenizer: new (json: object, config: object) => Encoder };
    let encoder: Encoder;
    let renderer: Renderer | undefined;
    try {
      encoder = new Tokenizer(tokenizerJson, config);
      renderer = template === undefined || jinja === undefined ? undefined : new jinja.Template(template);
    } catch (err) {
      throw new TokenizerFilesError(`the tokenizer in ${dir} cannot be loaded: ${err instanceof Error ? err.message : String(err)}`);
    }
    const added = new Map<string, number>();
    for (const token of Array.isArray(tokenizerJson.added_tokens) ? tokenizerJson.added_tokens : []) {
      if (!isRecord(token) || typeof token.content !== 'string' || typeof token.id !== 'number') continue;
      // Tokens that strip or match whole words take their neighbours' spaces: cutting there would differ.
      if (token.lstrip === true || token.rstrip === true || token.single_word === true)
        return new FileTokenizer(encoder, renderer, new Map(), specialsOf(config)).checked();
      added.set(token.content, token.id);
    }
    return new FileTokenizer(encoder, renderer, added, specialsOf(config)).checked();
  }

  /** Whether it has a chat template (without one, chat prompts are not tokenized here). */
  get hasChatTemplate(): boolean {
    return this.template !== undefined;
  }

  tokenize(prompt: PromptSource): readonly number[] | undefined {
    if (prompt.kind === 'tokens') return prompt.tokens;
    if (prompt.kind === 'text') return this.encoder.encode(prompt.text, { add_special_tokens: true }).ids;
    if (this.template === undefined) return undefined;
    let text: string;
    try {
      text = this.template.render({
        ...this.specials,
        ...prompt.extra,
        messages: prompt.messages,
        add_generation_prompt: prompt.addGenerationPrompt,
        continue_final_message: prompt.continueFinalMessage,
      });
    } catch {
      // The template refused these messages (raise_exception): the server will answer 400.
      return undefined;
    }
    return this.encodeText(text);
  }

  /** The ids of rendered text, piece by piece where the cut is safe. */
  encodeText(text: string): readonly number[] {
    const splitter = this.splitter;
    if (splitter === undefined) return this.encoder.encode(text, { add_special_tokens: false }).ids;
    const out: number[] = [];
    const pieces = text.split(splitter);
    for (let i = 0; i < pieces.length; i++) {
      const piece = pieces[i];
      if (piece === '') continue;
      // split() with a capturing group puts the separators at the odd places.
      if (i % 2 === 1) out.push(this.added.get(piece) as number);
      else for (const id of this.piece(piece)) out.push(id);
    }
    return out;
  }

  private piece(text: string): readonly number[] {
    if (text.length < CACHED_PIECE_CHARS) return this.encoder.encode(text, { add_special_tokens: false }).ids;
    const hit = this.cache.get(text);
    if (hit !== undefined) {
      // Most recently used last: the oldest goes first when the cache is full.
      this.cache.delete(text);
      this.cache.set(text, hit);
      return hit;
    }
    const ids = this.encoder.encode(text, { add_special_tokens: false }).ids;
    if (text.length <= CACHE_CHARS / 4) {
      this.cache.set(text, ids);
      this.cachedChars += text.length;
      while (this.cachedChars > CACHE_CHARS) {
        const oldest = this.cache.keys().next().value as string;
        this.cache.delete(oldest);
        this.cachedChars -= oldest.length;
      }
    }
    return ids;
  }

  /** Cuts at added tokens only if that gives the ids tokenizing whole gives, on samples around every added token. */
  private checked(): this {
    if (this.splitter === undefined) return this;
    const words = ' Hello, world!\n  indented\ttext 123 über 日本語 ';
    const samples = [words, ...[...this.added.keys()].map((token) => `${words}${token}${words}${token}\n${words}`)];
    for (const sample of samples) {
      const whole = this.encoder.encode(sample, { add_special_tokens: false }).ids;
      const pieces = this.encodeText(sample);
      if (whole.length !== pieces.length || whole.some((id, i) => id !== pieces[i])) {
        this.splitter = undefined;
        break;
      }
    }
    this.cache.clear();
    this.cachedChars = 0;
    return this;
  }
}

/** The special tokens a chat template reads by name (transformers passes the same). */
function specialsOf(config: Record<string, unknown>): Record<string, string> {
  const out: Record<string, string> = {};
  for (const name of ['bos_token', 'eos_token', 'unk_token', 'pad_token', 'sep_token', 'cls_token', 'mask_token']) {
    const text = tokenText(config[name]);
    if (text !== undefined) out[name] = text;
  }
  return out;
}
