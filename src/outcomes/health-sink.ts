// Outcomes as the replicas' health: every attempt counts for or against its replica in the store
// (passive health: a streak of failures quarantines it), a failed connect or reset and a stream
// broken mid-way get the replica checked at once, and the first pick's answer times feed the
// latency signal.

import type { BrokenStreamCheck } from '../endpoints/broken-stream-check.js';
import type { EndpointStore } from '../endpoints/store.js';
import type { LatencyTracker } from '../picker/latency-tracker.js';
import { IGNORED } from '../request/outcome-sink.js';
import type { OutcomeSink } from '../request/outcome-sink.js';

export interface HealthParts {
  readonly store: EndpointStore;
  /**
   * Checks a replica an attempt could not connect to, or that reset before any response: one failed
   * request (not a streak of `quarantine.consecutiveFailures`) is then enough to take a dead replica
   * out, also behind gateways that cannot fall back to another replica.
   */
  readonly failedConnects?: BrokenStreamCheck;
  /** Checks a replica whose response stream broke with no explanation: it died, or the client left. */
  readonly brokenStreams?: BrokenStreamCheck;
  /** Recent latency per endpoint; absent = latency does not steer. */
  readonly latency?: LatencyTracker;
}

export function healthSink({ store, failedConnects, brokenStreams, latency }: HealthParts): OutcomeSink {
  return {
    opened: IGNORED,
    handled: IGNORED,
    routed: IGNORED,
    queued: IGNORED,
    servedOutsidePick: IGNORED,
    attempt: (_request, { endpoint, failure }) => {
      if (failure === undefined) {
        store.recordSuccess(endpoint.address);
        return;
      }
      store.recordFailure(endpoint.address, failure);
      if (failure === 'connect_failure' || failure === 'reset') void failedConnects?.suspect(endpoint.address);
    },
    finished: (_request, { figures, brokenMidStream, at }) => {
      if (latency !== undefined && figures?.firstPick === true) {
        // Without usage in the stream, the gap between content events stands in for the time per token.
        const { model, pool, endpoint: address, timeToFirstToken, timePerOutputToken, interTokenLatency, usage, duration } = figures;
        latency.record(
          {
            model,
            pool,
            address,
            timeToFirstToken,
            timePerOutputToken: timePerOutputToken ?? interTokenLatency,
            durationSeconds: duration,
            // Prefill speed for the cost model (prefix scorer): the prompt's tokens less those it found cached.
            ...(usage === undefined ? {} : { promptTokens: usage.input, cachedTokens: usage.cached ?? 0 }),
          },
          at,
        );
      }
      const broken = brokenMidStream?.endpoint;
      if (broken !== undefined) void brokenStreams?.suspect(broken.address);
    },
    closed: IGNORED,
  };
}
