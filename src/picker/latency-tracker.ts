// Recent latency per endpoint, per model and pool, and passive outlier handling: fed with the
// figures of every streamed answer (time to first token, time per output token), it keeps decayed
// estimates (latency.ts), compares each endpoint with its pool's medians, and publishes a latency
// score per endpoint into the signal board, where the picker reads it as one number per candidate.
// A replica that is Ready but persistently much slower than its pool is demoted: ranked below
// every replica that is not, while one of those has room in its batch, it only takes requests
// when no other can without queueing them, plus one probe request now and then so that its
// estimate sees it speed up. Pure apart from the board it writes: the caller
// passes every time (monotonic milliseconds), and the work per sample is a few map lookups; the
// medians are taken at most every REFRESH_MS per model.
//
//   normal ──slowness ≥ outlierFactor, ≥ 3 trusted replicas──▶ demoted ──probe interval──▶ probing
//     ▲                                                          ▲  │                        │
//     │                                                          │  └─ picked as primary ────┘ (one probe)
//     └── a sample at ≤ recoverFactor × median · estimate back at ≤ recoverFactor · samples weigh < 1

import { DecayedLine, DecayedMean, latencyScore, medianOf, slowness } from './latency.js';
import type { LatencyFloor } from './latency.js';
import { LATENCY_DEMOTED, LATENCY_NEUTRAL } from './signals.js';
import type { SignalBoard } from './signals.js';
import type { LatencySettings } from './scorer-table.js';

export type LatencyState = 'normal' | 'demoted' | 'probing';

/** The named reason of a demotion (in /debug/endpoints, metrics and docs/picking.md). */
export const SLOW_REPLICA = 'slow_replica';

/** Medians are recomputed at most this often per model (a sort over its measured endpoints). */
const REFRESH_MS = 250;
/** An estimate weighing less than this is forgotten (memory follows the endpoints that answer). */
const FORGET_WEIGHT = 0.01;
/** Replicas with a trusted estimate a pool needs before any one of them can be called an outlier. */
const MIN_PEERS = 3;
/** A probe whose answer never came (it failed, or was not streamed) is given up after this many intervals. */
const PROBE_LOST_INTERVALS = 10;

export interface LatencySample {
  readonly model: string;
  readonly pool: string;
  readonly address: string;
  /** Seconds; undefined when not measured (no content, not streamed). */
  readonly timeToFirstToken: number | undefined;
  readonly timePerOutputToken: number | undefined;
  /** The prompt's tokens and those of them the server had cached (its usage), when the answer reported them. */
  readonly promptTokens?: number;
  readonly cachedTokens?: number;
  /** Seconds from the pick to the answer's end, when it was answered in full. */
  readonly durationSeconds?: number;
}

/** Answers the prefill line needs before its slope counts (a line through a few noisy points is noise). */
const MIN_PREFILL_SAMPLES = 20;

export interface LatencyObserver {
  demoted?(model: string, pool: string, address: string, detail: string): void;
  reinstated?(model: string, pool: string, address: string, why: string): void;
}

export interface EndpointLatencySnapshot {
  readonly model: string;
  readonly pool: string;
  readonly state: LatencyState;
  readonly ttftSeconds?: number;
  readonly tpotSeconds?: number;
  /** Decayed samples the estimates stand for. */
  readonly samples: number;
  /** Times slower than the pool's median (1 = as fast or faster, or not trusted yet). */
  readonly slowness: number;
  readonly reason?: typeof SLOW_REPLICA;
  readonly detail?: string;
}

class EndpointLatency {
  readonly ttft = new DecayedMean();
  readonly tpot = new DecayedMean();
  state: LatencyState = 'normal';
  slowness = 1;
  detail = '';
  /** When the last probe was armed; whether its answer is still awaited. */
  probeAt = 0;
  probeOutstanding = false;
}

