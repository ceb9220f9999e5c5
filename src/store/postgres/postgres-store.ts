import { randomBytes } from 'node:crypto';
import { performance } from 'node:perf_hooks';
import pg from 'pg';
import type { QueueConfig } from '../../engine/config.js';
import { matches } from '../../engine/criteria.js';
import { isTerminal, type ItemStatus, type TaskEventKind } from '../../engine/item.js';
import * as rules from '../../engine/rules.js';
import type { EventDraft, ItemRecord, Submission, Transition } from '../../engine/rules.js';
import { claimTopic, itemTopic, type Notifier } from '../../waiting/notifier.js';
import { claimedOf, fullCounts, statusOf, StoreUnavailable, type Claimed, type ClaimInput, type EventOutbox, type OutboxEntry, type PayloadKind, type PostInput, type PostOutcome, type QueueOverview, type QueueRef, type StatusRecord, type Store, type StoreObserver, type SubmitOutcome } from '../store.js';
import { PREFILTER_SQL, prefilterOf } from './pg-criteria.js';
import { FailureStreak } from '../failure-streak.js';
import { failureKind, StaleWrite } from './pg-errors.js';
import { ANSWER_TIMEOUT_MS, answered, keepConnectionErrors, watch } from './pg-guard.js';
import { PgEventOutbox } from './pg-event-outbox.js';
import { readPayload, writePayloads, type Payload } from './pg-payloads.js';
import { migrate } from './schema.js';

export interface PostgresStoreOptions {
  /** `postgres://user@host:port/database` (node-postgres connection string; `?application_name=…` is honoured). */
  url: string;
  now?: () => number;
  /** Told of every committed change a long poll may wait for (items to claim, an item become terminal or purged). */
  notifier?: Notifier;
  /** Told of every committed transaction and of the task events it made durable. */
  observer?: StoreObserver;
  warn?: (line: string) => void;
  /**
   * A queue's current rules, for the periodic sweep that applies deadlines outside any request
   * (as EmbeddedStoreOptions.configFor). Queues it does not know (undefined) are not swept; without
   * it only requests apply deadlines.
   */
  configFor?: (key: string) => QueueConfig | undefined;
  /** Connections in the pool (default 8). */
  poolSize?: number;
  /**
   * How long a transaction, or a read outside one (a status read, the operators' views, the task
   * history), may wait for the database before its connection is cut and its calls refused with
   * StoreUnavailable (default 10 s): a network that stops answering without closing the
   * connection would otherwise hold them until TCP gives up, about 15 minutes.
   */
  transactionTimeoutMs?: number;
  /**
   * Transactions this store runs at once; calls that arrive meanwhile wait and are folded into the
   * next (default 2: with 4, a full cycle at 32 in flight made 20–45% more commits and cost the
   * database more CPU per job, for the same or fewer jobs per second).
   */
  concurrentTransactions?: number;
  /**
   * While a transaction runs, how long the calls made after it wait for it to end before a second
   * one takes them, in milliseconds (default 5; they go at once when 32 are waiting).
   */
  secondTransactionAfterMs?: number;
  /**
   * How often every known queue is swept for deadlines, in real milliseconds (default 1000; 0:
   * never, and no sweep when a deadline falls either: only requests apply deadlines).
   */
  sweepIntervalMs?: number;
  /** How often `svcq_events` is read for other nodes' task events once a history reads them (default 250 ms). */
  eventPollMs?: number;
  /**
   * Task events older than this (by their `ts`, against the store's clock) are deleted from
   * `svcq_events` (default 7 days; 0: never). Each node's history keeps its own copy (as long as
   * `--history-days` lets it); a node whose history is further behind than this when it starts
   * misses what was purged.
   */
  eventRetentionMs?: number;
  /** How often old task events are purged, in real milliseconds (default 1 hour; the first purge runs a minute after open). */
  eventPurgeIntervalMs?: number;
}

/** decisions §5: the database keeps task events a week; each node's history keeps them as long as --history-days lets it. */
const EVENT_RETENTION_MS = 7 * 86_400_000;
/** Events deleted per statement by the purge. */
const PURGE_BATCH = 10_000;

/** Count deltas folded into svcq_counts per statement. */
const COMPACT_BATCH = 10_000;
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
/** Pending rows a claim with criteria reads (without locking) per step of its walk. */
const CLAIM_PAGE = 500;
/** Transactions a store runs at once, unless told otherwise. */
const CONCURRENT_TRANSACTIONS = 2;
/**
 * While a transaction runs, the next one starts at once only when at least this many calls wait
 * for it; fewer wait for the running one to end (or for {@link SECOND_AFTER_MS}). Each transaction
 * costs the database its planning and its commit, whatever its size: a second one started for a
 * handful of calls made more, smaller transactions for the same work (paired, one node, full
 * cycle: ×1.07 to ×1.13 the jobs/s with 16 or 32 here, database CPU per job down a fifth).
 */
const SECOND_TRANSACTION_CALLS = 32;
/** ...or once the running transaction has taken this long (a slow one does not hold the calls behind it). */
const SECOND_AFTER_MS = 5;
/** Calls folded into one transaction at most. */
const MAX_FOLD = 256;
/** Times a transaction rolled back by a deadlock, a serialization failure or a lost race is run again. */
const MAX_RETRIES = 5;

const COLUMNS = 'ctid, id, ord, body, posted_by, posted_at, idempotency_key, status, updated_at, finished_at, attempts, lease_worker, lease_until, available_at, progress, result, error, fetched_at, version, priority, grp';

interface ItemRow {
  /** Where the row's current version lies in the table, as text ('(page,slot)'): its guarded write finds it there. */
  ctid: string;
  id: string;
  ord: number;
  body: string;
  posted_by: string;
  posted_at: number;
  idempotency_key: string | null;
  status: ItemStatus;
  updated_at: number;
  finished_at: number | null;
  attempts: number;
  lease_worker: string | null;
  lease_until: number | null;
  available_at: number;
  progress: string | null;
  result: string | null;
  error: string | null;
  fetched_at: number | null;
  version: number;
  priority: number;
  grp: string | null;
}

/** A record as read, with the version its guarded write must find, and where. */
interface Loaded {
  record: ItemRecord;
  version: number;
  ctid: string;
}

function recordOf(row: ItemRow): Loaded {
  return {
    version: row.version,
    ctid: row.ctid,
    record: {
      id: row.id,
      ord: row.ord,
      body: row.body,
      postedBy: row.posted_by,
      postedAt: row.posted_at,
      idempotencyKey: row.idempotency_key,
      priority: row.priority,
      group: row.grp,
      status: row.status,
      updatedAt: row.updated_at,
      finishedAt: row.finished_at,
      attempts: row.attempts,
      leaseWorker: row.lease_worker,
      leaseUntil: row.lease_until,
      availableAt: row.available_at,
      progress: row.progress,
      result: row.result,
      error: row.error,
      fetchedAt: row.fetched_at,
    },
  };
}

/**
 * How a prepared statement is planned (see {@link Tx.query}):
 * - `custom`, the connection's default: planned again at every run, with its values. A plan cached
 *   while a table was small (no statistics yet, or none ever without autovacuum) would read the
 *   whole queue once it is large: an UPDATE … FROM unnest took 12 ms per call at 8,000 rows, and
 *   a lookup by `queue = $1 AND id = ANY($2)` planned on an empty table took 53 ms at 100,000.
 * - `generic`: planned once per connection, without its values, and that plan kept. Only for
 *   statements with one sensible plan whatever the table's size, planned with sequential scans
 *   off so that an empty table does not make one look cheaper: a claim walking the pending index,
 *   inserts from arrays, and writes that find their rows by `ctid` (a TID scan). Planning is most
 *   of what these statements cost the database (a claim of 12 items: 127 µs planned at each run,
 *   48 µs on its kept plan; the last write of a transaction of 36 calls: 798 µs and 487 µs).
 * - `ordered`: `generic`, planned with sorts off too, for the claim, which must walk the pending
 *   index in claim order. Statistics taken while a queue had no pending item (most of the time
 *   for a queue whose workers keep up) estimate one pending row, and the plan made from them read
 *   the queue's live items through `(queue, posted_at)` and sorted them: every claim then read the
 *   whole backlog (40 ms at 60,000 pending items). Only the pending index gives claim order
 *   without a sort.
 * - `custom-ordered`: `custom`, with sorts off, for the pages of pending rows a claim with
 *   criteria reads in claim order (the same statistics had each page read and sort the backlog).
 */
type Plan = 'custom' | 'generic' | 'ordered' | 'custom-ordered';

/** A statement the store prepares once per connection under `name`, and how it is planned. */
interface Statement {
  name: string;
  text: string;
  plan?: Plan;
}

/** A statement prepared under `name`: every statement the store runs often. A fresh object per call (pg sets its values). */
function named(name: string, text: string, plan: Plan = 'custom'): Statement {
  return { name, text, plan };
}

/**
 * Sent where a transaction's statements change from one plan to the other (simple-query SETs,
 * undone by COMMIT or ROLLBACK; sent without waiting, in order with the statements around them).
 */
const PLAN_SETTINGS: Record<Plan, string> = {
  custom: 'SET LOCAL plan_cache_mode TO DEFAULT; SET LOCAL enable_seqscan TO DEFAULT; SET LOCAL enable_sort TO DEFAULT',
  generic: 'SET LOCAL plan_cache_mode = force_generic_plan; SET LOCAL enable_seqscan = off; SET LOCAL enable_sort TO DEFAULT',
  ordered: 'SET LOCAL plan_cache_mode = force_generic_plan; SET LOCAL enable_seqscan = off; SET LOCAL enable_sort = off',
  'custom-ordered': 'SET LOCAL plan_cache_mode TO DEFAULT; SET LOCAL enable_seqscan TO DEFAULT; SET LOCAL enable_sort = off',
};

/** bigint columns come back as numbers: every value the store keeps in one (ms times, claim order, versions) is far below 2^53. */
const TYPES = {
  getTypeParser(oid: number, format?: 'text' | 'binary') {
    if (oid === 20) return (value: string) => Number(value);
    return pg.types.getTypeParser(oid, format);
  },
} as pg.CustomTypesConfig;

/** One change to one item, for the task events, the notifier and the observer. */
interface Change {
  ref: QueueRef;
  record: ItemRecord;
  events: EventDraft[];
  purged: boolean;
}

