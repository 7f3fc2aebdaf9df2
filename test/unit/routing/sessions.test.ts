// Session affinity as routing applies it: tokens (an HMAC of the replica's address) and client ids
// (remembered in a bounded LRU), over a real store, load tracker and picker.
import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { EndpointStore } from '../../../src/endpoints/store.js';
import type { ObservedEndpoint } from '../../../src/endpoints/model.js';
import { LoadTracker } from '../../../src/picker/load-tracker.js';
import { DEFAULT_PICKER_SETTINGS } from '../../../src/picker/settings.js';
import type { PickerSettings } from '../../../src/picker/settings.js';
import { StoreRouting } from '../../../src/routing/routing.js';
import type { RoutedRequest } from '../../../src/routing/routing.js';
import { parseSessionKeys, SessionAffinity, sessionToken, TOKEN_PREFIX } from '../../../src/routing/sessions.js';
import type { SessionResult } from '../../../src/routing/sessions.js';

const MODEL = 'chat';
const SETTINGS: PickerSettings = { ...DEFAULT_PICKER_SETTINGS, metrics: { ...DEFAULT_PICKER_SETTINGS.metrics, enabled: false } };
const KEY = Buffer.from('a test key of more than sixteen bytes');

const replica = (i: number, state: ObservedEndpoint['state'] = 'Ready'): ObservedEndpoint => ({
  id: `pod-${i}`,
  address: `10.0.0.${i}:8000`,
  state,
  reason: state === 'Ready' ? '' : 'probe failing',
});

interface Bed {
  readonly routing: StoreRouting;
  readonly sessions: SessionAffinity;
  readonly results: SessionResult[];
  readonly clock: { now: number };
  readonly load: LoadTracker;
  setReplicas(endpoints: readonly ObservedEndpoint[]): void;
  /** One turn: routed and released; the token the response would carry. */
  turn(headers: Readonly<Record<string, string>>): { readonly at: string; readonly token: string | undefined };
}

function bed(settings: PickerSettings = SETTINGS, keys: readonly Buffer[] = [KEY]): Bed {
  const store = new EndpointStore(['static'], { threshold: 3, baseMs: 10_000, maxMs: 60_000 });
  const setReplicas = (endpoints: readonly ObservedEndpoint[]): void =>
    store.replaceAll('static', [{ name: 'pool', models: [MODEL], endpoints }]);
  setReplicas([1, 2, 3, 4].map((i) => replica(i)));
  store.markSynced('static');
  const results: SessionResult[] = [];
  const clock = { now: 0 };
  const sessions = new SessionAffinity(settings.session, {
    keys,
    now: () => clock.now,
    observer: { placed: (result) => results.push(result), forgotten: () => undefined },
  });
  // A random start that moves on every pick: without affinity, ties rotate over the replicas.
  let draw = 0;
  const load = new LoadTracker();
  const routing = new StoreRouting(store, load, {
    fallbacks: 1,
    picker: settings,
    sessions,
    random: () => (draw++ % 4) / 4 + 0.01,
  });
  return {
    routing,
    sessions,
    results,
    clock,
    load,
    setReplicas,
    turn: (headers) => {
      const routed: RoutedRequest = routing.route({ model: MODEL, header: (name) => headers[name] });
      routing.release(routed);
      return { at: routed.endpoints[0].address, token: routed.session?.tokenFor(routed.endpoints[0]) };
    },
  };
}

/** Five turns of a session that sends back the token of each answer; where each went. */
function echoingSession(b: Bed, turns = 5): string[] {
  const seen: string[] = [];
  let token = 'conversation-1';
  for (let t = 0; t < turns; t++) {
    const answer = b.turn({ 'x-session-token': token });
    seen.push(answer.at);
    token = answer.token ?? token;
  }
  return seen;
}

