import { randomBytes } from 'node:crypto';
import { TurnSignal } from './turn-signal.js';
import { matches } from '../engine/criteria.js';
import type { QueueConfig } from '../engine/config.js';
import { isTerminal, type ItemStatus } from '../engine/item.js';
import { groupKey } from '../engine/limits.js';
import * as rules from '../engine/rules.js';
import type { ItemRecord, RetryWish, Submission } from '../engine/rules.js';
import { planSchedule, postedBy, scheduledOptions, scheduleView, type ScheduleState, type ScheduleView } from '../engine/schedules.js';
import { claimTopic, itemTopic, type Notifier } from '../waiting/notifier.js';
import { claimedOf, DEAD_LETTER_POSTER, deadLetterKey, fullCounts, REDRIVE_POSTER, statusOf, StoreUnavailable, type DeadLetterLinks, type Claimed, type QueueOverview, type BulkAction, type BulkOutcome, type ClaimInput, type PostInput, type PostOutcome, type QueueRef, type StatusRecord, type Store, type SubmitOutcome, type OwedCallback, type TakenCallback, type CallbackAttempt, type CallbackSettlement } from './store.js';

/**
 * What a {@link ModelStore} keeps between a close and the next open: its stand-in for a disk.
 * Hand the same object to a new ModelStore and everything comes back, as the embedded store's
 * journal brings everything back.
 */
export interface ModelDisk {
  /** Every live item, by queue key, then by id. */
  queues: Map<string, Map<string, ItemRecord>>;
  /** The last claim order given, by queue key. */
  lastOrd: Map<string, number>;
  /** The keys of the paused queues (decisions §8.4). */
  paused: Set<string>;
  /** The schedules' states, by queue key, then by name (decisions §8.3). */
  schedules: Map<string, Map<string, ScheduleState>>;
  /** Leases and turns (decisions §8.5), by queue key. */
  flows: Map<string, ModelFlow>;
  /** decisions §8.6: the items' dead-letter links, by queue key, then by id (only items that have one). */
  links: Map<string, Map<string, DeadLetterLinks>>;
  /** decisions §9.2: the items' own callback URLs (a post's `?callback`), by queue key, then by id. */
  callbackUrls: Map<string, Map<string, string>>;
  /** decisions §9.2: the callbacks owed, by their id. */
  callbacks: Map<string, OwedCallback>;
}

/** What the limits of decisions §8.5 remember of a queue's past leases. */
export interface ModelFlow {
  /** Leases so far: each is one turn. */
  turn: number;
  /** Each group's last turn under fairness "groups"; a group not here was never served. */
  stamps: Map<string, number>;
  /** The times of the last `rateLimit.max` leases made while the queue had a rate limit (forgotten when a request comes without one). */
  leases: number[];
}

export function newModelDisk(): ModelDisk {
  return { queues: new Map(), lastOrd: new Map(), paused: new Set(), schedules: new Map(), flows: new Map(), links: new Map(), callbackUrls: new Map(), callbacks: new Map() };
}

export interface ModelStoreOptions {
  now?: () => number;
  /** Told of every change a long poll may wait for, as the Store contract asks. */
  notifier?: Notifier;
  /** A queue's current rules: where a dead-letter copy goes (decisions §8.6); undefined, not defined. */
  configFor?: (key: string) => QueueConfig | undefined;
}

/**
 * The reference model of the {@link Store} contract: obviously correct, and slow on purpose. It
 * keeps plain {@link ItemRecord}s in maps and applies the queue rules (engine/rules.ts) to them
 * directly: before every operation every due rule is applied to every item of the queue, a claim
 * scans every item, an idempotency key is a linear search. The conformance suite and the
 * model-based test hold the real stores to what this one does.
 *
 * It keeps no task history and archives no payloads (it takes no {@link StoreHooks}). "Durable"
 * means written to its {@link ModelDisk}, which outlives the store object, so a change is
 * announced as soon as it is made.
 */
export class ModelStore implements Store {
  private readonly now: () => number;
  private readonly notifier: Notifier | undefined;
  private readonly configFor: (key: string) => QueueConfig | undefined;
  private state: 'new' | 'open' | 'closed' = 'new';
  private readonly owedMade = new TurnSignal();

