import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { ENDPOINT_STATES } from '../../../src/endpoints/model.js';
import {
  countReplicaStates,
  noReadyReplicaError,
  noReadyReplicaRetryAfter,
  REPLICA_STATE_KEYS,
  REPORTED_STATES,
  RETRY_AFTER_BY_STATE,
  RETRY_AFTER_NO_REPLICAS,
} from '../../../src/errors/no-ready-replica.js';
import { renderError } from '../../../src/errors/render.js';

void describe('no_ready_replica', () => {
  void it('waits longer for starting replicas than for not-ready or quarantined ones', () => {
    assert.ok(RETRY_AFTER_BY_STATE.Starting > RETRY_AFTER_BY_STATE.NotReady);
    assert.ok(RETRY_AFTER_BY_STATE.Starting > RETRY_AFTER_BY_STATE.Quarantined);
  });

  void it('uses the soonest recovery among the states present', () => {
    assert.equal(noReadyReplicaRetryAfter({ Starting: 2 }), RETRY_AFTER_BY_STATE.Starting);
    assert.equal(
      noReadyReplicaRetryAfter({ Starting: 1, NotReady: 1, CrashLoop: 3 }),
      Math.min(RETRY_AFTER_BY_STATE.Starting, RETRY_AFTER_BY_STATE.NotReady, RETRY_AFTER_BY_STATE.CrashLoop),
    );
    assert.equal(noReadyReplicaRetryAfter({}), RETRY_AFTER_NO_REPLICAS);
    assert.equal(noReadyReplicaRetryAfter({ Starting: 0 }), RETRY_AFTER_NO_REPLICAS);
  });

  void it('counts states from endpoints', () => {
    const counts = countReplicaStates([{ state: 'Starting' }, { state: 'Starting' }, { state: 'CrashLoop' }]);
    assert.deepEqual(counts, { Starting: 2, CrashLoop: 1 });
  });

  void it('renders one stable code with a per-state breakdown, reasons in the message and Retry-After', () => {
    const err = noReadyReplicaError(
      'llama',
      [
        { state: 'Starting', reason: 'ContainerCreating' },
        { state: 'Starting', reason: 'ContainerCreating' },
        { state: 'CrashLoop', reason: 'CrashLoopBackOff' },
      ],
      { cause: new Error('internal') },
    );
    const rendered = renderError(err);
    assert.equal(rendered.status, 503);
    const body = JSON.parse(rendered.body.toString('utf8')) as {
      error: { code: string; message: string; model: string; replicas: Record<string, number> };
    };
    assert.equal(body.error.code, 'no_ready_replica');
    assert.equal(body.error.model, 'llama');
    assert.deepEqual(Object.keys(body.error.replicas).sort(), REPORTED_STATES.map((s) => REPLICA_STATE_KEYS[s]).sort());
    assert.equal(body.error.replicas[REPLICA_STATE_KEYS.Starting], 2);
    assert.equal(body.error.replicas[REPLICA_STATE_KEYS.CrashLoop], 1);
    assert.equal(body.error.replicas[REPLICA_STATE_KEYS.Ready], 0);
    assert.match(body.error.message, /llama/);
    assert.equal(
      body.error.message,
      'model llama has no ready replica: 3 pods — 2 starting (ContainerCreating), 1 crash-looping (CrashLoopBackOff). Retry in about 15 s.',
    );
    const retryAfter = rendered.headers.find(([n]) => n === 'retry-after')?.[1];
    assert.equal(retryAfter, String(Math.min(RETRY_AFTER_BY_STATE.Starting, RETRY_AFTER_BY_STATE.CrashLoop)));
    assert.ok(!rendered.body.toString('utf8').includes('internal'));
  });

  void it('explains a model with no replicas at all', () => {
    const err = noReadyReplicaError('empty', []);
    assert.match(err.message, /no pods/);
    assert.equal(err.retryAfterSeconds, RETRY_AFTER_NO_REPLICAS);
  });

  void it('reports every state except Gone', () => {
    assert.deepEqual([...REPORTED_STATES].sort(), ENDPOINT_STATES.filter((s) => s !== 'Gone').sort());
  });
});
