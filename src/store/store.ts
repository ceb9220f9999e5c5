import type { QueueConfig } from '../engine/config.js';
import type { Criteria } from '../engine/criteria.js';
import type { ItemStatus } from '../engine/item.js';
import type { ItemRecord } from '../engine/rules.js';

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
  progress: string | null;
  result: string | null;
  error: string | null;
}

export type PayloadKind = 'item' | 'progress' | 'result' | 'error';

/** What a claim answers for a leased item's record. */
export function claimedOf(r: ItemRecord): Claimed {
  return { id: r.id, item: r.body, attempts: r.attempts, lease: { worker: r.leaseWorker ?? '', until: r.leaseUntil ?? 0 } };
}

/** An item's record as the fetch endpoint shows it. */
export function statusOf(r: ItemRecord): StatusRecord {
  return {
    id: r.id,
    status: r.status,
    postedBy: r.postedBy,
    postedAt: r.postedAt,
    updatedAt: r.updatedAt,
    finishedAt: r.finishedAt,
    attempts: r.attempts,
    progress: r.progress,
    result: r.result,
    error: r.error,
  };
}

/**
 * Task events in the store's outbox: those of one change, all stamped with the same `ts`, as JSON
 * lines (one `TaskEvent` each). Events are numbered in the order they were made durable; `seq` is
 * the number of the entry's last event.
 */
export interface OutboxEntry {
  seq: number;
  ts: number;
  lines: string;
}

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
  constructor(override readonly cause: Error) {
    super(`the server could not save the change (${reason(cause)}); nothing was changed, try again later`);
  }
}

function reason(err: Error): string {
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
 * The storage contract, written in queue operations. Every method that changes an item resolves
 * only once the change is durable: a resolved promise is the 200 the caller is about to send; a
 * change that cannot be made durable rejects with {@link StoreUnavailable} and leaves no trace.
 * Every operation first applies the time-driven rules that are due (lease end, retry delay,
 * timeout, retention), so what it sees is the queue as of now. An id the queue does not hold
 * gives null.
 *
 * A store never waits: long polls live above it (src/waiting), and a store announces the durable
 * changes they wait for through the Notifier it is given (items to claim in a queue, an item that
 * became terminal or was purged). Implementations: the embedded store (journal and snapshots under
 * `<root>/_svcq/store`), the reference model (model-store.ts), and later PostgreSQL.
 */
export interface Store {
  /** Loads or connects; after it resolves every acknowledged item is back. */
  open(): Promise<void>;
  /** Makes everything durable and releases files or connections. */
  close(): Promise<void>;
  /** Creates a pending item, or returns the earlier item with the same idempotency key. */
  post(queue: QueueRef, input: PostInput): Promise<PostOutcome>;
  /** Leases the oldest claimable item that passes the criteria (by claim order), or null when none does. */
  claim(queue: QueueRef, input: ClaimInput): Promise<Claimed | null>;
  /**
   * The item's status record. The first fetch that returns a terminal item stamps it as fetched
   * (retention with `retainFrom: "fetched"`); the record resolves once everything it shows is durable.
   */
  get(queue: QueueRef, id: string): Promise<StatusRecord | null>;
  /** Records progress (a heartbeat that extends the lease) unless the item is terminal. */
  progress(queue: QueueRef, id: string, body: string): Promise<SubmitOutcome | null>;
  /** Finishes the item unless it is terminal, whoever sends it. */
  result(queue: QueueRef, id: string, body: string): Promise<SubmitOutcome | null>;
  /** Records an error; the item is re-queued or failed by the attempts rule (decisions §3.2, §3.4). */
  error(queue: QueueRef, id: string, body: string): Promise<SubmitOutcome | null>;
  /** Cancels a non-terminal item (decisions §3.6). */
  cancel(queue: QueueRef, id: string): Promise<SubmitOutcome | null>;
  /** How many items the queue holds, by status (for tests, benchmarks and operators). */
  counts(queue: QueueRef): Promise<Partial<Record<ItemStatus, number>>>;
}
