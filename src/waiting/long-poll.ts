import { isTerminal } from '../engine/item.js';
import type { Claimed, QueueRef, StatusRecord, Store } from '../store/store.js';
import type { Criteria } from '../engine/criteria.js';
import type { ClaimHold, HoldReason } from '../engine/limits.js';
import { claimTopic, itemTopic, type Notifier } from './notifier.js';

/**
 * The queue as a held request may still use it: its definition as it stands now, or undefined
 * once the definition is deleted or the caller may no longer do what it asked (decisions §2.4: a
 * PUT or DELETE takes effect for the next request, and each look at the store after a wait is one).
 */
export type QueueLookup = () => QueueRef | undefined;

/** A held claim or fetch whose queue was deleted, or whose caller lost the access, while it waited: it gets the wall. */
export class QueueWithdrawn extends Error {
  readonly code = 'queue-withdrawn';
  constructor() {
    super('the queue was deleted, or the caller lost access to it, while the request waited');
  }
}

export interface WaitingClaim {
  worker: string;
  criteria?: Criteria;
  /** How long to hold the request for a matching item (0 = answer at once). */
  waitMs: number;
  /**
   * When the wait began (Date.now()), if before this call: the request's arrival, so that looks
   * made before the wait (a first look, hand-ins) count against it. Absent: now.
   */
  since?: number;
  /** Aborted when the caller went away or the server is stopping: then it is answered empty. */
  signal?: AbortSignal;
  /** Up to this many items at once (decisions §3.8 `max`); absent: one, through the store's single claim. */
  max?: number;
  /**
   * Looked up before each look at the store and whenever a definition of the queue's host changes:
   * the claim goes on under the queue's rules as they are then, or ends with {@link QueueWithdrawn}.
   * Absent: the queue given is used throughout.
   */
  current?: QueueLookup;
  /**
   * decisions §8.5: filled in as the claim's looks at the store go, when the pause or a limit held
   * one of them back. Pass the same record to every call for one request (its first look and its
   * wait), and read it once the claim is answered.
   */
  holds?: ClaimHolds;
}

/** What held a claim request back (decisions §8.5), over all its looks at the store. */
export interface ClaimHolds {
  /** The reason of the first look that the pause or a limit held back; undefined when none was. */
  first?: HoldReason;
  /** The last look's hold; undefined when the last look was not held back (it found nothing to take, or took all it asked for). */
  last?: ClaimHold;
}

/**
 * The shortest wait before a held claim looks again for a rate window that, by this node's clock,
 * has moved on already (the store's clock may be behind it: a database's): a second look then
 * comes soon, never in a tight loop.
 */
const RATE_RECHECK_MS = 50;

interface ClaimWaiter {
  ref: QueueRef;
  claim: WaitingClaim;
  /** A claim for it is being made: its time running out or a hang-up is handled when that returns. */
  busy: boolean;
  /** Its wait ran out, or its caller went away. */
  over: boolean;
  /** When its wait runs out (Date.now() ms). */
  deadline: number;
  settle: (claimed: Claimed[]) => void;
  fail: (err: unknown) => void;
}

interface QueueWaiters {
  key: string;
  waiters: ClaimWaiter[];
  /** Counts announcements: a claim that found nothing tries again if one came meanwhile. */
  version: number;
  /** Claims under way that may wait: the queue's announcements are listened to while there are any. */
  interested: number;
  unsubscribe: (() => void) | undefined;
  /**
   * decisions §8.5: a look again at the time the rate limit lets the next lease happen, for the
   * waiting claims it held back (one timer per queue, at the soonest such time). A lease end is
   * announced on the claim topic instead; the rate window moving on is announced by nobody.
   */
  rateTimer: { at: number; timer: NodeJS.Timeout } | undefined;
}

/**
 * Long polls (decisions §3.3 `wait`, §3.6 `?wait=N`), above every store: a claim that finds
 * nothing waits for its queue's announcement that items can be claimed, and a fetch of an item
 * that is not terminal waits for the item's announcement; both then ask the store again. A store
 * announces a change through the {@link Notifier} only once it is durable, so a waiting request
 * never sees what a crash could take back.
 *
 * Waiters are served oldest first: at an announcement every waiting claim of the queue asks the
 * store in the same turn, in the order they came, so the store hands the oldest item to the
 * longest-waiting claim and their writes share one commit.
 */
export class LongPolls {
  private readonly queues = new Map<string, QueueWaiters>();
  /** Fetches held with a {@link QueueLookup}: each looks its queue up again when a definition of its host changes. */
  private readonly fetches = new Set<{ key: string; recheck: () => void }>();

  constructor(
    private readonly store: Store,
    private readonly notifier: Notifier,
  ) {}

