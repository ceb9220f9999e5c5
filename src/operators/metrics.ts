import { Counter, Gauge, Histogram, Registry, collectDefaultMetrics } from 'prom-client';
import type { ItemStatus, TaskEventKind } from '../engine/item.js';
import { HOLD_REASONS, type HoldReason } from '../engine/limits.js';
import type { CallbackOutcome } from '../push/callbacks.js';

/** decisions §9.2: the outcomes svcq_callbacks_total counts. */
const CALLBACK_OUTCOMES: readonly CallbackOutcome[] = ['delivered', 'failed', 'dropped'];
import type { StatusCounts } from '../store/store.js';
import { BucketHistogram } from './histogram.js';

/** The task events counted as `svcq_items_<kind>_total` (decisions §5.1). */
export const COUNTED_EVENTS = ['posted', 'claimed', 'finished', 'failed', 'timedout', 'cancelled'] as const;
type CountedEvent = (typeof COUNTED_EVENTS)[number];
const EVENT_INDEX: Partial<Record<TaskEventKind, number>> = Object.fromEntries(COUNTED_EVENTS.map((k, i) => [k, i]));

const STATUSES: readonly ItemStatus[] = ['pending', 'claimed', 'processing', 'finished', 'failed', 'timedout', 'cancelled'];

/** Who a request was for: the queue domain (producers, workers) or `/api` (management, tools, operators). */
export type Audience = 'queue' | 'api';

/** One defined queue as a scrape sees it. */
export interface QueueGauges {
  host: string;
  name: string;
  /** Whether the queue is paused (decisions §8.4). */
  paused: boolean;
  counts: StatusCounts;
  /** Seconds since the oldest pending item was posted, or null when none is pending. */
  oldestPendingAgeSeconds: number | null;
}

/**
 * The server's Prometheus metrics (decisions §5.1), in a registry of its own so that two servers
 * in one process (tests) keep apart. The hot paths only add to plain numbers: event totals are
 * kept per queue in an array and handed to the counters at scrape time, item gauges are read from
 * the store's kept counts when scraped, and the request histogram is a few array operations.
 */
export class OperatorMetrics {
  readonly register = new Registry();
  /** Per queue key (`<host>/<name>`): totals of each counted event, in COUNTED_EVENTS order. */
  private readonly totals = new Map<string, Float64Array>();
  private readonly counters: Array<Counter<'host' | 'queue'>>;
  private readonly items: Gauge<'host' | 'queue' | 'status'>;
  private readonly oldestAge: Gauge<'host' | 'queue'>;
  private readonly paused: Gauge<'host' | 'queue'>;
  private readonly active: Gauge<'host' | 'queue'>;
  private readonly callbackCounter: Counter<'host' | 'queue' | 'outcome'>;
  /** decisions §9.2: per queue key, callback attempts settled on this node, in CALLBACK_OUTCOMES order. */
  private readonly callbackTotals = new Map<string, Float64Array>();
  /** decisions §8.5: per queue key, claim requests held back, in HOLD_REASONS order. */
  private readonly heldTotals = new Map<string, Float64Array>();
  private readonly heldCounter: Counter<'host' | 'queue' | 'reason'>;
  private readonly httpDuration: BucketHistogram;
  private readonly commitDuration: Histogram;
  private readonly commitBatch: Histogram;
  private readonly pushRequests: Counter<'host' | 'queue' | 'outcome'>;
  private readonly pushDuration: Histogram<'host' | 'queue'>;

  constructor() {
    const registers = [this.register];
    collectDefaultMetrics({ register: this.register });
    // prom-client's gauges named *_total break Prometheus's naming rule (a *_total is a counter), so
    // `promtool check metrics` fails on them; each is the sum of a gauge it also exports by type.
    for (const name of ['nodejs_active_handles_total', 'nodejs_active_requests_total', 'nodejs_active_resources_total']) this.register.removeSingleMetric(name);
    this.items = new Gauge({ name: 'svcq_items', help: 'Items held, by queue and status (the store\'s kept counts, read when scraped).', labelNames: ['host', 'queue', 'status'], registers });
    this.oldestAge = new Gauge({
      name: 'svcq_queue_oldest_pending_age_seconds',
      help: 'Seconds since the oldest pending item of the queue was posted; 0 when nothing is pending.',
      labelNames: ['host', 'queue'],
      registers,
    });
    this.paused = new Gauge({ name: 'svcq_queue_paused', help: 'Whether the queue is paused (1) and leases nothing, or not (0).', labelNames: ['host', 'queue'], registers });
    this.active = new Gauge({ name: 'svcq_queue_active', help: 'Items of the queue leased now (claimed or processing): what maxActive bounds.', labelNames: ['host', 'queue'], registers });
    this.heldCounter = new Counter({
      name: 'svcq_claims_held_total',
      help: 'Claim requests on this node that the pause or a limit of the queue held back (decisions §8.5), by the first reason that held each.',
      labelNames: ['host', 'queue', 'reason'],
      registers,
    });
    this.callbackCounter = new Counter({
      name: 'svcq_callbacks_total',
      help: 'Callback attempts (decisions §9.2) settled on this node: delivered (2xx), failed (tried again later), dropped (still failing 24 hours after the item ended).',
      labelNames: ['host', 'queue', 'outcome'],
      registers,
    });
    this.counters = COUNTED_EVENTS.map(
      (kind) => new Counter({ name: `svcq_items_${kind}_total`, help: `Items ${kind} on this node since it started (durable task events "${kind}").`, labelNames: ['host', 'queue'], registers }),
    );
    this.httpDuration = new BucketHistogram(
      'svcq_http_request_duration_seconds',
      'Time from a request\'s arrival to its response handed to the socket, by audience (queue domain or /api) and status.',
      [0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30],
      this.register,
    );
    this.commitDuration = new Histogram({
      name: 'svcq_store_commit_duration_seconds',
      help: 'Time one durable write of the store took (a group commit: write and fsync).',
      buckets: [0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5],
      registers,
    });
    this.pushRequests = new Counter({
      name: 'svcq_push_requests_total',
      help: 'Push deliveries this node made (decisions §9.1), by outcome: delivered (2xx), answered-error, timeout, connection-failed.',
      labelNames: ['host', 'queue', 'outcome'],
      registers,
    });
    this.pushDuration = new Histogram({
      name: 'svcq_push_duration_seconds',
      help: 'Time one push delivery took, from the request to the end of its answer or its failure.',
      labelNames: ['host', 'queue'],
      buckets: [0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60],
      registers,
    });
    this.commitBatch = new Histogram({
      name: 'svcq_store_commit_batch_size',
      help: 'Changes carried by one durable write of the store.',
      buckets: [1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000, 5000],
      registers,
    });
  }

