// Sends access-log entries to the replica that picked their stream (access-log-routing.ts), over
// the same AccessLogService/StreamAccessLogs method Envoy uses, so a peer needs no other endpoint:
// one client stream per peer, opened on the first entry for it and reopened after it ends. Each
// message names FORWARDED_LOG_NAME, so the peer judges the entries itself and never sends them on.
// With listen.tls on, every replica serves TLS, so the forwarder speaks TLS too: encrypted, the
// peer's certificate not verified (a pod-IP address is in no certificate, and a self-signed one is
// made per pod; the gateways dial us the same way). Mutual TLS is refused with listen.peerAddress
// by the config check: a peer would ask for a client certificate its CA signed.
// A peer that reads slower than breaks come (overloaded, or stalled with its connection open) gets
// what its stream takes until write() says it is full; the entries after that, until it drains,
// are dropped and counted (their breaks are judged stream_broken there, as without the access log),
// so a slow peer costs a bounded buffer here instead of one that grows with every break.

import { Client, credentials } from '@grpc/grpc-js';
import type { ClientWritableStream, ServiceError } from '@grpc/grpc-js';
import type { ChannelCredentials } from '@grpc/grpc-js';
import { Writer, WIRE_LEN } from '../grpc/protobuf-wire.js';
import { splitHostPort } from '../util/host-port.js';
import { ACCESS_LOG_PATH, FORWARDED_LOG_NAME } from './access-log-service.js';

export interface ForwarderEvents {
  /** An entry was written to `peer`'s stream. */
  readonly sent: (peer: string) => void;
  /** `peer`'s stream ended in error (unreachable, refused, reset): what was written to it may be lost. */
  readonly streamFailed: (peer: string, error: ServiceError) => void;
  /** `peer`'s stream is full (it reads slower than entries come): this entry was not sent. */
  readonly dropped: (peer: string) => void;
}

/** Peers with an open client at most: old pod addresses beyond it are closed, oldest first. */
const MAX_PEERS = 64;

interface Peer {
  readonly client: Client;
  call: ClientWritableStream<Buffer> | undefined;
  /** The call said it is full (write() returned false): entries are dropped until it drains. */
  full: boolean;
}

const identity = (bytes: Buffer): Buffer => bytes;

export class AccessLogForwarder {
  private readonly peers = new Map<string, Peer>();
  private readonly writer = new Writer();

  private readonly credentials: ChannelCredentials;
  /** TLS: a name for SNI, as a pod IP may not be one (RFC 6066; Node warns); nothing checks it. */
  private readonly options: Record<string, string>;

  /** `tls`: the peers serve TLS (listen.tls.enabled on every replica). */
  constructor(
    private readonly events: ForwarderEvents,
    tls = false,
  ) {
    this.credentials = tls ? credentials.createSsl(null, null, null, { rejectUnauthorized: false }) : credentials.createInsecure();
    this.options = tls ? { 'grpc.ssl_target_name_override': 'llm-extproc' } : {};
  }

  /** `wire`: one HTTPAccessLogEntry's bytes, as Envoy sent them. */
  forward(peer: string, wire: Uint8Array): void {
    const [state, call] = this.callTo(peer);
    if (state.full) {
      this.events.dropped(peer);
      return;
    }
    try {
      if (!call.write(this.message(wire))) {
        state.full = true;
        call.once('drain', () => {
          if (state.call === call) state.full = false;
        });
      }
      this.events.sent(peer);
    } catch (err) {
      // The call ended between its status and our write: the next entry opens a new one.
      this.dropCall(peer, call);
      this.events.streamFailed(peer, err as ServiceError);
    }
  }

  close(): void {
    for (const peer of this.peers.values()) {
      peer.call?.end();
      peer.client.close();
    }
    this.peers.clear();
  }

  /** StreamAccessLogsMessage { identifier(1) { log_name(2) }, http_logs(2) { log_entry(1) } }. */
  private message(wire: Uint8Array): Buffer {
    const w = this.writer;
    w.reset();
    w.tag(1, WIRE_LEN);
    const id = w.begin();
    w.string(2, FORWARDED_LOG_NAME);
    w.end(id);
    w.tag(2, WIRE_LEN);
    const logs = w.begin();
    w.bytes(1, wire);
    w.end(logs);
    return w.finish();
  }

  private callTo(address: string): [Peer, ClientWritableStream<Buffer>] {
    let peer = this.peers.get(address);
    if (peer === undefined) {
      if (this.peers.size >= MAX_PEERS) this.closeOldest();
      peer = { client: new Client(grpcTarget(address), this.credentials, this.options), call: undefined, full: false };
      this.peers.set(address, peer);
    }
    if (peer.call !== undefined) return [peer, peer.call];
    const call: ClientWritableStream<Buffer> = peer.client.makeClientStreamRequest(
      ACCESS_LOG_PATH,
      identity,
      identity,
      (error: ServiceError | null) => {
        this.dropCall(address, call);
        if (error !== null) this.events.streamFailed(address, error);
      },
    );
    peer.call = call;
    peer.full = false;
    return [peer, call];
  }

  private dropCall(address: string, call: ClientWritableStream<Buffer>): void {
    const peer = this.peers.get(address);
    if (peer?.call !== call) return;
    peer.call = undefined;
    peer.full = false;
  }

  private closeOldest(): void {
    const [address, peer] = this.peers.entries().next().value ?? [];
    if (address === undefined || peer === undefined) return;
    peer.call?.end();
    peer.client.close();
    this.peers.delete(address);
  }
}

/** gRPC's name for `host:port`: an IPv6 host in brackets (a pod IP from the downward API has none). */
function grpcTarget(address: string): string {
  const { host, port } = splitHostPort(address);
  return host.includes(':') ? `[${host}]:${port}` : address;
}
