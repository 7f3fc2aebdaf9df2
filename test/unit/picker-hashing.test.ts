// Prompt block hashing (what the affinity key is made of) and rendezvous hashing (who owns a key).
import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { promptBlockHashes } from '../../src/picker/prompt-hash.js';
import { hashAddress, rendezvousOwner, rendezvousWeight } from '../../src/picker/rendezvous.js';

const opts = { blockChars: 8, maxBlocks: 4 };
const chat = (...contents: Array<[string, unknown]>) => ({ model: 'm', messages: contents.map(([role, content]) => ({ role, content })) });

describe('promptBlockHashes', () => {
  it('chains blocks: a shared prefix gives equal leading hashes, then they differ', () => {
    const a = promptBlockHashes(chat(['system', 'shared system prompt'], ['user', 'first question']), opts);
    const b = promptBlockHashes(chat(['system', 'shared system prompt'], ['user', 'other thing']), opts);
    assert.equal(a.length, 4);
    // "system␟shared system prompt␟user␟" is 34 units: the first 4 blocks of 8 are shared.
    assert.deepEqual(a, b);
    const c = promptBlockHashes(chat(['system', 'shared'], ['user', 'earlier turn'], ['user', 'q']), { blockChars: 8, maxBlocks: 16 });
    const d = promptBlockHashes(chat(['system', 'shared'], ['user', 'another turn'], ['user', 'q']), { blockChars: 8, maxBlocks: 16 });
    assert.equal(c[0], d[0]);
    assert.notEqual(c.at(-1), d.at(-1));
  });

  it('leaves out the newest message of a conversation: requests sharing a system prompt share every hash', () => {
    const a = promptBlockHashes(chat(['system', 'short system prompt'], ['user', 'first question, long enough to fill blocks']), opts);
    const b = promptBlockHashes(chat(['system', 'short system prompt'], ['user', 'second question']), opts);
    assert.deepEqual(a, b);
    assert.notDeepEqual(a, promptBlockHashes(chat(['system', 'other system prompt'], ['user', 'second question']), opts));
  });

  it('a single message is hashed whole', () => {
    assert.notDeepEqual(
      promptBlockHashes(chat(['user', 'one question']), opts),
      promptBlockHashes(chat(['user', 'another question']), opts),
    );
  });

  it('the same prompt always hashes the same (so every replica agrees)', () => {
    const body = chat(['system', 'be nice'], ['user', 'hello there, how are you']);
    assert.deepEqual(promptBlockHashes(body, opts), promptBlockHashes(structuredClone(body), opts));
  });

  it('piece boundaries matter: "ab"+"c" differs from "a"+"bc"', () => {
    assert.notDeepEqual(
      promptBlockHashes(chat(['user', 'ab'], ['user', 'c']), opts),
      promptBlockHashes(chat(['user', 'a'], ['user', 'bc']), opts),
    );
  });

  it('reads at most maxBlocks blocks, however long the prompt', () => {
    assert.equal(promptBlockHashes(chat(['user', 'x'.repeat(100_000)]), opts).length, 4);
  });

  it('a short prompt still has a key (its partial block)', () => {
    assert.equal(promptBlockHashes({ prompt: 'hi' }, opts).length, 1);
  });

  const shapes: ReadonlyArray<{ name: string; body: Record<string, unknown>; blocks: number }> = [
    { name: 'completion prompt string', body: { prompt: 'Say this is a test please' }, blocks: 4 },
    { name: 'completion prompt list: the first counts', body: { prompt: ['Say this is a test please', 'other'] }, blocks: 4 },
    { name: 'token ids', body: { prompt: [1, 2, 3, 4, 5, 6] }, blocks: 2 },
    {
      name: 'content parts',
      body: chat([
        'user',
        [
          { type: 'text', text: 'look at this picture' },
          { type: 'image_url', image_url: { url: 'https://x/y.png' } },
        ],
      ]),
      blocks: 4,
    },
    { name: 'Responses API input string', body: { input: 'Tell me a story' }, blocks: 2 },
    {
      name: 'Responses API instructions and messages',
      body: { instructions: 'be brief', input: [{ role: 'user', content: 'hi' }] },
      blocks: 3,
    },
    { name: 'no prompt at all', body: { model: 'm' }, blocks: 0 },
    { name: 'messages of the wrong type are skipped', body: { messages: [42, null, 'x'] }, blocks: 0 },
  ];
  for (const s of shapes) it(s.name, () => assert.equal(promptBlockHashes(s.body, opts).length, s.blocks));

  it('images change the key', () => {
    const withImage = (url: string) => chat(['user', [{ type: 'image_url', image_url: { url } }]]);
    assert.notDeepEqual(promptBlockHashes(withImage('https://a/1.png'), opts), promptBlockHashes(withImage('https://a/2.png'), opts));
  });

  it('no blocks when hashing is off', () => {
    assert.deepEqual(promptBlockHashes({ prompt: 'x' }, { blockChars: 8, maxBlocks: 0 }), []);
  });
});

describe('rendezvous hashing', () => {
  const endpoints = Array.from({ length: 10 }, (_, i) => `10.0.0.${i + 1}:8000`);
  const hashes = endpoints.map(hashAddress);

  it('weights are deterministic and distinct across endpoints', () => {
    assert.equal(rendezvousWeight(42, hashes[0]), rendezvousWeight(42, hashes[0]));
    assert.equal(new Set(hashes.map((h) => rendezvousWeight(42, h))).size, hashes.length);
  });

  it('keys spread evenly over the endpoints', () => {
    const counts = new Array<number>(endpoints.length).fill(0);
    for (let key = 0; key < 10_000; key++) counts[rendezvousOwner(Math.imul(key, 2654435761) >>> 0, hashes)]++;
    // 1,000 expected each; allow ±20 %.
    for (const c of counts) assert.ok(c > 800 && c < 1200, `uneven spread: ${counts.join(', ')}`);
  });

  it('removing an endpoint moves only its keys; adding one takes keys only for itself', () => {
    const without = hashes.filter((_, i) => i !== 3);
    const withoutNames = endpoints.filter((_, i) => i !== 3);
    for (let key = 0; key < 2000; key++) {
      const before = endpoints[rendezvousOwner(key, hashes)];
      const after = withoutNames[rendezvousOwner(key, without)];
      if (before !== endpoints[3]) assert.equal(after, before, `key ${key} moved`);
    }
  });

  it('no endpoints: no owner', () => assert.equal(rendezvousOwner(1, []), -1));
});
