import BTreeModule from 'sorted-btree';
import type { QueueConfig } from './config.js';
import { matches, type Criteria } from './criteria.js';
import { DeadlineHeap } from './deadline-heap.js';
import type { ItemStatus, TaskEventKind } from './item.js';
import { groupKey, hasLimits, RateRing, type ClaimHold } from './limits.js';
import * as rules from './rules.js';

// sorted-btree is CommonJS with its class on `exports.default`; Node's ESM loader hands over the
// exports object, while some loaders (tsx) already unwrap it.
type BTreeClass = typeof BTreeModule.default;
const BTree: BTreeClass = (BTreeModule as unknown as { default?: BTreeClass }).default ?? (BTreeModule as unknown as BTreeClass);
type BTree<K, V> = InstanceType<typeof BTreeModule.default<K, V>>;

/** What work on an item fills in; the defaults are the state of an item as posted. */
interface ItemWork {
  idempotencyKey: string | null;
  priority: number;
  group: string | null;
  updatedAt: number;
  finishedAt: number | null;
  attempts: number;
  leaseWorker: string | null;
  leaseUntil: number | null;
  availableAt: number;
  progress: string | null;
  result: string | null;
  error: string | null;
  fetchedAt: number | null;
  /** decisions §8.6: the item's dead-letter links, on the few items that have them; null on the others. */
  links: DeadLetterLinks | null;
  /** decisions §9.2: where the item's status record goes when it ends (its post's `?callback`), or null. */
  callback: string | null;
}

/** decisions §8.6: the id of an item's dead-letter copy, and where a dead letter came from. */
export interface DeadLetterLinks {
  readonly deadLetterId: string | null;
  readonly source: rules.DeadLetterSource | null;
}

/**
 * One item as the engine keeps it. Bodies (item, progress, result, error) stay JSON text as
 * received: they are never parsed again except to match criteria, and are spliced into replies.
 *
 * A queue may hold a million waiting items, so a waiting item is kept small: the fields that work
 * on it fills in live in a second object, made on the first change away from the defaults (the
 * state as posted). Until then each reads as its default: 80 bytes of item instead of 208.
 */
export class Item {
  readonly id: string;
  /** Claim order: arrival. Unique and increasing within a queue; kept on re-queue. */
  ord: number;
  readonly body: string;
  readonly postedBy: string;
  readonly postedAt: number;
  status: ItemStatus;
  private work: ItemWork | null;

  constructor(id: string, ord: number, body: string, postedBy: string, postedAt: number, status: ItemStatus) {
    this.id = id;
    this.ord = ord;
    this.body = body;
    this.postedBy = postedBy;
    this.postedAt = postedAt;
    this.status = status;
    this.work = null;
  }

  /** Everything a change can alter, so that a change that could not be made durable can be taken back. */
  saveState(): SavedState {
    return { status: this.status, work: this.work === null ? null : { ...this.work } };
  }

  restoreState(state: SavedState): void {
    this.status = state.status;
    this.work = state.work === null ? null : { ...state.work };
  }

  /** Takes the state of a record the rules returned (the fields that change after posting). */
  assign(r: rules.ItemState): void {
    this.status = r.status;
    let w = this.work;
    if (w === null) {
      // Still the state as posted: nothing to keep (as the setters would have it, field by field).
      if (r.updatedAt === this.postedAt && r.finishedAt === null && r.attempts === 0 && r.leaseWorker === null && r.leaseUntil === null && r.availableAt === 0 && r.progress === null && r.result === null && r.error === null && r.fetchedAt === null) return;
      w = this.worked();
    }
    w.updatedAt = r.updatedAt;
    w.finishedAt = r.finishedAt;
    w.attempts = r.attempts;
    w.leaseWorker = r.leaseWorker;
    w.leaseUntil = r.leaseUntil;
    w.availableAt = r.availableAt;
    w.progress = r.progress;
    w.result = r.result;
    w.error = r.error;
    w.fetchedAt = r.fetchedAt;
  }

  /** Nothing has worked on the item yet: every field of work reads as its default. */
  get untouched(): boolean {
    return this.work === null;
  }

  private worked(): ItemWork {
    // What rules.workAsPosted gives, spelled out: made once per item that is worked on.
    return (this.work ??= { idempotencyKey: null, priority: 0, group: null, updatedAt: this.postedAt, finishedAt: null, attempts: 0, leaseWorker: null, leaseUntil: null, availableAt: 0, progress: null, result: null, error: null, fetchedAt: null, links: null, callback: null });
  }

  get idempotencyKey(): string | null {
    return this.work === null ? null : this.work.idempotencyKey;
  }
  set idempotencyKey(v: string | null) {
    if (this.work !== null || v !== null) this.worked().idempotencyKey = v;
  }
  /** decisions §8.1: fixed at post; an item of priority 0 and no group keeps no field for them. */
  get priority(): number {
    return this.work === null ? 0 : this.work.priority;
  }
  set priority(v: number) {
    if (this.work !== null || v !== 0) this.worked().priority = v;
  }
  get group(): string | null {
    return this.work === null ? null : this.work.group;
  }
  set group(v: string | null) {
    if (this.work !== null || v !== null) this.worked().group = v;
  }
  get updatedAt(): number {
    return this.work === null ? this.postedAt : this.work.updatedAt;
  }
  set updatedAt(v: number) {
    if (this.work !== null || v !== this.postedAt) this.worked().updatedAt = v;
  }
  get finishedAt(): number | null {
    return this.work === null ? null : this.work.finishedAt;
  }
  set finishedAt(v: number | null) {
    if (this.work !== null || v !== null) this.worked().finishedAt = v;
  }
  get attempts(): number {
    return this.work === null ? 0 : this.work.attempts;
  }
  set attempts(v: number) {
    if (this.work !== null || v !== 0) this.worked().attempts = v;
  }
  get leaseWorker(): string | null {
    return this.work === null ? null : this.work.leaseWorker;
  }
  set leaseWorker(v: string | null) {
    if (this.work !== null || v !== null) this.worked().leaseWorker = v;
  }
  get leaseUntil(): number | null {
    return this.work === null ? null : this.work.leaseUntil;
  }
  set leaseUntil(v: number | null) {
    if (this.work !== null || v !== null) this.worked().leaseUntil = v;
  }
  /** A re-queued item is not claimable before this (retryDelaySeconds). */
  get availableAt(): number {
    return this.work === null ? 0 : this.work.availableAt;
  }
  set availableAt(v: number) {
    if (this.work !== null || v !== 0) this.worked().availableAt = v;
  }
  get progress(): string | null {
    return this.work === null ? null : this.work.progress;
  }
  set progress(v: string | null) {
    if (this.work !== null || v !== null) this.worked().progress = v;
  }
  get result(): string | null {
    return this.work === null ? null : this.work.result;
  }
  set result(v: string | null) {
    if (this.work !== null || v !== null) this.worked().result = v;
  }
  get error(): string | null {
    return this.work === null ? null : this.work.error;
  }
  set error(v: string | null) {
    if (this.work !== null || v !== null) this.worked().error = v;
  }
  /** decisions §8.6: the id of the item's dead-letter copy, and where a dead letter came from (kept with the work on it: most items have none). */
  get links(): DeadLetterLinks | null {
    return this.work === null ? null : this.work.links;
  }
  set links(v: DeadLetterLinks | null) {
    if (this.work !== null || v !== null) this.worked().links = v;
  }
  /** decisions §9.2: the item's own callback URL (kept with the work on it: most items have none). */
  get callback(): string | null {
    return this.work === null ? null : this.work.callback;
  }
  set callback(v: string | null) {
    if (this.work !== null || v !== null) this.worked().callback = v;
  }
  /** Stamped by the first fetch that returned the item terminal (retainFrom: "fetched"). */
  get fetchedAt(): number | null {
    return this.work === null ? null : this.work.fetchedAt;
  }
  set fetchedAt(v: number | null) {
    if (this.work !== null || v !== null) this.worked().fetchedAt = v;
  }
}

