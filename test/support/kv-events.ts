// A subscriber to one vLLM server's KV-cache events, for tests: what the engine says it stored in
// and evicted from its prefix cache. vLLM (`--kv-events-config` with `"publisher":"zmq"` and an
// endpoint it binds, `tcp://*:PORT`) publishes on a ZMQ PUB socket; each message has three frames:
// the topic, an 8-byte big-endian sequence number (from 0 at each start of the engine), and a
// msgpack batch `[ts, [event, ...], data_parallel_rank]`. vLLM 0.32 encodes each event as a map
// with a `type` (BlockStored, BlockRemoved, AllBlocksCleared); older releases as an array whose
// first element is that tag, fields in declaration order. Both are read (src/kv-cache/kv-events.ts,
// what llm-extproc itself reads them with). What was published
// before a subscriber connected is not delivered (PUB/SUB), so connect before the traffic.
// docs/picking.md ("What a real vLLM reports and publishes") records what a real server sends.

import { Decoder } from '@msgpack/msgpack';
import { Subscriber } from 'zeromq';
import { parseKvEventMessage } from '../../src/kv-cache/kv-events.js';
import type { KvEvent, KvEventBatch } from '../../src/kv-cache/kv-events.js';
import { waitUntil } from './wait-until.js';

export type { KvEvent, KvEventBatch };

const decoder = new Decoder({ useBigInt64: true });

export class KvEventSubscriber {
  /** Every batch received, in order. Tests may clear it (`batches.length = 0`). */
  readonly batches: KvEventBatch[] = [];
  /** Messages that did not parse, with the reason (a test should assert there are none). */
  readonly rejected: string[] = [];
  private readonly socket = new Subscriber();
  private readonly done: Promise<void>;
  private handshakes = 0;

  private constructor(endpoint: string, topic: string) {
    // Counted from before the connect: a handshake also happens again after a publisher restarts.
    this.socket.events.on('handshake', () => this.handshakes++);
    this.socket.connect(endpoint);
    this.socket.subscribe(topic);
    this.done = this.receive();
  }

  /** Connects and resolves once the ZMTP handshake with the publisher is done (what it sends from then on arrives). */
  static async connect(endpoint: string, topic = ''): Promise<KvEventSubscriber> {
    const subscriber = new KvEventSubscriber(endpoint, topic);
    await subscriber.connected(1);
    return subscriber;
  }

  /** Resolves once `count` handshakes have happened (the first connect, then each reconnect to a restarted publisher). */
  async connected(count: number, timeoutMs = 10_000): Promise<void> {
    await waitUntil(() => (this.handshakes >= count ? true : undefined), {
      description: `ZMQ handshake #${count} with the publisher`,
      timeoutMs,
    });
  }

  private async receive(): Promise<void> {
    try {
      for await (const frames of this.socket) {
        try {
          this.batches.push(parseKvEventMessage(frames, (payload) => decoder.decode(payload)));
        } catch (err) {
          this.rejected.push(err instanceof Error ? err.message : String(err));
        }
      }
    } catch {
      // Closed while waiting for the next message.
    }
  }

  /** Every event received so far, flattened. */
  events(): KvEvent[] {
    return this.batches.flatMap((b) => b.events);
  }

  /** Waits until `probe` over the events so far returns something. */
  waitFor<T>(probe: (events: KvEvent[]) => T | undefined, description: string, timeoutMs = 10_000): Promise<T> {
    return waitUntil(() => probe(this.events()), { description, timeoutMs });
  }

  async close(): Promise<void> {
    this.socket.close();
    await this.done;
  }
}
