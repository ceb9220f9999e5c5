import type { DefinitionRegistry, QueueRuntime } from '../definitions/registry.js';
import type { TaskEventKind } from '../engine/item.js';
import type { QueueOverview, QueueRef, Store, StoreObserver } from '../store/store.js';
import type { BulkAnswer, PauseAnswer, PushState, QueueDetail, QueueEntry, QueueLimits, QueueList } from './answers.js';
import { BULK_COUNT_FIELD, bulkAction, bulkRequest, runBulk, type BulkKind } from './bulk.js';
import { OperatorMetrics, type Audience } from './metrics.js';
import { EventRates } from './rates.js';

/** How many oldest pending items and leases the single-queue view shows (decisions §5.1). */
export const DETAIL_LIMITS = { oldest: 20, leases: 100 } as const;
/** The list and the metrics read counts only. */
const COUNTS_ONLY = { oldest: 0, leases: 0 } as const;

/**
 * What operators see of the queues (decisions §5.1): the list and single-queue answers, and the
 * Prometheus exposition. It watches the store (rates and counters from its durable events, commit
 * timings) through {@link observer}, and reads the store's kept counts when asked.
 */
export class Operators {
  readonly rates: EventRates;
  readonly metrics = new OperatorMetrics();
  /** Pass this to the store: it tells the rates and the metrics. */
  readonly observer: StoreObserver;
  private store?: Store;
  private pushes?: { view(key: string): PushState | null };

  constructor(
    private readonly registry: DefinitionRegistry,
    private readonly now: () => number = Date.now,
  ) {
    this.rates = new EventRates(now);
    const { rates, metrics } = this;
    this.observer = {
      committed(seconds: number, changes: number): void {
        metrics.committed(seconds, changes);
      },
      events(key: string, kinds: readonly TaskEventKind[]): void {
        rates.record(key, kinds);
        metrics.events(key, kinds);
      },
    };
  }

  /** The store to read counts from (it is made after the observer it is given). */
  watch(store: Store): void {
    this.store = store;
  }

  /** decisions §9.1: where push queues' deliveries on this node are seen (the queue views' `push`). */
  watchPushes(pushes: { view(key: string): PushState | null }): void {
    this.pushes = pushes;
  }

  /** decisions §9.1: a push delivery ended (the metrics count it). */
  pushed(host: string, queue: string, outcome: string, seconds: number): void {
    this.metrics.pushed(host, queue, outcome, seconds);
  }

  /** Every defined queue, by host then name. */
  definedQueues(): QueueRef[] {
    const refs = this.registry.queues().map(refOf);
    return refs.sort((a, b) => compare(a.host, b.host) || compare(a.name, b.name));
  }

  /** `GET /api/v2/queues` */
  async list(): Promise<QueueList> {
    const refs = this.definedQueues();
    const overviews = await Promise.all(refs.map((ref) => this.storeOf().overview(ref, COUNTS_ONLY)));
    const now = this.now();
    // A dead-letter queue is a defined queue of the list: its pending count is at hand.
    const pending = new Map(refs.map((ref, i) => [ref.key, overviews[i]!.counts.pending]));
    return { queues: refs.map((ref, i) => this.entry(ref, overviews[i]!, now, deadLetterKey(ref) === null ? null : (pending.get(deadLetterKey(ref)!) ?? null))) };
  }

  /** `GET /api/v2/queues/<host>/<name>`; null when the pair is not defined. */
  async one(host: string, name: string): Promise<QueueDetail | null> {
    const queue = this.registry.queue(host, name);
    if (!queue) return null;
    const ref = refOf(queue);
    const deadLetter = ref.config.deadLetter === null ? undefined : this.registry.queue(host, ref.config.deadLetter);
    const [overview, schedules, letters] = await Promise.all([
      this.storeOf().overview(ref, DETAIL_LIMITS),
      this.storeOf().schedules(ref),
      deadLetter ? this.storeOf().overview(refOf(deadLetter), COUNTS_ONLY) : undefined,
    ]);
    return { ...this.entry(ref, overview, this.now(), letters ? letters.counts.pending : null), callbacks: overview.callbacks, oldest: overview.oldest, leases: overview.leases, schedules };
  }

