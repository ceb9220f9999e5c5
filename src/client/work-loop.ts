import { ClientError, type RawHandIn, type SvcqClient } from './client.js';
import type { DoneAnswer, SubmissionAnswer } from '../protocol.js';
import { backoffMs, errorMessage, FailureReport, isTransient, retrying, sleep, surelyNotApplied } from './backoff.js';
import { tally, type WorkerEvent, type WorkerSink } from './work-events.js';
import { setMaxListeners } from 'node:events';
import { nestedDeeperThan } from '../json-text.js';

/** A worker's wish for one failure (decisions §8.2): retried not before `retryIn` seconds, or `final`: no further attempt. */
export interface RetryWish {
  retryIn?: number;
  final?: boolean;
}

/** What one run of an item came to. */
export type RunOutcome =
  | { kind: 'result'; record: string }
  /** `exitCode`, `signal` and `timedOut` describe the failure in the worker's events (a command's; null for a function's). */
  | ({ kind: 'error'; record: string; exitCode?: number | null; signal?: string | null; timedOut?: boolean } & RetryWish)
  /** Hand the item back (decisions §8.2 release): pending again, not claimable for `delaySeconds`, the attempt not counted. */
  | { kind: 'release'; delaySeconds?: number };

/** One run of one item, as an {@link ItemRunner} started it. */
export interface Execution {
  readonly done: Promise<RunOutcome>;
  /** Stop it: the item ended elsewhere (cancelled), or the worker is forced to stop. */
  terminate(): void;
  /** Stop it at once: the process is exiting. */
  kill(): void;
}

/** What a run may tell the loop while it goes on. */
export interface RunHooks {
  /** A progress record (JSON object text): posted, and re-posted as the heartbeat. */
  progress(record: string): void;
  /** A line the run wrote to its stderr. */
  stderrLine(line: string): void;
  /** A note that needs no action. */
  warning(message: string): void;
}

/** What the loop runs for each item: a command (`svcq work`) or a function (`client.work()`). */
export interface ItemRunner {
  start(claimed: ClaimedItem, hooks: RunHooks): Execution;
  /** The error record that goes in place of a result the server refused (too large, say). */
  refusedResult(reason: string): string;
}

export interface WorkLoopOptions {
  queue: string;
  /** Runs each item. */
  runner: ItemRunner;
  /** Items handled at once (≥ 1). */
  concurrency: number;
  /** Claim criteria (interface §4.3). */
  criteria?: Record<string, unknown>;
  /** Name sent with each claim. */
  worker: string;
  /** Handle one item, then stop. */
  once: boolean;
  /** Seconds each claim long-polls (decisions §3.3: 0–30). */
  waitSeconds: number;
  /**
   * Items claimed at most in one claim (decisions §3.8 `max`, 1–100; default 1). Items claimed
   * ahead wait in the worker until a slot is free; it claims no more ahead than it can start
   * before half their lease has run (judged from how long its jobs take).
   */
  prefetch?: number;
  /** Hand results and errors in with the next claim (decisions §3.8 `done`); default true. */
  handIns?: boolean;
  /**
   * Claim ahead from the first claim on, before a job has ended and shown the pace: the claims on
   * their way together ask for at most `prefetch` items beyond one each (the library's `prefetch`).
   * Default false: `svcq work --prefetch` claims one item per slot until a job has ended.
   */
  eagerPrefetch?: boolean;
}

/** An item as a claim answers it. */
export interface ClaimedItem {
  id: string;
  item: Record<string, unknown>;
  /** The item's exact text as posted, which CMD gets on stdin (interface §2.1). */
  itemText?: string;
  attempts: number;
  lease: { until: number };
  /** The server's clock minus this machine's when it was claimed (see ServerClock). */
  clockOffsetMs?: number;
}

/**
 * What one claim came to: stop, nothing (`empty-early`: answered long before its wait was up), a
 * `Retry-After` to honour (decisions §8.5), or the items.
 */
type ClaimOutcome = 'stop' | 'empty' | 'empty-early' | { retryAfterMs: number } | ClaimedItem[];

/** A result or error waiting to go out with the next claim. */
/** The server's answer to an outcome handed in; `asError` when a refused result went in as an error. */
type Delivered = SubmissionAnswer & { asError?: true };

interface HandIn extends RetryWish {
  id: string;
  kind: 'result' | 'error';
  /** The record as JSON text (an object). */
  record: string;
  bytes: number;
  queuedAt: number;
  /** Reports what the server said (undefined: it could not be delivered). */
  settle: (answer: SubmissionAnswer | undefined) => void;
}

/** How `run()` ended, as the command's exit code. */
export const EXIT = {
  ok: 0,
  /** a fatal error (e.g. the queue is not there), or `--once` with a failed CMD */
  failed: 1,
  /** `--once` and the queue stayed empty */
  empty: 3,
} as const;

