// Prefix affinity as routing applies it: the prompt cut in the cache blocks of the pool that
// serves the model (picker.pools.<pool>.blockTokens / charsPerToken, else picker.prefix's).
import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { EndpointStore } from '../../../src/endpoints/store.js';
import type { ObservedPool } from '../../../src/endpoints/model.js';
import { LoadTracker } from '../../../src/picker/load-tracker.js';
import { DEFAULT_PICKER_SETTINGS } from '../../../src/picker/settings.js';
import type { PickerSettings } from '../../../src/picker/settings.js';
import { readInferenceRequest } from '../../../src/request/openai-request.js';
import { StoreRouting } from '../../../src/routing/routing.js';

const pool = (name: string, model: string, base: number): ObservedPool => ({
  name,
  models: [model],
  endpoints: Array.from({ length: 4 }, (_, i) => ({
    id: `${name}-${i}`,
    address: `10.0.${base}.${i + 1}:8000`,
    state: 'Ready',
    reason: '',
  })),
});

/** Small blocks for `fine` (4 tokens × 2 chars = 8 characters), the default (64) elsewhere. */
const SETTINGS: PickerSettings = {
  ...DEFAULT_PICKER_SETTINGS,
  metrics: { ...DEFAULT_PICKER_SETTINGS.metrics, enabled: false },
  pools: { fine: { blockTokens: 4, charsPerToken: 2 } },
};

function routing(): StoreRouting {
  const store = new EndpointStore(['static'], { threshold: 3, baseMs: 10_000, maxMs: 60_000 });
  store.replaceAll('static', [pool('fine', 'small-blocks', 1), pool('coarse', 'default-blocks', 2)]);
  store.markSynced('static');
  // A random start that moves on every pick: without affinity, ties rotate over the replicas.
  let draw = 0;
  return new StoreRouting(store, new LoadTracker(), { fallbacks: 0, picker: SETTINGS, random: () => (draw++ % 4) / 4 + 0.01 });
}

/** Where 8 identical requests go, one at a time (each released before the next). */
function destinations(r: StoreRouting, model: string, content: string): Set<string> {
  const body = Buffer.from(JSON.stringify({ model, messages: [{ role: 'user', content }] }));
  const seen = new Set<string>();
  for (let i = 0; i < 8; i++) {
    const routed = r.route({ model, prompt: readInferenceRequest(body, r.promptLimit).prompt });
    seen.add(routed.endpoints[0].address);
    r.release(routed);
  }
  return seen;
}

describe('routing: affinity in the cache blocks of the pool', () => {
  it('a 30-character prompt is 4 whole blocks in a pool of 8-character blocks: one owner', () => {
    assert.equal(destinations(routing(), 'small-blocks', 'what is the capital of France').size, 1);
  });

  it('the same prompt is no whole block of the default 64 characters: placed by load alone', () => {
    assert.equal(destinations(routing(), 'default-blocks', 'what is the capital of France').size, 4);
  });

  it('a prompt of two whole default blocks has an owner there too', () => {
    assert.equal(destinations(routing(), 'default-blocks', 'x'.repeat(130)).size, 1);
  });

  it('the reader extracts enough for the largest block of any configured pool', () => {
    const r = routing();
    assert.deepEqual(r.promptLimit, { chars: 16 * 64, tokens: 16 * 16 });
    const off = new StoreRouting(new EndpointStore(['s'], { threshold: 3, baseMs: 1, maxMs: 1 }), new LoadTracker(), {
      fallbacks: 0,
      picker: { ...SETTINGS, weights: { ...SETTINGS.weights, prefix: 0 } },
    });
    assert.deepEqual(off.promptLimit, { chars: 0, tokens: 0 }, 'no affinity: nothing of the prompt is read');
  });
});
