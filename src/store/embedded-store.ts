import { benchOff } from '../bench-off.js';
import { TurnSignal } from './turn-signal.js';
import { resolveQueue, type QueueConfig } from '../engine/config.js';
import { isTerminal, type ItemStatus, type TaskEventKind } from '../engine/item.js';
import * as rules from '../engine/rules.js';
import type { Delivery, RetryWish } from '../engine/rules.js';
import { DeadlineHeap } from '../engine/deadline-heap.js';
import { Queue, type Change, type Item, type LeaseMark, type Outcome, type Place, type SavedState } from '../engine/queue.js';
import { callbackRecord, deleteRecord, eventsRecord, flowRecord, itemRecord, Journal, leaseRecord, markRecord, pausedRecord, scheduleRecord, updateRecord, type HistoryMark } from './journal.js';
import { planSchedule, postedBy, scheduledOptions, scheduleView, type ScheduleSpec, type ScheduleState, type ScheduleView } from '../engine/schedules.js';
import type { WriteFn } from './append-file.js';
import { claimedOf, DEAD_LETTER_POSTER, REDRIVE_POSTER, fullCounts, statusOf, StoreUnavailable, type Claimed, type ClaimInput, type EventOutbox, type OutboxEntry, type PayloadKind, type PostInput, type PostOutcome, type QueueOverview, type BulkAction, type BulkOutcome, type QueueRef, type StagedPayload, type StatusRecord, type Store, type StoreHooks, type StoreObserver, type SubmitOutcome, TEXT_PIECE, type OwedCallback, type TakenCallback, type CallbackAttempt, type CallbackSettlement } from './store.js';
import { jsonString } from '../json-text.js';
import { RandomIds } from './random-ids.js';
import { claimTopic, itemTopic, type Notifier } from '../waiting/notifier.js';

/** The longest a Node timer waits (2^31 − 1 ms, about 24.8 days); a longer one fires after 1 ms. */
const MAX_TIMER_MS = 2 ** 31 - 1;

export interface EmbeddedStoreOptions {
  /** `<root>/_svcq/store` */
  dir: string;
  hooks: StoreHooks;
  /**
   * A queue's current rules, for time-driven changes made outside any request. Undefined: the
   * queue has no definition now, and it is kept as it is (decisions §2.4): nothing time-driven
   * applies to it until its definition is put back, and then under the rules put back.
   */
  configFor: (key: string) => QueueConfig | undefined;
  warn: (line: string) => void;
  /** Journal bytes past which a snapshot is taken (default 64 MiB). */
  compactBytes?: number;
  now?: () => number;
  /** The journal's write system call, for tests that make it fail. */
  write?: WriteFn;
  /** Told of every durable change a long poll may wait for (items to claim, an item become terminal). */
  notifier?: Notifier;
  /** Told of group commits and durable task events (metrics, rates). */
  observer?: StoreObserver;
}

interface QueueSlot {
  key: string;
  host: string;
  name: string;
  /** The start of every task event of this queue, as JSON text: `"host":…,"queue":…`. */
  eventPrefix: string;
  /** The key as JSON text, for journal records. */
  keyJson: string;
  /** The topic its claimable items are announced on. */
  claimTopic: string;
  queue: Queue;
  timer: NodeJS.Timeout | undefined;
  timerAt: number;
  /** The states of the queue's schedules, by name (decisions §8.3). */
  schedules: Map<string, ScheduleState>;
}

const DEFAULT_CONFIG = resolveQueue({});

/** Pending bodies a claim with criteria parses before it lets other requests run. */
export const CLAIM_STEP = 20_000;

/** The kinds of the changes' events, in order. */
function eventKinds(changes: Change[]): TaskEventKind[] {
  const kinds: TaskEventKind[] = [];
  for (const change of changes) for (const e of change.events) kinds.push(e.event);
  return kinds;
}

/** Items one step posts to other queues than its own, by queue (decisions §8.6: dead-letter copies, redriven items). */
type PostedElsewhere = Map<QueueSlot, Change[]>;

/** After a failed write, time-driven changes wait this long before they are tried again (not in a loop against a full disk). */
const RETRY_AFTER_FAILURE_MS = 1000;

/** Changes applied in memory (one commit's) whose journal write has not completed yet. */
interface Unconfirmed {
  /** The number of the commit's last change. */
  seq: number;
  slot: QueueSlot;
  changes: Change[];
  /** A change of the queue's own state (a pause): what takes it back. */
  undo?: () => void;
}

/**
 * The embedded store: every live item in memory (a {@link Queue} per queue), every change in an
 * append-only journal that is group-committed before the change is acknowledged, and snapshots
 * that keep the journal short (see journal.ts). Long polls wait on in-memory lists and are woken
 * by the change that makes them answerable, never by polling.
 */
export class EmbeddedStore implements Store, EventOutbox {
  private readonly journal: Journal;
  private readonly slots = new Map<string, QueueSlot>();
  private readonly now: () => number;
  private closed = false;
  private readonly ids = new RandomIds();
  /** Number of the last task event written to the journal. */
  private eventSeq = 0;
  /** The task history holds every event through this number (it said so through eventsDelivered). */
  private delivered = 0;
  private markWrittenAt = 0;
  /** The history's last mark found at start (see {@link recordedHistoryPosition}). */
  private loadedMark: HistoryMark | null = null;
  /** Durable events the history does not hold yet, oldest first (see EventOutbox). */
  private outbox: OutboxEntry[] = [];
  /** Told once entries enter the outbox. */
  private readonly eventsMade = new TurnSignal();
  /** Snapshots waiting for the history to hold every event through a number. */
  private deliveryWaiters: Array<{ seq: number; resolve: () => void; reject: (err: Error) => void }> = [];
  /**
   * Every change applied in memory and not yet on disk, oldest first. A failed write takes them
   * all back (see {@link takeBack}): memory then holds exactly what the disk holds.
   */
  private unconfirmed: Unconfirmed[] = [];
  private changeSeq = 0;
  /** Until when time-driven changes wait after a failed write; 0 while writes succeed. */
  private retryAt = 0;
  /**
   * Items of archiving queues purged since the store opened, by '<host>/<queue>/<id>', until start-up
   * has looked at the payloads a crash left staged (see {@link payloadText}, {@link stagedLookedAt}):
   * retention at start must not make a durable change's payload look like one of a change that never was.
   */
  private purgedSinceOpen: Map<string, Item> | undefined = new Map();
  /**
   * decisions §9.2: the callbacks owed, by id; `durable` once the write that made one owed is on
   * disk (only then may it be taken: a callback never tells of a change that was taken back).
   */
  private readonly callbacks = new Map<string, { c: OwedCallback; durable: boolean }>();
  /** The same by when each is due (an entry whose callback has changed or gone since is skipped when popped): a take reads only what is due. */
  private readonly callbacksDue = new DeadlineHeap<OwedCallback>();
  /**
   * Callbacks taken, by id, in the order their holds end (each is the callback's current state,
   * `dueAt` its hold's end). Kept apart from the heap so that a settled attempt's hold is deleted at
   * once: in the heap it would stay for the whole hold, a stale entry per callback delivered in the
   * last minute that every push and pop sifts past and the GC keeps moving. A hold that would end
   * before the last one here (a shorter hold, the clock set back) goes to the heap instead.
   */
  private readonly callbacksHeld = new Map<string, OwedCallback>();
  /** When the last hold in {@link callbacksHeld} ends. */
  private lastHeldUntil = -Infinity;
  /** decisions §9.2: callbacks owed and failing, by queue key (operators read them: never a scan). */
  private readonly callbackCounts = new Map<string, { owed: number; failing: number }>();
  /** decisions §9.2: told once this node's callbacks owed are durable. */
  private readonly owedMade = new TurnSignal();
  /** decisions §9.2: the callback delivery that takes the callbacks owed as they become durable (see holdOwnCallbacks). */
  private ownCallbacks: { holdMs: number; wants: () => boolean; deliver: (born: TakenCallback[]) => void } | undefined;

