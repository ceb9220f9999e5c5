import type { QueueConfig } from '../engine/config.js';
import type { Criteria } from '../engine/criteria.js';
import type { ItemStatus, TaskEventKind } from '../engine/item.js';
import type { ClaimHold } from '../engine/limits.js';
import type { DeadLetterSource, Delivery, ItemRecord, PostOptions, RetryWish } from '../engine/rules.js';
import { runAt } from '../engine/rules.js';
import type { ScheduleView } from '../engine/schedules.js';

/** Which queue an operation is for, with its rules as they stand for this request. */
export interface QueueRef {
  /** `<host>/<name>` */
  key: string;
  host: string;
  name: string;
  config: QueueConfig;
}

export interface PostInput {
  /** The item exactly as the producer sent it: JSON text of one object. */
  body: string;
  postedBy: string;
  idempotencyKey?: string;
  /** decisions §8.1: delay or time, priority, group. */
  options?: PostOptions;
}

export interface PostOutcome {
  id: string;
  status: ItemStatus;
  /** false when an Idempotency-Key matched an earlier item and nothing was created */
  created: boolean;
}

export interface ClaimInput {
  worker: string;
  criteria?: Criteria;
  /** Aborted when the caller went away or the server is stopping: a long walk of the backlog stops, and nothing is claimed. */
  signal?: AbortSignal;
  /**
   * decisions §8.5: filled in by the store when the pause or a limit held this claim back (it
   * finds nothing, or fewer than `max`): the reason, and for the rate limit when the next lease
   * can happen. Left as it is when nothing held the claim back.
   */
  held?: ClaimHold;
}

export interface Claimed {
  id: string;
  /** The item's JSON text, as posted. */
  item: string;
  attempts: number;
  lease: { worker: string; until: number };
}

export interface SubmitOutcome {
  accepted: boolean;
  status: ItemStatus;
}

/** An item's status record (interface §2.1). `progress`, `result` and `error` are JSON text or null. */
export interface StatusRecord {
  id: string;
  status: ItemStatus;
  postedBy: string;
  postedAt: number;
  updatedAt: number;
  finishedAt: number | null;
  attempts: number;
  /** decisions §8.1 */
  priority: number;
  group: string | null;
  /** decisions §8.1: for a pending item not claimable before a later time (a delay, a retry delay), that time; else null. */
  runAt: number | null;
  progress: string | null;
  result: string | null;
  error: string | null;
  /** decisions §8.6: present when a dead-letter copy of this item was made: the copy's id. */
  deadLetterId?: string;
  /** decisions §8.6: present on a dead letter: where it came from and how it ended. */
  source?: DeadLetterSource;
}

/** decisions §8.6 bulk actions. `redrive` needs the queue a dead letter came from, by name, as it is defined now. */
export type BulkAction =
  | { kind: 'redrive'; queueNamed: (name: string) => QueueRef | undefined }
  | { kind: 'retry'; statuses: readonly ItemStatus[] }
  | { kind: 'cancel'; statuses: readonly ItemStatus[] };

/** What one atomic batch of a bulk action did: how many items it changed, and whether more are left. */
export interface BulkOutcome {
  changed: number;
  more: boolean;
}

/** decisions §8.6: who a dead-letter copy, and an item a redrive posts, say posted them. */
export const DEAD_LETTER_POSTER = 'dead-letter';
export const REDRIVE_POSTER = 'redrive';

/** decisions §8.6: the key of the queue a queue's failed and timed-out items are copied to, or null when it names none. */
export function deadLetterKey(queue: Pick<QueueRef, 'host' | 'config'>): string | null {
  return queue.config.deadLetter === null ? null : `${queue.host}/${queue.config.deadLetter}`;
}

/** The most items one atomic batch of a bulk action changes (decisions §8.6). */
export const BULK_BATCH = 1000;

export type PayloadKind = 'item' | 'progress' | 'result' | 'error';

