import { hostname } from 'node:os';
import type { QueueRuntime } from '../definitions/registry.js';
import type { PushConfig, QueueConfig } from '../engine/config.js';
import { hasLimits } from '../engine/limits.js';
import type { PushState } from '../operators/answers.js';
import type { Delivery, RetryWish } from '../engine/rules.js';
import type { Claimed, QueueRef, Store } from '../store/store.js';
import { QueueWithdrawn, type LongPolls } from '../waiting/long-poll.js';
import type { PushAllowList } from './allow-list.js';
import { ANSWER_TEXT_BYTES, send, type Sent } from './send.js';
import { sign } from './sign.js';

/** How long one claim of a push queue is held waiting for items before it asks again (a long poll, not a timer). */
const CLAIM_WAIT_MS = 30_000;
/** After the store failed a claim (a database away), the pause before the next. */
const STORE_RETRY_MS = 1000;
/**
 * Claims of one push queue under way at once on a node, each for slots the others do not ask
 * for: a slot freed while one claim is under way is asked for by the next at once, rather than
 * after that claim's transaction (on PostgreSQL, milliseconds) comes back.
 */
const CLAIMS_AT_ONCE = 2;
/** A lease left shorter than the delivery's timeout and this: the item claimed ahead is released rather than sent. */
const LEASE_MARGIN_MS = 1000;

/**
 * Items a lane claims ahead of its free slots, as `svcq work` prefetches: up to `concurrency`, on
 * a queue with no limit and no fair turns (there every lease counts against the limits or the
 * turns, and is taken only for a request that goes out at once). A request that ends starts the
 * next item claimed ahead at once, without waiting for a claim's round trip to the store.
 */
function mostClaimedAhead(config: QueueConfig, push: PushConfig): number {
  return hasLimits(config) || config.fairness === 'groups' ? 0 : push.concurrency;
}

/** decisions §9.1: the outcome label of `svcq_push_requests_total`. */
export type PushOutcome = 'delivered' | 'answered-error' | 'timeout' | 'connection-failed';

/** What a {@link Pusher} tells the metrics: one delivery's outcome and time. */
export interface PushObserver {
  pushed(host: string, queue: string, outcome: PushOutcome, seconds: number): void;
}

/** decisions §9.1: a push queue as operators see it on this node (the queue view, `svcq queue`, `svcq top`). */
export type PushView = PushState;

/** What a {@link Pusher} needs of the server. */
export interface PusherDeps {
  store: Store;
  waits: LongPolls;
  /** The queue's definition as it stands now, or undefined once deleted. */
  queue(key: string): QueueRuntime | undefined;
  /** Every defined queue now. */
  queues(): QueueRuntime[];
  allow: PushAllowList;
  /** The largest result kept whole (the server's `--max-body`): a 2xx's JSON object larger than that is kept as text. */
  maxBody: number;
  observer?: PushObserver;
  warn: (line: string) => void;
  /** This process's name among the nodes (default `<hostname>:<pid>`); the worker is `push:<node>`. */
  node?: string;
}

/**
 * decisions §9.1: works every push queue of the server as a worker named `push:<node>` would. For
 * each defined queue with `push`, a {@link PushLane} claims through the same long polls a worker's
 * claim waits in (so priority, delays, limits, fair turns and the pause apply unchanged), up to the
 * queue's `concurrency` at once on this node, and hands in a result or an error for each, with the
 * delivery's event in the same atomic step. A node that dies mid-delivery leaves the lease to end,
 * and the item is claimed and delivered again (at least once).
 */
export class Pusher {
  readonly worker: string;
  private readonly lanes = new Map<string, PushLane>();
  private stopped = false;

  constructor(private readonly deps: PusherDeps) {
    this.worker = `push:${deps.node ?? `${hostname()}:${process.pid}`}`;
  }

  /** Starts a lane for every push queue defined now; call {@link changed} for each definition change after. */
  start(): void {
    for (const q of this.deps.queues()) if (q.config.push) this.changed(q.key);
  }

  /** A queue's definition was put, re-read or dropped: its lane starts, follows the new rules, or stops claiming. */
  changed(key: string): void {
    if (this.stopped) return;
    const lane = this.lanes.get(key);
    if (lane) {
      lane.changed();
      return;
    }
    if (!this.deps.queue(key)?.config.push) return;
    const started = new PushLane(key, this.deps, this.worker);
    this.lanes.set(key, started);
    void started.run().finally(() => {
      if (this.lanes.get(key) === started && !this.stopped) this.lanes.delete(key);
      // Defined again with push while its last deliveries ended: a new lane.
      if (!this.stopped && !this.lanes.has(key) && this.deps.queue(key)?.config.push) this.changed(key);
    });
  }