/** When the lease length cannot be read from a claim (clocks disagree), heartbeat this often. */
const FALLBACK_HEARTBEAT_MS = 1000;
/** Longest pause between heartbeats, whatever the lease. */
const MAX_HEARTBEAT_MS = 10_000;
/** A server that does not answer a submission within this is treated like one that cannot be reached: retried. */
const SUBMIT_TIMEOUT_MS = 30_000;
/** Longest pause after an empty answer that came back at once (see `slot`). */
const EMPTY_BACKOFF_CAP_MS = 2000;
/**
 * Longest pause a claim answer's `Retry-After` (decisions §8.5: the queue's rate limit) is honoured
 * for before claiming again: a window of hours is looked at again every minute, so a limit raised
 * meanwhile is noticed.
 */
export const RETRY_AFTER_CAP_MS = 60_000;
/** After the first signal, how long a claim already sent may still bring back an item (see `stop`). */
const CLAIM_SETTLE_MS = 1000;
/** A record larger than this (in bytes) is submitted on its own rather than handed in with a claim (a claim's body is bounded). */
const HAND_IN_MAX_BYTES = 64 * 1024;
/** Most bytes of records one claim carries: well inside the server's 1 MiB body. */
const HAND_INS_MAX_BYTES = 512 * 1024;
/** A record nested deeper than this goes on its own: the server refuses a claim nested past 64 levels. */
const HAND_IN_MAX_DEPTH = 48;
/** Hand-ins that waited this long for a claim to carry them are submitted on their own. */
const HAND_IN_MAX_WAIT_MS = 1000;
/** Most hand-ins one claim carries (decisions §3.8). */
const HAND_INS_PER_CLAIM = 100;

interface Running {
  id: string;
  attempts: number;
  job?: Execution;
  /** Latest progress record from CMD, re-posted as the heartbeat. */
  latest?: string;
  /** A progress post is wanted. */
  dirty: boolean;
  /** The last progress record sent. */
  posted?: string;
  sending?: Promise<void>;
  /** Set when the server says the item is already terminal: CMD is stopped, nothing more is sent. */
  terminal?: string;
}

/**
 * The work loop of `svcq work` (decisions §1.3) and of the library's `client.work()`: claims
 * items, runs each (a command, a function), keeps the lease alive while it runs, and delivers the
 * result or the error, handed in with the next claim. It never drops a result it could not
 * deliver: it retries it, claiming nothing new meanwhile.
 */
export class WorkLoop {
  private stopping = false;
  private forcing = false;
  private abandoning = false;
  /** Aborted by the first signal: ends the pauses between claims. */
  private readonly claims = new AbortController();
  /** Claims on their way to the server, and when each was sent. */
  private readonly claimsInFlight = new Map<AbortController, number>();
  private readonly abandon = new AbortController();
  /** Running jobs by claim number: the same item may, rarely, be claimed twice by one worker. */
  private readonly running = new Map<number, Running>();
  private claimsMade = 0;
  /** Deliveries that failed at least once and are being retried. */
  private undelivered = 0;
  private gateWaiters: Array<() => void> = [];
  /** The run of failing calls to the server (retried), if there is one now: ended by any answer. */
  private readonly connection = new FailureReport();
  private done = 0;
  private failed = 0;
  private cancelled = 0;
  private exitCode: number = EXIT.ok;
  /** Items claimed ahead (prefetch), oldest first: the next free slot runs the first. */
  private readonly ready: ClaimedItem[] = [];
  /** Results and errors waiting for the next claim to carry them. */
  private handIns: HandIn[] = [];
  /**
   * Items whose result from a run here is not yet delivered, and how many such runs each has. Not
   * errors: an error re-queues its item (or fails it), it never settles a later attempt, and one
   * handed in with a claim may re-queue its item for another slot's claim of the same moment.
   */
  private readonly held = new Map<string, number>();
  /** Hand-ins that waited too long, being submitted on their own: a stop waits for them. */
  private readonly flushes = new Set<Promise<void>>();
  /** How long a job takes, smoothed; 0 until one has ended. */
  private jobMs = 0;
  /** The lease a claim gave, in ms (for how far ahead to claim). */
  private leaseMs = 0;
  private readonly startedAt = Date.now();
  /** Items that claims on their way asked for beyond one each (see `claim`). */
  private aheadAsked = 0;
  /** Releases of items claimed ahead that a stop left unstarted: the loop ends once they are answered. */
  private readonly releases = new Set<Promise<void>>();
  /** The failure that ended the loop, if one did (a claim the server refused: the wall, say). */
  fatal?: unknown;

