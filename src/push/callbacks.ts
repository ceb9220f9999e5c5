// decisions §9.2: the delivery of callbacks owed when items end. Every node runs one loop: it
// takes due callbacks from the store (each held for one attempt, whichever node takes it), POSTs
// each item's status record, and settles the attempt; the store keeps the obligation durable and
// decides the backoff and the drop.
import type { Agent } from 'undici';
import type { QueueConfig } from '../engine/config.js';
import { sourceJson } from '../engine/rules.js';
import { jsonString } from '../json-text.js';
import type { CallbackAttempt, CallbackSettlement, StatusRecord, Store, TakenCallback } from '../store/store.js';
import type { PushAllowList } from './allow-list.js';
import { newAgent, send } from './send.js';
import { sign } from './sign.js';

/** How long one attempt may take, from connecting to the end of the answer. */
export const CALLBACK_TIMEOUT_MS = 30_000;
/** A callback taken is held this long: longer than an attempt may take, so that no other node takes it meanwhile. */
export const CALLBACK_HOLD_MS = CALLBACK_TIMEOUT_MS + 30_000;
/** At most this long between two looks for due callbacks (those other nodes made owed, and retries coming due). */
export const CALLBACK_POLL_MS = 1000;
/** Attempts under way at once on a node. */
export const CALLBACK_CONCURRENCY = 32;
/** Callbacks born held by this node (Store.holdOwnCallbacks) waiting for room to be attempted, at most; past it they are born due, for any node. */
export const CALLBACK_BORN_MAX = 1000;

export type CallbackOutcome = 'delivered' | 'failed' | 'dropped';

export interface CallbackDeliveryOptions {
  store: Store;
  /** A queue's current rules (its push.secret signs its callbacks), or undefined when it is not defined now. */
  configFor: (key: string) => QueueConfig | undefined;
  /** Checked at each attempt: a URL no longer allowed is a failed attempt. */
  allow: PushAllowList;
  warn: (line: string) => void;
  /** Told of each attempt settled (metric svcq_callbacks_total). */
  counted?: (key: string, outcome: CallbackOutcome) => void;
  now?: () => number;
  timeoutMs?: number;
  pollMs?: number;
}

/** The JSON text a callback POSTs: the item's status record (decisions §2.1, §8), bodies spliced in as stored. */
export function callbackBody(r: StatusRecord): string {
  const group = r.group === null ? 'null' : jsonString(r.group);
  const dead = r.deadLetterId === undefined ? '' : `,"deadLetterId":"${r.deadLetterId}"`;
  const source = r.source === undefined ? '' : `,"source":${JSON.stringify(sourceJson(r.source))}`;
  return `{"id":"${r.id}","status":"${r.status}","postedBy":${jsonString(r.postedBy)},"postedAt":${r.postedAt},"updatedAt":${r.updatedAt},"finishedAt":${r.finishedAt},"attempts":${r.attempts},"priority":${r.priority},"group":${group},"runAt":${r.runAt},"progress":${r.progress},"result":${r.result},"error":${r.error}${dead}${source}}`;
}

/**
 * The callback loop of one node. Woken when this node's store makes a callback owed, and every
 * {@link CALLBACK_POLL_MS} besides; takes at most as many callbacks as it has room for attempts.
 */
export class CallbackDelivery {
  /** This loop's connections, made at its first attempt (undici is loaded then: see send.ts). */
  private agent: Promise<Agent> | undefined;
  private readonly now: () => number;
  private readonly timeoutMs: number;
  private readonly pollMs: number;
  private readonly inFlight = new Set<Promise<void>>();
  private closed = false;
  private looking: Promise<void> | undefined;
  private again = false;
  private soon = false;
  private readonly allowedUrls = new Map<string, boolean>();
  private timer: NodeJS.Timeout | undefined;
  private failing = false;
  /** Callbacks born held by this node, waiting for room; attempted before any taken from the store. */
  private readonly born: TakenCallback[] = [];
  /** Whether the store hands this node the callbacks it makes owed (so a look is needed only for the others). */
  private readonly adopting: boolean;
  /** The last look filled the room it had: more may be due in the store. */
  private fullLook = false;
  /** Attempts cut short by a stop (not settled): their holds are ended, so that any node takes them at once. */
  private readonly cut: TakenCallback[] = [];

  constructor(private readonly options: CallbackDeliveryOptions) {
    this.now = options.now ?? Date.now;
    this.timeoutMs = options.timeoutMs ?? CALLBACK_TIMEOUT_MS;
    this.pollMs = options.pollMs ?? CALLBACK_POLL_MS;
    options.store.onCallbacksOwed(() => this.wake());
    this.adopting = options.store.holdOwnCallbacks !== undefined;
    options.store.holdOwnCallbacks?.({
      holdMs: CALLBACK_HOLD_MS,
      wants: () => !this.closed && this.born.length < CALLBACK_BORN_MAX,
      deliver: (born) => {
        this.born.push(...born);
        this.pump();
      },
    });
  }

  /**
   * Starts attempts of the callbacks born held here while there is room. One whose hold has too
   * little left for a whole attempt is left to its hold's end (then any node takes it), so that
   * no two attempts of it are ever under way at once.
   */
  private pump(): void {
    while (!this.closed && this.born.length > 0 && this.inFlight.size < CALLBACK_CONCURRENCY) {
      const c = this.born.shift()!;
      if (c.dueAt - this.now() > this.timeoutMs) this.attemptNow(c);
    }
  }

  start(): void {
    this.wake();
  }

