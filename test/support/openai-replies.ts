// Deterministic OpenAI-compatible replies for the fake model server. Pure: the same server id,
// model and prompt always give the same bytes, so tests can compare what a model server sent with
// what the client received through Envoy, byte for byte.

import { createHash } from 'node:crypto';

/** Which OpenAI API a request path belongs to. */
export type ApiKind = 'chat' | 'completions' | 'embeddings' | 'responses';

/** Fixed creation time: real servers use the clock, but a clock breaks byte-for-byte comparisons. */
export const CREATED = 1_700_000_000;

export function apiKindOf(path: string): ApiKind | undefined {
  const pathname = path.split('?')[0];
  switch (pathname) {
    case '/v1/chat/completions':
      return 'chat';
    case '/v1/completions':
      return 'completions';
    case '/v1/embeddings':
      return 'embeddings';
    case '/v1/responses':
      return 'responses';
    default:
      return undefined;
  }
}

export interface InferenceRequest {
  readonly kind: ApiKind;
  /** `body.model`, or the server's first model when the client left it out (as vLLM does). */
  readonly model: string;
  /** All prompt text, joined; only used to vary the reply. */
  readonly prompt: string;
  /** Embeddings never stream, whatever the body says. */
  readonly stream: boolean;
  /** `stream_options.include_usage`: add a usage chunk before the terminator. */
  readonly includeUsage: boolean;
  /** Number of inputs for embeddings (one vector each). */
  readonly inputs: number;
}

export interface OpenAIErrorBody {
  readonly error: {
    readonly message: string;
    readonly type: string;
    readonly param: string | null;
    readonly code: string | number | null;
  };
}

export function openAIError(message: string, type: string, code: string | number | null = null): OpenAIErrorBody {
  return { error: { message, type, param: null, code } };
}

function isRecord(v: unknown): v is Record<string, unknown> {
  return typeof v === 'object' && v !== null && !Array.isArray(v);
}

/** Text found in a prompt-ish value: strings, arrays of them, and `text`/`content` fields of parts. */
function collectText(value: unknown): string[] {
  if (typeof value === 'string') return [value];
  if (Array.isArray(value)) return value.flatMap((v) => collectText(v));
  if (isRecord(value)) return [...collectText(value['content']), ...collectText(value['text'])];
  return [];
}

const PROMPT_FIELD: Record<ApiKind, string> = {
  chat: 'messages',
  completions: 'prompt',
  embeddings: 'input',
  responses: 'input',
};

/** Parses an inference request body, or returns the client-facing reason it is unusable. */
export function parseInferenceRequest(kind: ApiKind, body: Buffer, defaultModel: string): InferenceRequest | { readonly error: string } {
  let parsed: unknown;
  try {
    parsed = JSON.parse(body.toString('utf8'));
  } catch {
    return { error: 'request body is not valid JSON' };
  }
  if (!isRecord(parsed)) return { error: 'request body must be a JSON object' };
  const model = typeof parsed['model'] === 'string' && parsed['model'] !== '' ? parsed['model'] : defaultModel;
  const promptValue = parsed[PROMPT_FIELD[kind]];
  const streamOptions = parsed['stream_options'];
  return {
    kind,
    model,
    prompt: collectText(promptValue).join('\n'),
    stream: kind !== 'embeddings' && parsed['stream'] === true,
    includeUsage: isRecord(streamOptions) && streamOptions['include_usage'] === true,
    inputs: kind === 'embeddings' && Array.isArray(promptValue) ? Math.max(1, promptValue.length) : 1,
  };
}

function digest(...parts: string[]): string {
  return createHash('sha256').update(parts.join('\u0000')).digest('hex');
}

/** The assistant's answer: names the server and model and echoes the start of the prompt. */
export function replyText(serverId: string, model: string, prompt: string): string {
  const words = prompt.split(/\s+/).filter((w) => w !== '');
  const echo = words.length === 0 ? '(an empty prompt)' : words.slice(0, 8).join(' ');
  return `Hello from ${serverId} serving ${model}. You said: ${echo}`;
}

/** Splits text into word-ish tokens that concatenate back to the exact text. */
export function replyTokens(text: string): string[] {
  return text.match(/\S+\s*/g) ?? [text];
}

