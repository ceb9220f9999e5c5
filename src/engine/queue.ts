import BTreeModule from 'sorted-btree';
import type { QueueConfig } from './config.js';
import { matches, type Criteria } from './criteria.js';
import { DeadlineHeap } from './deadline-heap.js';
import type { ItemStatus, TaskEventKind } from './item.js';
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
    return (this.work ??= { idempotencyKey: null, priority: 0, group: null, updatedAt: this.postedAt, finishedAt: null, attempts: 0, leaseWorker: null, leaseUntil: null, availableAt: 0, progress: null, result: null, error: null, fetchedAt: null, links: null });
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
  events: Array<{ event: TaskEventKind; worker?: string; schedule?: string; occurrence?: number; deadLetter?: string; redrivenTo?: string }>;
  /** The item left the queue for good (retention): the store deletes it. */
  purged?: boolean;
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
  private readonly leases = new DeadlineHeap<Item>();
  private readonly delayed = new DeadlineHeap<Item>();
  private readonly timeouts = new DeadlineHeap<Item>();
  private readonly retention = new DeadlineHeap<Item>();
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

  constructor(public config: QueueConfig) {}

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
      this.tally[previous.status]--;
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
    this.tally[item.status]++;
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
    if (before === undefined) return this.remove(item.id);
    this.unfile(item);
    const present = this.items.get(item.id) === item;
    if (present) this.tally[item.status]--;
    item.restoreState(before);
    this.tally[item.status]++;
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
    this.tally[item.status]--;
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

  /** Makes an item claimable; one that kept an earlier place is checked again by criteria claims. */
  private makePending(item: Item): void {
    this.pending.add(item);
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
    this.pending.remove(item);
    this.waiting.remove(item);
  }

  /** Leases the oldest pending item that passes every criterion, or returns null (always while paused). */
  claim(worker: string, criteria: Criteria | undefined, now: number): Change | null {
    return this.claimStep(worker, criteria, now, Infinity, null) as Change | null;
  }

  /**
   * A claim that parses at most `budget` pending bodies against its criteria, so that a long walk
   * can be cut into steps with other work between them. Returns the change, null when no pending
   * item matches, or (budget spent) the claim order it checked through: call again, with that as
   * `after`, to go on. The walk goes on from where claims with the same criteria found nothing
   * (which an item made pending again behind it moves back), or from `after` if the queue no
   * longer remembers these criteria.
   */
  claimStep(worker: string, criteria: Criteria | undefined, now: number, budget: number, after: Place | null): Change | null | Place {
    if (this.paused) return null;
    let found: Item | undefined;
    if (criteria === undefined || Object.keys(criteria).length === 0) {
      found = this.pending.first();
      return found ? this.lease(found, worker, now) : null;
    }
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
    return found ? this.lease(found, worker, now) : null;
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
  result(id: string, body: string, now: number): Outcome | null {
    const item = this.items.get(id);
    return item ? this.submitted(item, rules.result(item, body, now)) : null;
  }

  /** Records an error; the item is re-queued, or failed when its attempts are used up (decisions §3.4). */
  error(id: string, body: string, now: number, wish?: rules.RetryWish): Outcome | null {
    const item = this.items.get(id);
    return item ? this.submitted(item, rules.error(item, this.config, body, now, wish)) : null;
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
    this.tally[item.status]--;
    item.assign(t.record);
    this.tally[item.status]++;
    const now = rules.deadlines(item, this.config);
    if (now.lease !== null && now.lease !== was.lease) this.leases.push(now.lease, item);
    if (now.retry !== null && now.retry !== was.retry) this.delayed.push(now.retry, item);
    if (now.timeout !== null && now.timeout !== was.timeout) this.timeouts.push(now.timeout, item);
    if (now.retention !== null && now.retention !== was.retention) this.retention.push(now.retention, item);
    this.fileIfPending(item, now.retry);
    return { item, before, events: t.events };
  }

  /** Applies every time-driven rule that is due at `now` and returns what changed. */
  tick(now: number): Change[] {
    const changes: Change[] = [];
    const config = this.config;
    const run = (heap: DeadlineHeap<Item>, rule: (r: rules.ItemRecord, c: QueueConfig, now: number) => rules.Transition | null, deadline?: (d: rules.Deadlines) => number | null): void => {
      for (let item = heap.popDue(now); item; item = heap.popDue(now)) {
        if (this.items.get(item.id) !== item) continue;
        const t = rule(item, config, now);
        if (t) {
          changes.push(this.apply(item, t));
          continue;
        }
        // A definition change may have moved this deadline later: it is filed again where it now is.
        const at = deadline?.(rules.deadlines(item, config)) ?? null;
        if (at !== null && at > now) heap.push(at, item);
      }
    };
    run(this.leases, rules.leaseEndedUnlessTimedOut);
    run(this.delayed, rules.retryAvailable);
    run(this.timeouts, rules.timedOut, (d) => d.timeout);
    run(this.retention, rules.retentionEnded, (d) => d.retention);
    return changes;
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
    const timeoutSooner = config.timeoutMs !== null && (old.timeoutMs === null || config.timeoutMs < old.timeoutMs);
    const retentionSooner = config.retainFrom !== old.retainFrom || config.retainMs < old.retainMs;
    if (!timeoutSooner && !retentionSooner) return;
    for (const item of this.items.values()) {
      const d = rules.deadlines(item, config);
      if (timeoutSooner && d.timeout !== null) this.timeouts.push(d.timeout, item);
      if (retentionSooner && d.retention !== null) this.retention.push(d.retention, item);
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

  remove(item: Item): void {
    const tree = item.priority === 0 ? this.zero : this.trees.get(item.priority);
    if (tree !== undefined && tree.get(item.ord) === item) tree.delete(item.ord);
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
}

/** Before every item. */
const START: Place = { priority: Infinity, ord: 0 };

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