  constructor(
    private readonly disk: ModelDisk = newModelDisk(),
    options: ModelStoreOptions = {},
  ) {
    this.now = options.now ?? Date.now;
    this.notifier = options.notifier;
    this.configFor = options.configFor ?? (() => undefined);
  }

  async open(): Promise<void> {
    this.state = 'open';
  }

  async close(): Promise<void> {
    this.state = 'closed';
  }

  async post(ref: QueueRef, input: PostInput): Promise<PostOutcome> {
    return this.postNow(ref, input);
  }

  /** A post, made at once (a schedule's tick posts with no await between its reads and its writes). */
  private postNow(ref: QueueRef, input: PostInput): PostOutcome {
    const items = this.prepare(ref);
    if (input.idempotencyKey !== undefined) {
      for (const r of items.values()) {
        if (r.idempotencyKey === input.idempotencyKey) return { id: r.id, status: r.status, created: false };
      }
    }
    let id: string;
    do id = randomBytes(8).toString('hex');
    while (items.has(id));
    const ord = (this.disk.lastOrd.get(ref.key) ?? 0) + 1;
    this.disk.lastOrd.set(ref.key, ord);
    const { record } = rules.post({ id, ord, body: input.body, postedBy: input.postedBy, idempotencyKey: input.idempotencyKey ?? null, options: input.options }, this.now());
    this.put(ref.key, items, record);
    if (input.options?.callback !== undefined) this.urlsOf(ref.key).set(id, input.options.callback);
    return { id, status: record.status, created: true };
  }

  async postMany(ref: QueueRef, inputs: readonly PostInput[]): Promise<PostOutcome[]> {
    const out: PostOutcome[] = [];
    for (const input of inputs) out.push(await this.post(ref, input));
    return out;
  }

  async claim(ref: QueueRef, input: ClaimInput): Promise<Claimed | null> {
    if (input.signal?.aborted) return null;
    return this.claimNow(ref, input);
  }

  async claimMany(ref: QueueRef, input: ClaimInput, max: number): Promise<Claimed[]> {
    const out: Claimed[] = [];
    while (out.length < max && !input.signal?.aborted) {
      const claimed = this.claimNow(ref, input);
      if (!claimed) break;
      out.push(claimed);
    }
    return out;
  }

  /** decisions §8.6: the items the action changes, in claim order; the first `max` changed at once. */
  async bulk(ref: QueueRef, action: BulkAction, max: number): Promise<BulkOutcome> {
    const items = this.prepare(ref);
    const links = this.linksOf(ref.key);
    const now = this.now();
    const sorted = [...items.values()].sort(rules.claimOrder);
    const candidates =
      action.kind === 'redrive'
        ? sorted.filter((r) => {
            const source = links.get(r.id)?.source;
            return r.status === 'pending' && source != null && action.queueNamed(source.queue) !== undefined;
          })
        : sorted.filter((r) => action.statuses.includes(r.status));
    const batch = candidates.slice(0, max);
    for (const r of batch) {
      if (action.kind === 'redrive') {
        const to = action.queueNamed(links.get(r.id)!.source!.queue)!;
        this.postNow(to, { body: r.body, postedBy: REDRIVE_POSTER });
        this.forget(ref.key, items, r.id);
        this.notifier?.notify(itemTopic(ref.key, r.id));
        continue;
      }
      const t = action.kind === 'retry' ? rules.retryAgain(r, now) : rules.cancel(r, now).transition;
      if (!t) continue;
      this.settle(ref, items, t.record, r.status);
      const leased = r.status === 'claimed' || r.status === 'processing';
      if (action.kind === 'cancel' && leased && (ref.config.maxActive !== null || ref.config.groupMaxActive !== null)) this.notifier?.notify(claimTopic(ref.key));
    }
    return { changed: batch.length, more: candidates.length > batch.length };
  }

  /** The dead-letter links of a queue's items. */
  private linksOf(key: string): Map<string, DeadLetterLinks> {
    let links = this.disk.links.get(key);
    if (!links) this.disk.links.set(key, (links = new Map()));
    return links;
  }

