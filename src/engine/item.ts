/** Item statuses (decisions §3.1). */
export type ItemStatus = 'pending' | 'claimed' | 'processing' | 'finished' | 'failed' | 'timedout' | 'cancelled';

export const TERMINAL: ReadonlySet<ItemStatus> = new Set(['finished', 'failed', 'timedout', 'cancelled']);

export function isTerminal(status: ItemStatus): boolean {
  return TERMINAL.has(status);
}

export type TaskEventKind =
  | 'posted'
  | 'claimed'
  | 'progress'
  | 'finished'
  | 'error'
  | 'requeued'
  | 'released'
  | 'failed'
  | 'timedout'
  | 'cancelled'
  | 'purged'
  /** decisions §8.6: a bulk retry made a failed, timed-out or cancelled item pending again. */
  | 'retried'
  /** decisions §8.6: a redrive moved a dead letter back to the queue it came from (and out of this one). */
  | 'redriven'
  /** decisions §9.1: a push queue's target answered a delivery with 2xx (the item finished). */
  | 'delivered'
  /** decisions §9.1: a delivery failed (non-2xx, timeout, connection refused or reset); an error was recorded. */
  | 'delivery-failed'
  /** decisions §9.2: a callback still failing after 24 hours was given up. */
  | 'callback-dropped';

/** One line of the task history (decisions §5). */
export interface TaskEvent {
  ts: number;
  host: string;
  queue: string;
  id: string;
  event: TaskEventKind;
  attempts?: number;
  worker?: string;
  status?: ItemStatus;
  /** decisions §8.3: on the `posted` event of an item a schedule posted, the schedule's name and the occurrence (ms). */
  schedule?: string;
  occurrence?: number;
  /** decisions §8.6: on a `failed`/`timedout` event of a queue with `deadLetter`, the copy's id, or "undefined" when that queue was not defined. */
  deadLetter?: string;
  /** decisions §8.6: on a `redriven` event, where the item went: `<queue>/<new id>`. */
  redrivenTo?: string;
  /** decisions §9.1: on a `delivered` / `delivery-failed` event, the target's status code (null when it gave none) and the milliseconds the request took. */
  code?: number | null;
  ms?: number;
}
