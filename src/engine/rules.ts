import type { QueueConfig } from './config.js';
import { DeadlineHeap } from './deadline-heap.js';
import { isTerminal, type ItemStatus, type TaskEventKind } from './item.js';
import { urlProblem } from './urls.js';

/**
 * The queue rules (decisions §3) as pure functions: each takes an item's record, the queue's
 * config and the time, and returns the record it becomes and the task events that say so. They
 * touch nothing else. Every store applies these same functions, whatever it keeps its records in;
 * no store encodes a rule of its own.
 */

/** Everything a store keeps of an item. Bodies (item, progress, result, error) are JSON text as received. */
export interface ItemRecord {
  readonly id: string;
  /** Claim order: unique and increasing within a queue, given at post, kept on re-queue. */
  readonly ord: number;
  readonly body: string;
  readonly postedBy: string;
  readonly postedAt: number;
  readonly idempotencyKey: string | null;
  /** decisions §8.1: a claim takes the highest priority first (−100…100, default 0). */
  readonly priority: number;
  /** decisions §8.1: the item's group, or null. */
  readonly group: string | null;
  readonly status: ItemStatus;
  readonly updatedAt: number;
  readonly finishedAt: number | null;
  readonly attempts: number;
  readonly leaseWorker: string | null;
  readonly leaseUntil: number | null;
  /** A delayed or re-queued item is not claimable before this (§8.1 delay, retryDelaySeconds); 0 when it is. */
  readonly availableAt: number;
  readonly progress: string | null;
  readonly result: string | null;
  readonly error: string | null;
  /** Stamped by the first fetch that returned the item terminal (retainFrom: "fetched"). */
  readonly fetchedAt: number | null;
}

/** The part of a record that changes after posting. */
export type ItemState = Pick<ItemRecord, 'status' | 'updatedAt' | 'finishedAt' | 'attempts' | 'leaseWorker' | 'leaseUntil' | 'availableAt' | 'progress' | 'result' | 'error' | 'fetchedAt'>;

export interface EventDraft {
  event: TaskEventKind;
  worker?: string;
  /**
   * The status and attempts this event's own rule left, where one transition applies several
   * rules ({@link due}): a lease end that re-queued the item before its timeout says `pending`, not
   * the `timedout` the whole transition leaves. Absent: the transition's record says them.
   */
  status?: ItemStatus;
  attempts?: number;
  /** decisions §8.3: the `posted` event of an item a schedule posted names the schedule, and the occurrence (ms) it was posted for. */
  schedule?: string;
  occurrence?: number;
  /** decisions §8.6: see TaskEvent.deadLetter and TaskEvent.redrivenTo. */
  deadLetter?: string;
  redrivenTo?: string;
  /** decisions §9.1: on a `delivered` / `delivery-failed` event, see TaskEvent.code and TaskEvent.ms. */
  code?: number | null;
  ms?: number;
}

/**
 * decisions §9.1: how a push delivery went, given with the result or error it led to, so that its
 * `delivered` / `delivery-failed` event is written in the same atomic step as the submission.
 */
export interface Delivery {
  /** The target's status code, or null when it gave none (timeout, refused, reset). */
  code: number | null;
  /** Milliseconds the request took. */
  ms: number;
}

/** What a rule did to one item. */
export interface Transition {
  record: ItemRecord;
  events: EventDraft[];
  /** Retention: the item leaves the live store for good (its events stay in the history). */
  purged?: boolean;
}

/** A submission's answer (interface §4.2): accepted, with the item's status after it, and the change when accepted. */
export interface Submission {
  accepted: boolean;
  status: ItemStatus;
  transition?: Transition;
}

export const LEASE_EXPIRED = '{"reason":"lease expired"}';