/** An item's state as {@link Item.saveState} took it. */
export interface SavedState {
  readonly status: ItemStatus;
  readonly work: Readonly<ItemWork> | null;
}

/** What an operation did, for the store to make durable and to report. */
export interface Change {
  item: Item;
  /**
   * The item's state before the change; absent when the change created the item. A store that
   * cannot make the change durable takes it back with {@link Queue.revert}.
   */
  before?: SavedState;
  /** Events in the order they happened. */
  events: Array<{ event: TaskEventKind; worker?: string; schedule?: string; occurrence?: number; deadLetter?: string; redrivenTo?: string; code?: number | null; ms?: number }>;
  /** The item left the queue for good (retention): the store deletes it. */
  purged?: boolean;
  /** A lease counted by the rate window or fairness turns (decisions §8.5): the store journals it, and a revert takes it back. */
  lease?: LeaseMark;
  /**
   * decisions §9.2: the change ended the item and a callback is owed to this URL: the store records
   * the obligation in the change's own write (and a revert takes the hold on retention back).
   */
  callback?: string;
}

/** One lease as the rate window and the fairness turns count it. */
export interface LeaseMark {
  /** The lease's number in the queue (see {@link Queue.leaseCount}). */
  readonly n: number;
  readonly at: number;
  /** The group whose turn it was (fairness "groups"), or null when turns were not kept. */
  readonly group: string | null;
  /** What the rate window held in the slot this lease took, and the group's stamp before it: what a revert puts back. */
  readonly slot: number;
  readonly stamp: number | undefined;
}

/** What a restart brings back of a queue's rate window and turns (see {@link Queue.restoreFlow}). */
export interface FlowState {
  /** Leases numbered so far. */
  count: number;
  /** The number of the first lease the rate window counts; null: the queue had no rate limit. */
  from: number | null;
  /** Lease times by number (n, t), in any order; those before `from` may be left out. */
  times: Array<[number, number]>;
  /** Each group's last turn (the number of its last lease under fairness). */
  stamps: Map<string, number>;
  /** Start-up only: the lease count of the snapshot read (leases journalled after it and numbered up to it are in it already). */
  base?: number;
}

export interface Outcome {
  accepted: boolean;
  status: ItemStatus;
  change?: Change;
}

/** Fewest removals between two sweeps of the deadline heaps for entries of removed items. */
const RETAIN_EVERY = 1024;

/** How many different criteria a queue remembers its unmatched items for. */
const UNMATCHED_KEPT = 64;

/** A queue's deadlines that fall together are applied in claim order. */
const byOrd = (item: Item): number => item.ord;

/**
 * The semantics of one queue (decisions §3), as plain in-memory code with the clock passed in.
 * It touches no file and no network: the store makes its changes durable.
 *
 * Costs do not grow with the backlog: pending items sit in a B+tree ordered by claim order, so a
 * claim without criteria takes the first entry, and a claim with criteria walks in order and stops
 * at the first match; every time-driven rule (lease end, retry delay, timeout, retention) has a
 * heap of deadlines, so `tick` only looks at what is due.
 */
export class Queue {
  readonly items = new Map<string, Item>();
  /** Claimable items, in claim order (decisions §8.1). */
  private readonly pending = new ClaimOrder();
  /**
   * Pending items not claimable before a later time (a delay, a retry delay), in claim order: the
   * operators' views list the first of them without a scan. The `delayed` heap moves each into
   * `pending` when its time comes.
   */
  private readonly waiting = new ClaimOrder();
  private readonly byKey = new Map<string, Item>();
  // Equal deadlines in claim order (see tick).
  private readonly leases = new DeadlineHeap<Item>(byOrd);
  private readonly delayed = new DeadlineHeap<Item>(byOrd);
  private readonly timeouts = new DeadlineHeap<Item>(byOrd);
  private readonly retention = new DeadlineHeap<Item>(byOrd);
  /**
   * Criteria claims, by their criteria as JSON text: every pending item up to this claim order was
   * checked against them and did not match. A body never changes, so the next claim with the same
   * criteria (a fleet of workers sharing one `--criteria`) starts after it rather than parsing the
   * whole backlog again; an item that becomes pending again below it moves the mark back.
   */
  private readonly unmatched = new Map<string, Place>();
  private lastOrd = 0;
  /** Items removed since the heaps last dropped the entries of removed items. */
  private removedSinceRetain = 0;
  /** Items by status, kept as items change (operators read it on every refresh: never a scan). */
  private readonly tally: Record<ItemStatus, number> = { pending: 0, claimed: 0, processing: 0, finished: 0, failed: 0, timedout: 0, cancelled: 0 };
  /**
   * A paused queue leases nothing (decisions §8.4): a claim finds nothing, and everything else
   * (posts, submissions, deadlines) goes on. The store keeps it durable beside the items.
   */
  paused = false;
  /**
   * decisions §8.5, only for queues that use it: claimable items by group, and groups in the order
   * a claim serves them (see {@link GroupIndex}); leased items per group. Null for other queues,
   * whose claims and changes stay as they were.
   */
  private groups: GroupIndex | null = null;
  /** decisions §8.5 `rateLimit`: the times of the last `max` leases; null without a rate limit. */
  private ring: RateRing | null = null;
  /** The number of the first lease the rate window counts (leases before it came before the limit); null without one. */
  ringFrom: number | null = null;
  /** Leases numbered so far in a queue with a rate limit or fairness: a restart counts on from here. */
  leaseCount = 0;
  /** Each group's last turn under fairness "groups" (a lease number); a group not here was never served. Kept across restarts. */
  readonly stamps = new Map<string, number>();
  /** Whether any limit or fairness applies: claims take {@link limitedStep}. */
  private limited = false;
  /** decisions §9.2: callbacks owed, by item id: retention does not purge these items until they are settled. */
  private readonly owed = new Map<string, number>();

