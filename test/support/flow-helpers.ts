// Helpers for flow-control tests through Envoy: answers the test finishes one at a time (so the
// order queued requests reach the model server is what the queue decided, not timing), and waits
// on the queue-length metric and on arrivals.
import { metricValue } from './prometheus.js';
import type { Gateway } from './gateway.js';
import type { ModelServer } from './model-server.js';
import { waitUntil } from './wait-until.js';

/** Answers held until the test lets each one finish, in arrival order. */
export class HeldAnswers {
  private readonly releases: Array<() => void> = [];
  private released = 0;

  constructor(private readonly server: ModelServer) {}

  /** The next `count` requests get an answer that waits for release(). */
  hold(count: number): void {
    for (let i = 0; i < count; i++) {
      const release = new Promise<void>((resolve) => this.releases.push(resolve));
      this.server.nextBehavior({ kind: 'paused-stream', release });
    }
  }

  /** Finishes the oldest held answer. */
  releaseNext(): void {
    this.releases[this.released++]();
  }
}

export async function queueLength(gateway: Gateway, labels: Record<string, string> = {}): Promise<number> {
  return metricValue(await gateway.metricsText(), 'llm_extproc_flow_queue_length', labels);
}

export async function waitForQueue(gateway: Gateway, expected: number, labels: Record<string, string> = {}): Promise<void> {
  await waitUntil(async () => ((await queueLength(gateway, labels)) === expected ? true : undefined), {
    description: `${expected} queued ${JSON.stringify(labels)}`,
  });
}

/** Waits until `count` requests reached the model server. */
export async function arrivals(server: ModelServer, count: number): Promise<void> {
  await waitUntil(() => (server.requests.length >= count ? true : undefined), { description: `${count} requests at the model server` });
}
