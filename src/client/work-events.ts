/**
 * What a worker reports while it runs (`svcq work`, and `client.work()`'s `onEvent`). With
 * `--json` or on a pipe each one is a line of JSON on stdout; on a terminal they feed the status
 * line. For `client.work()`, "CMD" reads as "the handler": a handler's failure has `exitCode` and
 * `signal` null.
 */
export type WorkerEvent =
  /** The worker is ready and about to claim. */
  | { event: 'started'; queue: string; worker: string; concurrency: number }
  /** An item was claimed and CMD started for it. */
  | { event: 'claimed'; id: string; attempts: number }
  /** CMD exited 0 and the result was delivered (`status` is the server's answer, `accepted` false if the item was already terminal). */
  | { event: 'finished'; id: string; attempts: number; ms: number; accepted: boolean; status: string }
  /** CMD failed (exit code, signal or timeout) and the error record was delivered; `status` says whether the item will be retried (`pending`) or is `failed`. */
  | { event: 'failed'; id: string; attempts: number; ms: number; exitCode: number | null; signal: string | null; timedOut: boolean; accepted: boolean; status: string }
  /** The item was handed back unstarted or at its handler's wish (decisions §8.2 release): pending again, this attempt not counted; `accepted` false when it was no longer leased. */
  | { event: 'released'; id: string; accepted: boolean; status: string }
  /** The item became terminal elsewhere (cancelled, timed out, finished by another worker) while CMD ran; CMD was stopped. */
  | { event: 'cancelled'; id: string; status: string }
  /** A call to the server failed and will be tried again after `delayMs`. */
  | { event: 'retry'; what: 'claim' | 'progress' | 'result' | 'error'; id?: string; attempt: number; delayMs: number; message: string }
  /** The server answers again, after calls to it had failed (and were retried) for `afterMs`. */
  | { event: 'reconnected'; afterMs: number }
  /** Something went wrong that is not retried; `id` names the item if it concerns one. */
  | { event: 'error'; id?: string; message: string }
  /** A note that needs no action (e.g. an unreadable `::progress` line). */
  | { event: 'warning'; id?: string; message: string }
  /** `--once` found nothing to do. */
  | { event: 'empty' }
  /** A signal arrived: nothing new is claimed; `running` items are finishing (or, with `force`, being stopped). */
  | { event: 'stopping'; running: number; force: boolean }
  /** The worker is done: how its items ended (see {@link tally}). */
  | { event: 'stopped'; done: number; failed: number; cancelled: number };

/**
 * Which count an item's last event adds to: `cancelled` when the item turned out to be cancelled
 * (while CMD ran, or before its result or error arrived), whatever CMD did; else `done` for CMD's
 * success and `failed` for its failure or an item that ended elsewhere some other way (timed out).
 */
export function tally(e: WorkerEvent): 'done' | 'failed' | 'cancelled' | undefined {
  switch (e.event) {
    case 'finished':
      return !e.accepted && e.status === 'cancelled' ? 'cancelled' : 'done';
    case 'failed':
      return !e.accepted && e.status === 'cancelled' ? 'cancelled' : 'failed';
    case 'cancelled':
      return e.status === 'cancelled' ? 'cancelled' : 'failed';
    default:
      return undefined;
  }
}

/** Where a worker reports to. */
export interface WorkerSink {
  /** One event, in the order things happened. */
  event(e: WorkerEvent): void;
  /** One line of CMD's stderr for item `id`. */
  stderrLine(id: string, line: string): void;
  /** Ids of the items whose CMD is running now, after any change. */
  running(ids: readonly string[]): void;
  /** The worker is done: stop redrawing. */
  close(): void;
}