  /** The store made task events of queue `key` durable (StoreObserver.events). */
  events(key: string, kinds: readonly TaskEventKind[]): void {
    let totals: Float64Array | undefined;
    for (const kind of kinds) {
      const index = EVENT_INDEX[kind];
      if (index === undefined) continue;
      totals ??= this.totalsOf(key);
      totals[index]! += 1;
    }
  }

  /** A claim request of queue `key` was held back by `reason` (decisions §8.5); counted once per request. */
  held(key: string, reason: HoldReason): void {
    let totals = this.heldTotals.get(key);
    if (!totals) this.heldTotals.set(key, (totals = new Float64Array(HOLD_REASONS.length)));
    totals[HOLD_REASONS.indexOf(reason)]! += 1;
  }

  /** decisions §9.2: an attempt of a callback of queue `key` was settled on this node. */
  callback(key: string, outcome: CallbackOutcome): void {
    let totals = this.callbackTotals.get(key);
    if (!totals) this.callbackTotals.set(key, (totals = new Float64Array(CALLBACK_OUTCOMES.length)));
    totals[CALLBACK_OUTCOMES.indexOf(outcome)]! += 1;
  }

  /** Claim requests of queue `key` held back so far on this node, by reason (every reason present). */
  heldCounts(key: string): Record<HoldReason, number> {
    const totals = this.heldTotals.get(key);
    return Object.fromEntries(HOLD_REASONS.map((reason, i) => [reason, totals?.[i] ?? 0])) as Record<HoldReason, number>;
  }

  /** The store made one durable write (StoreObserver.committed). */
  committed(seconds: number, changes: number): void {
    this.commitDuration.observe(seconds);
    this.commitBatch.observe(changes);
  }

  /** decisions §9.1: a push delivery of queue `host/queue` ended with `outcome` after `seconds`. */
  pushed(host: string, queue: string, outcome: string, seconds: number): void {
    this.pushRequests.inc({ host, queue, outcome });
    this.pushDuration.observe({ host, queue }, seconds);
  }

  /** A response was handed to the socket `seconds` after its request arrived. */
  request(audience: Audience, status: number, seconds: number): void {
    this.httpDuration.observe(`${audience} ${status}`, () => ({ audience, status: String(status) }), seconds);
  }

  /**
   * The exposition text, with the item gauges and a counter series (0 until its first event) of
   * exactly the queues given: the defined ones, read now. A deleted queue's series leave the
   * scrape with it (its counts are kept, and go on if it is defined again): where queue names
   * come and go, a scrape does not grow with every name ever used.
   */
  async exposition(queues: readonly QueueGauges[]): Promise<string> {
    this.items.reset();
    this.oldestAge.reset();
    this.paused.reset();
    this.active.reset();
    this.heldCounter.reset();
    this.callbackCounter.reset();
    for (const counter of this.counters) counter.reset();
    for (const q of queues) {
      const labels = { host: q.host, queue: q.name };
      for (const status of STATUSES) this.items.set({ ...labels, status }, q.counts[status]);
      this.oldestAge.set(labels, q.oldestPendingAgeSeconds ?? 0);
      this.paused.set(labels, q.paused ? 1 : 0);
      this.active.set(labels, q.counts.claimed + q.counts.processing);
      const held = this.heldCounts(`${q.host}/${q.name}`);
      for (const reason of HOLD_REASONS) this.heldCounter.inc({ ...labels, reason }, held[reason]);
      const callbacks = this.callbackTotals.get(`${q.host}/${q.name}`);
      CALLBACK_OUTCOMES.forEach((outcome, i) => this.callbackCounter.inc({ ...labels, outcome }, callbacks?.[i] ?? 0));
      const totals = this.totalsOf(`${q.host}/${q.name}`);
      this.counters.forEach((counter, i) => counter.inc(labels, totals[i]!));
    }
    return this.register.metrics();
  }

  /** `text/plain; version=0.0.4; charset=utf-8` */
  get contentType(): string {
    return this.register.contentType;
  }

  /** Totals of one counted event kind for a queue (for tests and the single-queue view). */
  total(key: string, kind: CountedEvent): number {
    return this.totals.get(key)?.[COUNTED_EVENTS.indexOf(kind)] ?? 0;
  }

  private totalsOf(key: string): Float64Array {
    let totals = this.totals.get(key);
    if (!totals) this.totals.set(key, (totals = new Float64Array(COUNTED_EVENTS.length)));
    return totals;
  }
}