  constructor(
    private readonly client: SvcqClient,
    private readonly options: WorkLoopOptions,
    private readonly sink: WorkerSink,
  ) {
    // Every claim in flight and every submission listens to these: one listener per slot is expected.
    setMaxListeners(0, this.claims.signal, this.abandon.signal);
  }

  /**
   * Kills every running command at once. For a worker that is exiting anyway (an uncaught error, a
   * hang-up): commands run in their own process groups and would otherwise outlive it.
   */
  killAll(): void {
    for (const r of this.running.values()) r.job?.kill();
  }

  /** Works until stopped (or, with `once`, one item); resolves with the exit code. */
  async run(): Promise<number> {
    const { queue, worker, once } = this.options;
    const concurrency = once ? 1 : Math.max(1, this.options.concurrency);
    this.sink.event({ event: 'started', queue, worker, concurrency });
    // Hand-ins that no claim carried within HAND_IN_MAX_WAIT_MS (every slot busy with long jobs) go on their own.
    const flusher = setInterval(() => {
      if (this.handIns.length > 0 && Date.now() - this.handIns[0]!.queuedAt >= HAND_IN_MAX_WAIT_MS) {
        const flush = this.flushHandIns().finally(() => this.flushes.delete(flush));
        this.flushes.add(flush);
      }
    }, HAND_IN_MAX_WAIT_MS / 2);
    flusher.unref();
    try {
      await Promise.all(Array.from({ length: concurrency }, () => this.slot()));
    } finally {
      clearInterval(flusher);
    }
    // Items a last claim brought ahead of a stop are not started either.
    this.leaveReady('the worker is stopping');
    // Whatever was not handed in goes now, on its own; what went on its own before is awaited too.
    await Promise.all([this.flushHandIns(), ...this.flushes, ...this.releases]);
    this.sink.event({ event: 'stopped', done: this.done, failed: this.failed, cancelled: this.cancelled });
    this.sink.close();
    return this.exitCode;
  }

  /**
   * First signal: claim nothing new, let running commands finish and deliver. Items claimed ahead
   * and not started are not started: they are released (decisions §8.2), and the server hands them
   * out again at once (a server without release lets their leases run out).
   */
  stop(): void {
    if (this.stopping) return;
    this.stopping = true;
    this.sink.event({ event: 'stopping', running: this.running.size, force: false });
    this.leaveReady('the worker is stopping');
    this.claims.abort();
    // A claim the server is still committing cannot be taken back by hanging up: the item would
    // stay leased to a worker that never heard of it. A claim only the server's long poll still
    // holds can be: that poll ends when the caller hangs up. So a claim gets CLAIM_SETTLE_MS from
    // when it was sent to bring back an item, which is then run like any other, before it is dropped.
    const now = Date.now();
    for (const [controller, sentAt] of this.claimsInFlight) {
      setTimeout(() => controller.abort(), Math.max(0, sentAt + CLAIM_SETTLE_MS - now)).unref();
    }
    this.openGate();
  }

  /** Second signal: stop the running commands too; their error records are still delivered. */
  force(): void {
    if (this.forcing) return;
    this.stop();
    this.forcing = true;
    this.sink.event({ event: 'stopping', running: this.running.size, force: true });
    for (const controller of this.claimsInFlight.keys()) controller.abort();
    for (const r of this.running.values()) r.job?.terminate();
  }

  /** Third signal: give up on deliveries still being retried (each is reported as an error). */
  giveUp(): void {
    this.force();
    this.abandoning = true;
    this.abandon.abort();
  }

  private async slot(): Promise<void> {
    /** Empty answers in a row that came back long before the wait was up. */
    let early = 0;
    // `once` waits as long as one claim would, even when the server answers before that.
    const onceUntil = Date.now() + this.options.waitSeconds * 1000;
    for (;;) {
      // Items claimed ahead wait here; after the first signal none is started (see stop).
      let next = this.stopping ? undefined : this.takeReady();
      if (!next) {
        if (this.stopping) break;
        await this.deliveriesSettled();
        if (this.stopping) break;
        const claim = await this.claim();
        if (claim === 'stop') {
          break;
        } else if (typeof claim === 'object' && !Array.isArray(claim)) {
          // The queue's rate limit held the claim back and said when one can succeed: that long,
          // not the usual pause (decisions §8.5). `once` gives up if that is past its wait.
          const pause = Math.min(claim.retryAfterMs, RETRY_AFTER_CAP_MS);
          if (this.options.once && Date.now() + pause > onceUntil) {
            this.sink.event({ event: 'empty' });
            this.exitCode = EXIT.empty;
            break;
          }
          early = 0;
          await sleep(pause, this.claims.signal);
          continue;
        } else if (claim === 'empty' || claim === 'empty-early') {
          if (this.options.once && (claim === 'empty' || Date.now() >= onceUntil)) {
            this.sink.event({ event: 'empty' });
            this.exitCode = EXIT.empty;
            break;
          }
          // A server that answers empty at once (it is shutting down, or --wait 0 asked it not to
          // hold the claim) would otherwise be asked again in a tight loop: pause, longer each time.
          if (claim === 'empty-early') {
            const pause = backoffMs(early++, EMPTY_BACKOFF_CAP_MS);
            await sleep(this.options.once ? Math.min(pause, Math.max(0, onceUntil - Date.now())) : pause, this.claims.signal);
          } else early = 0;
          continue;
        } else {
          next = claim[0]!;
          this.ready.push(...claim.slice(1));
        }
      }
      early = 0;
      const ok = await this.handle(next);
      if (this.options.once) {
        if (!ok) this.exitCode = EXIT.failed;
        break;
      }
    }
  }

