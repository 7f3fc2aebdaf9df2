// A request's prompt as the model server will tokenize it, read from an OpenAI-style body: the chat
// messages with what the chat template reads beside them, a completion's text, or token ids. Pure.
// Only read when precise prefix matching is on (then the body's strings are read whole): the
// tokenizer (tokenizer.ts) turns it into the token ids the server caches.

export type PromptSource =
  | {
      readonly kind: 'chat';
      readonly messages: readonly unknown[];
      /** vLLM's defaults: a generation prompt is added unless the last message is continued. */
      readonly addGenerationPrompt: boolean;
      readonly continueFinalMessage: boolean;
      /** What else the chat template may read (`tools`, `documents`, `chat_template_kwargs`' keys). */
      readonly extra: Readonly<Record<string, unknown>>;
    }
  /** A completion prompt: tokenized with the tokenizer's special tokens (BOS) as vLLM does. */
  | { readonly kind: 'text'; readonly text: string }
  /** A completion prompt given as token ids: the ids are the prompt. */
  | { readonly kind: 'tokens'; readonly tokens: readonly number[] };

function isRecord(value: unknown): value is Record<string, unknown> {
  return typeof value === 'object' && value !== null && !Array.isArray(value);
}

/** The prompt of a chat or completions body; undefined for anything else (embeddings of several inputs, Responses…). */
export function promptSourceOf(body: Readonly<Record<string, unknown>>): PromptSource | undefined {
  if (Array.isArray(body.messages)) {
    const continueFinalMessage = body.continue_final_message === true;
    const extra: Record<string, unknown> = {};
    if (body.tools !== undefined && body.tools !== null) extra.tools = body.tools;
    if (body.documents !== undefined && body.documents !== null) extra.documents = body.documents;
    if (isRecord(body.chat_template_kwargs)) Object.assign(extra, body.chat_template_kwargs);
    // A request that brings its own template is tokenized by it on the server, not by ours.
    if (typeof body.chat_template === 'string') return undefined;
    return {
      kind: 'chat',
      messages: body.messages,
      addGenerationPrompt: typeof body.add_generation_prompt === 'boolean' ? body.add_generation_prompt : !continueFinalMessage,
      continueFinalMessage,
      extra,
    };
  }
  const prompt = body.prompt;
  if (typeof prompt === 'string') return { kind: 'text', text: prompt };
  if (Array.isArray(prompt) && prompt.length > 0) {
    if (typeof prompt[0] === 'number' && prompt.every((t) => typeof t === 'number' && Number.isInteger(t)))
      return { kind: 'tokens', tokens: prompt as number[] };
    // A batch of prompts: the first decides where the request goes, as in the affinity key.
    if (prompt.length === 1 && typeof prompt[0] === 'string') return { kind: 'text', text: prompt[0] };
  }
  return undefined;
}