  /** An item leaves the queue for good (retention, a redrive), with its links. */
  private forget(key: string, items: Map<string, ItemRecord>, id: string): void {
    items.delete(id);
    this.disk.links.get(key)?.delete(id);
    this.disk.callbackUrls.get(key)?.delete(id);
  }

  /** decisions §9.2: the items' own callback URLs of a queue. */
  private urlsOf(key: string): Map<string, string> {
    let urls = this.disk.callbackUrls.get(key);
    if (!urls) this.disk.callbackUrls.set(key, (urls = new Map()));
    return urls;
  }

  /** decisions §9.2: what rules.due needs to know of an item's callbacks. */
  private callbackOf(key: string, id: string): { owed: boolean; own: string | null } {
    let owed = false;
    for (const c of this.disk.callbacks.values()) if (c.queue === key && c.itemId === id) owed = true;
    return { owed, own: this.disk.callbackUrls.get(key)?.get(id) ?? null };
  }

  /** decisions §9.2: a change from `before` that ended the item makes a callback owed, when there is a URL for it. */
  private oweCallback(ref: QueueRef, before: ItemStatus, record: ItemRecord): void {
    const url = rules.callbackUrl(before, record.status, this.disk.callbackUrls.get(ref.key)?.get(record.id), ref.config);
    if (url === null) return;
    const now = this.now();
    let id: string;
    do id = randomBytes(8).toString('hex');
    while (this.disk.callbacks.has(id));
    this.disk.callbacks.set(id, { id, queue: ref.key, itemId: record.id, event: record.status, url, owedSince: now, dueAt: now, tries: 0 });
    this.owedMade.raise();
  }

  async takeCallbacks(max: number, holdMs: number): Promise<TakenCallback[]> {
    if (this.state !== 'open') throw new StoreUnavailable(new Error('the store is not open'));
    const now = this.now();
    const due = [...this.disk.callbacks.values()].filter((c) => c.dueAt <= now).sort((a, b) => a.dueAt - b.dueAt || (a.id < b.id ? -1 : 1));
    return due.slice(0, max).map((c) => {
      const held = { ...c, dueAt: now + holdMs };
      this.disk.callbacks.set(c.id, held);
      const r = this.disk.queues.get(c.queue)?.get(c.itemId);
      return { ...held, record: r ? statusOf(r, this.disk.links.get(c.queue)?.get(c.itemId)) : null };
    });
  }

  async settleCallback(taken: OwedCallback, attempt: CallbackAttempt): Promise<CallbackSettlement> {
    if (this.state !== 'open') throw new StoreUnavailable(new Error('the store is not open'));
    const c = this.disk.callbacks.get(taken.id);
    if (!c || c.dueAt !== taken.dueAt || c.tries !== taken.tries) return 'stale';
    if (attempt.delivered) {
      this.disk.callbacks.delete(c.id);
      return 'delivered';
    }
    const now = this.now();
    const at = rules.callbackRetryAt(c.owedSince, c.tries + 1, now);
    if (at === null) {
      this.disk.callbacks.delete(c.id);
      return 'dropped';
    }
    this.disk.callbacks.set(c.id, { ...c, tries: c.tries + 1, dueAt: at });
    return 'retrying';
  }

  onCallbacksOwed(listener: () => void): void {
    this.owedMade.listen(listener);
  }

  /**
   * decisions §8.6: an item that just became failed or timed out is copied to the queue's dead
   * letter queue (when that is defined now), in the same step: the copy's source, the original's
   * deadLetterId.
   */
  private deadLetter(ref: QueueRef, before: ItemStatus, record: ItemRecord): void {
    if (!rules.needsDeadLetter(before, record, ref.config)) return;
    const key = deadLetterKey(ref)!;
    const config = this.configFor(key);
    if (!config) return;
    const target: QueueRef = { key, host: ref.host, name: ref.config.deadLetter!, config };
    const { id } = this.postNow(target, { body: record.body, postedBy: DEAD_LETTER_POSTER });
    this.linksOf(key).set(id, { source: rules.deadLetterSource(ref.name, record) });
    const links = this.linksOf(ref.key);
    links.set(record.id, { ...links.get(record.id), deadLetterId: id });
  }