/** A write waiting to be sent: the row's version and status as read, its record as it becomes. */
interface PendingWrite {
  ref: QueueRef;
  version: number;
  ctid: string;
  from: ItemStatus;
  /** When the item was claimable from, as read (0: at once). */
  fromAvailableAt: number;
  record: ItemRecord;
  purged: boolean;
}

/** One transaction: its connection, its time, and what it changed so far. */
class Tx {
  readonly changes: Change[] = [];
  private pending = new Map<string, PendingWrite>();
  /** Queues this transaction registered in svcq_queues. */
  readonly registered = new Set<string>();
  /** Queues this transaction resumed: their held claims look again once it commits. */
  readonly resumed = new Set<string>();
  /** Queues swept to the end by this transaction: nothing is due in them before the time given (once committed). */
  readonly quiet = new Map<string, { rules: string; until: number }>();
  /** Payloads to archive before COMMIT, the latest of each (host, queue, id, kind). */
  readonly payloads = new Map<string, Payload>();
  /** Net change of the items counted per queue and status ('<queue>\n<status>'), written to svcq_count_deltas before COMMIT. */
  readonly deltas = new Map<string, number>();
  /** Groups of calls started so far (each numbered by this count as it starts). */
  groups = 0;
  /** Items this transaction posts, by '<queue>\n<id>', and the group that posts each. */
  readonly postedBy = new Map<string, number>();

  /**
   * The time its rules apply at: when it began, moved later to the last change of any row it
   * reads (one committed after it began: another node applied a deadline as it fell, say), so an
   * item's changes are never stamped before the one they follow: a lease re-granted after a
   * sweep ended the one before it starts no earlier than that sweep.
   */
  now: number;

  /** How the statements sent now are planned (the connection's default at BEGIN). */
  private plan: Plan = 'custom';
  /** The connection's socket (node-postgres keeps it as `connection.stream`), when it can hold writes. */
  private readonly socket: { cork(): void; uncork(): void } | undefined;
  private holding = false;

  constructor(
    readonly client: pg.PoolClient,
    /** Its time when it began (what a quiet window allows for). */
    readonly started: number,
  ) {
    this.now = started;
    const stream = (client as unknown as { connection?: { stream?: { cork?: unknown; uncork?: unknown } } }).connection?.stream;
    this.socket = typeof stream?.cork === 'function' && typeof stream.uncork === 'function' ? (stream as { cork(): void; uncork(): void }) : undefined;
  }

  /**
   * Holds the statements sent from now on in the socket until {@link send}: the statements a
   * transaction sends in one go (BEGIN and the groups' first statements; the last write and
   * COMMIT) leave in one write, not one each.
   */
  hold(): void {
    if (this.holding || !this.socket) return;
    this.holding = true;
    this.socket.cork();
  }

  /** Sends what {@link hold} held. Called before every wait for the database. */
  send(): void {
    if (!this.holding) return;
    this.holding = false;
    this.socket!.uncork();
  }

  /** Sends a statement of this transaction, switching how statements are planned first where it needs the other way. */
  query<R extends pg.QueryResultRow = pg.QueryResultRow>(statement: Statement, values: unknown[]): Promise<pg.QueryResult<R>> {
    const plan = statement.plan ?? 'custom';
    if (plan !== this.plan) {
      this.plan = plan;
      // A failure fails the statement behind it too, and that is handled.
      this.client.query(PLAN_SETTINGS[plan]).catch(() => undefined);
    }
    return this.client.query<R>(statement, values);
  }

  /** Records a rule's transition of a loaded row; written by the next {@link flush}. */
  stage(ref: QueueRef, loaded: Loaded, t: Transition): void {
    const slot = `${ref.key}\n${t.record.id}`;
    const earlier = this.pending.get(slot);
    if (earlier) {
      earlier.record = t.record;
      earlier.purged = t.purged === true;
    } else this.pending.set(slot, { ref, version: loaded.version, ctid: loaded.ctid, from: loaded.record.status, fromAvailableAt: loaded.record.availableAt, record: t.record, purged: t.purged === true });
    this.changes.push({ ref, record: t.record, events: t.events, purged: t.purged === true });
  }

  /** Counts `n` more (or fewer) items of the queue in `status` once this transaction commits. */
  count(key: string, status: ItemStatus, n: number): void {
    const slot = `${key}\n${status}`;
    this.deltas.set(slot, (this.deltas.get(slot) ?? 0) + n);
  }

  /** Archives a payload with this transaction when the queue's rules say so (decisions §5). */
  archive(ref: QueueRef, id: string, kind: PayloadKind, body: string): void {
    if (!ref.config.archivePayloads) return;
    this.payloads.set(`${ref.key}\n${id}\n${kind}`, { host: ref.host, queue: ref.name, id, kind, body });
  }

  /**
   * The record of a row just read, as this transaction has it: its own staged change when it made
   * one (not yet written: the row still shows what it read), null when it purged the item, else
   * the row's. A change staged on it keeps the version first read.
   */
  current(ref: QueueRef, row: ItemRow): Loaded | null {
    const w = this.pending.get(`${ref.key}\n${row.id}`);
    if (w) return w.purged ? null : { record: w.record, version: w.version, ctid: w.ctid };
    const loaded = recordOf(row);
    if (loaded.record.updatedAt > this.now) this.now = loaded.record.updatedAt;
    return loaded;
  }

  /**
   * Whether a staged change made an item of the queue claimable sooner than the table shows (an
   * error handed in with a claim re-queued it, decisions §3.8; or re-queued an item that was
   * waiting out a longer retry delay, set before its queue's definition shortened it): a claim
   * must then see it in the table, so the writes go first.
   */
  requeued(key: string): boolean {
    for (const w of this.pending.values()) {
      if (w.ref.key !== key || w.purged || w.record.status !== 'pending') continue;
      if (w.from !== 'pending' || sooner(w.record.availableAt, w.fromAvailableAt)) return true;
    }
    return false;
  }

  /** Items of the queue this transaction read pending and staged a change of: the table still shows them pending. */
  stagedPending(key: string): number {
    let n = 0;
    for (const w of this.pending.values()) if (w.ref.key === key && w.from === 'pending') n++;
    return n;
  }

  /** Whether a staged change purges an item of the queue: its idempotency key must be free for a post that follows. */
  purges(key: string): boolean {
    for (const w of this.pending.values()) if (w.ref.key === key && w.purged) return true;
    return false;
  }

  /** The staged writes, taken (the next ones start afresh), with the count changes they make. */
  takeWrites(): { updates: PendingWrite[]; deletes: PendingWrite[] } {
    const updates: PendingWrite[] = [];
    const deletes: PendingWrite[] = [];
    for (const w of this.pending.values()) {
      // Counted with the writes: a write that does not land fails the transaction.
      if (w.purged) {
        this.count(w.ref.key, w.from, -1);
        deletes.push(w);
      } else {
        if (w.record.status !== w.from) {
          this.count(w.ref.key, w.from, -1);
          this.count(w.ref.key, w.record.status, 1);
        }
        updates.push(w);
      }
    }
    this.pending = new Map();
    return { updates, deletes };
  }

  /**
   * Writes every staged record now, with one statement: an UPDATE and a DELETE each guarded on
   * the version the row had when it was read (under its row lock, so a mismatch means a bug or a
   * lost lock: the transaction is rolled back and run again). Used where a later statement of the
   * transaction must see the rows as changed (the sweep's next batch); otherwise the writes go with
   * the task events at the end ({@link PostgresStore.finish}).
   */
  async flush(): Promise<void> {
    if (this.pending.size === 0) return;
    const { updates, deletes } = this.takeWrites();
    const res = await this.query<{ updated: number; deleted: number }>(named('svcq_write_items', `WITH ${WRITE_ITEMS}
       SELECT (SELECT count(*) FROM upd)::integer AS updated, (SELECT count(*) FROM del)::integer AS deleted`, 'generic'), writeParams(updates, deletes));
    checkWritten(res.rows[0]!, updates, deletes);
  }
}

/**
 * The guarded UPDATE (`upd`) and DELETE (`del`) of staged records as CTEs, parameters $1–$17 (see
 * {@link writeParams}): one row of unnest per item, found where this transaction read it (its
 * `ctid`, by a TID scan: the one plan, whatever the table's size, so it is planned once) and
 * matched on its id and the version read. The row is locked by this transaction since it was
 * read, so it is still there unless this transaction wrote it since (then its version is past).
 * A row last written by a transaction with a later id than this one's (`writer`, see schema
 * version 9) fails the guard too: the transaction runs again with a new id, so the task history,
 * read in the order of transaction ids, holds every item's events in the order they happened.
 */
const WRITE_ITEMS = `upd AS (
    UPDATE svcq_items AS i
       SET status = u.status, updated_at = u.updated_at, finished_at = u.finished_at, attempts = u.attempts,
           lease_worker = u.lease_worker, lease_until = u.lease_until, available_at = u.available_at,
           progress = u.progress, result = u.result, error = u.error, fetched_at = u.fetched_at,
           version = i.version + 1, writer = pg_current_xact_id()
      FROM unnest($1::tid[], $2::text[], $3::bigint[], $4::text[], $5::bigint[], $6::bigint[], $7::integer[], $8::text[],
                  $9::bigint[], $10::bigint[], $11::text[], $12::text[], $13::text[], $14::bigint[])
           AS u(ctid, id, version, status, updated_at, finished_at, attempts, lease_worker, lease_until, available_at, progress, result, error, fetched_at)
     WHERE i.ctid = ANY($1::tid[]) AND i.ctid = u.ctid AND i.id = u.id AND i.version = u.version AND i.writer <= pg_current_xact_id()
    RETURNING 1
  ), del AS (
    DELETE FROM svcq_items AS i USING unnest($15::tid[], $16::text[], $17::bigint[]) AS d(ctid, id, version)
     WHERE i.ctid = ANY($15::tid[]) AND i.ctid = d.ctid AND i.id = d.id AND i.version = d.version AND i.writer <= pg_current_xact_id()
    RETURNING 1
  )`;

function writeParams(updates: readonly PendingWrite[], deletes: readonly PendingWrite[]): unknown[] {
  const r = updates.map((w) => w.record);
  return [
    updates.map((w) => w.ctid),
    r.map((x) => x.id),
    updates.map((w) => w.version),
    r.map((x) => x.status),
    r.map((x) => x.updatedAt),
    r.map((x) => x.finishedAt),
    r.map((x) => x.attempts),
    r.map((x) => x.leaseWorker),
    r.map((x) => x.leaseUntil),
    r.map((x) => x.availableAt),
    r.map((x) => x.progress),
    r.map((x) => x.result),
    r.map((x) => x.error),
    r.map((x) => x.fetchedAt),
    deletes.map((w) => w.ctid),
    deletes.map((w) => w.record.id),
    deletes.map((w) => w.version),
  ];
}

