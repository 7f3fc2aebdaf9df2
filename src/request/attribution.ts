// Which of our picks is credited or blamed for a response (response-class.ts decided who answered
// and whether it was good): the pick that served the request (or none: Envoy chose a host itself),
// the replicas that failed before a fallback answered, what Envoy's own failures mean for each
// replica, and the request's result. Pure: it records attempts and the finish on the step.

import type { Endpoint } from '../endpoints/model.js';
import type { AttemptFailure } from '../endpoints/passive-health.js';
import type { ErrorKind } from '../errors/catalog.js';
import { GatewayError } from '../errors/gateway-error.js';
import { immediateError } from './decision-replies.js';
import type { RequestResult } from './request-result.js';
import type { StepBuilder } from './stream-state.js';
import type { Exchange, Served } from './stream-state.js';

/**
 * Envoy gives no end_of_stream when the upstream resets mid-body; a client hanging up looks the
 * same. Either way the attempt failed; the processor decides (actively) whether the replica died.
 */
export function brokenMidStream(out: StepBuilder, served: Served): void {
  if (served.servedBy !== undefined) out.attempt(served.servedBy, 'bad_response', 'stream_broken');
  out.finish(served.exchange.request, served.exchange, 'stream_broken', served, true);
}

// ── Envoy's own failures ────────────────────────────────────────────────────────────────────

export function replaceWithEnvoyFailure(
  out: StepBuilder,
  exchange: Exchange,
  kind: ErrorKind,
  detail: string,
  upstreamAddress: string | undefined,
): void {
  const err = failureFromEnvoy(out, exchange, kind, detail, upstreamAddress);
  out.reply(immediateError(err, exchange.request.requestId));
}

function failureFromEnvoy(
  out: StepBuilder,
  exchange: Exchange,
  kind: ErrorKind,
  detail: string,
  upstreamAddress: string | undefined,
): GatewayError {
  const model = exchange.model;
  const modelDetails = model === undefined ? {} : { model };
  const forModel = model === undefined ? '' : ` for model ${model}`;
  switch (kind) {
    case 'upstream_connect_failed':
    case 'all_replicas_failed': {
      // UF+URX: Envoy walked our whole list (retries never leave it), so every replica in it
      // failed to connect. UF alone: one attempt, at the host Envoy names (or our primary).
      const tried = exchange.routed?.endpoints ?? [];
      const last = resolveServedBy(out, exchange, upstreamAddress);
      const outsidePick = last === undefined && upstreamAddress !== undefined && upstreamAddress !== '';
      const failed = outsidePick ? [] : kind === 'all_replicas_failed' ? tried : last === undefined ? [] : [last];
      for (const endpoint of failed) out.attempt(endpoint, 'connect_failure', kind);
      out.finish(exchange.request, exchange, kind, { exchange, servedBy: last, status: 0 });
      if (outsidePick) {
        return new GatewayError(kind, `Envoy sent the request${forModel} to a host outside our pick, and it failed to connect: ${detail}`, {
          details: modelDetails,
        });
      }
      const effective: ErrorKind = failed.length > 1 ? 'all_replicas_failed' : 'upstream_connect_failed';
      const what =
        failed.length > 1 ? `all ${failed.length} replicas tried${forModel} failed` : `the replica${forModel} could not be reached`;
      return new GatewayError(effective, `${what}: ${detail}`, {
        details: { ...modelDetails, replicas_tried: Math.max(1, failed.length) },
      });
    }
    case 'upstream_reset':
    case 'upstream_timeout': {
      const endpoint = resolveServedBy(out, exchange, upstreamAddress);
      blameSkipped(out, exchange, endpoint);
      if (endpoint !== undefined) out.attempt(endpoint, kind === 'upstream_timeout' ? 'timeout' : 'reset', kind);
      out.finish(exchange.request, exchange, kind, { exchange, servedBy: endpoint, status: 0 });
      const what = kind === 'upstream_timeout' ? 'did not answer in time' : 'closed the connection before answering';
      return new GatewayError(kind, `the replica serving${model === undefined ? ' the request' : ` model ${model}`} ${what}: ${detail}`, {
        details: modelDetails,
      });
    }
    default:
      out.finish(exchange.request, exchange, kind, undefined);
      return new GatewayError(kind, model === undefined ? detail : `${detail} (model ${model})`, { details: modelDetails });
  }
}

// ── served endpoint and outcome helpers ─────────────────────────────────────────────────────

/**
 * Which of our picks answered. Envoy's `upstream.address` (or the gateway's `-served` metadata)
 * names the host; without either, only a host Envoy had no alternative to counts. A host we did not pick means Envoy's
 * cluster lacked our picks and chose itself: nothing about that attempt may be blamed on (or
 * credited to) the replicas we picked.
 */
export function resolveServedBy(out: StepBuilder, exchange: Exchange, upstreamAddress: string | undefined): Endpoint | undefined {
  const routed = exchange.routed;
  if (routed === undefined) return undefined;
  if (upstreamAddress === undefined || upstreamAddress === '') return exchange.servedUnlessReported;
  const picked = routed.endpoints.find((e) => e.address === upstreamAddress);
  if (picked === undefined) {
    out.notice({
      kind: 'served-outside-pick',
      upstream: upstreamAddress,
      picked: routed.destinations,
      model: exchange.model,
      requestId: exchange.request.requestId,
    });
  }
  return picked;
}

/** If a fallback answered, the replicas before it in our list failed to connect. */
export function blameSkipped(out: StepBuilder, exchange: Exchange, servedBy: Endpoint | undefined): void {
  if (servedBy === undefined || exchange.routed === undefined) return;
  for (const endpoint of exchange.routed.endpoints) {
    if (endpoint.address === servedBy.address) break;
    out.attempt(endpoint, 'connect_failure', 'upstream_connect_failed');
  }
}

/** Records the served replica's outcome and the request's result. */
export function settle(out: StepBuilder, served: Served, failure: AttemptFailure | undefined, result: RequestResult): void {
  if (served.servedBy !== undefined) out.attempt(served.servedBy, failure, failure === undefined ? 'ok' : result);
  out.finish(served.exchange.request, served.exchange, result, served);
}
