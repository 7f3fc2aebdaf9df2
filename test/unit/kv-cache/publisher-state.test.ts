// Whether a server's KV events can be trusted (src/kv-cache/publisher-state.ts): the state machine
// as a table of inputs and what each must do, episodes reported once.
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { PublisherState } from '../../../src/kv-cache/publisher-state.js';
import type { PublisherPhase, Verdict } from '../../../src/kv-cache/publisher-state.js';

type Input =
  | { batch: number; at?: number; cleared?: boolean }
  | { disconnect: true; at?: number }
  | { connect: true }
  | { bad: true; at?: number }
  | { expect: true; at: number }
  | { tick: number };

interface Row {
  readonly name: string;
  readonly inputs: readonly Input[];
  /** The verdict of the last input (unset fields: false / absent). */
  readonly last: Partial<Verdict>;
  readonly phase: PublisherPhase;
  /** Episodes reported over all the inputs, in order. */
  readonly episodes?: readonly string[];
  readonly recovered?: number;
}

const TIMINGS = { silenceMs: 5000, rebuildMs: 10_000 };

function run(inputs: readonly Input[]): { state: PublisherState; verdicts: Verdict[] } {
  const state = new PublisherState(TIMINGS);
  const verdicts: Verdict[] = [];
  for (const input of inputs) {
    if ('batch' in input) verdicts.push(state.batch(BigInt(input.batch), input.cleared ?? false, input.at ?? 0));
    else if ('disconnect' in input) verdicts.push(state.disconnected());
    else if ('connect' in input) {
      state.connected();
      verdicts.push({ drop: false, apply: false });
    } else if ('bad' in input) verdicts.push(state.badMessage(input.at ?? 0));
    else if ('expect' in input) state.expectPublish(input.at);
    else verdicts.push(state.tick(input.tick));
  }
  return { state, verdicts };
}

const ROWS: Row[] = [
  { name: 'a fresh engine seen from its first batch is trusted', inputs: [{ batch: 0 }], last: { apply: true }, phase: 'trusted' },
  { name: 'contiguous batches stay trusted', inputs: [{ batch: 0 }, { batch: 1 }, { batch: 2 }], last: { apply: true }, phase: 'trusted' },
  {
    name: 'joining late (first batch > 0): rebuilding, not an episode',
    inputs: [{ batch: 40 }],
    last: { apply: true },
    phase: 'rebuilding',
  },
  {
    name: 'joined late, trusted after rebuildMs, without a recovery (nothing was lost)',
    inputs: [{ batch: 40, at: 0 }, { batch: 41, at: 4000 }, { tick: 10_000 }],
    last: {},
    phase: 'trusted',
  },
  {
    name: 'a gap drops and rebuilds',
    inputs: [{ batch: 0 }, { batch: 1 }, { batch: 5 }],
    last: { drop: true, apply: true, episode: 'gap' },
    phase: 'rebuilding',
    episodes: ['gap'],
  },
  {
    name: 'a restart seen from its first batch (seq back to 0): dropped, trusted at once, reported',
    inputs: [{ batch: 0 }, { batch: 1 }, { batch: 0 }],
    last: { drop: true, apply: true, episode: 'restart' },
    phase: 'trusted',
    episodes: ['restart'],
  },
  {
    name: 'a restart whose first batches were missed: dropped, rebuilding',
    inputs: [{ batch: 0 }, { batch: 1 }, { batch: 2 }, { batch: 1 }],
    last: { drop: true, apply: true, episode: 'restart' },
    phase: 'rebuilding',
    episodes: ['restart'],
  },
  {
    name: 'a disconnect drops; nothing is applied',
    inputs: [{ batch: 0 }, { disconnect: true }],
    last: { drop: true, episode: 'disconnected' },
    phase: 'down',
    episodes: ['disconnected'],
  },
  {
    name: 'after a disconnect the next batch rebuilds; the episode is not reported again',
    inputs: [{ batch: 0 }, { disconnect: true }, { batch: 1 }, { disconnect: true }, { batch: 2 }],
    last: { apply: true },
    phase: 'rebuilding',
    episodes: ['disconnected'],
  },
  {
    name: 'rebuilt: trusted again after rebuildMs of batches, and the recovery is told',
    inputs: [{ batch: 0 }, { disconnect: true }, { batch: 1, at: 1000 }, { tick: 10_999 }, { tick: 11_000 }],
    last: { recovered: true },
    phase: 'trusted',
    episodes: ['disconnected'],
    recovered: 1,
  },
  {
    name: 'reconnected to a restarted engine from its first batch: trusted at once, recovered',
    inputs: [{ batch: 0 }, { batch: 1 }, { disconnect: true }, { batch: 0 }],
    last: { apply: true, recovered: true },
    phase: 'trusted',
    episodes: ['disconnected'],
    recovered: 1,
  },
  {
    name: 'a gap while rebuilding restarts the rebuild without a second report',
    inputs: [{ batch: 0 }, { batch: 3, at: 0 }, { batch: 9, at: 8000 }, { tick: 12_000 }],
    last: {},
    phase: 'rebuilding',
    episodes: ['gap'],
  },
  {
    name: 'AllBlocksCleared: the cache is empty, the index exact again',
    inputs: [{ batch: 0 }, { batch: 4 }, { batch: 5, cleared: true }],
    last: { apply: true, recovered: true },
    phase: 'trusted',
    episodes: ['gap'],
    recovered: 1,
  },
  {
    name: 'silent: requests that must publish, nothing within silenceMs',
    inputs: [{ batch: 0 }, { expect: true, at: 1000 }, { tick: 6000 }, { tick: 6001 }],
    last: { drop: true, episode: 'silent' },
    phase: 'down',
    episodes: ['silent'],
  },
  {
    name: 'not silent when a batch came (an idle server publishes nothing and is not silent)',
    inputs: [{ batch: 0 }, { expect: true, at: 1000 }, { batch: 1, at: 1200 }, { tick: 60_000 }],
    last: {},
    phase: 'trusted',
  },
  {
    name: 'a message that does not decode: its events are lost',
    inputs: [{ batch: 0 }, { bad: true }],
    last: { drop: true, episode: 'bad_message' },
    phase: 'rebuilding',
    episodes: ['bad_message'],
  },
  { name: 'before any batch there is nothing to lose', inputs: [{ disconnect: true }, { bad: true }], last: {}, phase: 'connecting' },
  { name: 'a handshake: subscribed, not yet trusted', inputs: [{ connect: true }], last: {}, phase: 'subscribed' },
  {
    name: 'subscribed, then the first batch from a fresh engine',
    inputs: [{ connect: true }, { batch: 0 }],
    last: { apply: true },
    phase: 'trusted',
  },
];

describe('a publisher’s state', () => {
  for (const row of ROWS) {
    it(row.name, () => {
      const { state, verdicts } = run(row.inputs);
      const last = verdicts.at(-1) as Verdict;
      assert.deepEqual(
        { drop: last.drop, apply: last.apply, episode: last.episode, recovered: last.recovered },
        { drop: row.last.drop ?? false, apply: row.last.apply ?? false, episode: row.last.episode, recovered: row.last.recovered },
      );
      assert.equal(state.phase, row.phase);
      assert.equal(state.trusted, row.phase === 'trusted');
      assert.deepEqual(
        verdicts.flatMap((v) => (v.episode === undefined ? [] : [v.episode])),
        row.episodes ?? [],
      );
      assert.equal(verdicts.filter((v) => v.recovered === true).length, row.recovered ?? 0);
    });
  }
});
