import type { QueueConfig } from './config.js';

/**
 * Flow control (decisions §8.5): what stops a claim, and the rate window every store keeps the
 * same way. Pure data and arithmetic; each store holds the state in its own atomic step (the
 * embedded store's single thread, a locked limiter row on PostgreSQL).
 */

/** Why a claim found nothing although the queue may hold claimable items. */
export type HoldReason = 'paused' | 'maxActive' | 'groupMaxActive' | 'rateLimit';

export const HOLD_REASONS: readonly HoldReason[] = ['paused', 'maxActive', 'groupMaxActive', 'rateLimit'];

/**
 * Filled in by a store when a limit (or the pause) held a claim back: the reason, and for the rate
 * limit the time (ms) at which the next claim can succeed. The HTTP layer answers it as
 * `Retry-After` and counts it in `svcq_claims_held_total`.
 */
export interface ClaimHold {
  reason?: HoldReason;
  /** Rate limit only: the earliest time (ms) one more item may be leased. */
  retryAt?: number;
}

/** Whether any limit of §8.5 (or groups fairness) applies to the queue's claims. */
export function hasLimits(config: QueueConfig): boolean {
  return config.maxActive !== null || config.groupMaxActive !== null || config.rateLimit !== null;
}

/** The group an item counts against for `groupMaxActive` and fairness: items without one form one group, keyed ''. */
export function groupKey(group: string | null): string {
  return group ?? '';
}

/**
 * The rate window of decisions §8.5 — at most `max` leases in any window of `windowMs` — kept
 * exactly, as the times of the last `max` leases in a ring: lease number k may happen at time t
 * only if lease k − max happened at or before t − windowMs. Constant memory per queue (`max`
 * numbers), constant time per lease, and no approximation at the window's edges (a fixed-bucket
 * counter lets 2·max through around a boundary).
 */
export class RateRing {
  private times: Float64Array;
  /** Leases noted so far (the next one's number). */
  private count = 0;

  constructor(
    public max: number,
    public windowMs: number,
  ) {
    this.times = new Float64Array(max).fill(-Infinity);
  }

  /** Follows a changed limit: the leases already noted keep counting (the most recent ones). */
  resize(max: number, windowMs: number): void {
    this.windowMs = windowMs;
    if (max === this.max) return;
    const recent: number[] = [];
    for (let k = Math.max(0, this.count - Math.min(max, this.max)); k < this.count; k++) recent.push(this.times[k % this.max]!);
    this.max = max;
    this.times = new Float64Array(max).fill(-Infinity);
    this.count = 0;
    for (const t of recent) this.note(t);
  }

  /** How many items may be leased at `now` (0…max). */
  room(now: number): number {
    // Lease count + i may happen if lease count + i − max (slot (count + i) mod max) is old enough:
    // the slots hold increasing times from the oldest, so count from the oldest.
    let n = 0;
    while (n < this.max && this.times[(this.count + n) % this.max]! <= now - this.windowMs) n++;
    return n;
  }

  /** The earliest time (ms) at which one more lease may happen. */
  nextAt(): number {
    return this.times[this.count % this.max]! + this.windowMs;
  }

  /** Whether one more lease may happen at `now`: {@link room} ≥ 1, in constant time. */
  allows(now: number): boolean {
    return this.times[this.count % this.max]! <= now - this.windowMs;
  }

  /** Records a lease at `now` (times must not go backwards: a store passes its own now). Returns what {@link unnote} needs to take it back. */
  note(now: number): number {
    const slot = this.count % this.max;
    const previous = this.times[slot]!;
    this.times[slot] = now;
    this.count++;
    return previous;
  }

  /** Takes back the last lease noted (a write that failed), given what its {@link note} returned. */
  unnote(previous: number): void {
    if (this.count === 0) return;
    this.count--;
    this.times[this.count % this.max] = previous;
  }

  /** The times of the leases that still count (the last `max` at most), oldest first: what a restart needs to rebuild the window. */
  recent(): number[] {
    const out: number[] = [];
    for (let k = Math.max(0, this.count - this.max); k < this.count; k++) out.push(this.times[k % this.max]!);
    return out;
  }
}
