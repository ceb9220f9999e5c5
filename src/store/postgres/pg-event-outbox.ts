import type pg from 'pg';
import { TurnSignal } from '../turn-signal.js';
import type { EventOutbox, OutboxEntry } from '../store.js';
import { FailureStreak } from '../failure-streak.js';
import { ANSWER_TIMEOUT_MS, answered } from './pg-guard.js';
import { StoreUnavailable } from '../store.js';

export interface PgEventOutboxOptions {
  /** How long a read may wait for the database before its connection is cut (default 10 s). */
  answerTimeoutMs?: number;
  /** How often the table is read for events committed by other nodes, in milliseconds (default 250). */
  pollMs?: number;
  /**
   * How long after a local commit the table is read, in milliseconds (default 50): the commits of
   * that time are read together, one statement instead of one per commit.
   */
  gatherMs?: number;
  /** Entries held in memory at most (the history takes them 4096 at a time). */
  bufferMax?: number;
  warn?: (line: string) => void;
}

interface EventRow {
  xid: number;
  ts: number;
  host: string;
  queue: string;
  id: string;
  event: string;
  attempts: number;
  status: string;
  worker: string | null;
  schedule: string | null;
  occurrence: number | null;
  dead_letter: string | null;
  redriven_to: string | null;
  code: number | null;
  ms: number | null;
}

/**
 * The task events of every node, from `svcq_events`, as an {@link EventOutbox} for this node's
 * task history (decisions §5, §6.1: the task-history endpoints answer the same on every node).
 *
 * Order: one entry per transaction, numbered by the transaction's id (`xid`, a 64-bit id that
 * never wraps), its events in the order they were written. Only transactions older than the
 * oldest one still running in the database (see {@link readHorizon}) are read: each of those
 * has ended, so no event can later appear below
 * that horizon, and a reader that has taken every entry through number N never misses one
 * numbered below N. (Following `seq` would not do: a bigserial is given when the INSERT runs, so
 * a transaction can commit an event numbered below one another transaction already committed.)
 * Every node so reads the same entries in the same order. A transaction that stays open for long
 * in the database delays the history until it ends; it never loses or reorders events.
 *
 * `readEvents` answers synchronously from entries read ahead into memory: the first call says
 * where this node's history stands, and the store then reads the entries after it, `gatherMs`
 * after a local transaction commits events and every `pollMs`; the history is told (`onEvents`) when entries
 * arrive. `eventsDelivered` only lets the memory go: the database keeps every event (the store
 * purges them by age), and each node keeps its own position in its history's `position.json`.
 */
export class PgEventOutbox implements EventOutbox {
  private readonly entered = new TurnSignal();
  private buffer: OutboxEntry[] = [];
  /** The buffer holds every entry numbered in (base, cursor]. */
  private base = 0;
  private cursor = 0;
  /** Moved on when the reader repositions: a read under way for the old position is dropped. */
  private generation = 0;
  private started = false;
  private closed = false;
  private reading: Promise<void> | undefined;
  private readAgain = false;
  private timer: NodeJS.Timeout | undefined;
  private readonly reads: FailureStreak;
  private gathering: NodeJS.Timeout | undefined;
  private readonly bufferMax: number;
  private readonly warn: (line: string) => void;

  constructor(
    private readonly pool: () => pg.Pool | undefined,
    private readonly options: PgEventOutboxOptions = {},
  ) {
    this.bufferMax = options.bufferMax ?? 8192;
    this.warn = options.warn ?? (() => undefined);
    this.reads = new FailureStreak(this.warn, 'reading task events from PostgreSQL succeeds again');
  }

  private get answerTimeoutMs(): number {
    return this.options.answerTimeoutMs ?? ANSWER_TIMEOUT_MS;
  }

  readEvents(afterSeq: number, limit: number): OutboxEntry[] {
    if (!this.started) {
      this.started = true;
      this.timer = setInterval(() => this.wake(), this.options.pollMs ?? 250);
      this.timer.unref();
      this.reposition(afterSeq);
      return [];
    }
    if (afterSeq < this.base || afterSeq > this.cursor) {
      this.reposition(afterSeq);
      return [];
    }
    const out: OutboxEntry[] = [];
    for (const entry of this.buffer) {
      if (entry.seq <= afterSeq) continue;
      out.push(entry);
      if (out.length === limit) break;
    }
    return out;
  }

