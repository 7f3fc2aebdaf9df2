// Affinity keys on whole cache blocks (what the affinity key is made of) and rendezvous hashing (who owns a key).
import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import fc from 'fast-check';
import { affinityKey, blockChars, NO_PROMPT, prefixLimit, wholeBlocks } from '../../../src/routing/affinity-key.js';
import type { CacheBlockSize } from '../../../src/picker/scorer-table.js';
import { promptPrefixOf } from '../../../src/request/prompt-prefix.js';
import { hashAddress, rendezvousOwner, rendezvousWeight } from '../../../src/picker/rendezvous.js';

const chat = (...contents: Array<[string, unknown]>) => ({ model: 'm', messages: contents.map(([role, content]) => ({ role, content })) });

/** Blocks of 8 characters (2 tokens × 4): small enough to count by hand. */
const SMALL: CacheBlockSize = { blockTokens: 2, charsPerToken: 4 };
const LIMIT = prefixLimit([SMALL], 4);
const key = (body: Record<string, unknown>, size: CacheBlockSize = SMALL, keyBlocks = 4): number | undefined =>
  affinityKey(promptPrefixOf(body, prefixLimit([size], keyBlocks)), size, keyBlocks);

describe('affinity keys on whole cache blocks', () => {
  // Each row: the shared part as the server caches it ("role␟content␟" per message, the last
  // message of a conversation left out), its whole 8-character blocks, whether it has a key.
  const rows: ReadonlyArray<{ name: string; body: Record<string, unknown>; whole: number }> = [
    { name: 'two words: "user␟hi␟" is 8 units, exactly one block', body: chat(['user', 'hi']), whole: 1 },
    { name: 'one word: "user␟h␟" is shorter than a block: no key', body: chat(['user', 'h']), whole: 0 },
    { name: 'a completion prompt of 6 units: no key', body: { prompt: 'hello' }, whole: 0 },
    { name: 'a completion prompt of 16 units: two blocks', body: { prompt: 'hello, world!!!' }, whole: 2 },
    {
      name: 'only the last message is new: "system␟x␟" (9 units) is one whole block',
      body: chat(['system', 'x'], ['user', 'a long question']),
      whole: 1,
    },
    { name: 'a long prompt counts at most keyBlocks blocks', body: chat(['user', 'x'.repeat(10_000)]), whole: 4 },
    { name: 'token ids: 5 ids are two whole blocks of 2', body: { prompt: [1, 2, 3, 4, 5] }, whole: 2 },
    { name: 'token ids: 1 id is no block', body: { prompt: [7] }, whole: 0 },
    { name: 'no prompt at all', body: { model: 'm' }, whole: 0 },
    { name: 'messages of the wrong type are skipped', body: { messages: [42, null, 'x'] }, whole: 0 },
  ];
  for (const row of rows) {
    it(row.name, () => {
      const prefix = promptPrefixOf(row.body, LIMIT);
      assert.equal(wholeBlocks(prefix, SMALL), row.whole);
      assert.equal(affinityKey(prefix, SMALL, 4) === undefined, row.whole === 0);
    });
  }

  it('prompts sharing N ≥ keyBlocks whole blocks share the key, whatever follows', () => {
    const shared = 'S'.repeat(32 - 'system␟'.length);
    const a = key(chat(['system', shared + 'first tenant'], ['user', 'q1']));
    const b = key(chat(['system', shared + 'another tail, much longer than the first'], ['user', 'q2']));
    assert.notEqual(a, undefined);
    assert.equal(a, b);
    // One character inside the first 4 blocks changes it.
    assert.notEqual(key(chat(['system', 'T' + shared.slice(1) + 'first tenant'], ['user', 'q1'])), a);
  });

  it('equal openings of N < keyBlocks whole blocks share the key; the partial block after them does not count', () => {
    // "system␟" + 23 + "␟" + "user␟on␟" = 39 units: 4 whole blocks, and 7 units of a fifth that is not whole.
    const a = key(chat(['system', 'twenty-three chars long'], ['user', 'on']));
    const b = key(chat(['system', 'twenty-three chars long'], ['user', 'oN']));
    assert.notEqual(a, undefined);
    assert.equal(a, b, 'the change is in the partial fifth block');
    assert.notEqual(key(chat(['system', 'twenty-thRee chars long'], ['user', 'on'])), a, 'the change is in the third block');
  });

  it("every turn of a conversation has its first turn's key, while its history grows", () => {
    // The opening ("system␟be brief␟user␟tell me about whole blocks␟") holds whole blocks itself.
    const turns: Array<[string, string]> = [
      ['system', 'be brief'],
      ['user', 'tell me about whole blocks'],
    ];
    const first = key(chat(...turns));
    assert.notEqual(first, undefined);
    for (let turn = 2; turn <= 6; turn++) {
      turns.push(['assistant', `answer number ${turn - 1}, long enough to cross a block or two`], ['user', `question ${turn}`]);
      assert.equal(key(chat(...turns)), first, `turn ${turn}`);
    }
    // Another conversation behind the same system prompt opens differently within the key's 4 blocks: its own key.
    assert.notEqual(key(chat(['system', 'be brief'], ['user', 'what are whole blocks?'])), first);
  });

  it('an opening shorter than a block: the turns after the first share the key of the first exchange', () => {
    const opening: Array<[string, string]> = [['user', 'hi']]; // "user␟hi␟": exactly one block of 8
    const tiny = { blockTokens: 4, charsPerToken: 4 }; // blocks of 16: "user␟hi␟" holds none
    assert.equal(key(chat(...opening), tiny), undefined, 'the first turn has nothing to share: placed by load');
    const second = key(chat(...opening, ['assistant', 'hello, what can I do?'], ['user', 'explain blocks']), tiny);
    assert.notEqual(second, undefined);
    const third = key(
      chat(...opening, ['assistant', 'hello, what can I do?'], ['user', 'explain blocks'], ['assistant', 'they are…'], ['user', 'more']),
      tiny,
    );
    assert.equal(third, second);
    assert.notEqual(key(chat(...opening, ['assistant', 'hey! what now?'], ['user', 'explain blocks']), tiny), second, 'another exchange');
  });

  it("the owner is credited with the shared part, not the opening: a first turn's new message is not cached anywhere", () => {
    const body = chat(['system', 'x'.repeat(9)], ['user', 'y'.repeat(40)]); // "system␟" + 9 + "␟" = 17 units shared
    const prefix = promptPrefixOf(body, LIMIT);
    assert.equal(wholeBlocks(prefix, SMALL), 2);
    assert.notEqual(
      affinityKey(prefix, SMALL, 4),
      affinityKey(promptPrefixOf(chat(['system', 'x'.repeat(9)], ['user', 'z'.repeat(40)]), LIMIT), SMALL, 4),
    );
  });

  it("an opened conversation's new turn is not read at all", () => {
    const prefix = promptPrefixOf(chat(['user', 'first'], ['assistant', 'answer'], ['user', 'NEW TURN']), { chars: 1000, tokens: 100 });
    assert.equal(prefix.kind === 'text' && prefix.text.includes('NEW TURN'), false);
  });

  it('identical short prompts have no key at all (placed by load alone)', () => {
    for (const text of ['hi', 'hello', 'ok']) assert.equal(key(chat(['user', text]), { blockTokens: 16, charsPerToken: 4 }), undefined);
  });

  it('the block size and the estimate decide what is whole', () => {
    const body = chat(['user', 'x'.repeat(40)]); // 46 units
    const all = { chars: 1000, tokens: 100 };
    assert.equal(wholeBlocks(promptPrefixOf(body, all), { blockTokens: 16, charsPerToken: 4 }), 0);
    assert.equal(wholeBlocks(promptPrefixOf(body, all), { blockTokens: 4, charsPerToken: 4 }), 2);
    assert.equal(wholeBlocks(promptPrefixOf(body, all), { blockTokens: 4, charsPerToken: 2.5 }), 4);
    assert.equal(blockChars({ blockTokens: 16, charsPerToken: 4 }), 64);
  });

  it('the reader extracts only what the largest block size needs', () => {
    const limit = prefixLimit(
      [
        { blockTokens: 16, charsPerToken: 4 },
        { blockTokens: 32, charsPerToken: 3 },
      ],
      8,
    );
    assert.deepEqual(limit, { chars: 8 * 96, tokens: 8 * 32 });
    const prefix = promptPrefixOf(chat(['user', 'y'.repeat(100_000)]), limit);
    assert.equal(prefix.kind === 'text' ? prefix.text.length : -1, limit.chars);
  });

  it('the same prompt always has the same key (so every replica agrees)', () => {
    const body = chat(['system', 'be nice to everyone you meet'], ['user', 'hello there, how are you']);
    assert.equal(key(body), key(structuredClone(body)));
  });

  it('piece boundaries matter: "ab"+"c" differs from "a"+"bc"', () => {
    assert.notEqual(key(chat(['system', 'abcdefgh'], ['user', 'c'])), key(chat(['system', 'abcdefg'], ['user', 'hc'])));
  });

  it('content parts and images are part of the prefix', () => {
    const withImage = (url: string) => chat(['user', [{ type: 'image_url', image_url: { url } }]]);
    assert.notEqual(key(withImage('https://a/1.png')), key(withImage('https://a/2.png')));
    assert.equal(wholeBlocks(promptPrefixOf(chat(['user', [{ type: 'text', text: 'look at this' }, 'and this']]), LIMIT), SMALL), 3);
  });

  it('Responses API: instructions, then the input', () => {
    assert.notEqual(
      key({ instructions: 'be brief!', input: 'Tell me a story' }),
      key({ instructions: 'be long!!', input: 'Tell me a story' }),
    );
    assert.equal(wholeBlocks(promptPrefixOf({ input: [{ role: 'user', content: 'hi there' }] }, LIMIT), SMALL), 1);
  });

  it('no extraction, no key, when the limit is zero', () => {
    assert.deepEqual(promptPrefixOf({ prompt: 'x'.repeat(100) }, { chars: 0, tokens: 0 }), NO_PROMPT);
    assert.equal(affinityKey(promptPrefixOf({ prompt: 'x'.repeat(100) }, LIMIT), SMALL, 0), undefined);
  });
});

