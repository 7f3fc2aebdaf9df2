// Pure reading of an OpenAI-compatible request body: which model, streamed or not, and the
// prompt-prefix material for cache-affine picking (bounded; hashed by the picker, never logged).
// Long strings are never decoded whole (inspect/json-bounded.ts). We never re-serialise the body; it reaches the model server byte-identical (unless usage
// injection, opt-in per pool, splices `stream_options.include_usage` into it: usage-injection.ts).

import { GatewayError } from '../errors/gateway-error.js';
import { errorMessage } from '../util/error-message.js';
import type { PrefixLimit, PromptPrefix } from '../routing/affinity-key.js';
import { parseBoundedJson } from '../inspect/json-bounded.js';
import { promptPrefixOf } from './prompt-prefix.js';
import { promptSourceOf } from '../kv-cache/prompt-source.js';
import type { PromptSource } from '../kv-cache/prompt-source.js';
import type { StreamUsageFacts } from './usage-injection.js';

export interface InferenceRequest extends StreamUsageFacts {
  readonly model: string;
  readonly stream: boolean;
  /** The leading part of the prompt's shared part, at most `limit` long (see prompt-prefix.ts). */
  readonly prompt: PromptPrefix;
  /** The whole prompt as the server will tokenize it, when `limit.whole` asks for it (precise mode). */
  readonly source?: PromptSource;
}

/** The top-level string that must reach us whole: everything else is read for at most `limit.chars`. */
const WHOLE_STRINGS: ReadonlySet<string> = new Set(['model']);

/**
 * The body as a value whose strings are cut at `limit.chars` (prompt-prefix.ts reads no further):
 * a long prompt is checked byte by byte but never decoded whole. Bodies the byte grammar turns
 * down go to JSON.parse, whose verdict and words the client gets.
 */
function parseRequestJson(body: Buffer, limit: PrefixLimit): unknown {
  // Precise mode tokenizes the whole prompt: every string is read whole then.
  const maxStringChars = limit.whole === true ? Number.POSITIVE_INFINITY : Math.max(0, limit.chars);
  const bounded = parseBoundedJson(body, { maxStringChars, wholeTopLevelStrings: WHOLE_STRINGS });
  if (bounded !== undefined) return bounded.value;
  try {
    return JSON.parse(body.toString('utf8'));
  } catch (err) {
    throw new GatewayError('invalid_json', `request body is not valid JSON: ${errorMessage(err)}`, { cause: err });
  }
}

/** `limit`: how much of the prompt the affinity key may depend on (Routing.promptLimit). */
export function readInferenceRequest(body: Buffer, limit: PrefixLimit): InferenceRequest {
  if (body.length === 0)
    throw new GatewayError('missing_body', 'request body is empty; send an OpenAI-style JSON object with a "model" field');
  const parsed = parseRequestJson(body, limit);
  if (typeof parsed !== 'object' || parsed === null || Array.isArray(parsed)) {
    throw new GatewayError('invalid_json', 'request body must be a JSON object');
  }
  const record = parsed as Record<string, unknown>;
  if (!('model' in record) || record.model === undefined || record.model === null) {
    throw new GatewayError('missing_model', 'request body has no "model" field; name the model to use', { details: { param: 'model' } });
  }
  if (typeof record.model !== 'string' || record.model.trim() === '') {
    throw new GatewayError('invalid_model', '"model" must be a non-empty string', { details: { param: 'model' } });
  }
  const options = record.stream_options;
  const include = typeof options === 'object' && options !== null ? (options as Record<string, unknown>).include_usage : undefined;
  return {
    model: record.model,
    stream: record.stream === true,
    streamOptions:
      options === undefined
        ? 'absent'
        : options === null
          ? 'null'
          : typeof options === 'object' && !Array.isArray(options)
            ? 'object'
            : 'other',
    includeUsage: typeof include === 'boolean' ? include : undefined,
    prompt: promptPrefixOf(record, limit),
    ...(limit.whole === true ? optionalSource(promptSourceOf(record)) : {}),
  };
}

function optionalSource(source: PromptSource | undefined): { source?: PromptSource } {
  return source === undefined ? {} : { source };
}