/** A guarded write that found another version than the one read fails the transaction (it runs again). */
function checkWritten(done: { updated: number; deleted: number }, updates: readonly PendingWrite[], deletes: readonly PendingWrite[]): void {
  if (done.updated !== updates.length) throw new StaleWrite(`${updates.length - done.updated} item(s)`);
  if (done.deleted !== deletes.length) throw new StaleWrite(`${deletes.length - done.deleted} purged item(s)`);
}

/**
 * The pause (decisions §8.4), checked in the claim's own statement, whose first parameter is the
 * queue's key. Read there, the pause is the database's, rather than a set of paused queues kept in
 * each node's memory and refreshed by notifications: a claim whose statement starts after a pause
 * committed (on any node) finds nothing, with nothing to keep fresh on each node and no window in
 * which a node that missed a notification still leases. It costs a claim next to nothing: the
 * subquery names no column of the items, so PostgreSQL runs it once per statement (an InitPlan:
 * one probe of svcq_queues' primary key, a table of one row per queue) as a one-time filter ahead
 * of the walk of the pending index, which it skips whole when the queue is paused; and a statement
 * claims for every plain claim of its queue in the transaction. (Measured on a backlog of 100,000:
 * 111.8 µs a claim statement with it, 111.2 µs without, round trip included.)
 */
const NOT_PAUSED = 'NOT EXISTS (SELECT 1 FROM svcq_queues WHERE key = $1 AND paused)';

interface PlainClaim {
  input: ClaimInput;
  max: number;
}

interface SubmissionCall {
  id: string;
  apply: (r: ItemRecord, now: number) => Submission;
  /** The payload an accepted submission archives (progress, result, error; none for a cancel). */
  payload?: { kind: PayloadKind; body: string };
  /** Whether it can make its item pending again (an error handed in with attempts left); no other submission can. */
  requeues?: boolean;
}

/** A call waiting for its transaction. */
interface Op {
  ref: QueueRef;
  /** Posts: those of one queue in a transaction become one multi-row INSERT. */
  posts?: readonly PostInput[];
  /** Claims without criteria: those of one queue in a transaction lock their rows with one statement. */
  claim?: PlainClaim;
  /** Submissions: those of one queue in a transaction lock their rows with one statement. */
  submit?: SubmissionCall;
  /** Anything else. */
  run?: (tx: Tx) => Promise<unknown>;
  /** Sweep the queue even inside its quiet window (the periodic sweep). */
  sweep?: boolean;
  resolve: (value: unknown) => void;
  reject: (err: Error) => void;
}

/**
 * The PostgreSQL store (decisions §6.1): several `svcq serve` processes share one database.
 *
 * Rules: every change is computed by the pure functions of engine/rules.ts on a row read under
 * its row lock (`FOR UPDATE`, or `FOR UPDATE SKIP LOCKED` for claims and sweeps) and written back
 * with an UPDATE guarded on the row's version, in the transaction that holds the lock. A claim
 * leases each item once whichever node claims: a row locked by another claim is skipped, and a
 * row is re-checked with rules.claimable after it is locked.
 *
 * Time: deadlines are columns compared with the store's `now` (passed as a parameter). Before the
 * calls of a transaction run, what is due in their queues is applied in batches of 500 rows
 * (`… FOR UPDATE SKIP LOCKED`); a periodic sweep does the same for every queue `configFor` knows,
 * so deadlines pass with no traffic, and a timer sweeps a queue when a deadline it knows of falls
 * (one this node set, or one the periodic sweep saw coming), so a waiting claim gets a re-queued
 * item as its retry delay or its lease ends, not up to a sweep interval later. Each is applied
 * once: a row another node holds is skipped, and a row is re-checked with rules.due after it is
 * locked (another node may have just applied it).
 *
 * Group commit: calls made while the store's transactions are all busy (and those made in the
 * same turn of the event loop) wait together and run in the next transaction, in the order they
 * were made; posts to one queue among them become one multi-row INSERT, its claims without
 * criteria lock their rows with one statement (the earlier call takes the older items), its
 * submissions likewise, and each queue's changes are written with one UPDATE. One COMMIT makes
 * them all durable; every call resolves only after that COMMIT. Up to `concurrentTransactions`
 * transactions run at once.
 *
 * Failures: a transaction rolled back by a deadlock or a serialization failure runs again; a
 * statement the database refuses fails only its own call (the others of its transaction run again
 * without it); a connection that fails (the database went away, pg_terminate_backend) refuses every
 * call of its transaction with {@link StoreUnavailable}, and the pool opens new connections for the
 * next ones. A call is never resolved unless its COMMIT succeeded. (A COMMIT whose answer is lost
 * with the connection may still have been applied: that call is refused, and a retried post with
 * an idempotency key finds the item.)
 *
 * Durability: a COMMIT is durable as the database is configured (synchronous_commit on by default).
 * Task events of each change are written to `svcq_events` in its transaction.
 *
 * Task history: the store is the {@link EventOutbox} of this node's TaskEventLog, reading the
 * events of every node from `svcq_events` in one order all nodes agree on (see
 * {@link PgEventOutbox}). Events older than `eventRetentionMs` (7 days) are purged by whichever
 * node gets there: the histories keep them.
 *
 * Payloads: for a queue with `archivePayloads`, each created item's body and each accepted
 * progress, result and error are written to `svcq_payloads` (the latest of each kind per item)
 * in the transaction of their change, before its COMMIT: an acknowledged change always has its
 * payload, a refused one never does, and retention (which deletes items) leaves them. Read them
 * with {@link PostgresStore.readPayload} from any node.
 */
export class PostgresStore implements Store, EventOutbox {
  private pool: pg.Pool | undefined;
  private readonly now: () => number;
  /** The periodic sweep's interval in milliseconds (0: none, and no sweep as deadlines fall either). */
  private readonly sweepEvery: number;
  private readonly warn: (line: string) => void;
  private state: 'new' | 'open' | 'closed' = 'new';
  private queue: Op[] = [];
  private running = 0;
  /** Transactions under way, for the oldest one's time (see {@link PostgresStore.quiet}). */
  private readonly live = new Set<Tx>();
  /**
   * Per queue, a time before which nothing in it can be due, under the rules it was worked out
   * for: the transactions that run before it skip the sweep of the queue.
   */
  private readonly quietUntil = new Map<string, { rules: string; until: number }>();
  /** Per queue, the periodic sweeps in a row that passed over it (see {@link QUIET_PASSES}). */
  private readonly quietPasses = new Map<string, number>();
  private sweeps = 0;
  private scheduled = false;
  /** When the last transaction started (performance.now()), and the timer that may start a second one. */
  private lastStarted = 0;
  private secondTimer: NodeJS.Timeout | undefined;
  private readonly idle: Array<() => void> = [];
  private sweepTimer: NodeJS.Timeout | undefined;
  private sweeping = false;
  /**
   * Queues to sweep when a deadline falls, by the time it falls (rounded up to WAKE_STEP_MS): a
   * deadline is applied as it falls rather than at the next periodic sweep. Only deadlines within
   * two sweep intervals are kept here; the periodic sweep finds the later ones as they come near.
   */
  private readonly wakes = new Map<number, Set<string>>();
  private wakeTimer: NodeJS.Timeout | undefined;
  private wakeTimerAt = Infinity;
  /** Queues known to be in svcq_queues already. */
  private readonly known = new Set<string>();
  private ids = Buffer.alloc(0);
  private idsAt = 0;
  private readonly transactions: FailureStreak;
  private readonly outbox: PgEventOutbox;
  private purgeTimer: NodeJS.Timeout | undefined;
  private purging = false;

  constructor(private readonly options: PostgresStoreOptions) {
    this.now = options.now ?? Date.now;
    this.sweepEvery = options.sweepIntervalMs ?? 1000;
    this.warn = options.warn ?? (() => undefined);
    this.transactions = new FailureStreak(this.warn, 'transactions on PostgreSQL succeed again');
    this.outbox = new PgEventOutbox(() => (this.state === 'open' ? this.pool : undefined), { pollMs: options.eventPollMs, warn: this.warn, answerTimeoutMs: options.transactionTimeoutMs });
  }

  /** Connects, and brings the schema up to date (under an advisory lock: several nodes may start at once). */
  async open(): Promise<void> {
    if (this.state !== 'new') throw new Error(`a PostgresStore opens once (it is ${this.state})`);
    // A database that cannot be reached refuses calls within seconds (StoreUnavailable) rather than holding them;
    // keepalives find a connection whose peer vanished without closing it.
    // Statements are prepared (parsed once per connection) and by default planned at every run;
    // a transaction switches to kept plans for the statements that have one plan for every size
    // (see Plan).
    const pool = new pg.Pool({
      connectionString: this.options.url,
      max: this.options.poolSize ?? 8,
      types: TYPES,
      // A new connection waits no longer than a statement would (5 s at most).
      connectionTimeoutMillis: Math.min(5000, this.answerTimeoutMs),
      keepAlive: true,
      options: '-c plan_cache_mode=force_custom_plan',
      // Statements are sent without waiting for the answer to the one before (BEGIN with the
      // first statement of a transaction, COMMIT with its last): fewer round trips per commit.
      pipeline: true,
    });
    // An idle connection that breaks is dropped by the pool; the next checkout opens a new one.
    pool.on('error', (err) => this.warn(`a PostgreSQL connection failed while idle: ${err.message}`));
    keepConnectionErrors(pool);
    let client: pg.PoolClient;
    try {
      client = await pool.connect();
    } catch (err) {
      await pool.end().catch(() => undefined);
      throw new StoreUnavailable(err as Error);
    }
    try {
      await migrate(client);
      await this.checkVacuum(client);
      client.release();
    } catch (err) {
      client.release(err as Error);
      await pool.end().catch(() => undefined);
      throw err instanceof pg.DatabaseError || !(err instanceof Error) ? new StoreUnavailable(err as Error) : err;
    }
    this.pool = pool;
    this.state = 'open';
    if (this.wakesOn()) {
      this.sweepTimer = setInterval(() => this.sweepAll(), this.sweepEvery);
      this.sweepTimer.unref();
    }
    if ((this.options.eventRetentionMs ?? EVENT_RETENTION_MS) > 0) {
      const purge = (): void => {
        this.purgeEvents().catch((err: Error) => this.warn(`purging old task events failed (it runs again later): ${err.message}`));
      };
      this.purgeTimer = setTimeout(() => {
        purge();
        this.purgeTimer = setInterval(purge, this.options.eventPurgeIntervalMs ?? 3_600_000);
        this.purgeTimer.unref();
      }, Math.min(60_000, this.options.eventPurgeIntervalMs ?? 60_000));
      this.purgeTimer.unref();
    }
  }