/** A copy of `r` with `state` over it: records are never changed in place. */
function next(r: ItemRecord, state: Partial<ItemState>): ItemRecord {
  return {
    id: r.id,
    ord: r.ord,
    body: r.body,
    postedBy: r.postedBy,
    postedAt: r.postedAt,
    idempotencyKey: r.idempotencyKey,
    priority: r.priority,
    group: r.group,
    status: state.status ?? r.status,
    updatedAt: state.updatedAt ?? r.updatedAt,
    finishedAt: state.finishedAt !== undefined ? state.finishedAt : r.finishedAt,
    attempts: state.attempts ?? r.attempts,
    leaseWorker: state.leaseWorker !== undefined ? state.leaseWorker : r.leaseWorker,
    leaseUntil: state.leaseUntil !== undefined ? state.leaseUntil : r.leaseUntil,
    availableAt: state.availableAt ?? r.availableAt,
    progress: state.progress !== undefined ? state.progress : r.progress,
    result: state.result !== undefined ? state.result : r.result,
    error: state.error !== undefined ? state.error : r.error,
    fetchedAt: state.fetchedAt !== undefined ? state.fetchedAt : r.fetchedAt,
  };
}

/** What work on an item fills in later, as it reads when the item is posted. */
export function workAsPosted(postedAt: number): Omit<ItemState, 'status'> {
  return { updatedAt: postedAt, finishedAt: null, attempts: 0, leaseWorker: null, leaseUntil: null, availableAt: 0, progress: null, result: null, error: null, fetchedAt: null };
}

/** A post's options (decisions §8.1, §9.2), as the boundary checked them. */
export interface PostOptions {
  /** Seconds after postedAt before the item is claimable (0–31536000). */
  delaySeconds?: number;
  /** Ms since the epoch before which the item is not claimable (a time already past: at once). */
  at?: number;
  /** −100…100, default 0. */
  priority?: number;
  /** 1–128 printable ASCII characters. */
  group?: string;
  /** decisions §9.2: where the item's status record is POSTed when it ends (before the queue's `callback`). */
  callback?: string;
}

export const MAX_DELAY_SECONDS = 31_536_000;
export const MIN_PRIORITY = -100;
export const MAX_PRIORITY = 100;

/** One problem with a post's query parameters: `path` is `?<name>`. */
export interface OptionError {
  path: string;
  message: string;
}

const DIGITS = /^-?(0|[1-9][0-9]*)$/;

/** A query parameter's text as an integer from `min` to `max`, or undefined (not an integer in range, or given twice). */
function integerParam(v: unknown, min: number, max: number): number | undefined {
  return typeof v === 'string' && DIGITS.test(v) && Number(v) >= min && Number(v) <= max ? Number(v) : undefined;
}
const PRINTABLE = /^[\x20-\x7e]{1,128}$/;

/**
 * A post's query parameters as options (decisions §8.1): `delay`, `at`, `priority`, `group`, each
 * at most once; anything else, or a value out of range, is an error naming the parameter. Values are
 * the query's text (an array when a parameter was repeated).
 */
export function postOptions(query: Record<string, unknown>): { options: PostOptions; errors: OptionError[] } {
  const options: PostOptions = {};
  const errors: OptionError[] = [];
  const integer = (name: string, v: unknown, min: number, max: number, what: string): number | undefined => {
    const n = integerParam(v, min, max);
    if (n === undefined) errors.push({ path: `?${name}`, message: `${name} must be ${what}` });
    return n;
  };
  for (const [name, v] of Object.entries(query)) {
    if (Array.isArray(v)) {
      errors.push({ path: `?${name}`, message: `${name} may be given once` });
      continue;
    }
    if (name === 'delay') options.delaySeconds = integer(name, v, 0, MAX_DELAY_SECONDS, 'an integer number of seconds from 0 to 31536000');
    else if (name === 'at') options.at = integer(name, v, 0, 8.64e15, 'an integer time in milliseconds since the Unix epoch');
    else if (name === 'priority') options.priority = integer(name, v, MIN_PRIORITY, MAX_PRIORITY, 'an integer from -100 to 100');
    else if (name === 'group') {
      if (typeof v === 'string' && PRINTABLE.test(v)) options.group = v;
      else errors.push({ path: '?group', message: 'group must be 1 to 128 printable ASCII characters' });
    } else if (name === 'callback') {
      const problem = typeof v === 'string' ? urlProblem(v) : 'must be a URL';
      if (problem === null) options.callback = v as string;
      else errors.push({ path: '?callback', message: `callback ${problem}` });
    } else errors.push({ path: `?${name}`, message: `${name} is not a parameter of a post (delay, at, priority, group, callback)` });
  }
  if (query.delay !== undefined && query.at !== undefined) errors.push({ path: '?at', message: 'at may not be given with delay' });
  for (const k of Object.keys(options) as Array<keyof PostOptions>) if (options[k] === undefined) delete options[k];
  return { options, errors };
}