describe('session tokens', () => {
  it('name a replica by an HMAC of its address: opaque, stable across processes with the same key, different under another key', () => {
    const token = sessionToken(KEY, '10.0.0.1:8000');
    assert.ok(token.startsWith(TOKEN_PREFIX));
    assert.ok(!token.includes('10.0.0.1'), 'the address does not appear in the token');
    assert.equal(token, sessionToken(Buffer.from(KEY), '10.0.0.1:8000'));
    assert.notEqual(token, sessionToken(Buffer.from('another key of more than sixteen'), '10.0.0.1:8000'));
    assert.notEqual(token, sessionToken(KEY, '10.0.0.2:8000'));
  });

  it('a tampered or forged token routes nowhere in particular, and is counted', () => {
    const b = bed();
    const real = sessionToken(KEY, '10.0.0.3:8000');
    const tampered = real.slice(0, -2) + (real.endsWith('AA') ? 'BB' : 'AA');
    const forged = sessionToken(Buffer.from('the attacker guesses a key here'), '10.0.0.3:8000');
    const places = new Set<string>();
    for (const token of [tampered, forged, tampered, forged]) places.add(b.turn({ 'x-session-token': token }).at);
    assert.ok(places.size > 1, `bad tokens were all sent to ${[...places].join(', ')}`);
    assert.deepEqual(b.results, ['unknown_token', 'unknown_token', 'unknown_token', 'unknown_token']);
    assert.equal(b.turn({ 'x-session-token': real }).at, '10.0.0.3:8000', 'the genuine token does name its replica');
    assert.equal(b.results.at(-1), 'kept');
  });

  it('a token made under a key still listed (rotation) is honoured; new tokens use the first key', () => {
    const old = Buffer.from('the old key, still accepted for a while');
    const b = bed(SETTINGS, [KEY, old]);
    const answer = b.turn({ 'x-session-token': sessionToken(old, '10.0.0.2:8000') });
    assert.equal(answer.at, '10.0.0.2:8000');
    assert.equal(answer.token, sessionToken(KEY, '10.0.0.2:8000'));
  });

  it('key files: one key per line, each at least 16 bytes', () => {
    assert.deepEqual(parseSessionKeys('first key of sixteen+\n\n second key, also long \n'), {
      keys: [Buffer.from('first key of sixteen+'), Buffer.from('second key, also long')],
    });
    assert.deepEqual(parseSessionKeys('short\n'), { error: 'key 1 is shorter than 16 bytes' });
    assert.deepEqual(parseSessionKeys('\n  \n'), { error: 'it holds no key' });
  });
});

describe('session affinity in routing', () => {
  it('without a session header nothing is read, counted or answered', () => {
    const b = bed();
    const routed = b.routing.route({ model: MODEL, header: () => undefined });
    assert.equal(routed.session, undefined);
    assert.deepEqual(b.results, []);
  });

  it('every turn of a session that sends its token back goes to the replica of its first turn', () => {
    const b = bed();
    const seen = echoingSession(b);
    assert.equal(new Set(seen).size, 1, seen.join(' '));
    assert.deepEqual(b.results, ['new', 'kept', 'kept', 'kept', 'kept']);
  });

  it('without the session, the same turns spread over the replicas (the picker breaks ties at random)', () => {
    const b = bed();
    const seen = new Set<string>();
    for (let t = 0; t < 5; t++) seen.add(b.turn({}).at);
    assert.ok(seen.size > 1);
  });

  it('a replica that stops being Ready loses its sessions once: they follow the replica they moved to', () => {
    const b = bed();
    const first = echoingSession(b, 2)[0];
    const lost = Number(first.split('.')[3].split(':')[0]);
    b.setReplicas([1, 2, 3, 4].map((i) => replica(i, i === lost ? 'NotReady' : 'Ready')));
    let token = sessionToken(KEY, first);
    const after: string[] = [];
    for (let t = 0; t < 4; t++) {
      const answer = b.turn({ 'x-session-token': token });
      after.push(answer.at);
      token = answer.token ?? token;
    }
    assert.ok(!after.includes(first), `a turn went to the NotReady replica ${first}`);
    assert.equal(new Set(after).size, 1, after.join(' '));
    assert.deepEqual(b.results.slice(2), ['moved', 'kept', 'kept', 'kept']);
  });

  it('a saturated replica gives its session up (its score is 0): the session moves and follows', () => {
    const b = bed();
    const first = echoingSession(b, 1)[0];
    // Every replica reports; the session's has 5 waiting requests: the session section's queueDepth.
    for (let i = 1; i <= 4; i++) {
      const address = replica(i).address;
      const cell = b.load.board.cell(address);
      cell.storeReport({
        waiting: address === first ? 5 : 0,
        running: 4,
        kvCacheUsage: 0.5,
        runningAdapters: [],
        waitingAdapters: [],
        maxAdapters: undefined,
      });
      cell.metricsState = 'fresh';
    }
    const answer = b.turn({ 'x-session-token': sessionToken(KEY, first) });
    assert.notEqual(answer.at, first);
    assert.equal(b.results.at(-1), 'moved');
  });

  it('a client-chosen id (AIBrix x-session-id) is remembered per process, for ttl after its last turn', () => {
    const b = bed();
    const first = b.turn({ 'x-session-id': 'agent-7' }).at;
    b.clock.now = 200_000;
    assert.equal(b.turn({ 'x-session-id': 'agent-7' }).at, first);
    b.clock.now = 450_000;
    assert.equal(b.turn({ 'x-session-id': 'agent-7' }).at, first, 'last used at 200 s: alive until 500 s');
    b.clock.now = 800_000;
    b.turn({ 'x-session-id': 'agent-7' });
    assert.deepEqual(b.results, ['new', 'kept', 'kept', 'new']);
  });

  it('a session weight of 0 turns it off: the header is not read', () => {
    const off = { ...SETTINGS, weights: { ...SETTINGS.weights, session: 0 } };
    const b = bed(off);
    const seen = new Set<string>();
    for (let t = 0; t < 8; t++) seen.add(b.turn({ 'x-session-id': 'same' }).at);
    assert.ok(seen.size > 1);
  });
});
