import type { DefinitionRegistry, QueueRuntime } from '../definitions/registry.js';
import type { TaskEventKind } from '../engine/item.js';
import type { QueueOverview, QueueRef, Store, StoreObserver } from '../store/store.js';
import type { PauseAnswer, QueueDetail, QueueEntry, QueueList } from './answers.js';
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
    return { queues: refs.map((ref, i) => this.entry(ref, overviews[i]!, now)) };
  }

  /** `GET /api/v2/queues/<host>/<name>`; null when the pair is not defined. */
  async one(host: string, name: string): Promise<QueueDetail | null> {
    const queue = this.registry.queue(host, name);
    if (!queue) return null;
    const ref = refOf(queue);
    const [overview, schedules] = await Promise.all([this.storeOf().overview(ref, DETAIL_LIMITS), this.storeOf().schedules(ref)]);
    return { ...this.entry(ref, overview, this.now()), oldest: overview.oldest, leases: overview.leases, schedules };
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

  private entry(ref: QueueRef, o: QueueOverview, now: number): QueueEntry {
    return {
      host: ref.host,
      name: ref.name,
      paused: o.paused,
      counts: o.counts,
      oldestPendingAgeMs: o.oldestPendingAt === null ? null : Math.max(0, Math.round(now - o.oldestPendingAt)),
      rates: this.rates.rates(ref.key),
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

function compare(a: string, b: string): number {
  return a < b ? -1 : a > b ? 1 : 0;
}
