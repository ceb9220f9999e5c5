import { performance } from 'node:perf_hooks';
import { TurnSignal } from '../turn-signal.js';
import pg from 'pg';
import type { QueueConfig } from '../../engine/config.js';
import { isTerminal, type ItemStatus, type TaskEventKind } from '../../engine/item.js';
import * as rules from '../../engine/rules.js';
import type { ItemRecord, RetryWish, Submission } from '../../engine/rules.js';
import { claimTopic, itemTopic, type Notifier } from '../../waiting/notifier.js';
import { fullCounts, statusOf, StoreUnavailable, type Claimed, type ClaimInput, type EventOutbox, type OutboxEntry, type PayloadKind, type PostInput, type PostOutcome, type QueueOverview, type BulkAction, type BulkOutcome, type QueueRef, type StatusRecord, type Store, type StoreObserver, type SubmitOutcome, type OwedCallback, type TakenCallback, type CallbackAttempt, type CallbackSettlement } from '../store.js';
import { FailureStreak } from '../failure-streak.js';
import { claimMatching, claimPlain, type PlainClaim } from './pg-claims.js';
import { GroupsVacuum, type VacuumOptions } from './pg-vacuum.js';
import { claimLimited, claimsInOne, countedInOne, fairOnly, finishLimits, GROUPS_WAITING_SQL, grouped, limited, lockLimiters, wakesOnLeaseEnd, GroupRebuilds } from './pg-limits.js';
import { Deadlines, refOf } from './pg-deadlines.js';
import { failureKind, LockedLate } from './pg-errors.js';
import { ANSWER_TIMEOUT_MS, answered, keepConnectionErrors, watch } from './pg-guard.js';
import { PgEventOutbox } from './pg-event-outbox.js';
import { readPayload, writePayloads } from './pg-payloads.js';
import { insertPosts, ItemIds } from './pg-posts.js';
import { bulkBatch, copyDeadLetters } from './pg-dead-letters.js';
import { submitMany, type SubmissionCall } from './pg-submissions.js';
import { readSchedules, tickSchedules } from './pg-schedules.js';
import type { ScheduleView } from '../../engine/schedules.js';
import { applyDue, COLUMNS, finishCallbacks, finishTx, lock, named, recordOf, TYPES, Tx, type ItemRow } from './pg-tx.js';
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
  /** When this node vacuums the tables that queues by groups rewrite at every turn (pg-vacuum.ts). */
  groupsVacuum?: VacuumOptions;
}

/** decisions §5: the database keeps task events a week; each node's history keeps them as long as --history-days lets it. */
const EVENT_RETENTION_MS = 7 * 86_400_000;
/** Events deleted per statement by the purge. */
const PURGE_BATCH = 10_000;

