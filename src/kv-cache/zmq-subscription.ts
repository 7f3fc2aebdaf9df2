// The one module that talks to model servers' KV-event publishers: a ZMQ SUB socket per server
// (zeromq, prebuilt for Node 20) and the msgpack decoder (@msgpack/msgpack, 64-bit integers as
// bigint). Both libraries are imported on the first subscription, so a process without precise
// mode never loads them. The socket reconnects by itself; ZMTP heartbeats make a path that died
// without closing (a node gone, a cut network) show as a disconnect within seconds.

import type { Decoder } from '@msgpack/msgpack';
import type { Subscriber } from 'zeromq';
import { KvEventFormatError, parseKvEventMessage } from './kv-events.js';
import type { KvEventBatch } from './kv-events.js';

export interface SubscriptionHandler {
  /** The ZMTP handshake with the publisher completed (the first connect, or a reconnect). */
  connected(): void;
  /** The connection closed (or its heartbeats went unanswered); the socket keeps trying to reconnect. */
  disconnected(detail: string): void;
  batch(batch: KvEventBatch): void;
  /** A message that is not a KV-event batch (its events are lost). */
  bad(reason: string): void;
}

export interface SubscriptionOptions {
  /** `tcp://host:port` of the publisher. */
  readonly endpoint: string;
  /** Topic prefix to subscribe to ('' = every topic). */
  readonly topic: string;
  /** ZMTP heartbeat interval; a publisher silent for 3 intervals after a ping is disconnected. */
  readonly heartbeatMs: number;
}

interface Libraries {
  readonly Subscriber: typeof Subscriber;
  readonly decoder: Decoder;
}

let libraries: Promise<Libraries> | undefined;

function load(): Promise<Libraries> {
  libraries ??= Promise.all([import('zeromq'), import('@msgpack/msgpack')]).then(([zmq, msgpack]) => ({
    Subscriber: zmq.Subscriber,
    decoder: new msgpack.Decoder({ useBigInt64: true }),
  }));
  return libraries;
}

export class ZmqSubscription {
  private socket: Subscriber | undefined;
  private closed = false;
  private receiving: Promise<void> | undefined;

  private constructor(
    private readonly options: SubscriptionOptions,
    private readonly handler: SubscriptionHandler,
  ) {}

  /** Opens the socket and starts connecting (resolves once the socket exists, not when connected). */
  static async open(options: SubscriptionOptions, handler: SubscriptionHandler): Promise<ZmqSubscription> {
    const subscription = new ZmqSubscription(options, handler);
    await subscription.start();
    return subscription;
  }

  private async start(): Promise<void> {
    const { Subscriber: SubscriberSocket, decoder } = await load();
    if (this.closed) return;
    const socket = new SubscriberSocket({
      heartbeatInterval: this.options.heartbeatMs,
      heartbeatTimeout: 3 * this.options.heartbeatMs,
      // Reconnect quickly: a restarted engine publishes as soon as it serves.
      reconnectInterval: 100,
      reconnectMaxInterval: 2000,
      // Nothing queued at close: the events are of no use to anyone after.
      linger: 0,
      // A batch is a few KB; one this large is a publisher gone wrong, not cache state.
      maxMessageSize: 64 * 1024 * 1024,
    });
    this.socket = socket;
    socket.events.on('handshake', () => this.handler.connected());
    socket.events.on('disconnect', ({ address }) => this.handler.disconnected(`connection to ${address} closed`));
    socket.connect(this.options.endpoint);
    socket.subscribe(this.options.topic);
    this.receiving = this.receive(socket, (payload) => decoder.decode(payload));
  }

  private async receive(socket: Subscriber, decode: (payload: Uint8Array) => unknown): Promise<void> {
    try {
      for await (const frames of socket) {
        let batch: KvEventBatch;
        try {
          batch = parseKvEventMessage(frames, decode);
        } catch (err) {
          this.handler.bad(err instanceof KvEventFormatError ? err.message : String(err));
          continue;
        }
        this.handler.batch(batch);
      }
    } catch (err) {
      // Closed while waiting for the next message (ours); anything else is a socket failure.
      if (!this.closed) this.handler.disconnected(`socket failed: ${err instanceof Error ? err.message : String(err)}`);
    }
  }

  async close(): Promise<void> {
    this.closed = true;
    this.socket?.close();
    await this.receiving;
  }
}