/** Items by status; every status is present (0 when the queue holds none). */
export type StatusCounts = Record<ItemStatus, number>;

/** One queue as operators see it (decisions §5.1). */
export interface QueueOverview {
  /** Whether the queue is paused (decisions §8.4): it leases nothing until it is resumed. */
  paused: boolean;
  counts: StatusCounts;
  /** `postedAt` of the oldest pending item (claimable or waiting out a retry delay), or null. */
  oldestPendingAt: number | null;
  /** The oldest pending items, oldest first, at most `limits.oldest`. */
  oldest: Array<{ id: string; postedAt: number; attempts: number }>;
  /** Current leases (claimed or processing), soonest end first, at most `limits.leases`. */
  leases: Array<{ id: string; worker: string; until: number; attempts: number }>;
  /**
   * decisions §8.5: how many groups hold a claimable item, for a queue with `fairness: "groups"` or
   * `groupMaxActive` (kept as items change: never a scan); null for other queues.
   */
  groupsWaiting: number | null;
  /** decisions §9.2: callbacks owed for the queue's items, and how many of them failed at least once (kept as they change: never a scan). */
  callbacks: { owed: number; failing: number };
}

/**
 * decisions §9.2: a callback owed for an item that ended, as a store keeps it: written in the same
 * atomic step as the change that ended the item, and kept until it is delivered or dropped.
 */
export interface OwedCallback {
  /** Unique in the store. */
  id: string;
  /** `<host>/<name>` of the item's queue. */
  queue: string;
  itemId: string;
  /** How the item ended (finished, failed, timedout, cancelled): the `svcq-event` header. */
  event: ItemStatus;
  url: string;
  /** When the item ended: the callback is dropped once it still fails 24 hours later. */
  owedSince: number;
  /** When the next attempt may be made; while one is under way, the end of its hold. */
  dueAt: number;
  /** Failed attempts so far. */
  tries: number;
}

/** An owed callback taken for one attempt, with the item's status record as it stands (null: the item is gone). */
export interface TakenCallback extends OwedCallback {
  record: StatusRecord | null;
}

/** How one attempt of a callback went: a 2xx, or not (with a sentence saying why). */
export type CallbackAttempt = { delivered: true } | { delivered: false; reason: string };

/**
 * What settling an attempt did: `delivered` (removed), `retrying` (tried again later, by the
 * backoff), `dropped` (failing 24 hours after its item ended: removed, with a `callback-dropped`
 * task event), `stale` (the obligation is no longer the one taken: its hold ran out and another
 * attempt took it, or it was settled already; nothing changed).
 */
export type CallbackSettlement = 'delivered' | 'retrying' | 'dropped' | 'stale';

/**
 * What a store tells whoever watches it (metrics, rates). Called after the fact, never on a path
 * that decides anything; an observer must not throw.
 */
export interface StoreObserver {
  /** One durable write (a group commit, a transaction) took `seconds` and carried `changes` changes. */
  committed(seconds: number, changes: number): void;
  /** Task events of queue `key` became durable (each event kind once per event). */
  events(key: string, kinds: readonly TaskEventKind[]): void;
}

/** What a claim answers for a leased item's record. */
export function claimedOf(r: ItemRecord): Claimed {
  return { id: r.id, item: r.body, attempts: r.attempts, lease: { worker: r.leaseWorker ?? '', until: r.leaseUntil ?? 0 } };
}

/** decisions §8.6: what a store keeps of an item beside its record: the id of its dead-letter copy, and where a dead letter came from. */
export interface DeadLetterLinks {
  deadLetterId?: string | null;
  source?: DeadLetterSource | null;
}