  /** The queue's push state on this node, or null when it is not a push queue. */
  view(key: string): PushView | null {
    const push = this.deps.queue(key)?.config.push;
    if (!push) return null;
    const lane = this.lanes.get(key);
    const refused = !this.deps.allow.allows(push.url);
    const view: PushView = {
      url: push.url,
      inFlight: lane?.inFlight.size ?? 0,
      concurrency: push.concurrency,
      claimedAhead: lane?.claimedAhead ?? 0,
      last: lane?.last ?? null,
      consecutiveFailures: lane?.consecutiveFailures ?? 0,
      failing: refused || (lane?.consecutiveFailures ?? 0) > 0,
      lastError: refused ? this.deps.allow.refusal(push.url) : (lane?.lastError ?? null),
      refused,
    };
    return view;
  }

  /**
   * The server is stopping: no new delivery is started; those in flight may finish within
   * `graceMs`, and those still in flight then are abandoned and released (pending again at once,
   * their attempt not counted), so that another node or the next start delivers them.
   */
  async stop(graceMs: number): Promise<void> {
    this.stopped = true;
    const lanes = [...this.lanes.values()];
    for (const lane of lanes) lane.stopClaiming();
    const settled = Promise.all(lanes.map((lane) => lane.drained()));
    let timer: NodeJS.Timeout | undefined;
    const graceOver = new Promise<void>((resolve) => (timer = setTimeout(resolve, graceMs)));
    await Promise.race([settled, graceOver]);
    clearTimeout(timer);
    for (const lane of lanes) lane.abandon();
    await settled;
  }
}

/** A push queue as a lane claims from it. */
type PushRef = QueueRef & { config: { push: PushConfig } };

/** One delivery under way: its abort (a stop), and whether its request has ended (its slot is free). */
interface InFlight {
  abort: AbortController;
  answered: boolean;
}

/** One push queue's deliveries on this node. */
class PushLane {
  /** Deliveries under way, until their result or error is recorded. */
  readonly inFlight = new Map<string, InFlight>();
  /** Requests under way: what `concurrency` bounds. */
  private requests = 0;
  /** Items claimed ahead, waiting for a request to end (see {@link mostClaimedAhead}). */
  private readonly ahead: Array<{ ref: PushRef; item: Claimed }> = [];
  get claimedAhead(): number {
    return this.ahead.length;
  }
  /** Claims under way, and the slots they asked for together (not free for another claim until each comes back). */
  private claims = 0;
  private asked = 0;
  /** Set by a claim that ended the lane (its queue withdrawn) or failed in the store (when to claim again). */
  private withdrawn = false;
  private retryAt = 0;
  /** The server's stop abandoned this lane's deliveries (see {@link abandon}). */
  private abandoned = false;
  private readonly claimsEnded: Array<() => void> = [];
  last: PushView['last'] = null;
  consecutiveFailures = 0;
  lastError: string | null = null;
  private stopping = false;
  /** Ends the claim under way (a definition change, a stop), so that the loop reads the queue again. */
  private wait = new AbortController();
  /** Resolves the loop's pause (a full lane, a refused URL, a store failure). */
  private wake: (() => void) | null = null;
  private readonly idle: Array<() => void> = [];
  private warnedRefusal: string | null = null;

  constructor(
    private readonly key: string,
    private readonly deps: PusherDeps,
    private readonly worker: string,
  ) {}

  /** The queue as it stands now, while it is a push queue. */
  private current(): PushRef | undefined {
    const q = this.deps.queue(this.key);
    if (!q?.config.push) return undefined;
    return { key: q.key, host: q.host, name: q.name, config: q.config as PushRef['config'] };
  }

