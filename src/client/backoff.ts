import { ClientError } from './client.js';

/** Longest pause between two tries: a restarted server is picked up within this long. */
export const BACKOFF_CAP_MS = 5000;

/** While calls keep failing, a person is told at most this often (the first failure at once). */
export const FAILURE_REPORT_EVERY_MS = 10_000;

/** Pause before try number `attempt` (0-based): doubling from 100 ms up to `capMs`, with jitter so many workers do not retry in step. */
export function backoffMs(attempt: number, capMs = BACKOFF_CAP_MS): number {
  const base = Math.min(capMs, 100 * 2 ** Math.min(attempt, 16));
  return Math.round(base * (0.75 + Math.random() * 0.25));
}

/** Failures worth another try: the server could not be reached, timed out, or answered 5xx. */
export function isTransient(err: unknown): boolean {
  return err instanceof ClientError && (err.transient || (err.status ?? 0) >= 500 || err.status === 429);
}

/**
 * A failed request the server surely did not act on: it never went out whole, or svcq refused it
 * with 503 (a write it could not make durable changed nothing: decisions §6), or it met a 429.
 * Anything else (no answer after it went out, another 5xx) may have been applied: so may a 503
 * that is not svcq's own `{ error }`, which a proxy in front of it may give after passing the
 * request on (a connection reset before the answer, say).
 */
export function surelyNotApplied(err: unknown): boolean {
  return err instanceof ClientError && (!err.sent || (err.status === 503 && svcqAnswered(err.body)) || err.status === 429);
}

/** Whether an error answer is svcq's own: a JSON object with its sentence in `error` (a proxy's is a page or plain text). */
export function svcqAnswered(body: unknown): boolean {
  return typeof body === 'object' && body !== null && typeof (body as { error?: unknown }).error === 'string';
}

/** Resolves after `ms`, or at once (false) when `signal` aborts. */
export function sleep(ms: number, signal?: AbortSignal): Promise<boolean> {
  if (signal?.aborted) return Promise.resolve(false);
  return new Promise((resolve) => {
    const done = (completed: boolean): void => {
      clearTimeout(timer);
      signal?.removeEventListener('abort', onAbort);
      resolve(completed);
    };
    const onAbort = (): void => done(false);
    const timer = setTimeout(() => done(true), ms);
    signal?.addEventListener('abort', onAbort, { once: true });
  });
}

export function errorMessage(err: unknown): string {
  return err instanceof Error ? err.message : String(err);
}

/**
 * Paces what a person is told about a run of failing calls: the first failure at once, then a
 * reminder at most every `everyMs`, and a word when a call answers again. One report may pace
 * many loops (a worker's claims and deliveries share one), so it keeps no count of tries.
 */
export class FailureReport {
  private since?: number;
  private reportedAt = 0;

  constructor(
    readonly everyMs = FAILURE_REPORT_EVERY_MS,
    private readonly now: () => number = Date.now,
  ) {}

  /** A call failed: `first` of a run, `again` when a reminder is due, undefined to say nothing now. */
  failed(at = this.now()): 'first' | 'again' | undefined {
    if (this.since === undefined) {
      this.since = at;
      this.reportedAt = at;
      return 'first';
    }
    if (at - this.reportedAt < this.everyMs) return undefined;
    this.reportedAt = at;
    return 'again';
  }

  /** How long the current run of failures has lasted (0 when calls answer). */
  failingFor(at = this.now()): number {
    return this.since === undefined ? 0 : at - this.since;
  }

  /** When the next reminder is due. */
  nextReportAt(): number {
    return this.reportedAt + this.everyMs;
  }

  /** A call answered: how long calls had been failing, or undefined when they had not. Ends the run. */
  answered(at = this.now()): number | undefined {
    if (this.since === undefined) return undefined;
    const failedFor = at - this.since;
    this.since = undefined;
    return failedFor;
  }
}

/** One failure that {@link retrying} will try again after `delayMs`. */
export interface RetryFailure {
  error: unknown;
  /** The failed try's number, from 1. */
  attempt: number;
  delayMs: number;
  /** Since the first failure of this run. */
  failingForMs: number;
  /** With {@link RetryOptions.report}: whether to say so now (`first` of a run, or `again` as a reminder). */
  report?: 'first' | 'again';
}

export interface RetryOptions {
  /** Which failures are tried again (default {@link isTransient}); `attempt` counts failed tries from 0. */
  retryable?: (err: unknown, attempt: number) => boolean;
  /** Each failure that will be tried again, before the pause. */
  onFailure?: (failure: RetryFailure) => void;
  /** The call answered after failing for `failedForMs`. */
  onRecovered?: (failedForMs: number) => void;
  /** Paces {@link RetryFailure.report}; a pause never runs past the next reminder, which comes with a fresh try. */
  report?: FailureReport;
  /** Give up once failures have lasted this long: the pause never runs past it either. */
  giveUpAfterMs?: number;
  /** Give up on a failure at or after this time (ms since the epoch), however long failures have lasted. */
  giveUpAt?: number;
  /**
   * When a run of failures began, given the failed try's start, when it failed and how (default:
   * when the try failed). A try that waited for an answer that never came has been failing since
   * it was sent; one that got an error answer or a reset failed when that came.
   */
  failedSince?: (tryStartedAt: number, failedAt: number, err: unknown) => number;
  /** The error thrown on giving up (default: the last failure). */
  gaveUp?: (err: unknown, failingForMs: number) => Error;
  /** Ends a pause at once (the next try is made then); a failure once it has aborted is thrown, not retried. */
  signal?: AbortSignal;
}

/**
 * Calls `call` until it answers, pausing with {@link backoffMs} between tries, for every retry loop
 * of the clients (a worker's claims and deliveries, `item --wait`, posts). A failure that is not
 * retryable is thrown as it is.
 */
export async function retrying<T>(call: () => Promise<T>, options: RetryOptions = {}): Promise<T> {
  const retryable = options.retryable ?? isTransient;
  let failingSince: number | undefined;
  for (let attempt = 0; ; attempt++) {
    const tryStartedAt = Date.now();
    try {
      const answer = await call();
      options.report?.answered();
      if (failingSince !== undefined) options.onRecovered?.(Date.now() - failingSince);
      return answer;
    } catch (err) {
      if (!retryable(err, attempt) || options.signal?.aborted) throw err;
      const now = Date.now();
      failingSince ??= options.failedSince?.(tryStartedAt, now, err) ?? now;
      const failingForMs = now - failingSince;
      const giveUpAfterMs = options.giveUpAfterMs ?? Infinity;
      const leftMs = (options.giveUpAt ?? Infinity) - now;
      if (failingForMs >= giveUpAfterMs || leftMs <= 0) throw options.gaveUp?.(err, failingForMs) ?? err;
      const report = options.report?.failed(now);
      const delayMs = Math.min(backoffMs(attempt), giveUpAfterMs - failingForMs, leftMs, options.report ? options.report.nextReportAt() - now : Infinity);
      options.onFailure?.({ error: err, attempt: attempt + 1, delayMs, failingForMs, ...(report ? { report } : {}) });
      await sleep(delayMs, options.signal);
    }
  }
}