  constructor(private readonly options: EmbeddedStoreOptions) {
    this.journal = new Journal({ dir: options.dir, warn: options.warn, compactBytes: options.compactBytes, write: options.write, onFailure: (err) => this.takeBack(err), onGroup: options.observer && ((seconds, appends) => options.observer!.committed(seconds, appends)) });
    this.now = options.now ?? Date.now;
  }

  async open(): Promise<void> {
    const { items: loaded, paused, schedules, flows, callbacks, events } = await this.journal.open();
    // The outbox starts with every durable event the history did not say it holds.
    this.eventSeq = events.lastSeq;
    this.delivered = events.mark?.seq ?? 0;
    this.loadedMark = events.mark;
    for (const [seq, batch] of events.pending) {
      if (batch.length > 0) this.outbox.push({ seq, ts: batch[0]!.ts, lines: batch.map((e) => `${JSON.stringify(e)}\n`) });
    }
    for (const [key, items] of loaded) {
      if (items.size === 0) continue;
      const slot = this.slotFor(key, this.options.configFor(key) ?? DEFAULT_CONFIG);
      for (const item of items.values()) slot.queue.restore(item);
    }
    for (const key of paused) this.slotFor(key, this.options.configFor(key) ?? DEFAULT_CONFIG).queue.paused = true;
    // decisions §9.2: every callback still owed is owed again, and holds its item's retention back.
    for (const c of callbacks.values()) {
      this.slotFor(c.queue, this.options.configFor(c.queue) ?? DEFAULT_CONFIG).queue.owing(c.itemId, 1);
      this.callbacks.set(c.id, { c, durable: true });
      this.callbacksDue.push(c.dueAt, c);
      this.countCallback(c, 1);
    }
    for (const [key, states] of schedules) if (states.size > 0) this.slotFor(key, this.options.configFor(key) ?? DEFAULT_CONFIG).schedules = states;
    // The rate windows and turns (decisions §8.5) as they were: a restart neither resets a window nor the order of turns.
    for (const [key, flow] of flows) {
      const slot = this.slotFor(key, this.options.configFor(key) ?? DEFAULT_CONFIG);
      slot.queue.restoreFlow(flow);
      if (slot.queue.ringFrom !== flow.from) this.journal.appendLater(leaseRecord(slot.keyJson, slot.queue.leaseCount, slot.queue.ringFrom, []));
    }
    // Leases that ended while the server was down are re-queued (or failed) by the usual rule; a
    // queue without a definition waits for it, and its rules (see configFor).
    for (const slot of this.slots.values()) if (this.options.configFor(slot.key)) this.runTick(slot);
  }