/** An item's record as the fetch endpoint shows it (with its dead-letter links, decisions §8.6, when it has any). */
export function statusOf(r: ItemRecord, links?: DeadLetterLinks): StatusRecord {
  const record: StatusRecord = {
    id: r.id,
    status: r.status,
    postedBy: r.postedBy,
    postedAt: r.postedAt,
    updatedAt: r.updatedAt,
    finishedAt: r.finishedAt,
    attempts: r.attempts,
    priority: r.priority,
    group: r.group,
    runAt: runAt(r),
    progress: r.progress,
    result: r.result,
    error: r.error,
  };
  if (links?.deadLetterId != null) record.deadLetterId = links.deadLetterId;
  if (links?.source != null) record.source = links.source;
  return record;
}

/**
 * Task events in the store's outbox: those of one change, all stamped with the same `ts`, as JSON
 * lines (one `TaskEvent` each). Events are numbered in the order they were made durable; `seq` is
 * the number of the entry's last event.
 */
export interface OutboxEntry {
  seq: number;
  ts: number;
  /**
   * The lines, in pieces of whole lines (see {@link TEXT_PIECE}): a batch's thousand events are
   * never one long string, which would be copied whole before each write.
   */
  lines: string[];
}

/**
 * How long a piece of text built for a write grows before a new piece starts. Text built with `+=`
 * is a tree of pieces that V8 copies into one flat string before encoding it; past 128 KiB that
 * copy is a large object of fresh pages (zeroed by the kernel, then collected), which cost a batch
 * of 1,000 posts more than building its records did.
 */
export const TEXT_PIECE = 16 * 1024;

/**
 * The task events a store has made durable, for whoever keeps the task history (decisions §5).
 * A change's events are written in the same durable step as the change and enter the outbox once
 * that step is on disk; they stay there, across restarts, until the history says it holds them.
 */
export interface EventOutbox {
  /** Entries whose events are numbered after `afterSeq`, oldest first, at most `limit` entries. */
  readEvents(afterSeq: number, limit: number): OutboxEntry[];
  /** The history holds every event through `seq` durably: the store may forget them. */
  eventsDelivered(seq: number): void;
  /** Calls `listener` (at most once per turn of the event loop) when entries enter the outbox. */
  onEvents(listener: () => void): void;
  /**
   * For an outbox that fills from elsewhere (a shared database): resolves once it holds every event
   * made durable before the call, so that a reader of the history sees every acknowledged change.
   * An outbox filled by its own store's writes has nothing to do and need not have it.
   */
  catchUp?(): Promise<void>;
  /**
   * Where the history stood by the store's own records, when they come from a build that kept the
   * history's position there (every event through `seq` in it, `file` then `size` bytes long)
   * rather than in the history's own folder; null when they say nothing of a file.
   */
  recordedHistoryPosition?(): { seq: number; file: string; size: number } | null;
}

/** What a store calls outside itself: the payload archive (decisions §5, §6). */
export interface StoreHooks {
  /**
   * Writes a payload's exact bytes durably where nobody reads them yet (only for queues with
   * archivePayloads on). The store stages before it applies the change, then publishes the payload
   * once the change is durable, or discards it if the change is refused or cannot be written: an
   * archived payload never stands for a change that did not happen.
   */
  stage(host: string, queue: string, id: string, kind: PayloadKind, body: string): Promise<StagedPayload>;
}

export interface StagedPayload {
  /** Puts the payload where the tools endpoint reads it. */
  publish(): Promise<void>;
  /** Removes it. */
  discard(): Promise<void>;
}

/**
 * A change the store could not make durable (a full disk, an I/O error, a database that went
 * away). Nothing of it remains anywhere (decisions §6): the caller gets 503 and may try again.
 */
export class StoreUnavailable extends Error {
  readonly code = 'STORE_UNAVAILABLE';
  /** `reading`: the request changes nothing (a read of the task history, say), and the sentence says so. */
  constructor(
    override readonly cause: Error,
    reading = false,
  ) {
    super(reading ? `the server could not read its store (${reason(cause)}); try again later` : `the server could not save the change (${reason(cause)}); nothing was changed, try again later`);
  }
}

