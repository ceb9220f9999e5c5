import { randomBytes } from 'node:crypto';
import { resolveQueue, type QueueConfig } from '../engine/config.js';
import type { Criteria } from '../engine/criteria.js';
import { isTerminal, type ItemStatus, type TaskEvent } from '../engine/item.js';
import { Queue, type Change, type Item, type Outcome } from '../engine/queue.js';
import { deleteRecord, itemRecord, Journal, updateRecord } from './journal.js';
import type { Claimed, ClaimInput, PayloadKind, PostInput, PostOutcome, QueueRef, StatusRecord, Store, StoreHooks, SubmitOutcome } from './store.js';

export interface EmbeddedStoreOptions {
  /** `<root>/_svcq/store` */
  dir: string;
  hooks: StoreHooks;
  /** A queue's current rules, for time-driven changes made outside any request (undefined: keep the last known). */
  configFor: (key: string) => QueueConfig | undefined;
  warn: (line: string) => void;
  /** Journal bytes past which a snapshot is taken (default 64 MiB). */
  compactBytes?: number;
  now?: () => number;
}

interface ClaimWaiter {
  worker: string;
  criteria: Criteria | undefined;
  done: (claimed: Claimed | null) => void;
}

interface QueueSlot {
  key: string;
  host: string;
  name: string;
  queue: Queue;
  waiters: ClaimWaiter[];
  timer: NodeJS.Timeout | undefined;
  timerAt: number;
}

const DEFAULT_CONFIG = resolveQueue({});

/**
 * The embedded store: every live item in memory (a {@link Queue} per queue), every change in an
 * append-only journal that is group-committed before the change is acknowledged, and snapshots
 * that keep the journal short (see journal.ts). Long polls wait on in-memory lists and are woken
 * by the change that makes them answerable, never by polling.
 */
export class EmbeddedStore implements Store {
  private readonly journal: Journal;
  private readonly slots = new Map<string, QueueSlot>();
  private readonly itemWaiters = new Map<string, Array<() => void>>();
  private readonly now: () => number;
  private closed = false;
  private ids = Buffer.alloc(0);
  private idsAt = 0;

  constructor(private readonly options: EmbeddedStoreOptions) {
    this.journal = new Journal({ dir: options.dir, warn: options.warn, compactBytes: options.compactBytes });
    this.now = options.now ?? Date.now;
  }

  async open(): Promise<void> {
    const loaded = await this.journal.open();
    for (const [key, items] of loaded) {
      if (items.size === 0) continue;
      const slot = this.slotFor(key, this.options.configFor(key) ?? DEFAULT_CONFIG);
      for (const item of items.values()) slot.queue.restore(item);
    }
    // Leases that ended while the server was down are re-queued (or failed) by the usual rule.
    for (const slot of this.slots.values()) this.runTick(slot);
  }

