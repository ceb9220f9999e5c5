import type { HoldReason } from '../engine/limits.js';
import type { ScheduleView } from '../engine/schedules.js';
import type { StatusCounts } from '../store/store.js';
import type { QueueRates } from './rates.js';

/** One entry of `GET /api/v2/queues` (decisions §5.1). */
export interface QueueEntry {
  host: string;
  name: string;
  /** Whether the queue is paused (decisions §8.4): it leases nothing until it is resumed. */
  paused: boolean;
  counts: StatusCounts;
  /** Milliseconds since the oldest pending item was posted (an integer), or null when none is pending. */
  oldestPendingAgeMs: number | null;
  /** Events per second over the last 60 s. */
  rates: QueueRates;
  /** decisions §8.5, §8.6: the queue's limits as defined (null where none is set); absent from servers before them. */
  limits?: QueueLimits;
  /** decisions §8.5: items leased now (claimed or processing), what `limits.maxActive` bounds. */
  active?: number;
  /** decisions §8.5: claim requests this node answered that the pause or a limit held back, by the first reason that held each, since it started. */
  held?: Record<HoldReason, number>;
  /** decisions §8.5: groups holding a claimable item, for a queue with fairness "groups" or groupMaxActive; null for others. */
  groupsWaiting?: number | null;
  /** decisions §8.6: pending items of the queue's dead-letter queue; null without one (or when that queue is not defined). */
  deadLetters?: number | null;
  /** decisions §9.1: a push queue's target and its health on the node that answers; null for other queues (absent from servers before push queues). */
  push?: PushState | null;
}

/** decisions §9.1: a push queue as operators see it on the node that answers. */
export interface PushState {
  /** The target URL. */
  url: string;
  /** Deliveries in flight on this node now, and the most it makes at once (`concurrency`). */
  inFlight: number;
  concurrency: number;
  /** Items this node claimed ahead of its requests, leased and waiting for a request to end (absent from servers before it claimed ahead). */
  claimedAhead?: number;
  /** This node's last delivery: delivered or failed, its status code (null: none came), its time (ms), when it ended (ms since the epoch); null before the first. */
  last: { outcome: 'delivered' | 'failed'; code: number | null; ms: number; at: number } | null;
  /** Deliveries that failed in a row on this node since the last one delivered. */
  consecutiveFailures: number;
  /** The target is failing: this node's last delivery failed, or the server may not call the URL. */
  failing: boolean;
  /** The sentence of the last failure, or of the allow-list's refusal; null when none. */
  lastError: string | null;
  /** The URL is outside `--push-allow`: this node delivers nothing of the queue, and its items wait. */
  refused: boolean;
}

/** A queue's flow-control fields (decisions §8.5, §8.6) as operators see them. */
export interface QueueLimits {
  maxActive: number | null;
  groupMaxActive: number | null;
  rateLimit: { max: number; perSeconds: number } | null;
  fairness: 'fifo' | 'groups';
  deadLetter: string | null;
}

/** What `GET /api/v2/queues` answers. */
export interface QueueList {
  queues: QueueEntry[];
}

/** What `GET /api/v2/queues/<host>/<name>` answers: the entry, the oldest pending items and the current leases. */
export interface QueueDetail extends QueueEntry {
  /** The 20 oldest pending items, oldest first. */
  oldest: Array<{ id: string; postedAt: number; attempts: number }>;
  /** Up to 100 current leases, soonest end first. */
  leases: Array<{ id: string; worker: string; until: number; attempts: number }>;
  /** decisions §8.3: the queue's schedules, their next and last occurrences (absent from servers before them). */
  schedules?: ScheduleView[];
  /** decisions §9.2: callbacks owed for the queue's items, and how many of them failed at least once (absent from servers before them). */
  callbacks?: { owed: number; failing: number };
}

/** Where a client asks for the list (the `/api/v2` prefix included). */
export const QUEUES_PATH = '/api/v2/queues';

/** Where a client asks for one queue. */
export function queuePath(host: string, name: string): string {
  return `${QUEUES_PATH}/${encodeURIComponent(host)}/${encodeURIComponent(name)}`;
}

/** What `POST /api/v2/queues/<host>/<name>/pause` and `…/resume` answer (decisions §8.4): the state the queue is left in. */
export interface PauseAnswer {
  paused: boolean;
}

/** Where a client pauses or resumes a queue. */
export function pausePath(host: string, name: string, action: 'pause' | 'resume'): string {
  return `${queuePath(host, name)}/${action}`;
}

/** What a bulk action answers (decisions §8.6): how many items it changed, and whether more are left. */
export type BulkAnswer = ({ moved: number } | { retried: number } | { cancelled: number }) & { more: boolean };

/** Where a client asks for a bulk action. */
export function bulkPath(host: string, name: string, action: 'redrive' | 'retry' | 'cancel'): string {
  return `${queuePath(host, name)}/${action}`;
}
