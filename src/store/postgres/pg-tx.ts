// One transaction of the PostgreSQL store: its connection, the changes it stages, and how they
// are written (guarded on the version read) together with their task events and count changes.
import pg from 'pg';
import type { ItemStatus } from '../../engine/item.js';
import * as rules from '../../engine/rules.js';
import type { EventDraft, ItemRecord, Transition } from '../../engine/rules.js';
import type { DeadLetterLinks, PayloadKind, QueueRef, StatusRecord } from '../store.js';
import type { DeadLetterSource } from '../../engine/rules.js';
import { StaleWrite } from './pg-errors.js';
import { RandomIds } from '../random-ids.js';
import type { Payload } from './pg-payloads.js';

export const COLUMNS = 'ctid, id, ord, body, posted_by, posted_at, idempotency_key, status, updated_at, finished_at, attempts, lease_worker, lease_until, available_at, progress, result, error, fetched_at, version, priority, grp, dead_letter_id, source, callback, callbacks_owed';

export interface ItemRow {
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
  /** decisions §8.6 (schema version 14): the id of the item's dead-letter copy; a dead letter's source, as JSON text. */
  dead_letter_id: string | null;
  source: string | null;
  /** decisions §9.2 (schema version 18): the item's own callback URL; how many callbacks are owed for it. */
  callback: string | null;
  callbacks_owed: number;
}

/** A record as read, with the version its guarded write must find, and where. */
export interface Loaded {
  record: ItemRecord;
  version: number;
  ctid: string;
  /** decisions §8.6: the row's dead-letter links as read. */
  links?: DeadLetterLinks;
  /** decisions §9.2: the item's own callback URL, and how many callbacks are owed for it, as read (with this transaction's). */
  callback: string | null;
  owed: number;
}