  async overview(ref: QueueRef, limits: { oldest: number; leases: number }): Promise<QueueOverview> {
    if (this.state !== 'open') throw new StoreUnavailable(new Error('the store is not open'));
    const items = [...(this.disk.queues.get(ref.key)?.values() ?? [])];
    const counts = fullCounts({});
    for (const r of items) counts[r.status]++;
    const pending = items.filter((r) => r.status === 'pending').sort(rules.claimOrder);
    const leased = items.filter((r) => r.status === 'claimed' || r.status === 'processing').sort((a, b) => (a.leaseUntil ?? 0) - (b.leaseUntil ?? 0) || a.ord - b.ord);
    return {
      paused: this.disk.paused.has(ref.key),
      counts,
      oldestPendingAt: pending.length > 0 ? Math.min(...pending.map((r) => r.postedAt)) : null,
      oldest: pending.slice(0, limits.oldest).map((r) => ({ id: r.id, postedAt: r.postedAt, attempts: r.attempts })),
      leases: leased.slice(0, limits.leases).map((r) => ({ id: r.id, worker: r.leaseWorker ?? '', until: r.leaseUntil ?? 0, attempts: r.attempts })),
      groupsWaiting: ref.config.fairness === 'groups' || ref.config.groupMaxActive !== null ? new Set(items.filter((r) => rules.claimable(r, this.now())).map((r) => groupKey(r.group))).size : null,
      callbacks: this.callbackCounts(ref.key),
    };
  }

  private callbackCounts(key: string): { owed: number; failing: number } {
    const out = { owed: 0, failing: 0 };
    for (const c of this.disk.callbacks.values()) {
      if (c.queue !== key) continue;
      out.owed++;
      if (c.tries > 0) out.failing++;
    }
    return out;
  }

  /** A paused queue leases nothing; a resume tells held claims to look again (decisions §8.4). */
  async setPaused(ref: QueueRef, paused: boolean): Promise<boolean> {
    this.prepare(ref);
    const was = this.disk.paused.has(ref.key);
    if (paused) this.disk.paused.add(ref.key);
    else this.disk.paused.delete(ref.key);
    if (was && !paused) this.notifier?.notify(claimTopic(ref.key));
    return paused;
  }

  /** decisions §8.3: each schedule planned at now, its items posted and its state kept in one step. */
  async tickSchedules(ref: QueueRef): Promise<number> {
    const items = this.prepare(ref);
    let states = this.disk.schedules.get(ref.key);
    if (!states) this.disk.schedules.set(ref.key, (states = new Map()));
    const now = this.now();
    let posted = 0;
    for (const name of [...states.keys()]) if (!ref.config.schedules.some((s) => s.name === name)) states.delete(name);
    for (const spec of ref.config.schedules) {
      const state = states.get(spec.name);
      const previous = state?.lastId == null ? undefined : items.get(state.lastId);
      const plan = planSchedule(spec, state, now, previous !== undefined && !isTerminal(previous.status));
      if (!plan.state) continue;
      const next = { ...plan.state };
      for (const at of plan.post) {
        const { id } = this.postNow(ref, { body: spec.item, postedBy: postedBy(spec.name), options: scheduledOptions(spec) });
        next.lastAt = at;
        next.lastId = id;
        posted++;
      }
      states.set(spec.name, next);
    }
    return posted;
  }

  async schedules(ref: QueueRef): Promise<ScheduleView[]> {
    if (this.state !== 'open') throw new StoreUnavailable(new Error('the store is not open'));
    const states = this.disk.schedules.get(ref.key);
    const now = this.now();
    return ref.config.schedules.map((spec) => scheduleView(spec, states?.get(spec.name), now));
  }

  async get(ref: QueueRef, id: string): Promise<StatusRecord | null> {
    const items = this.prepare(ref);
    const r = items.get(id);
    if (!r) return null;
    // Its links as they are now: a stamp that purges the item (retainSeconds 0) takes them with it.
    const links = this.disk.links.get(ref.key)?.get(id);
    const stamp = rules.fetched(r, this.now());
    if (stamp) this.settle(ref, items, stamp.record, r.status);
    return statusOf(r, links);
  }