  /**
   * How many items the next claim asks for: one for the slot that claims, and with prefetch as
   * many more as the worker can start before half their lease has run, at its pace so far.
   */
  private claimSize(): number {
    const prefetch = this.options.once ? 1 : Math.min(100, Math.max(1, this.options.prefetch ?? 1));
    if (prefetch === 1) return 1;
    const concurrency = Math.max(1, this.options.concurrency);
    // Before a job has ended the pace is unknown: each slot claims its own item, none ahead
    // (unless asked to claim ahead from the first claim on: up to the prefetch).
    if (this.options.eagerPrefetch && this.jobMs <= 0) return Math.max(1, prefetch - this.ready.length - this.aheadAsked);
    if (this.jobMs <= 0 || this.leaseMs <= 0) return 1;
    const startable = Math.floor((concurrency * this.leaseMs) / 2 / this.jobMs);
    return Math.max(1, Math.min(prefetch, startable - this.ready.length));
  }

  private async claim(): Promise<ClaimOutcome> {
    const max = this.claimSize();
    // What this claim asks for beyond its own slot's item counts against the prefetch of the claims beside it.
    this.aheadAsked += max - 1;
    try {
      return await this.claimUpTo(max);
    } finally {
      this.aheadAsked -= max - 1;
    }
  }

