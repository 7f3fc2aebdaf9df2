// Pure endpoint selection: routable candidates + load signals → an ordered list (primary first,
// then fallbacks for Envoy's retries). No I/O, no clocks; randomness is injected for tests.

import { isRoutable } from '../endpoints/model.js';
import type { Endpoint, PoolView } from '../endpoints/model.js';

export interface PickSignals {
  /** Requests currently in flight per endpoint address. */
  inFlight(address: string): number;
}

export interface PickOptions {
  /** How many fallbacks to add after the primary (each must be a different address). */
  readonly fallbacks: number;
  /** Uniform random number in [0, 1); Math.random in production. */
  readonly random: () => number;
}

/**
 * Orders routable endpoints by in-flight load, least first; equal loads are shuffled so that
 * idle replicas share traffic evenly instead of the first one taking everything.
 */
export function pickEndpoints(pools: readonly PoolView[], signals: PickSignals, options: PickOptions): Endpoint[] {
  const byAddress = new Map<string, Endpoint>();
  for (const pool of pools) for (const endpoint of pool.endpoints) if (isRoutable(endpoint) && !byAddress.has(endpoint.address)) byAddress.set(endpoint.address, endpoint);
  const ranked = [...byAddress.values()].map((endpoint) => ({ endpoint, load: signals.inFlight(endpoint.address), tieBreak: options.random() }));
  ranked.sort((a, b) => a.load - b.load || a.tieBreak - b.tieBreak);
  return ranked.slice(0, 1 + Math.max(0, options.fallbacks)).map((r) => r.endpoint);
}
