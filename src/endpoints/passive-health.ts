// Passive health: pure bookkeeping of consecutive connect failures and resets per endpoint address.
// An endpoint that fails `threshold` times in a row is quarantined for a backoff that doubles on each
// new quarantine (capped), and is released when the backoff ends. A success resets the streak.

export interface QuarantinePolicy {
  /** Consecutive connect failures / resets that quarantine an endpoint. */
  readonly threshold: number;
  readonly baseMs: number;
  readonly maxMs: number;
}

export type AttemptFailure = 'connect_failure' | 'reset' | 'timeout' | 'bad_response';

interface HealthRecord {
  consecutiveFailures: number;
  /** How many times this endpoint has been quarantined in a row (drives the backoff). */
  strikes: number;
  quarantinedUntil: number;
  lastFailure: AttemptFailure | 'failed_check' | undefined;
}

export interface QuarantineStatus {
  readonly until: number;
  readonly reason: string;
}

/** Only failures that say "this replica cannot take connections" quarantine it; a bad answer does not. */
function isHealthFailure(failure: AttemptFailure): boolean {
  return failure === 'connect_failure' || failure === 'reset';
}

export class PassiveHealth {
  private readonly records = new Map<string, HealthRecord>();

  constructor(private readonly policy: QuarantinePolicy) {}

  /** Returns true when this failure put the endpoint into quarantine (a state change). */
  recordFailure(address: string, failure: AttemptFailure, now: number): boolean {
    if (!isHealthFailure(failure)) return false;
    const record = this.records.get(address) ?? { consecutiveFailures: 0, strikes: 0, quarantinedUntil: 0, lastFailure: undefined };
    this.records.set(address, record);
    record.consecutiveFailures += 1;
    record.lastFailure = failure;
    // After a quarantine ends the endpoint is on probation: one more failure sends it back, for longer.
    const needed = record.strikes > 0 ? 1 : this.policy.threshold;
    if (record.quarantinedUntil > now || record.consecutiveFailures < needed) return false;
    const backoff = Math.min(this.policy.maxMs, this.policy.baseMs * 2 ** record.strikes);
    if (backoff <= 0) return false; // quarantine.baseSeconds: 0 turns passive health off
    record.strikes += 1;
    record.quarantinedUntil = now + backoff;
    record.consecutiveFailures = 0;
    return true;
  }

  /**
   * An active check found the endpoint dead (a stream broke and the replica then failed its check):
   * quarantine it now, with the same backoff a streak of connect failures earns. Returns true on a
   * state change (false when it is already quarantined or passive health is off).
   */
  quarantineNow(address: string, now: number): boolean {
    const record = this.records.get(address) ?? { consecutiveFailures: 0, strikes: 0, quarantinedUntil: 0, lastFailure: undefined };
    if (record.quarantinedUntil > now) return false;
    const backoff = Math.min(this.policy.maxMs, this.policy.baseMs * 2 ** record.strikes);
    if (backoff <= 0) return false;
    this.records.set(address, record);
    record.lastFailure = 'failed_check';
    record.strikes += 1;
    record.quarantinedUntil = now + backoff;
    record.consecutiveFailures = 0;
    return true;
  }

  /** Returns true when the endpoint left quarantine because of this success. */
  recordSuccess(address: string): boolean {
    const record = this.records.get(address);
    if (record === undefined) return false;
    this.records.delete(address);
    return record.quarantinedUntil > 0;
  }

  status(address: string, now: number): QuarantineStatus | undefined {
    const record = this.records.get(address);
    if (record === undefined || record.quarantinedUntil <= now) return undefined;
    const what = record.lastFailure === 'reset' ? 'connection resets' : 'connect failures';
    const count =
      record.strikes > 1
        ? 'another failure after a previous quarantine'
        : record.lastFailure === 'failed_check'
          ? 'an attempt failed (no connection, a reset, or a broken stream) and the replica then failed its health check'
          : `${this.policy.threshold} consecutive ${what}`;
    // An absolute time stays true however long the view is cached; a countdown would not.
    const until = new Date(record.quarantinedUntil).toISOString().replace(/\.\d+Z$/, 'Z');
    return { until: record.quarantinedUntil, reason: `${count}; until ${until}` };
  }

  /** Earliest quarantine end after `now`, so the store can schedule one re-evaluation timer. */
  nextRelease(now: number): number | undefined {
    let next: number | undefined;
    for (const record of this.records.values()) {
      if (record.quarantinedUntil > now && (next === undefined || record.quarantinedUntil < next)) next = record.quarantinedUntil;
    }
    return next;
  }

  /** Addresses with any record (a failure streak or a quarantine). */
  get size(): number {
    return this.records.size;
  }

  /** Drop records of addresses no source lists any more, so memory follows the fleet. */
  retainOnly(addresses: ReadonlySet<string>): void {
    for (const address of this.records.keys()) if (!addresses.has(address)) this.records.delete(address);
  }
}
