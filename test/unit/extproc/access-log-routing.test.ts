// Where an access-log entry goes: the replica that picked its stream, unless that is us, forwarding
// is off, or a peer already sent it here (so no entry travels twice, and none loops).

import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { dispatchEntries, routeEntry } from '../../../src/extproc/access-log-routing.js';
import type { AccessLogEntry } from '../../../src/extproc/access-log-service.js';

const SELF = '10.0.0.1:9002';
const PEER = '10.0.0.2:9002';

void describe('routeEntry', () => {
  const cases: ReadonlyArray<[string, string, string | undefined, boolean, ReturnType<typeof routeEntry>]> = [
    ['another replica picked it', PEER, SELF, false, { to: 'peer', peer: PEER }],
    ['we picked it', SELF, SELF, false, { to: 'here' }],
    ['nobody wrote an owner (a request we answered, or a gateway that drops our metadata)', '', SELF, false, { to: 'here' }],
    ['a peer forwarded it: never sent on, even naming a third replica', '10.0.0.3:9002', SELF, true, { to: 'here' }],
    ['a peer forwarded it naming that peer', PEER, SELF, true, { to: 'here' }],
    ['forwarding is off here', PEER, undefined, false, { to: 'here' }],
    ['an IPv6 peer', '[fd00::2]:9002', SELF, false, { to: 'peer', peer: '[fd00::2]:9002' }],
    ['an owner with no port', '10.0.0.2', SELF, false, { to: 'unknown_peer' }],
    ['an owner on port 0', '10.0.0.2:0', SELF, false, { to: 'unknown_peer' }],
    ['a socket path', 'unix:///tmp/x.sock', SELF, false, { to: 'unknown_peer' }],
  ];
  for (const [title, owner, self, forwarded, expected] of cases) {
    void it(title, () => assert.deepEqual(routeEntry(owner, self, forwarded), expected));
  }
});

void describe('dispatchEntries', () => {
  const entry = (requestId: string, owner: string): AccessLogEntry => ({
    requestId,
    status: 200,
    flags: 0,
    codeDetails: 'downstream_remote_disconnect',
    owner,
    wire: Buffer.from(requestId),
  });

  void it("judges ours and forwarded ones here, sends another replica's to it, counts an unusable owner", () => {
    const here: string[] = [];
    const sent: Array<[string, string]> = [];
    const unknown: string[] = [];
    const listener = dispatchEntries({
      judgeHere: (end) => here.push(end.requestId),
      streams: () => undefined,
      self: SELF,
      forward: (peer, wire) => sent.push([peer, Buffer.from(wire).toString()]),
      unknownPeer: (owner) => unknown.push(owner),
    });
    listener.entry(entry('mine', SELF), false);
    listener.entry(entry('theirs', PEER), false);
    listener.entry(entry('relayed', PEER), true);
    listener.entry(entry('odd', 'no-port'), false);
    assert.deepEqual(here, ['mine', 'relayed', 'odd']);
    assert.deepEqual(sent, [[PEER, 'theirs']], 'the entry goes as its own bytes');
    assert.deepEqual(unknown, ['no-port']);
  });

  void it('without a forwarder every entry is judged here, whatever it names', () => {
    const here: string[] = [];
    const listener = dispatchEntries({
      judgeHere: (end) => here.push(end.requestId),
      streams: () => undefined,
      self: SELF,
      unknownPeer: () => assert.fail(),
    });
    listener.entry(entry('theirs', PEER), false);
    assert.deepEqual(here, ['theirs']);
  });
});
