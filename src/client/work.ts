import { hostname } from 'node:os';
import type { SvcqClient } from './client.js';
import type { WorkerEvent, WorkerSink } from './work-events.js';
import { WorkLoop, type ClaimedItem, type Execution, type ItemRunner, type RetryWish, type RunHooks, type RunOutcome } from './work-loop.js';

/** What `client.work()` takes besides the queue and the handler. */
export interface WorkOptions {
  /** Handlers running at once (default 1). */
  concurrency?: number;
  /**
   * Items claimed at most in one claim (decisions §3.8 `max`, 1–100; default `concurrency`). Items
   * claimed ahead wait for a free slot; a stop releases those not started (decisions §8.2).
   */
  prefetch?: number;
  /** Name sent with each claim (default hostname:pid). */
  worker?: string;
  /** Claim only items matching these criteria (interface §4.3). */
  criteria?: Record<string, unknown>;
  /** Seconds each claim long-polls (0–30, default 30). */
  waitSeconds?: number;
  /** Hand results and errors in with the next claim (decisions §3.8 `done`; default true); false submits each on its own. */
  handIns?: boolean;
  /**
   * A handler still running after this many ms is given up on: its `job.signal` aborts and the item
   * gets the error `{ name: "TimeoutError", message }` (its slot is free again at once; the
   * handler's promise is no longer awaited). Default: none.
   */
  timeoutMs?: number;
  /** Everything the loop reports (claimed, finished, failed, retry, reconnected, released, …), as `svcq work --json` prints it. */
  onEvent?: (event: WorkerEvent) => void;
}

/** What a handler gets beside the item. */
export interface WorkJob {
  /** The item's id. */
  readonly id: string;
  /** Claims of this item so far, this one included. */
  readonly attempts: number;
  /** The item's exact JSON text as posted. */
  readonly itemText?: string;
  /**
   * Aborted when the item ends elsewhere (cancelled, timed out), when `timeoutMs` runs out: the
   * handler's work is moot, and what it returns is not delivered.
   */
  readonly signal: AbortSignal;
  /**
   * Reports progress (an object, or an integer percent as `{ percent }`). The latest is re-posted
   * as the heartbeat that keeps the lease alive (the loop beats on its own too).
   */
  progress(record: Record<string, unknown> | number): void;
}

/**
 * Runs for each claimed item. What it returns is the result: an object as it is, nothing as `{}`,
 * anything else as `{ value }`. What it throws is the error: `{ name, message }` of an Error (and
 * its `details`, if any), with the wish it carries (decisions §8.2): `retryIn` (seconds) or
 * `final: true` ({@link RetryIn}, {@link Final}, or any error with those fields); `release: true`
 * (and `delay` seconds) hands the item back instead ({@link Release}).
 */
export type WorkHandler<T = Record<string, unknown>> = (item: T, job: WorkJob) => unknown;

/** How the items of a `client.work()` ended, as `svcq work` counts them. */
export interface WorkSummary {
  done: number;
  failed: number;
  cancelled: number;
}

/** A running `client.work()`. */
export interface Working {
  /**
   * Settles when the loop has stopped: with the counts; rejected with the error when claiming
   * failed in a way retrying does not mend (a wrong token, host or queue: code `wall`).
   */
  readonly done: Promise<WorkSummary>;
  /**
   * Claims nothing more, lets running handlers finish and hands in what they return, releases
   * the items claimed ahead that were not started (decisions §8.2), then settles as `done` does.
   */
  stop(): Promise<WorkSummary>;
}

/** Thrown by a handler: this failure is retried not before `retryIn` seconds (decisions §8.2). */
export class RetryIn extends Error {
  constructor(
    readonly retryIn: number,
    message = `retry in ${retryIn} s`,
    readonly details?: Record<string, unknown>,
  ) {
    super(message);
    this.name = 'RetryIn';
  }
}

/** Thrown by a handler: this failure is final, no further attempt (decisions §8.2). */
export class Final extends Error {
  readonly final = true;
  constructor(
    message = 'failed for good',
    readonly details?: Record<string, unknown>,
  ) {
    super(message);
    this.name = 'Final';
  }
}

/** Thrown by a handler: the item is handed back, pending again after `delay` seconds, this attempt not counted (decisions §8.2). */
export class Release extends Error {
  readonly release = true;
  constructor(readonly delay?: number) {
    super(delay === undefined ? 'released' : `released for ${delay} s`);
    this.name = 'Release';
  }
}