function countWords(text: string): number {
  return text.split(/\s+/).filter((w) => w !== '').length;
}

interface ReplyContext {
  readonly serverId: string;
  readonly req: InferenceRequest;
  readonly text: string;
  readonly tokens: readonly string[];
  readonly hash: string;
  readonly usage: { readonly prompt_tokens: number; readonly completion_tokens: number; readonly total_tokens: number };
}

function context(serverId: string, req: InferenceRequest): ReplyContext {
  const text = replyText(serverId, req.model, req.prompt);
  const tokens = replyTokens(text);
  const promptTokens = countWords(req.prompt);
  return {
    serverId,
    req,
    text,
    tokens,
    hash: digest(serverId, req.kind, req.model, req.prompt).slice(0, 24),
    usage: { prompt_tokens: promptTokens, completion_tokens: tokens.length, total_tokens: promptTokens + tokens.length },
  };
}

function embedding(ctx: ReplyContext, index: number): number[] {
  const bytes = createHash('sha256').update(`${ctx.hash}:${index}`).digest();
  return [...bytes.subarray(0, 8)].map((b) => Math.round((b / 255) * 1e6) / 1e6);
}

function responsesObject(ctx: ReplyContext, status: 'in_progress' | 'completed'): Record<string, unknown> {
  const done = status === 'completed';
  return {
    id: `resp_${ctx.hash}`,
    object: 'response',
    created_at: CREATED,
    status,
    model: ctx.req.model,
    output: done
      ? [
          {
            type: 'message',
            id: `msg_${ctx.hash}`,
            status: 'completed',
            role: 'assistant',
            content: [{ type: 'output_text', text: ctx.text, annotations: [] }],
          },
        ]
      : [],
    usage: done
      ? { input_tokens: ctx.usage.prompt_tokens, output_tokens: ctx.usage.completion_tokens, total_tokens: ctx.usage.total_tokens }
      : null,
  };
}

/** The non-streaming JSON answer. The server id is in the text (and `system_fingerprint`, but for the Responses API, which has none). */
export function jsonReply(serverId: string, req: InferenceRequest): Record<string, unknown> {
  const ctx = context(serverId, req);
  switch (req.kind) {
    case 'chat':
      return {
        id: `chatcmpl-${ctx.hash}`,
        object: 'chat.completion',
        created: CREATED,
        model: req.model,
        system_fingerprint: serverId,
        choices: [{ index: 0, message: { role: 'assistant', content: ctx.text }, logprobs: null, finish_reason: 'stop' }],
        usage: ctx.usage,
      };
    case 'completions':
      return {
        id: `cmpl-${ctx.hash}`,
        object: 'text_completion',
        created: CREATED,
        model: req.model,
        system_fingerprint: serverId,
        choices: [{ index: 0, text: ctx.text, logprobs: null, finish_reason: 'stop' }],
        usage: ctx.usage,
      };
    case 'embeddings':
      return {
        object: 'list',
        model: req.model,
        system_fingerprint: serverId,
        data: Array.from({ length: req.inputs }, (_, i) => ({ object: 'embedding', index: i, embedding: embedding(ctx, i) })),
        usage: { prompt_tokens: ctx.usage.prompt_tokens, total_tokens: ctx.usage.prompt_tokens },
      };
    case 'responses':
      return responsesObject(ctx, 'completed');
  }
}

export function modelsReply(serverId: string, models: readonly string[]): Record<string, unknown> {
  return {
    object: 'list',
    data: models.map((id) => ({ id, object: 'model', created: CREATED, owned_by: serverId })),
  };
}

/** One SSE event, framed: optional `event:` line, one `data:` line, blank line. */
export function sseEvent(data: string, event?: string): string {
  return `${event === undefined ? '' : `event: ${event}\n`}data: ${data}\n\n`;
}

export const SSE_DONE = sseEvent('[DONE]');

export interface StreamPlan {
  /** Framed events carrying the answer, in order. */
  readonly events: readonly string[];
  /**
   * What ends a healthy stream: `data: [DONE]` for chat/completions; for the Responses API, which
   * has no [DONE], the `response.completed` event.
   */
  readonly terminator: string;
}

