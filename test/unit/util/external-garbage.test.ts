// The rule of when to ask for a scavenge (src/util/external-garbage.ts), on hand-made readings of
// V8's external memory. What a real scavenge does with real Buffers is in
// test/unit/entry/process-settings.test.ts.

import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { ExternalGarbage } from '../../../src/util/external-garbage.js';

const KiB = 1024;
const MiB = 1024 * KiB;

/** A trigger over a scripted external-memory reading whose scavenges free what the script says is dead. */
function bed(options: { lookEveryBytes?: number; growthBytes?: number } = {}) {
  const state = { external: 2 * MiB, live: 2 * MiB, looks: 0, scavenged: 0, queued: [] as Array<() => void> };
  const garbage = new ExternalGarbage({
    lookEveryBytes: options.lookEveryBytes ?? 256 * KiB,
    growthBytes: options.growthBytes ?? 2 * MiB,
    externalBytes: () => {
      state.looks++;
      return state.external;
    },
    scavenge: () => {
      state.scavenged++;
      state.external = state.live;
    },
    later: (task) => void state.queued.push(task),
  });
  /** A read of `bytes` that leaves `bytes` of dead Buffers (a socket read). */
  const read = (bytes: number): void => {
    state.external += bytes;
    garbage.read(bytes);
  };
  const runQueued = (): void => {
    for (const task of state.queued.splice(0)) task();
  };
  return { state, garbage, read, runQueued };
}

void describe('ExternalGarbage', () => {
  void it('asks for one scavenge, after the read in hand, once dead Buffers grow past the budget, and none before', () => {
    const { state, read, runQueued } = bed();
    for (let i = 0; i < 31; i++) read(64 * KiB); // 1.94 MiB of reads: under the 2 MiB budget
    runQueued();
    assert.equal(state.scavenged, 0);
    for (let i = 0; i < 8; i++) read(64 * KiB);
    assert.equal(state.scavenged, 0, 'not during the read that tipped it: that read still holds its Buffers');
    assert.equal(state.queued.length, 1, 'one scavenge asked for, however many reads follow before it runs');
    runQueued();
    assert.equal(state.scavenged, 1);
    assert.equal(state.external, state.live, 'the dead Buffers are freed');
  });

  void it('keeps dead Buffers near the budget through 100 prompts of 1 MiB: a scavenge per 2–3 MiB of them', () => {
    const { state, read, runQueued } = bed();
    let highest = 0;
    for (let prompt = 0; prompt < 100; prompt++) {
      for (let i = 0; i < 16; i++) {
        read(64 * KiB);
        highest = Math.max(highest, state.external - state.live);
      }
      runQueued(); // the prompt answered: the event loop turns
    }
    // The scavenge runs when the event loop turns, after the prompt in hand: at most the budget and one prompt.
    assert.ok(
      highest <= 2 * MiB + 256 * KiB + 1 * MiB,
      `at most the budget, a look's reads and a prompt were dead at once (${highest / MiB} MiB)`,
    );
    assert.ok(state.scavenged >= 30 && state.scavenged <= 55, `${state.scavenged} scavenges for 100 MiB of reads`);
  });

  void it('looks at external memory once per 256 KiB read, not per read: small requests cost an addition each', () => {
    const { state, read } = bed();
    for (let i = 0; i < 10_000; i++) read(200); // 2 MB of small reads
    assert.equal(state.looks, Math.floor((10_000 * 200) / (256 * KiB)));
  });

  void it('does not scavenge again and again for Buffers that are alive (bodies in flight): the low point moves up with them', () => {
    const { state, read, runQueued } = bed();
    // 40 prompts of 1 MiB held in flight at once: their bytes stay alive through every scavenge.
    for (let i = 0; i < 40 * 16; i++) {
      state.live += 64 * KiB;
      read(64 * KiB);
      runQueued();
    }
    // Each scavenge frees nothing; the next waits for another 2 MiB of growth: 20 for 40 MiB, not one per look.
    assert.ok(state.scavenged <= 20, `${state.scavenged} scavenges while 40 MiB of live bodies arrived`);
  });
});