  async close(): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    for (const slot of this.slots.values()) clearTimeout(slot.timer);
    // A last group that cannot be written was taken back and its callers told: the store still closes.
    await this.journal.sync().catch(() => undefined);
    this.journal.appendLater(markRecord({ seq: this.delivered }));
    for (const w of this.deliveryWaiters.splice(0)) w.reject(new Error('the store is closing'));
    await this.journal.close();
  }

  async post(ref: QueueRef, input: PostInput): Promise<PostOutcome> {
    let slot = this.prepare(ref);
    let id = this.newId(slot.queue);
    let staged: StagedPayload | undefined;
    if (ref.config.archivePayloads) {
      staged = await this.stage(slot, id, 'item', input.body);
      // Other requests ran while the payload was written: look at the queue as it is now.
      slot = this.prepare(ref);
      if (slot.queue.items.has(id)) {
        await staged.discard();
        id = this.newId(slot.queue);
        staged = await this.stage(slot, id, 'item', input.body);
        slot = this.prepare(ref);
      }
    }
    if (input.idempotencyKey !== undefined) {
      const earlier = slot.queue.byIdempotencyKey(input.idempotencyKey);
      if (earlier) {
        await staged?.discard();
        await this.synced();
        return { id: earlier.id, status: earlier.status, created: false };
      }
    }
    const change = slot.queue.post({ id, body: input.body, postedBy: input.postedBy, idempotencyKey: input.idempotencyKey ?? null, options: input.options }, this.now());
    const durable = this.commit(slot, [change], true, staged && [staged]);
    const outcome: PostOutcome = { id: change.item.id, status: change.item.status, created: true };
    await durable;
    return outcome;
  }

  async postMany(ref: QueueRef, inputs: readonly PostInput[]): Promise<PostOutcome[]> {
    let slot = this.prepare(ref);
    let staged: StagedPayload[] = [];
    // Without payloads to archive, each id is chosen as its item is posted (so it is checked
    // against the batch's earlier items too); with them, all are chosen first, apart from each other.
    const ids: string[] = [];
    if (ref.config.archivePayloads) {
      const chosen = new Set<string>();
      const another = (): string => {
        let id: string;
        do id = this.newId(slot.queue);
        while (chosen.has(id));
        chosen.add(id);
        return id;
      };
      for (let n = 0; n < inputs.length; n++) ids.push(another());
      staged = (await this.stageAll(slot, inputs.map((input, n) => ({ id: ids[n]!, kind: 'item', body: input.body })))) as StagedPayload[];
      slot = this.prepare(ref);
      // Other requests ran while the payloads were written: an id taken meanwhile is staged again under a new one.
      for (let n = 0; n < ids.length; n++) {
        if (!slot.queue.items.has(ids[n]!)) continue;
        await staged[n]!.discard();
        ids[n] = another();
        staged[n] = await this.stage(slot, ids[n]!, 'item', inputs[n]!.body);
        slot = this.prepare(ref);
        n = -1;
      }
    }
    const now = this.now();
    const changes: Change[] = [];
    const outcomes: PostOutcome[] = [];
    const keep: StagedPayload[] = [];
    const drop: StagedPayload[] = [];
    // No await until the changes are committed: another request must not see (and journal a claim
    // of) an item posted here before the post itself is journalled.
    for (let n = 0; n < inputs.length; n++) {
      const input = inputs[n]!;
      const earlier = input.idempotencyKey === undefined ? undefined : slot.queue.byIdempotencyKey(input.idempotencyKey);
      if (earlier) {
        outcomes.push({ id: earlier.id, status: earlier.status, created: false });
        if (staged[n]) drop.push(staged[n]);
        continue;
      }
      const change = slot.queue.post({ id: ids[n] ?? this.newId(slot.queue), body: input.body, postedBy: input.postedBy, idempotencyKey: input.idempotencyKey ?? null, options: input.options }, now);
      changes.push(change);
      if (staged[n]) keep.push(staged[n]);
      outcomes.push({ id: change.item.id, status: change.item.status, created: true });
    }
    const durable = changes.length > 0 ? this.commit(slot, changes, true, keep) : this.synced();
    await Promise.all([durable, discardAll(drop)]);
    return outcomes;
  }

  async claim(ref: QueueRef, input: ClaimInput): Promise<Claimed | null> {
    const slot = this.prepare(ref);
    // With criteria, a claim may have a long backlog to walk: it parses CLAIM_STEP bodies at a
    // time and lets other requests run between steps (with a million waiting, about 15 ms each).
    let step = slot.queue.claimStep(input.worker, input.criteria, this.now(), CLAIM_STEP, null, input.held);
    while (step !== null && !('item' in step)) {
      await new Promise((resolve) => setImmediate(resolve));
      if (this.closed || input.signal?.aborted) return null;
      step = slot.queue.claimStep(input.worker, input.criteria, this.now(), CLAIM_STEP, step, input.held);
    }
    const change = step;
    if (change) {
      const claimed = claimedOf(change.item);
      await this.commit(slot, [change]);
      return claimed;
    }
    return null;
  }

  async claimMany(ref: QueueRef, input: ClaimInput, max: number): Promise<Claimed[]> {
    const slot = this.prepare(ref);
    const changes: Change[] = [];
    let after: Place | null = null;
    while (changes.length < max) {
      const step = slot.queue.claimStep(input.worker, input.criteria, this.now(), CLAIM_STEP, after, input.held);
      if (step === null) break;
      if (!('item' in step)) {
        after = step;
        // Claims made so far are applied: other requests may run between steps, as for one claim.
        await new Promise((resolve) => setImmediate(resolve));
        if (this.closed || input.signal?.aborted) break;
        continue;
      }
      changes.push(step);
    }
    if (changes.length === 0) return [];
    const claimed = changes.map((c) => claimedOf(c.item));
    await this.commit(slot, changes);
    return claimed;
  }

  async get(ref: QueueRef, id: string): Promise<StatusRecord | null> {
    const slot = this.prepare(ref);
    const item = slot.queue.items.get(id);
    if (!item) return null;
    const stamp = slot.queue.fetched(item, this.now());
    if (stamp) this.commitLater(slot, [stamp]);
    const record = statusOf(item, item.links ?? undefined);
    // What is shown must be what a crash would keep: wait for anything still being written (if
    // that fails, what the record shows was taken back, and the fetch fails with it).
    await this.synced();
    return record;
  }

  progress(ref: QueueRef, id: string, body: string): Promise<SubmitOutcome | null> {
    return this.submit(ref, id, 'progress', body, (queue, now) => queue.progress(id, body, now));
  }

  result(ref: QueueRef, id: string, body: string, delivery?: Delivery): Promise<SubmitOutcome | null> {
    return this.submit(ref, id, 'result', body, (queue, now) => queue.result(id, body, now, delivery));
  }

  error(ref: QueueRef, id: string, body: string, wish?: RetryWish, delivery?: Delivery): Promise<SubmitOutcome | null> {
    return this.submit(ref, id, 'error', body, (queue, now) => queue.error(id, body, now, wish, delivery));
  }

  release(ref: QueueRef, id: string, delaySeconds: number): Promise<SubmitOutcome | null> {
    return this.submit(ref, id, undefined, '', (queue, now) => queue.release(id, delaySeconds, now));
  }

  cancel(ref: QueueRef, id: string): Promise<SubmitOutcome | null> {
    return this.submit(ref, id, undefined, '', (queue, now) => queue.cancel(id, now));
  }

  async counts(ref: QueueRef): Promise<Partial<Record<ItemStatus, number>>> {
    // As every operation does: the deadlines already past are applied first.
    if (!this.slots.has(ref.key)) return {};
    const out: Partial<Record<ItemStatus, number>> = {};
    for (const [status, n] of Object.entries(this.prepare(ref).queue.counts())) if (n > 0) out[status as ItemStatus] = n;
    return out;
  }

  /**
   * See {@link Store.bulk}: the batch is applied in memory at once (no await in between) and
   * journalled as one write with the items a redrive posts elsewhere; a write that fails takes all
   * of it back.
   */
  async bulk(ref: QueueRef, action: BulkAction, max: number): Promise<BulkOutcome> {
    const slot = this.prepare(ref);
    const queue = slot.queue;
    const now = this.now();
    const sources = new Map<string, QueueRef | undefined>();
    /** Where a dead letter goes back to: the queue it came from, as defined now; undefined when it is no dead letter, or that queue is not defined. */
    const sourceOf = (item: Item): QueueRef | undefined => {
      const name = item.links?.source?.queue;
      if (name === undefined) return undefined;
      if (!sources.has(name)) sources.set(name, action.kind === 'redrive' ? action.queueNamed(name) : undefined);
      return sources.get(name);
    };
    // Chosen first, then changed: the walk of the claim order must not see the changes it makes.
    const batch: Item[] = [];
    let more = false;
    for (const item of queue.inClaimOrder(action.kind === 'redrive' ? ['pending'] : action.statuses, max + 1)) {
      if (action.kind === 'redrive' && (item.untouched || sourceOf(item) === undefined)) continue;
      if (batch.length === max) {
        more = true;
        break;
      }
      batch.push(item);
    }
    const changes: Change[] = [];
    const posted: PostedElsewhere = new Map();
    let leaseEnded = false;
    /** Items the action changed (what that made due at once is in `changes` too, not counted). */
    let changed = 0;
    for (const item of batch) {
      if (action.kind === 'redrive') {
        const to = sourceOf(item)!;
        const target = to.key === slot.key ? slot : this.prepare(to);
        const copy = target.queue.post({ id: this.newId(target.queue), body: item.body, postedBy: REDRIVE_POSTER, idempotencyKey: null }, now);
        const list = posted.get(target);
        if (list) list.push(copy);
        else posted.set(target, [copy]);
        changes.push(queue.redriven(item, `${to.name}/${copy.item.id}`));
        changed++;
        continue;
      }
      const leased = item.status === 'claimed' || item.status === 'processing';
      const change = action.kind === 'retry' ? queue.retryAgain(item, now) : queue.cancelItem(item, now);
      if (!change) continue;
      if (leased) leaseEnded = true;
      changes.push(change);
      changed++;
      const due = queue.dueNow(item, now);
      if (due) changes.push(due);
    }
    if (changes.length === 0) {
      await this.synced();
      return { changed: 0, more };
    }
    await this.commit(slot, changes, false, undefined, undefined, posted.size > 0 ? posted : undefined);
    // decisions §8.5: leases ended in a queue with limits: held claims look again.
    if (leaseEnded && (queue.config.maxActive !== null || queue.config.groupMaxActive !== null)) this.options.notifier?.notify(slot.claimTopic);
    return { changed, more };
  }

  async overview(ref: QueueRef, limits: { oldest: number; leases: number }): Promise<QueueOverview> {
    if (this.closed) throw new StoreUnavailable(new Error('the server is stopping'));
    const slot = this.slots.get(ref.key);
    if (!slot) return { paused: false, counts: fullCounts({}), oldestPendingAt: null, oldest: [], leases: [], groupsWaiting: ref.config.fairness === 'groups' || ref.config.groupMaxActive !== null ? 0 : null, callbacks: { owed: 0, failing: 0 } };
    // Under the rules the request carries: whether groups are counted is the definition's to say.
    this.takeRules(slot, ref.config);
    const queue = slot.queue;
    return {
      paused: queue.paused,
      counts: queue.counts(),
      oldestPendingAt: queue.oldestPendingAt(),
      oldest: limits.oldest > 0 ? queue.oldestPending(limits.oldest).map((i) => ({ id: i.id, postedAt: i.postedAt, attempts: i.attempts })) : [],
      leases: limits.leases > 0 ? queue.leased(limits.leases).map((i) => ({ id: i.id, worker: i.leaseWorker ?? '', until: i.leaseUntil ?? 0, attempts: i.attempts })) : [],
      groupsWaiting: queue.groupsWaiting(),
      callbacks: { ...(this.callbackCounts.get(ref.key) ?? { owed: 0, failing: 0 }) },
    };
  }

  /** Counts a callback in (1) or out (−1) of its queue's owed and failing. */
  private countCallback(c: OwedCallback, d: 1 | -1): void {
    let counts = this.callbackCounts.get(c.queue);
    if (!counts) this.callbackCounts.set(c.queue, (counts = { owed: 0, failing: 0 }));
    counts.owed += d;
    if (c.tries > 0) counts.failing += d;
  }

  /** See {@link Store.takeCallbacks}. The hold is kept in memory only: after a restart every callback owed is due again (at least once). */
  async takeCallbacks(max: number, holdMs: number): Promise<TakenCallback[]> {
    if (this.closed) throw new StoreUnavailable(new Error('the server is stopping'));
    const now = this.now();
    // Holds that ran out without a settlement: due again (still the callback's current state, or settled since and skipped).
    for (const held of this.callbacksHeld.values()) {
      if (held.dueAt > now) break;
      this.callbacksHeld.delete(held.id);
      if (this.callbacks.get(held.id)?.c === held) this.callbacksDue.push(held.dueAt, held);
    }
    const out: TakenCallback[] = [];
    let notYet: OwedCallback[] | undefined;
    const until = now + holdMs;
    while (out.length < max) {
      const c = this.callbacksDue.popDue(now);
      if (c === undefined) break;
      const entry = this.callbacks.get(c.id);
      // Settled, taken or retried since it was filed: its current state has an entry of its own.
      if (entry === undefined || entry.c !== c) continue;
      // Not durable yet: filed again, for the next take.
      if (!entry.durable) {
        (notYet ??= []).push(c);
        continue;
      }
      out.push(this.takeOne(entry, c, until));
    }
    if (notYet) for (const c of notYet) this.callbacksDue.push(c.dueAt, c);
    return out;
  }

  /** Holds a durable callback owed until `until` for an attempt, with its item's status record as it stands. */
  private takeOne(entry: { c: OwedCallback }, c: OwedCallback, until: number): TakenCallback {
    const item = this.slots.get(c.queue)?.queue.items.get(c.itemId);
    const held: OwedCallback = { id: c.id, queue: c.queue, itemId: c.itemId, event: c.event, url: c.url, owedSince: c.owedSince, dueAt: until, tries: c.tries };
    entry.c = held;
    this.hold(held);
    return { ...held, record: item ? statusOf(item, item.links ?? undefined) : null };
  }

  /**
   * See {@link Store.holdOwnCallbacks}: no take for a callback's first attempt. The holds are in
   * memory, as a take's: after a restart every callback owed is due again.
   */
  holdOwnCallbacks(options: { holdMs: number; wants: () => boolean; deliver: (born: TakenCallback[]) => void }): void {
    this.ownCallbacks = options;
  }

  /** See {@link Store.releaseCallbacks}: each due at once, if it is still the obligation taken. */
  async releaseCallbacks(taken: OwedCallback[]): Promise<void> {
    const now = this.now();
    for (const t of taken) {
      const entry = this.callbacks.get(t.id);
      if (!entry || entry.c.dueAt !== t.dueAt || entry.c.tries !== t.tries) continue;
      this.callbacksHeld.delete(t.id);
      entry.c = { ...entry.c, dueAt: now };
      this.callbacksDue.push(now, entry.c);
    }
    if (taken.length > 0) this.owedMade.raise();
  }

  /** Files a callback taken until its hold ends (see {@link callbacksHeld}). */
  private hold(c: OwedCallback): void {
    if (c.dueAt >= this.lastHeldUntil) {
      this.callbacksHeld.set(c.id, c);
      this.lastHeldUntil = c.dueAt;
    } else this.callbacksDue.push(c.dueAt, c);
  }

  /**
   * See {@link Store.settleCallback}: applied in memory at once and journalled as one group (a
   * drop with its task event); a write that fails takes it back, and the callback stays owed.
   */
  async settleCallback(taken: OwedCallback, attempt: CallbackAttempt): Promise<CallbackSettlement> {
    if (this.closed) throw new StoreUnavailable(new Error('the server is stopping'));
    const entry = this.callbacks.get(taken.id);
    const c = entry?.c;
    if (!c || c.dueAt !== taken.dueAt || c.tries !== taken.tries) return 'stale';
    const slot = this.slotFor(c.queue, this.options.configFor(c.queue) ?? DEFAULT_CONFIG);
    const retryAt = attempt.delivered ? null : rules.callbackRetryAt(c.owedSince, c.tries + 1, this.now());
    const outcome: CallbackSettlement = attempt.delivered ? 'delivered' : retryAt === null ? 'dropped' : 'retrying';
    const changes: Change[] = [];
    let undo: () => void;
    this.countCallback(c, -1);
    // (Taken back by a failed write, it is filed in the heap: a stale entry there is skipped.)
    this.callbacksHeld.delete(c.id);
    if (retryAt !== null) {
      const next: OwedCallback = { ...c, tries: c.tries + 1, dueAt: retryAt };
      this.callbacks.set(c.id, { c: next, durable: true });
      this.callbacksDue.push(next.dueAt, next);
      this.countCallback(next, 1);
      undo = () => {
        this.countCallback(next, -1);
        this.callbacks.set(c.id, { c, durable: true });
        this.callbacksDue.push(c.dueAt, c);
        this.countCallback(c, 1);
      };
    } else {
      this.callbacks.delete(c.id);
      slot.queue.owing(c.itemId, -1, this.now());
      const item = slot.queue.items.get(c.itemId);
      if (outcome === 'dropped' && item) changes.push({ item, before: item.saveState(), events: [{ event: 'callback-dropped' }] });
      undo = () => {
        this.callbacks.set(c.id, { c, durable: true });
        this.callbacksDue.push(c.dueAt, c);
        this.countCallback(c, 1);
        slot.queue.owing(c.itemId, 1);
      };
    }
    await this.commit(slot, changes, false, undefined, { records: callbackRecord(retryAt === null ? c.id : this.callbacks.get(c.id)!.c), undo });
    return outcome;
  }

  onCallbacksOwed(listener: () => void): void {
    this.owedMade.listen(listener);
  }

  /**
   * decisions §9.2: the callbacks the changes make owed (those that ended an item with a URL for
   * it), kept in memory now, not to be taken until durable: their records, what takes them back,
   * and what makes them durable once the write is on disk.
   */
  private oweCallbacks(slot: QueueSlot, changes: readonly Change[]): { records: string; undo: () => void; made: () => void } | undefined {
    let made: OwedCallback[] | undefined;
    for (const change of changes) {
      const url = change.callback;
      if (url === undefined) continue;
      const now = this.now();
      const c: OwedCallback = { id: this.ids.next(), queue: slot.key, itemId: change.item.id, event: change.item.status, url, owedSince: now, dueAt: now, tries: 0 };
      (made ??= []).push(c);
    }
    if (!made) return undefined;
    const list = made;
    let records = '';
    for (const c of list) {
      this.callbacks.set(c.id, { c, durable: false });
      this.callbacksDue.push(c.dueAt, c);
      this.countCallback(c, 1);
      records += callbackRecord(c);
    }
    return {
      records,
      // The changes' own revert takes back the hold on retention (Queue.revert).
      undo: () => {
        for (const c of list) {
          if (this.callbacks.delete(c.id)) this.countCallback(c, -1);
        }
      },
      made: () => {
        const own = this.ownCallbacks;
        const handing = own !== undefined && !this.closed && own.wants();
        const until = handing ? this.now() + own.holdMs : 0;
        const born: TakenCallback[] = [];
        for (const c of list) {
          const entry = this.callbacks.get(c.id);
          if (!entry) continue;
          entry.durable = true;
          // Taken as it becomes takeable, as takeCallbacks would take it (its heap entry is stale from now on).
          if (handing && entry.c === c) born.push(this.takeOne(entry, c, until));
        }
        if (born.length > 0) own!.deliver(born);
        else this.owedMade.raise();
      },
    };
  }

  /**
   * See {@link Store.tickSchedules}. The items and the schedules' new states are applied in memory
   * at once, with no await in between (nothing else runs on this thread meanwhile), and journalled
   * in one group: after a crash both are back, or neither. A write that fails takes both back.
   */
  async tickSchedules(ref: QueueRef): Promise<number> {
    if (!ref.config.archivePayloads) return this.tick(ref, this.prepare(ref), this.now(), []);
    // decisions §5: the payloads of the items an occurrence posts are archived as a post's are,
    // staged before anything is applied. The plan is worked out again once they are written; when
    // it changed meanwhile (rare: a tick of the same queue, a new definition, an occurrence falling
    // due), the staged payloads are discarded and it starts over.
    for (;;) {
      let slot = this.prepare(ref);
      const now = this.now();
      const planned = this.scheduledBodies(slot, ref, now);
      const chosen = new Set<string>();
      const ids = planned.map(() => {
        let id: string;
        do id = this.newId(slot.queue);
        while (chosen.has(id));
        chosen.add(id);
        return id;
      });
      const staged = (await this.stageAll(slot, planned.map((body, n) => ({ id: ids[n]!, kind: 'item', body })))) as StagedPayload[];
      slot = this.prepare(ref);
      const later = this.now();
      const same = this.scheduledBodies(slot, ref, later);
      if (same.length === planned.length && same.every((b, n) => b === planned[n]) && ids.every((id) => !slot.queue.items.has(id))) return this.tick(ref, slot, later, ids, staged);
      await discardAll(staged);
    }
  }

  /** The bodies of the items the queue's schedules would post at `now`, in the order {@link tick} posts them. */
  private scheduledBodies(slot: QueueSlot, ref: QueueRef, now: number): string[] {
    const bodies: string[] = [];
    for (const spec of ref.config.schedules) {
      const state = slot.schedules.get(spec.name);
      const previous = state?.lastId == null ? undefined : slot.queue.items.get(state.lastId);
      const plan = planSchedule(spec, state, now, previous !== undefined && !isTerminal(previous.status));
      if (plan.state) for (let n = 0; n < plan.post.length; n++) bodies.push(spec.item);
    }
    return bodies;
  }

  /** Applies and journals what the schedules post at `now`: the items take `ids` in order (new ones past their end), with the payloads `staged` for them. */
  private async tick(ref: QueueRef, slot: QueueSlot, now: number, ids: readonly string[], staged?: StagedPayload[]): Promise<number> {
    const states = slot.schedules;
    const changes: Change[] = [];
    let records = '';
    const before = new Map<string, ScheduleState | undefined>();
    const defined = states.size > 0 ? scheduleNames(ref.config.schedules) : undefined;
    for (const [name, state] of states) {
      if (defined!.has(name)) continue;
      before.set(name, state);
      states.delete(name);
      records += scheduleRecord(slot.keyJson, name, null);
    }
    for (const spec of ref.config.schedules) {
      const state = states.get(spec.name);
      const previous = state?.lastId == null ? undefined : slot.queue.items.get(state.lastId);
      const plan = planSchedule(spec, state, now, previous !== undefined && !isTerminal(previous.status));
      if (!plan.state) continue;
      const next = { ...plan.state };
      for (const at of plan.post) {
        const change = slot.queue.post({ id: ids[changes.length] ?? this.newId(slot.queue), body: spec.item, postedBy: postedBy(spec.name), idempotencyKey: null, options: scheduledOptions(spec) }, now);
        change.events = [{ event: 'posted', schedule: spec.name, occurrence: at }];
        changes.push(change);
        next.lastAt = at;
        next.lastId = change.item.id;
      }
      before.set(spec.name, state);
      states.set(spec.name, next);
      records += scheduleRecord(slot.keyJson, spec.name, next);
    }
    if (records === '') return 0;
    const undo = (): void => {
      for (const [name, state] of before) {
        if (state) states.set(name, state);
        else states.delete(name);
      }
    };
    await this.commit(slot, changes, true, staged, { records, undo });
    return changes.length;
  }

  async schedules(ref: QueueRef): Promise<ScheduleView[]> {
    if (this.closed) throw new StoreUnavailable(new Error('the server is stopping'));
    const states = this.slots.get(ref.key)?.schedules;
    const now = this.now();
    return ref.config.schedules.map((spec) => scheduleView(spec, states?.get(spec.name), now));
  }

  /**
   * See {@link Store.setPaused}. The pause is applied in memory at once, as the item changes are,
   * and journalled as one record of its own; a write that fails takes it back with the changes
   * journalled with it (see {@link takeBack}).
   */
  async setPaused(ref: QueueRef, paused: boolean): Promise<boolean> {
    const slot = this.prepare(ref);
    if (slot.queue.paused === paused) {
      // As it is asked to be; the answer waits until that state is durable (a pause just made may still be on its way).
      await this.synced();
      return paused;
    }
    const queue = slot.queue;
    queue.paused = paused;
    const through = ++this.changeSeq;
    const undo = (): void => {
      queue.paused = !paused;
      // Posts made meanwhile were not announced to held claims (see announce): they look now.
      if (paused) this.options.notifier?.notify(slot.claimTopic);
    };
    this.unconfirmed.push({ seq: through, slot, changes: [], undo });
    await this.journal.append(pausedRecord(slot.keyJson, paused)).then(
      () => {
        this.confirm(through);
        // Held claims look again: what the pause held back can be claimed now.
        if (!paused) this.options.notifier?.notify(slot.claimTopic);
      },
      (err: Error) => {
        throw new StoreUnavailable(err);
      },
    );
    return paused;
  }

  /**
   * The text an item holds for a payload kind (its body, latest progress, result or latest error),
   * or null: what its archived payload must be. Start-up asks this of payloads a crash left staged.
   */
  payloadText(host: string, queue: string, id: string, kind: PayloadKind): string | null {
    const item = this.slots.get(`${host}/${queue}`)?.queue.items.get(id) ?? this.purgedSinceOpen?.get(`${host}/${queue}/${id}`);
    if (!item) return null;
    return kind === 'item' ? item.body : item[kind];
  }

  /** Start-up has looked at every payload a crash left staged: items purged from now on are forgotten at once. */
  stagedLookedAt(): void {
    this.purgedSinceOpen = undefined;
  }

  /**
   * A claim's hand-ins (decisions §3.8): each applied in order exactly as {@link result} or
   * {@link error} applies it (anything due applied first, after the hand-ins before it), and all of
   * them made durable by one commit rather than one each. With archiving on, every payload is
   * staged first: one that cannot be written refuses them all, before any is applied (decisions
   * §6). Resolves to each one's outcome (null: no such item) once everything it reports is durable.
   */
  async submitMany(ref: QueueRef, entries: ReadonlyArray<{ id: string; kind: 'result' | 'error'; body: string; wish?: RetryWish }>): Promise<Array<SubmitOutcome | null>> {
    let staged: Array<StagedPayload | undefined> = [];
    if (ref.config.archivePayloads) {
      const held = this.prepare(ref);
      staged = await this.stageAll(held, entries.map((e) => (held.queue.items.has(e.id) ? e : undefined)));
    }
    const outcomes: Array<SubmitOutcome | null> = [];
    let changes: Change[] = [];
    let keep: StagedPayload[] = [];
    const drop: StagedPayload[] = [];
    let slot: QueueSlot | undefined;
    let sync = false;
    const durable: Array<Promise<void>> = [];
    // A time-driven change due between two hand-ins is journalled after the hand-ins before it, as it would be one by one.
    const beforeTick = (): void => {
      if (changes.length === 0) return;
      durable.push(this.commit(slot!, changes, false, keep));
      changes = [];
      keep = [];
    };
    for (const [n, { id, kind, body, wish }] of entries.entries()) {
      slot = this.prepare(ref, beforeTick);
      const now = this.now();
      const outcome = kind === 'result' ? slot.queue.result(id, body, now) : slot.queue.error(id, body, now, wish);
      const payload = staged[n];
      if (payload) (outcome?.change ? keep : drop).push(payload);
      if (!outcome) {
        outcomes.push(null);
        continue;
      }
      if (outcome.change) changes.push(outcome.change);
      else sync = true;
      outcomes.push({ accepted: outcome.accepted, status: outcome.status });
    }
    if (changes.length > 0) durable.push(this.commit(slot!, changes, false, keep));
    else if (sync) durable.push(this.synced());
    if (drop.length > 0) durable.push(discardAll(drop));
    if (durable.length === 1) await durable[0];
    else if (durable.length > 1) await Promise.all(durable);
    return outcomes;
  }

  /**
   * Applies a submission. With archiving on, its payload is staged before the change is applied
   * (only for an item the queue holds), and published once the change is durable.
   */
  private async submit(ref: QueueRef, id: string, kind: PayloadKind | undefined, body: string, apply: (queue: Queue, now: number) => Outcome | null): Promise<SubmitOutcome | null> {
    let slot = this.prepare(ref);
    let staged: StagedPayload | undefined;
    if (kind !== undefined && ref.config.archivePayloads && slot.queue.items.has(id)) {
      staged = await this.stage(slot, id, kind, body);
      slot = this.prepare(ref);
    }
    const outcome = apply(slot.queue, this.now());
    if (!outcome?.change) {
      await staged?.discard();
      if (!outcome) return null;
      await this.synced();
    } else {
      await this.commit(slot, [outcome.change], false, staged && [staged]);
    }
    return { accepted: outcome.accepted, status: outcome.status };
  }

  /**
   * Stages the payloads wanted (undefined: none for that place), all or none: when one cannot be
   * written, those already staged are discarded (a full disk keeps no leftovers) and it is a 503.
   */
  private async stageAll(slot: QueueSlot, wanted: ReadonlyArray<{ id: string; kind: PayloadKind; body: string } | undefined>): Promise<Array<StagedPayload | undefined>> {
    const settled = await Promise.allSettled(wanted.map((w) => (w ? this.stage(slot, w.id, w.kind, w.body) : Promise.resolve(undefined))));
    const failed = settled.find((s) => s.status === 'rejected');
    const staged = settled.map((s) => (s.status === 'fulfilled' ? s.value : undefined));
    if (!failed) return staged;
    await discardAll(staged.filter((s) => s !== undefined));
    throw failed.reason;
  }

  /** Stages a payload; a write that fails is a 503, before anything was changed. */
  private stage(slot: QueueSlot, id: string, kind: PayloadKind, body: string): Promise<StagedPayload> {
    return this.options.hooks.stage(slot.host, slot.name, id, kind, body).catch((err: Error) => {
      throw new StoreUnavailable(err);
    });
  }

  /** Resolves once everything appended so far is on disk; a failed write is a 503. */
  private synced(): Promise<void> {
    return this.journal.sync().catch((err: Error) => {
      throw new StoreUnavailable(err);
    });
  }

  /** See {@link Store.rulesChanged}: a queue this store holds takes the rules in force, and its timer is filed again. */
  rulesChanged(key: string): void {
    const slot = this.slots.get(key);
    if (!slot || this.closed) return;
    const config = this.options.configFor(key);
    if (config) this.takeRules(slot, config);
  }

  /** The queue takes new rules; a deadline they brought sooner falls on time, also if no request comes. */
  private takeRules(slot: QueueSlot, config: QueueConfig): void {
    if (config === slot.queue.config) return;
    this.reconfigure(slot, config);
    this.schedule(slot);
  }

  /** The queue takes new rules; a rate window they start or end is journalled (decisions §8.5: a restart counts what the running store counts). */
  private reconfigure(slot: QueueSlot, config: QueueConfig): void {
    const from = slot.queue.ringFrom;
    slot.queue.reconfigure(config);
    if (slot.queue.ringFrom !== from) this.journal.appendLater(leaseRecord(slot.keyJson, slot.queue.leaseCount, slot.queue.ringFrom, []));
  }

  /** The queue's slot with its rules brought up to date, and anything due applied first. */
  private prepare(ref: QueueRef, beforeTick?: () => void): QueueSlot {
    if (this.closed) throw new StoreUnavailable(new Error('the server is stopping'));
    const slot = this.slotFor(ref.key, ref.config);
    this.takeRules(slot, ref.config);
    const next = slot.queue.nextDeadline();
    if (next === null) return slot;
    const now = this.now();
    if (next <= now && now >= this.retryAt) {
      beforeTick?.();
      this.runTick(slot);
    }
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
        claimTopic: claimTopic(key),
        queue: new Queue(config),
        timer: undefined,
        timerAt: Infinity,
        schedules: new Map(),
      };
      this.slots.set(key, slot);
    }
    return slot;
  }

  /**
   * Journals changes with their task events in one write, resolving once it is durable (and the
   * payload archived). The history file gets the events right after, off the request's path.
   */
  private commit(slot: QueueSlot, changes: Change[], created = false, staged?: StagedPayload[], queueState?: { records: string; undo: () => void }, posted?: PostedElsewhere): Promise<void> {
    // decisions §8.6: dead-letter copies of items that just failed or timed out, in the same write.
    const copies = posted ?? (created || slot.queue.config.deadLetter === null ? undefined : this.deadLetters(slot, changes));
    const { pieces, lines, count, ts } = this.describe(slot, changes, created);
    // The queue's own state changed with the items (a schedule's last occurrence): in the same group.
    if (queueState) pieces.unshift(queueState.records);
    // decisions §9.2: callbacks the changes made owed, in the same group.
    const owed = created ? undefined : this.oweCallbacks(slot, changes);
    if (owed) pieces.push(owed.records);
    const undo = owed === undefined ? queueState?.undo : queueState === undefined ? owed.undo : () => (owed.undo(), queueState.undo());
    const config = slot.queue.config;
    if (!created && (config.rateLimit !== null || config.fairness === 'groups')) {
      // Leases the rate window or the turns counted: in the group of the claim (decisions §8.5).
      const leases: LeaseMark[] = [];
      for (const c of changes) if (c.lease) leases.push(c.lease);
      if (leases.length > 0) pieces.unshift(leaseRecord(slot.keyJson, slot.queue.leaseCount, slot.queue.ringFrom, leases));
    }
    if (this.purgedSinceOpen && slot.queue.config.archivePayloads) {
      for (const c of changes) if (c.purged) this.purgedSinceOpen.set(`${slot.key}/${c.item.id}`, c.item);
    }
    const seq = this.eventSeq;
    const through = (this.changeSeq += changes.length);
    this.unconfirmed.push({ seq: through, slot, changes, undo });
    // Items posted to other queues by the same step (dead-letter copies, redriven items): journalled
    // in the same write, so that a crash keeps all of it or none.
    const others: Array<{ slot: QueueSlot; changes: Change[]; seq: number; lines: string[]; count: number }> = [];
    let last = through;
    for (const [other, made] of copies ?? []) {
      const d = this.describe(other, made, true);
      pieces.push(...d.pieces);
      last = this.changeSeq += made.length;
      this.unconfirmed.push({ seq: last, slot: other, changes: made });
      others.push({ slot: other, changes: made, seq: this.eventSeq, lines: d.lines, count: d.count });
    }
    const durable = this.journal.append(pieces).then(
      () => {
        this.confirm(last);
        owed?.made();
        // Durable writes complete in order, so the outbox stays in the order of the events' numbers.
        if (count > 0) this.toOutbox({ seq, ts, lines });
        this.announce(slot, changes);
        if (count > 0 && this.options.observer) this.options.observer.events(slot.key, eventKinds(changes));
        for (const o of others) {
          if (o.count > 0) this.toOutbox({ seq: o.seq, ts, lines: o.lines });
          this.announce(o.slot, o.changes);
          if (o.count > 0 && this.options.observer) this.options.observer.events(o.slot.key, eventKinds(o.changes));
          if (o.slot.queue.config.archivePayloads) this.archiveMade(o.slot, o.changes);
        }
      },
      (err: Error) => {
        throw new StoreUnavailable(err);
      },
    );
    for (const o of others) if (o.slot !== slot) this.schedule(o.slot);
    this.afterChange(slot);
    if (!staged || staged.length === 0) return durable;
    return durable.then(
      async () => {
        await Promise.all(staged.map((p) => p.publish().catch((err: Error) => this.options.warn(`a payload could not be archived: ${err.message}`))));
      },
      async (err: unknown) => {
        await Promise.all(staged.map((p) => p.discard().catch(() => undefined)));
        throw err;
      },
    );
  }

  /**
   * decisions §8.6: for each change that made an item failed or timed out in a queue with
   * `deadLetter`, a copy posted to that queue (when it is defined now): the copy's source and the
   * original's deadLetterId are set, and the failure's event names the copy ("undefined" when the
   * queue is not defined). Applied in memory now; the caller journals them with the changes.
   */
  private deadLetters(slot: QueueSlot, changes: Change[]): PostedElsewhere | undefined {
    const config = slot.queue.config;
    let out: PostedElsewhere | undefined;
    let after: Array<SavedState | undefined> | undefined | null = null;
    for (let n = 0; n < changes.length; n++) {
      const { item, before, events, purged } = changes[n]!;
      if (!before || purged || before.status === item.status) continue;
      // A commit that changes an item twice: the state this change left is the next change's before.
      if (after === null) after = statesAfter(changes);
      // (Only a change that leaves the item as it ends the commit can be its failure: a failed item changes no more in it.)
      if ((after?.[n]?.status ?? item.status) !== item.status || !rules.needsDeadLetter(before.status, item, config)) continue;
      const event = events.find((e) => e.event === 'failed' || e.event === 'timedout');
      const key = `${slot.host}/${config.deadLetter}`;
      const targetConfig = this.options.configFor(key);
      if (!targetConfig) {
        if (event) event.deadLetter = 'undefined';
        continue;
      }
      const target = this.slotFor(key, targetConfig);
      this.takeRules(target, targetConfig);
      const copy = target.queue.post({ id: this.newId(target.queue), body: item.body, postedBy: DEAD_LETTER_POSTER, idempotencyKey: null }, this.now());
      copy.item.links = { deadLetterId: null, source: rules.deadLetterSource(slot.name, item) };
      item.links = { deadLetterId: copy.item.id, source: item.links?.source ?? null };
      if (event) event.deadLetter = copy.item.id;
      out ??= new Map();
      const list = out.get(target);
      if (list) list.push(copy);
      else out.set(target, [copy]);
    }
    return out;
  }

  /**
   * The bodies of items a step posted to another queue (dead-letter copies, redriven items), for
   * a queue that archives payloads: staged and published once the step is durable, as the step
   * itself could not wait for them. A payload that cannot be written is warned of.
   */
  private archiveMade(slot: QueueSlot, changes: readonly Change[]): void {
    for (const { item } of changes) {
      this.options.hooks
        .stage(slot.host, slot.name, item.id, 'item', item.body)
        .then((staged) => staged.publish())
        .catch((err: Error) => this.options.warn(`a payload could not be archived: ${err.message}`));
    }
  }

  /** Changes up to `through` are on disk. */
  private confirm(through: number): void {
    const list = this.unconfirmed;
    let n = 0;
    while (n < list.length && list[n]!.seq <= through) n++;
    if (n === list.length) this.unconfirmed = [];
    else if (n > 0) list.splice(0, n);
    if (this.retryAt !== 0) {
      this.retryAt = 0;
      this.options.warn('writes succeed again');
    }
  }

  /**
   * A journal write failed: every change not yet on disk is taken back, newest first, before any
   * caller hears of the failure (the journal calls this synchronously). Their callers get 503;
   * waiting claims and fetches see only what is on disk; nothing of them reaches the task history
   * (events are delivered only once durable) or the payload archive (published only once durable).
   */
  private takeBack(err: Error): void {
    const commits = this.unconfirmed;
    this.unconfirmed = [];
    const slots = new Set<QueueSlot>();
    let taken = 0;
    for (let i = commits.length - 1; i >= 0; i--) {
      const { slot, changes, undo } = commits[i]!;
      undo?.();
      for (let j = changes.length - 1; j >= 0; j--) slot.queue.revert(changes[j]!);
      taken += changes.length;
      slots.add(slot);
    }
    if (this.retryAt === 0) this.options.warn(`a write to the store failed (${err.message}): ${taken} change(s) not yet on disk were taken back and refused with 503; serving on`);
    this.retryAt = this.now() + RETRY_AFTER_FAILURE_MS;
    for (const slot of slots) this.schedule(slot);
  }

  /** The same for changes nobody is waiting to acknowledge (time-driven ones, fetch stamps). */
  private commitLater(slot: QueueSlot, changes: Change[]): void {
    // A failed write has already been reported, and its changes taken back (they are tried again when next due).
    this.commit(slot, changes).catch(() => undefined);
  }

  recordedHistoryPosition(): { seq: number; file: string; size: number } | null {
    const mark = this.loadedMark;
    return mark && mark.file !== undefined && mark.size !== undefined ? { seq: mark.seq, file: mark.file, size: mark.size } : null;
  }

  readEvents(afterSeq: number, limit: number): OutboxEntry[] {
    const out: OutboxEntry[] = [];
    for (const entry of this.outbox) {
      if (entry.seq <= afterSeq) continue;
      out.push(entry);
      if (out.length === limit) break;
    }
    return out;
  }

  eventsDelivered(seq: number): void {
    if (seq <= this.delivered) return;
    this.delivered = seq;
    let n = 0;
    while (n < this.outbox.length && this.outbox[n]!.seq <= seq) n++;
    this.outbox.splice(0, n);
    // The journal learns it now and then, so that a restart hands over only what may be missing.
    const now = this.now();
    if (now - this.markWrittenAt >= 250 && !this.closed) {
      this.markWrittenAt = now;
      this.journal.appendLater(markRecord({ seq }));
    }
    this.deliveryWaiters = this.deliveryWaiters.filter((w) => (w.seq <= seq ? (w.resolve(), false) : true));
  }

  onEvents(listener: () => void): void {
    this.eventsMade.listen(listener);
  }

  private toOutbox(entry: OutboxEntry): void {
    this.outbox.push(entry);
    this.eventsMade.raise();
  }

  /** Resolves once the history holds every event through `seq` (a snapshot may then drop older journals). */
  private deliveredThrough(seq: number): Promise<number> {
    if (this.delivered >= seq) return Promise.resolve(this.delivered);
    return new Promise((resolve, reject) => this.deliveryWaiters.push({ seq, resolve: () => resolve(this.delivered), reject }));
  }

  /**
   * The journal records of changes and their task events (numbered on from `eventSeq`, which this
   * advances), as JSON text in pieces of about {@link TEXT_PIECE}, and the events' history lines.
   * Built by hand: this runs for every change, and only strings that may need escaping (a worker
   * name) are serialised.
   */
  private describe(slot: QueueSlot, changes: Change[], created: boolean): { pieces: string[]; lines: string[]; count: number; ts: number } {
    const pieces: string[] = [];
    const eventPieces: string[] = [];
    const lines: string[] = [];
    let records = '';
    let eventList = '';
    let lineText = '';
    let count = 0;
    const ts = this.now();
    // A commit may change one item more than once (a claim's hand-ins naming it twice): each
    // change's events carry the state that change left, not the state the last one left.
    const after = changes.length > 1 && !created ? statesAfter(changes) : undefined;
    for (let n = 0; n < changes.length; n++) {
      const change = changes[n]!;
      const item = change.item;
      const left = after?.[n];
      const status = left ? left.status : item.status;
      const attempts = left ? (left.work?.attempts ?? 0) : item.attempts;
      records += change.purged ? deleteRecord(slot.keyJson, item.id) : created ? itemRecord(slot.keyJson, item) : updateRecord(slot.keyJson, item);
      if (records.length >= TEXT_PIECE) {
        pieces.push(records);
        records = '';
      }
      if (benchOff.events) continue;
      for (const e of change.events) {
        const worker = e.worker === undefined ? '' : `,"worker":${jsonString(e.worker)}`;
        // Field order as in TaskEvent (decisions §5): ts, host, queue, id, event, attempts, worker (when there is one), status.
        const scheduled = e.schedule === undefined ? '' : `,"schedule":${jsonString(e.schedule)},"occurrence":${e.occurrence}`;
        const dead = e.deadLetter === undefined ? '' : `,"deadLetter":"${e.deadLetter}"`;
        const redriven = e.redrivenTo === undefined ? '' : `,"redrivenTo":${jsonString(e.redrivenTo)}`;
        const delivery = e.ms === undefined ? '' : `,"code":${e.code ?? null},"ms":${e.ms}`;
        const event = `{"ts":${ts},${slot.eventPrefix},"id":"${item.id}","event":"${e.event}","attempts":${attempts}${worker},"status":"${status}"${scheduled}${dead}${redriven}${delivery}}`;
        // Made flat here, once: it is written twice (journal, history), and a string built of
        // pieces is copied whole at each write (charCodeAt makes V8 flatten it in place).
        event.charCodeAt(0);
        eventList += count > 0 ? `,${event}` : event;
        lineText += `${event}\n`;
        count++;
        if (lineText.length >= TEXT_PIECE) {
          eventPieces.push(eventList);
          lines.push(lineText);
          eventList = lineText = '';
        }
      }
    }
    if (records !== '') pieces.push(records);
    if (count > 0) {
      if (eventList !== '') eventPieces.push(eventList);
      if (lineText !== '') lines.push(lineText);
      pieces.push(...eventsRecord((this.eventSeq += count), eventPieces));
    }
    return { pieces, lines, count, ts };
  }

  /**
   * Tells long polls of durable changes they may wait for: an item that can be claimed (posted,
   * re-queued, past its retry delay), an item that became terminal or was purged. A change that
   * was taken back is never announced.
   */
  private announce(slot: QueueSlot, changes: Change[]): void {
    const notifier = this.options.notifier;
    if (!notifier) return;
    // The queue's topic is announced once, where its first claimable item comes: announcing it
    // again in the same turn changes nothing (a listener is woken once per turn). A paused queue's
    // held claims would find nothing: its resume announces it.
    let claimable = slot.queue.paused;
    // decisions §8.5: a lease that ends in a queue with maxActive or groupMaxActive frees a place that held claims wait for.
    const config = slot.queue.config;
    const freeing = config.maxActive !== null || config.groupMaxActive !== null;
    for (const { item, purged, before } of changes) {
      if (purged || isTerminal(item.status)) notifier.notify(itemTopic(slot.key, item.id));
      else if (!claimable && item.status === 'pending' && item.availableAt === 0) {
        claimable = true;
        notifier.notify(slot.claimTopic);
      }
      if (freeing && !claimable && before !== undefined && (before.status === 'claimed' || before.status === 'processing') && (purged || (item.status !== 'claimed' && item.status !== 'processing'))) {
        claimable = true;
        notifier.notify(slot.claimTopic);
      }
    }
  }

  private afterChange(slot: QueueSlot): void {
    // What the change made due at once (an item that ended under retainSeconds 0) is applied now,
    // journalled right after it, rather than by a timer or the next request, which may come under
    // other rules (decisions §2.4) or read the queue's counts before the timer runs.
    const due = slot.queue.nextDeadline();
    const now = due === null ? 0 : this.now();
    if (due !== null && due <= now && now >= this.retryAt) this.runTick(slot);
    else this.schedule(slot);
    if (this.journal.wantsSnapshot()) {
      // Called once the journals before the new one are closed: every event they hold is numbered up to eventSeq now.
      const historyMark = async (): Promise<{ seq: number }> => ({ seq: await this.deliveredThrough(this.eventSeq) });
      this.journal.snapshot(() => this.allItems(), historyMark, () => this.pauseRecords()).catch((err: Error) => this.options.warn(`snapshot failed: ${err.message}`));
    }
  }

  /** A record for each paused queue and each schedule's state: the snapshot's part of the queues' own state. */
  private pauseRecords(): string {
    let records = '';
    for (const { c } of this.callbacks.values()) records += callbackRecord(c);
    for (const slot of this.slots.values()) {
      if (slot.queue.paused) records += pausedRecord(slot.keyJson, true);
      const queue = slot.queue;
      if (queue.leaseCount > 0 || queue.stamps.size > 0 || queue.ringFrom !== null) records += flowRecord(slot.keyJson, queue.leaseCount, queue.ringFrom, queue.rateTimes(), queue.stamps);
      for (const [name, state] of slot.schedules) records += scheduleRecord(slot.keyJson, name, state);
    }
    return records;
  }

  private *allItems(): Iterable<[queueJson: string, item: Item]> {
    for (const slot of this.slots.values()) for (const item of slot.queue.items.values()) yield [slot.keyJson, item];
  }

  private runTick(slot: QueueSlot): void {
    const changes = slot.queue.tick(this.now());
    if (changes.length === 0) return this.schedule(slot);
    this.commitLater(slot, changes);
  }

  /**
   * One timer per queue, at its next deadline. A deadline further off than a timer can wait (a
   * 30-day timeout, say) gets a timer at the longest wait, which finds nothing due and sets the next.
   */
  private schedule(slot: QueueSlot): void {
    if (this.closed) return;
    const due = slot.queue.nextDeadline();
    if (due === null) return;
    // After a failed write, what is due waits a moment rather than failing against the disk in a loop.
    const next = Math.max(due, this.retryAt);
    if (next >= slot.timerAt) return;
    clearTimeout(slot.timer);
    slot.timerAt = next;
    slot.timer = setTimeout(() => {
      slot.timer = undefined;
      slot.timerAt = Infinity;
      const config = this.options.configFor(slot.key);
      // A deleted queue is kept as it is; putting it back files its timer again (rulesChanged).
      if (!config) return;
      if (config !== slot.queue.config) this.reconfigure(slot, config);
      this.runTick(slot);
    }, Math.min(Math.max(0, next - this.now()), MAX_TIMER_MS));
    slot.timer.unref();
  }

  /** 16 lowercase hex characters, random, unique in the queue (decisions §3.5). */
  private newId(queue: Queue): string {
    for (;;) {
      const id = this.ids.next();
      if (!queue.items.has(id)) return id;
    }
  }
}