/** When an item posted at `now` with these options becomes claimable: 0 for at once. */
export function claimableFrom(options: PostOptions | undefined, now: number): number {
  if (options === undefined) return 0;
  const at = options.at ?? (options.delaySeconds ? now + options.delaySeconds * 1000 : 0);
  return at > now ? at : 0;
}

/**
 * Claim order (decisions §8.1): negative when `a` is claimed before `b`: the higher priority first,
 * then the order of posting (`ord`, kept on re-queue).
 */
export function claimOrder(a: Pick<ItemRecord, 'priority' | 'ord'>, b: Pick<ItemRecord, 'priority' | 'ord'>): number {
  return b.priority - a.priority || a.ord - b.ord;
}

/** A new item: pending, no attempts (interface §3), with its post options (decisions §8.1). */
export function post(fields: { id: string; ord: number; body: string; postedBy: string; idempotencyKey: string | null; options?: PostOptions }, now: number): Transition {
  const options = fields.options;
  // Spelled out rather than spread: this runs for every item posted (a batch posts a thousand).
  const record: ItemRecord = {
    id: fields.id,
    ord: fields.ord,
    body: fields.body,
    postedBy: fields.postedBy,
    idempotencyKey: fields.idempotencyKey,
    priority: options?.priority ?? 0,
    group: options?.group ?? null,
    postedAt: now,
    status: 'pending',
    updatedAt: now,
    finishedAt: null,
    attempts: 0,
    leaseWorker: null,
    leaseUntil: null,
    availableAt: options === undefined ? 0 : claimableFrom(options, now),
    progress: null,
    result: null,
    error: null,
    fetchedAt: null,
  };
  return { record, events: [{ event: 'posted' }] };
}

/** decisions §8.1 `runAt`: for a pending item not claimable before a later time, that time; else null. */
export function runAt(r: Pick<ItemRecord, 'status' | 'availableAt'>): number | null {
  return r.status === 'pending' && r.availableAt > 0 ? r.availableAt : null;
}

/** Whether a claim may take the item now: pending, and past any retry delay. */
export function claimable(r: ItemRecord, now: number): boolean {
  return r.status === 'pending' && (r.availableAt === 0 || r.availableAt <= now);
}

/** Leases a claimable item to `worker`: one more attempt, a lease of leaseSeconds (decisions §3.2). */
export function claim(r: ItemRecord, config: QueueConfig, worker: string, now: number): Transition {
  const record = next(r, { status: 'claimed', attempts: r.attempts + 1, leaseWorker: worker, leaseUntil: now + config.leaseMs, availableAt: 0, updatedAt: now });
  return { record, events: [{ event: 'claimed', worker }] };
}

/**
 * Accepted unless terminal: the item is processing and its lease runs leaseSeconds from now again
 * (a heartbeat). Progress for an item waiting to be re-queued means its worker is alive after all:
 * it keeps the item.
 */