  constructor(public config: QueueConfig) {
    this.takeFlow(config);
  }

  get size(): number {
    return this.items.size;
  }

  /**
   * The order number of the next item: after every earlier one. A counter, so that it stays a
   * small integer (no separate number object per item); stores written before kept postedAt × 1024
   * here, and a queue restored from one simply counts on from there.
   */
  nextOrd(): number {
    return ++this.lastOrd;
  }

  /** The item an idempotency key already names, if it is still in the queue. */
  byIdempotencyKey(key: string): Item | undefined {
    return this.byKey.get(key);
  }

  /** Posts a new item; its id must not be in the queue (the store draws ids until one is not). */
  post(fields: { id: string; body: string; postedBy: string; idempotencyKey: string | null; options?: rules.PostOptions }, now: number): Change {
    const { record: r, events } = rules.post({ id: fields.id, body: fields.body, postedBy: fields.postedBy, idempotencyKey: fields.idempotencyKey, ord: this.nextOrd(), options: fields.options }, now);
    const item = new Item(r.id, r.ord, r.body, r.postedBy, r.postedAt, r.status);
    if (r.idempotencyKey !== null) item.idempotencyKey = r.idempotencyKey;
    if (fields.options !== undefined) {
      item.priority = r.priority;
      item.group = r.group;
      item.availableAt = r.availableAt;
      if (fields.options.callback !== undefined) item.callback = fields.options.callback;
    }
    this.add(item);
    return { item, events };
  }

  /**
   * Puts an item back exactly as it was stored (start-up replay), or replaces the stored state
   * of one already here, and rebuilds its index and deadline entries.
   */
  restore(item: Item): void {
    const previous = this.items.get(item.id);
    if (previous) {
      this.tallied(previous, -1);
      this.unfile(previous);
      if (previous.idempotencyKey !== null) this.byKey.delete(previous.idempotencyKey);
    }
    this.add(item);
  }

  /**
   * Files an item whose id is not in the queue (`post`'s caller chose it so): one lookup in the
   * table of items fewer than `restore`, which with millions of items is a cache miss.
   */
  private add(item: Item): void {
    this.tallied(item, 1);
    this.items.set(item.id, item);
    if (item.idempotencyKey !== null) this.byKey.set(item.idempotencyKey, item);
    if (item.ord > this.lastOrd) this.lastOrd = item.ord;
    this.index(item);
  }

  /**
   * Takes back a change that could not be made durable: the item returns to the state it had
   * before it (a purged one returns to the queue, a created one leaves it), with its index and
   * deadlines filed again. Changes are taken back newest first.
   */
  revert(change: Change): void {
    const { item, before } = change;
    if (change.lease) this.unlease(change.lease);
    if (change.callback !== undefined) this.owing(item.id, -1);
    if (before === undefined) return this.remove(item.id);
    this.unfile(item);
    const present = this.items.get(item.id) === item;
    if (present) this.tallied(item, -1);
    item.restoreState(before);
    this.tallied(item, 1);
    if (!present) {
      this.items.set(item.id, item);
      if (item.idempotencyKey !== null) this.byKey.set(item.idempotencyKey, item);
    }
    this.index(item);
  }

  /** Removes an item for good (a purge replayed, or a restore of a deleted record). */
  remove(id: string): void {
    const item = this.items.get(id);
    if (!item) return;
    this.items.delete(id);
    this.tallied(item, -1);
    this.unfile(item);
    if (item.idempotencyKey !== null && this.byKey.get(item.idempotencyKey) === item) this.byKey.delete(item.idempotencyKey);
    // Its heap entries (a timeout hours away, say) would hold it, body and all, until they come
    // due: once as many items have gone as the queue holds, the heaps keep only entries of items
    // still here, so what a purged item leaves behind is bounded by the queue's own size.
    if (++this.removedSinceRetain > Math.max(RETAIN_EVERY, this.items.size)) {
      this.removedSinceRetain = 0;
      const here = (entry: Item): boolean => this.items.get(entry.id) === entry;
      for (const heap of [this.leases, this.delayed, this.timeouts, this.retention]) heap.retain(here);
    }
  }

  /** Entries in the deadline heaps, stale ones included (for tests of what they keep). */
  get deadlineEntries(): number {
    return this.leases.size + this.delayed.size + this.timeouts.size + this.retention.size;
  }

  /** Files an item under the index or deadlines its state calls for. Stale heap entries are skipped when popped. */
  private index(item: Item): void {
    const d = rules.deadlines(item, this.config);
    this.fileIfPending(item, d.retry);
    if (d.retry !== null) this.delayed.push(d.retry, item);
    if (d.lease !== null) this.leases.push(d.lease, item);
    if (d.timeout !== null) this.timeouts.push(d.timeout, item);
    if (d.retention !== null) this.retention.push(d.retention, item);
  }

  /** Counts an item in (1) or out (−1) of its status, and of its group's leases. */
  private tallied(item: Item, d: 1 | -1): void {
    const status = item.status;
    this.tally[status] += d;
    if (this.groups !== null && (status === 'claimed' || status === 'processing')) this.groups.leased(groupKey(item.group), d);
  }

  /** Makes an item claimable; one that kept an earlier place is checked again by criteria claims. */
  private makePending(item: Item): void {
    this.pending.add(item);
    if (this.groups !== null) this.groups.add(item);
    if (this.unmatched.size === 0) return;
    const priority = item.priority;
    for (const [key, through] of this.unmatched) if (!before(through, priority, item.ord)) this.unmatched.set(key, { priority, ord: item.ord - 1 });
  }

  /** Files a pending item where its state puts it: claimable, or waiting for its time. */
  private fileIfPending(item: Item, retry: number | null): void {
    if (item.status !== 'pending') return;
    if (retry === null) this.makePending(item);
    else this.waiting.add(item);
  }

  /** Takes an item out of the claim-order indexes, if it is there. */
  private unfile(item: Item): void {
    if (this.pending.remove(item) && this.groups !== null) this.groups.remove(item);
    this.waiting.remove(item);
  }

  /** Leases the oldest pending item that passes every criterion, or returns null (always while paused). */
  claim(worker: string, criteria: Criteria | undefined, now: number, held?: ClaimHold): Change | null {
    return this.claimStep(worker, criteria, now, Infinity, null, held) as Change | null;
  }

