// Outcomes as log lines: a request served (debug, one line each: an access log for debugging),
// a request failed or cancelled (info, at most one line per result per interval; the rest at debug,
// all of them counted in llm_extproc_requests_total), a response stream that the model server's
// side broke (warn; a client that left is a cancellation, judged-breaks.ts), and requests Envoy
// sent to a host we did not pick.

import type { Logger } from 'pino';
import { isCancellation } from '../errors/catalog.js';
import { IGNORED } from '../request/outcome-sink.js';
import type { OutcomeSink } from '../request/outcome-sink.js';
import type { RequestResult } from '../request/request-result.js';
import type { LogThrottle } from '../util/log-throttle.js';

/**
 * `failureLog` is shared by every stream: a peer that opens and drops streams by the thousand must
 * not write as many lines.
 */
export function logSink(logger: Logger, failureLog: LogThrottle<RequestResult>): OutcomeSink {
  return {
    opened: IGNORED,
    handled: IGNORED,
    routed: IGNORED,
    queued: IGNORED,
    servedOutsidePick: (_request, { model, upstream, picked, requestId }) =>
      logger.warn(
        { model, upstream, picked, requestId },
        "Envoy sent the request to a host we did not pick: its backends cluster lacks our endpoints (check the cluster's host set)",
      ),
    attempt: IGNORED,
    finished: (_request, outcome) => {
      const { model, result, status, endpoint, path, requestId } = outcome;
      if (result === 'ok') {
        // Nothing is built at info.
        if (logger.isLevelEnabled('debug')) logger.debug({ model, status, endpoint, requestId }, 'request served');
      } else {
        const fields = { model, result, status, endpoint, path, requestId };
        // A client that left is not a failure: same throttle, its own words.
        const message = isCancellation(result) ? 'request cancelled' : 'request failed';
        const suppressed = failureLog.admit(result, outcome.at);
        if (suppressed === undefined) logger.debug(fields, message);
        else logger.info(suppressed === 0 ? fields : { ...fields, suppressed }, message);
      }
      if (outcome.brokenMidStream !== undefined) logger.warn({ model, endpoint, requestId }, 'response stream broke before it completed');
    },
    closed: IGNORED,
  };
}