export function progress(r: ItemRecord, config: QueueConfig, body: string, now: number): Submission {
  if (isTerminal(r.status)) return { accepted: false, status: r.status };
  const record = next(r, { progress: body, updatedAt: now, status: 'processing', leaseUntil: now + config.leaseMs, availableAt: 0 });
  return { accepted: true, status: record.status, transition: { record, events: [{ event: 'progress', worker: r.leaseWorker ?? undefined }] } };
}

/** A result for any non-terminal item is accepted, whoever sends it (interface §4.2 rule 6). */
export function result(r: ItemRecord, body: string, now: number, delivery?: Delivery): Submission {
  if (isTerminal(r.status)) return { accepted: false, status: r.status };
  const record = next(r, { result: body, ...finish('finished', now) });
  const worker = r.leaseWorker ?? undefined;
  const events: EventDraft[] = [{ event: 'finished', worker }];
  if (delivery) events.unshift({ event: 'delivered', worker, code: delivery.code, ms: delivery.ms });
  return { accepted: true, status: record.status, transition: { record, events } };
}

/**
 * Records the error; the item is re-queued while attempts remain, else failed (decisions §3.4).
 * The worker's wish (decisions §8.2) decides this one failure: `final`, failed at once; `retryIn`,
 * claimable again that many seconds from now in place of the queue's delay (failed all the same
 * when no attempt is left).
 */
export function error(r: ItemRecord, config: QueueConfig, body: string, now: number, wish?: RetryWish, delivery?: Delivery): Submission {
  if (isTerminal(r.status)) return { accepted: false, status: r.status };
  const withError = next(r, { error: body });
  const after = wish?.final === true ? next(withError, finish('failed', now)) : requeueOrFail(withError, config, now, wish?.retryIn === undefined ? undefined : wish.retryIn * 1000);
  // Both events name the worker whose error it was, as a lease that ends names the lease's worker.
  const worker = r.leaseWorker ?? undefined;
  const events: EventDraft[] = [{ event: 'error', worker }, { event: after.status === 'failed' ? 'failed' : 'requeued', worker }];
  if (delivery) events.unshift({ event: 'delivery-failed', worker, code: delivery.code, ms: delivery.ms });
  return { accepted: true, status: after.status, transition: { record: after, events } };
}

/**
 * decisions §8.2 `release`: a leased item (claimed or processing) is pending again, not claimable
 * for `delaySeconds`, and the claim that leased it is not counted. Anything else is left as it is.
 */
export function release(r: ItemRecord, delaySeconds: number, now: number): Submission {
  if (r.status !== 'claimed' && r.status !== 'processing') return { accepted: false, status: r.status };
  const record = next(r, { status: 'pending', updatedAt: now, leaseUntil: null, attempts: Math.max(0, r.attempts - 1), availableAt: delaySeconds > 0 ? now + delaySeconds * 1000 : 0 });
  return { accepted: true, status: 'pending', transition: { record, events: [{ event: 'released', worker: r.leaseWorker ?? undefined }] } };
}

/** A non-terminal item becomes cancelled (decisions §3.6). */
export function cancel(r: ItemRecord, now: number): Submission {
  if (isTerminal(r.status)) return { accepted: false, status: r.status };
  const record = next(r, finish('cancelled', now));
  return { accepted: true, status: record.status, transition: { record, events: [{ event: 'cancelled' }] } };
}

/**
 * decisions §8.6 bulk retry: a failed, timed-out or cancelled item is pending again in place (same
 * id and claim order), attempts 0, finishedAt null, claimable at once; its last error stays on the
 * record until a new attempt writes another. Any other status: null (nothing to do).
 */
export function retryAgain(r: ItemRecord, now: number): Transition | null {
  if (r.status !== 'failed' && r.status !== 'timedout' && r.status !== 'cancelled') return null;
  const record = next(r, { status: 'pending', attempts: 0, finishedAt: null, updatedAt: now, leaseWorker: null, leaseUntil: null, availableAt: 0, fetchedAt: null });
  return { record, events: [{ event: 'retried' }] };
}