describe('affinity key properties', () => {
  const sizeArb = fc.record({ blockTokens: fc.integer({ min: 1, max: 8 }), charsPerToken: fc.constantFrom(1, 2, 2.5, 4) });
  const textArb = fc.string({ maxLength: 120 });

  it('a key exists exactly when the prefix holds a whole block', () => {
    fc.assert(
      fc.property(sizeArb, textArb, fc.integer({ min: 1, max: 8 }), (size, text, keyBlocks) => {
        const prefix = promptPrefixOf({ prompt: text }, prefixLimit([size], keyBlocks));
        const extracted = prefix.kind === 'text' ? prefix.text.length : 0;
        assert.equal(affinityKey(prefix, size, keyBlocks) !== undefined, extracted >= blockChars(size));
      }),
    );
  });

  it('prompts agreeing on their first keyBlocks whole blocks share the key, whatever follows', () => {
    fc.assert(
      fc.property(sizeArb, fc.integer({ min: 1, max: 6 }), textArb, textArb, (size, keyBlocks, tailA, tailB) => {
        const shared = 'p'.repeat(keyBlocks * blockChars(size));
        const a = key({ prompt: shared + tailA }, size, keyBlocks);
        assert.notEqual(a, undefined);
        assert.equal(a, key({ prompt: shared + tailB }, size, keyBlocks));
      }),
    );
  });

  it('a change inside the counted whole blocks changes the key (no collision on these)', () => {
    fc.assert(
      fc.property(sizeArb, fc.integer({ min: 1, max: 6 }), fc.nat(), (size, keyBlocks, at) => {
        const length = keyBlocks * blockChars(size);
        const base = 'q'.repeat(length);
        const i = at % length;
        const changed = base.slice(0, i) + 'Q' + base.slice(i + 1);
        assert.notEqual(key({ prompt: base }, size, keyBlocks), key({ prompt: changed }, size, keyBlocks));
      }),
    );
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