  /** Claims the oldest matching item, waiting up to `waitMs` for one; null when none came. */
  async claim(ref: QueueRef, claim: WaitingClaim): Promise<Claimed | null> {
    return (await this.claimMany(ref, { ...claim, max: undefined }))[0] ?? null;
  }

  /**
   * Claims up to `claim.max` of the oldest matching items (one without `max`), waiting up to
   * `waitMs` until at least one can be claimed; [] when none came.
   */
  async claimMany(ref: QueueRef, claim: WaitingClaim): Promise<Claimed[]> {
    if (claim.waitMs <= 0) return this.ask(ref, claim);
    // A wait that the rate limit holds back looks again when the window moves on: it needs its holds.
    if (!claim.holds) claim = { ...claim, holds: {} };
    const queue = this.queueOf(ref.key);
    const deadline = (claim.since ?? Date.now()) + claim.waitMs;
    // Listening before the first look: an announcement made while it looks is not missed.
    this.listen(queue, 1);
    try {
      return await this.waitFor(queue, ref, claim, deadline);
    } finally {
      this.listen(queue, -1);
    }
  }

  private async waitFor(queue: QueueWaiters, ref: QueueRef, claim: WaitingClaim, deadline: number): Promise<Claimed[]> {
    for (;;) {
      const version = queue.version;
      const claimed = await this.ask(ref, claim);
      if (claimed.length > 0 || Date.now() >= deadline || claim.signal?.aborted) return claimed;
      // Items were announced while the store looked: look again rather than wait for the next.
      if (queue.version === version) break;
    }
    // A definition may have changed while the store looked; from here on, definitionsChanged sees this claim.
    if (claim.current && !claim.current()) throw new QueueWithdrawn();
    return new Promise<Claimed[]>((resolve, reject) => {
      const leave = (): void => {
        clearTimeout(timer);
        claim.signal?.removeEventListener('abort', giveUp);
        const i = queue.waiters.indexOf(waiter);
        if (i !== -1) queue.waiters.splice(i, 1);
        if (queue.waiters.length === 0 && queue.rateTimer) {
          clearTimeout(queue.rateTimer.timer);
          queue.rateTimer = undefined;
        }
      };
      const waiter: ClaimWaiter = {
        ref,
        claim,
        busy: false,
        over: false,
        deadline,
        settle: (claimed) => {
          leave();
          resolve(claimed);
        },
        fail: (err) => {
          leave();
          reject(err);
        },
      };
      const giveUp = (): void => {
        waiter.over = true;
        if (!waiter.busy) waiter.settle([]);
      };
      const timer = setTimeout(giveUp, deadline - Date.now());
      claim.signal?.addEventListener('abort', giveUp, { once: true });
      queue.waiters.push(waiter);
      this.lookAgainAtRate(queue, waiter);
    });
  }

  /**
   * The item's status record, held up to `waitMs` until the item is terminal (or gone). The store
   * stamps the first fetch that returns it terminal.
   */
  async get(ref: QueueRef, id: string, waitMs: number, signal?: AbortSignal, current?: QueueLookup): Promise<StatusRecord | null> {
    if (waitMs <= 0 || signal?.aborted) return this.store.get(ref, id);
    let wake: () => void = () => {};
    let changed = false;
    // Listening before the first look: a change between the two is not missed.
    const unsubscribe = this.notifier.subscribe(itemTopic(ref.key, id), () => {
      changed = true;
      wake();
    });
    // Woken when the queue is withdrawn from the caller (see definitionsChanged), to end with the wall.
    const held = current && {
      key: ref.key,
      recheck: (): void => {
        if (current()) return;
        changed = true;
        wake();
      },
    };
    if (held) this.fetches.add(held);
    try {
      const deadline = Date.now() + waitMs;
      for (;;) {
        const at = current ? current() : ref;
        if (!at) throw new QueueWithdrawn();
        const record = await this.store.get(at, id);
        if (!record || isTerminal(record.status) || signal?.aborted || Date.now() >= deadline) return record;
        if (changed) {
          // It changed while the store looked: look again.
          changed = false;
          continue;
        }
        await new Promise<void>((resolve) => {
          const timer = setTimeout(done, Math.max(0, deadline - Date.now()));
          signal?.addEventListener('abort', done, { once: true });
          wake = done;
          function done(): void {
            clearTimeout(timer);
            signal?.removeEventListener('abort', done);
            resolve();
          }
        });
      }
    } finally {
      unsubscribe();
      if (held) this.fetches.delete(held);
    }
  }