/** decisions §8.6: the `source` a dead letter's status record carries: where it came from and how it ended. */
export interface DeadLetterSource {
  queue: string;
  id: string;
  status: ItemStatus;
  attempts: number;
  /** The last error's JSON text, or null. */
  error: string | null;
}

/** Whether an item's new state calls for a dead-letter copy (decisions §8.6): it just became failed or timed out. */
export function needsDeadLetter(before: ItemStatus, after: ItemRecord, config: QueueConfig): boolean {
  return config.deadLetter !== null && before !== after.status && (after.status === 'failed' || after.status === 'timedout');
}

/** The source record of the dead letter copied from `r` (queue `name`). */
export function deadLetterSource(name: string, r: ItemRecord): DeadLetterSource {
  return { queue: name, id: r.id, status: r.status, attempts: r.attempts, error: r.error };
}

/** The source as the status record shows it: `error` parsed back into JSON. */
export function sourceJson(s: DeadLetterSource): { queue: string; id: string; status: ItemStatus; attempts: number; error: unknown } {
  return { queue: s.queue, id: s.id, status: s.status, attempts: s.attempts, error: s.error === null ? null : JSON.parse(s.error) };
}

/** The first fetch that returns a terminal item stamps it (retention from "fetched" starts here). */
export function fetched(r: ItemRecord, now: number): Transition | null {
  if (!isTerminal(r.status) || r.fetchedAt !== null) return null;
  return { record: next(r, { fetchedAt: now }), events: [] };
}

function finish(status: ItemStatus, now: number): Partial<ItemState> {
  return { status, updatedAt: now, finishedAt: now, leaseUntil: null, availableAt: 0 };
}

/**
 * decisions §3.2: pending again (keeping its place, after the retry delay of §8.2, or after
 * `delayMs` when the worker said how long) while attempts remain, else failed.
 */
function requeueOrFail(r: ItemRecord, config: QueueConfig, now: number, delayMs?: number): ItemRecord {
  if (r.attempts < config.maxAttempts) {
    const delay = delayMs ?? retryDelay(config, r.attempts, r.id);
    return next(r, { status: 'pending', updatedAt: now, leaseUntil: null, availableAt: delay > 0 ? now + delay : 0 });
  }
  return next(r, finish('failed', now));
}

/** decisions §8.2: what a worker said of one failure (the error endpoint's `?retryIn`/`?final`, a hand-in's fields). */
export interface RetryWish {
  /** Seconds (0–31536000) before the item may be claimed again, in place of the queue's delay. */
  retryIn?: number;
  /** No further attempt: the item fails at once. */
  final?: boolean;
}

/**
 * decisions §8.2: the delay after the n-th failed attempt (n ≥ 1, the attempts the item has had),
 * in ms: `retryDelaySeconds`, or with exponential backoff `min(retryDelayMaxSeconds,
 * retryDelaySeconds · 2^(n−1))`, then shortened by a fraction of at most `retryJitter` of itself.
 * The fraction is drawn from the item's id and the attempt ({@link jitterFraction}), not from a
 * random source: spread evenly over the items that fail together, yet the same on every store and
 * node that computes it, so that the rules stay functions of their arguments.
 */
export function retryDelay(config: QueueConfig, n: number, id: string): number {
  let ms = config.retryDelayMs;
  if (ms <= 0) return 0;
  const attempt = Math.max(1, n);
  if (config.retryBackoff === 'exponential') ms = Math.min(config.retryDelayMaxMs, ms * 2 ** Math.min(attempt - 1, 40));
  if (config.retryJitter > 0) ms -= Math.floor(ms * config.retryJitter * jitterFraction(id, attempt));
  return ms;
}

