// Token usage as model servers report it, read from an answer without parsing the whole answer:
//
// - Chat and legacy completions: `usage: {prompt_tokens, completion_tokens,
//   prompt_tokens_details: {cached_tokens}}` at the top of a JSON answer, or in the last chunk of a
//   stream that asked for it (`stream_options.include_usage`; that chunk has `choices: []`).
// - Responses API: `usage: {input_tokens, output_tokens, input_tokens_details: {cached_tokens}}`
//   in the response object (the JSON answer, or `response.completed` / `response.incomplete`).
//
// `findUsage` looks for the last `"usage"` key whose value is an object and parses that object
// only: the answer around it (the generated text, perhaps megabytes of it) is never decoded into
// objects. In well-formed JSON a `"usage"` that is string content has its quotes escaped, so a
// raw `"usage"` preceded by an unescaped quote position is a key. The last one is taken because
// servers put usage after the output; a nested object of the same name inside a tool's JSON
// arguments is a string there, hence escaped.

import { BACKSLASH, CLOSE_OBJECT, COLON, OPEN_OBJECT, QUOTE, isJsonWhitespace } from './json-bytes.js';

export interface TokenUsage {
  /** Prompt (input) tokens, cached ones included. */
  readonly input: number;
  /** Generated (output) tokens, reasoning tokens included. */
  readonly output: number;
  /** Prompt tokens served from the server's prefix cache, when it says. */
  readonly cached: number | undefined;
}

type JsonObject = Record<string, unknown>;

function asObject(value: unknown): JsonObject | undefined {
  return typeof value === 'object' && value !== null && !Array.isArray(value) ? (value as JsonObject) : undefined;
}

function count(value: unknown): number | undefined {
  return typeof value === 'number' && Number.isInteger(value) && value >= 0 ? value : undefined;
}

/** A usage object of either API, or undefined when it is not one (missing or malformed counts). */
export function usageOf(value: unknown): TokenUsage | undefined {
  const usage = asObject(value);
  if (usage === undefined) return undefined;
  const chat = count(usage['prompt_tokens']) !== undefined || count(usage['completion_tokens']) !== undefined;
  const input = count(chat ? usage['prompt_tokens'] : usage['input_tokens']);
  // Embeddings report prompt tokens only: their output is vectors, zero tokens.
  const output = count(chat ? (usage['completion_tokens'] ?? 0) : usage['output_tokens']);
  if (input === undefined || output === undefined) return undefined;
  const details = asObject(chat ? usage['prompt_tokens_details'] : usage['input_tokens_details']);
  return { input, output, cached: count(details?.['cached_tokens']) };
}

const USAGE_KEY = Buffer.from('"usage"');

/** True when the quote at `at` is escaped (preceded by an odd run of backslashes). */
function isEscaped(bytes: Buffer, at: number): boolean {
  let slashes = 0;
  for (let i = at - 1; i >= 0 && bytes[i] === BACKSLASH; i--) slashes++;
  return slashes % 2 === 1;
}

/** End (exclusive) of the object that opens at `start`, or -1 when it is cut short. */
function objectEnd(bytes: Buffer, start: number): number {
  let depth = 0;
  let inString = false;
  for (let i = start; i < bytes.length; i++) {
    const c = bytes[i];
    if (inString) {
      if (c === BACKSLASH) i++;
      else if (c === QUOTE) inString = false;
    } else if (c === QUOTE) inString = true;
    else if (c === OPEN_OBJECT) depth++;
    else if (c === CLOSE_OBJECT && --depth === 0) return i + 1;
  }
  return -1;
}

function skipWhitespace(bytes: Buffer, i: number): number {
  while (i < bytes.length && isJsonWhitespace(bytes[i])) i++;
  return i;
}

/**
 * The usage in a JSON text (a whole answer, or one SSE data payload), if it reports one. Bytes are
 * scanned directly (one code path, so the scan stays monomorphic on the per-answer hot path); a
 * string (an SSE payload, once per stream) is encoded first.
 */
export function findUsage(json: Buffer | string): TokenUsage | undefined {
  const bytes = typeof json === 'string' ? Buffer.from(json) : json;
  let from = bytes.length;
  while (from > 0) {
    const key = bytes.lastIndexOf(USAGE_KEY, from - 1);
    if (key < 0) return undefined;
    from = key;
    if (isEscaped(bytes, key)) continue; // a quote inside a string, not a key
    let i = skipWhitespace(bytes, key + USAGE_KEY.length);
    if (bytes[i] !== COLON) continue;
    i = skipWhitespace(bytes, i + 1);
    if (bytes[i] !== OPEN_OBJECT) continue; // `"usage": null` in the chunks before the last
    const end = objectEnd(bytes, i);
    if (end < 0) return undefined;
    try {
      return usageOf(JSON.parse(bytes.toString('utf8', i, end)));
    } catch {
      return undefined;
    }
  }
  return undefined;
}