  /** Claims while the queue is a push queue and the server runs; resolves once its last delivery has ended. */
  async run(): Promise<void> {
    while (!this.stopping) {
      // A change already seen here (the loop reads the queue again below) need not end the next claim.
      if (this.wait.signal.aborted) this.wait = new AbortController();
      const ref = this.current();
      if (!ref) break;
      const push = ref.config.push;
      if (!this.deps.allow.allows(push.url)) {
        // decisions §9: a URL outside --push-allow (a definition stored before the server was
        // started with a shorter list) is never called; the queue's items wait, for a worker or
        // for a restart with the URL allowed, rather than fail for the server's configuration.
        if (this.warnedRefusal !== push.url) this.deps.warn(`push queue ${this.key}: ${this.deps.allow.refusal(push.url)}; its items are not delivered`);
        this.warnedRefusal = push.url;
        await this.pause();
        continue;
      }
      if (this.withdrawn) break;
      const retryIn = this.retryAt - Date.now();
      if (retryIn > 0) {
        await this.pause(retryIn);
        continue;
      }
      const free = push.concurrency + mostClaimedAhead(ref.config, push) - this.requests - this.ahead.length - this.asked;
      if (free <= 0 || this.claims >= CLAIMS_AT_ONCE) {
        await this.pause();
        continue;
      }
      this.claim(ref, free);
    }
    this.releaseAhead();
    await this.drained();
  }

  /** One claim of up to `max` items, under way beside the loop: each item it gets is delivered at once while a slot is free, else kept to go out as one frees. */
  private claim(ref: PushRef, max: number): void {
    this.claims += 1;
    this.asked += max;
    this.deps.waits
      .claimMany(ref, { worker: this.worker, waitMs: CLAIM_WAIT_MS, max, signal: this.wait.signal, current: () => this.current() })
      .then(
        (claimed) => {
          for (const item of claimed) {
            if (this.requests < ref.config.push.concurrency) this.start(ref, item);
            // Brought by a claim under way as the server stops: released, not sent.
            else if (this.stopping) this.start(ref, item, true);
            else this.ahead.push({ ref, item });
          }
        },
        (err: unknown) => {
          if (err instanceof QueueWithdrawn) this.withdrawn = true;
          else if (!this.stopping) {
            this.deps.warn(`push queue ${this.key}: a claim failed (${(err as Error).message}); trying again`);
            this.retryAt = Date.now() + STORE_RETRY_MS;
          }
        },
      )
      .finally(() => {
        this.claims -= 1;
        this.asked -= max;
        if (this.claims === 0) for (const resolve of this.claimsEnded.splice(0)) resolve();
        this.wakeUp();
      });
  }

  /** Resolves once no claim is under way (their items started). */
  private claimsDone(): Promise<void> {
    if (this.claims === 0) return Promise.resolve();
    return new Promise<void>((resolve) => this.claimsEnded.push(resolve));
  }

  /** Waits until woken (a delivery ended, a definition changed, a stop), or `ms` passed. */
  private pause(ms?: number): Promise<void> {
    return new Promise<void>((resolve) => {
      const timer = ms === undefined ? undefined : setTimeout(done, ms);
      this.wake = done;
      function done(): void {
        clearTimeout(timer);
        resolve();
      }
    });
  }

  private wakeUp(): void {
    const wake = this.wake;
    this.wake = null;
    wake?.();
  }

  /** The definition changed: the claim under way ends, and the loop goes on under the new rules. */
  changed(): void {
    this.wait.abort();
    this.wakeUp();
  }

  stopClaiming(): void {
    this.stopping = true;
    this.wait.abort();
    this.releaseAhead();
    this.wakeUp();
  }

  /** The items claimed ahead are released (pending again at once, their attempt not counted), not sent. */
  private releaseAhead(): void {
    for (const { ref, item } of this.ahead.splice(0)) this.start(ref, item, true);
  }

  /** Abandons every delivery still in flight, and any a claim still under way brings: each is released rather than recorded. */
  abandon(): void {
    this.abandoned = true;
    for (const delivery of this.inFlight.values()) delivery.abort.abort();
  }

  /** Resolves once no claim is under way and no delivery is in flight. */
  async drained(): Promise<void> {
    await this.claimsDone();
    if (this.inFlight.size === 0) return;
    await new Promise<void>((resolve) => this.idle.push(resolve));
  }

  private start(ref: PushRef, item: Claimed, release = false): void {
    const delivery: InFlight = { abort: new AbortController(), answered: false };
    // Claimed as the stop's grace ran out, or claimed ahead and not to be sent: released at once.
    if (this.abandoned || release) delivery.abort.abort();
    this.inFlight.set(item.id, delivery);
    this.requests += 1;
    this.deliver(ref, item, delivery)
      .catch((err: unknown) => {
        // The lease ends and the item is delivered again: at least once.
        this.deps.warn(`push queue ${this.key}: item ${item.id} could not be recorded (${(err as Error).message}); it is delivered again when its lease ends`);
      })
      .finally(() => {
        this.answered(delivery);
        this.inFlight.delete(item.id);
        if (this.inFlight.size === 0) for (const resolve of this.idle.splice(0)) resolve();
        this.wakeUp();
      });
  }