  /**
   * `POST /api/v2/queues/<host>/<name>/redrive`, `…/retry`, `…/cancel` (decisions §8.6): the body
   * checked first (a {@link BulkRefused} naming the field, nothing changed), then atomic batches of
   * the store until `max` items changed, none are left, or a batch changed nothing. Null when the
   * pair is not defined. Each batch acts on the queue as it is defined then; a redrive sends each
   * dead letter to the queue of the same host its source names, as that is defined then.
   */
  async bulk(host: string, name: string, kind: BulkKind, body: string): Promise<BulkAnswer | null> {
    if (!this.registry.queue(host, name)) return null;
    const request = bulkRequest(kind, body);
    const queueNamed = (source: string): QueueRef | undefined => {
      const q = this.registry.queue(host, source);
      return q ? refOf(q) : undefined;
    };
    const action = bulkAction(kind, request, queueNamed);
    const out = await runBulk(request.max, (size) => {
      const queue = this.registry.queue(host, name);
      return queue ? this.storeOf().bulk(refOf(queue), action, size) : undefined;
    });
    return { [BULK_COUNT_FIELD[kind]]: out.changed, more: out.more } as BulkAnswer;
  }

  /**
   * `POST /api/v2/queues/<host>/<name>/pause` (`paused` true) and `…/resume` (decisions §8.4): the
   * state the queue is left in, once durable; null when the pair is not defined.
   */
  async setPaused(host: string, name: string, paused: boolean): Promise<PauseAnswer | null> {
    const queue = this.registry.queue(host, name);
    if (!queue) return null;
    return { paused: await this.storeOf().setPaused(refOf(queue), paused) };
  }

  /** `GET /api/v2/metrics`: the exposition text, item gauges read now. */
  async exposition(): Promise<string> {
    const refs = this.definedQueues();
    const overviews = await Promise.all(refs.map((ref) => this.storeOf().overview(ref, COUNTS_ONLY)));
    const now = this.now();
    return this.metrics.exposition(
      refs.map((ref, i) => {
        const o = overviews[i]!;
        return { host: ref.host, name: ref.name, paused: o.paused, counts: o.counts, oldestPendingAgeSeconds: o.oldestPendingAt === null ? null : Math.max(0, now - o.oldestPendingAt) / 1000 };
      }),
    );
  }

  /** A response was handed to the socket (called where the access log records it). */
  request(audience: Audience, status: number, seconds: number): void {
    this.metrics.request(audience, status, seconds);
  }

  private entry(ref: QueueRef, o: QueueOverview, now: number, deadLetters: number | null): QueueEntry {
    return {
      host: ref.host,
      name: ref.name,
      paused: o.paused,
      counts: o.counts,
      oldestPendingAgeMs: o.oldestPendingAt === null ? null : Math.max(0, Math.round(now - o.oldestPendingAt)),
      rates: this.rates.rates(ref.key),
      limits: limitsOf(ref),
      active: o.counts.claimed + o.counts.processing,
      held: this.metrics.heldCounts(ref.key),
      groupsWaiting: o.groupsWaiting,
      deadLetters,
      push: ref.config.push === null ? null : (this.pushes?.view(ref.key) ?? null),
    };
  }

  private storeOf(): Store {
    if (!this.store) throw new Error('operators: no store to read yet');
    return this.store;
  }
}

function refOf(queue: QueueRuntime): QueueRef {
  return { key: queue.key, host: queue.host, name: queue.name, config: queue.config };
}

/** The queue's flow-control fields as operators read them (decisions §8.5, §8.6): a rate window in seconds, as defined. */
function limitsOf(ref: QueueRef): QueueLimits {
  const c = ref.config;
  return {
    maxActive: c.maxActive,
    groupMaxActive: c.groupMaxActive,
    rateLimit: c.rateLimit && { max: c.rateLimit.max, perSeconds: c.rateLimit.windowMs / 1000 },
    fairness: c.fairness,
    deadLetter: c.deadLetter,
  };
}

/** The key of the queue's dead-letter queue, or null without one. */
function deadLetterKey(ref: QueueRef): string | null {
  return ref.config.deadLetter === null ? null : `${ref.host}/${ref.config.deadLetter}`;
}

function compare(a: string, b: string): number {
  return a < b ? -1 : a > b ? 1 : 0;
}