  /**
   * A claim that parses at most `budget` pending bodies against its criteria, so that a long walk
   * can be cut into steps with other work between them. Returns the change, null when no pending
   * item matches, or (budget spent) the claim order it checked through: call again, with that as
   * `after`, to go on. The walk goes on from where claims with the same criteria found nothing
   * (which an item made pending again behind it moves back), or from `after` if the queue no
   * longer remembers these criteria.
   */
  claimStep(worker: string, criteria: Criteria | undefined, now: number, budget: number, after: Place | null, held?: ClaimHold): Change | null | Place {
    if (this.paused) {
      if (held) held.reason = 'paused';
      return null;
    }
    if (this.limited) return this.limitedStep(worker, criteria, now, budget, after, held);
    if (criteria === undefined || Object.keys(criteria).length === 0) {
      const first = this.pending.first();
      return first ? this.lease(first, worker, now) : null;
    }
    const found = this.firstMatch(criteria, budget, after);
    return found instanceof Item ? this.lease(found, worker, now) : found;
  }

  /** The criteria walk of {@link claimStep}: the first pending item in claim order that matches, null, or the place to go on from. */
  private firstMatch(criteria: Criteria, budget: number, after: Place | null): Item | Place | null {
    let found: Item | undefined;
    // Criteria holding a number past a double's range (1e400 reads as Infinity, which JSON text
    // writes as null) have no text of their own to be remembered by: they walk from `after`.
    const key = hasNonFinite(criteria) ? undefined : JSON.stringify(criteria);
    const from = (key !== undefined ? this.unmatched.get(key) : undefined) ?? after ?? START;
    let through = from;
    let parsed = 0;
    for (const item of this.pending.walk(from)) {
      if (parsed === budget) {
        if (key !== undefined) this.remember(key, through);
        return through;
      }
      parsed++;
      if (matches(JSON.parse(item.body) as Record<string, unknown>, criteria)) {
        found = item;
        break;
      }
      through = { priority: item.priority, ord: item.ord };
    }
    if (key !== undefined && (through !== from || this.unmatched.has(key))) this.remember(key, through);
    return found ?? null;
  }

  /** Criteria `key` matched no pending item up to `through`: kept most recently used last, the least recently used dropped. */
  private remember(key: string, through: Place): void {
    this.unmatched.delete(key);
    if (this.unmatched.size >= UNMATCHED_KEPT) this.unmatched.delete(this.unmatched.keys().next().value!);
    this.unmatched.set(key, through);
  }

  private lease(item: Item, worker: string, now: number): Change {
    return this.apply(item, rules.claim(item, this.config, worker, now));
  }

  /** An accepted progress is a heartbeat: the lease runs leaseSeconds from now again. */
  progress(id: string, body: string, now: number): Outcome | null {
    const item = this.items.get(id);
    return item ? this.submitted(item, rules.progress(item, this.config, body, now)) : null;
  }

  /** A result for any non-terminal item is accepted, whoever sends it. */
  result(id: string, body: string, now: number, delivery?: rules.Delivery): Outcome | null {
    const item = this.items.get(id);
    return item ? this.submitted(item, rules.result(item, body, now, delivery)) : null;
  }

  /** Records an error; the item is re-queued, or failed when its attempts are used up (decisions §3.4). */
  error(id: string, body: string, now: number, wish?: rules.RetryWish, delivery?: rules.Delivery): Outcome | null {
    const item = this.items.get(id);
    return item ? this.submitted(item, rules.error(item, this.config, body, now, wish, delivery)) : null;
  }

  /** Hands a leased item back (decisions §8.2): pending again after `delaySeconds`, its attempt not counted. */
  release(id: string, delaySeconds: number, now: number): Outcome | null {
    const item = this.items.get(id);
    return item ? this.submitted(item, rules.release(item, delaySeconds, now)) : null;
  }

  cancel(id: string, now: number): Outcome | null {
    const item = this.items.get(id);
    return item ? this.submitted(item, rules.cancel(item, now)) : null;
  }

  /** decisions §8.6 bulk retry: a failed, timed-out or cancelled item is pending again in place; null for any other. */
  retryAgain(item: Item, now: number): Change | null {
    const t = rules.retryAgain(item, now);
    return t ? this.apply(item, t) : null;
  }

  /**
   * What a change just made due at once for this item (a retried item whose timeout, counted from
   * postedAt, has passed; a cancelled one retained for 0 s), applied now: a bulk action applies it
   * item by item in its batch's order, as the other stores do, not with the next tick (which
   * would take the batch's items by posting order, and copy them to the dead-letter queue so).
   */
  dueNow(item: Item, now: number): Change | null {
    if (this.items.get(item.id) !== item) return null;
    const t = rules.due(item, this.config, now, { owed: this.owed.has(item.id), own: item.callback });
    return t ? this.apply(item, t) : null;
  }

  /** decisions §8.6 bulk cancel of an item this queue holds. */
  cancelItem(item: Item, now: number): Change | null {
    const s = rules.cancel(item, now);
    return s.transition ? this.apply(item, s.transition) : null;
  }

  /** decisions §8.6 redrive: the dead letter leaves the queue for good, as a purge does, with a `redriven` event naming where it went. */
  redriven(item: Item, to: string): Change {
    return this.apply(item, { record: item, events: [{ event: 'redriven', redrivenTo: to }], purged: true });
  }

  /**
   * Items of these statuses in claim order (decisions §8.6 bulk actions): pending ones walked from
   * the claim-order trees (all of them, as the caller reads on), any other status found by a scan
   * of the queue (the first `limit` only).
   */
  *inClaimOrder(statuses: readonly ItemStatus[], limit: number): Iterable<Item> {
    const others = statuses.filter((s) => s !== 'pending');
    if (others.length === 0) {
      yield* this.oldestPendingWalk();
      return;
    }
    // A scan of the queue that keeps the first `limit` in claim order (most come in posting
    // order, after the ones kept, and are passed over at once): no sort of every item found.
    const wanted = new Set(statuses);
    const kept: Item[] = [];
    for (const item of this.items.values()) {
      if (!wanted.has(item.status)) continue;
      if (kept.length === limit && rules.claimOrder(item, kept[limit - 1]!) >= 0) continue;
      let lo = 0;
      let hi = kept.length;
      while (lo < hi) {
        const mid = (lo + hi) >> 1;
        if (rules.claimOrder(kept[mid]!, item) < 0) lo = mid + 1;
        else hi = mid;
      }
      kept.splice(lo, 0, item);
      if (kept.length > limit) kept.pop();
    }
    yield* kept;
  }

  /** Pending items (claimable or waiting for their time) in claim order, the two trees merged as they are walked. */
  private *oldestPendingWalk(): Iterable<Item> {
    const a = this.pending.walk(START)[Symbol.iterator]();
    const b = this.waiting.walk(START)[Symbol.iterator]();
    let x = a.next();
    let y = b.next();
    while (!x.done || !y.done) {
      if (y.done || (!x.done && rules.claimOrder(x.value, y.value) < 0)) {
        yield x.value;
        x = a.next();
      } else {
        yield y.value;
        y = b.next();
      }
    }
  }