  eventsDelivered(seq: number): void {
    if (seq <= this.base) return;
    const full = this.buffer.length >= this.bufferMax;
    let n = 0;
    while (n < this.buffer.length && this.buffer[n]!.seq <= seq) n++;
    this.buffer.splice(0, n);
    this.base = Math.min(seq, this.cursor);
    if (full) this.wake();
  }

  onEvents(listener: () => void): void {
    this.entered.listen(listener);
  }

  /** A local transaction committed events: they are read with whatever else commits in the next `gatherMs`. */
  soon(): void {
    if (this.gathering || !this.started || this.closed) return;
    this.gathering = setTimeout(() => {
      this.gathering = undefined;
      this.wake();
    }, this.options.gatherMs ?? 50);
    this.gathering.unref();
  }

  /** Reads what committed since the last read (the poll's turn, a catch-up). */
  wake(): void {
    if (!this.started || this.closed) return;
    if (this.reading) {
      this.readAgain = true;
      return;
    }
    this.reading = this.readMore().finally(() => {
      this.reading = undefined;
      if (this.readAgain) {
        this.readAgain = false;
        this.wake();
      }
    });
  }

  /**
   * Resolves once the buffer holds every transaction whose events were committed before the call
   * (up to the newest xid in svcq_events then), or after `limitMs` if one still running holds the
   * horizon back: a fetch of the history then shows what is there, without waiting on it for long.
   */
  async catchUp(limitMs = 2000): Promise<void> {
    const pool = this.pool();
    if (!pool || this.closed || !this.started) return;
    // Without the database the history cannot say it holds every acknowledged event: a 503 (decisions §6.1).
    const { rows } = await answered<{ x: string | null }>(pool, this.answerTimeoutMs, 'SELECT max(xid)::text AS x FROM svcq_events').catch((err: Error) => {
      throw new StoreUnavailable(err, true);
    });
    const target = rows[0]?.x === null || rows[0]?.x === undefined ? 0 : Number(rows[0].x);
    const deadline = Date.now() + limitMs;
    while (this.cursor < target && !this.closed && Date.now() < deadline) {
      this.wake();
      await this.reading;
      if (this.cursor < target) await new Promise((resolve) => setTimeout(resolve, 10));
    }
  }

  close(): void {
    this.closed = true;
    clearInterval(this.timer);
    clearTimeout(this.gathering);
  }

  private reposition(afterSeq: number): void {
    this.generation++;
    this.buffer = [];
    this.base = this.cursor = afterSeq;
    this.wake();
  }

  private async readMore(): Promise<void> {
    for (;;) {
      const room = this.bufferMax - this.buffer.length;
      const pool = this.pool();
      if (room <= 0 || !pool || this.closed) return;
      const generation = this.generation;
      const after = this.cursor;
      let rows: EventRow[];
      try {
        const horizon = await readHorizon(pool, this.answerTimeoutMs);
        rows = (
          await answered<EventRow>(pool, this.answerTimeoutMs, {
            // A range of the (xid, seq) index, in its order: from the last transaction read to the
            // last of the next `room` below the horizon (a join with those transactions would read
            // the whole table on every call).
            name: 'svcq_read_events',
            text: `WITH txs AS (SELECT DISTINCT xid FROM svcq_events WHERE xid > $1::xid8 AND xid < $3::xid8 ORDER BY xid LIMIT $2)
                   SELECT e.xid::text::bigint AS xid, e.ts, e.host, e.queue, e.id, e.event, e.attempts, e.status, e.worker, e.schedule, e.occurrence, e.dead_letter, e.redriven_to, e.code, e.ms
                     FROM svcq_events AS e
                    WHERE e.xid > $1::xid8 AND e.xid <= (SELECT max(xid) FROM txs)
                    ORDER BY e.xid, e.seq`,
            values: [String(after), room, horizon],
          })
        ).rows;
        this.reads.succeeded();
      } catch (err) {
        if (!this.closed) this.reads.failed(() => `could not read task events from PostgreSQL (${(err as Error).message}); trying again`);
        return;
      }
      if (generation !== this.generation || this.cursor !== after) continue;
      if (rows.length === 0) return;
      let entries = 0;
      let current: OutboxEntry | undefined;
      for (const row of rows) {
        if (!current || current.seq !== Number(row.xid)) {
          current = { seq: Number(row.xid), ts: Number(row.ts), lines: [] };
          this.buffer.push(current);
          entries++;
        }
        current.lines.push(lineOf(row));
      }
      this.cursor = current!.seq;
      this.announce();
      if (entries < room) return;
    }
  }

