// Deadlines on the PostgreSQL store: the sweep that applies what is due in a queue (leases ended,
// retry delays over, timeouts, retention), the quiet windows in which a queue needs no sweep, and
// the timer that sweeps a queue as a deadline this node knows of falls.
import type { QueueConfig } from '../../engine/config.js';
import * as rules from '../../engine/rules.js';
import type { QueueRef } from '../store.js';
import { COLUMNS, named, type ItemRow, type Tx } from './pg-tx.js';

/** Rows a deadline sweep locks and applies per statement. */
const SWEEP_BATCH = 500;
/**
 * The periodic sweep passes over a queue in its quiet window (nothing in it can fall due for two
 * more sweeps) this many times in a row at most, then sweeps it anyway.
 */
const QUIET_PASSES = 30;
/**
 * What a quiet window allows for: a transaction of another node that began this much earlier
 * (by its clock) than the sweep that opened the window, and commits a deadline after it.
 */
const QUIET_SLACK_MS = 10_000;
/** Deadlines that fall within this many milliseconds of each other are applied by one sweep. */
const WAKE_STEP_MS = 25;

export interface DeadlineOptions {
  now: () => number;
  /** The periodic sweep's interval in milliseconds (0: none, and no sweep as deadlines fall either). */
  sweepEvery: number;
  /** A queue's current rules (see PostgresStoreOptions.configFor). */
  configFor?: (key: string) => QueueConfig | undefined;
  /** The store's transactions under way (their times bound a quiet window). */
  live: ReadonlySet<Tx>;
  isOpen: () => boolean;
  /** Runs a sweep of the queue in a transaction of its own; a failure is for the periodic sweep to warn of. */
  sweep: (ref: QueueRef) => void;
}

/** The deadlines of a store's queues: what sweeps them, and when they need none. */
export class Deadlines {
  /**
   * Per queue, a time before which nothing in it can be due, under the rules it was worked out
   * for: the transactions that run before it skip the sweep of the queue.
   */
  private readonly quietUntil = new Map<string, { rules: string; until: number }>();
  /** Per queue, the periodic sweeps in a row that passed over it (see {@link QUIET_PASSES}). */
  private readonly quietPasses = new Map<string, number>();
  /**
   * Queues to sweep when a deadline falls, by the time it falls (rounded up to WAKE_STEP_MS): a
   * deadline is applied as it falls rather than at the next periodic sweep. Only deadlines within
   * two sweep intervals are kept here; the periodic sweep finds the later ones as they come near.
   */
  private readonly wakes = new Map<number, Set<string>>();
  private wakeTimer: NodeJS.Timeout | undefined;
  private wakeTimerAt = Infinity;

  constructor(private readonly options: DeadlineOptions) {}

  /** Stops the timer (the store is closing). */
  close(): void {
    clearTimeout(this.wakeTimer);
  }

  /** After a COMMIT: the quiet windows the transaction found, and the deadlines its changes set. */
  committed(tx: Tx): void {
    for (const [key, quiet] of tx.quiet) this.quietUntil.set(key, quiet);
    for (const c of tx.changes) {
      if (c.purged) continue;
      const at = rules.nextDeadline(c.record, c.ref.config);
      if (at === null) continue;
      this.endQuietBy(c.ref.key, at);
      if (this.wakesOn()) this.wakeFor(c.ref.key, at);
    }
  }

  /**
   * Whether the periodic sweep may pass over the queue: it is in its quiet window for two more
   * sweep intervals (`horizon`), and was not passed over {@link QUIET_PASSES} times in a row.
   */
  passOver(ref: QueueRef, horizon: number): boolean {
    const passes = this.quietPasses.get(ref.key) ?? 0;
    if (passes < QUIET_PASSES && this.isQuiet(ref, horizon)) {
      this.quietPasses.set(ref.key, passes + 1);
      return true;
    }
    this.quietPasses.delete(ref.key);
    return false;
  }