  /**
   * Warns when the server does not vacuum on its own: every job leaves dead rows in the items and
   * the count tables, and without vacuum they grow and slow every claim and overview down.
   */
  private async checkVacuum(client: pg.PoolClient): Promise<void> {
    const { rows } = await client.query<{ autovacuum: string; track_counts: string }>("SELECT current_setting('autovacuum') AS autovacuum, current_setting('track_counts') AS track_counts");
    const off = [rows[0]?.autovacuum === 'off' ? 'autovacuum' : '', rows[0]?.track_counts === 'off' ? 'track_counts' : ''].filter(Boolean);
    if (off.length > 0) this.warn(`${off.join(' and ')} ${off.length > 1 ? 'are' : 'is'} off on this PostgreSQL server: the items and count tables will grow with dead rows and slow down unless they are vacuumed some other way (see docs/scaling.md)`);
  }

  /**
   * An archived payload's exact bytes (decisions §5), from any node's changes, or null when none
   * is archived (never archived, or its change was not committed). Reads outside the store's
   * transactions; a database that cannot be reached rejects with {@link StoreUnavailable}.
   */
  async readPayload(host: string, queue: string, id: string, kind: PayloadKind): Promise<Buffer | null> {
    try {
      return await readPayload((text, values) => this.read(text, values), host, queue, id, kind);
    } catch (err) {
      throw err instanceof StoreUnavailable ? err : new StoreUnavailable(err as Error, true);
    }
  }

  readEvents(afterSeq: number, limit: number): OutboxEntry[] {
    return this.outbox.readEvents(afterSeq, limit);
  }

  eventsDelivered(seq: number): void {
    this.outbox.eventsDelivered(seq);
  }

  onEvents(listener: () => void): void {
    this.outbox.onEvents(listener);
  }

  catchUp(): Promise<void> {
    return this.outbox.catchUp();
  }

  /**
   * Deletes task events older than `eventRetentionMs` by the store's clock, 10,000 per statement
   * (each its own short transaction, so it never holds back the history's horizon for long);
   * resolves with how many went. Safe on every node at once: a row deleted twice is deleted once.
   */
  async purgeEvents(): Promise<number> {
    const keep = this.options.eventRetentionMs ?? EVENT_RETENTION_MS;
    if (keep <= 0 || this.purging) return 0;
    this.purging = true;
    try {
      let total = 0;
      for (;;) {
        const res = await this.read('DELETE FROM svcq_events WHERE ctid = ANY (ARRAY(SELECT ctid FROM svcq_events WHERE ts < $1 LIMIT $2))', [this.now() - keep, PURGE_BATCH]);
        total += res.rowCount ?? 0;
        if ((res.rowCount ?? 0) < PURGE_BATCH || this.state !== 'open') return total;
      }
    } finally {
      this.purging = false;
    }
  }

  /** Refuses new calls, waits for the transactions under way, and closes the pool. */
  async close(): Promise<void> {
    if (this.state === 'closed') return;
    const wasOpen = this.state === 'open';
    this.state = 'closed';
    clearInterval(this.sweepTimer);
    clearTimeout(this.wakeTimer);
    clearTimeout(this.purgeTimer);
    this.outbox.close();
    if (!wasOpen) return;
    while (this.running > 0 || this.queue.length > 0 || this.scheduled) await new Promise<void>((resolve) => this.idle.push(resolve));
    await this.pool?.end();
  }

  post(ref: QueueRef, input: PostInput): Promise<PostOutcome> {
    return this.submitOp<PostOutcome[]>({ ref, posts: [input] }).then((out) => out[0]!);
  }

  postMany(ref: QueueRef, inputs: readonly PostInput[]): Promise<PostOutcome[]> {
    if (inputs.length === 0) return this.submitOp<unknown>({ ref, run: async () => null }).then(() => []);
    return this.submitOp<PostOutcome[]>({ ref, posts: inputs });
  }

  async claim(ref: QueueRef, input: ClaimInput): Promise<Claimed | null> {
    if (input.signal?.aborted) return null;
    const got = await this.submitOp<Claimed[]>(input.criteria === undefined ? { ref, claim: { input, max: 1 } } : { ref, run: (tx) => this.claimMatching(tx, ref, input, input.criteria!, 1) });
    return got[0] ?? null;
  }

  async claimMany(ref: QueueRef, input: ClaimInput, max: number): Promise<Claimed[]> {
    if (input.signal?.aborted || max <= 0) return [];
    return this.submitOp<Claimed[]>(input.criteria === undefined ? { ref, claim: { input, max } } : { ref, run: (tx) => this.claimMatching(tx, ref, input, input.criteria!, max) });
  }

  /**
   * Most fetches change nothing: they read the row with one statement outside the store's
   * transactions (what is committed; a change is answered only once committed, so a caller sees
   * its own). Only an item a rule applies to now (a deadline past, the first fetch of a terminal
   * item) is read again under its lock in a transaction, and changed there.
   */
  async get(ref: QueueRef, id: string): Promise<StatusRecord | null> {
    let row: ItemRow | undefined;
    try {
      row = (await this.read<ItemRow>(named('svcq_read', `SELECT ${COLUMNS} FROM svcq_items WHERE queue = $1 AND id = $2`), [ref.key, id])).rows[0];
    } catch (err) {
      throw err instanceof StoreUnavailable ? err : new StoreUnavailable(err as Error, true);
    }
    if (!row) return null;
    const seen = recordOf(row).record;
    const now = this.now();
    if (!rules.due(seen, ref.config, now) && !rules.fetched(seen, now)) return statusOf(seen);
    return this.submitOp<StatusRecord | null>({
      ref,
      run: async (tx) => {
        const loaded = await this.lock(tx, ref, id);
        if (!loaded) return null;
        const r = this.applyDue(tx, ref, loaded);
        if (!r) return null;
        const stamp = rules.fetched(r, tx.now);
        if (stamp) tx.stage(ref, loaded, stamp);
        return statusOf(r);
      },
    });
  }

  progress(ref: QueueRef, id: string, body: string): Promise<SubmitOutcome | null> {
    return this.submission(ref, id, (r, now) => rules.progress(r, ref.config, body, now), { kind: 'progress', body });
  }

  result(ref: QueueRef, id: string, body: string): Promise<SubmitOutcome | null> {
    return this.submission(ref, id, (r, now) => rules.result(r, body, now), { kind: 'result', body });
  }

  error(ref: QueueRef, id: string, body: string): Promise<SubmitOutcome | null> {
    return this.submission(ref, id, (r, now) => rules.error(r, ref.config, body, now), { kind: 'error', body }, true);
  }

  cancel(ref: QueueRef, id: string): Promise<SubmitOutcome | null> {
    return this.submission(ref, id, (r, now) => rules.cancel(r, now));
  }

  counts(ref: QueueRef): Promise<Partial<Record<ItemStatus, number>>> {
    return this.submitOp({
      ref,
      run: async (tx) => {
        // What calls before it in this transaction changed counts too.
        await tx.flush();
        const res = await tx.query<{ status: ItemStatus; n: number }>(named('svcq_counts', 'SELECT status, count(*)::integer AS n FROM svcq_items WHERE queue = $1 GROUP BY status'), [ref.key]);
        const out: Partial<Record<ItemStatus, number>> = {};
        for (const row of res.rows) out[row.status] = row.n;
        return out;
      },
    });
  }

  /**
   * Reads only, outside any transaction of the store (deadlines already past may show as not yet
   * applied). Counts are kept (decisions §5.1): svcq_counts plus the deltas not yet compacted,
   * whatever the number of items the queue holds.
   */
  async overview(ref: QueueRef, limits: { oldest: number; leases: number }): Promise<QueueOverview> {
    try {
      const [paused, counts, oldestAt, oldest, leases] = await Promise.all([
        this.read<{ paused: boolean }>(named('svcq_overview_paused', 'SELECT paused FROM svcq_queues WHERE key = $1'), [ref.key]),
        this.read<{ status: ItemStatus; n: number }>(
          named(
            'svcq_overview_counts',
            `SELECT status, sum(n)::bigint AS n FROM (
               SELECT status, n FROM svcq_counts WHERE queue = $1
             UNION ALL
               SELECT status, delta FROM svcq_count_deltas WHERE queue = $1
             ) AS c GROUP BY status`,
          ),
          [ref.key],
        ),
        // In posting order, not min(): statistics taken while nothing was pending (a queue whose
        // workers keep up) estimate one pending row, and min() was then planned as a read of every
        // live item of the queue (60,000 at 40 ms); read in the order of the live index, the first
        // pending row ends it.
        this.read<{ at: number | null }>(
          named('svcq_oldest_pending', `SELECT posted_at AS at FROM svcq_items WHERE queue = $1 AND status = 'pending' ORDER BY posted_at LIMIT 1`),
          [ref.key],
        ),
        limits.oldest > 0
          ? this.read<{ id: string; posted_at: number; attempts: number }>(
              // In claim order (decisions §8.1): the first claimable items and the first waiting
              // ones, each read in the order of its own index, then the two short lists merged.
              `SELECT id, posted_at, attempts FROM (
                 (SELECT id, posted_at, attempts, priority, ord FROM svcq_items WHERE queue = $1 AND status = 'pending' AND available_at = 0 ORDER BY (-priority), ord LIMIT $2)
                 UNION ALL
                 (SELECT id, posted_at, attempts, priority, ord FROM svcq_items WHERE queue = $1 AND status = 'pending' AND available_at > 0 ORDER BY (-priority), ord LIMIT $2)
               ) AS o ORDER BY (-priority), ord LIMIT $2`,
              [ref.key, limits.oldest],
            )
          : null,
        limits.leases > 0
          ? this.read<{ id: string; lease_worker: string | null; lease_until: number | null; attempts: number }>(
              `SELECT id, lease_worker, lease_until, attempts FROM svcq_items WHERE queue = $1 AND status IN ('claimed', 'processing') ORDER BY lease_until, ord LIMIT $2`,
              [ref.key, limits.leases],
            )
          : null,
      ]);
      const partial: Partial<Record<ItemStatus, number>> = {};
      for (const row of counts.rows) partial[row.status] = row.n;
      return {
        paused: paused.rows[0]?.paused === true,
        counts: fullCounts(partial),
        oldestPendingAt: oldestAt.rows[0]?.at ?? null,
        oldest: (oldest?.rows ?? []).map((r) => ({ id: r.id, postedAt: r.posted_at, attempts: r.attempts })),
        leases: (leases?.rows ?? []).map((r) => ({ id: r.id, worker: r.lease_worker ?? '', until: r.lease_until ?? 0, attempts: r.attempts })),
      };
    } catch (err) {
      throw new StoreUnavailable(err as Error, true);
    }
  }