  private announce(): void {
    this.entered.raise();
  }
}

interface HorizonRow {
  xmin: string;
  next: string;
  running: string[] | null;
  sees_all: boolean;
}

/**
 * The transaction id below which every transaction of this database has ended: the oldest one
 * still running here, or, with none, the next id to be given. Read in its own statement, before
 * the events are read in another: `next` comes from the statement's snapshot and the running
 * transactions from `pg_stat_activity`, read after it, so a transaction below the horizon has
 * ended before the events are read, and one that gets an id later gets one above it.
 *
 * Transactions of other databases on the same server are not waited for (they write no events
 * here: `pg_snapshot_xmin` alone would make the history wait for any of them). Where the role
 * cannot see other roles' transactions in `pg_stat_activity` (it is neither a superuser nor a
 * member of `pg_read_all_stats`, and another role has a session in this database), the horizon is
 * `pg_snapshot_xmin`, which waits for every transaction of the server.
 */
async function readHorizon(pool: pg.Pool, timeoutMs: number): Promise<string> {
  const { rows } = await answered<HorizonRow>(pool, timeoutMs, {
    name: 'svcq_events_horizon',
    text: `SELECT pg_snapshot_xmin(q.s)::text AS xmin, pg_snapshot_xmax(q.s)::text AS next,
                  (SELECT array_agg(a.backend_xid::text) FROM pg_stat_activity AS a WHERE a.datname = current_database() AND a.backend_xid IS NOT NULL) AS running,
                  (pg_has_role(current_user, 'pg_read_all_stats', 'MEMBER')
                   OR NOT EXISTS (SELECT 1 FROM pg_stat_activity AS a WHERE a.datname = current_database() AND a.usename IS DISTINCT FROM current_user)) AS sees_all
             FROM (SELECT pg_current_snapshot() AS s) AS q`,
  });
  const row = rows[0]!;
  if (!row.sees_all) return row.xmin;
  return String(horizonOf(BigInt(row.next), (row.running ?? []).map(Number)));
}

/**
 * The oldest of `running` (32-bit transaction ids, as `pg_stat_activity` shows them) as a 64-bit
 * id, or `next` when none is older than it. A 32-bit id is read in `next`'s epoch, or the one
 * before when it lies ahead of `next` by more than half the id space (ids wrap every 2^32); one
 * given after `next` was read is not older.
 */
export function horizonOf(next: bigint, running: number[]): bigint {
  const low = next & 0xffffffffn;
  let horizon = next;
  for (const r of running) {
    const behind = (low - BigInt(r) + 0x100000000n) % 0x100000000n;
    if (behind === 0n || behind >= 0x80000000n) continue;
    if (next - behind < horizon) horizon = next - behind;
  }
  return horizon;
}

/** One TaskEvent line, in decisions §5's field order (as the embedded store writes it): ts, host, queue, id, event, attempts, worker (when there is one), status. */
function lineOf(row: EventRow): string {
  const worker = row.worker === null ? '' : `,"worker":${JSON.stringify(row.worker)}`;
  const scheduled = row.schedule === null ? '' : `,"schedule":${JSON.stringify(row.schedule)},"occurrence":${Number(row.occurrence)}`;
  const dead = row.dead_letter === null ? '' : `,"deadLetter":${JSON.stringify(row.dead_letter)}`;
  const redriven = row.redriven_to === null ? '' : `,"redrivenTo":${JSON.stringify(row.redriven_to)}`;
  const delivery = row.ms === null ? '' : `,"code":${row.code === null ? null : Number(row.code)},"ms":${Number(row.ms)}`;
  return `{"ts":${Number(row.ts)},"host":${JSON.stringify(row.host)},"queue":${JSON.stringify(row.queue)},"id":${JSON.stringify(row.id)},"event":${JSON.stringify(row.event)},"attempts":${Number(row.attempts)}${worker},"status":${JSON.stringify(row.status)}${scheduled}${dead}${redriven}${delivery}}\n`;
}
