import { nextOccurrence } from '../engine/schedules.js';
import type { QueueRef, Store } from './store.js';

/** The longest a node goes without looking for due occurrences (decisions §8.3: within 1 s). */
export const TICK_AT_LEAST_EVERY_MS = 1000;

/**
 * Drives the schedules (decisions §8.3) on one node: one timer for the whole node, set to the
 * soonest next occurrence of any schedule (and never more than a second away, so a clock that
 * jumped is noticed within a second). When it fires, every queue with an occurrence due is
 * ticked ({@link Store.tickSchedules}) in the same turn, so the store makes all of them durable
 * in one step (one journal write, one transaction). There is no leader: every node ticks, and the
 * store decides which tick posts each occurrence. A timer that finds nothing due costs a walk of
 * the queues' next times, in memory.
 */
export class ScheduleTicker {
  /** The next occurrence of any schedule of each queue, as last computed (absent: tick it now). */
  private readonly nextAt = new Map<string, number>();
  /** The queues last seen with schedules, by key: one that loses them (or is deleted) is ticked once more to forget them. */
  private readonly scheduled = new Map<string, QueueRef>();
  private timer: NodeJS.Timeout | undefined;
  private timerAt = Infinity;
  private running = false;
  private again = false;
  private closed = false;
  private failing = false;

  constructor(
    private readonly store: Store,
    /** Every defined queue with its rules in force. */
    private readonly queues: () => QueueRef[],
    private readonly warn: (line: string) => void,
    private readonly now: () => number = Date.now,
  ) {}

  /** Ticks every queue with schedules now (occurrences missed while no server ran are applied), then keeps ticking. */
  start(): void {
    this.arm(0);
  }

  /** A queue's definition was put or deleted: it is ticked at once (a new schedule starts from now). */
  changed(key: string): void {
    this.nextAt.delete(key);
    this.arm(0);
  }

  /** Stops; resolves once a tick under way has ended. */
  async close(): Promise<void> {
    this.closed = true;
    clearTimeout(this.timer);
    while (this.running) await new Promise((resolve) => setTimeout(resolve, 10));
  }

  private arm(delay: number): void {
    if (this.closed) return;
    const at = this.now() + delay;
    if (this.timer && at >= this.timerAt) return;
    clearTimeout(this.timer);
    this.timerAt = at;
    this.timer = setTimeout(() => {
      this.timer = undefined;
      this.timerAt = Infinity;
      void this.run();
    }, delay);
    this.timer.unref();
  }

  private async run(): Promise<void> {
    if (this.running) {
      this.again = true;
      return;
    }
    this.running = true;
    try {
      const now = this.now();
      const due: QueueRef[] = [];
      const defined = new Map(this.queues().map((ref) => [ref.key, ref]));
      const live = new Set<string>();
      for (const ref of defined.values()) {
        if (ref.config.schedules.length === 0) continue;
        live.add(ref.key);
        this.scheduled.set(ref.key, ref);
        if ((this.nextAt.get(ref.key) ?? -Infinity) <= now) due.push(ref);
      }
      // Schedules deleted with their queue, or all of them from it: the store forgets their states.
      for (const [key, ref] of this.scheduled) {
        if (live.has(key)) continue;
        this.scheduled.delete(key);
        this.nextAt.delete(key);
        due.push(defined.get(key) ?? { ...ref, config: { ...ref.config, schedules: [] } });
      }
      if (due.length === 0) return;
      // Called in one turn: the store folds them into one durable step.
      const results = await Promise.allSettled(due.map((ref) => this.store.tickSchedules(ref)));
      let failed: Error | undefined;
      results.forEach((r, n) => {
        const ref = due[n]!;
        if (r.status === 'rejected') {
          failed = r.reason as Error;
          this.nextAt.set(ref.key, this.now() + TICK_AT_LEAST_EVERY_MS);
        } else if (ref.config.schedules.length > 0) {
          // From the time this tick began: an occurrence that fell while it ran is due at once.
          this.nextAt.set(ref.key, soonest(ref, now));
        }
      });
      if (failed && !this.failing) this.warn(`schedules could not be applied (${failed.message}); trying again every second`);
      else if (!failed && this.failing) this.warn('schedules are applied again');
      this.failing = failed !== undefined;
    } finally {
      this.running = false;
      this.armNext();
    }
  }

  /** The timer to the soonest next occurrence, at most a second away. */
  private armNext(): void {
    if (this.again) {
      this.again = false;
      return this.arm(0);
    }
    const now = this.now();
    let soonestAt = now + TICK_AT_LEAST_EVERY_MS;
    for (const ref of this.scheduled.values()) soonestAt = Math.min(soonestAt, this.nextAt.get(ref.key) ?? now);
    this.arm(Math.max(0, soonestAt - now));
  }
}

function soonest(ref: QueueRef, after: number): number {
  let at = Infinity;
  for (const spec of ref.config.schedules) at = Math.min(at, nextOccurrence(spec, after) ?? Infinity);
  return at;
}
