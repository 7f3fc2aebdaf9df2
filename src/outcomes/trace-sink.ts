// Outcomes on the request's span (tracing/request-trace.ts), when it has one: the pick with the
// primary's signals at that moment, the wait in a queue, each attempt, the figures, the result, and
// the end of the span. Composed only while tracing is on; an unsampled request has no trace.

import type { SignalBoard } from '../picker/signals.js';
import { IGNORED } from '../request/outcome-sink.js';
import type { OutcomeSink } from '../request/outcome-sink.js';

export function traceSink(board: SignalBoard): OutcomeSink {
  return {
    opened: IGNORED,
    handled: IGNORED,
    routed: ({ trace }, routed) => {
      const primary = routed.endpoints[0];
      if (trace === undefined || primary === undefined) return;
      const signals = board.snapshot(primary.address);
      // A report that is stale or failing did not count in the pick: the span does not show it as if it had.
      const reported = signals.metrics === 'fresh';
      trace.picked({
        model: routed.model,
        pool: primary.pool,
        endpoint: primary.address,
        fallbacks: routed.endpoints.slice(1).map((e) => e.address),
        score: routed.score,
        inFlight: signals.inFlight,
        waiting: reported ? signals.waiting : undefined,
        running: reported ? signals.running : undefined,
        kvCacheUsage: reported ? signals.kvCacheUsage : undefined,
      });
    },
    queued: ({ trace }) => trace?.queued(),
    servedOutsidePick: IGNORED,
    attempt: ({ trace }, { endpoint, failure, reason }) =>
      trace?.attempt(endpoint.pool, endpoint.address, failure === undefined ? 'success' : 'failure', reason),
    finished: ({ trace }, outcome) => {
      if (trace === undefined) return;
      const figures = outcome.figures;
      if (figures !== undefined) {
        trace.figures({
          usage: figures.usage,
          timeToFirstToken: figures.timeToFirstToken,
          timePerOutputToken: figures.timePerOutputToken ?? figures.interTokenLatency,
        });
      }
      trace.finished({
        result: outcome.result,
        model: outcome.servedModel,
        operation: outcome.operation,
        status: outcome.status,
        endpoint: outcome.endpoint,
        answer: outcome.answer,
        verdict: outcome.verdict,
      });
    },
    closed: ({ trace }) => trace?.end(),
  };
}