/** The Responses API's message item, as its stream announces it and as it ends. */
function messageItem(ctx: ReplyContext, done: boolean): Record<string, unknown> {
  return {
    id: `msg_${ctx.hash}`,
    content: done ? [{ annotations: [], text: ctx.text, type: 'output_text' }] : [],
    role: 'assistant',
    status: done ? 'completed' : 'in_progress',
    type: 'message',
  };
}

/**
 * The Responses API's stream, in vLLM 0.32's order: the response created and in progress, the
 * message item and its text part added, one delta per token, the text, part and item done, then
 * `response.completed`. Each event names its type twice (the `event:` line and `type`).
 */
function responsesStream(ctx: ReplyContext): StreamPlan {
  let seq = 0;
  const at = { item_id: `msg_${ctx.hash}`, output_index: 0, content_index: 0 };
  const event = (type: string, fields: Record<string, unknown>): string =>
    sseEvent(JSON.stringify({ type, sequence_number: seq++, ...fields }), type);
  const events = [
    event('response.created', { response: responsesObject(ctx, 'in_progress') }),
    event('response.in_progress', { response: responsesObject(ctx, 'in_progress') }),
    event('response.output_item.added', { output_index: 0, item: messageItem(ctx, false) }),
    event('response.content_part.added', { ...at, part: { annotations: [], text: '', type: 'output_text' } }),
    ...ctx.tokens.map((delta) => event('response.output_text.delta', { ...at, delta })),
    event('response.output_text.done', { ...at, text: ctx.text }),
    event('response.content_part.done', { ...at, part: { annotations: [], text: ctx.text, type: 'output_text' } }),
    event('response.output_item.done', { output_index: 0, item: messageItem(ctx, true) }),
  ];
  return { events, terminator: event('response.completed', { response: responsesObject(ctx, 'completed') }) };
}

/**
 * The streaming answer, shaped as vLLM 0.32 sends it (test/e2e/vllm-drift.test.ts compares the
 * two). Chat and completions send chunk objects: for chat a role chunk first; one chunk per token,
 * the last one carrying `finish_reason`; the usage chunk (`choices: []`) only when the request
 * asked for it; then `[DONE]`. `system_fingerprint` is on the stream's last chunk only (the usage
 * chunk when there is one). The Responses API sends typed events. Embeddings have no streaming
 * form; they are planned like chat so SSE faults still apply.
 */
export function streamReply(serverId: string, req: InferenceRequest): StreamPlan {
  const ctx = context(serverId, req);
  if (req.kind === 'responses') return responsesStream(ctx);

  const completions = req.kind === 'completions';
  const base = {
    id: `${completions ? 'cmpl' : 'chatcmpl'}-${ctx.hash}`,
    object: completions ? 'text_completion' : 'chat.completion.chunk',
    created: CREATED,
    model: req.model,
  };
  const choice = (piece: string, finish: string | null): Record<string, unknown> =>
    completions
      ? { index: 0, text: piece, logprobs: null, finish_reason: finish }
      : { index: 0, delta: { content: piece }, logprobs: null, finish_reason: finish };
  const chunk = (choices: unknown[], extra: Record<string, unknown> = {}): string =>
    sseEvent(JSON.stringify({ ...base, choices, ...extra }));
  const fingerprint = { system_fingerprint: serverId };
  const last = ctx.tokens.length - 1;

  const events = [
    ...(completions ? [] : [chunk([{ index: 0, delta: { role: 'assistant', content: '' }, logprobs: null, finish_reason: null }])]),
    ...ctx.tokens.map((t, i) => (i < last ? chunk([choice(t, null)]) : chunk([choice(t, 'stop')], req.includeUsage ? {} : fingerprint))),
    ...(req.includeUsage ? [chunk([], { usage: ctx.usage, ...fingerprint })] : []),
  ];
  return { events, terminator: SSE_DONE };
}

export interface SseErrorSpec {
  readonly message: string;
  readonly type: string;
  readonly code: string | number | null;
}

/** A mid-stream error event as the API kind's servers emit it. */
export function sseErrorEvent(kind: ApiKind, err: SseErrorSpec): string {
  if (kind === 'responses') {
    return sseEvent(JSON.stringify({ type: 'error', code: err.code, message: err.message, param: null }), 'error');
  }
  return sseEvent(JSON.stringify(openAIError(err.message, err.type, err.code)));
}
