// The rule of when to ask for a scavenge (src/util/external-garbage.ts), on scripted readings of
// V8's external memory. What a real scavenge does with real Buffers is in
// test/unit/entry/process-settings.test.ts, and the server's wiring in test/e2e/process.test.ts.

import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { ExternalGarbage } from '../../../src/util/external-garbage.js';

const KiB = 1024;
const MiB = 1024 * KiB;

/** A trigger over a scripted external-memory reading whose scavenges free what the script says is dead. */
function bed() {
  const state = { external: 2 * MiB, live: 2 * MiB, looks: 0, scavenged: 0, queued: [] as Array<() => void> };
  const garbage = new ExternalGarbage({
    lookEveryBytes: 256 * KiB,
    growthBytes: 2 * MiB,
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
  /** A read of `bytes` whose Buffer dies when its stream ends (kept: they stay alive). */
  const read = (bytes: number, kept = false): void => {
    state.external += bytes;
    if (kept) state.live += bytes;
    garbage.read(bytes);
  };
  /** One stream that reads `bytes` in 64 KiB reads and ends; the event loop turns after it. */
  const stream = (bytes: number, kept = false): void => {
    for (let left = bytes; left > 0; left -= 64 * KiB) read(Math.min(64 * KiB, left), kept);
    garbage.streamEnded();
  };
  const turn = (): void => {
    for (const task of state.queued.splice(0)) task();
  };
  return { state, garbage, read, stream, turn };
}

void describe('ExternalGarbage', () => {
  void it('asks for one scavenge, after the stream that ended, once dead Buffers grew past the budget, and none before', () => {
    const { state, garbage, stream, turn } = bed();
    // The low point is learnt at a stream's end, with that stream's Buffers still counted: the
    // first prompt's 1 MiB is in it, so 2 MiB of growth over it is the third prompt's end.
    stream(MiB);
    turn();
    stream(MiB);
    turn();
    assert.equal(state.scavenged, 0, '2 MiB dead, 1 MiB over the low point');
    stream(MiB);
    assert.equal(state.scavenged, 0, 'not while the stream that tipped it is still being handled');
    garbage.streamEnded();
    assert.equal(state.queued.length, 1, 'one scavenge asked for, however many streams end before it runs');
    turn();
    assert.equal(state.scavenged, 1);
    assert.equal(state.external, state.live, 'the dead Buffers are freed');
  });

  void it('never scavenges while a stream is still reading: its body is alive, and a scavenge would promote it', () => {
    const { state, read, turn } = bed();
    for (let i = 0; i < 1024; i++) {
      read(64 * KiB);
      turn();
    }
    assert.equal(state.scavenged, 0, '64 MiB read by a stream that has not ended');
  });

  void it('keeps dead Buffers within the budget and a prompt through 100 prompts of 1 MiB, one at a time', () => {
    const { state, stream, turn } = bed();
    let highest = 0;
    for (let prompt = 0; prompt < 100; prompt++) {
      stream(MiB);
      highest = Math.max(highest, state.external - state.live);
      turn();
    }
    assert.ok(highest <= 3 * MiB, `at most ${highest / MiB} MiB dead at once`);
    assert.ok(state.scavenged >= 30 && state.scavenged <= 35, `${state.scavenged} scavenges for 100 MiB of prompts: one per 3 prompts`);
  });

  void it('looks at external memory once per 256 KiB read, not per stream: small requests cost an addition and a comparison', () => {
    const { state, stream } = bed();
    for (let i = 0; i < 10_000; i++) stream(200);
    assert.equal(state.looks, Math.floor((10_000 * 200) / (256 * KiB)));
  });

  void it('does not scavenge again and again for Buffers that stay alive: the low point moves up with them', () => {
    const { state, stream, turn } = bed();
    // 40 prompts of 1 MiB whose bodies stay alive (held by requests still in flight).
    for (let prompt = 0; prompt < 40; prompt++) {
      stream(MiB, true);
      turn();
    }
    assert.ok(state.scavenged <= 20, `${state.scavenged} scavenges while 40 MiB of live bodies arrived`);
  });
});
