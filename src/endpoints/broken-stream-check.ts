// Decides, after a response stream broke half-way, whether the replica that served it died: a
// still-Ready replica gets one active check (replica-probe.ts); a failed check quarantines it at
// once (no streak needed: the check is direct evidence), a passed one leaves it Ready. Breaks of
// the same replica that arrive while a check runs share that check.

import type { BreakVerdict, ProbeResult } from './replica-probe.js';
import { verdictFor } from './replica-probe.js';
import type { EndpointStore } from './store.js';

export interface BrokenStreamEvents {
  /** Once per reported break, with the verdict (and the failed check's detail, if any). */
  checked?(address: string, verdict: BreakVerdict, detail: string | undefined): void;
}

export class BrokenStreamCheck {
  private readonly running = new Map<string, Promise<ProbeResult>>();

  constructor(
    private readonly store: Pick<EndpointStore, 'endpointsAt' | 'quarantineNow'>,
    private readonly probe: (address: string) => Promise<ProbeResult>,
    private readonly events: BrokenStreamEvents = {},
  ) {}

  /** Never rejects. Resolves when the verdict is applied (tests and callers may ignore it). */
  async suspect(address: string): Promise<BreakVerdict> {
    const stillReady = this.store.endpointsAt(address).some((endpoint) => endpoint.state === 'Ready');
    let result: ProbeResult | undefined;
    if (stillReady) {
      let check = this.running.get(address);
      if (check === undefined) {
        check = this.probe(address).finally(() => this.running.delete(address));
        this.running.set(address, check);
      }
      result = await check;
    }
    const verdict = verdictFor(stillReady, result);
    const detail = result !== undefined && !result.alive ? result.detail : undefined;
    if (verdict === 'replica_dead') this.store.quarantineNow(address, 'failed_check');
    this.events.checked?.(address, verdict, detail);
    return verdict;
  }
}