  /**
   * Stamps the first fetch of a terminal item (retainFrom: "fetched" starts retention here).
   * Returns the change when there was one to record.
   */
  fetched(item: Item, now: number): Change | null {
    const t = rules.fetched(item, now);
    return t ? this.apply(item, t) : null;
  }

  private submitted(item: Item, s: rules.Submission): Outcome {
    if (!s.transition) return { accepted: s.accepted, status: s.status };
    return { accepted: s.accepted, status: s.status, change: this.apply(item, s.transition) };
  }

  /**
   * Makes a rule's transition the item's state, and keeps the indexes with it: out of the pending
   * tree unless claimable, and a heap entry for each deadline the transition set or moved
   * (entries for deadlines that no longer apply are skipped when they come due).
   */
  private apply(item: Item, t: rules.Transition): Change {
    const before = item.saveState();
    if (t.purged) {
      this.remove(item.id);
      return { item, before, events: t.events, purged: true };
    }
    const was = rules.deadlines(item, this.config);
    // Only pending items are filed in claim order (a leased one, handing in its result, is in none).
    if (item.status === 'pending') this.unfile(item);
    this.tallied(item, -1);
    item.assign(t.record);
    this.tallied(item, 1);
    const now = rules.deadlines(item, this.config);
    if (now.lease !== null && now.lease !== was.lease) this.leases.push(now.lease, item);
    if (now.retry !== null && now.retry !== was.retry) this.delayed.push(now.retry, item);
    if (now.timeout !== null && now.timeout !== was.timeout) this.timeouts.push(now.timeout, item);
    if (now.retention !== null && now.retention !== was.retention) this.retention.push(now.retention, item);
    this.fileIfPending(item, now.retry);
    const change: Change = { item, before, events: t.events };
    const url = rules.callbackUrl(before.status, item.status, item.callback, this.config);
    if (url !== null) {
      change.callback = url;
      this.owing(item.id, 1);
    }
    return change;
  }

  /**
   * decisions §9.2: one more (1) or one fewer (−1) callback owed for the item (the store calls this
   * for the callbacks it finds at start, and as each is settled). Once none is owed, its retention
   * deadline is filed again: it falls as usual.
   */
  owing(id: string, d: 1 | -1, now = Infinity): void {
    const n = (this.owed.get(id) ?? 0) + d;
    if (n > 0) return void this.owed.set(id, n);
    this.owed.delete(id);
    const item = this.items.get(id);
    const at = item === undefined ? null : rules.deadlines(item, this.config).retention;
    // A deadline still ahead keeps the entry it was filed with; one that fell while owed was passed over.
    if (at !== null && at <= now) this.retention.push(at, item!);
  }

  /**
   * Applies every time-driven rule that is due at `now` and returns what changed: the deadlines of
   * all four kinds in the order they fall, those that fall together in claim order (the order of
   * the items in the queue, as the reference model applies them; one item's in the order of the
   * kinds below), so that, say, a lease that ended and a timeout of the same millisecond are
   * copied to a dead-letter queue in the same order on every store.
   */
  tick(now: number): Change[] {
    const changes: Change[] = [];
    const config = this.config;
    const kinds: Array<{ heap: DeadlineHeap<Item>; rule: (r: rules.ItemRecord, c: QueueConfig, now: number) => rules.Transition | null; deadline?: (d: rules.Deadlines) => number | null }> = [
      { heap: this.leases, rule: rules.leaseEndedUnlessTimedOut },
      { heap: this.delayed, rule: rules.retryAvailable },
      { heap: this.timeouts, rule: rules.timedOut, deadline: (d) => d.timeout },
      // An item a callback is owed for stays (decisions §9.2): `owing` files it again once none is.
      { heap: this.retention, rule: (r, c, now) => rules.retentionEnded(r, c, now, this.owed.has(r.id)), deadline: (d) => d.retention },
    ];
    for (;;) {
      let next: (typeof kinds)[number] | undefined;
      for (const k of kinds) {
        const at = k.heap.peek();
        if (at === undefined || at > now) continue;
        if (!next || at < next.heap.peek()! || (at === next.heap.peek() && k.heap.peekTie()! < next.heap.peekTie()!)) next = k;
      }
      if (!next) return changes;
      const item = next.heap.popDue(now)!;
      if (this.items.get(item.id) !== item) continue;
      const t = next.rule(item, config, now);
      if (t) {
        changes.push(this.apply(item, t));
        continue;
      }
      // A definition change may have moved this deadline later: it is filed again where it now is.
      const at = next.deadline?.(rules.deadlines(item, config)) ?? null;
      if (at !== null && at > now) next.heap.push(at, item);
    }
  }

  /** When `tick` next has something to do, or null. */
  nextDeadline(): number | null {
    // Asked before every operation: four peeks, without an array of the heaps each time.
    let next = Infinity;
    let at = this.leases.peek();
    if (at !== undefined && at < next) next = at;
    at = this.delayed.peek();
    if (at !== undefined && at < next) next = at;
    at = this.timeouts.peek();
    if (at !== undefined && at < next) next = at;
    at = this.retention.peek();
    if (at !== undefined && at < next) next = at;
    return next === Infinity ? null : next;
  }

  /**
   * Replaces the queue's rules (a PUT of its definition). Deadlines that come sooner under the new
   * rules are filed again (a scan of the queue, on a definition change only); entries filed for
   * later deadlines are re-checked against the rules in force when they come due.
   */
  reconfigure(config: QueueConfig): void {
    const old = this.config;
    this.config = config;
    this.takeFlow(config, old);
    const timeoutSooner = config.timeoutMs !== null && (old.timeoutMs === null || config.timeoutMs < old.timeoutMs);
    const retentionSooner = config.retainFrom !== old.retainFrom || config.retainMs < old.retainMs;
    if (!timeoutSooner && !retentionSooner) return;
    for (const item of this.items.values()) {
      const d = rules.deadlines(item, config);
      if (timeoutSooner && d.timeout !== null) this.timeouts.push(d.timeout, item);
      if (retentionSooner && d.retention !== null) this.retention.push(d.retention, item);
    }
  }