class PoolLatency {
  readonly endpoints = new Map<string, EndpointLatency>();
  medianTtft = Number.NaN;
  medianTpot = Number.NaN;
  /** Time to first token against uncached prompt tokens, over the pool's answers with usage: its slope is the cost model's prefill figure. */
  readonly prefill = new DecayedLine();
  /** Pick to last token, over the pool's answers (the scale the cost model judges a saving against). */
  readonly duration = new DecayedMean();
}

class ModelLatency {
  readonly pools = new Map<string, PoolLatency>();
  refreshedAt = Number.NEGATIVE_INFINITY;
  /** Endpoints in the probing state: while 0, a pick costs one map lookup here. */
  probing = 0;
}

export class LatencyTracker {
  private readonly models = new Map<string, ModelLatency>();
  private ttftScratch = new Float64Array(16);
  private tpotScratch = new Float64Array(16);
  private readonly floor: LatencyFloor;

  constructor(
    private readonly board: SignalBoard,
    private readonly settings: LatencySettings,
    private readonly observer: LatencyObserver = {},
  ) {
    this.floor = { ttftSeconds: settings.floorTtftSeconds, tpotSeconds: settings.floorTpotSeconds };
  }

  /** The figures of one answered request, taken at `now`. */
  record(sample: LatencySample, now: number): void {
    const { timeToFirstToken: ttft, timePerOutputToken: tpot } = sample;
    if (!isSeconds(ttft) && !isSeconds(tpot)) return;
    let model = this.models.get(sample.model);
    if (model === undefined) this.models.set(sample.model, (model = new ModelLatency()));
    let pool = model.pools.get(sample.pool);
    if (pool === undefined) model.pools.set(sample.pool, (pool = new PoolLatency()));
    let endpoint = pool.endpoints.get(sample.address);
    if (endpoint === undefined) pool.endpoints.set(sample.address, (endpoint = new EndpointLatency()));
    const halfLife = this.settings.halfLifeMs;
    let refreshNow = false;
    if (endpoint.state !== 'normal') {
      endpoint.probeOutstanding = false;
      // A demoted replica is sampled rarely: one answer at pool speed is enough to reinstate it,
      // starting its estimate afresh (if it is still slow, the next samples demote it again).
      const seen = slowness(ttft ?? Number.NaN, tpot ?? Number.NaN, pool.medianTtft, pool.medianTpot, this.floor);
      if (seen <= this.settings.recoverFactor) {
        if (isSeconds(ttft)) endpoint.ttft.restart(ttft, now);
        if (isSeconds(tpot)) endpoint.tpot.restart(tpot, now);
        this.reinstate(
          model,
          sample.model,
          sample.pool,
          sample.address,
          endpoint,
          `a probe answered at ${seen.toFixed(1)}× the pool's median`,
        );
        refreshNow = true;
      }
    }
    const uncached = (sample.promptTokens ?? 0) - (sample.cachedTokens ?? 0);
    if (isSeconds(ttft) && sample.promptTokens !== undefined && uncached >= 0) pool.prefill.observe(uncached, ttft, now, halfLife);
    if (isSeconds(sample.durationSeconds)) pool.duration.observe(sample.durationSeconds, now, halfLife);
    if (!refreshNow) {
      if (isSeconds(ttft)) endpoint.ttft.observe(ttft, now, halfLife);
      if (isSeconds(tpot)) endpoint.tpot.observe(tpot, now, halfLife);
    }
    if (refreshNow || now - model.refreshedAt >= REFRESH_MS) this.refresh(sample.model, model, now);
  }

  /**
   * The request of `model` went to `address` first (routing calls this for every pick): when it
   * was waiting for a probe, this request is the probe, and it is demoted again until the answer.
   */
  picked(model: string, address: string): void {
    const entry = this.models.get(model);
    if (entry === undefined || entry.probing === 0) return;
    for (const pool of entry.pools.values()) {
      const endpoint = pool.endpoints.get(address);
      if (endpoint === undefined || endpoint.state !== 'probing') continue;
      endpoint.state = 'demoted';
      endpoint.probeOutstanding = true;
      entry.probing--;
      this.publish(model, address, LATENCY_DEMOTED);
    }
  }

