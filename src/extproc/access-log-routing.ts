// Where one access-log entry goes. Envoy streams each worker's entries to ONE llm-extproc replica,
// while it spreads ext_proc streams over all of them: an entry often reaches a replica that never
// saw its stream. The replica that picked a stream wrote its own address into the stream's metadata
// (REPLICA_KEY), which the entry carries; a replica that gets an entry naming another sends it there.
// Pure: the rules are table-tested (test/unit/extproc/access-log-routing.test.ts).

import { parseListenAddress } from '../util/host-port.js';
import type { AccessLogEntry, AccessLogListener } from './access-log-service.js';

export type EntryRoute =
  /** Judge it here: ours, or nobody's we could send it to. */
  | { readonly to: 'here' }
  /** Another replica picked the stream: send the entry to `peer` (`host:port` of its gRPC port). */
  | { readonly to: 'peer'; readonly peer: string }
  /** It names an address no peer can listen on (not `host:port` with a port 1-65535): counted, kept here. */
  | { readonly to: 'unknown_peer' };

const HERE: EntryRoute = { to: 'here' };
const UNKNOWN: EntryRoute = { to: 'unknown_peer' };

/**
 * `owner`: the address in the entry ('' when none); `self`: this replica's `listen.peerAddress`
 * (undefined: forwarding is off); `forwarded`: a peer sent it. No loop can form: an entry that
 * came from a peer never leaves again, and none goes to the replica it names when that is us.
 */
export function routeEntry(owner: string, self: string | undefined, forwarded: boolean): EntryRoute {
  if (forwarded || self === undefined || owner === '' || owner === self) return HERE;
  const parsed = parseListenAddress(owner);
  if (parsed?.kind !== 'tcp' || parsed.port === 0) return UNKNOWN;
  return { to: 'peer', peer: owner };
}

export interface EntryDispatch {
  /** An entry judged here: only its facts (not the view into Envoy's message, which it would keep alive). */
  readonly judgeHere: (end: Pick<AccessLogEntry, 'requestId' | 'status' | 'flags' | 'codeDetails'>) => void;
  readonly streams: (open: number) => void;
  /** This replica's `listen.peerAddress`; undefined: forwarding is off and every entry is judged here. */
  readonly self: string | undefined;
  /** Sends an entry's bytes to the peer that picked its stream (needed when `self` is set). */
  readonly forward?: (peer: string, wire: Uint8Array) => void;
  /** An entry that named an address that is no `host:port`. */
  readonly unknownPeer: (owner: string) => void;
}

/** The access-log service's listener: each entry judged here or sent to its replica, by routeEntry. */
export function dispatchEntries({ judgeHere, streams, self, forward, unknownPeer }: EntryDispatch): AccessLogListener {
  return {
    streams,
    entry: (entry, forwarded) => {
      const route = routeEntry(entry.owner, forward === undefined ? undefined : self, forwarded);
      if (route.to === 'peer' && forward !== undefined) {
        forward(route.peer, entry.wire);
        return;
      }
      if (route.to === 'unknown_peer') unknownPeer(entry.owner);
      const { requestId, status, flags, codeDetails } = entry;
      judgeHere({ requestId, status, flags, codeDetails });
    },
  };
}
