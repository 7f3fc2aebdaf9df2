// The model's tokenizer in process (src/kv-cache/file-tokenizer.ts), on a small word-level
// tokenizer in the model files' own format (test/support/word-tokenizer.ts): the chat template rendered as vLLM does,
// the ids equal to tokenizing the rendered text whole (pieces between added tokens are cached),
// completion text with the tokenizer's BOS, and clear errors for unusable files.
// Exactness against a real vLLM server: test/e2e/real-vllm-precise.test.ts.
import assert from 'node:assert/strict';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { FileTokenizer, TokenizerFilesError } from '../../../src/kv-cache/file-tokenizer.js';
import {
  WORD_TOKENIZER as TOKENIZER,
  WORD_TOKENIZER_CONFIG as CONFIG,
  WORD_VOCAB as vocab,
  writeWordTokenizer,
} from '../../support/word-tokenizer.js';

const ids = (text: string): number[] =>
  text
    .toLowerCase()
    .split(/(<s>|<\|end\|>|<\|role\|>)|\s+|(?=[,!?])|(?<=[,!?])/)
    .filter((t) => t !== undefined && t !== '')
    .map((t) => (t === '<s>' ? 0 : t === '<|end|>' ? 1 : t === '<|role|>' ? 2 : vocab[t]));

describe('the model’s tokenizer in process', () => {
  let dir: string;
  let tokenizer: FileTokenizer;
  before(async () => {
    dir = await mkdtemp(join(tmpdir(), 'tokenizer-'));
    await writeWordTokenizer(dir);
    tokenizer = await FileTokenizer.load(dir);
  });
  after(async () => {
    await rm(dir, { recursive: true, force: true });
  });

  it('renders the chat template with the special tokens and the generation prompt, and tokenizes it', () => {
    const long = 'be brief and exact, '.repeat(20);
    const messages = [
      { role: 'system', content: long },
      { role: 'user', content: 'hello world!' },
    ];
    const expected = ids(`<s><|role|>system ${long}<|end|><|role|>user hello world!<|end|><|role|>assistant`);
    const chat = { kind: 'chat', messages, addGenerationPrompt: true, continueFinalMessage: false, extra: {} } as const;
    assert.deepEqual(tokenizer.tokenize(chat), expected);
    assert.deepEqual(tokenizer.tokenize(chat), expected, 'the second time from the cache of pieces, the same ids');
    assert.deepEqual(
      tokenizer.tokenize({ ...chat, addGenerationPrompt: false }),
      ids(`<s><|role|>system ${long}<|end|><|role|>user hello world!<|end|>`),
    );
  });

  it('tokenizes a completion prompt with its BOS, and passes token ids through', () => {
    assert.deepEqual(tokenizer.tokenize({ kind: 'text', text: 'Hello again' }), [0, vocab.hello, vocab.again]);
    assert.deepEqual(tokenizer.tokenize({ kind: 'tokens', tokens: [7, 8, 9] }), [7, 8, 9]);
  });

  it('says nothing for messages its template refuses', async () => {
    const strict = await mkdtemp(join(tmpdir(), 'tokenizer-'));
    try {
      await writeFile(join(strict, 'tokenizer.json'), JSON.stringify(TOKENIZER));
      await writeFile(
        join(strict, 'tokenizer_config.json'),
        JSON.stringify({ ...CONFIG, chat_template: "{{ raise_exception('no system role') }}" }),
      );
      const refusing = await FileTokenizer.load(strict);
      assert.equal(
        refusing.tokenize({ kind: 'chat', messages: [], addGenerationPrompt: true, continueFinalMessage: false, extra: {} }),
        undefined,
      );
    } finally {
      await rm(strict, { recursive: true, force: true });
    }
  });

  it('takes chat_template.jinja over tokenizer_config.json’s template; without any, chat prompts are not tokenized here', async () => {
    const other = await mkdtemp(join(tmpdir(), 'tokenizer-'));
    try {
      await writeFile(join(other, 'tokenizer.json'), JSON.stringify(TOKENIZER));
      await writeFile(join(other, 'tokenizer_config.json'), JSON.stringify({ bos_token: '<s>' }));
      const none = await FileTokenizer.load(other);
      assert.equal(none.hasChatTemplate, false);
      const chat = {
        kind: 'chat',
        messages: [{ role: 'user', content: 'hello' }],
        addGenerationPrompt: true,
        continueFinalMessage: false,
        extra: {},
      } as const;
      assert.equal(none.tokenize(chat), undefined);
      await writeFile(join(other, 'chat_template.jinja'), '{% for m in messages %}{{ m.content }}{% endfor %}');
      assert.deepEqual((await FileTokenizer.load(other)).tokenize(chat), [vocab.hello]);
    } finally {
      await rm(other, { recursive: true, force: true });
    }
  });

  it('refuses unusable files with the path and the reason', async () => {
    const bad = await mkdtemp(join(tmpdir(), 'tokenizer-'));
    try {
      await assert.rejects(
        FileTokenizer.load(bad),
        (err: unknown) => err instanceof TokenizerFilesError && err.message.includes(join(bad, 'tokenizer.json')),
      );
      await writeFile(join(bad, 'tokenizer.json'), '{not json');
      await writeFile(join(bad, 'tokenizer_config.json'), '{}');
      await assert.rejects(FileTokenizer.load(bad), /tokenizer\.json is not JSON/);
    } finally {
      await rm(bad, { recursive: true, force: true });
    }
  });
});
