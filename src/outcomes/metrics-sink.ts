// Outcomes as Prometheus series (metrics/metrics.ts): open streams, our time per message, requests
// routed and finished per model, attempts per replica, the LLM figures of good answers, and
// requests Envoy sent outside our pick.

import type { Metrics } from '../metrics/metrics.js';
import { IGNORED } from '../request/outcome-sink.js';
import type { OutcomeSink } from '../request/outcome-sink.js';

/** The model label of a request whose model is absent or not served here. */
const UNKNOWN_MODEL = '(unknown)';

export function metricsSink(metrics: Metrics): OutcomeSink {
  return {
    opened: () => metrics.requestStarted(),
    handled: (message, seconds) => metrics.messageHandled(message, seconds),
    routed: (request, routed, first) => {
      if (first) metrics.requestRouted(routed.model, request.model ?? UNKNOWN_MODEL, request.requestBytes);
    },
    queued: IGNORED,
    servedOutsidePick: () => metrics.servedOutsidePick(),
    attempt: (_request, { endpoint, failure, reason }) =>
      metrics.attempt(
        endpoint.pool,
        endpoint.address,
        failure === undefined ? 'success' : 'failure',
        failure === undefined ? 'ok' : reason,
      ),
    finished: (_request, outcome) => {
      metrics.requestFinished(outcome.servedModel ?? UNKNOWN_MODEL, outcome.result, outcome.targetModel);
      if (outcome.figures !== undefined) metrics.requestFigures(outcome.figures, outcome.targetModel);
    },
    closed: (request, { releasedModel, code, seconds }) => {
      if (releasedModel !== undefined) metrics.requestReleased(releasedModel, request.model ?? UNKNOWN_MODEL);
      metrics.requestEnded(code, seconds);
    },
  };
}