  /**
   * See {@link Store.setPaused}: the queue's row in svcq_queues says it, changed in a transaction of
   * its own like any call (folded with others); the claims read it (see {@link NOT_PAUSED}). A
   * resume, once committed, announces the queue's claim topic, which reaches the held claims of
   * every node that waits on the queue (see PgNotifier).
   */
  setPaused(ref: QueueRef, paused: boolean): Promise<boolean> {
    return this.submitOp<boolean>({
      ref,
      run: async (tx) => {
        await tx.query(named('svcq_set_paused', 'INSERT INTO svcq_queues (key, paused) VALUES ($1, $2) ON CONFLICT (key) DO UPDATE SET paused = EXCLUDED.paused'), [ref.key, paused]);
        tx.registered.add(ref.key);
        // A resume of a queue that was not paused wakes its held claims for nothing: they look, and wait again.
        if (!paused) tx.resumed.add(ref.key);
        return paused;
      },
    });
  }

  private get answerTimeoutMs(): number {
    return this.options.transactionTimeoutMs ?? ANSWER_TIMEOUT_MS;
  }

  /** One statement outside the store's transactions, cut after {@link answerTimeoutMs} without an answer. */
  private read<R extends pg.QueryResultRow>(query: string | pg.QueryConfig, values?: unknown[]): Promise<pg.QueryResult<R>> {
    return answered<R>(this.openPool(), this.answerTimeoutMs, query, values);
  }

  private openPool(): pg.Pool {
    if (this.state !== 'open' || !this.pool) throw new StoreUnavailable(new Error(this.state === 'new' ? 'the store is not open' : 'the server is stopping'));
    return this.pool;
  }

  private submission(ref: QueueRef, id: string, apply: (r: ItemRecord, now: number) => Submission, payload?: SubmissionCall['payload'], requeues = false): Promise<SubmitOutcome | null> {
    return this.submitOp({ ref, submit: { id, apply, payload, requeues } });
  }

  /**
   * Submissions to one queue, in the order they were made: their rows locked with one statement
   * (in id order, the same order on every node, so that two such transactions do not deadlock),
   * what is due applied to each first, then each rule in turn (two submissions for one item see
   * each other, as one after the other), all written with one UPDATE.
   */
  private async submitMany(tx: Tx, ref: QueueRef, calls: readonly SubmissionCall[]): Promise<Array<SubmitOutcome | null>> {
    const ids = [...new Set(calls.map((c) => c.id))];
    // Written as a join with the ids (not `id = ANY($2)`), so that the plan kept from an empty table
    // probes the primary key with both columns; locked in id order, after the sort.
    const res = await tx.query<ItemRow>(
      named('svcq_lock_items', `SELECT ${COLUMNS} FROM svcq_items WHERE (queue, id) = ANY (SELECT $1, unnest($2::text[])) ORDER BY id FOR UPDATE`, 'generic'),
      [ref.key, ids],
    );
    const loaded = new Map<string, Loaded>();
    const current = new Map<string, ItemRecord | null>();
    for (const row of res.rows) {
      const l = tx.current(ref, row);
      if (!l) continue;
      loaded.set(row.id, l);
      current.set(row.id, this.applyDue(tx, ref, l));
    }
    const out = calls.map((call) => {
      const r = current.get(call.id);
      if (!r) return null;
      const outcome = call.apply(r, tx.now);
      if (outcome.transition) {
        const l = loaded.get(call.id)!;
        tx.stage(ref, l, outcome.transition);
        if (outcome.accepted && call.payload) tx.archive(ref, call.id, call.payload.kind, call.payload.body);
        // What the change made due at once (a retention of 0 s purges a finished item) applies
        // before the next call, as every call applies what is due first: a later call of this
        // transaction finds the item gone, and a post finds its idempotency key free.
        const due = rules.due(outcome.transition.record, ref.config, tx.now);
        if (due) tx.stage(ref, l, due);
        current.set(call.id, due ? (due.purged ? null : due.record) : outcome.transition.record);
      }
      return { accepted: outcome.accepted, status: outcome.status };
    });
    return out;
  }

  /** One item read under its row lock, as the transaction has it. */
  private async lock(tx: Tx, ref: QueueRef, id: string): Promise<Loaded | null> {
    const res = await tx.query<ItemRow>(named('svcq_load_locked', `SELECT ${COLUMNS} FROM svcq_items WHERE queue = $1 AND id = $2 FOR UPDATE`), [ref.key, id]);
    return res.rows[0] ? tx.current(ref, res.rows[0]) : null;
  }

  /** Stages what rules.due says for a locked row; the record after it, or null when it was purged. */
  private applyDue(tx: Tx, ref: QueueRef, loaded: Loaded): ItemRecord | null {
    const t = rules.due(loaded.record, ref.config, tx.now);
    if (!t) return loaded.record;
    tx.stage(ref, loaded, t);
    return t.purged ? null : t.record;
  }

  /**
   * Claims without criteria, in the order they were made, each taking the oldest claimable items
   * left (`ORDER BY (-priority), ord LIMIT … FOR UPDATE SKIP LOCKED` for all of them at once: rows another
   * transaction holds are skipped, never waited for). Each row is checked again with
   * rules.claimable once locked: another node may have changed it since this statement began.
   */
  private async claimPlain(tx: Tx, ref: QueueRef, calls: readonly PlainClaim[]): Promise<Claimed[][]> {
    // Groups started after this one may post before a later page of it is read: their items come
    // after these claims in the fold's order, so these claims pass them by.
    const group = tx.groups;
    const postedLater = (id: string): boolean => (tx.postedBy.get(`${ref.key}\n${id}`) ?? -1) > group;
    const out: Claimed[][] = calls.map(() => []);
    let at = 0;
    const settled = (): void => {
      while (at < calls.length && (out[at]!.length >= calls[at]!.max || calls[at]!.input.signal?.aborted)) at++;
    };
    settled();
    // Items an error made pending again must be in the table for the claim: the writes go out
    // ahead of its first statement, in the same go (the group's statement is sent at once, in
    // its place among the transaction's).
    const ahead = tx.requeued(ref.key) ? tx.flush() : undefined;
    ahead?.catch(() => undefined);
    let after = -1;
    let afterRank = -1000;
    while (at < calls.length) {
      let need = 0;
      for (let i = at; i < calls.length; i++) if (!calls[i]!.input.signal?.aborted) need += calls[i]!.max - out[i]!.length;
      // Rows this transaction changed already still show pending: asked for on top, so that one
      // page is enough unless a deadline fell on some row.
      const limit = need + tx.stagedPending(ref.key);
      const reading = tx.query<ItemRow>(
        named('svcq_claim', `SELECT ${COLUMNS} FROM svcq_items
          WHERE queue = $1 AND status = 'pending' AND available_at = 0 AND ((-priority), ord) > ($2::integer, $3) AND ${NOT_PAUSED}
          ORDER BY (-priority), ord LIMIT $4 FOR UPDATE SKIP LOCKED`, 'ordered'),
        [ref.key, afterRank, after, limit],
      );
      if (ahead) {
        // Its failure, if any, is the cause (the claim behind it then fails too).
        reading.catch(() => undefined);
        await ahead;
      }
      const rows = (await reading).rows;
      if (rows.length === 0) break;
      after = rows[rows.length - 1]!.ord;
      afterRank = -rows[rows.length - 1]!.priority;
      for (const row of rows) {
        settled();
        if (at >= calls.length) break;
        if (postedLater(row.id)) continue;
        // Its own earlier change in this transaction counts (an item it claimed or finished already).
        const loaded = tx.current(ref, row);
        if (!loaded) continue;
        const r = this.applyDue(tx, ref, loaded);
        if (!r || !rules.claimable(r, tx.now)) continue;
        const t = rules.claim(r, ref.config, calls[at]!.input.worker, tx.now);
        tx.stage(ref, loaded, t);
        out[at]!.push(claimedOf(t.record));
      }
      settled();
      // A page short of what was asked for took every claimable row there was: asking again
      // would find none (and would see what later calls of this transaction posted meanwhile).
      if (rows.length < limit) break;
    }
    return out;
  }

  /**
   * Leases up to `max` of the oldest claimable items that pass the criteria. The pending rows are
   * read in claim order a page at a time without locks (narrowed by the database where that keeps
   * the semantics exactly, see pg-criteria.ts), matched here with the engine's `matches()`
   * (decisions §3.3: one definition of matching), and only the matching ones are locked (SKIP
   * LOCKED), so FIFO holds among matching items and a claim never holds rows it does not take.
   */
  private async claimMatching(tx: Tx, ref: QueueRef, input: ClaimInput, criteria: Record<string, unknown>, max: number): Promise<Claimed[]> {
    const out: Claimed[] = [];
    if (tx.requeued(ref.key)) await tx.flush();
    const prefilter = prefilterOf(criteria);
    let after = -1;
    let afterRank = -1000;
    while (out.length < max) {
      if (input.signal?.aborted) break;
      const need = max - out.length;
      const page = (
        await tx.query<{ id: string; ord: number; priority: number; body: string }>(
          named('svcq_claim_page', `SELECT id, ord, priority, body FROM svcq_items
            WHERE queue = $1 AND status = 'pending' AND available_at = 0 AND ((-priority), ord) > ($2::integer, $3) AND ${NOT_PAUSED}
              AND ${PREFILTER_SQL}
            ORDER BY (-priority), ord LIMIT $4`, 'custom-ordered'),
          [ref.key, afterRank, after, CLAIM_PAGE, ...prefilter],
        )
      ).rows;
      if (page.length === 0) break;
      const matching = page.filter((p) => passes(p.body, criteria));
      const candidates = matching.slice(0, need);
      const last = candidates.length < matching.length ? candidates[candidates.length - 1]! : page[page.length - 1]!;
      after = last.ord;
      afterRank = -last.priority;
      if (candidates.length === 0) continue;
      const rows = (
        await tx.query<ItemRow>(
          // The status is tested as (…) IS TRUE, which no partial index's condition is proved
          // from: with statistics taken while nothing was pending, status = 'pending' had the rows
          // found by reading every live item of the queue; now each id is probed by primary key.
          named('svcq_claim_matching', `SELECT ${COLUMNS} FROM svcq_items
            WHERE queue = $1 AND id = ANY($2::text[]) AND (status = 'pending') IS TRUE AND available_at <= $3
            ORDER BY (-priority), ord FOR UPDATE SKIP LOCKED`),
          [ref.key, candidates.map((c) => c.id), tx.now],
        )
      ).rows;
      for (const row of rows) {
        if (out.length >= max) break;
        // Locked now, and read as it is now: another node may have applied a deadline to it
        // meanwhile, or this transaction changed it already.
        const loaded = tx.current(ref, row);
        if (!loaded) continue;
        const r = this.applyDue(tx, ref, loaded);
        if (!r || !rules.claimable(r, tx.now)) continue;
        const t = rules.claim(r, ref.config, input.worker, tx.now);
        tx.stage(ref, loaded, t);
        out.push(claimedOf(t.record));
      }
    }
    return out;
  }