  /**
   * One claim, retried while the server cannot be reached, carrying the hand-ins waiting at the
   * time. `empty-early`: the server answered empty in less than half the time the claim asked it
   * to wait; `retryAfterMs`: it answered empty with a Retry-After (its rate limit).
   */
  private async claimUpTo(max: number): Promise<ClaimOutcome> {
    const { queue, worker, criteria, waitSeconds } = this.options;
    const prefetching = !this.options.once && (this.options.prefetch ?? 1) > 1;
    const carried = this.takeHandIns();
    // Hand-ins ride only on a claim that is answered at once: held for a long poll, they would be
    // known accepted (and counted done) only when it ends, and a stop that cuts it short would
    // send them again. An empty answer to such a claim is followed by a long poll at once.
    const wait = carried.length > 0 ? 0 : waitSeconds;
    let sentAt = 0;
    // `--once` waits for the server no longer than its claim would have waited for an item (5 s at least, for a restart).
    const giveUpAt = this.options.once ? this.startedAt + Math.max(5000, waitSeconds * 1000) : undefined;
    // A try never ends before its long poll would (a server holding the claim is not silent).
    const onceLeftMs = (): number => (giveUpAt === undefined ? Infinity : Math.max(wait * 1000 + 2000, giveUpAt - Date.now()));
    try {
      const res = await retrying(
        async () => {
          // A stopping worker claims nothing more: what it carries goes on its own (below).
          if (this.stopping) return 'stop' as const;
          const controller = new AbortController();
          sentAt = Date.now();
          this.claimsInFlight.set(controller, sentAt);
          const body = { worker, criteria, wait, ...(prefetching ? { max } : {}) };
          return this.client
            // A server that holds the request well past the long-poll is treated as gone (the
            // client's time limit counts from the end of the wait). The hand-ins' records go as
            // they are, as the result and error endpoints would take them. With --once, a silent
            // server is given up on when `--once` would give up (not 15 s past each try).
            .claim(queue, body, { signal: controller.signal, timeoutMs: Math.min((waitSeconds + 15) * 1000, onceLeftMs()) - wait * 1000, handIns: carried.map(rawHandIn) })
            .finally(() => this.claimsInFlight.delete(controller));
        },
        {
          retryable: (err) => !this.stopping && isTransient(err),
          onFailure: ({ error, attempt, delayMs }) => {
            this.failing();
            // A claim that may have applied what it carried (no answer, a 5xx other than svcq's own
            // 503, such as a proxy's 502, 504 or 503 after passing it on): errors are not sent again.
            if (!surelyNotApplied(error)) this.dropUnknownErrors(carried, error);
            this.sink.event({ event: 'retry', what: 'claim', attempt, delayMs, message: errorMessage(error) });
          },
          signal: this.claims.signal,
          giveUpAt,
        },
      );
      if (res === 'stop') {
        // Hand-ins a claim carried go on their own now, without claiming anything.
        await this.deliverCarried(carried);
        return 'stop';
      }
      this.answered();
      const answers = (res as { done?: DoneAnswer[] }).done ?? [];
      carried.forEach((h, n) => this.settleHandIn(h, answers[n]));
      const items: ClaimedItem[] = 'items' in res ? (res.items as ClaimedItem[]) : res.empty ? [] : [res];
      for (const item of items) item.clockOffsetMs = res.clockOffsetMs ?? 0;
      if (items.length > 0) this.leaseMs = leaseLeft(items[0]!);
      // An item that arrives after the first signal is run all the same: it is ours now.
      if (items.length === 0 && !this.stopping && (res.retryAfterMs ?? 0) > 0) return { retryAfterMs: res.retryAfterMs! };
      if (items.length === 0) return this.stopping ? 'stop' : wait < waitSeconds ? 'empty' : Date.now() - sentAt < waitSeconds * 500 || waitSeconds === 0 ? 'empty-early' : 'empty';
      // An item whose lease ran out while its result from a run here was still on its way (the
      // server was away longer than the lease) comes back to the first claim that gets through:
      // that result, when it arrives, finishes it, so it is not run again. An item that comes back
      // while an error of its last run here is on its way is run: that error re-queued it (handed
      // in with another slot's claim answered later), or re-queues or fails it when it arrives.
      const fresh = items.filter((item) => {
        if (!this.held.has(item.id)) return true;
        this.sink.event({ event: 'warning', id: item.id, message: 'claimed again while the outcome of its last run here is still being delivered; not run again' });
        return false;
      });
      return fresh.length > 0 ? fresh : 'empty-early';
    } catch (err) {
      if (!surelyNotApplied(err)) this.dropUnknownErrors(carried, err);
      // The claim did not go through: what it carried goes on its own.
      await this.deliverCarried(carried);
      if (this.stopping) return 'stop';
      // The server said something (a refusal): it answers again. Retries that gave up are no answer.
      if (err instanceof ClientError && err.status !== undefined) this.answered();
      // Refused for what it carried (too large, nested too deep): those went on their own just now; claiming goes on.
      if (carried.length > 0 && err instanceof ClientError && (err.status === 400 || err.status === 413)) {
        this.sink.event({ event: 'warning', message: `a claim carrying ${carried.length} hand-in(s) was refused (${errorMessage(err)}); they were submitted on their own` });
        return 'empty-early';
      }
      this.sink.event({ event: 'error', message: `cannot claim from ${queue}: ${errorMessage(err)}` });
      this.exitCode = EXIT.failed;
      this.fatal ??= err;
      this.stop();
      return 'stop';
    }
  }

  /**
   * The next item claimed ahead whose lease still has room to start it; one whose lease ran out
   * while it waited is left (the server hands it out again, maybe to another worker already).
   */
  private takeReady(): ClaimedItem | undefined {
    for (;;) {
      const next = this.ready.shift();
      if (!next) return undefined;
      if (leaseLeft(next) > 250) return next;
      this.sink.event({ event: 'warning', id: next.id, message: 'its lease ran out while it waited to start; not started (the server hands it out again)' });
    }
  }

  /**
   * Items claimed ahead that will not be started: released (decisions §8.2), so that the server
   * hands them out again at once, their attempt not counted; said once. One the server does not
   * release (it has no release, or cannot be reached) is handed out again when its lease ends.
   */
  private leaveReady(why: string): void {
    const left = this.ready.splice(0);
    if (left.length === 0) return;
    const release = (async () => {
      const answers = await Promise.all(left.map((item) => this.release(item.id)));
      const released = answers.filter((a) => a !== undefined).length;
      const kept = left.length - released;
      const parts = [released > 0 ? `${released} released` : '', kept > 0 ? `${kept} handed out again when their leases end` : ''].filter((p) => p !== '');
      this.sink.event({ event: 'warning', message: `${left.length} item(s) claimed ahead were not started (${why}); ${parts.join(', ')}` });
    })().finally(() => this.releases.delete(release));
    this.releases.add(release);
  }

  /** Hands an item back (decisions §8.2 release); its answer, or undefined when the server did not release it. */
  private async release(id: string, delaySeconds?: number): Promise<SubmissionAnswer | undefined> {
    try {
      const answer = await this.client.release(this.options.queue, id, { delay: delaySeconds, timeoutMs: SUBMIT_TIMEOUT_MS, signal: this.abandon.signal });
      this.answered();
      this.sink.event({ event: 'released', id, accepted: answer.accepted, status: answer.status });
      return answer;
    } catch (err) {
      this.sink.event({ event: 'warning', id, message: `not released: ${errorMessage(err)}` });
      return undefined;
    }
  }