/** Runs `handler` for each item of `queue` (see {@link WorkOptions}); `client.work()` calls this. */
export function work<T = Record<string, unknown>>(client: SvcqClient, queue: string, handler: WorkHandler<T>, options: WorkOptions = {}): Working {
  const concurrency = Math.max(1, Math.floor(options.concurrency ?? 1));
  const onEvent = options.onEvent;
  let summary: WorkSummary = { done: 0, failed: 0, cancelled: 0 };
  const sink: WorkerSink = {
    event: (e) => {
      if (e.event === 'stopped') summary = { done: e.done, failed: e.failed, cancelled: e.cancelled };
      onEvent?.(e);
    },
    stderrLine: () => {},
    running: () => {},
    close: () => {},
  };
  const loop = new WorkLoop(
    client,
    {
      queue,
      runner: new FunctionRunner(handler as WorkHandler, options.timeoutMs),
      concurrency,
      criteria: options.criteria,
      worker: options.worker ?? `${hostname()}:${process.pid}`,
      once: false,
      waitSeconds: options.waitSeconds ?? 30,
      prefetch: Math.min(100, Math.max(1, Math.floor(options.prefetch ?? concurrency))),
      handIns: options.handIns,
      eagerPrefetch: true,
    },
    sink,
  );
  const done = loop.run().then(() => {
    if (loop.fatal !== undefined) throw loop.fatal;
    return summary;
  });
  // A caller that only ever calls stop() still hears of a failure through stop()'s promise.
  done.catch(() => {});
  return {
    done,
    stop: () => {
      loop.stop();
      return done;
    },
  };
}

/** Runs a function for each item (the library's `client.work()`). */
class FunctionRunner implements ItemRunner {
  constructor(
    private readonly handler: WorkHandler,
    private readonly timeoutMs?: number,
  ) {}

  refusedResult(reason: string): string {
    return JSON.stringify({ name: 'ResultRejected', message: reason });
  }

  start(claimed: ClaimedItem, hooks: RunHooks): Execution {
    const controller = new AbortController();
    let settle!: (outcome: RunOutcome) => void;
    const done = new Promise<RunOutcome>((resolve) => (settle = resolve));
    let timer: NodeJS.Timeout | undefined;
    let finished = false;
    const finish = (outcome: RunOutcome): void => {
      if (finished) return;
      finished = true;
      clearTimeout(timer);
      settle(outcome);
    };
    const job: WorkJob = {
      id: claimed.id,
      attempts: claimed.attempts,
      itemText: claimed.itemText,
      signal: controller.signal,
      progress: (record) => {
        // Once the run has ended its progress is moot: the result may be on its way already.
        if (finished || controller.signal.aborted) return;
        if (typeof record === 'number' && Number.isInteger(record)) return hooks.progress(JSON.stringify({ percent: record }));
        if (typeof record !== 'object' || record === null || Array.isArray(record)) return hooks.warning('ignored a progress that is neither an integer nor an object');
        try {
          hooks.progress(JSON.stringify(record));
        } catch (err) {
          hooks.warning(`ignored a progress that cannot be written as JSON: ${(err as Error).message}`);
        }
      },
    };
    if (this.timeoutMs !== undefined) {
      const ms = this.timeoutMs;
      timer = setTimeout(() => {
        controller.abort(new Error(`timed out after ${ms} ms`));
        finish({ kind: 'error', record: JSON.stringify({ name: 'TimeoutError', message: `timed out after ${ms} ms` }), timedOut: true });
      }, ms);
    }
    // Called on the next turn: a handler that throws before its first await fails its item, not the loop.
    void Promise.resolve()
      // Stopped before it could start (the item ended elsewhere): the handler is not called.
      .then(() => (controller.signal.aborted ? undefined : this.handler(claimed.item, job)))
      .then(
        (value) => finish(resultOutcome(value)),
        (err: unknown) => finish(errorOutcome(err)),
      );
    return {
      done,
      terminate: () => {
        controller.abort(new Error('stopped'));
        finish({ kind: 'error', record: JSON.stringify({ name: 'AbortError', message: 'stopped before the handler finished' }) });
      },
      kill: () => controller.abort(new Error('stopped')),
    };
  }
}

function resultOutcome(value: unknown): RunOutcome {
  try {
    const record = value === undefined || value === null ? '{}' : typeof value === 'object' && !Array.isArray(value) ? JSON.stringify(value) : JSON.stringify({ value });
    return { kind: 'result', record };
  } catch (err) {
    return { kind: 'error', record: JSON.stringify({ name: 'ResultNotJson', message: `the handler's result cannot be written as JSON: ${(err as Error).message}` }) };
  }
}

/** What a thrown value asks for: a release, or an error record with the wish it carries. */
function errorOutcome(err: unknown): RunOutcome {
  const fields = (typeof err === 'object' && err !== null ? err : {}) as { release?: unknown; delay?: unknown; retryIn?: unknown; final?: unknown; details?: unknown };
  if (fields.release === true) return { kind: 'release', ...(typeof fields.delay === 'number' ? { delaySeconds: fields.delay } : {}) };
  const wish: RetryWish = fields.final === true ? { final: true } : typeof fields.retryIn === 'number' ? { retryIn: fields.retryIn } : {};
  let record: string;
  try {
    const details = typeof fields.details === 'object' && fields.details !== null ? { details: fields.details } : {};
    record = JSON.stringify(err instanceof Error ? { name: err.name, message: err.message, ...details } : typeof err === 'object' && err !== null && !Array.isArray(err) ? err : { message: String(err) });
  } catch {
    record = JSON.stringify({ message: String(err) });
  }
  return { kind: 'error', record, ...wish };
}