  /**
   * The delivery's request has ended: its slot is free at once, so that the next claim goes out
   * beside the result or error being recorded (the store folds the two into one durable write).
   */
  private answered(delivery: InFlight): void {
    if (delivery.answered) return;
    delivery.answered = true;
    this.requests -= 1;
    const next = this.ahead.shift();
    if (next !== undefined) {
      const ref = this.current() ?? next.ref;
      // A lease that could end before the delivery's answer: released, to be claimed again.
      this.start(next.ref, next.item, next.item.lease.until - Date.now() < ref.config.push.timeoutMs + LEASE_MARGIN_MS);
    }
    this.wakeUp();
  }

  private async deliver(claimedAs: PushRef, item: Claimed, delivery: InFlight): Promise<void> {
    // The rules as they stand now (a definition put since the claim), the URL checked again.
    const ref = this.current() ?? claimedAs;
    const push = ref.config.push;
    const { store } = this.deps;
    if (!this.deps.allow.allows(push.url) || delivery.abort.signal.aborted) {
      await store.release(ref, item.id, 0);
      return;
    }
    const headers: Record<string, string> = {};
    for (const [name, value] of Object.entries(push.headers)) headers[name.toLowerCase()] = value;
    headers['content-type'] = 'application/json';
    headers['svcq-queue'] = ref.key;
    headers['svcq-item-id'] = item.id;
    headers['svcq-attempt'] = String(item.attempts);
    if (push.secret !== null) Object.assign(headers, sign(push.secret, item.item, Date.now()));
    const sent = await send(push.url, item.item, headers, { timeoutMs: push.timeoutMs, maxBytes: Math.max(ANSWER_TEXT_BYTES, this.deps.maxBody), signal: delivery.abort.signal });
    this.answered(delivery);
    if (sent.failure === 'abandoned') {
      await store.release(ref, item.id, 0);
      return;
    }
    const note: Delivery = { code: sent.status, ms: sent.ms };
    this.deps.observer?.pushed(ref.host, ref.name, outcomeOf(sent), sent.ms / 1000);
    this.last = { outcome: sent.reason === null ? 'delivered' : 'failed', code: sent.status, ms: sent.ms, at: Date.now() };
    if (sent.reason === null) {
      this.consecutiveFailures = 0;
      await store.result(ref, item.id, resultOf(sent), note);
      return;
    }
    this.consecutiveFailures += 1;
    this.lastError = sent.reason;
    const wish: RetryWish | undefined = (sent.status === 429 || sent.status === 503) && sent.retryAfterSeconds !== null ? { retryIn: sent.retryAfterSeconds } : undefined;
    await store.error(ref, item.id, JSON.stringify({ status: sent.status, reason: sent.reason, body: answerText(sent) }), wish, note);
  }
}

function outcomeOf(sent: Sent): PushOutcome {
  switch (sent.failure) {
    case null:
      return 'delivered';
    case 'answer':
      return 'answered-error';
    case 'timeout':
      return 'timeout';
    default:
      return 'connection-failed';
  }
}

/** decisions §9.1: a 2xx's result: its body when that is one JSON object, else its status and at most 4 KiB of its text. */
function resultOf(sent: Sent): string {
  if (!sent.truncated && isJsonObject(sent.body)) return sent.body.trim();
  return JSON.stringify({ status: sent.status, body: answerText(sent) });
}

function isJsonObject(text: string): boolean {
  const start = text.trimStart();
  if (!start.startsWith('{')) return false;
  try {
    const value: unknown = JSON.parse(text);
    return typeof value === 'object' && value !== null && !Array.isArray(value);
  } catch {
    return false;
  }
}

/** At most {@link ANSWER_TEXT_BYTES} of the answer's text (a character cut in two at the end is dropped). */
function answerText(sent: Sent): string {
  if (Buffer.byteLength(sent.body) <= ANSWER_TEXT_BYTES) return sent.body;
  return Buffer.from(sent.body).subarray(0, ANSWER_TEXT_BYTES).toString('utf8').replace(/\uFFFD$/, '');
}