  /**
   * Looks for due callbacks at the end of this turn of the event loop (or right after the look
   * under way): attempts that end together, and callbacks made owed together, share one take.
   */
  wake(): void {
    if (this.closed || this.soon) return;
    if (this.looking) {
      this.again = true;
      return;
    }
    this.soon = true;
    setImmediate(() => {
      this.soon = false;
      this.lookNow();
    });
  }

  private lookNow(): void {
    if (this.closed) return;
    if (this.looking) {
      this.again = true;
      return;
    }
    clearTimeout(this.timer);
    this.timer = undefined;
    this.looking = this.look().finally(() => {
      this.looking = undefined;
      if (this.closed) return;
      if (this.again) {
        this.again = false;
        this.wake();
      } else {
        this.timer = setTimeout(() => this.wake(), this.pollMs);
        this.timer.unref();
      }
    });
  }

  /**
   * Stops taking callbacks and waits for the attempts under way (each ends within the send
   * timeout, which the agent's close cuts short): an attempt cut off is not settled, and its
   * callback is due again when its hold runs out (at once after a restart of the embedded store).
   */
  async close(): Promise<void> {
    this.closed = true;
    clearTimeout(this.timer);
    await this.looking;
    if (this.agent) await (await this.agent).destroy().catch(() => undefined);
    await Promise.allSettled([...this.inFlight]);
    // Not attempted after all: due at once for any node, not at the end of their holds.
    const left = [...this.born.splice(0), ...this.cut.splice(0)];
    if (left.length > 0) await this.options.store.releaseCallbacks?.(left).catch(() => undefined);
  }

  /** PushAllowList.allows, remembered per URL: the list is fixed for the server's life, and most callbacks go to a few URLs. */
  private allowed(url: string): boolean {
    let ok = this.allowedUrls.get(url);
    if (ok === undefined) {
      if (this.allowedUrls.size >= 1000) this.allowedUrls.clear();
      this.allowedUrls.set(url, (ok = this.options.allow.allows(url)));
    }
    return ok;
  }

  private async look(): Promise<void> {
    const room = CALLBACK_CONCURRENCY - this.inFlight.size;
    if (room <= 0) return;
    let taken: TakenCallback[];
    try {
      taken = await this.options.store.takeCallbacks(room, CALLBACK_HOLD_MS);
      if (this.failing) {
        this.failing = false;
        this.options.warn('callbacks are taken again');
      }
    } catch (err) {
      if (!this.failing) this.options.warn(`callbacks could not be taken (${(err as Error).message}); trying again every second`);
      this.failing = true;
      return;
    }
    for (const c of taken) this.attemptNow(c);
    // A full batch: more may be due at once.
    this.fullLook = taken.length === room;
    if (this.fullLook) this.again = true;
  }

  /** One attempt of a callback held by this node, under way until it is settled. */
  private attemptNow(c: TakenCallback): void {
    const attempt = this.deliver(c).finally(() => {
      this.inFlight.delete(attempt);
      this.pump();
      // Room for more: the next look need not wait for the poll. Once half the room is free,
      // so that one take serves many attempts rather than one each. A node handed its own
      // callbacks looks only when its last look was full; the poll finds the rest.
      if (!this.closed && this.inFlight.size <= CALLBACK_CONCURRENCY / 2 && (!this.adopting || this.fullLook)) this.wake();
    });
    this.inFlight.add(attempt);
  }

  private async deliver(c: TakenCallback): Promise<void> {
    const attempt = await this.attempt(c);
    if (this.closed && !attempt.delivered) {
      this.cut.push(c);
      return;
    }
    let settled: CallbackSettlement;
    try {
      settled = await this.options.store.settleCallback(c, attempt);
    } catch (err) {
      // Left owed: due again once its hold runs out.
      this.options.warn(`a callback's attempt could not be recorded (${(err as Error).message}); it will be tried again`);
      return;
    }
    if (settled === 'stale') return;
    const outcome: CallbackOutcome = settled === 'delivered' ? 'delivered' : settled === 'dropped' ? 'dropped' : 'failed';
    this.options.counted?.(c.queue, outcome);
    if (settled === 'dropped') this.options.warn(`a callback to ${c.url} for item ${c.itemId} of ${c.queue} was dropped: it still failed 24 hours after the item ended (${attempt.delivered ? '' : attempt.reason})`);
  }

  /** One attempt: a 2xx within the timeout delivers it; anything else is a failure, with a sentence saying why. */
  private async attempt(c: TakenCallback): Promise<CallbackAttempt> {
    if (!this.allowed(c.url)) return { delivered: false, reason: this.options.allow.refusal(c.url) };
    const record: StatusRecord = c.record ?? { id: c.itemId, status: c.event, postedBy: '', postedAt: 0, updatedAt: 0, finishedAt: null, attempts: 0, priority: 0, group: null, runAt: null, progress: null, result: null, error: null };
    const body = callbackBody(record);
    const headers: Record<string, string> = {
      'content-type': 'application/json',
      'svcq-event': c.event,
      'svcq-queue': c.queue,
      'svcq-item-id': c.itemId,
    };
    const secret = this.options.configFor(c.queue)?.push?.secret;
    if (secret) Object.assign(headers, sign(secret, body, this.now()));
    // decisions §9.1's sender: one POST, no redirect followed, the whole exchange within the timeout.
    const sent = await send(c.url, body, headers, { timeoutMs: this.timeoutMs, maxBytes: 200, dispatcher: await (this.agent ??= newAgent({ connect: { timeout: this.timeoutMs }, headersTimeout: this.timeoutMs, bodyTimeout: this.timeoutMs })) });
    return sent.reason === null ? { delivered: true } : { delivered: false, reason: sent.reason };
  }
}