/** What went wrong, in a few words a person can act on (a full disk, say). */
export function reason(err: Error): string {
  switch ((err as NodeJS.ErrnoException).code) {
    case 'ENOSPC':
      return 'its disk is full';
    case 'EDQUOT':
      return 'its disk quota is used up';
    case 'EIO':
      return 'an I/O error';
    case 'EROFS':
      return 'its filesystem is read-only';
    default:
      return err.message;
  }
}

/**
 * The storage contract: atomic operations on items, each applying the queue rules of
 * engine/rules.ts (pure functions over an item's record, the queue's config and the time) inside
 * the store's own atomic step. Every store keeps it, and none re-implements a rule.
 *
 * - **Atomicity.** Each call is one atomic change: a post (or a batch of posts), a claim (of one
 *   or up to `max` items), a submission, a fetch's stamp. Nothing of a call is ever half applied.
 * - **Conditional, under concurrency.** A rule is applied to the item's record as it stands at the
 *   moment of the change, under the store's exclusion (the embedded store's single thread; a row
 *   lock with a version-guarded write on PostgreSQL): a writer that read a stale record never wins,
 *   it sees the item as it is now. Two claims never lease the same item; one idempotency key names
 *   one item however many posts race with it.
 * - **Durability.** A call that changes an item resolves only once the change is durable (fsynced
 *   journal, committed transaction): a resolved promise is the 200 the caller is about to send. A
 *   change that cannot be made durable rejects with {@link StoreUnavailable} and leaves no trace.
 *   The change's task events (and archived payloads) are made durable in the same step.
 * - **Folding.** Calls made together (in one turn of the event loop, or while a write is under
 *   way) may share one durable write, and are expected to: the embedded store group-commits its
 *   journal, the PostgreSQL store folds them into one transaction. So a caller that needs several
 *   changes at once (decisions §3.8 hand-ins) issues them without awaiting each, in order.
 * - **Time.** Deadlines are data on the items (lease end, retry delay, timeout, retention), not
 *   timers: every call first applies what is due for its queue, so it sees the queue as of now,
 *   and each store also applies them with no traffic (a timer per queue on the embedded store's
 *   in-memory index; bounded `SKIP LOCKED` sweeps on PostgreSQL, each deadline applied once
 *   whichever node gets there). An id the queue does not hold gives null.
 *
 * A store never waits: long polls live above it (src/waiting), and a store announces the durable
 * changes they wait for through the Notifier it is given (items to claim in a queue, an item that
 * became terminal or was purged). Implementations: the embedded store (journal and snapshots under
 * `<root>/_svcq/store`), PostgreSQL (postgres/postgres-store.ts), and the reference model
 * (model-store.ts) they are both held to.
 */