  /**
   * Follows the limits of a (new) definition (decisions §8.5): the per-group index is built when a
   * definition starts using it (a walk of the queue, on a definition change only) and dropped
   * when none does; the rate window follows a changed limit (RateRing.resize), starts empty when
   * a limit is added, and is forgotten when it is removed.
   */
  private takeFlow(config: QueueConfig, old?: QueueConfig): void {
    this.limited = hasLimits(config) || config.fairness === 'groups';
    const byGroup = config.groupMaxActive !== null || config.fairness === 'groups';
    if (!byGroup) this.groups = null;
    else if (this.groups === null || old === undefined || old.groupMaxActive !== config.groupMaxActive || old.fairness !== config.fairness) this.groups = this.groupIndex(config);
    const rate = config.rateLimit;
    if (rate === null) {
      this.ring = null;
      this.ringFrom = null;
    } else if (this.ring === null) {
      this.ring = new RateRing(rate.max, rate.windowMs);
      this.ringFrom = this.leaseCount;
    } else {
      // A larger window keeps only the leases the smaller one held: a restart must not count older ones.
      if (rate.max > this.ring.max) this.ringFrom = Math.max(this.ringFrom ?? 0, this.leaseCount - this.ring.max + 1);
      this.ring.resize(rate.max, rate.windowMs);
    }
  }

  /** The per-group index of every claimable and leased item, as the queue holds them now. */
  private groupIndex(config: QueueConfig): GroupIndex {
    const groups = new GroupIndex(config.groupMaxActive ?? Infinity, config.fairness === 'groups', this.stamps);
    for (const item of this.pending.walk(START)) groups.add(item);
    if (this.tally.claimed + this.tally.processing > 0) {
      for (const item of this.items.values()) if (item.status === 'claimed' || item.status === 'processing') groups.leased(groupKey(item.group), 1);
    }
    return groups;
  }

  /**
   * Brings back the rate window and the turns a restart found (after the items are restored): the
   * window counts the leases numbered from `from` on, the last `max` of them, as it did before.
   */
  restoreFlow(state: FlowState): void {
    this.leaseCount = Math.max(this.leaseCount, state.count);
    for (const [group, turn] of state.stamps) this.stamps.set(group, turn);
    const rate = this.config.rateLimit;
    if (rate !== null) {
      this.ring = new RateRing(rate.max, rate.windowMs);
      this.ringFrom = state.from ?? this.leaseCount;
      const from = state.from;
      if (from !== null) for (const [, t] of state.times.filter(([n]) => n >= from).sort((a, b) => a[0] - b[0])) this.ring.note(t);
    }
    if (this.groups !== null && this.config.fairness === 'groups') this.groups = this.groupIndex(this.config);
  }

  /** The rate window's leases that still count, oldest first (numbered up to {@link leaseCount}); [] without a rate limit. */
  rateTimes(): number[] {
    return this.ring === null ? [] : this.ring.recent();
  }

  /** decisions §8.5: groups holding a claimable item, for a queue with fairness "groups" or groupMaxActive; null for others. */
  groupsWaiting(): number | null {
    return this.groups === null ? null : this.groups.waiting;
  }

  /**
   * A claim step under limits or fairness (decisions §8.5), in the order the limits bind: first
   * whether the queue may lease at all now (maxActive, then the rate window), and only then which
   * item. A claim stopped by a limit says so in `held` only when there is an item it would
   * otherwise take. Criteria walks are cut into steps of at most `budget` parsed bodies, as
   * {@link claimStep}'s are, and go on from the place they return.
   */
  private limitedStep(worker: string, criteria: Criteria | undefined, now: number, budget: number, after: Place | null, held: ClaimHold | undefined): Change | null | Place {
    const config = this.config;
    const plain = criteria === undefined || Object.keys(criteria).length === 0;
    const ring = this.ring;
    const full = config.maxActive !== null && this.tally.claimed + this.tally.processing >= config.maxActive;
    if (full || (ring !== null && !ring.allows(now))) {
      const exists = plain ? (this.pending.first() ?? null) : this.matchInOrder(criteria, budget, after, 'any');
      if (exists !== null && !(exists instanceof Item)) return exists;
      if (exists !== null && held) {
        held.reason = full ? 'maxActive' : 'rateLimit';
        if (!full) held.retryAt = ring!.nextAt();
      }
      return null;
    }
    const groups = this.groups;
    let found: Item | Place | null;
    if (groups === null) found = plain ? (this.pending.first() ?? null) : this.matchInOrder(criteria, budget, after, 'any');
    else if (plain) found = groups.first() ?? null;
    else if (config.fairness === 'groups') {
      found = after?.walk?.kind === 'blocked' ? null : groups.fairMatch(criteria, budget, after);
      // None among the groups that may lease: is a matching item held back in one at groupMaxActive?
      if (found === null && groups.blocked > 0) {
        const blocked = this.matchInOrder(criteria, budget, after?.walk?.kind === 'blocked' ? after : null, 'blocked');
        if (blocked !== null && !(blocked instanceof Item)) return blocked;
        if (blocked !== null && held) held.reason = 'groupMaxActive';
        return null;
      }
    } else found = this.matchInOrder(criteria, budget, after, 'open');
    if (found !== null && !(found instanceof Item)) {
      if (found.walk?.kind !== 'open' || found.walk.blocked !== true || found.priority !== DONE.priority) return found;
      // The walk ended, having passed over a matching item of a group at groupMaxActive.
      if (held) held.reason = 'groupMaxActive';
      return null;
    }
    if (found !== null) return this.leaseCounted(found, worker, now);
    if (plain && groups !== null && groups.blocked > 0 && held) held.reason = 'groupMaxActive';
    return null;
  }

  /**
   * The first claimable item in claim order that passes `criteria`: of any group (`any`,
   * `blocked`), or (`open`) of a group below groupMaxActive, noting in the place whether it passed
   * over a matching item of a group at the limit. Parses at most `budget` bodies, then returns the
   * place to go on from (only `any` uses the memory of criteria that matched nothing: an item the
   * others pass over for its group was not found unmatched). An `open` walk that ends having
   * passed over such an item returns the place {@link DONE}.
   */
  private matchInOrder(criteria: Criteria, budget: number, after: Place | null, kind: 'any' | 'open' | 'blocked'): Item | Place | null {
    // Any group: the walk of a plain queue, with its memory of criteria that matched nothing.
    if (kind === 'any') return this.firstMatch(criteria, budget, after !== null && after.walk === undefined ? after : null);
    const from = after?.walk?.kind === kind ? after : START;
    let blocked = from.walk?.blocked === true;
    let through: Place = from;
    let parsed = 0;
    const groups = kind === 'open' ? this.groups : null;
    for (const item of this.pending.walk(from)) {
      if (parsed === budget) return { priority: through.priority, ord: through.ord, walk: { kind, blocked } };
      through = { priority: item.priority, ord: item.ord };
      const closed = groups !== null && groups.saturated(groupKey(item.group));
      // A matching item of a group at the limit is looked for only until one is found.
      if (closed && blocked) continue;
      parsed++;
      if (!matches(JSON.parse(item.body) as Record<string, unknown>, criteria)) continue;
      if (!closed) return item;
      blocked = true;
    }
    return blocked ? { ...DONE, walk: { kind, blocked } } : null;
  }

