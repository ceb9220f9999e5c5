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