/** A number in [0, 1), evenly spread, from an item's id and an attempt (32-bit FNV-1a, then a final mix). */
export function jitterFraction(id: string, attempt: number): number {
  let h = 0x811c9dc5;
  for (let i = 0; i < id.length; i++) h = Math.imul(h ^ id.charCodeAt(i), 0x01000193);
  h = Math.imul(h ^ attempt, 0x01000193);
  // The avalanche of murmur3's finaliser: FNV's low bits alone are poorly mixed.
  h ^= h >>> 16;
  h = Math.imul(h, 0x85ebca6b);
  h ^= h >>> 13;
  h = Math.imul(h, 0xc2b2ae35);
  h ^= h >>> 16;
  return (h >>> 0) / 2 ** 32;
}

/**
 * The worker's wish from the error endpoint's query (decisions §8.2): `retryIn` (integer seconds
 * 0–31536000) or `final=true`; both together, or a bad value, is an error naming the parameter.
 * Other parameters are left alone, as they were before these two.
 */
export function retryWishOf(query: Record<string, unknown>): { wish?: RetryWish; errors: OptionError[] } {
  const errors: OptionError[] = [];
  const wish: RetryWish = {};
  const retryIn = query.retryIn;
  const final = query.final;
  if (retryIn !== undefined) {
    wish.retryIn = integerParam(retryIn, 0, MAX_DELAY_SECONDS);
    if (wish.retryIn === undefined) errors.push({ path: '?retryIn', message: 'retryIn must be an integer number of seconds from 0 to 31536000, given once' });
  }
  if (final !== undefined) {
    if (final === 'true') wish.final = true;
    else if (final !== 'false') errors.push({ path: '?final', message: 'final must be true or false, given once' });
  }
  if (retryIn !== undefined && wish.final === true) errors.push({ path: '?final', message: 'final may not be given with retryIn' });
  if (errors.length > 0) return { errors };
  return wish.retryIn === undefined && wish.final === undefined ? { errors } : { wish, errors };
}

/** The release endpoint's `?delay` (decisions §8.2): integer seconds 0–31536000, default 0. */
export function releaseDelayOf(query: Record<string, unknown>): { delaySeconds: number; errors: OptionError[] } {
  if (query.delay === undefined) return { delaySeconds: 0, errors: [] };
  const delaySeconds = integerParam(query.delay, 0, MAX_DELAY_SECONDS);
  if (delaySeconds !== undefined) return { delaySeconds, errors: [] };
  return { delaySeconds: 0, errors: [{ path: '?delay', message: 'delay must be an integer number of seconds from 0 to 31536000, given once' }] };
}

/** When each time-driven rule next applies to the item, or null where none does. Deadlines are data on the record, never timers. */
export interface Deadlines {
  /** The lease ends (claimed or processing). */
  lease: number | null;
  /** A delayed or re-queued item becomes claimable (§8.1 delay, retryDelaySeconds). */
  retry: number | null;
  /** A non-terminal item times out (timeoutSeconds after postedAt). */
  timeout: number | null;
  /** A terminal item is purged (retainSeconds after it finished, or after its first terminal fetch). */
  retention: number | null;
}

export function deadlines(r: ItemRecord, config: QueueConfig): Deadlines {
  const terminal = isTerminal(r.status);
  const leased = r.status === 'claimed' || r.status === 'processing';
  const retainFrom = terminal ? (config.retainFrom === 'fetched' ? r.fetchedAt : r.finishedAt) : null;
  return {
    lease: leased ? r.leaseUntil : null,
    retry: r.status === 'pending' && r.availableAt > 0 ? r.availableAt : null,
    timeout: !terminal && config.timeoutMs !== null ? r.postedAt + config.timeoutMs : null,
    retention: retainFrom === null ? null : retainFrom + config.retainMs,
  };
}

/** The soonest of an item's deadlines, or null. */
export function nextDeadline(r: ItemRecord, config: QueueConfig): number | null {
  const d = deadlines(r, config);
  let soonest: number | null = null;
  for (const at of [d.lease, d.retry, d.timeout, d.retention]) if (at !== null && (soonest === null || at < soonest)) soonest = at;
  return soonest;
}