  /** The hand-ins the next claim carries: at most HAND_INS_PER_CLAIM, and HAND_INS_MAX_BYTES of records. */
  private takeHandIns(): HandIn[] {
    let n = 0;
    let bytes = 0;
    while (n < this.handIns.length && n < HAND_INS_PER_CLAIM && (n === 0 || bytes + this.handIns[n]!.bytes <= HAND_INS_MAX_BYTES)) bytes += this.handIns[n++]!.bytes;
    return this.handIns.splice(0, n);
  }

  /**
   * A claim carrying `carried` went out and got no answer: the server may have applied them. The
   * errors among them are taken out (settled as not delivered, with why); the results stay, as a
   * result sent twice is answered `accepted: false` the second time.
   */
  private dropUnknownErrors(carried: HandIn[], err: unknown): void {
    for (let n = carried.length - 1; n >= 0; n--) {
      const h = carried[n]!;
      if (h.kind !== 'error') continue;
      carried.splice(n, 1);
      this.sink.event({ event: 'error', id: h.id, message: unknownErrorFate(err) });
      h.settle(undefined);
    }
  }

  /** Submits hand-ins on their own, each as its endpoint takes it. */
  private async deliverCarried(carried: HandIn[]): Promise<void> {
    await Promise.all(carried.splice(0).map(async (h) => h.settle(await this.deliver(h.kind, h.id, h.record, false, h))));
  }

  /** What the server said of a hand-in (decisions §3.8): an unknown item is reported as a delivery that failed. */
  private settleHandIn(h: HandIn, answer: DoneAnswer | undefined): void {
    if (answer?.ok) return h.settle({ ok: true, accepted: answer.accepted, status: answer.status });
    this.sink.event({ event: 'error', id: h.id, message: `${h.kind} not delivered: ${answer ? answer.error : 'the server did not answer for it'}` });
    h.settle(undefined);
  }

  /** Submits every waiting hand-in on its own (no claim is coming soon enough to carry it). */
  private async flushHandIns(): Promise<void> {
    const waiting = this.handIns.splice(0);
    await Promise.all(waiting.map(async (h) => h.settle(await this.deliver(h.kind, h.id, h.record, false, h))));
  }

  /**
   * Delivers a job's result or error, then `report`s what the server said. With hand-ins on, a
   * small record waits for the next claim to carry it (one request per job); otherwise, or for
   * `--once`, it is submitted now and awaited.
   */
  private async handInOrDeliver(kind: 'result' | 'error', id: string, record: string, reported: (answer: Delivered | undefined) => void, wish: RetryWish = {}): Promise<void> {
    const holds = kind === 'result';
    if (holds) this.held.set(id, (this.held.get(id) ?? 0) + 1);
    const report = (answer: Delivered | undefined): void => {
      if (holds) {
        const n = this.held.get(id)! - 1;
        if (n > 0) this.held.set(id, n);
        else this.held.delete(id);
      }
      reported(answer);
    };
    const bytes = Buffer.byteLength(record);
    if (!this.options.once && !this.stopping && this.options.handIns !== false && bytes <= HAND_IN_MAX_BYTES && !nestedDeeperThan(record, HAND_IN_MAX_DEPTH)) {
      this.handIns.push({ id, kind, record, bytes, queuedAt: Date.now(), settle: report, ...wishOf(wish) });
      return;
    }
    report(kind === 'result' ? await this.deliverResult(id, record) : await this.deliver('error', id, record, false, wish));
  }