/** Count deltas folded into svcq_counts per statement. */
const COMPACT_BATCH = 10_000;
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
  /** A claim on a queue with a limit or groups fairness (decisions §8.5): its limiter row is locked first. */
  limits?: boolean;
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
  /** Transactions under way, for the oldest one's time (see Deadlines' quiet windows). */
  private readonly live = new Set<Tx>();
  private sweeps = 0;
  private scheduled = false;
  /** When the last transaction started (performance.now()), and the timer that may start a second one. */
  private lastStarted = 0;
  private secondTimer: NodeJS.Timeout | undefined;
  private readonly idle: Array<() => void> = [];
  private sweepTimer: NodeJS.Timeout | undefined;
  private sweeping = false;
  /** The deadlines of the queues: their sweeps, quiet windows and wake-ups. */
  private readonly deadlines: Deadlines;
  /** Item ids, and the queues known to be registered. */
  private readonly itemIds = new ItemIds();
  /** Queues whose group heads this store rebuilt under the rules in force (pg-limits.ts). */
  private readonly groupRebuilds = new GroupRebuilds();
  /** Queues whose limiter rows a transaction of this store under way locks (or will), and how many such transactions (see takeOps). */
  private readonly rowsHeld = new Map<string, number>();
  /** Queues whose limiter rows this store has locked (they are never deleted): their lock need not be awaited alone (see runFold). */
  private readonly limiterRows = new Set<string>();
  private readonly transactions: FailureStreak;
  private readonly outbox: PgEventOutbox;
  private purgeTimer: NodeJS.Timeout | undefined;
  private purging = false;
  private readonly owedMade = new TurnSignal();
  /** VACUUM of the groups tables as queues by groups churn them (pg-vacuum.ts). */
  readonly groupsVacuum: GroupsVacuum;
  /** decisions §9.2: this node's callback delivery, when it takes the callbacks this node makes owed as they are born (see holdOwnCallbacks). */
  private ownCallbacks: { holdMs: number; wants: () => boolean; deliver: (born: TakenCallback[]) => void } | undefined;
  /** decisions §9.2: settles waiting to go together in one statement (see settleCallback). */
  private settles: Array<{ taken: OwedCallback; retryAt: number | null; outcome: CallbackSettlement; resolve: (s: CallbackSettlement) => void; reject: (err: Error) => void }> = [];

  constructor(private readonly options: PostgresStoreOptions) {
    this.now = options.now ?? Date.now;
    this.sweepEvery = options.sweepIntervalMs ?? 1000;
    this.warn = options.warn ?? (() => undefined);
    this.transactions = new FailureStreak(this.warn, 'transactions on PostgreSQL succeed again');
    this.deadlines = new Deadlines({
      now: this.now,
      sweepEvery: this.sweepEvery,
      configFor: options.configFor,
      live: this.live,
      isOpen: () => this.state === 'open',
      // A sweep that fails is warned of by the periodic sweep, which runs again in a moment.
      sweep: (ref) => void this.submitOp({ ref, run: async () => null, sweep: true }).catch(() => undefined),
    });
    this.groupsVacuum = new GroupsVacuum((sql) => (this.state === 'open' && this.pool ? answered(this.pool, this.answerTimeoutMs, sql) : undefined), this.warn, options.groupsVacuum);
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
    if (this.deadlines.wakesOn()) {
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
    this.deadlines.close();
    clearTimeout(this.purgeTimer);
    this.outbox.close();
    if (!wasOpen) return;
    while (this.running > 0 || this.queue.length > 0 || this.scheduled) await new Promise<void>((resolve) => this.idle.push(resolve));
    await this.groupsVacuum.settled();
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
    const got = await this.claimOp(ref, input, 1);
    return got[0] ?? null;
  }

  async claimMany(ref: QueueRef, input: ClaimInput, max: number): Promise<Claimed[]> {
    if (input.signal?.aborted || max <= 0) return [];
    return this.claimOp(ref, input, max);
  }

  /**
   * A claim as a call: plain claims of one queue are folded into one statement; a queue with a
   * limit or groups fairness claims under its limiter row (pg-limits.ts), each claim with criteria
   * on its own.
   */
  private claimOp(ref: QueueRef, input: ClaimInput, max: number): Promise<Claimed[]> {
    if (limited(ref.config)) {
      if (input.criteria === undefined) return this.submitOp<Claimed[]>({ ref, claim: { input, max }, limits: true });
      const criteria = input.criteria;
      return this.submitOp<Claimed[][]>({ ref, limits: true, run: (tx) => claimLimited(tx, ref, [{ input, max, criteria }], this.now, this.groupRebuilds) }).then((out) => out[0]!);
    }
    const claimed = this.submitOp<Claimed[]>(input.criteria === undefined ? { ref, claim: { input, max } } : { ref, run: (tx) => claimMatching(tx, ref, input, input.criteria!, max) });
    if (!input.held) return claimed;
    // decisions §8.5: a claim that came up short and asked why says `paused` when its queue is
    // paused: one read, after the claim's transaction and outside it (in it, the probe put one
    // more statement between the fold's claims and what was folded after them, and a claim held
    // with wait then missed the resume it waited for).
    return claimed.then(async (out) => {
      if (out.length >= max || input.signal?.aborted) return out;
      const res = await this.read<{ paused: boolean }>('SELECT paused FROM svcq_queues WHERE key = $1', [ref.key]);
      if (res.rows[0]?.paused === true) {
        input.held!.reason = 'paused';
        delete input.held!.retryAt;
      }
      return out;
    });
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
    const read = recordOf(row);
    const seen = read.record;
    const now = this.now();
    if (!rules.due(seen, ref.config, now, { owed: read.owed > 0, own: read.callback }) && !rules.fetched(seen, now)) return statusOf(seen, read.links);
    return this.submitOp<StatusRecord | null>({
      ref,
      run: async (tx) => {
        const loaded = await lock(tx, ref, id);
        if (!loaded) return null;
        const r = applyDue(tx, ref, loaded);
        if (!r) return null;
        const stamp = rules.fetched(r, tx.now);
        if (stamp) {
          tx.stage(ref, loaded, stamp);
          // An item kept no time after its fetch (retainFrom "fetched", retainSeconds 0) is purged
          // by this same transaction, as every other store purges it by the fetch's own step.
          const gone = rules.due(stamp.record, ref.config, tx.now, tx.callbackState(ref, loaded));
          if (gone?.purged) tx.stage(ref, loaded, gone);
        }
        const status = statusOf(r, loaded.links);
        // A failure this fetch applied is copied before the COMMIT: the record then names the copy.
        tx.shown.set(`${ref.key}\n${id}`, status);
        return status;
      },
    });
  }

  progress(ref: QueueRef, id: string, body: string): Promise<SubmitOutcome | null> {
    return this.submission(ref, id, (r, now) => rules.progress(r, ref.config, body, now), { kind: 'progress', body });
  }

  result(ref: QueueRef, id: string, body: string, delivery?: rules.Delivery): Promise<SubmitOutcome | null> {
    return this.submission(ref, id, (r, now) => rules.result(r, body, now, delivery), { kind: 'result', body });
  }

  error(ref: QueueRef, id: string, body: string, wish?: RetryWish, delivery?: rules.Delivery): Promise<SubmitOutcome | null> {
    return this.submission(ref, id, (r, now) => rules.error(r, ref.config, body, now, wish, delivery), { kind: 'error', body }, true);
  }

  release(ref: QueueRef, id: string, delaySeconds: number): Promise<SubmitOutcome | null> {
    // It can make its item claimable at once, as an error handed in can.
    return this.submission(ref, id, (r, now) => rules.release(r, delaySeconds, now), undefined, true);
  }

  cancel(ref: QueueRef, id: string): Promise<SubmitOutcome | null> {
    return this.submission(ref, id, (r, now) => rules.cancel(r, now));
  }

  /** See {@link Store.tickSchedules}: one call in the store's transactions (calls made together share one). */
  tickSchedules(ref: QueueRef): Promise<number> {
    return this.submitOp<number>({ ref, run: (tx) => tickSchedules(tx, ref, this.itemIds) });
  }

  async schedules(ref: QueueRef): Promise<ScheduleView[]> {
    try {
      return await readSchedules((text, values) => this.read(text, values), ref, this.now());
    } catch (err) {
      throw err instanceof StoreUnavailable ? err : new StoreUnavailable(err as Error, true);
    }
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
  bulk(ref: QueueRef, action: BulkAction, max: number): Promise<BulkOutcome> {
    return this.submitOp<BulkOutcome>({ ref, run: (tx) => bulkBatch(tx, ref, action, max, this.itemIds) });
  }

  async overview(ref: QueueRef, limits: { oldest: number; leases: number }): Promise<QueueOverview> {
    try {
      const [paused, counts, oldestAt, oldest, leases, groups, callbacks] = await Promise.all([
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
        grouped(ref.config) ? this.read<{ n: number }>(named('svcq_groups_waiting', GROUPS_WAITING_SQL), [ref.key]) : null,
        this.read<{ owed: number; failing: number }>(
          named('svcq_callbacks_owed', 'SELECT count(*)::integer AS owed, (count(*) FILTER (WHERE tries > 0))::integer AS failing FROM svcq_callbacks WHERE queue = $1'),
          [ref.key],
        ),
      ]);
      const partial: Partial<Record<ItemStatus, number>> = {};
      for (const row of counts.rows) partial[row.status] = row.n;
      return {
        paused: paused.rows[0]?.paused === true,
        counts: fullCounts(partial),
        oldestPendingAt: oldestAt.rows[0]?.at ?? null,
        oldest: (oldest?.rows ?? []).map((r) => ({ id: r.id, postedAt: r.posted_at, attempts: r.attempts })),
        leases: (leases?.rows ?? []).map((r) => ({ id: r.id, worker: r.lease_worker ?? '', until: r.lease_until ?? 0, attempts: r.attempts })),
        groupsWaiting: groups ? (groups.rows[0]?.n ?? 0) : null,
        callbacks: { owed: callbacks.rows[0]?.owed ?? 0, failing: callbacks.rows[0]?.failing ?? 0 },
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

  /**
   * See {@link Store.takeCallbacks}: one statement, so atomic on its own: the soonest due rows,
   * those other nodes hold skipped, get their hold; then the items' records are read as they stand.
   */
  async takeCallbacks(max: number, holdMs: number): Promise<TakenCallback[]> {
    const now = this.now();
    try {
      // The items' rows are read in the same statement, as they stand (an item is never purged while its callback is owed).
      const taken = await this.read<CallbackRow & { item: ItemRow | null }>(
        named(
          'svcq_take_callbacks',
          `WITH due AS (SELECT id FROM svcq_callbacks WHERE due_at <= $1 ORDER BY due_at LIMIT $2 FOR UPDATE SKIP LOCKED),
           taken AS (
             UPDATE svcq_callbacks AS c SET due_at = $3 FROM due WHERE c.id = due.id
             RETURNING c.id, c.queue, c.item_id, c.event, c.url, c.owed_since, c.due_at, c.tries
           )
           SELECT taken.*, (SELECT row_to_json(i) FROM (SELECT ${COLUMNS} FROM svcq_items WHERE queue = taken.queue AND id = taken.item_id) AS i) AS item
             FROM taken ORDER BY taken.due_at`,
        ),
        [now, max, now + holdMs],
      );
      return taken.rows.map((r) => {
        const loaded = r.item && recordOf(r.item);
        return { ...callbackOf(r), record: loaded ? statusOf(loaded.record, loaded.links) : null };
      });
    } catch (err) {
      throw err instanceof StoreUnavailable ? err : new StoreUnavailable(err as Error);
    }
  }

  /**
   * See {@link Store.settleCallback}. The settles made together (in one turn of the event loop)
   * are one statement, each guarded on the `due_at` and `tries` taken. A callback delivered or
   * dropped no longer holds its item's retention (the count on the item goes down with it, and
   * the queue is swept soon); a drop writes its task event in the same statement.
   */
  settleCallback(taken: OwedCallback, attempt: CallbackAttempt): Promise<CallbackSettlement> {
    const retryAt = attempt.delivered ? null : rules.callbackRetryAt(taken.owedSince, taken.tries + 1, this.now());
    const outcome: CallbackSettlement = attempt.delivered ? 'delivered' : retryAt === null ? 'dropped' : 'retrying';
    return new Promise((resolve, reject) => {
      this.settles.push({ taken, retryAt, outcome, resolve, reject });
      if (this.settles.length > 1) return;
      setImmediate(() => void this.flushSettles());
    });
  }

  private async flushSettles(): Promise<void> {
    const batch = this.settles.splice(0);
    const now = this.now();
    try {
      const res = await this.read<{ id: string; finished_at: number | null; fetched_at: number | null }>(
        named(
          'svcq_settle_callbacks',
          `WITH s AS (
             SELECT * FROM unnest($1::text[], $2::bigint[], $3::integer[], $4::bigint[], $5::boolean[]) AS s(id, due_at, tries, retry_at, dropped)
           ), retried AS (
             UPDATE svcq_callbacks AS c SET tries = c.tries + 1, due_at = s.retry_at FROM s
              WHERE s.retry_at IS NOT NULL AND c.id = s.id AND c.due_at = s.due_at AND c.tries = s.tries RETURNING c.id
           ), gone AS (
             DELETE FROM svcq_callbacks AS c USING s
              WHERE s.retry_at IS NULL AND c.id = s.id AND c.due_at = s.due_at AND c.tries = s.tries RETURNING c.id, c.queue, c.item_id, s.dropped
           ), n AS (
             SELECT queue, item_id, count(*)::integer AS n FROM gone GROUP BY queue, item_id
           ), item AS (
             UPDATE svcq_items AS i SET callbacks_owed = i.callbacks_owed - n.n FROM n
              WHERE i.queue = n.queue AND i.id = n.item_id RETURNING i.queue, i.id, i.attempts, i.status, i.finished_at, i.fetched_at
           ), dropped AS (
             INSERT INTO svcq_events (ts, host, queue, id, event, attempts, status)
             SELECT $6, split_part(gone.queue, '/', 1), substr(gone.queue, strpos(gone.queue, '/') + 1), gone.item_id, 'callback-dropped', item.attempts, item.status
               FROM gone JOIN item ON item.queue = gone.queue AND item.id = gone.item_id WHERE gone.dropped
           )
           SELECT id, NULL::bigint AS finished_at, NULL::bigint AS fetched_at FROM retried
           UNION ALL
           SELECT gone.id, item.finished_at, item.fetched_at FROM gone LEFT JOIN item ON item.queue = gone.queue AND item.id = gone.item_id`,
        ),
        [batch.map((b) => b.taken.id), batch.map((b) => b.taken.dueAt), batch.map((b) => b.taken.tries), batch.map((b) => b.retryAt), batch.map((b) => b.outcome === 'dropped'), now],
      );
      const settled = new Map(res.rows.map((r) => [r.id, r]));
      let dropped = false;
      for (const b of batch) {
        const row = settled.get(b.taken.id);
        if (!row) {
          b.resolve('stale');
          continue;
        }
        const config = b.outcome === 'retrying' ? undefined : this.options.configFor?.(b.taken.queue);
        if (config) {
          // Retention applies to the item again: the queue's quiet window (found without it) ends by
          // its retention deadline, and a sweep comes then; only the items whose deadline is past
          // cost a sweep now.
          const from = config.retainFrom === 'fetched' ? row.fetched_at : row.finished_at;
          if (from !== null) {
            const at = Math.max(now, from + config.retainMs);
            this.deadlines.endQuietBy(b.taken.queue, at);
            this.deadlines.wakeFor(b.taken.queue, at);
          }
        }
        if (b.outcome === 'dropped') dropped = true;
        b.resolve(b.outcome);
      }
      if (dropped) this.outbox.soon();
    } catch (err) {
      const refusal = err instanceof StoreUnavailable ? err : new StoreUnavailable(err as Error);
      for (const b of batch) b.reject(refusal);
    }
  }

  onCallbacksOwed(listener: () => void): void {
    this.owedMade.listen(listener);
  }

  /** See {@link Store.holdOwnCallbacks}: a take statement less for every batch of callbacks this node makes owed. */
  holdOwnCallbacks(options: { holdMs: number; wants: () => boolean; deliver: (born: TakenCallback[]) => void }): void {
    this.ownCallbacks = options;
  }

  /** How long the callbacks a transaction makes owed are born held by this node: 0 (due at once) unless a delivery here wants them. */
  private holdFor(tx: Tx): number {
    const own = this.ownCallbacks;
    return tx.callbacks.length > 0 && own !== undefined && own.wants() ? own.holdMs : 0;
  }

  /** A transaction that made callbacks owed committed: those born held go to this node's delivery, the others are due for any taker. */
  private owedCommitted(tx: Tx): void {
    const own = this.ownCallbacks;
    if (own === undefined || tx.callbacks[0]!.dueAt === tx.now) {
      this.callbacksOwed();
      return;
    }
    own.deliver(
      tx.callbacks.map((c) => ({
        id: c.id!,
        queue: c.ref.key,
        itemId: c.itemId,
        event: c.event,
        url: c.url,
        owedSince: tx.now,
        dueAt: c.dueAt!,
        tries: 0,
        record: statusOf(c.record, c.links),
      })),
    );
  }

  /** See {@link Store.releaseCallbacks}: one statement, each release guarded on the `due_at` and `tries` taken. */
  async releaseCallbacks(taken: OwedCallback[]): Promise<void> {
    if (taken.length === 0) return;
    try {
      await this.read(
        named(
          'svcq_release_callbacks',
          `UPDATE svcq_callbacks AS c SET due_at = $4 FROM unnest($1::text[], $2::bigint[], $3::integer[]) AS s(id, due_at, tries)
            WHERE c.id = s.id AND c.due_at = s.due_at AND c.tries = s.tries`,
        ),
        [taken.map((c) => c.id), taken.map((c) => c.dueAt), taken.map((c) => c.tries), this.now()],
      );
    } catch (err) {
      throw err instanceof StoreUnavailable ? err : new StoreUnavailable(err as Error);
    }
  }

  /** Tells the listeners, once per turn of the event loop, that this node made callbacks owed. */
  private callbacksOwed(): void {
    this.owedMade.raise();
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
      const ops = this.takeOps();
      if (ops.length === 0) return;
      const held = [...new Set(ops.filter((op) => op.limits).map((op) => op.ref.key))];
      for (const key of held) this.rowsHeld.set(key, (this.rowsHeld.get(key) ?? 0) + 1);
      this.running++;
      this.lastStarted = performance.now();
      void this.runFold(ops).finally(() => {
        for (const key of held) {
          const n = this.rowsHeld.get(key)! - 1;
          if (n === 0) this.rowsHeld.delete(key);
          else this.rowsHeld.set(key, n);
        }
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
   * The calls of the next transaction, in the order made: at most {@link MAX_FOLD}, leaving out
   * those that would lock a limiter row that a transaction of this store under way holds (claims
   * by groups, under a limit, or with criteria on such a queue). Those would wait for its COMMIT
   * at their transaction's start, holding every call folded beside them; they wait in the queue
   * instead, and go together in the transaction after it, the row's next holder: more claims per
   * turn on the row. (Three nodes, 192 connections claiming one item each under a `rateLimit` of
   * 1,000 a second: 29,395–29,553 leased in 30 s, 28,155 without; docs/postgresql-flow.md.)
   */
  private takeOps(): Op[] {
    const held = (op: Op): boolean => op.limits === true && this.rowsHeld.has(op.ref.key);
    if (this.rowsHeld.size === 0 || !this.queue.some(held)) return this.queue.splice(0, MAX_FOLD);
    const ops: Op[] = [];
    const left: Op[] = [];
    for (const op of this.queue) {
      if (ops.length < MAX_FOLD && !held(op)) ops.push(op);
      else left.push(op);
    }
    this.queue = left;
    return ops;
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
        for (const op of ops) {
          if (!queues.has(op.ref.key)) queues.set(op.ref.key, op.ref);
          this.groupRebuilds.saw(op.ref);
        }
        // Limiter rows before anything else (see lockLimiters). Where no queue of the transaction
        // needs a sweep and the rows are known, the lock goes out with the first statements, whose
        // answers wait for it anyway; if its answer moves the transaction's time past a queue's
        // quiet window, the transaction runs again, awaiting the lock first.
        const limitedRefs = ops.filter((op) => op.limits).map((op) => op.ref);
        let lockedEarly: Promise<void> | undefined;
        if (limitedRefs.length > 0) {
          const known = this.limiterRows;
          const early = attempt === 0 && limitedRefs.every((r) => known.has(r.key)) && [...queues.values()].every((ref) => !ops.some((op) => op.sweep && op.ref.key === ref.key) && this.deadlines.isQuiet(ref, tx.now));
          const locking = lockLimiters(tx, limitedRefs, early).then(() => {
            for (const r of limitedRefs) known.add(r.key);
          });
          if (early) {
            lockedEarly = locking.then(() => {
              for (const ref of queues.values()) if (!this.deadlines.isQuiet(ref, tx.now)) throw new LockedLate(`its time moved past the quiet window of ${ref.key}`);
            });
            lockedEarly.catch(() => undefined);
          } else {
            tx.send();
            await locking;
          }
        }
        // Queues in which nothing can be due now: a row read there is never changed by rules.due.
        const quiet = new Set<string>();
        for (const ref of queues.values()) {
          const periodic = ops.some((op) => op.sweep && op.ref.key === ref.key);
          if (!periodic && this.deadlines.isQuiet(ref, tx.now)) {
            quiet.add(ref.key);
            continue;
          }
          this.sweeps++;
          const sweeping = this.deadlines.sweepQueue(tx, ref, periodic);
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
        // The limiter rows' lock, sent with the first statements, is answered before them.
        let inFlight: Array<Promise<void>> = lockedEarly ? [lockedEarly] : [];
        /** Queues with submissions sent and not yet answered, and whether one of them can re-queue its item. */
        const submitting = new Map<string, boolean>();
        /** Queues with posts sent and not yet answered. */
        const posting = new Set<string>();
        /** Queues with limited claims sent and not yet answered. */
        const limitedClaims = new Set<string>();
        /** The answers of the groups sent so far, applied (see AppliedInOrder below). */
        let previous: Promise<unknown> | undefined;
        const settle = async (): Promise<void> => {
          tx.send();
          const settled = await Promise.allSettled(inFlight);
          inFlight = [];
          previous = undefined;
          submitting.clear();
          posting.clear();
          limitedClaims.clear();
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
          // Limited claims write everything staged before they count (pg-limits.ts): always first.
          const writesFirst = op.posts ? tx.purges(op.ref.key) : op.claim ? op.limits === true || tx.requeued(op.ref.key) : false;
          // Limited claims taking one statement (claimsInOne) need no answer before theirs but the
          // lock of the limiter rows, which they wait for after sending, and (under maxActive or a
          // rateLimit) those of their queue's submissions, since what they end is counted: they go
          // at once unless those are in flight, or the writes of what is staged, sent ahead of
          // them, must wait for the answers in flight.
          const inOne = op.claim !== undefined && op.limits === true && claimsInOne(op.ref.config);
          // Claims by groups fairness also wait for the posts of their queue sent before them:
          // their items are seen through the wakes they leave, written from the posts' answers.
          const waits = inOne
            ? (countedInOne(op.ref.config) && submitting.has(op.ref.key)) || (fairOnly(op.ref.config) && posting.has(op.ref.key)) || (tx.hasStaged() && inFlight.some((p) => p !== lockedEarly))
            : writesFirst && inFlight.length > 0;
          const requeuing = submitting.get(op.ref.key);
          const afterSubmissions = requeuing !== undefined && (!quiet.has(op.ref.key) || (op.claim !== undefined && requeuing));
          // Limited claims take several statements, each sent once the one before it is answered:
          // a group of their queue after them waits for them, or its statement would run (and its
          // answer be applied) between theirs, as if it came first. Those that take one statement
          // (claimsInOne) do not hold the groups after them back.
          if (afterSubmissions || limitedClaims.has(op.ref.key) || waits) {
            await settle();
            tx.hold();
          }
          let running: Promise<void>;
          tx.groups++;
          // AppliedInOrder: each group sends its statement at once, in its place, and applies its
          // answer only after the groups sent before it have applied theirs. Answers come back in
          // the order sent, but a group's code may await more than its own statement first (a
          // post's registration of a new queue, a limited claim's lock and writes): without this,
          // a claim could apply its answer (and put its task event) before the post of the same
          // item folded ahead of it, and the history showed "claimed" before "posted".
          const before = previous;
          if (op.posts) {
            posting.add(op.ref.key);
            running = insertPosts(tx, op.ref, group.flatMap((g) => g.posts!), this.itemIds, undefined, before).then((outcomes) => {
              let at = 0;
              for (const g of group) {
                results.set(g, outcomes.slice(at, at + g.posts!.length));
                at += g.posts!.length;
              }
            });
          } else if (op.claim) {
            if (op.limits && !claimsInOne(op.ref.config)) limitedClaims.add(op.ref.key);
            running = (op.limits ? claimLimited(tx, op.ref, group.map((g) => g.claim!), this.now, this.groupRebuilds, before) : claimPlain(tx, op.ref, group.map((g) => g.claim!), tx.groups, before)).then((claimed) => group.forEach((g, i) => results.set(g, claimed[i])));
          } else {
            running = submitMany(tx, op.ref, group.map((g) => g.submit!), before).then((answers) => group.forEach((g, i) => results.set(g, answers[i])));
            submitting.set(op.ref.key, group.some((g) => g.submit!.requeues === true));
          }
          // Awaited by settle(); a failure meanwhile is not an unhandled rejection.
          running.catch(() => undefined);
          inFlight.push(running);
          previous = running.catch(() => undefined);
        }
        // Every statement sent is answered before the last ones (or a ROLLBACK) go out.
        await settle();
        // decisions §8.6: the dead-letter copies of what failed or timed out, in this transaction.
        if (tx.failures.length > 0) await copyDeadLetters(tx, this.options.configFor ?? (() => undefined), this.itemIds);
        // The last writes and the COMMIT go out together. A write that fails (a guard included,
        // see migration 6) aborts the transaction, and the COMMIT behind it then rolls it back.
        tx.hold();
        const finishing = finishTx(tx);
        const limiting = finishLimits(tx);
        limiting?.catch(() => undefined);
        const owing = finishCallbacks(tx, this.holdFor(tx));
        owing?.catch(() => undefined);
        const archiving = tx.payloads.size > 0 ? writePayloads(tx, [...tx.payloads.values()], tx.now) : undefined;
        committing = client.query('COMMIT');
        tx.send();
        for (const p of [finishing, archiving, committing]) p?.catch(() => undefined);
        await begun;
        await finishing;
        await limiting;
        await owing;
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


  /** After a COMMIT: the long polls, the observer, and the queues now known to be registered. */
  private committed(tx: Tx, ms: number): void {
    this.transactions.succeeded();
    for (const key of tx.registered) this.itemIds.known.add(key);
    this.deadlines.committed(tx);
    for (const key of tx.resumed) this.options.notifier?.notify(claimTopic(key));
    if (tx.callbacks.length > 0) this.owedCommitted(tx);
    if (tx.changes.length === 0) return;
    if (tx.changes.some((c) => c.events.length > 0)) this.outbox.soon();
    const notifier = this.options.notifier;
    const kinds = new Map<string, TaskEventKind[]>();
    // decisions §8.5: a lease ended in a queue with maxActive or groupMaxActive: its held claims look again.
    const ended = new Set<string>();
    /** Changes to items of queues by groups, for the groups tables' VACUUM. */
    let byGroups = 0;
    for (const c of tx.changes) {
      if (grouped(c.ref.config)) byGroups++;
      if (notifier && !ended.has(c.ref.key) && wakesOnLeaseEnd(c.ref.config) && c.record.status !== 'claimed' && c.record.status !== 'processing') {
        ended.add(c.ref.key);
        notifier.notify(claimTopic(c.ref.key));
      }
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
    if (byGroups > 0) this.groupsVacuum.changed(byGroups);
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
   * then, see Deadlines; a sweep near the window's end sets the wake-up for the deadline
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
      if (this.deadlines.passOver(ref, horizon)) continue;
      // Nothing to run but the sweep that precedes every transaction's calls.
      sweeps.push(this.submitOp({ ref, run: async () => null, sweep: true }));
    }
    await Promise.all(sweeps);
  }

  /** Queue sweeps run so far (each a statement or two on the database): what deadlines and idle queues cost. */
  get queueSweeps(): number {
    return this.sweeps;
  }

}




/** The calls an op runs together with in one statement: posts, plain claims, submissions of one queue; null for the others. */
function groupOf(op: Op): string | null {
  if (op.posts) return `post ${op.ref.key}`;
  if (op.claim) return `claim ${op.ref.key}`;
  if (op.submit) return `submit ${op.ref.key}`;
  return null;
}


/** A row of svcq_callbacks (decisions §9.2). */
interface CallbackRow {
  id: string;
  queue: string;
  item_id: string;
  event: ItemStatus;
  url: string;
  owed_since: number;
  due_at: number;
  tries: number;
}

function callbackOf(r: CallbackRow): OwedCallback {
  return { id: r.id, queue: r.queue, itemId: r.item_id, event: r.event, url: r.url, owedSince: r.owed_since, dueAt: r.due_at, tries: r.tries };
}