/** The kinds of an item's deadlines, in the order one item's that fall together are applied. */
const DUE_KINDS = ['lease', 'retry', 'timeout', 'retention'] as const;

/**
 * Applies what fell due in a queue since a store last looked, one deadline at a time in the order
 * the deadlines fell (those that fell together in claim order; one item's in the order lease,
 * retry, timeout, retention), each by its own rule, as a store whose timers apply each deadline as
 * it falls does (the embedded queue's tick): so that, say, dead-letter copies are made in the
 * same order on every store when several deadlines are found passed at once (after a restart, a
 * busy moment, a test's clock moved on). `apply` keeps a transition and answers the item's record
 * after it (null: purged); `owed` says whether a callback is owed for the item now (retention
 * waits for it, decisions §9.2). A rule that declines (a deadline moved later by a change of
 * definition) is not asked again in this pass.
 */
export function applyPassed<T>(entries: readonly T[], recordOf: (e: T) => ItemRecord, config: QueueConfig, now: number, owed: (e: T) => boolean, apply: (e: T, t: Transition) => ItemRecord | null): void {
  // Each item's passed deadlines in a heap, by time, then claim order, then kind; an entry whose
  // record has changed since it was filed is passed over (the new record's are filed instead).
  const current = new Map<T, ItemRecord>();
  const heap = new DeadlineHeap<{ e: T; r: ItemRecord; k: number }>((x) => x.r.ord * DUE_KINDS.length + x.k);
  const declined = new Set<string>();
  const file = (e: T, r: ItemRecord): void => {
    current.set(e, r);
    const d = deadlines(r, config);
    for (let k = 0; k < DUE_KINDS.length; k++) {
      const at = d[DUE_KINDS[k]!];
      if (at !== null && at <= now && !declined.has(`${r.id}\n${DUE_KINDS[k]!}`)) heap.push(at, { e, r, k });
    }
  };
  for (const e of entries) file(e, recordOf(e));
  for (let x = heap.popDue(now); x; x = heap.popDue(now)) {
    const { e, r, k } = x;
    if (current.get(e) !== r) continue;
    const kind = DUE_KINDS[k]!;
    const t = kind === 'lease' ? leaseEndedUnlessTimedOut(r, config, now) : kind === 'retry' ? retryAvailable(r, config, now) : kind === 'timeout' ? timedOut(r, config, now) : retentionEnded(r, config, now, owed(e));
    if (!t) {
      declined.add(`${r.id}\n${kind}`);
      continue;
    }
    const next = apply(e, t);
    if (next === null) current.delete(e);
    else file(e, next);
  }
}

/** A lease that ended with the item not terminal: re-queued while attempts remain, else failed with `{reason: "lease expired"}` (decisions §3.2, §7). */
export function leaseEnded(r: ItemRecord, config: QueueConfig, now: number): Transition | null {
  const at = deadlines(r, config).lease;
  if (at === null || at > now) return null;
  const failing = r.attempts >= config.maxAttempts;
  const record = requeueOrFail(failing ? next(r, { error: LEASE_EXPIRED }) : r, config, now);
  return { record, events: [{ event: failing ? 'failed' : 'requeued', worker: r.leaseWorker ?? undefined }] };
}

/**
 * A lease end, unless the item's timeout came first and both have passed (a deadline applied late:
 * after a restart, a definition change, a busy moment): then it timed out, and its lease never
 * ended (decisions §2.2, §3.2). A timeout at the very moment the lease ends wins too.
 */
export function leaseEndedUnlessTimedOut(r: ItemRecord, config: QueueConfig, now: number): Transition | null {
  const d = deadlines(r, config);
  if (d.timeout !== null && d.lease !== null && d.timeout <= d.lease && d.timeout <= now) return timedOut(r, config, now);
  return leaseEnded(r, config, now);
}