  /**
   * Creates the items of one or more posts to a queue with one INSERT. Idempotency keys rest on
   * the unique index: `ON CONFLICT DO NOTHING` waits for a concurrent insert of the same key to
   * commit or roll back, so concurrent posts with one key create one item on every node; the
   * earlier item is then read. A key repeated within the batch names its first item.
   */
  private async insertPosts(tx: Tx, ref: QueueRef, inputs: readonly PostInput[]): Promise<PostOutcome[]> {
    const group = tx.groups;
    const out: Array<PostOutcome | undefined> = new Array(inputs.length);
    // Inputs whose key an earlier input of this batch carries: they name that input's item.
    const firstWithKey = new Map<string, number>();
    const repeats: Array<[number, number]> = [];
    let todo: number[] = [];
    for (let n = 0; n < inputs.length; n++) {
      const key = inputs[n]!.idempotencyKey;
      if (key !== undefined) {
        const first = firstWithKey.get(key);
        if (first !== undefined) {
          repeats.push([n, first]);
          continue;
        }
        firstWithKey.set(key, n);
      }
      todo.push(n);
    }
    // Ahead of the INSERT, in the same go (the group's statement is sent at once, in its place
    // among the transaction's): the writes, when a purge frees an idempotency key for these
    // posts, and the queue's registration, the first time this node posts to it.
    const ahead: Array<Promise<unknown>> = [];
    if (tx.purges(ref.key)) ahead.push(tx.flush());
    if (!this.known.has(ref.key) && !tx.registered.has(ref.key)) {
      ahead.push(tx.query(named('svcq_register_queue', 'INSERT INTO svcq_queues (key) VALUES ($1) ON CONFLICT DO NOTHING'), [ref.key]));
      tx.registered.add(ref.key);
    }
    for (const p of ahead) p.catch(() => undefined);
    for (let round = 0; todo.length > 0; round++) {
      if (round === 10) throw new Error('could not create the items: their ids or idempotency keys kept colliding');
      const records = todo.map((n) => {
        const input = inputs[n]!;
        const id = this.newId();
        tx.postedBy.set(`${ref.key}\n${id}`, group);
        return rules.post({ id, ord: 0, body: input.body, postedBy: input.postedBy, idempotencyKey: input.idempotencyKey ?? null, options: input.options }, tx.now);
      });
      const first = records[0]!.record;
      const inserting = tx.query<{ id: string; ord: number }>(
        named('svcq_insert_items', `WITH input AS (
           SELECT * FROM unnest($2::text[], $3::text[], $4::text[], $5::text[]) WITH ORDINALITY AS t(id, body, posted_by, idempotency_key, n)
         ), ords AS (
           SELECT v, row_number() OVER (ORDER BY v) AS n FROM (SELECT nextval('svcq_item_ord') AS v FROM generate_series(1, $6::integer)) AS s
         )
         INSERT INTO svcq_items (queue, id, ord, body, posted_by, posted_at, idempotency_key, status, updated_at, attempts, available_at, priority, grp)
         SELECT $1, input.id, ords.v, input.body, input.posted_by, $7, input.idempotency_key, $8, $9, $10, coalesce(($11::bigint[])[input.n], 0), coalesce(($12::smallint[])[input.n], 0), ($13::text[])[input.n]
           FROM input JOIN ords USING (n) ORDER BY input.n
         ON CONFLICT DO NOTHING
         RETURNING id, ord`, 'generic'),
        [
          ref.key,
          records.map((t) => t.record.id),
          records.map((t) => t.record.body),
          records.map((t) => t.record.postedBy),
          records.map((t) => t.record.idempotencyKey),
          records.length,
          first.postedAt,
          first.status,
          first.updatedAt,
          first.attempts,
          // Post options (decisions §8.1), per item; null when none of them has any, so that a
          // plain post sends nothing more.
          records.some((t) => t.record.availableAt !== 0) ? records.map((t) => t.record.availableAt) : null,
          records.some((t) => t.record.priority !== 0) ? records.map((t) => t.record.priority) : null,
          records.some((t) => t.record.group !== null) ? records.map((t) => t.record.group) : null,
        ],
      );
      if (ahead.length > 0) {
        // Their failure, if any, is the cause (the INSERT behind it then fails too).
        inserting.catch(() => undefined);
        await Promise.all(ahead.splice(0));
      }
      const res = await inserting;
      const ords = new Map(res.rows.map((row) => [row.id, row.ord]));
      const conflicted: number[] = [];
      records.forEach((t, i) => {
        const n = todo[i]!;
        const ord = ords.get(t.record.id);
        if (ord === undefined) return void conflicted.push(n);
        const record: ItemRecord = { ...t.record, ord };
        tx.changes.push({ ref, record, events: t.events, purged: false });
        tx.count(ref.key, record.status, 1);
        tx.archive(ref, record.id, 'item', record.body);
        out[n] = { id: record.id, status: record.status, created: true };
      });
      // Not inserted: the key names an earlier item (read it), or the random id was taken (try another).
      const keys = conflicted.map((n) => inputs[n]!.idempotencyKey).filter((k): k is string => k !== undefined);
      const earlier = new Map<string, { id: string; status: ItemStatus }>();
      if (keys.length > 0) {
        const found = await tx.query<{ id: string; status: ItemStatus; idempotency_key: string }>(
          named('svcq_find_keys', 'SELECT id, status, idempotency_key FROM svcq_items WHERE queue = $1 AND idempotency_key = ANY($2::text[])'),
          [ref.key, keys],
        );
        for (const row of found.rows) earlier.set(row.idempotency_key, row);
      }
      todo = [];
      for (const n of conflicted) {
        const key = inputs[n]!.idempotencyKey;
        const item = key === undefined ? undefined : earlier.get(key);
        // An earlier item purged by another node between the INSERT and the read: insert again.
        if (item) out[n] = { id: item.id, status: item.status, created: false };
        else todo.push(n);
      }
    }
    for (const [n, first] of repeats) {
      const o = out[first]!;
      out[n] = { id: o.id, status: o.status, created: false };
    }
    return out as PostOutcome[];
  }