  async close(): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    for (const slot of this.slots.values()) {
      clearTimeout(slot.timer);
      for (const waiter of slot.waiters.splice(0)) waiter.done(null);
    }
    for (const wake of [...this.itemWaiters.values()].flat()) wake();
    this.itemWaiters.clear();
    await this.journal.close();
  }

  async post(ref: QueueRef, input: PostInput): Promise<PostOutcome> {
    const slot = this.prepare(ref);
    const now = this.now();
    if (input.idempotencyKey !== undefined) {
      const earlier = slot.queue.byIdempotencyKey(input.idempotencyKey);
      if (earlier) {
        await this.journal.sync();
        return { id: earlier.id, status: earlier.status, created: false };
      }
    }
    const change = slot.queue.post({ id: this.newId(slot.queue), body: input.body, postedBy: input.postedBy, idempotencyKey: input.idempotencyKey ?? null }, now);
    const durable = this.commit(slot, [change], true, ref.config.archivePayloads ? { kind: 'item', body: input.body } : undefined);
    const outcome: PostOutcome = { id: change.item.id, status: change.item.status, created: true };
    this.offer(slot, change.item);
    await durable;
    return outcome;
  }

  async claim(ref: QueueRef, input: ClaimInput): Promise<Claimed | null> {
    const slot = this.prepare(ref);
    const change = slot.queue.claim(input.worker, input.criteria, this.now());
    if (change) {
      const claimed = claimedOf(change.item);
      await this.commit(slot, [change]);
      return claimed;
    }
    if (input.waitMs <= 0 || this.closed || input.signal?.aborted) return null;
    return new Promise<Claimed | null>((resolve) => {
      const waiter: ClaimWaiter = {
        worker: input.worker,
        criteria: input.criteria,
        done: (claimed) => {
          clearTimeout(timer);
          input.signal?.removeEventListener('abort', giveUp);
          resolve(claimed);
        },
      };
      const giveUp = (): void => {
        const i = slot.waiters.indexOf(waiter);
        if (i !== -1) slot.waiters.splice(i, 1);
        waiter.done(null);
      };
      const timer = setTimeout(giveUp, input.waitMs);
      input.signal?.addEventListener('abort', giveUp, { once: true });
      slot.waiters.push(waiter);
    });
  }

  async get(ref: QueueRef, id: string, waitMs: number, signal?: AbortSignal): Promise<StatusRecord | null> {
    const slot = this.prepare(ref);
    let item = slot.queue.items.get(id);
    if (item && !isTerminal(item.status) && waitMs > 0 && !this.closed && !signal?.aborted) {
      await this.waitForItem(ref.key, id, waitMs, signal);
      item = slot.queue.items.get(id);
    }
    if (!item) return null;
    const stamp = slot.queue.fetched(item, this.now());
    if (stamp) this.commitLater(slot, [stamp]);
    const record = recordOf(item);
    // What is shown must be what a crash would keep: wait for anything still being written.
    await this.journal.sync();
    return record;
  }

  progress(ref: QueueRef, id: string, body: string): Promise<SubmitOutcome | null> {
    const slot = this.prepare(ref);
    return this.submit(slot, slot.queue.progress(id, body, this.now()), ref.config.archivePayloads ? { kind: 'progress', body } : undefined);
  }

  result(ref: QueueRef, id: string, body: string): Promise<SubmitOutcome | null> {
    const slot = this.prepare(ref);
    return this.submit(slot, slot.queue.result(id, body, this.now()), ref.config.archivePayloads ? { kind: 'result', body } : undefined);
  }

  error(ref: QueueRef, id: string, body: string): Promise<SubmitOutcome | null> {
    const slot = this.prepare(ref);
    return this.submit(slot, slot.queue.error(id, body, this.now()), ref.config.archivePayloads ? { kind: 'error', body } : undefined);
  }

  cancel(ref: QueueRef, id: string): Promise<SubmitOutcome | null> {
    const slot = this.prepare(ref);
    return this.submit(slot, slot.queue.cancel(id, this.now()));
  }

  async counts(ref: QueueRef): Promise<Partial<Record<ItemStatus, number>>> {
    return this.slots.get(ref.key)?.queue.counts() ?? {};
  }

  private async submit(slot: QueueSlot, outcome: Outcome | null, archive?: { kind: PayloadKind; body: string }): Promise<SubmitOutcome | null> {
    if (!outcome) return null;
    if (outcome.change) {
      const durable = this.commit(slot, [outcome.change], false, archive);
      // An error that re-queued the item makes it claimable again at once.
      if (outcome.change.item.status === 'pending') this.offer(slot, outcome.change.item);
      await durable;
    } else {
      await this.journal.sync();
    }
    return { accepted: outcome.accepted, status: outcome.status };
  }

  /** The queue's slot with its rules brought up to date, and anything due applied first. */
  private prepare(ref: QueueRef): QueueSlot {
    if (this.closed) throw new Error('the store is closed');
    const slot = this.slotFor(ref.key, ref.config);
    if (slot.queue.config !== ref.config) slot.queue.reconfigure(ref.config);
    const next = slot.queue.nextDeadline();
    if (next !== null && next <= this.now()) this.runTick(slot);
    return slot;
  }

  private slotFor(key: string, config: QueueConfig): QueueSlot {
    let slot = this.slots.get(key);
    if (!slot) {
      const slash = key.indexOf('/');
      slot = { key, host: key.slice(0, slash), name: key.slice(slash + 1), queue: new Queue(config), waiters: [], timer: undefined, timerAt: Infinity };
      this.slots.set(key, slot);
    }
    return slot;
  }

  /** Journals changes and their events (and a payload), resolving once all of it is durable. */
  private commit(slot: QueueSlot, changes: Change[], created = false, archive?: { kind: PayloadKind; body: string }): Promise<unknown> {
    const { records, events } = this.describe(slot, changes, created);
    const writes: Array<Promise<unknown>> = [this.journal.append(records)];
    if (events.length > 0) writes.push(this.options.hooks.events(events));
    if (archive) writes.push(this.options.hooks.archive(slot.host, slot.name, changes[0]!.item.id, archive.kind, archive.body));
    this.afterChange(slot, changes);
    return writes.length === 1 ? writes[0]! : Promise.all(writes);
  }

  /** The same for changes nobody is waiting to acknowledge (time-driven ones, fetch stamps). */
  private commitLater(slot: QueueSlot, changes: Change[]): void {
    const { records, events } = this.describe(slot, changes, false);
    this.journal.appendLater(records);
    if (events.length > 0) this.options.hooks.events(events).catch((err: Error) => this.options.warn(`task history: ${err.message}`));
    this.afterChange(slot, changes);
  }

  private describe(slot: QueueSlot, changes: Change[], created: boolean): { records: string; events: TaskEvent[] } {
    let records = '';
    const events: TaskEvent[] = [];
    const ts = this.now();
    for (const change of changes) {
      const item = change.item;
      records += change.purged ? deleteRecord(slot.key, item.id) : created ? itemRecord(slot.key, item) : updateRecord(slot.key, item);
      for (const e of change.events) {
        const event: TaskEvent = { ts, host: slot.host, queue: slot.name, id: item.id, event: e.event, attempts: item.attempts, status: item.status };
        if (e.worker !== undefined) event.worker = e.worker;
        events.push(event);
      }
    }
    return { records, events };
  }

  private afterChange(slot: QueueSlot, changes: Change[]): void {
    for (const change of changes) {
      if (isTerminal(change.item.status) || change.purged) this.wakeItem(slot.key, change.item.id);
    }
    this.schedule(slot);
    if (this.journal.wantsSnapshot()) {
      this.journal.snapshot(() => this.allItems()).catch((err: Error) => this.options.warn(`snapshot failed: ${err.message}`));
    }
  }

  private *allItems(): Iterable<[string, Item]> {
    for (const slot of this.slots.values()) for (const item of slot.queue.items.values()) yield [slot.key, item];
  }

  /** Hands a newly claimable item to the longest-waiting claim whose criteria it passes. */
  private offer(slot: QueueSlot, item: Item): void {
    for (let i = 0; i < slot.waiters.length; i++) {
      const waiter = slot.waiters[i]!;
      const change = slot.queue.claimItem(item, waiter.worker, waiter.criteria, this.now());
      if (!change) {
        if (item.status !== 'pending') return;
        continue;
      }
      slot.waiters.splice(i, 1);
      const claimed = claimedOf(item);
      this.commit(slot, [change]).then(
        () => waiter.done(claimed),
        (err: Error) => {
          this.options.warn(`claim could not be written: ${err.message}`);
          waiter.done(null);
        },
      );
      return;
    }
  }

  private runTick(slot: QueueSlot): void {
    const changes = slot.queue.tick(this.now());
    if (changes.length === 0) return this.schedule(slot);
    this.commitLater(slot, changes);
    for (const change of changes) if (change.item.status === 'pending' && !change.purged) this.offer(slot, change.item);
  }

  /** One timer per queue, at its next deadline. */
  private schedule(slot: QueueSlot): void {
    if (this.closed) return;
    const next = slot.queue.nextDeadline();
    if (next === null || next >= slot.timerAt) return;
    clearTimeout(slot.timer);
    slot.timerAt = next;
    slot.timer = setTimeout(() => {
      slot.timer = undefined;
      slot.timerAt = Infinity;
      const config = this.options.configFor(slot.key);
      if (config && config !== slot.queue.config) slot.queue.reconfigure(config);
      this.runTick(slot);
    }, Math.max(0, next - this.now()));
    slot.timer.unref();
  }

  private waitForItem(key: string, id: string, waitMs: number, signal?: AbortSignal): Promise<void> {
    return new Promise((resolve) => {
      const waitKey = `${key}\u0000${id}`;
      const list = this.itemWaiters.get(waitKey) ?? [];
      const wake = (): void => {
        clearTimeout(timer);
        signal?.removeEventListener('abort', wake);
        const current = this.itemWaiters.get(waitKey);
        if (current) {
          const i = current.indexOf(wake);
          if (i !== -1) current.splice(i, 1);
          if (current.length === 0) this.itemWaiters.delete(waitKey);
        }
        resolve();
      };
      const timer = setTimeout(wake, waitMs);
      signal?.addEventListener('abort', wake, { once: true });
      list.push(wake);
      this.itemWaiters.set(waitKey, list);
    });
  }

  private wakeItem(key: string, id: string): void {
    const list = this.itemWaiters.get(`${key}\u0000${id}`);
    if (list) for (const wake of [...list]) wake();
  }

  /** 16 lowercase hex characters, random, unique in the queue (decisions §3.5). */
  private newId(queue: Queue): string {
    for (;;) {
      if (this.idsAt + 8 > this.ids.length) {
        this.ids = randomBytes(4096);
        this.idsAt = 0;
      }
      const id = this.ids.toString('hex', this.idsAt, this.idsAt + 8);
      this.idsAt += 8;
      if (!queue.items.has(id)) return id;
    }
  }
}

function claimedOf(item: Item): Claimed {
  return { id: item.id, item: item.body, attempts: item.attempts, lease: { worker: item.leaseWorker ?? '', until: item.leaseUntil ?? 0 } };
}

function recordOf(item: Item): StatusRecord {
  return {
    id: item.id,
    status: item.status,
    postedBy: item.postedBy,
    postedAt: item.postedAt,
    updatedAt: item.updatedAt,
    finishedAt: item.finishedAt,
    attempts: item.attempts,
    progress: item.progress,
    result: item.result,
    error: item.error,
  };
}
