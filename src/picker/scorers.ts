// The scorers: pure functions from one candidate's signals (and a few facts about all candidates)
// to a score in [0, 1], higher = better place for the request. The pipeline multiplies each by its
// configured weight and adds them up. Unknown model-server metrics always score 0: a stale, failing
// or missing scrape must never make an endpoint look idle.

/** A pool's cost figures (latency-tracker.ts writes those it has measured, NaN for the others; the prefix scorer's cost model reads them). */
export interface PrefillCosts {
  /** Seconds of prefill per uncached prompt token. */
  readonly prefillSecondsPerToken: number;
  /** Seconds one more request ahead in a server's queue costs (the pool's median time to first token). */
  readonly queueSecondsPerRequest: number;
  /** Seconds a request takes, pick to last token (the pool's mean): the scale a saving is judged against. */
  readonly requestSeconds: number;
}

/** Smallest and largest value among the candidates that report it. */
export interface Range {
  readonly min: number;
  readonly max: number;
}

/** Lower is better, scaled to the candidates' range: the least loaded gets 1, the most loaded 0. */
export function lowerIsBetter(value: number | undefined, range: Range): number {
  if (value === undefined || !Number.isFinite(value)) return 0;
  const span = range.max - range.min;
  if (span <= 0) return 1;
  const score = (range.max - value) / span;
  // Clamped to [0, 1] by comparisons, not Math.min/max: this runs per candidate on every pick.
  return score >= 1 ? 1 : score > 0 ? score : 0;
}

/** Model-server queue (`num_requests_waiting`): shorter queues first. */
export function queueDepthScore(waiting: number | undefined, range: Range): number {
  return lowerIsBetter(waiting, range);
}

/** KV-cache utilisation 0..1 (absolute, not relative: 30 % used is as good alone as among others). */
export function kvCacheScore(usage: number | undefined): number {
  if (usage === undefined || !Number.isFinite(usage)) return 0;
  return usage >= 1 ? 0 : usage > 0 ? 1 - usage : 1;
}

/** Our own in-flight count: always known, so it keeps working when scraping is off or failing. */
export function inFlightScore(inFlight: number, range: Range): number {
  return lowerIsBetter(inFlight, range);
}

/**
 * Prefill saved, against the queue the request would join: the prompt's tokens cached at the
 * candidate (`matchedTokens`) save `matchedTokens × prefillSecondsPerToken` of prefill; sending it
 * there rather than to the least loaded candidate costs `excessLoad` more requests ahead of it,
 * each `queueSecondsPerRequest`. The score is what is left of the saving, as a share of the most any
 * candidate saves (`bestTokens`) or of a whole request's time (`requestSeconds`), whichever is
 * more: 1 for the best-cached candidate at the least load, 0 where the queue eats the saving, and
 * next to nothing for a saving that is small next to the request itself. So a two-word prompt is
 * placed by load, and a long shared context follows its cache while that beats the queue.
 */
export function prefillSavedScore(matchedTokens: number, bestTokens: number, excessLoad: number, costs: PrefillCosts): number {
  if (!(matchedTokens > 0) || !(bestTokens > 0)) return 0;
  const perToken = costs.prefillSecondsPerToken;
  const best = bestTokens * perToken;
  const scale = best > costs.requestSeconds ? best : costs.requestSeconds;
  const left = matchedTokens * perToken - (excessLoad > 0 ? excessLoad : 0) * costs.queueSecondsPerRequest;
  // Comparisons, not Math.min/max: this runs per candidate on every pick with a prompt.
  return left >= scale ? 1 : left > 0 ? left / scale : 0;
}

/**
 * LoRA affinity for a request naming an adapter: a server that already has it (`has`: running or
 * loading) scores 1, one with a free adapter slot 0.5 (it can load it without evicting), a full one
 * or one we know nothing about (`adapterCount` undefined: metrics unusable) 0. `adapterCount` is
 * how many adapters the server holds; `maxAdapters` is the configured limit, or the server's own
 * max_lora when smaller.
 */
export function loraAffinityScore(has: boolean, adapterCount: number | undefined, maxAdapters: number): number {
  if (adapterCount === undefined) return 0;
  if (has) return 1;
  return adapterCount < maxAdapters ? 0.5 : 0;
}

/**
 * Bounded load (consistent hashing with bounded loads): an endpoint may keep the prefixes it owns
 * while its load stays within `factor` × the candidates' mean load + `slack`; above that, its
 * prefixes go to the next owner in rendezvous order.
 */
export function isOverloaded(load: number, meanLoad: number, factor: number, slack: number): boolean {
  return load > factor * meanLoad + slack;
}

/**
 * The part of a model server's reported load (running + waiting, counted across every gateway
 * replica and client) that is not ours: the report less our in-flight count there when it was
 * taken, never below 0 (our requests may not have reached the server yet, or have left it while
 * their streams close). An unreported `running` counts as 0; a NaN in any part (an unreadable
 * gauge) makes the whole report count as 0, not just that part.
 */
export function othersLoad(waiting: number, running: number | undefined, ourInFlightThen: number): number {
  const others = waiting + (running ?? 0) - ourInFlightThen;
  // A comparison rather than Math.max: NaN (an unreadable gauge) gives 0, not NaN.
  return others > 0 ? others : 0;
}

/**
 * The part of a model server's reported queue that is not ours: the report less our in-flight
 * count there when it was taken, never below 0. Ours are counted live by the in-flight scorer;
 * scored again from a report up to a scrape interval old, they would count twice, and late: with
 * one llm-extproc replica the whole queue is ours, and the report only lags what we know
 * (`npm run simulate`, short prompts with a slow replica, latency off: a p99 queue wait of 117 ms
 * with the whole queue scored, 87 with this).
 * NaN (an unreadable gauge) gives 0.
 */
export function othersWaiting(waiting: number, ourInFlightThen: number): number {
  const others = waiting - ourInFlightThen;
  return others > 0 ? others : 0;
}

/**
 * How many requests a model server runs at once, as its reports show it; NaN until one shows a
 * queue. A report with a queue behind `running` requests says the batch was full at about that
 * many (`max_num_seqs`, or fewer while the KV cache holds no more); from then on the most seen
 * running is the limit. It is never lowered: a queue scraped before the scheduler's next step
 * (vLLM shows one for a moment while the batch still has room) would otherwise make a replica
 * with room look full, and send requests to a demoted one; a limit too high only keeps the
 * demoted one below, as without a limit. A report with nothing running (a server starting, an
 * unreadable or missing gauge, which the parser reads as 0) says nothing.
 */
export function observedBatchLimit(previous: number, waiting: number, running: number): number {
  if (!(running > 0)) return previous;
  if (waiting > 0 && Number.isNaN(previous)) return running;
  // A known limit only rises; NaN (not known) stays NaN without a queue: the comparison is false.
  return running > previous ? running : previous;
}

/** Whether a server takes one more request into its batch now: unknown (NaN) counts as room. */
export function hasBatchRoom(outstanding: number, batchLimit: number): boolean {
  return !(outstanding >= batchLimit);
}

/**
 * Requests outstanding at an endpoint: the others' share from the last report plus ours now. Ours
 * is live, so a request we send or that ends counts at once instead of at the next scrape (a
 * replica that just sent a burst somewhere sees it; one whose requests finished does not keep
 * counting them), while the other replicas' share stays what the server said.
 */
export function outstandingLoad(inFlight: number, othersLoad: number): number {
  return inFlight + othersLoad;
}