  /**
   * Applies what is due in a queue at the transaction's time, 500 rows per statement, rows that
   * other transactions hold skipped (they are being changed by whoever holds them, and a call
   * that needs one of them locks it and applies rules.due itself).
   */
  private async sweepQueue(tx: Tx, ref: QueueRef, periodic: boolean): Promise<void> {
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
             SELECT id FROM svcq_items WHERE queue = $1 AND $5::boolean AND finished_at <= $6
           UNION ALL
             SELECT id FROM svcq_items WHERE queue = $1 AND $7::boolean AND fetched_at <= $6
         )) LIMIT ${SWEEP_BATCH} FOR UPDATE SKIP LOCKED`),
        // The ids first, as an array probed through the primary key (as a join, the generic plan
        // of the prepared statement read every row of the queue). Only pending items have an
        // available_at above 0 (every other transition sets it to 0), so the retry branch names no
        // status: with one, statistics taken while nothing was pending had it read the queue's
        // pending index whole (280 ms at 1,000,000 pending items) instead of the
        // (queue, available_at) index. Only terminal items have
        // finished_at or fetched_at: the retention branches read the
        // (queue, finished_at) and (queue, fetched_at) indexes by range. (With a status condition
        // the planner took the (queue, status) index and read every finished item of the queue.)
        [ref.key, tx.now, c.timeoutMs !== null, tx.now - (c.timeoutMs ?? 0), c.retainFrom === 'finished', tx.now - c.retainMs, c.retainFrom === 'fetched'],
      );
      let changed = 0;
      for (const row of res.rows) {
        const loaded = tx.current(ref, row);
        if (!loaded) continue;
        if (this.applyDue(tx, ref, loaded) !== loaded.record) changed++;
      }
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
  private endQuietBy(key: string, at: number): void {
    const quiet = this.quietUntil.get(key);
    if (quiet && at < quiet.until) this.quietUntil.set(key, { rules: quiet.rules, until: at });
    for (const other of this.live) {
      const found = other.quiet.get(key);
      if (found && at < found.until) other.quiet.set(key, { rules: found.rules, until: at });
    }
  }

  /** Whether nothing in the queue can be due at `now` (its last sweep's window, under the same rules). */
  private isQuiet(ref: QueueRef, now: number): boolean {
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
    const span = Math.min(c.leaseMs, c.retryDelayMs > 0 ? c.retryDelayMs : Infinity, c.timeoutMs ?? Infinity, c.retainMs);
    // Too short a span for a window; a periodic sweep still looks for the soonest deadline, to wake for it.
    if (span <= 2 * QUIET_SLACK_MS && !periodic) return;
    const res = await tx.query<{ at: number | null }>(
      named(
        'svcq_next_deadline',
        `SELECT LEAST(
           (SELECT min(lease_until) FROM svcq_items WHERE queue = $1 AND status IN ('claimed', 'processing')),
           (SELECT min(available_at) FROM svcq_items WHERE queue = $1 AND available_at > 0 AND status = 'pending'),
           (SELECT min(posted_at) FROM svcq_items WHERE queue = $1 AND status IN ('pending', 'claimed', 'processing')) + $2::bigint,
           (SELECT min(finished_at) FROM svcq_items WHERE queue = $1 AND finished_at IS NOT NULL) + $3::bigint,
           (SELECT min(fetched_at) FROM svcq_items WHERE queue = $1 AND fetched_at IS NOT NULL) + $4::bigint
         ) AS at`,
      ),
      [ref.key, c.timeoutMs, c.retainFrom === 'finished' ? c.retainMs : null, c.retainFrom === 'fetched' ? c.retainMs : null],
    );
    let oldest = tx.started;
    for (const other of this.live) oldest = Math.min(oldest, other.started);
    const at = res.rows[0]?.at ?? null;
    if (at !== null) this.wakeFor(ref.key, at);
    if (span <= 2 * QUIET_SLACK_MS) return;
    tx.quiet.set(ref.key, { rules: rulesKey(c), until: Math.min(at ?? Infinity, oldest + span - QUIET_SLACK_MS) });
  }

  /** Queues a call for the next transaction. */
  private submitOp<T>(op: Omit<Op, 'resolve' | 'reject'>): Promise<T> {
    if (this.state !== 'open') return Promise.reject(new StoreUnavailable(new Error(this.state === 'new' ? 'the store is not open' : 'the server is stopping')));
    return new Promise<T>((resolve, reject) => {
      this.queue.push({ ...op, resolve: resolve as (value: unknown) => void, reject });
      this.schedule();
    });
  }

  private schedule(): void {
    if (this.scheduled || this.queue.length === 0 || this.running >= (this.options.concurrentTransactions ?? CONCURRENT_TRANSACTIONS)) return;
    this.scheduled = true;
    // Calls made in this turn of the event loop go in the same transaction.
    setImmediate(() => {
      this.scheduled = false;
      this.drain();
    });
  }

  private drain(): void {
    const limit = this.options.concurrentTransactions ?? CONCURRENT_TRANSACTIONS;
    while (this.running < limit && this.queue.length > 0) {
      const after = this.options.secondTransactionAfterMs ?? SECOND_AFTER_MS;
      if (this.running > 0 && this.queue.length < SECOND_TRANSACTION_CALLS && performance.now() - this.lastStarted < after) {
        // A few calls wait for the running transaction to end, unless it takes long.
        this.secondTimer ??= setTimeout(() => {
          this.secondTimer = undefined;
          this.drain();
        }, after - (performance.now() - this.lastStarted));
        return;
      }
      const ops = this.queue.splice(0, MAX_FOLD);
      this.running++;
      this.lastStarted = performance.now();
      void this.runFold(ops).finally(() => {
        this.running--;
        if (this.queue.length > 0) this.schedule();
        else if (this.running === 0 && !this.scheduled) for (const wake of this.idle.splice(0)) wake();
      });
    }
    if (this.secondTimer && (this.queue.length === 0 || this.running >= limit)) {
      clearTimeout(this.secondTimer);
      this.secondTimer = undefined;
    }
  }

  /**
   * Runs calls in one transaction: what is due in their queues first, then each call in order
   * (posts to one queue as one INSERT, where the first of them stood), their task events, COMMIT.
   * Settles every call only after the COMMIT, or refuses it.
   */
  private async runFold(ops: Op[]): Promise<void> {
    for (let attempt = 0; ; attempt++) {
      const pool = this.pool!;
      let client: pg.PoolClient;
      try {
        client = await pool.connect();
      } catch (err) {
        return this.refuse(ops, err);
      }
      // A connection that breaks between two statements emits 'error' on the client (the watch
      // listens, or that would end the process; the next statement then fails, and that is
      // handled); one that stops answering is cut after answerTimeoutMs.
      const watched = watch(client, this.answerTimeoutMs);
      const started = performance.now();
      const tx = new Tx(client, this.now());
      this.live.add(tx);
      const results = new Map<Op, unknown>();
      // BEGIN goes out with the transaction's first statement (the client pipelines): no round
      // trip of its own. Every statement after it waits for it on the connection, in order.
      tx.hold();
      const begun = client.query('BEGIN');
      // Awaited later; a failure meanwhile is not an unhandled rejection.
      begun.catch(() => undefined);
      let committing: Promise<pg.QueryResult> | undefined;
      try {
        const queues = new Map<string, QueueRef>();
        for (const op of ops) if (!queues.has(op.ref.key)) queues.set(op.ref.key, op.ref);
        // Queues in which nothing can be due now: a row read there is never changed by rules.due.
        const quiet = new Set<string>();
        for (const ref of queues.values()) {
          const periodic = ops.some((op) => op.sweep && op.ref.key === ref.key);
          if (!periodic && this.isQuiet(ref, tx.now)) {
            quiet.add(ref.key);
            continue;
          }
          this.sweeps++;
          const sweeping = this.sweepQueue(tx, ref, periodic);
          tx.send();
          await sweeping;
        }
        tx.hold();
        // Posts, plain claims and submissions of one queue run together, where the first of them stood.
        const groups = new Map<string, Op[]>();
        for (const op of ops) {
          const key = groupOf(op);
          if (key === null) continue;
          const list = groups.get(key);
          if (list) list.push(op);
          else groups.set(key, [op]);
        }
        // The groups' first statements go out one behind the other without waiting for answers
        // (each group's code sends its statement before its first await, so they reach the
        // database in this order), and each group's answer is handled as it comes, in the same
        // order. A group after submissions to its queue waits for them where they may make items
        // claimable again or purge them (flushed before its statement): claims after an error
        // handed in, and any group when something in the queue may be due (rules.due, applied to
        // a row a submission locks, can re-queue or purge it). A call of its own waits for
        // everything before it.
        let inFlight: Array<Promise<void>> = [];
        /** Queues with submissions sent and not yet answered, and whether one of them can re-queue its item. */
        const submitting = new Map<string, boolean>();
        const settle = async (): Promise<void> => {
          tx.send();
          const settled = await Promise.allSettled(inFlight);
          inFlight = [];
          submitting.clear();
          for (const s of settled) if (s.status === 'rejected') throw s.reason;
        };
        for (const op of ops) {
          const key = groupOf(op);
          if (key === null) {
            await settle();
            results.set(op, await op.run!(tx));
            continue;
          }
          const group = groups.get(key);
          if (!group) continue;
          groups.delete(key);
          // A group that first writes what the transaction staged (claims after an error re-queued
          // an item of their queue, posts after a purge freed an idempotency key) waits for the
          // statements already sent: their answers are read against what is staged, and the
          // write takes it (rows read before it would then look unchanged).
          const writesFirst = op.posts ? tx.purges(op.ref.key) : op.claim ? tx.requeued(op.ref.key) : false;
          const requeuing = submitting.get(op.ref.key);
          const afterSubmissions = requeuing !== undefined && (!quiet.has(op.ref.key) || (op.claim !== undefined && requeuing));
          if (afterSubmissions || (writesFirst && inFlight.length > 0)) {
            await settle();
            tx.hold();
          }
          let running: Promise<void>;
          tx.groups++;
          if (op.posts) {
            running = this.insertPosts(tx, op.ref, group.flatMap((g) => g.posts!)).then((outcomes) => {
              let at = 0;
              for (const g of group) {
                results.set(g, outcomes.slice(at, at + g.posts!.length));
                at += g.posts!.length;
              }
            });
          } else if (op.claim) {
            running = this.claimPlain(tx, op.ref, group.map((g) => g.claim!)).then((claimed) => group.forEach((g, i) => results.set(g, claimed[i])));
          } else {
            running = this.submitMany(tx, op.ref, group.map((g) => g.submit!)).then((answers) => group.forEach((g, i) => results.set(g, answers[i])));
            submitting.set(op.ref.key, group.some((g) => g.submit!.requeues === true));
          }
          // Awaited by settle(); a failure meanwhile is not an unhandled rejection.
          running.catch(() => undefined);
          inFlight.push(running);
        }
        // Every statement sent is answered before the last ones (or a ROLLBACK) go out.
        await settle();
        // The last writes and the COMMIT go out together. A write that fails (a guard included,
        // see migration 6) aborts the transaction, and the COMMIT behind it then rolls it back.
        tx.hold();
        const finishing = this.finish(tx);
        const archiving = tx.payloads.size > 0 ? writePayloads(tx, [...tx.payloads.values()], tx.now) : undefined;
        committing = client.query('COMMIT');
        tx.send();
        for (const p of [finishing, archiving, committing]) p?.catch(() => undefined);
        await begun;
        await finishing;
        await archiving;
        const commit = await committing;
        if (commit.command !== 'COMMIT') throw new Error(`the transaction ended with ${commit.command}, not COMMIT`);
        watched.stop();
        this.live.delete(tx);
        client.release();
      } catch (err) {
        tx.send();
        this.live.delete(tx);
        // Whatever was sent behind the failed statement is answered (with errors) before the ROLLBACK.
        await Promise.allSettled([begun, committing]);
        const kind = watched.broken ? 'connection' : failureKind(err);
        let rolledBack = true;
        if (kind !== 'connection') {
          // Under the watch still: a ROLLBACK into a silent network is cut too.
          rolledBack = await client.query('ROLLBACK').then(
            () => true,
            () => false,
          );
        }
        // Never after the release: the connection may by then serve another transaction.
        watched.stop();
        // A connection that failed, or whose ROLLBACK did, is not handed out again.
        client.release(watched.broken ?? (kind === 'connection' || !rolledBack ? (err as Error) : undefined));
        if (kind === 'retry' && attempt < MAX_RETRIES) continue;
        if (kind === 'statement' && ops.length > 1) {
          // One call's statement was refused: the others run again, each in its own transaction.
          await Promise.all(ops.map((op) => this.runFold([op])));
          return;
        }
        return this.refuse(ops, err);
      }
      this.committed(tx, performance.now() - started);
      for (const op of ops) op.resolve(results.get(op));
      return;
    }
  }

  private refuse(ops: Op[], err: unknown): void {
    const cause = err instanceof Error ? err : new Error(String(err));
    this.transactions.failed(() => `a transaction on PostgreSQL failed (${cause.message}): its ${ops.length} call(s) were refused with 503; nothing of them was committed`);
    const refusal = new StoreUnavailable(cause);
    for (const op of ops) op.reject(refusal);
  }

  /**
   * The transaction's staged writes, the task events of its changes and its net change of the
   * counts, in one statement before its COMMIT (one round trip: on a busy node, round trips to the
   * database cost more than the statements' work).
   */
  private async finish(tx: Tx): Promise<void> {
    const { updates, deletes } = tx.takeWrites();
    const ts: number[] = [];
    const hosts: string[] = [];
    const names: string[] = [];
    const ids: string[] = [];
    const kinds: string[] = [];
    const attempts: number[] = [];
    const statuses: string[] = [];
    const workers: Array<string | null> = [];
    for (const c of tx.changes) {
      for (const e of c.events) {
        ts.push(tx.now);
        hosts.push(c.ref.host);
        names.push(c.ref.name);
        ids.push(c.record.id);
        kinds.push(e.event);
        attempts.push(e.attempts ?? c.record.attempts);
        statuses.push(e.status ?? c.record.status);
        workers.push(e.worker ?? null);
      }
    }
    const countQueues: string[] = [];
    const countStatuses: string[] = [];
    const countDeltas: number[] = [];
    for (const [slot, n] of tx.deltas) {
      if (n === 0) continue;
      const nl = slot.indexOf('\n');
      countQueues.push(slot.slice(0, nl));
      countStatuses.push(slot.slice(nl + 1));
      countDeltas.push(n);
    }
    if (updates.length === 0 && deletes.length === 0 && ts.length === 0 && countDeltas.length === 0) return;
    const res = await tx.query<{ updated: number; deleted: number }>(
      named('svcq_finish', `WITH ${WRITE_ITEMS}, events AS (
         INSERT INTO svcq_events (ts, host, queue, id, event, attempts, status, worker)
         SELECT * FROM unnest($18::bigint[], $19::text[], $20::text[], $21::text[], $22::text[], $23::integer[], $24::text[], $25::text[])
       ), counted AS (
         -- The net change of the counts goes with the changes (decisions §5.1).
         INSERT INTO svcq_count_deltas (queue, status, delta) SELECT * FROM unnest($26::text[], $27::text[], $28::integer[])
       ), done AS (
         SELECT (SELECT count(*) FROM upd)::integer AS updated, (SELECT count(*) FROM del)::integer AS deleted
       )
       -- A guard that failed aborts the transaction here: the COMMIT sent behind this statement then rolls it back.
       SELECT updated, deleted,
              CASE WHEN updated = cardinality($2::text[]) AND deleted = cardinality($16::text[]) THEN 0
                   ELSE svcq_stale_write((cardinality($2::text[]) + cardinality($16::text[]) - updated - deleted) || ' item(s)') END AS stale
         FROM done`, 'generic'),
      [...writeParams(updates, deletes), ts, hosts, names, ids, kinds, attempts, statuses, workers, countQueues, countStatuses, countDeltas],
    );
    checkWritten(res.rows[0]!, updates, deletes);
  }

  /** After a COMMIT: the long polls, the observer, and the queues now known to be registered. */
  private committed(tx: Tx, ms: number): void {
    this.transactions.succeeded();
    for (const key of tx.registered) this.known.add(key);
    for (const [key, quiet] of tx.quiet) this.quietUntil.set(key, quiet);
    for (const key of tx.resumed) this.options.notifier?.notify(claimTopic(key));
    if (tx.changes.length === 0) return;
    for (const c of tx.changes) {
      if (c.purged) continue;
      const at = rules.nextDeadline(c.record, c.ref.config);
      if (at === null) continue;
      this.endQuietBy(c.ref.key, at);
      if (this.wakesOn()) this.wakeFor(c.ref.key, at);
    }
    if (tx.changes.some((c) => c.events.length > 0)) this.outbox.soon();
    const notifier = this.options.notifier;
    const kinds = new Map<string, TaskEventKind[]>();
    for (const c of tx.changes) {
      if (notifier) {
        if (c.purged || isTerminal(c.record.status)) notifier.notify(itemTopic(c.ref.key, c.record.id));
        else if (c.record.status === 'pending' && c.record.availableAt === 0) notifier.notify(claimTopic(c.ref.key));
      }
      if (c.events.length > 0) {
        let list = kinds.get(c.ref.key);
        if (!list) kinds.set(c.ref.key, (list = []));
        for (const e of c.events) list.push(e.event);
      }
    }
    const observer = this.options.observer;
    if (observer) {
      observer.committed(ms / 1000, tx.changes.length);
      for (const [key, list] of kinds) observer.events(key, list);
    }
  }

  /**
   * Folds up to `batches` × 10,000 rows of svcq_count_deltas into svcq_counts, each batch its own
   * statement (one short transaction); resolves with how many rows went. Safe on every node at
   * once: a delta row is locked (SKIP LOCKED) and deleted by one of them only, and the counts rows
   * are updated in (queue, status) order, so two compactions never deadlock.
   */
  async compactCounts(batches = 10): Promise<number> {
    let total = 0;
    for (let b = 0; b < batches; b++) {
      const res = await this.read<{ moved: number }>(
        named(
          'svcq_compact_counts',
          `WITH moved AS (
             DELETE FROM svcq_count_deltas WHERE ctid = ANY (ARRAY(SELECT ctid FROM svcq_count_deltas LIMIT ${COMPACT_BATCH} FOR UPDATE SKIP LOCKED))
             RETURNING queue, status, delta
           ), folded AS (
             INSERT INTO svcq_counts (queue, status, n)
             SELECT queue, status, sum(delta) FROM moved GROUP BY 1, 2 ORDER BY 1, 2
             ON CONFLICT (queue, status) DO UPDATE SET n = svcq_counts.n + EXCLUDED.n
           )
           SELECT count(*)::integer AS moved FROM moved`,
        ),
      );
      const moved = res.rows[0]?.moved ?? 0;
      total += moved;
      if (moved < COMPACT_BATCH || this.state !== 'open') break;
    }
    return total;
  }

  /** Whether deadlines get a sweep as they fall: only where the periodic sweep runs too. */
  private wakesOn(): boolean {
    return this.sweepEvery > 0 && this.options.configFor !== undefined && this.state === 'open';
  }

  /**
   * Sweeps the queue when `at` comes (a deadline of one of its items falls then), if that is
   * within two sweep intervals; a deadline already past (its row was held by another transaction)
   * is looked at again 100 ms later.
   */
  private wakeFor(key: string, at: number): void {
    if (!this.wakesOn()) return;
    const now = this.now();
    if (at > now + 2 * this.sweepEvery) return;
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
    this.wakeTimer = setTimeout(() => this.wake(), Math.max(0, slot - this.now()));
    this.wakeTimer.unref();
  }

  /** Sweeps the queues whose deadlines have come, then waits for the next. */
  private wake(): void {
    this.wakeTimer = undefined;
    this.wakeTimerAt = Infinity;
    const configFor = this.options.configFor;
    if (this.state !== 'open' || !configFor) return;
    const now = this.now();
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
      this.submitOp({ ref: refOf(key, config), run: async () => null, sweep: true }).catch(() => undefined);
    }
  }

  /** Every known queue swept once (the item counts compacted first); a sweep still under way is not doubled. */
  private sweepAll(): void {
    if (this.sweeping || this.state !== 'open' || !this.options.configFor) return;
    this.sweeping = true;
    this.sweepNow()
      .catch((err: Error) => this.warn(`the deadline sweep failed (it runs again in a moment): ${err.message}`))
      .finally(() => {
        this.sweeping = false;
      });
  }

  /**
   * The periodic sweep's work, run now: folds the count deltas, then applies what is due at the
   * store's time in every queue that ever held an item and that `configFor` knows. A queue in its
   * quiet window for two more sweep intervals is passed over (nothing in it can fall due before
   * then, see {@link findQuiet}; a sweep near the window's end sets the wake-up for the deadline
   * that ends it), but swept at least every {@link QUIET_PASSES} sweeps all the same: idle queues
   * cost the database next to nothing. Resolves once done (a test on a fake clock calls it where
   * time would have moved the sweep).
   */
  async sweepNow(): Promise<void> {
    const configFor = this.options.configFor;
    if (this.state !== 'open' || !configFor) return;
    await this.compactCounts().catch((err: Error) => this.warn(`compacting the item counts failed (it runs again in a moment): ${err.message}`));
    const res = await this.read<{ key: string }>('SELECT key FROM svcq_queues');
    const sweeps: Array<Promise<unknown>> = [];
    const horizon = this.now() + 2 * this.sweepEvery;
    for (const { key } of res.rows) {
      const config = configFor(key);
      if (!config || this.state !== 'open') continue;
      const ref = refOf(key, config);
      const passes = this.quietPasses.get(key) ?? 0;
      if (passes < QUIET_PASSES && this.isQuiet(ref, horizon)) {
        this.quietPasses.set(key, passes + 1);
        continue;
      }
      this.quietPasses.delete(key);
      // Nothing to run but the sweep that precedes every transaction's calls.
      sweeps.push(this.submitOp({ ref, run: async () => null, sweep: true }));
    }
    await Promise.all(sweeps);
  }

  /** Queue sweeps run so far (each a statement or two on the database): what deadlines and idle queues cost. */
  get queueSweeps(): number {
    return this.sweeps;
  }

  /** 16 lowercase hex characters, random (decisions §3.5); a collision in the queue is caught by the primary key. */
  private newId(): string {
    if (this.idsAt + 8 > this.ids.length) {
      this.ids = randomBytes(4096);
      this.idsAt = 0;
    }
    const id = this.ids.toString('hex', this.idsAt, this.idsAt + 8);
    this.idsAt += 8;
    return id;
  }
}

/** Whether an item claimable from `a` is claimable before one claimable from `b` (0: at once). */
function sooner(a: number, b: number): boolean {
  return b !== 0 && (a === 0 || a < b);
}

/** A queue's reference from its key ('<host>/<name>') and its current rules. */
function refOf(key: string, config: QueueConfig): QueueRef {
  const slash = key.indexOf('/');
  return { key, host: key.slice(0, slash), name: key.slice(slash + 1), config };
}

/** What decides when an item's deadlines fall: a quiet window holds only under the rules it was found for. */
function rulesKey(c: QueueConfig): string {
  return `${c.leaseMs} ${c.retryDelayMs} ${c.timeoutMs} ${c.retainFrom} ${c.retainMs}`;
}

/** The calls an op runs together with in one statement: posts, plain claims, submissions of one queue; null for the others. */
function groupOf(op: Op): string | null {
  if (op.posts) return `post ${op.ref.key}`;
  if (op.claim) return `claim ${op.ref.key}`;
  if (op.submit) return `submit ${op.ref.key}`;
  return null;
}

/** decisions §3.3 by the engine's own `matches`; a body that is not a JSON object matches nothing. */
function passes(body: string, criteria: Record<string, unknown>): boolean {
  let item: unknown;
  try {
    item = JSON.parse(body);
  } catch {
    return false;
  }
  return item !== null && typeof item === 'object' && !Array.isArray(item) && matches(item as Record<string, unknown>, criteria);
}
