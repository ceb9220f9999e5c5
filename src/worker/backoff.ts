import { ClientError } from '../client/client.js';

/** Longest pause between two tries: a restarted server is picked up within this long. */
export const BACKOFF_CAP_MS = 5000;

/** Pause before try number `attempt` (0-based): doubling from 100 ms up to `capMs`, with jitter so many workers do not retry in step. */
export function backoffMs(attempt: number, capMs = BACKOFF_CAP_MS): number {
  const base = Math.min(capMs, 100 * 2 ** Math.min(attempt, 16));
  return Math.round(base * (0.75 + Math.random() * 0.25));
}

/** Failures worth another try: the server could not be reached, timed out, or answered 5xx. */
export function isTransient(err: unknown): boolean {
  return err instanceof ClientError && (err.transient || (err.status ?? 0) >= 500 || err.status === 429);
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