  /** Leases an item under limits or fairness: the lease counts in the rate window and is the turn of its group. */
  private leaseCounted(item: Item, worker: string, now: number): Change {
    const change = this.lease(item, worker, now);
    const fair = this.config.fairness === 'groups';
    const ring = this.ring;
    if (ring === null && !fair) return change;
    const n = ++this.leaseCount;
    const key = groupKey(item.group);
    const stamp = this.stamps.get(key);
    const slot = ring === null ? 0 : ring.note(now);
    if (fair) {
      this.stamps.set(key, n);
      this.groups?.served(key);
    }
    change.lease = { n, at: now, group: fair ? key : null, slot, stamp };
    return change;
  }

  /** Takes back a lease's count (its change could not be made durable). */
  private unlease(mark: LeaseMark): void {
    if (this.leaseCount !== mark.n) return;
    this.leaseCount--;
    this.ring?.unnote(mark.slot);
    if (mark.group !== null) {
      if (mark.stamp === undefined) this.stamps.delete(mark.group);
      else this.stamps.set(mark.group, mark.stamp);
      this.groups?.served(mark.group);
    }
  }

  /** Items by status, as kept: O(1). */
  counts(): Record<ItemStatus, number> {
    return { ...this.tally };
  }

  /**
   * The first pending items in claim order, at most `limit`: the first claimable ones and the first
   * of those waiting for their time, merged.
   */
  oldestPending(limit: number): Item[] {
    const out: Item[] = [];
    for (const walk of [this.pending.walk(START), this.waiting.walk(START)]) {
      let n = 0;
      for (const item of walk) {
        if (n++ >= limit) break;
        out.push(item);
      }
    }
    return out.sort(rules.claimOrder).slice(0, limit);
  }

  /** postedAt of the oldest pending item, or null. */
  oldestPendingAt(): number | null {
    const a = this.pending.oldestPostedAt();
    const b = this.waiting.oldestPostedAt();
    return a === null ? b : b === null ? a : Math.min(a, b);
  }

  /** Items under a lease (claimed or processing), soonest end first, at most `limit`. */
  leased(limit: number): Item[] {
    const seen = new Set<Item>();
    for (const [at, item] of this.leases.entries()) {
      if ((item.status === 'claimed' || item.status === 'processing') && item.leaseUntil === at && this.items.get(item.id) === item) seen.add(item);
    }
    return [...seen].sort((a, b) => a.leaseUntil! - b.leaseUntil! || a.ord - b.ord).slice(0, limit);
  }
}

/**
 * Items in claim order (decisions §8.1): a B+tree by `ord` per priority. Priority 0 (most queues
 * use no other) has its own field, so the plain path looks at one tree. `ranks` lists the
 * priorities that have a tree, highest first: at most 201, so the first item is found in constant
 * time plus O(log n).
 */
class ClaimOrder {
  private readonly zero: BTree<number, Item> = new BTree<number, Item>();
  private readonly trees = new Map<number, BTree<number, Item>>([[0, this.zero]]);
  private ranks: number[] = [0];

  add(item: Item): void {
    const priority = item.priority;
    if (priority === 0) this.zero.set(item.ord, item);
    else this.treeOf(priority).set(item.ord, item);
  }

  /** Takes the item out; false when it was not here. */
  remove(item: Item): boolean {
    const tree = item.priority === 0 ? this.zero : this.trees.get(item.priority);
    return tree !== undefined && tree.get(item.ord) === item && tree.delete(item.ord);
  }

  /** The first item of priority `priority`. */
  firstAt(priority: number): Item | undefined {
    const tree = this.trees.get(priority);
    return tree !== undefined && tree.size > 0 ? tree.get(tree.minKey()!) : undefined;
  }

  /** The items of priority `priority` after claim order `afterOrd`, in order. */
  *walkAt(priority: number, afterOrd: number): Iterable<Item> {
    const tree = this.trees.get(priority);
    if (tree !== undefined) for (const [, item] of tree.entries(afterOrd + 1)) yield item;
  }

  /** The priorities that hold an item. */
  *priorities(): Iterable<number> {
    for (const [priority, tree] of this.trees) if (tree.size > 0) yield priority;
  }

  first(): Item | undefined {
    if (this.ranks.length === 1) return this.zero.size > 0 ? this.zero.get(this.zero.minKey()!) : undefined;
    for (const priority of this.ranks) {
      const tree = this.trees.get(priority)!;
      if (tree.size > 0) return tree.get(tree.minKey()!);
    }
    return undefined;
  }

  /** The items after place `after`, in claim order. */
  *walk(after: Place): Iterable<Item> {
    for (const priority of this.ranks) {
      if (priority > after.priority) continue;
      const tree = this.trees.get(priority)!;
      for (const [, item] of tree.entries(priority === after.priority ? after.ord + 1 : undefined)) yield item;
    }
  }

  /** The earliest postedAt: each tree's first item is its oldest. */
  oldestPostedAt(): number | null {
    let at: number | null = null;
    for (const tree of this.trees.values()) {
      const item = tree.size > 0 ? tree.get(tree.minKey()!)! : undefined;
      if (item !== undefined && (at === null || item.postedAt < at)) at = item.postedAt;
    }
    return at;
  }

  private treeOf(priority: number): BTree<number, Item> {
    let tree = this.trees.get(priority);
    if (!tree) {
      this.trees.set(priority, (tree = new BTree<number, Item>()));
      this.ranks = [...this.trees.keys()].sort((a, b) => b - a);
    }
    return tree;
  }
}

/** A place in claim order: a criteria walk's position (the last item it checked). */
export interface Place {
  readonly priority: number;
  readonly ord: number;
  /** A walk of a queue under limits or fairness (decisions §8.5): which walk, and what it found so far. */
  readonly walk?: FlowWalk;
}

interface FlowWalk {
  kind: 'any' | 'open' | 'blocked' | 'fair';
  /** `open`: it passed over a matching item of a group at groupMaxActive. */
  blocked?: boolean;
  /** `fair`: the groups looked through at this priority, and the group `ord` is in. */
  done?: Set<string>;
  group?: string;
}

/** Before every item. */
const START: Place = { priority: Infinity, ord: 0 };

/** After every item: a walk that ended. */
const DONE: Place = { priority: -Infinity, ord: Infinity };

/** Whether place `p` comes before the item of `priority` and `ord` in claim order. */
function before(p: Place, priority: number, ord: number): boolean {
  return p.priority > priority || (p.priority === priority && p.ord < ord);
}

/** Whether a JSON value holds a number JSON text cannot write back (Infinity, from a literal past a double's range). */
function hasNonFinite(value: unknown): boolean {
  if (typeof value === 'number') return !Number.isFinite(value);
  if (typeof value !== 'object' || value === null) return false;
  for (const v of Array.isArray(value) ? value : Object.values(value)) if (hasNonFinite(v)) return true;
  return false;
}