  /**
   * Applies what is due in a queue at the transaction's time, 500 rows per statement, rows that
   * other transactions hold skipped (they are being changed by whoever holds them, and a call
   * that needs one of them locks it and applies rules.due itself).
   */
  async sweepQueue(tx: Tx, ref: QueueRef, periodic: boolean): Promise<void> {
    const c = ref.config;
    for (;;) {
      const res = await tx.query<ItemRow>(
        named('svcq_sweep', `SELECT ${COLUMNS} FROM svcq_items WHERE queue = $1 AND id = ANY(ARRAY(
             SELECT id FROM svcq_items WHERE queue = $1 AND status IN ('claimed', 'processing') AND lease_until <= $2
           UNION ALL
             SELECT id FROM svcq_items WHERE queue = $1 AND available_at > 0 AND available_at <= $2
           UNION ALL
             SELECT id FROM svcq_items WHERE queue = $1 AND $3::boolean AND status IN ('pending', 'claimed', 'processing') AND posted_at <= $4
           UNION ALL
             SELECT id FROM svcq_items WHERE queue = $1 AND $5::boolean AND finished_at <= $6 AND callbacks_owed = 0
           UNION ALL
             SELECT id FROM svcq_items WHERE queue = $1 AND $7::boolean AND fetched_at <= $6 AND callbacks_owed = 0
         )) LIMIT ${SWEEP_BATCH} FOR UPDATE SKIP LOCKED`),
        // The ids first, as an array probed through the primary key (as a join, the generic plan
        // of the prepared statement read every row of the queue). Only pending items have an
        // available_at above 0 (every other transition sets it to 0), so the retry branch names no
        // status: with one, statistics taken while nothing was pending had it read the queue's
        // pending index whole (280 ms at 1,000,000 pending items) instead of the
        // (queue, available_at) index. Only terminal items have
        // finished_at or fetched_at: the retention branches read the (an item a callback is owed
        // for, decisions §9.2, waits until it is settled, which ends the queue's quiet window)
        // (queue, finished_at) and (queue, fetched_at) indexes by range. (With a status condition
        // the planner took the (queue, status) index and read every finished item of the queue.)
        [ref.key, tx.now, c.timeoutMs !== null, tx.now - (c.timeoutMs ?? 0), c.retainFrom === 'finished', tx.now - c.retainMs, c.retainFrom === 'fetched'],
      );
      let changed = 0;
      // One deadline at a time in the order they fell, those that fell together in claim order,
      // as the other stores apply them (rules.applyPassed: so that, say, items timing out in the
      // same sweep are copied to the dead-letter queue in the same order on every store, not in
      // the order the rows happened to come).
      const found = res.rows.map((row) => tx.current(ref, row)).filter((l) => l !== null);
      rules.applyPassed(found, (l) => l.record, ref.config, tx.now, (l) => tx.callbackState(ref, l).owed, (l, t) => {
        tx.stage(ref, l, t);
        changed++;
        return t.purged ? null : t.record;
      });
      // The next batch must not find these rows due again.
      await tx.flush();
      if (res.rows.length < SWEEP_BATCH) return this.findQuiet(tx, ref, periodic);
      if (changed === 0) return;
    }
  }

  /**
   * A deadline just committed ends the queue's quiet window by then at the latest, and the window
   * of a transaction still under way that found one before this commit: a change made under
   * other rules than the window's (a call that read the definition before it changed, or rules in
   * force for a moment between two changes of it) can set one sooner than the window allows for.
   */
  endQuietBy(key: string, at: number): void {
    const quiet = this.quietUntil.get(key);
    if (quiet && at < quiet.until) this.quietUntil.set(key, { rules: quiet.rules, until: at });
    for (const other of this.options.live) {
      const found = other.quiet.get(key);
      if (found && at < found.until) other.quiet.set(key, { rules: found.rules, until: at });
    }
  }

  /** Whether nothing in the queue can be due at `now` (its last sweep's window, under the same rules). */
  isQuiet(ref: QueueRef, now: number): boolean {
    const quiet = this.quietUntil.get(ref.key);
    return quiet !== undefined && now < quiet.until && quiet.rules === rulesKey(ref.config);
  }

