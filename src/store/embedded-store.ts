import { randomBytes } from 'node:crypto';
import { resolveQueue, type QueueConfig } from '../engine/config.js';
import type { Criteria } from '../engine/criteria.js';
import { isTerminal, type ItemStatus } from '../engine/item.js';
import { Queue, type Change, type Item, type Outcome } from '../engine/queue.js';
import { deleteRecord, eventsRecord, itemRecord, Journal, markRecord, updateRecord, type HistoryMark } from './journal.js';
import type { Claimed, ClaimInput, EventBatch, PayloadKind, PostInput, PostOutcome, QueueRef, StatusRecord, Store, StoreHooks, SubmitOutcome } from './store.js';
import { jsonString } from '../json-text.js';

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
  /** The waiter was handed an item: its timeout and hang-up no longer apply. */
  disarm: () => void;
  done: (claimed: Claimed | null) => void;
}

interface QueueSlot {
  key: string;
  host: string;
  name: string;
  /** The start of every task event of this queue, as JSON text: `"host":…,"queue":…`. */
  eventPrefix: string;
  /** The key as JSON text, for journal records. */
  keyJson: string;
  queue: Queue;
  waiters: ClaimWaiter[];
  timer: NodeJS.Timeout | undefined;
  timerAt: number;
}

const DEFAULT_CONFIG = resolveQueue({});