  /** Runs one claimed item and delivers what came of it; true when it succeeded. */
  private async handle(claimed: ClaimedItem): Promise<boolean> {
    const { id, attempts } = claimed;
    const state: Running = { id, attempts, dirty: false };
    const claim = ++this.claimsMade;
    this.running.set(claim, state);
    this.sink.running(this.runningIds());
    this.sink.event({ event: 'claimed', id, attempts });
    const started = Date.now();

    // An accepted progress extends the lease (decisions §3.2): beat three times per lease, and at
    // least every 10 s, since the answer to a beat is also how a cancel reaches a running job.
    // The lease is judged on the server's clock; an item claimed ahead may have waited for half
    // of its lease already, so it beats at once.
    const leaseMs = this.leaseMs > 0 ? this.leaseMs : leaseLeft(claimed);
    const every = leaseMs > 0 ? Math.min(MAX_HEARTBEAT_MS, Math.max(100, Math.floor(leaseMs / 3))) : FALLBACK_HEARTBEAT_MS;
    if (leaseLeft(claimed) < leaseMs / 2) state.dirty = true;
    const heartbeat = setInterval(() => {
      state.dirty = true;
      void this.pumpProgress(state);
    }, every);

    if (state.dirty) void this.pumpProgress(state);
    let outcome: RunOutcome;
    try {
      const execution = this.options.runner.start(claimed, {
        progress: (record) => {
          state.latest = record;
          state.dirty = true;
          void this.pumpProgress(state);
        },
        stderrLine: (line) => this.sink.stderrLine(id, line),
        warning: (message) => this.sink.event({ event: 'warning', id, message }),
      });
      state.job = execution;
      if (this.forcing || state.terminal) execution.terminate();
      outcome = await execution.done;
    } finally {
      clearInterval(heartbeat);
    }
    // Progress first: once the result is in, the item is terminal and a late progress is discarded.
    // A pending bare heartbeat is dropped, the last progress line is not.
    await state.sending;
    state.dirty = state.latest !== undefined && state.latest !== state.posted;
    await this.pumpProgress(state);
    const ms = Date.now() - started;

    this.jobMs = this.jobMs === 0 ? ms : 0.8 * this.jobMs + 0.2 * ms;
    let ok = false;
    if (state.terminal) {
      this.ended({ event: 'cancelled', id, status: state.terminal });
    } else if (outcome.kind === 'release') {
      await this.release(id, outcome.delaySeconds);
    } else if (outcome.kind === 'result') {
      await this.handInOrDeliver('result', id, outcome.record, (answer) => {
        // The result was refused (too large, say) and an error went in its place: the item failed this attempt.
        if (answer?.asError) this.ended({ event: 'failed', id, attempts, ms, exitCode: 0, signal: null, timedOut: false, accepted: answer.accepted, status: answer.status });
        else if (answer) {
          ok = true;
          this.ended({ event: 'finished', id, attempts, ms, accepted: answer.accepted, status: answer.status });
        } else this.failed++;
      });
    } else {
      const failure = { exitCode: outcome.exitCode ?? null, signal: outcome.signal ?? null, timedOut: outcome.timedOut ?? false };
      await this.handInOrDeliver(
        'error',
        id,
        outcome.record,
        (answer) => {
          if (answer) this.ended({ event: 'failed', id, attempts, ms, ...failure, accepted: answer.accepted, status: answer.status });
          else this.failed++;
        },
        outcome,
      );
    }
    this.running.delete(claim);
    this.sink.running(this.runningIds());
    return ok;
  }

  /** Reports how an item ended and counts it, as the sink counts it for its status line. */
  private ended(e: WorkerEvent): void {
    const count = tally(e);
    if (count) this[count]++;
    this.sink.event(e);
  }

  private runningIds(): string[] {
    return [...this.running.values()].map((r) => r.id);
  }

  /** Posts the latest progress (or `{}` as a bare heartbeat), one post at a time. */
  private pumpProgress(state: Running): Promise<void> {
    if (state.sending) return state.sending;
    state.sending = (async () => {
      while (state.dirty && !state.terminal) {
        state.dirty = false;
        const record = state.latest ?? '{}';
        state.posted = record;
        try {
          const answer = await this.client.submit(this.options.queue, state.id, 'progress', record, { timeoutMs: SUBMIT_TIMEOUT_MS, signal: this.abandon.signal });
          this.answered();
          if (!answer.accepted) this.itemEnded(state, answer.status);
        } catch (err) {
          // Abandoned by the third signal: nothing more is sent.
          if (abandoned(err)) return;
          // Not retried here: the next heartbeat is the retry.
          if (isTransient(err)) {
            this.failing();
            this.sink.event({ event: 'retry', what: 'progress', id: state.id, attempt: 1, delayMs: 0, message: errorMessage(err) });
            continue;
          }
          this.answered();
          if (err instanceof ClientError && err.code === 'no-such-item') this.itemEnded(state, 'gone');
          else {
            this.sink.event({ event: 'error', id: state.id, message: `progress not accepted: ${errorMessage(err)}` });
            // A record the server refuses (too large, say) would be refused on every beat, and the
            // lease would run out under a running CMD: beat with {} from now on.
            if (state.latest === record) state.latest = undefined;
          }
        }
      }
    })().finally(() => {
      state.sending = undefined;
    });
    return state.sending;
  }

  /** The item is terminal on the server (e.g. cancelled, decisions §3.6): CMD's work is moot. */
  private itemEnded(state: Running, status: string): void {
    state.terminal = status;
    state.job?.terminate();
  }