  /**
   * A definition of `host` (a queue or a user) was put or deleted, here or on another node: every
   * claim and fetch held on its queues with a {@link QueueLookup} looks its queue up again, and one
   * that may no longer use it ends now with {@link QueueWithdrawn} rather than wait out its time.
   * The others go on, under the queue's rules as they are at their next look.
   */
  definitionsChanged(host: string): void {
    const prefix = `${host}/`;
    for (const queue of this.queues.values()) {
      if (queue.waiters.length === 0 || !queue.key.startsWith(prefix)) continue;
      for (const waiter of [...queue.waiters]) {
        // A claim under way is looked at when it comes back (see attempt).
        if (waiter.busy || waiter.over || !waiter.claim.current || waiter.claim.current()) continue;
        waiter.fail(new QueueWithdrawn());
      }
    }
    for (const held of this.fetches) if (held.key.startsWith(prefix)) held.recheck();
  }

  /** One look at the store: its single claim, or its claim of up to `max`, on the queue as it is now. */
  private async ask(ref: QueueRef, claim: WaitingClaim): Promise<Claimed[]> {
    const at = claim.current ? claim.current() : ref;
    if (!at) throw new QueueWithdrawn();
    // A fresh hold per look: the store leaves it untouched when nothing held this look back.
    const held: ClaimHold = {};
    const input = { worker: claim.worker, criteria: claim.criteria, signal: claim.signal, held };
    const claimed = claim.max !== undefined ? await this.store.claimMany(at, input, claim.max) : await this.store.claim(at, input).then((one) => (one ? [one] : []));
    const holds = claim.holds;
    if (holds) {
      holds.last = held.reason === undefined ? undefined : held;
      if (held.reason !== undefined) holds.first ??= held.reason;
    }
    return claimed;
  }

  /**
   * A waiting claim that the rate limit held back at its last look looks again when the window
   * lets one more lease happen (if that comes before its wait runs out). The queue keeps one timer,
   * at the soonest such time; when it fires every waiting claim looks, oldest first, as at an
   * announcement, and those held back again set it anew.
   */
  private lookAgainAtRate(queue: QueueWaiters, waiter: ClaimWaiter): void {
    const last = waiter.claim.holds?.last;
    if (last?.reason !== 'rateLimit' || last.retryAt === undefined || waiter.over) return;
    const now = Date.now();
    // A timer fires on its own clock, which may run a millisecond behind Date.now(): one past the time is sure.
    const at = last.retryAt > now ? last.retryAt + 1 : now + RATE_RECHECK_MS;
    if (at >= waiter.deadline) return;
    if (queue.rateTimer && queue.rateTimer.at <= at) return;
    if (queue.rateTimer) clearTimeout(queue.rateTimer.timer);
    const timer = setTimeout(() => {
      queue.rateTimer = undefined;
      this.serve(queue);
    }, at - now);
    // Never what keeps a stopping process alive: its waiters are answered by then.
    timer.unref();
    queue.rateTimer = { at, timer };
  }

  private queueOf(key: string): QueueWaiters {
    let queue = this.queues.get(key);
    if (!queue) {
      queue = { key, waiters: [], version: 0, interested: 0, unsubscribe: undefined, rateTimer: undefined };
      this.queues.set(key, queue);
    }
    return queue;
  }

  /**
   * Counts a claim that may wait in or out: the queue's announcements are listened to while one
   * is under way (with several nodes, the others are told only of queues someone waits on).
   */
  private listen(queue: QueueWaiters, delta: 1 | -1): void {
    queue.interested += delta;
    if (queue.interested === 1 && delta === 1) {
      queue.unsubscribe = this.notifier.subscribe(claimTopic(queue.key), () => {
        queue.version++;
        this.serve(queue);
      });
    } else if (queue.interested === 0) {
      queue.unsubscribe?.();
      queue.unsubscribe = undefined;
    }
  }

  /** Items can be claimed: every waiting claim of the queue asks the store, oldest first, in this turn. */
  private serve(queue: QueueWaiters): void {
    for (const waiter of [...queue.waiters]) {
      if (waiter.busy || waiter.over) continue;
      this.attempt(queue, waiter);
    }
  }

  private attempt(queue: QueueWaiters, waiter: ClaimWaiter): void {
    waiter.busy = true;
    const version = queue.version;
    this.ask(waiter.ref, waiter.claim).then(
      (claimed) => {
        waiter.busy = false;
        if (claimed.length > 0 || waiter.over) return waiter.settle(claimed);
        // Its queue was withdrawn while it asked.
        if (waiter.claim.current && !waiter.claim.current()) return waiter.fail(new QueueWithdrawn());
        // Announced while it asked (and so skipped): it asks again.
        if (queue.version !== version) this.attempt(queue, waiter);
        else this.lookAgainAtRate(queue, waiter);
      },
      (err: unknown) => {
        waiter.busy = false;
        waiter.fail(err);
      },
    );
  }
}