  /** Keeps a record, and announces what a long poll may wait for: an item to claim, an item that became terminal. */
  private put(key: string, items: Map<string, ItemRecord>, record: ItemRecord, config?: QueueConfig): void {
    const before = items.get(record.id);
    // decisions §8.5: a lease that ends frees a place held claims wait for.
    const leased = (r: ItemRecord): boolean => r.status === 'claimed' || r.status === 'processing';
    if (config && (config.maxActive !== null || config.groupMaxActive !== null) && before && leased(before) && !leased(record)) this.notifier?.notify(claimTopic(key));
    items.set(record.id, record);
    if (isTerminal(record.status)) this.notifier?.notify(itemTopic(key, record.id));
    else if (record.status === 'pending' && record.availableAt === 0) this.notifier?.notify(claimTopic(key));
  }

  async progress(ref: QueueRef, id: string, body: string): Promise<SubmitOutcome | null> {
    return this.submit(ref, id, (r, now) => rules.progress(r, ref.config, body, now));
  }

  async result(ref: QueueRef, id: string, body: string, delivery?: rules.Delivery): Promise<SubmitOutcome | null> {
    return this.submit(ref, id, (r, now) => rules.result(r, body, now, delivery));
  }

  async error(ref: QueueRef, id: string, body: string, wish?: RetryWish, delivery?: rules.Delivery): Promise<SubmitOutcome | null> {
    return this.submit(ref, id, (r, now) => rules.error(r, ref.config, body, now, wish, delivery));
  }

  async release(ref: QueueRef, id: string, delaySeconds: number): Promise<SubmitOutcome | null> {
    return this.submit(ref, id, (r, now) => rules.release(r, delaySeconds, now));
  }

  async cancel(ref: QueueRef, id: string): Promise<SubmitOutcome | null> {
    return this.submit(ref, id, (r, now) => rules.cancel(r, now));
  }

  async counts(ref: QueueRef): Promise<Partial<Record<ItemStatus, number>>> {
    const out: Partial<Record<ItemStatus, number>> = {};
    for (const r of this.prepare(ref).values()) out[r.status] = (out[r.status] ?? 0) + 1;
    return out;
  }

  /**
   * The oldest claimable item passing the criteria, under the limits of decisions §8.5 checked in
   * their order (maxActive, the rate window, groupMaxActive) and, with fairness "groups", the
   * group served least recently at the highest priority.
   */
  private claimNow(ref: QueueRef, input: ClaimInput): Claimed | null {
    const items = this.prepare(ref);
    if (this.disk.paused.has(ref.key)) {
      if (input.held) input.held.reason = 'paused';
      return null;
    }
    const now = this.now();
    const config = ref.config;
    const claimable = [...items.values()].filter((r) => rules.claimable(r, now)).sort(rules.claimOrder);
    const matching = claimable.filter((r) => input.criteria === undefined || matches(JSON.parse(r.body) as Record<string, unknown>, input.criteria));
    if (matching.length === 0) return null;
    const leased = (group?: string): number => [...items.values()].filter((r) => (r.status === 'claimed' || r.status === 'processing') && (group === undefined || groupKey(r.group) === group)).length;
    const flow = this.flowOf(ref.key);
    const hold = (reason: 'maxActive' | 'rateLimit' | 'groupMaxActive', retryAt?: number): null => {
      if (input.held) {
        input.held.reason = reason;
        if (retryAt !== undefined) input.held.retryAt = retryAt;
      }
      return null;
    };
    if (config.maxActive !== null && leased() >= config.maxActive) return hold('maxActive');
    const rate = config.rateLimit;
    // Lease k may happen at now only if lease k − max happened at or before now − windowMs.
    if (rate !== null && flow.leases.length >= rate.max && flow.leases[flow.leases.length - rate.max]! > now - rate.windowMs) return hold('rateLimit', flow.leases[flow.leases.length - rate.max]! + rate.windowMs);
    const open = matching.filter((r) => config.groupMaxActive === null || leased(groupKey(r.group)) < config.groupMaxActive);
    if (open.length === 0) return hold('groupMaxActive');
    let found = open[0]!;
    if (config.fairness === 'groups') {
      const p = found.priority;
      const atP = open.filter((r) => r.priority === p);
      const turnOf = (g: string): number => flow.stamps.get(g) ?? -Infinity;
      const headOf = (g: string): number => claimable.find((r) => r.priority === p && groupKey(r.group) === g)!.ord;
      const groups = [...new Set(atP.map((r) => groupKey(r.group)))];
      groups.sort((a, b) => (turnOf(a) === turnOf(b) ? headOf(a) - headOf(b) : turnOf(a) < turnOf(b) ? -1 : 1));
      found = atP.find((r) => groupKey(r.group) === groups[0])!;
    }
    const { record } = rules.claim(found, config, input.worker, now);
    this.put(ref.key, items, record);
    flow.turn++;
    if (config.fairness === 'groups') flow.stamps.set(groupKey(found.group), flow.turn);
    if (rate !== null) flow.leases = [...flow.leases, now].slice(-rate.max);
    return claimedOf(record);
  }