/** Pending bodies a claim with criteria parses before it lets other requests run. */
export const CLAIM_STEP = 20_000;

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
  /** Number of the last task event written to the journal. */
  private eventSeq = 0;
  /** How far the task history is known to hold events, and the last delivery to it. */
  private mark: HistoryMark | null = null;
  private markWrittenAt = 0;
  private delivered: Promise<unknown> = Promise.resolve();
  /** Events written to the journal in this turn of the event loop, for the history once durable. */
  private outbox: Array<{ seq: number; ts: number; lines: string }> = [];
  private outboxDurable: Promise<void> = Promise.resolve();

  constructor(private readonly options: EmbeddedStoreOptions) {
    this.journal = new Journal({ dir: options.dir, warn: options.warn, compactBytes: options.compactBytes });
    this.now = options.now ?? Date.now;
  }

  async open(): Promise<void> {
    const { items: loaded, events } = await this.journal.open();
    // Catch the task history up: cut it back to where it was known to be, then append what the journal holds beyond.
    this.eventSeq = events.lastSeq;
    const start = await this.options.hooks.recoverEvents(events.mark);
    this.mark = events.mark ?? { seq: events.lastSeq, ...start };
    for (const [seq, batch] of events.pending) {
      if (batch.length > 0) this.deliver(seq, { ts: batch[0]!.ts, lines: batch.map((e) => `${JSON.stringify(e)}\n`).join('') });
    }
    await this.delivered;
    // From here on a restart knows where the history stands, even if it stops before the next mark.
    await this.journal.append(markRecord(this.mark));
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
    await this.journal.sync();
    await this.delivered;
    if (this.mark) this.journal.appendLater(markRecord(this.mark));
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
    // With criteria, a claim may have a long backlog to walk: it parses CLAIM_STEP bodies at a
    // time and lets other requests run between steps (with a million waiting, about 15 ms each).
    let step = slot.queue.claimStep(input.worker, input.criteria, this.now(), CLAIM_STEP, 0);
    while (typeof step === 'number') {
      await new Promise((resolve) => setImmediate(resolve));
      if (this.closed || input.signal?.aborted) return null;
      step = slot.queue.claimStep(input.worker, input.criteria, this.now(), CLAIM_STEP, step);
    }
    const change = step;
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
        disarm: () => {
          clearTimeout(timer);
          input.signal?.removeEventListener('abort', giveUp);
        },
        done: (claimed) => {
          waiter.disarm();
          resolve(claimed);
        },
      };
      const giveUp = (): void => {
        const i = slot.waiters.indexOf(waiter);
        // Not in the list: an item was handed to it and is being written; that answer will come.
        if (i === -1) return;
        slot.waiters.splice(i, 1);
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
      const host = key.slice(0, slash);
      const name = key.slice(slash + 1);
      slot = {
        key,
        host,
        name,
        eventPrefix: `"host":${JSON.stringify(host)},"queue":${JSON.stringify(name)}`,
        keyJson: JSON.stringify(key),
        queue: new Queue(config),
        waiters: [],
        timer: undefined,
        timerAt: Infinity,
      };
      this.slots.set(key, slot);
    }
    return slot;
  }

  /**
   * Journals changes with their task events in one write, resolving once it is durable (and the
   * payload archived). The history file gets the events right after, off the request's path.
   */
  private commit(slot: QueueSlot, changes: Change[], created = false, archive?: { kind: PayloadKind; body: string }): Promise<unknown> {
    const { records, eventList, lines, count, ts } = this.describe(slot, changes, created);
    const seq = (this.eventSeq += count);
    const durable = this.journal.append(count > 0 ? records + eventsRecord(seq, eventList) : records);
    if (count > 0) this.toDeliver(seq, ts, lines, durable);
    this.afterChange(slot, changes);
    if (!archive) return durable;
    return Promise.all([durable, this.options.hooks.archive(slot.host, slot.name, changes[0]!.item.id, archive.kind, archive.body)]);
  }

  /** The same for changes nobody is waiting to acknowledge (time-driven ones, fetch stamps). */
  private commitLater(slot: QueueSlot, changes: Change[]): void {
    this.commit(slot, changes).catch((err: Error) => this.options.warn(`a change could not be written: ${err.message}`));
  }

  /**
   * Queues events for the history. Journal appends resolve in order, so once the last append of
   * this turn is durable all of them are: one delivery per turn rather than one per change.
   */
  private toDeliver(seq: number, ts: number, lines: string, durable: Promise<void>): void {
    if (this.outbox.length === 0) {
      queueMicrotask(() => {
        const batch = this.outbox;
        this.outbox = [];
        this.outboxDurable.then(
          () => {
            const first = batch[0]!;
            const last = batch[batch.length - 1]!;
            // One history append for the lot, unless they straddle midnight (UTC).
            if (Math.floor(first.ts / 86_400_000) === Math.floor(last.ts / 86_400_000)) {
              this.deliver(last.seq, { ts: first.ts, lines: batch.length === 1 ? first.lines : batch.map((b) => b.lines).join('') });
            } else {
              for (const b of batch) this.deliver(b.seq, { ts: b.ts, lines: b.lines });
            }
          },
          () => undefined,
        );
      });
    }
    this.outbox.push({ seq, ts, lines });
    this.outboxDurable = durable;
  }

  /**
   * Hands durable events to the history, in order, and records how far it got; the position goes
   * into the journal now and then, so a restart re-delivers only what may be missing.
   */
  private deliver(seq: number, batch: EventBatch): void {
    this.delivered = this.options.hooks.events(batch).then(
      (position) => {
        // Deliveries complete in order; a mark never moves back.
        if (this.mark && seq <= this.mark.seq) return;
        this.mark = { seq, ...position };
        const now = this.now();
        if (now - this.markWrittenAt >= 250 && !this.closed) {
          this.markWrittenAt = now;
          this.journal.appendLater(markRecord(this.mark));
        }
      },
      (err: Error) => this.options.warn(`task history: ${err.message}`),
    );
  }

  /**
   * The journal records of changes and their task events as JSON text. Built by hand: this runs
   * for every change, and only strings that may need escaping (a worker name) are serialised.
   */
  private describe(slot: QueueSlot, changes: Change[], created: boolean): { records: string; eventList: string; lines: string; count: number; ts: number } {
    let records = '';
    let eventList = '';
    let lines = '';
    let count = 0;
    const ts = this.now();
    for (const change of changes) {
      const item = change.item;
      records += change.purged ? deleteRecord(slot.keyJson, item.id) : created ? itemRecord(slot.keyJson, item) : updateRecord(slot.keyJson, item);
      for (const e of change.events) {
        const worker = e.worker === undefined ? '' : `,"worker":${jsonString(e.worker)}`;
        // Field order as in TaskEvent: ts, host, queue, id, event, attempts, status, worker.
        const event = `{"ts":${ts},${slot.eventPrefix},"id":"${item.id}","event":"${e.event}","attempts":${item.attempts},"status":"${item.status}"${worker}}`;
        eventList += count > 0 ? `,${event}` : event;
        lines += `${event}\n`;
        count++;
      }
    }
    return { records, eventList, lines, count, ts };
  }

  private afterChange(slot: QueueSlot, changes: Change[]): void {
    for (const change of changes) {
      if (isTerminal(change.item.status) || change.purged) this.wakeItem(slot.key, change.item.id);
    }
    this.schedule(slot);
    if (this.journal.wantsSnapshot()) {
      const historyMark = async (): Promise<HistoryMark | null> => {
        await this.delivered;
        return this.mark;
      };
      this.journal.snapshot(() => this.allItems(), historyMark).catch((err: Error) => this.options.warn(`snapshot failed: ${err.message}`));
    }
  }

  private *allItems(): Iterable<[queueJson: string, item: Item]> {
    for (const slot of this.slots.values()) for (const item of slot.queue.items.values()) yield [slot.keyJson, item];
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
      waiter.disarm();
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