  /** Delivers a result; a result the server rejects (too large, say) becomes an error record instead (its answer marked `asError`). */
  private async deliverResult(id: string, record: string): Promise<Delivered | undefined> {
    try {
      return await this.deliver('result', id, record, true);
    } catch (err) {
      this.sink.event({ event: 'error', id, message: `result rejected (${errorMessage(err)}); reporting an error instead` });
      const answer = await this.deliver('error', id, this.options.runner.refusedResult(`result rejected: ${errorMessage(err)}`));
      return answer && { ...answer, asError: true };
    }
  }

  /**
   * Submits until the server answers. While a delivery is being retried nothing new is claimed,
   * so a worker cut off from its server does not pile up results it cannot hand in.
   */
  private async deliver(kind: 'result' | 'error', id: string, record: string, rethrowRejection = false, wish: RetryWish = {}): Promise<SubmissionAnswer | undefined> {
    let retried = false;
    try {
      const answer = await retrying(() => this.client.submit(this.options.queue, id, kind, record, { timeoutMs: SUBMIT_TIMEOUT_MS, signal: this.abandon.signal, ...(kind === 'error' ? wishOf(wish) : {}) }), {
        // A result may be sent again (one applied already is answered accepted: false). An error
        // that went out and got no answer is not: applied twice, it would use up another attempt,
        // or fail the next worker's (decisions §3.2).
        retryable: (err) => isTransient(err) && (kind === 'result' || surelyNotApplied(err)),
        onFailure: ({ error, attempt, delayMs }) => {
          if (!retried) {
            retried = true;
            this.undelivered++;
          }
          this.failing();
          this.sink.event({ event: 'retry', what: kind, id, attempt, delayMs, message: errorMessage(error) });
        },
        // The third signal aborts it: a delivery still failing then is given up.
        signal: this.abandon.signal,
      });
      this.answered();
      return answer;
    } catch (err) {
      // No answer: the server may not have been reached, or the third signal abandoned the call.
      const unanswered = isTransient(err) || abandoned(err);
      if (kind === 'error' && unanswered && !surelyNotApplied(err)) {
        this.sink.event({ event: 'error', id, message: unknownErrorFate(err) });
        return undefined;
      }
      // A failure worth retrying comes out of `retrying` only once the third signal aborted it.
      if (unanswered) {
        this.sink.event({ event: 'error', id, message: `${kind} not delivered (gave up on signal): ${errorMessage(err)}` });
        // A result or error dropped: the exit code says so.
        this.exitCode = EXIT.failed;
        return undefined;
      }
      this.answered();
      if (rethrowRejection && err instanceof ClientError && err.status !== 404) throw err;
      this.sink.event({ event: 'error', id, message: `${kind} not delivered: ${errorMessage(err)}` });
      return undefined;
    } finally {
      if (retried) {
        this.undelivered--;
        if (this.undelivered === 0) this.openGate();
      }
    }
  }

  /** A call to the server failed in a way worth retrying. */
  private failing(): void {
    this.connection.failed();
  }

  /** The server answered a call (whatever it said): if calls had been failing, say it is back. */
  private answered(): void {
    const afterMs = this.connection.answered();
    if (afterMs !== undefined) this.sink.event({ event: 'reconnected', afterMs });
  }

  private deliveriesSettled(): Promise<void> {
    if (this.undelivered === 0 || this.stopping) return Promise.resolve();
    return new Promise((resolve) => this.gateWaiters.push(resolve));
  }

  private openGate(): void {
    const waiters = this.gateWaiters;
    this.gateWaiters = [];
    for (const w of waiters) w();
  }
}

/** Only the wish's own fields, and only those set: what goes with an error (decisions §8.2). */
function wishOf(wish: RetryWish): RetryWish {
  return { ...(wish.retryIn !== undefined ? { retryIn: wish.retryIn } : {}), ...(wish.final ? { final: true } : {}) };
}

/** A hand-in as the claim carries it: its record as it is, and the wish of an error. */
function rawHandIn(h: HandIn): RawHandIn {
  return { id: h.id, kind: h.kind, record: h.record, ...(h.kind === 'error' ? wishOf(h) : {}) };
}

/** A call this worker abandoned itself (its signal), with no answer from the server. */
function abandoned(err: unknown): boolean {
  return err instanceof ClientError && err.code === 'aborted';
}

/** How long an item's lease has left, on the server's clock as its claim's answer gave it. */
function leaseLeft(item: ClaimedItem): number {
  return item.lease.until - (Date.now() + (item.clockOffsetMs ?? 0));
}

function unknownErrorFate(err: unknown): string {
  const why = err instanceof ClientError && err.status !== undefined ? `it went out and the answer (HTTP ${err.status}, not svcq's own) does not say whether it was applied` : 'it went out and no answer came back';
  return `error record not sent again (${errorMessage(err)}): ${why}, and applied twice it would use up another attempt; if it was not applied, the item comes back when its lease ends`;
}