  /** What /debug/endpoints shows for one address (one entry per model and pool it was measured in). */
  snapshot(address: string, now: number): EndpointLatencySnapshot[] {
    const out: EndpointLatencySnapshot[] = [];
    const halfLife = this.settings.halfLifeMs;
    for (const [model, entry] of this.models) {
      for (const [pool, poolEntry] of entry.pools) {
        const e = poolEntry.endpoints.get(address);
        if (e === undefined) continue;
        out.push({
          model,
          pool,
          state: e.state,
          ...(Number.isNaN(e.ttft.mean) ? {} : { ttftSeconds: e.ttft.mean }),
          ...(Number.isNaN(e.tpot.mean) ? {} : { tpotSeconds: e.tpot.mean }),
          samples: Math.max(e.ttft.weightAt(now, halfLife), e.tpot.weightAt(now, halfLife)),
          slowness: e.slowness,
          ...(e.state === 'normal' ? {} : { reason: SLOW_REPLICA, detail: e.detail }),
        });
      }
    }
    return out;
  }

  /** Replicas demoted (or waiting for a probe) per pool, for the metrics gauge. */
  *demotedByPool(): IterableIterator<[pool: string, count: number]> {
    const counts = new Map<string, number>();
    for (const entry of this.models.values())
      for (const [pool, poolEntry] of entry.pools) {
        let n = 0;
        for (const e of poolEntry.endpoints.values()) if (e.state !== 'normal') n++;
        counts.set(pool, (counts.get(pool) ?? 0) + n);
      }
    yield* counts;
  }

  /** Medians per pool, then every endpoint's slowness, state and published score. */
  private refresh(modelName: string, model: ModelLatency, now: number): void {
    model.refreshedAt = now;
    const { halfLifeMs, minSamples, outlierFactor, recoverFactor, probeIntervalMs } = this.settings;
    for (const [poolName, pool] of model.pools) {
      this.medians(pool, now);
      // The cost model's figures: what a request ahead costs (the median time to first token) and
      // prefill per token, each once measured (NaN: not yet; the picker keeps its default).
      this.board.setPrefillCosts(poolName, {
        prefillSecondsPerToken: pool.prefill.weightAt(now, halfLifeMs) >= MIN_PREFILL_SAMPLES ? pool.prefill.slope : Number.NaN,
        queueSecondsPerRequest: pool.medianTtft,
        requestSeconds: pool.duration.weightAt(now, halfLifeMs) >= minSamples ? pool.duration.mean : Number.NaN,
      });
      const peers = this.trustedCount(pool, now);
      for (const [address, e] of pool.endpoints) {
        const weight = Math.max(e.ttft.weightAt(now, halfLifeMs), e.tpot.weightAt(now, halfLifeMs));
        if (weight < FORGET_WEIGHT) {
          if (e.state !== 'normal') this.reinstate(model, modelName, poolName, address, e, 'no recent answers to judge it by');
          pool.endpoints.delete(address);
          this.publish(modelName, address, LATENCY_NEUTRAL);
          continue;
        }
        const trusted = weight >= minSamples;
        e.slowness = trusted || e.state !== 'normal' ? slowness(e.ttft.mean, e.tpot.mean, pool.medianTtft, pool.medianTpot, this.floor) : 1;
        if (e.state === 'normal') {
          if (trusted && peers >= MIN_PEERS && e.slowness >= outlierFactor) {
            e.state = 'demoted';
            e.probeAt = now;
            e.probeOutstanding = false;
            e.detail = this.describe(e, pool);
            this.observer.demoted?.(modelName, poolName, address, e.detail);
          }
        } else if (weight < 1 || e.slowness <= recoverFactor) {
          // Trust hysteresis: a demoted replica answers rarely (its probes), so it keeps its verdict
          // until its samples weigh less than one; else it would flap in and out with every probe.
          this.reinstate(
            model,
            modelName,
            poolName,
            address,
            e,
            weight >= 1 ? `its estimate is back at ${e.slowness.toFixed(1)}× the pool's median` : 'too few recent answers to judge it by',
          );
        } else if (e.state === 'demoted') {
          e.detail = this.describe(e, pool);
          const due = e.probeOutstanding ? PROBE_LOST_INTERVALS * probeIntervalMs : probeIntervalMs;
          if (now - e.probeAt >= due) {
            e.state = 'probing';
            e.probeAt = now;
            e.probeOutstanding = false;
            model.probing++;
          }
        }
        // Probing: scored as a normal replica until a pick takes it (picked()), one request.
        this.publish(
          modelName,
          address,
          e.state === 'demoted' ? LATENCY_DEMOTED : e.state === 'probing' ? LATENCY_NEUTRAL : latencyScore(e.slowness),
        );
      }
    }
  }