/** A re-queued item whose retry delay has passed becomes claimable. */
export function retryAvailable(r: ItemRecord, config: QueueConfig, now: number): Transition | null {
  const at = deadlines(r, config).retry;
  if (at === null || at > now) return null;
  return { record: next(r, { availableAt: 0 }), events: [] };
}

/** timeoutSeconds after postedAt, a non-terminal item becomes timedout. */
export function timedOut(r: ItemRecord, config: QueueConfig, now: number): Transition | null {
  const at = deadlines(r, config).timeout;
  if (at === null || at > now) return null;
  return { record: next(r, finish('timedout', now)), events: [{ event: 'timedout' }] };
}

/**
 * retainSeconds after retention starts, a terminal item leaves the live store; not while a callback
 * is still owed for it (decisions §9.2, `callbackOwed`): then it stays until that is settled, and
 * the rule applies again after.
 */
export function retentionEnded(r: ItemRecord, config: QueueConfig, now: number, callbackOwed = false): Transition | null {
  const at = deadlines(r, config).retention;
  if (at === null || at > now || callbackOwed) return null;
  return { record: r, events: [{ event: 'purged' }], purged: true };
}

/**
 * Every time-driven rule due at `now`, applied in their order (lease end, retry delay, timeout,
 * retention; a timeout that came before the lease end takes its place), as one transition; null
 * when none is due. For stores that sweep by deadline. `callback`: whether a callback is owed for
 * the item already, and its own callback URL (decisions §9.2): a callback owed, or one this
 * transition makes owed, holds back its retention.
 */
export function due(r: ItemRecord, config: QueueConfig, now: number, callback?: { owed: boolean; own: string | null }): Transition | null {
  let record = r;
  const events: EventDraft[] = [];
  let changed = false;
  for (const rule of [leaseEndedUnlessTimedOut, retryAvailable, timedOut]) {
    const t = rule(record, config, now);
    if (!t) continue;
    record = t.record;
    for (const e of t.events) events.push({ ...e, status: record.status, attempts: record.attempts });
    changed = true;
  }
  const held = callback !== undefined && (callback.owed || callbackUrl(r.status, record.status, callback.own, config) !== null);
  const purge = retentionEnded(record, config, now, held);
  if (purge) return { record, events: [...events, ...purge.events], purged: true };
  return changed ? { record, events } : null;
}

/** decisions §9.2: the first retry of a failed callback comes this long after the failure, each next one twice as long after. */
export const CALLBACK_FIRST_RETRY_MS = 1000;
/** decisions §9.2: the longest wait between two attempts of a callback. */
export const CALLBACK_MAX_RETRY_MS = 10 * 60 * 1000;
/** decisions §9.2: a callback still failing this long after its item ended is dropped. */
export const CALLBACK_GIVE_UP_MS = 24 * 60 * 60 * 1000;

/**
 * decisions §9.2: the URL a callback is owed to when a change takes an item from `before` to
 * `after`: the item's own (its post's `?callback`), else the queue's `callback` at that moment;
 * null when the change does not end the item (it was terminal already, or is not now) or there is
 * no URL.
 */
export function callbackUrl(before: ItemStatus, after: ItemStatus, own: string | null | undefined, config: QueueConfig): string | null {
  if (isTerminal(before) || !isTerminal(after)) return null;
  return own ?? config.callback;
}

/**
 * decisions §9.2: when a callback whose item ended at `owedSince` is tried again after its
 * `tries`-th failed attempt (tries ≥ 1) failed at `now`: 1 s after the first, doubling up to
 * 10 min; null when it is to be dropped (the attempt failed 24 hours or more after the item ended).
 */
export function callbackRetryAt(owedSince: number, tries: number, now: number): number | null {
  if (now - owedSince >= CALLBACK_GIVE_UP_MS) return null;
  return now + Math.min(CALLBACK_MAX_RETRY_MS, CALLBACK_FIRST_RETRY_MS * 2 ** Math.min(Math.max(0, tries - 1), 30));
}
