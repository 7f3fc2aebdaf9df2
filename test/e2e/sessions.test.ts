// End to end: session affinity over three model servers behind three active-active llm-extproc
// processes and one real Envoy whose ext_proc cluster lists all three (each turn may be picked by
// any process). 40 sessions of short, unrelated prompts (no shared cache block: prefix affinity
// has nothing to hold them with) start with a session header of their own (`x-session-token:
// conversation-N`) and then send back the token each answer carries, as llm-d's clients do. The
// processes share nothing but the session key file.
//
// What must hold: every turn of a session lands on its first replica while that replica stays
// Ready; killing that replica moves each of its sessions once (the turn after the kill is answered
// by the fallback Envoy retries on, whose token the client gets back), and they stay on the new
// one; a replica the endpoint source reports NotReady loses its sessions the same way.
//
// Model-server metric scrapes are off (`picker.metrics.enabled: false`): sessions are decided by
// their replica's readiness here, not by load figures whose timing differs between processes.

import assert from 'node:assert/strict';
import { writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { startActiveActiveBed, type ActiveActiveBed } from '../support/active-active-bed.js';
import { metricValue, scrapeMetrics } from '../support/prometheus.js';
import { send } from '../support/http-client.js';
import { waitUntil } from '../support/wait-until.js';

const MODEL = 'chat';
const SESSIONS = 40;
const TURNS = 5;
const HEADER = 'x-session-token';
const WORDS = ['apple', 'river', 'quartz', 'violin', 'harbor', 'cactus', 'nebula', 'saddle', 'lantern', 'orbit', 'tundra', 'pepper'];

/** A short prompt unrelated to any other: no whole cache block, so prefix affinity has no key. */
function prompt(session: number, turn: number): string {
  return `${WORDS[(session * 7 + turn * 5) % WORDS.length]} ${session}.${turn}?`;
}

type Bed = ActiveActiveBed;

function startBed(): Promise<Bed> {
  return startActiveActiveBed({
    name: 'sessions',
    model: MODEL,
    picker: async (dir) => {
      const keyFile = join(dir, 'session-keys');
      await writeFile(keyFile, 'the e2e session key, shared by the three processes\n');
      return { session: { keyFile } };
    },
  });
}

/** One turn of a session: where it went, and the token to send with the next. */
async function turn(bed: Bed, session: number, turnNo: number, token: string): Promise<{ server: string; token: string }> {
  const response = await send(bed.port, {
    path: '/v1/chat/completions',
    headers: { [HEADER]: token },
    body: { model: MODEL, max_tokens: 8, messages: [{ role: 'user', content: prompt(session, turnNo) }] },
  });
  assert.equal(response.status, 200, response.text());
  const next = response.headers[HEADER];
  assert.ok(next !== undefined && next.startsWith('lxs1.'), `turn ${turnNo} of session ${session} came back without a token`);
  assert.ok(!next.includes('127.0.0.1'), 'the token does not show the replica address');
  return { server: response.headers['x-model-server-id'], token: next };
}

/** Session results summed over the three processes. */
async function sessionCounts(bed: Bed): Promise<Record<string, number>> {
  const texts = await Promise.all(bed.pickers.map((p) => scrapeMetrics(p.httpPort)));
  const out: Record<string, number> = {};
  for (const result of ['new', 'kept', 'moved', 'unknown_token'])
    out[result] = texts.reduce((sum, text) => sum + metricValue(text, 'llm_extproc_session_requests_total', { result }), 0);
  return out;
}

/** Waits until the processes have counted `total` session requests (counters move when a stream ends). */
async function countsReaching(bed: Bed, total: number): Promise<Record<string, number>> {
  return waitUntil(
    async () => {
      const counts = await sessionCounts(bed);
      return Object.values(counts).reduce((a, b) => a + b, 0) === total ? counts : undefined;
    },
    { description: `${total} session requests counted by the three processes` },
  );
}

describe('session affinity: 40 sessions × 5 turns over three active-active llm-extproc processes', () => {
  let bed: Bed;
  /** Each session's latest token and the replicas its turns went to, in order. */
  const tokens: string[] = [];
  const history: string[][] = [];
  let sent = 0;

  before(async () => {
    bed = await startBed();
  });
  after(async () => {
    await bed.stop();
  });

  /** One more turn of every session, interleaved (turn t of every session before turn t + 1 of any). */
  async function round(turnNo: number): Promise<void> {
    for (let s = 0; s < SESSIONS; s++) {
      const answer = await turn(bed, s, turnNo, tokens[s]);
      tokens[s] = answer.token;
      history[s].push(answer.server);
      sent++;
    }
  }

  it('keeps every turn of a session on its first replica, whichever process picks it', async () => {
    for (let s = 0; s < SESSIONS; s++) {
      tokens.push(`conversation-${s}`);
      history.push([]);
    }
    const perProcessBefore = await Promise.all(
      bed.pickers.map(async (p) =>
        metricValue(await scrapeMetrics(p.httpPort), 'llm_extproc_requests_total', { model: MODEL, result: 'ok' }),
      ),
    );
    for (let t = 0; t < TURNS; t++) await round(t);
    for (let s = 0; s < SESSIONS; s++) assert.equal(new Set(history[s]).size, 1, `session ${s} went to ${history[s].join(', ')}`);
    const firstReplicas = new Set(history.map((h) => h[0]));
    assert.equal(firstReplicas.size, 3, `the first turns were placed by load over all three replicas: ${[...firstReplicas].join(', ')}`);
    assert.deepEqual(await countsReaching(bed, sent), { new: SESSIONS, kept: SESSIONS * (TURNS - 1), moved: 0, unknown_token: 0 });
    const perProcess = await Promise.all(
      bed.pickers.map(async (p, i) => {
        const ok = metricValue(await scrapeMetrics(p.httpPort), 'llm_extproc_requests_total', { model: MODEL, result: 'ok' });
        return ok - perProcessBefore[i];
      }),
    );
    assert.ok(
      perProcess.every((n) => n > 0),
      `each process must have picked some turns: ${perProcess.join(', ')}`,
    );
  });

  it('moves the sessions of a killed replica once, and they stay on their new replica', async () => {
    const victim = bed.servers[0];
    const onVictim = history.flatMap((h, s) => (h.at(-1) === victim.id ? [s] : []));
    assert.ok(onVictim.length > 0, `no session was on ${victim.id}`);
    const counted = await countsReaching(bed, sent);
    await victim.close();
    const from = history.map((h) => h.length);
    for (let t = TURNS; t < TURNS + 3; t++) await round(t);
    for (let s = 0; s < SESSIONS; s++) {
      const later = history[s].slice(from[s]);
      const was = history[s][from[s] - 1];
      if (was === victim.id) {
        assert.ok(!later.includes(victim.id), `session ${s} was answered by the killed replica: ${later.join(', ')}`);
        assert.equal(new Set(later).size, 1, `session ${s} moved more than once: ${later.join(', ')}`);
      } else {
        assert.deepEqual(later, [was, was, was], `session ${s} left ${was}, which stayed up`);
      }
    }
    // The first turn after the kill is picked for the dead replica (nothing told the processes yet)
    // and answered by Envoy's retry on the fallback: counted kept, then kept on the new replica.
    const counts = await countsReaching(bed, sent);
    assert.equal(counts.new, counted.new, 'no session started over');
    assert.equal(counts.unknown_token, 0);
  });

  it('moves the sessions of a replica reported NotReady once, and they stay', async () => {
    const alive = bed.servers.slice(1);
    const victim = alive[0];
    const onVictim = history.flatMap((h, s) => (h.at(-1) === victim.id ? [s] : []));
    assert.ok(onVictim.length > 0, `no session was on ${victim.id}`);
    const before = await countsReaching(bed, sent);
    // The killed replica has left the pool meanwhile, as its pod would.
    await bed.writePools(
      alive.map((s) =>
        s === victim ? { address: s.address, state: 'NotReady' as const, reason: 'probe failing' } : { address: s.address },
      ),
    );
    await waitUntil(
      async () => {
        const texts = await Promise.all(bed.pickers.map((p) => scrapeMetrics(p.httpPort)));
        return texts.every((text) => metricValue(text, 'llm_extproc_endpoints', { pool: 'pool', state: 'NotReady' }) === 1)
          ? true
          : undefined;
      },
      { description: 'every process sees the replica NotReady' },
    );
    const from = history.map((h) => h.length);
    for (let t = TURNS + 3; t < TURNS + 6; t++) await round(t);
    for (let s = 0; s < SESSIONS; s++) {
      const later = history[s].slice(from[s]);
      const was = history[s][from[s] - 1];
      if (was === victim.id) {
        assert.ok(!later.includes(victim.id), `session ${s} went to the NotReady replica: ${later.join(', ')}`);
        assert.equal(new Set(later).size, 1, `session ${s} moved more than once: ${later.join(', ')}`);
      } else {
        assert.deepEqual(later, [was, was, was], `session ${s} left ${was}, which stayed Ready`);
      }
    }
    const counts = await countsReaching(bed, sent);
    assert.equal(counts.moved - before.moved, onVictim.length, 'each session of the NotReady replica moved once, and was counted');
    assert.equal(counts.kept - before.kept, 3 * SESSIONS - onVictim.length);
  });
});
