import type pg from 'pg';
import type { EventOutbox, OutboxEntry } from '../store.js';
import { FailureStreak } from '../failure-streak.js';

export interface PgEventOutboxOptions {
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
}

/**
 * The task events of every node, from `svcq_events`, as an {@link EventOutbox} for this node's
 * task history (decisions §5, §6.1: the task-history endpoints answer the same on every node).
 *
 * Order: one entry per transaction, numbered by the transaction's id (`xid`, a 64-bit id that
 * never wraps), its events in the order they were written. Only transactions older than the
 * oldest one still running anywhere in the database (`pg_snapshot_xmin` of the reading
 * statement's snapshot) are read: each of those has ended, so no event can later appear below
 * that horizon, and a reader that has taken every entry through number N never misses one
 * numbered below N. (Following `seq` would not do: a bigserial is given when the INSERT runs, so
 * a transaction can commit an event numbered below one another transaction already committed.)
 * Every node so reads the same entries in the same order. A transaction that stays open for long
 * anywhere in the database delays the history until it ends; it never loses or reorders events.
 *
 * `readEvents` answers synchronously from entries read ahead into memory: the first call says
 * where this node's history stands, and the store then reads the entries after it, `gatherMs`
 * after a local transaction commits events and every `pollMs`; the history is told (`onEvents`) when entries
 * arrive. `eventsDelivered` only lets the memory go: the database keeps every event (the store
 * purges them by age), and each node keeps its own position in its history's `position.json`.
 */
export class PgEventOutbox implements EventOutbox {
  private readonly listeners: Array<() => void> = [];
  private announced = false;
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
    this.listeners.push(listener);
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
    const { rows } = await pool.query<{ x: string | null }>('SELECT max(xid)::text AS x FROM svcq_events');
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
        rows = (
          await pool.query<EventRow>({
            // A range of the (xid, seq) index, in its order: from the last transaction read to the
            // last of the next `room` below the horizon (a join with those transactions would read
            // the whole table on every call).
            name: 'svcq_read_events',
            text: `WITH horizon AS (SELECT pg_snapshot_xmin(pg_current_snapshot()) AS x),
                        txs AS (SELECT DISTINCT xid FROM svcq_events WHERE xid > $1::xid8 AND xid < (SELECT x FROM horizon) ORDER BY xid LIMIT $2)
                   SELECT e.xid::text::bigint AS xid, e.ts, e.host, e.queue, e.id, e.event, e.attempts, e.status, e.worker
                     FROM svcq_events AS e
                    WHERE e.xid > $1::xid8 AND e.xid <= (SELECT max(xid) FROM txs)
                    ORDER BY e.xid, e.seq`,
            values: [String(after), room],
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
          current = { seq: Number(row.xid), ts: Number(row.ts), lines: '' };
          this.buffer.push(current);
          entries++;
        }
        current.lines += lineOf(row);
      }
      this.cursor = current!.seq;
      this.announce();
      if (entries < room) return;
    }
  }

  private announce(): void {
    if (this.announced) return;
    this.announced = true;
    queueMicrotask(() => {
      this.announced = false;
      for (const listener of this.listeners) listener();
    });
  }
}

/** One TaskEvent line, in decisions §5's field order (as the embedded store writes it): ts, host, queue, id, event, attempts, worker (when there is one), status. */
function lineOf(row: EventRow): string {
  const worker = row.worker === null ? '' : `,"worker":${JSON.stringify(row.worker)}`;
  return `{"ts":${Number(row.ts)},"host":${JSON.stringify(row.host)},"queue":${JSON.stringify(row.queue)},"id":${JSON.stringify(row.id)},"event":${JSON.stringify(row.event)},"attempts":${Number(row.attempts)}${worker},"status":${JSON.stringify(row.status)}}\n`;
}