export interface Store {
  /** Loads or connects; after it resolves every acknowledged item is back. */
  open(): Promise<void>;
  /** Makes everything durable and releases files or connections. */
  close(): Promise<void>;
  /**
   * Creates a pending item, or returns the earlier item with the same idempotency key (a key names
   * at most one item of a queue while that item lives: concurrent posts with one key create one).
   */
  post(queue: QueueRef, input: PostInput): Promise<PostOutcome>;
  /**
   * Creates several items at once (decisions §3.8 batch), in order: they are made durable together
   * (one journal write, one transaction) and claimed in this order. Each is treated as `post`
   * treats one, idempotency keys included (a key repeated within the batch names the first).
   */
  postMany(queue: QueueRef, inputs: readonly PostInput[]): Promise<PostOutcome[]>;
  /**
   * Leases the oldest claimable item that passes the criteria (by claim order), or null when none
   * does (or the queue is paused, see {@link setPaused}). Exactly once under concurrency: two
   * claims never lease the same item.
   */
  claim(queue: QueueRef, input: ClaimInput): Promise<Claimed | null>;
  /**
   * Leases up to `max` of the oldest claimable items that pass the criteria, oldest first
   * (decisions §3.8 `max`), all in one durable write; [] when none does or the queue is paused.
   */
  claimMany(queue: QueueRef, input: ClaimInput, max: number): Promise<Claimed[]>;
  /**
   * The item's status record. The first fetch that returns a terminal item stamps it as fetched
   * (retention with `retainFrom: "fetched"`); the record resolves once everything it shows is durable.
   */
  get(queue: QueueRef, id: string): Promise<StatusRecord | null>;
  /** Records progress (a heartbeat that extends the lease) unless the item is terminal. */
  progress(queue: QueueRef, id: string, body: string): Promise<SubmitOutcome | null>;
  /**
   * Finishes the item unless it is terminal, whoever sends it. With `delivery` (decisions §9.1, a
   * push queue's target answered 2xx), a `delivered` event carrying it comes first, in the same step.
   */
  result(queue: QueueRef, id: string, body: string, delivery?: Delivery): Promise<SubmitOutcome | null>;
  /**
   * Records an error; the item is re-queued or failed by the attempts rule (decisions §3.2, §3.4),
   * or as the worker's wish says (decisions §8.2). With `delivery` (decisions §9.1, a push
   * delivery that failed), a `delivery-failed` event carrying it comes first, in the same step.
   */
  error(queue: QueueRef, id: string, body: string, wish?: RetryWish, delivery?: Delivery): Promise<SubmitOutcome | null>;
  /** Hands a leased item back: pending again after `delaySeconds`, its attempt not counted (decisions §8.2). */
  release(queue: QueueRef, id: string, delaySeconds: number): Promise<SubmitOutcome | null>;
  /** Cancels a non-terminal item (decisions §3.6). */
  cancel(queue: QueueRef, id: string): Promise<SubmitOutcome | null>;
  /** How many items the queue holds, by status (for tests, benchmarks and operators). */
  counts(queue: QueueRef): Promise<Partial<Record<ItemStatus, number>>>;
  /**
   * The queue for operators (decisions §5.1): counts kept as items change (never a scan of the
   * items), the oldest pending items and the current leases. Reads only: it changes nothing, and
   * may show deadlines already past as not yet applied.
   */
  overview(queue: QueueRef, limits: { oldest: number; leases: number }): Promise<QueueOverview>;
  /**
   * Pauses the queue (`paused` true) or resumes it (decisions §8.4), and resolves with the state
   * it is left in once that is durable; setting the state it already has changes nothing (and
   * still resolves only once that state is durable). While paused, `claim` and `claimMany` lease
   * nothing (null, []); everything else goes on as before: posts, fetches, submissions, and every
   * deadline. The pause belongs to the host/name pair, as the queue's items do: it survives a
   * restart, and a deletion of the queue's definition (the queue put back is still paused).
   * A resume announces the queue's claim topic once durable, so that held claims look again at
   * once; on a shared database a pause holds for a claim on every node as soon as it is
   * acknowledged.
   */
  setPaused(queue: QueueRef, paused: boolean): Promise<boolean>;
  /**
   * The queue's definition was put or deleted (decisions §2.4): a store that keeps timers for its
   * deadlines files them again under the rules in force, so that a deadline the change brought
   * sooner falls on time without waiting for the queue's next request. Stores that sweep on their
   * own (PostgreSQL, every second, with the rules in force) need not implement it.
   */
  rulesChanged?(key: string): void;
  /**
   * decisions §8.3: applies the queue's schedules (its rules' `schedules`) at the store's now, by
   * {@link planSchedule}: each occurrence due is posted as an item (`postedBy` `schedule:<name>`,
   * its `posted` event naming the schedule and the occurrence), and the schedule's state (its
   * definition's hash, what has passed, the last item) is recorded in the same atomic step as the
   * items, conditionally: however many nodes tick at once, each occurrence passes once. A schedule
   * no longer defined is forgotten. Resolves, once durable, with how many items were posted.
   * Calls made together share one durable step, as other calls do.
   */
  tickSchedules(queue: QueueRef): Promise<number>;
  /** decisions §8.3: the queue's schedules with their next and last occurrences, in the order of its rules. Reads only. */
  schedules(queue: QueueRef): Promise<ScheduleView[]>;
  /**
   * decisions §8.6: one atomic batch of a bulk action on at most `max` (≤ {@link BULK_BATCH}) of
   * the queue's items, oldest first (claim order), each changed by its rule as it stands now:
   * - `redrive`: pending dead letters (items with a `source`) are posted again to the queue they
   *   came from (`queueNamed(source.queue)`; one not defined now is left where it is), as new
   *   items with the same body, postedBy `redrive`, and removed from this queue (a `redriven` event).
   * - `retry`: items of `statuses` (among failed, timedout, cancelled) by rules.retryAgain.
   * - `cancel`: items of `statuses` (among pending, claimed, processing) by rules.cancel.
   * `more`: whether items this action would change are left after the batch.
   */
  bulk(queue: QueueRef, action: BulkAction, max: number): Promise<BulkOutcome>;
  /**
   * decisions §9.2: takes up to `max` owed callbacks of any queue that are due at the store's now,
   * soonest first, and moves each one's `dueAt` to now + `holdMs` in the same atomic step, so that
   * no other taker (another node on a shared database) gets the same attempt while this one is
   * under way (`holdMs` is longer than an attempt may take; when it runs out unsettled, the
   * callback is due again: at least once). Each comes with its item's status record as it stands.
   * Callbacks are owed by every change that ends an item (by a result, an error, a hand-in, a lease
   * or timeout that ends it, a cancel, a bulk cancel) whose item has a callback URL or whose queue
   * has `callback` at that moment: written in the change's own atomic step, never without it.
   * While one is owed for an item, retention does not purge it.
   */
  takeCallbacks(max: number, holdMs: number): Promise<TakenCallback[]>;
  /**
   * decisions §9.2: settles an attempt of a callback taken by {@link takeCallbacks}, only if the
   * obligation is still the one taken (same `dueAt` and `tries`): delivered, it is removed; failed,
   * it is due again by rules.callbackRetryAt, or removed with a `callback-dropped` task event in
   * the same step once 24 hours have passed since its item ended. Once no callback is owed for the
   * item, retention applies to it again as usual.
   */
  settleCallback(taken: OwedCallback, attempt: CallbackAttempt): Promise<CallbackSettlement>;
  /** Calls `listener` (at most once per turn of the event loop) when this store makes a callback owed (durably). */
  onCallbacksOwed(listener: () => void): void;
  /**
   * decisions §9.2, optional (a store whose take costs a statement): the callbacks this store makes
   * owed from now on are born taken by this node, held for `holdMs` from the change that made them
   * owed, and handed to `deliver` once that change is durable, each with its item's status record
   * as the change left it; no take is needed for their first attempt. While `wants()` says no (its
   * queue of attempts is long), they are owed due at once instead, for any taker. A node that dies
   * before attempting them leaves them to any node once their hold runs out: at least once.
   */
  holdOwnCallbacks?(options: { holdMs: number; wants: () => boolean; deliver: (born: TakenCallback[]) => void }): void;
  /**
   * decisions §9.2, with {@link holdOwnCallbacks}: ends the holds of callbacks taken (or born held)
   * that this node will not attempt after all (it is stopping), so that any node may take them
   * at once; each only if it is still the obligation taken (same `dueAt` and `tries`).
   */
  releaseCallbacks?(taken: OwedCallback[]): Promise<void>;
}

/** Counts with every status present. */
export function fullCounts(partial: Partial<Record<ItemStatus, number>>): StatusCounts {
  return {
    pending: partial.pending ?? 0,
    claimed: partial.claimed ?? 0,
    processing: partial.processing ?? 0,
    finished: partial.finished ?? 0,
    failed: partial.failed ?? 0,
    timedout: partial.timedout ?? 0,
    cancelled: partial.cancelled ?? 0,
  };
}