  private reinstate(model: ModelLatency, modelName: string, pool: string, address: string, e: EndpointLatency, why: string): void {
    if (e.state === 'probing') model.probing--;
    e.state = 'normal';
    e.detail = '';
    e.probeOutstanding = false;
    this.observer.reinstated?.(modelName, pool, address, why);
  }

  private medians(pool: PoolLatency, now: number): void {
    const n = pool.endpoints.size;
    if (this.ttftScratch.length < n) {
      this.ttftScratch = new Float64Array(2 * n);
      this.tpotScratch = new Float64Array(2 * n);
    }
    let ttfts = 0;
    let tpots = 0;
    const { halfLifeMs, minSamples } = this.settings;
    for (const e of pool.endpoints.values()) {
      // Medians of the trusted, and not of the demoted: a slow replica must not drag the bar it is measured against.
      if (e.state !== 'normal') continue;
      if (e.ttft.weightAt(now, halfLifeMs) >= minSamples) this.ttftScratch[ttfts++] = e.ttft.mean;
      if (e.tpot.weightAt(now, halfLifeMs) >= minSamples) this.tpotScratch[tpots++] = e.tpot.mean;
    }
    // With every replica demoted but none trusted otherwise, keep the last medians.
    if (ttfts > 0) pool.medianTtft = medianOf(this.ttftScratch, ttfts);
    if (tpots > 0) pool.medianTpot = medianOf(this.tpotScratch, tpots);
  }

  private trustedCount(pool: PoolLatency, now: number): number {
    const { halfLifeMs, minSamples } = this.settings;
    let n = 0;
    for (const e of pool.endpoints.values())
      if (Math.max(e.ttft.weightAt(now, halfLifeMs), e.tpot.weightAt(now, halfLifeMs)) >= minSamples) n++;
    return n;
  }

  private describe(e: EndpointLatency, pool: PoolLatency): string {
    const part = (name: string, value: number, median: number): string =>
      Number.isNaN(value) || Number.isNaN(median) ? '' : `${name} ${seconds(value)} (pool median ${seconds(median)})`;
    const parts = [part('time per output token', e.tpot.mean, pool.medianTpot), part('time to first token', e.ttft.mean, pool.medianTtft)];
    return `${e.slowness.toFixed(1)}× slower than its pool (demoted at ${this.settings.outlierFactor}×): ${parts.filter((p) => p !== '').join(', ')}`;
  }

  private publish(model: string, address: string, value: number): void {
    const cell = this.board.peek(address);
    if (cell !== undefined && cell.slot >= 0) this.board.setLatency(model, cell.slot, value);
  }
}

function isSeconds(value: number | undefined): value is number {
  return value !== undefined && Number.isFinite(value) && value >= 0;
}

function seconds(value: number): string {
  return value >= 1 ? `${value.toFixed(2)} s` : `${(value * 1000).toFixed(value >= 0.01 ? 0 : 1)} ms`;
}