/**
 * For each change followed, in the same commit, by another change of its item: the state it left,
 * which is the later change's `before`. Undefined for the last change of each item (its state is the
 * item's), and undefined as a whole when no item changes twice, as nearly every commit (found
 * without allocating for a claim with one hand-in, the commit of every job in a hand-in cycle).
 */
function statesAfter(changes: readonly Change[]): Array<SavedState | undefined> | undefined {
  if (changes.length === 2 ? changes[0]!.item !== changes[1]!.item : new Set(changes.map((c) => c.item)).size === changes.length) return undefined;
  const out = new Array<SavedState | undefined>(changes.length);
  const next = new Map<Item, SavedState>();
  for (let n = changes.length - 1; n >= 0; n--) {
    const { item, before } = changes[n]!;
    out[n] = next.get(item);
    if (before) next.set(item, before);
  }
  return out;
}

const namesOf = new WeakMap<readonly ScheduleSpec[], ReadonlySet<string>>();

/** The names of a queue's schedules, as a set made once per definition. */
function scheduleNames(specs: readonly ScheduleSpec[]): ReadonlySet<string> {
  let names = namesOf.get(specs);
  if (!names) namesOf.set(specs, (names = new Set(specs.map((s) => s.name))));
  return names;
}

/** Removes staged payloads that will not be published (one that cannot be removed is left to the next start's sweep). */
async function discardAll(staged: readonly StagedPayload[]): Promise<void> {
  await Promise.all(staged.map((p) => p.discard().catch(() => undefined)));
}
