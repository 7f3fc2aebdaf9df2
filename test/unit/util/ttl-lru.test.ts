import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { TtlLru } from '../../../src/util/ttl-lru.js';
import type { EvictionReason } from '../../../src/util/ttl-lru.js';

function lru(capacity: number, ttlMs: number): { map: TtlLru<string>; clock: { now: number }; evicted: EvictionReason[] } {
  const clock = { now: 0 };
  const evicted: EvictionReason[] = [];
  return {
    map: new TtlLru<string>(
      capacity,
      ttlMs,
      () => clock.now,
      (reason) => evicted.push(reason),
    ),
    clock,
    evicted,
  };
}

describe('TtlLru', () => {
  it('forgets the least recently used entry past its capacity, and counts it', () => {
    const { map, evicted } = lru(2, 1000);
    map.set('a', 'A');
    map.set('b', 'B');
    assert.equal(map.get('a'), 'A', 'reading a makes b the least recently used');
    map.set('c', 'C');
    assert.equal(map.get('b'), undefined);
    assert.equal(map.get('a'), 'A');
    assert.equal(map.get('c'), 'C');
    assert.equal(map.size, 2);
    assert.deepEqual(evicted, ['capacity']);
  });

  it('an entry expires ttl after its last use, not after it was written', () => {
    const { map, clock, evicted } = lru(10, 1000);
    map.set('a', 'A');
    clock.now = 900;
    assert.equal(map.get('a'), 'A');
    clock.now = 1800;
    assert.equal(map.get('a'), 'A', 'used at 900: alive until 1900');
    clock.now = 2800;
    assert.equal(map.get('a'), undefined);
    assert.equal(map.size, 0);
    assert.deepEqual(evicted, ['ttl']);
  });

  it('a write sweeps the expired entries from the front, and only them', () => {
    const { map, clock, evicted } = lru(100, 1000);
    for (let i = 0; i < 50; i++) map.set(`old-${i}`, 'x');
    clock.now = 600;
    map.set('young', 'y');
    clock.now = 1200;
    map.set('new', 'z');
    assert.equal(map.size, 2, 'the 50 old entries expired at 1000 and were swept');
    assert.equal(evicted.filter((r) => r === 'ttl').length, 50);
    assert.equal(map.get('young'), 'y');
  });

  it('rewriting a key replaces its value and does not grow the map', () => {
    const { map } = lru(2, 1000);
    map.set('a', 'A');
    map.set('a', 'A2');
    map.set('b', 'B');
    assert.equal(map.size, 2);
    assert.equal(map.get('a'), 'A2');
  });
});
