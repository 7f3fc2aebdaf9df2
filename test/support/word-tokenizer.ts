// A small word-level tokenizer written in a model's own file format (tokenizer.json and
// tokenizer_config.json with a chat template): enough for the in-process tokenizer to load and to
// tokenize exactly, and for a test to give a precise-mode config real files to read.
import { writeFile } from 'node:fs/promises';
import { join } from 'node:path';

const WORDS = [
  '[UNK]',
  'hello',
  'world',
  'again',
  ',',
  '!',
  'system',
  'user',
  'assistant',
  'be',
  'brief',
  'and',
  'exact',
  'what',
  'is',
  'new',
  '?',
];
export const WORD_VOCAB: Readonly<Record<string, number>> = Object.fromEntries(WORDS.map((w, i) => [w, i + 3]));
const added = ['<s>', '<|end|>', '<|role|>'].map((content, id) => ({
  id,
  content,
  single_word: false,
  lstrip: false,
  rstrip: false,
  normalized: false,
  special: true,
}));
export const WORD_TOKENIZER = {
  version: '1.0',
  added_tokens: added,
  normalizer: { type: 'Lowercase' },
  pre_tokenizer: { type: 'Whitespace' },
  post_processor: {
    type: 'TemplateProcessing',
    single: [{ SpecialToken: { id: '<s>', type_id: 0 } }, { Sequence: { id: 'A', type_id: 0 } }],
    pair: [],
    special_tokens: { '<s>': { id: '<s>', ids: [0], tokens: ['<s>'] } },
  },
  decoder: null,
  model: { type: 'WordLevel', vocab: WORD_VOCAB, unk_token: '[UNK]' },
};
const TEMPLATE =
  "{{ bos_token }}{% for m in messages %}<|role|>{{ m['role'] }} {{ m['content'] }}{{ eos_token }}{% endfor %}{% if add_generation_prompt %}<|role|>assistant{% endif %}";
export const WORD_TOKENIZER_CONFIG = { bos_token: '<s>', eos_token: { content: '<|end|>' }, chat_template: TEMPLATE };

/** Writes the tokenizer's files into `dir` (which must exist). */
export async function writeWordTokenizer(dir: string): Promise<void> {
  await writeFile(join(dir, 'tokenizer.json'), JSON.stringify(WORD_TOKENIZER));
  await writeFile(join(dir, 'tokenizer_config.json'), JSON.stringify(WORD_TOKENIZER_CONFIG));
}
