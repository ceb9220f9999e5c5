/**
 * The JSON of the operators' endpoints (decisions §5.1) as the tests read it, written from the
 * decisions rather than imported from the server, so the tests stay black-box.
 */

/** One queue of `GET /api/v2/queues`. */
export interface QueueEntry {
  host: string;
  name: string;
  /** decisions §8.4 */
  paused: boolean;
  counts: Record<string, number>;
  oldestPendingAgeMs: number | null;
  rates: Record<string, number>;
}

/** `GET /api/v2/queues/<host>/<name>`: the entry, its oldest pending items and its leases. */
export interface QueueDetail extends QueueEntry {
  oldest: Array<{ id: string; postedAt: number; attempts: number }>;
  leases: Array<{ id: string; worker: string; until: number; attempts: number }>;
}
