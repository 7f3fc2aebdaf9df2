// After a mid-stream break: one check per Ready replica, quarantine on a failed check, nothing on
// a passed one, no check for replicas already out of rotation; concurrent breaks share one check.
// Runs against the real store; the probe is the I/O edge, replaced by a controllable function.

import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { BrokenStreamCheck } from '../../../src/endpoints/broken-stream-check.js';
import type { BreakVerdict, ProbeResult } from '../../../src/endpoints/replica-probe.js';
import { EndpointStore } from '../../../src/endpoints/store.js';

const POLICY = { threshold: 3, baseMs: 10_000, maxMs: 60_000 };

function storeWith(endpoints: Array<{ address: string; state: 'Ready' | 'NotReady' }>): EndpointStore {
  const store = new EndpointStore(['static'], POLICY);
  store.replaceAll('static', [
    { name: 'p', models: ['m'], endpoints: endpoints.map((e) => ({ id: e.address, address: e.address, state: e.state, reason: '' })) },
  ]);
  store.markSynced('static');
  return store;
}

function harness(store: EndpointStore, probe: (address: string) => Promise<ProbeResult>) {
  const verdicts: Array<[string, BreakVerdict, string | undefined]> = [];
  const quarantined: string[] = [];
  store.subscribe({ quarantined: (endpoint, reason) => quarantined.push(`${endpoint.address}: ${reason}`) });
  const check = new BrokenStreamCheck(store, probe, { checked: (address, verdict, detail) => verdicts.push([address, verdict, detail]) });
  return { check, verdicts, quarantined };
}

describe('BrokenStreamCheck', () => {
  it('a failed check quarantines the replica at once, without a failure streak', async () => {
    const store = storeWith([{ address: '10.0.0.1:8000', state: 'Ready' }]);
    const h = harness(store, () => Promise.resolve({ alive: false, detail: 'connect failed: ECONNREFUSED' }));
    assert.equal(await h.check.suspect('10.0.0.1:8000'), 'replica_dead');
    assert.equal(store.endpointsAt('10.0.0.1:8000')[0]?.state, 'Quarantined');
    assert.match(
      store.endpointsAt('10.0.0.1:8000')[0]?.reason ?? '',
      /^an attempt failed \(no connection, a reset, or a broken stream\) and the replica then failed its health check; until /,
    );
    assert.equal(h.quarantined.length, 1);
    assert.deepEqual(h.verdicts, [['10.0.0.1:8000', 'replica_dead', 'connect failed: ECONNREFUSED']]);
    store.stop();
  });

  it('a passed check leaves the replica Ready', async () => {
    const store = storeWith([{ address: '10.0.0.1:8000', state: 'Ready' }]);
    const h = harness(store, () => Promise.resolve({ alive: true }));
    assert.equal(await h.check.suspect('10.0.0.1:8000'), 'replica_alive');
    assert.equal(store.endpointsAt('10.0.0.1:8000')[0]?.state, 'Ready');
    assert.deepEqual(h.quarantined, []);
    store.stop();
  });

  it('a replica that is not Ready (or unknown) is not probed', async () => {
    const store = storeWith([{ address: '10.0.0.2:8000', state: 'NotReady' }]);
    const probed: string[] = [];
    const h = harness(store, (address) => {
      probed.push(address);
      return Promise.resolve({ alive: false, detail: 'x' });
    });
    assert.equal(await h.check.suspect('10.0.0.2:8000'), 'not_checked');
    assert.equal(await h.check.suspect('10.9.9.9:8000'), 'not_checked');
    assert.deepEqual(probed, []);
    assert.equal(store.endpointsAt('10.0.0.2:8000')[0]?.state, 'NotReady');
    store.stop();
  });

  it('breaks that arrive while a check runs share it; each is counted', async () => {
    const store = storeWith([{ address: '10.0.0.1:8000', state: 'Ready' }]);
    let calls = 0;
    let finish!: (result: ProbeResult) => void;
    const h = harness(store, () => {
      calls += 1;
      return new Promise((resolve) => (finish = resolve));
    });
    const first = h.check.suspect('10.0.0.1:8000');
    const second = h.check.suspect('10.0.0.1:8000');
    finish({ alive: false, detail: 'timed out' });
    assert.deepEqual(await Promise.all([first, second]), ['replica_dead', 'replica_dead']);
    assert.equal(calls, 1);
    assert.equal(h.quarantined.length, 1, 'quarantined once');
    assert.equal(h.verdicts.length, 2);
    store.stop();
  });
});