  /**
   * After a sweep that applied everything due it could lock: the time before which nothing in the
   * queue can be due, kept once the transaction commits (the calls of later transactions then skip
   * the sweep, which is most of a transaction's work on a busy queue). That is the soonest deadline
   * the rows show now, or the soonest any transaction could set from now on: every deadline a
   * rule sets is at least the shortest of lease, retry delay, timeout and retention after the time
   * of the transaction that sets it, which is no earlier than the oldest transaction of this store
   * still under way, and (QUIET_SLACK_MS) than another node's. A row another transaction holds
   * still shows the deadline it had, so its window is closed until it moves. The periodic sweep
   * ignores the window, and the window ends when the queue's rules change.
   */
  private async findQuiet(tx: Tx, ref: QueueRef, periodic: boolean): Promise<void> {
    const c = ref.config;
    // The shortest retry delay the rules compute: the first, shortened by the most jitter allows
    // (decisions §8.2; a delay a worker asks for, or a release's, ends the window as it commits).
    const retry = Math.floor(c.retryDelayMs * (1 - c.retryJitter));
    const span = Math.min(c.leaseMs, retry > 0 ? retry : Infinity, c.timeoutMs ?? Infinity, c.retainMs);
    // Too short a span for a window; a periodic sweep still looks for the soonest deadline, to wake for it.
    if (span <= 2 * QUIET_SLACK_MS && !periodic) return;
    const res = await tx.query<{ at: number | null }>(
      named(
        'svcq_next_deadline',
        `SELECT LEAST(
           (SELECT min(lease_until) FROM svcq_items WHERE queue = $1 AND status IN ('claimed', 'processing')),
           (SELECT min(available_at) FROM svcq_items WHERE queue = $1 AND available_at > 0 AND status = 'pending'),
           (SELECT min(posted_at) FROM svcq_items WHERE queue = $1 AND status IN ('pending', 'claimed', 'processing')) + $2::bigint,
           (SELECT min(finished_at) FROM svcq_items WHERE queue = $1 AND finished_at IS NOT NULL AND callbacks_owed = 0) + $3::bigint,
           (SELECT min(fetched_at) FROM svcq_items WHERE queue = $1 AND fetched_at IS NOT NULL AND callbacks_owed = 0) + $4::bigint
         ) AS at`,
      ),
      [ref.key, c.timeoutMs, c.retainFrom === 'finished' ? c.retainMs : null, c.retainFrom === 'fetched' ? c.retainMs : null],
    );
    let oldest = tx.started;
    for (const other of this.options.live) oldest = Math.min(oldest, other.started);
    const at = res.rows[0]?.at ?? null;
    if (at !== null) this.wakeFor(ref.key, at);
    if (span <= 2 * QUIET_SLACK_MS) return;
    tx.quiet.set(ref.key, { rules: rulesKey(c), until: Math.min(at ?? Infinity, oldest + span - QUIET_SLACK_MS) });
  }

  /** Whether deadlines get a sweep as they fall: only where the periodic sweep runs too. */
  wakesOn(): boolean {
    return this.options.sweepEvery > 0 && this.options.configFor !== undefined && this.options.isOpen();
  }

  /**
   * Sweeps the queue when `at` comes (a deadline of one of its items falls then), if that is
   * within two sweep intervals; a deadline already past (its row was held by another transaction)
   * is looked at again 100 ms later.
   */
  wakeFor(key: string, at: number): void {
    if (!this.wakesOn()) return;
    const now = this.options.now();
    if (at > now + 2 * this.options.sweepEvery) return;
    const slot = Math.ceil((at > now ? at : now + 100) / WAKE_STEP_MS) * WAKE_STEP_MS;
    const keys = this.wakes.get(slot);
    if (keys) keys.add(key);
    else this.wakes.set(slot, new Set([key]));
    this.armWake(slot);
  }

  private armWake(slot: number): void {
    if (slot >= this.wakeTimerAt) return;
    clearTimeout(this.wakeTimer);
    this.wakeTimerAt = slot;
    this.wakeTimer = setTimeout(() => this.wake(), Math.max(0, slot - this.options.now()));
    this.wakeTimer.unref();
  }

  /** Sweeps the queues whose deadlines have come, then waits for the next. */
  private wake(): void {
    this.wakeTimer = undefined;
    this.wakeTimerAt = Infinity;
    const configFor = this.options.configFor;
    if (!this.options.isOpen() || !configFor) return;
    const now = this.options.now();
    const due = new Set<string>();
    let next = Infinity;
    for (const [slot, keys] of this.wakes) {
      if (slot > now) next = Math.min(next, slot);
      else {
        for (const key of keys) due.add(key);
        this.wakes.delete(slot);
      }
    }
    if (next < Infinity) this.armWake(next);
    for (const key of due) {
      const config = configFor(key);
      if (!config) continue;
      // A sweep that fails is warned of by the periodic sweep, which runs again in a moment.
      this.options.sweep(refOf(key, config));
    }
  }
}

/** A queue's reference from its key ('<host>/<name>') and its current rules. */
export function refOf(key: string, config: QueueConfig): QueueRef {
  const slash = key.indexOf('/');
  return { key, host: key.slice(0, slash), name: key.slice(slash + 1), config };
}

/** What decides when an item's deadlines fall: a quiet window holds only under the rules it was found for. */
function rulesKey(c: QueueConfig): string {
  return `${c.leaseMs} ${c.retryDelayMs} ${c.retryJitter} ${c.timeoutMs} ${c.retainFrom} ${c.retainMs}`;
}