export function recordOf(row: ItemRow): Loaded {
  return {
    version: row.version,
    ctid: row.ctid,
    callback: row.callback,
    owed: row.callbacks_owed,
    links: row.dead_letter_id === null && row.source === null ? undefined : { deadLetterId: row.dead_letter_id, source: row.source === null ? null : (JSON.parse(row.source) as DeadLetterSource) },
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
export interface Statement {
  name: string;
  text: string;
  plan?: Plan;
}

/** A statement prepared under `name`: every statement the store runs often. A fresh object per call (pg sets its values). */
export function named(name: string, text: string, plan: Plan = 'custom'): Statement {
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
export const TYPES = {
  getTypeParser(oid: number, format?: 'text' | 'binary') {
    if (oid === 20) return (value: string) => Number(value);
    return pg.types.getTypeParser(oid, format);
  },
} as pg.CustomTypesConfig;

/** One change to one item, for the task events, the notifier and the observer. */
export interface Change {
  ref: QueueRef;
  record: ItemRecord;
  events: EventDraft[];
  purged: boolean;
}

/** A write waiting to be sent: the row's version and status as read, its record as it becomes. */
export interface PendingWrite {
  ref: QueueRef;
  version: number;
  ctid: string;
  from: ItemStatus;
  /** When the item was claimable from, as read (0: at once). */
  fromAvailableAt: number;
  record: ItemRecord;
  purged: boolean;
  /** decisions §8.6: the id of the dead-letter copy made of the item in this transaction. */
  deadLetterId?: string;
  /** decisions §9.2: the item's own callback URL, and the callbacks owed for it (those this transaction makes owed included). */
  callback: string | null;
  owed: number;
  /** decisions §9.2: the callbacks this transaction made owed for it since it was last written, added to the row's count by its write. */
  owedNew: number;
}

/** decisions §9.2: a callback a change of this transaction made owed, inserted before COMMIT. */
export interface CallbackMade {
  ref: QueueRef;
  itemId: string;
  event: ItemStatus;
  url: string;
  /** The item as the change that ended it left it, and its dead-letter links: what a callback born held sends (see finishCallbacks). */
  record: ItemRecord;
  links: DeadLetterLinks | undefined;
  /** Set by finishCallbacks: the callback's id, and when its first attempt is due (later than now when it is born held). */
  id?: string;
  dueAt?: number;
}

/** decisions §8.6: an item this transaction made failed or timed out in a queue with `deadLetter`: copied before COMMIT. */
export interface Failure {
  ref: QueueRef;
  change: Change;
}

/** One transaction: its connection, its time, and what it changed so far. */
export class Tx {
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
  /** decisions §8.6: items that failed or timed out in this transaction, to be copied to their dead-letter queues before COMMIT. */
  readonly failures: Failure[] = [];
  /** Status records this transaction answers with, by '<queue>\n<id>': a copy made of the item before COMMIT is named in it. */
  readonly shown = new Map<string, StatusRecord>();
  /** decisions §9.2: callbacks the changes of this transaction made owed. */
  readonly callbacks: CallbackMade[] = [];

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
    const from = earlier ? earlier.record.status : loaded.record.status;
    let w = earlier;
    if (w) {
      w.record = t.record;
      w.purged = t.purged === true;
    } else this.pending.set(slot, (w = { ref, version: loaded.version, ctid: loaded.ctid, from: loaded.record.status, fromAvailableAt: loaded.record.availableAt, record: t.record, purged: t.purged === true, callback: loaded.callback, owed: loaded.owed, owedNew: 0 }));
    // decisions §9.2: a change that ended the item owes a callback, inserted with it (see finishCallbacks).
    const url = t.purged === true ? null : rules.callbackUrl(from, t.record.status, w.callback, ref.config);
    if (url !== null) {
      w.owed++;
      w.owedNew++;
      this.callbacks.push({ ref, itemId: t.record.id, event: t.record.status, url, record: t.record, links: loaded.links });
    }
    const change: Change = { ref, record: t.record, events: t.events, purged: t.purged === true };
    this.changes.push(change);
    if (rules.needsDeadLetter(from, t.record, ref.config)) this.failures.push({ ref, change });
  }

  /**
   * decisions §8.6: the item's record names its dead-letter copy: written with the item's staged
   * change, or now when that change was written already (a sweep's batch).
   */
  async deadLetterMade(ref: QueueRef, id: string, copyId: string): Promise<void> {
    const shown = this.shown.get(`${ref.key}\n${id}`);
    if (shown) shown.deadLetterId = copyId;
    for (const c of this.callbacks) if (c.itemId === id && c.ref.key === ref.key) c.links = { deadLetterId: copyId, source: c.links?.source ?? null };
    const w = this.pending.get(`${ref.key}\n${id}`);
    if (w) {
      w.deadLetterId = copyId;
      return;
    }
    await this.query(named('svcq_dead_letter_id', 'UPDATE svcq_items SET dead_letter_id = $3 WHERE queue = $1 AND id = $2'), [ref.key, id, copyId]);
  }

  /** decisions §9.2: what rules.due needs to know of the item's callbacks, as this transaction has them. */
  callbackState(ref: QueueRef, loaded: Loaded): { owed: boolean; own: string | null } {
    const w = this.pending.get(`${ref.key}\n${loaded.record.id}`);
    return w ? { owed: w.owed > 0, own: w.callback } : { owed: loaded.owed > 0, own: loaded.callback };
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
    if (w) return w.purged ? null : { record: w.record, version: w.version, ctid: w.ctid, callback: w.callback, owed: w.owed };
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

  /** Whether any change is staged and not yet written. */
  hasStaged(): boolean {
    return this.pending.size > 0;
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
   * the task events at the end ({@link finishTx}).
   */
  async flush(): Promise<void> {
    if (this.pending.size === 0) return;
    const { updates, deletes } = this.takeWrites();
    const res = await this.query<{ updated: number; deleted: number }>(named('svcq_write_items', `WITH ${writeItems(18, 19)}
       SELECT (SELECT count(*) FROM upd)::integer AS updated, (SELECT count(*) FROM del)::integer AS deleted`, 'generic'), [...writeParams(updates, deletes), deadLetterIds(updates), owedNew(updates)]);
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
function writeItems(deadLetterIds: number, owedNew: number): string {
  return `upd AS (
    UPDATE svcq_items AS i
       SET status = u.status, updated_at = u.updated_at, finished_at = u.finished_at, attempts = u.attempts,
           lease_worker = u.lease_worker, lease_until = u.lease_until, available_at = u.available_at,
           progress = u.progress, result = u.result, error = u.error, fetched_at = u.fetched_at,
           dead_letter_id = coalesce(u.dead_letter_id, i.dead_letter_id),
           callbacks_owed = i.callbacks_owed + coalesce(u.owed_new, 0),
           version = i.version + 1, writer = pg_current_xact_id()
      FROM unnest($1::tid[], $2::text[], $3::bigint[], $4::text[], $5::bigint[], $6::bigint[], $7::integer[], $8::text[],
                  $9::bigint[], $10::bigint[], $11::text[], $12::text[], $13::text[], $14::bigint[], $${deadLetterIds}::text[], $${owedNew}::integer[])
           AS u(ctid, id, version, status, updated_at, finished_at, attempts, lease_worker, lease_until, available_at, progress, result, error, fetched_at, dead_letter_id, owed_new)
     WHERE i.ctid = ANY($1::tid[]) AND i.ctid = u.ctid AND i.id = u.id AND i.version = u.version AND i.writer <= pg_current_xact_id()
    RETURNING 1
  ), del AS (
    DELETE FROM svcq_items AS i USING unnest($15::tid[], $16::text[], $17::bigint[]) AS d(ctid, id, version)
     WHERE i.ctid = ANY($15::tid[]) AND i.ctid = d.ctid AND i.id = d.id AND i.version = d.version AND i.writer <= pg_current_xact_id()
    RETURNING 1
  )`;
}

/** decisions §8.6: the dead-letter ids of the updates, a parameter of {@link writeItems}; none sent when no update has one (unnest pads with nulls). */
function deadLetterIds(updates: readonly PendingWrite[]): Array<string | null> {
  return updates.some((w) => w.deadLetterId !== undefined) ? updates.map((w) => w.deadLetterId ?? null) : [];
}

/** decisions §9.2: the callbacks made owed for each update, a parameter of {@link writeItems}; none sent when no update made one. */
function owedNew(updates: readonly PendingWrite[]): Array<number | null> {
  return updates.some((w) => w.owedNew > 0) ? updates.map((w) => w.owedNew) : [];
}

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

/** Whether an item claimable from `a` is claimable before one claimable from `b` (0: at once). */
function sooner(a: number, b: number): boolean {
  return b !== 0 && (a === 0 || a < b);
}

/** One item read under its row lock, as the transaction has it. */
export async function lock(tx: Tx, ref: QueueRef, id: string): Promise<Loaded | null> {
  const res = await tx.query<ItemRow>(named('svcq_load_locked', `SELECT ${COLUMNS} FROM svcq_items WHERE queue = $1 AND id = $2 FOR UPDATE`), [ref.key, id]);
  return res.rows[0] ? tx.current(ref, res.rows[0]) : null;
}

/** Stages what rules.due says for a locked row; the record after it, or null when it was purged. */
export function applyDue(tx: Tx, ref: QueueRef, loaded: Loaded): ItemRecord | null {
  const t = rules.due(loaded.record, ref.config, tx.now, tx.callbackState(ref, loaded));
  if (!t) return loaded.record;
  tx.stage(ref, loaded, t);
  return t.purged ? null : t.record;
}

/**
 * The transaction's staged writes, the task events of its changes and its net change of the
 * counts, in one statement before its COMMIT (one round trip: on a busy node, round trips to the
 * database cost more than the statements' work).
 */
export async function finishTx(tx: Tx): Promise<void> {
  const { updates, deletes } = tx.takeWrites();
  const ts: number[] = [];
  const hosts: string[] = [];
  const names: string[] = [];
  const ids: string[] = [];
  const kinds: string[] = [];
  const attempts: number[] = [];
  const statuses: string[] = [];
  const workers: Array<string | null> = [];
  // decisions §8.3: sent only when some event names a schedule (unnest pads the shorter arrays with nulls).
  const schedules: Array<string | null> = [];
  const occurrences: Array<number | null> = [];
  let scheduled = false;
  // decisions §8.6: likewise only when some event names a dead letter or where a redrive sent an item.
  const deadLetters: Array<string | null> = [];
  const redriven: Array<string | null> = [];
  let linked = false;
  // decisions §9.1: likewise only when some event is a push delivery's (its code may be null, its time never is).
  const codes: Array<number | null> = [];
  const times: Array<number | null> = [];
  let delivered = false;
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
      schedules.push(e.schedule ?? null);
      occurrences.push(e.occurrence ?? null);
      if (e.schedule !== undefined) scheduled = true;
      deadLetters.push(e.deadLetter ?? null);
      redriven.push(e.redrivenTo ?? null);
      if (e.deadLetter !== undefined || e.redrivenTo !== undefined) linked = true;
      codes.push(e.code ?? null);
      times.push(e.ms ?? null);
      if (e.ms !== undefined) delivered = true;
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
    named('svcq_finish', `WITH ${writeItems(31, 36)}, events AS (
       INSERT INTO svcq_events (ts, host, queue, id, event, attempts, status, worker, schedule, occurrence, dead_letter, redriven_to, code, ms)
       SELECT * FROM unnest($18::bigint[], $19::text[], $20::text[], $21::text[], $22::text[], $23::integer[], $24::text[], $25::text[], $29::text[], $30::bigint[], $32::text[], $33::text[], $34::integer[], $35::integer[])
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
    [...writeParams(updates, deletes), ts, hosts, names, ids, kinds, attempts, statuses, workers, countQueues, countStatuses, countDeltas, scheduled ? schedules : [], scheduled ? occurrences : [], deadLetterIds(updates), linked ? deadLetters : [], linked ? redriven : [], delivered ? codes : [], delivered ? times : [], owedNew(updates)],
  );
  checkWritten(res.rows[0]!, updates, deletes);
}

/** The callbacks' ids, cut from random bytes drawn 4 KiB at a time (a call into the system's generator per callback cost 30 µs on a loaded machine). */
const callbackIds = new RandomIds();

/**
 * decisions §9.2: the callbacks the transaction made owed, inserted in one statement before the
 * COMMIT. Nothing when none was made owed. Each is counted on its item (which holds its retention
 * back while the count is above 0) by the item's own write ({@link writeItems}), not by an UPDATE
 * of its own here: a second version of the row for every item that ended with a callback.
 */
export function finishCallbacks(tx: Tx, holdMs = 0): Promise<unknown> | undefined {
  const made = tx.callbacks;
  if (made.length === 0) return undefined;
  const dueAt = tx.now + holdMs;
  for (const c of made) {
    c.id = callbackIds.next();
    c.dueAt = dueAt;
  }
  return tx.query(
    named(
      'svcq_owe_callbacks_at',
      `INSERT INTO svcq_callbacks (id, queue, item_id, event, url, owed_since, due_at, tries)
       SELECT id, queue, item_id, event, url, $6, $7, 0 FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::text[]) AS c(id, queue, item_id, event, url)`,
      'generic',
    ),
    [made.map((c) => c.id), made.map((c) => c.ref.key), made.map((c) => c.itemId), made.map((c) => c.event), made.map((c) => c.url), tx.now, dueAt],
  );
}