  private flowOf(key: string): ModelFlow {
    let flow = this.disk.flows.get(key);
    if (!flow) this.disk.flows.set(key, (flow = { turn: 0, stamps: new Map(), leases: [] }));
    return flow;
  }

  private submit(ref: QueueRef, id: string, apply: (r: ItemRecord, now: number) => Submission): SubmitOutcome | null {
    const items = this.prepare(ref);
    const r = items.get(id);
    if (!r) return null;
    const outcome = apply(r, this.now());
    if (outcome.transition) this.settle(ref, items, outcome.transition.record, r.status);
    return { accepted: outcome.accepted, status: outcome.status };
  }

  /** The queue's items with every rule due now applied, under the rules the request carries. */
  private prepare(ref: QueueRef): Map<string, ItemRecord> {
    if (this.state !== 'open') throw new StoreUnavailable(new Error(this.state === 'new' ? 'the store is not open' : 'the server is stopping'));
    let items = this.disk.queues.get(ref.key);
    if (!items) {
      items = new Map();
      this.disk.queues.set(ref.key, items);
    }
    const now = this.now();
    // The rate window counts the leases made under a rate limit, the last `max` of them (as RateRing keeps them).
    const flow = this.disk.flows.get(ref.key);
    if (flow) flow.leases = ref.config.rateLimit === null ? [] : flow.leases.slice(-ref.config.rateLimit.max);
    // One deadline at a time, in the order they fell (rules.applyPassed), each change kept as it is
    // made (a copy, a callback owed) without applying the item's later deadlines with it.
    rules.applyPassed([...items.values()], (r) => r, ref.config, now, (r) => this.callbackOf(ref.key, r.id).owed, (r, t) => {
      const before = (items.get(r.id) ?? r).status;
      if (t.purged) {
        this.deadLetter(ref, before, t.record);
        this.forget(ref.key, items, r.id);
        this.notifier?.notify(itemTopic(ref.key, r.id));
        return null;
      }
      this.deadLetter(ref, before, t.record);
      this.oweCallback(ref, before, t.record);
      this.put(ref.key, items, t.record, ref.config);
      return t.record;
    });
    return items;
  }

  /**
   * Keeps a changed record, and then whatever its change made due at once under the rules in
   * force: an item that ends (or is fetched ended) under `retainSeconds: 0` is purged by the
   * request that ended it, not by the next one, which may come under other rules.
   */
  private settle(ref: QueueRef, items: Map<string, ItemRecord>, record: ItemRecord, before: ItemStatus): void {
    this.deadLetter(ref, before, record);
    this.oweCallback(ref, before, record);
    const t = rules.due(record, ref.config, this.now(), this.callbackOf(ref.key, record.id));
    if (!t) return this.put(ref.key, items, record, ref.config);
    if (!t.purged) {
      // Its lease ended with this change (a put that is never made is not announced otherwise).
      const stored = items.get(record.id);
      if (stored && (stored.status === 'claimed' || stored.status === 'processing')) this.put(ref.key, items, record, ref.config);
      return this.settle(ref, items, t.record, record.status);
    }
    // The change itself is announced too: a long poll on the item learns it ended.
    this.put(ref.key, items, record, ref.config);
    this.forget(ref.key, items, record.id);
    this.notifier?.notify(itemTopic(ref.key, record.id));
  }
}