/** Where a group is filed in a priority's order of groups: its last turn (fairness), then its first claimable item at that priority. */
interface GroupPlace {
  readonly turn: number;
  readonly ord: number;
}

function byTurn(a: GroupPlace, b: GroupPlace): number {
  if (a.turn !== b.turn) return a.turn < b.turn ? -1 : 1;
  return a.ord - b.ord;
}

interface Group {
  readonly key: string;
  /** Its claimable items, in claim order. */
  readonly items: ClaimOrder;
  count: number;
  leased: number;
  /** Where it is filed, by priority: only while it holds an item of that priority and is below groupMaxActive. */
  readonly filed: Map<number, GroupPlace>;
}

/**
 * decisions §8.5, for a queue with fairness "groups" or groupMaxActive: each group's claimable
 * items in claim order, and for each priority the groups that hold a claimable item of it and are
 * below groupMaxActive, ordered by (last turn, first item) under fairness (a group never served
 * has turn −∞: before every other) or by first item alone without it. A claim reads the highest
 * priority's first group and that group's first item: O(log groups) plus the ≤ 201 priorities,
 * whatever the number of items. A group at groupMaxActive is taken out of every order (never
 * walked), and put back when a lease ends; a group with nothing claimable is in no order, and is
 * forgotten once it holds no lease either (its turn is kept apart, in the queue's stamps). Each
 * change of an item, a lease count or a turn refiles one group: O(log groups) per priority it holds.
 */
class GroupIndex {
  private readonly groups = new Map<string, Group>();
  private readonly orders = new Map<number, BTree<GroupPlace, Group>>();
  /** The priorities that have an order, highest first. */
  private ranks: number[] = [];
  /** Groups holding a claimable item. */
  waiting = 0;
  /** Those of them at groupMaxActive. */
  blocked = 0;

  constructor(
    private readonly cap: number,
    private readonly fair: boolean,
    private readonly stamps: ReadonlyMap<string, number>,
  ) {}

  add(item: Item): void {
    const key = groupKey(item.group);
    let g = this.groups.get(key);
    if (!g) this.groups.set(key, (g = { key, items: new ClaimOrder(), count: 0, leased: 0, filed: new Map() }));
    this.account(g, -1);
    g.items.add(item);
    g.count++;
    this.account(g, 1);
    this.refile(g, item.priority);
  }

  remove(item: Item): void {
    const g = this.groups.get(groupKey(item.group));
    if (!g || !g.items.remove(item)) return;
    this.account(g, -1);
    g.count--;
    this.account(g, 1);
    this.refile(g, item.priority);
    this.forget(g);
  }

  /** A lease of the group began (1) or ended (−1). */
  leased(key: string, d: 1 | -1): void {
    let g = this.groups.get(key);
    if (!g) this.groups.set(key, (g = { key, items: new ClaimOrder(), count: 0, leased: 0, filed: new Map() }));
    const was = g.leased >= this.cap;
    this.account(g, -1);
    g.leased += d;
    this.account(g, 1);
    if (was !== g.leased >= this.cap) this.refileAll(g);
    this.forget(g);
  }

  /** The group's turn changed. */
  served(key: string): void {
    const g = this.groups.get(key);
    if (g) this.refileAll(g);
  }

  saturated(key: string): boolean {
    const g = this.groups.get(key);
    return g !== undefined && g.leased >= this.cap;
  }

  /** The item a claim without criteria takes: the first group's first item at the highest priority. */
  first(): Item | undefined {
    for (const priority of this.ranks) {
      const order = this.orders.get(priority)!;
      if (order.size > 0) return order.get(order.minKey()!)!.items.firstAt(priority);
    }
    return undefined;
  }

  /**
   * The item a claim with criteria takes under fairness: at the highest priority that holds a
   * matching item of a group below groupMaxActive, the first such group in turn order, its first
   * matching item. Groups are looked through in turn order, each group's items at that priority
   * in claim order.
   *
   * Bound: at most `budget` bodies are parsed per step (the embedded store passes CLAIM_STEP and
   * lets other requests run between steps); the place returned names the priority, the groups
   * already looked through there and where in the current group the walk stopped. Safe because a
   * body never changes: a group looked through holds no matching item at that priority unless one
   * became claimable since (which a later claim finds), so over all its steps a claim parses each
   * claimable item at most once, and a step costs at most `budget` parses plus O(log groups) per
   * group passed, however many items or idle groups the queue holds. If other claims change the
   * turns between steps, the walk goes on in the order as it is then, skipping the groups it has
   * looked through.
   */
  fairMatch(criteria: Criteria, budget: number, after: Place | null): Item | Place | null {
    const resume = after?.walk?.kind === 'fair' ? after : null;
    let parsed = 0;
    for (const priority of this.ranks) {
      if (resume !== null && priority > resume.priority) continue;
      const here = resume !== null && priority === resume.priority;
      const done = here ? resume.walk!.done! : new Set<string>();
      for (const [, g] of this.orders.get(priority)!.entries()) {
        if (done.has(g.key)) continue;
        let last = here && resume.walk!.group === g.key ? resume.ord : 0;
        for (const item of g.items.walkAt(priority, last)) {
          if (parsed === budget) return { priority, ord: last, walk: { kind: 'fair', done, group: g.key } };
          parsed++;
          if (matches(JSON.parse(item.body) as Record<string, unknown>, criteria)) return item;
          last = item.ord;
        }
        done.add(g.key);
      }
    }
    return null;
  }

  /** Counts the group out (−1) or in (1) of {@link waiting} and {@link blocked}. */
  private account(g: Group, d: 1 | -1): void {
    if (g.count === 0) return;
    this.waiting += d;
    if (g.leased >= this.cap) this.blocked += d;
  }

  private forget(g: Group): void {
    if (g.count === 0 && g.leased === 0) this.groups.delete(g.key);
  }

  private refileAll(g: Group): void {
    const priorities = new Set(g.filed.keys());
    for (const priority of g.items.priorities()) priorities.add(priority);
    for (const priority of priorities) this.refile(g, priority);
  }

  /** Files the group where it now belongs in the order of `priority` (or in none). */
  private refile(g: Group, priority: number): void {
    const old = g.filed.get(priority);
    if (old !== undefined) {
      this.orders.get(priority)!.delete(old);
      g.filed.delete(priority);
    }
    if (g.leased >= this.cap) return;
    const head = g.items.firstAt(priority);
    if (head === undefined) return;
    const place: GroupPlace = { turn: this.fair ? (this.stamps.get(g.key) ?? -Infinity) : 0, ord: head.ord };
    let order = this.orders.get(priority);
    if (!order) {
      this.orders.set(priority, (order = new BTree<GroupPlace, Group>(undefined, byTurn)));
      this.ranks = [...this.orders.keys()].sort((a, b) => b - a);
    }
    order.set(place, g);
    g.filed.set(priority, place);
  }
}
