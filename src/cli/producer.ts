import { randomBytes } from 'node:crypto';
import type { PostOptions, SvcqClient } from '../client/client.js';
import type { PostAnswer, StatusAnswer } from '../protocol.js';
import { ClientError } from '../client/client.js';
import { FailureReport, isTransient, retrying, sleep, surelyNotApplied, svcqAnswered } from '../client/backoff.js';
import { UserError } from './base-command.js';

/** An item's options (decisions §8.1, §9.2): delay or time, priority, group, callback; every item of a run gets the same. */
export type ItemOptions = Pick<PostOptions, 'delay' | 'at' | 'priority' | 'group' | 'callback'>;

/** One item to post: its JSON text and where it came from, for messages. */
export interface ItemInput {
  json: string;
  /** "the item argument", or "line 3 of stdin" */
  source: string;
  /** Its line number in JSON lines (blank lines counted): the N of its idempotency key `K:N`. */
  line?: number;
}

/** Parses the JSON argument of `svcq post`: one JSON object, or a sentence saying what is wrong (exit 2). */
export function parseItemArgument(text: string): ItemInput {
  checkObject(text, 'the item argument');
  return { json: text, source: 'the item argument' };
}

/**
 * Parses what `svcq post` read from stdin: one JSON object (pretty-printed or not), or JSON lines,
 * one object per line (blank lines skipped). Nothing is posted unless every line parses.
 */
export function parseItemsFromStdin(text: string): ItemInput[] {
  if (text.trim() === '') throw new UserError('stdin is empty: expected a JSON object or JSON lines');
  try {
    const whole: unknown = JSON.parse(text);
    if (isObject(whole)) return [{ json: text.trim(), source: 'stdin' }];
  } catch {
    // not one value: read it as JSON lines below
  }
  const items: ItemInput[] = [];
  const lines = text.split('\n');
  for (let i = 0; i < lines.length; i++) {
    const line = lines[i]!.trim();
    if (line === '') continue;
    const source = `line ${i + 1} of stdin`;
    checkObject(line, source);
    items.push({ json: line, source, line: i + 1 });
  }
  return items;
}

function checkObject(text: string, source: string): void {
  let value: unknown;
  try {
    value = JSON.parse(text);
  } catch (err) {
    throw new UserError(`${source} is not valid JSON: ${(err as Error).message}`);
  }
  if (!isObject(value)) throw new UserError(`${source} must be a JSON object, not ${describe(value)}`);
}

function isObject(value: unknown): value is Record<string, unknown> {
  return typeof value === 'object' && value !== null && !Array.isArray(value);
}

function describe(value: unknown): string {
  if (value === null) return 'null';
  if (Array.isArray(value)) return 'an array';
  return `a ${typeof value}`;
}

/**
 * What became of one item: posted, refused by the server (`error`), not posted (`notPosted`: the
 * server could not be reached, say), or unknown (`unsure`: it went out and no answer came back).
 */
export type PostOutcome = { input: ItemInput; result: PostAnswer } | { input: ItemInput; error: string; notPosted?: true; unsure?: true };

/**
 * Posts many items, `parallel` at a time, and returns the outcomes in input order. A rejected
 * item does not stop the others; a server that cannot be reached is retried a few times first.
 */
export async function postMany(
  client: SvcqClient,
  queue: string,
  items: ItemInput[],
  options: { parallel?: number; idempotencyKey?: string; onDone?: (count: number) => void; signal?: AbortSignal; item?: ItemOptions } = {},
): Promise<PostOutcome[]> {
  const outcomes: PostOutcome[] = new Array(items.length);
  let next = 0;
  let count = 0;
  let stopped: string | undefined;
  const lane = async (): Promise<void> => {
    while (next < items.length && stopped === undefined && !options.signal?.aborted) {
      const index = next++;
      const input = items[index]!;
      // One key per item: the same key on every line would collapse them into the first.
      const key = options.idempotencyKey === undefined ? undefined : items.length === 1 ? options.idempotencyKey : `${options.idempotencyKey}:${input.line ?? index + 1}`;
      // A try that went out and got no answer may have created the item, whatever the tries after it say.
      let unsure = false;
      try {
        outcomes[index] = { input, result: await postWithRetry(client, queue, input.json, key, { signal: options.signal, item: options.item, onFailure: (error) => (unsure ||= !surelyNotApplied(error)) }) };
      } catch (err) {
        const message = err instanceof Error ? err.message : String(err);
        // Wrong address, token or queue, no server at all, or one that still fails after the retries
        // (a 503: it cannot save): every other item would fail the same way. The posts under way
        // finish; the rest are not sent.
        if (err instanceof ClientError && (err.code === 'wall' || err.code === 'aborted' || isTransient(err))) {
          // After a signal, the lines not sent were left for it, whatever the last try met.
          stopped ??= options.signal?.aborted ? INTERRUPTED : message;
          outcomes[index] = surelyNotApplied(err) && !unsure ? { input, error: message, notPosted: true } : { input, error: message, unsure: true };
        } else outcomes[index] = { input, error: message };
      }
      options.onDone?.(++count);
    }
  };
  await Promise.all(Array.from({ length: Math.min(options.parallel ?? 8, items.length) }, lane));
  for (let n = 0; n < items.length; n++) outcomes[n] ??= { input: items[n]!, error: stopped ?? INTERRUPTED, notPosted: true };
  return outcomes;
}

/** Items per batch post, and the most bytes of items one batch carries (the server takes 1,000 and 16 MiB: decisions §3.8). */
const BATCH_ITEMS = 1000;
const BATCH_BYTES = 8 * 1024 * 1024;

/** Tries of one batch at most, with backoff between them (about 12 s in all). */
const BATCH_TRIES = 8;

/**
 * Posts many items in batches (decisions §3.8: up to 1,000 items per request, one durable write
 * each), two batches at a time, and returns the outcomes in input order. A rejected item does not
 * stop the others. Each batch carries an idempotency key of its own, so a batch whose answer was
 * lost (a connection reset, a server restarting, a 503) is sent again safely: the server answers
 * the items it already created instead of creating them twice. A batch that still fails stops the
 * ones not yet sent; those in flight finish, and every item not posted has an outcome saying why.
 */
export async function postBatches(client: SvcqClient, queue: string, items: ItemInput[], options: { parallel?: number; onDone?: (count: number) => void; signal?: AbortSignal; item?: ItemOptions } = {}): Promise<PostOutcome[]> {
  const batches: Array<{ from: number; to: number }> = [];
  for (let from = 0; from < items.length; ) {
    let to = from;
    let bytes = 0;
    // Counted in bytes, as the server counts its 16 MiB.
    const size = (n: number): number => Buffer.byteLength(items[n]!.json) + 1;
    while (to < items.length && to - from < BATCH_ITEMS && (to === from || bytes + size(to) <= BATCH_BYTES)) bytes += size(to++);
    batches.push({ from, to });
    from = to;
  }
  const run = randomBytes(8).toString('hex');
  const outcomes: PostOutcome[] = new Array(items.length);
  let next = 0;
  let count = 0;
  let stopped: string | undefined;
  const lane = async (): Promise<void> => {
    while (next < batches.length && stopped === undefined && !options.signal?.aborted) {
      const b = next++;
      const { from, to } = batches[b]!;
      const slice = items.slice(from, to);
      let answer;
      // A try that went out and got no answer may have created the batch: the outcome says so.
      let unsure = false;
      try {
        answer = await retrying(() => client.postBatch(queue, slice.map((i) => i.json), `svcq-post-${run}-${b}`, { ...options.item }), {
          retryable: (err, attempt) => isTransient(err) && attempt < BATCH_TRIES - 1,
          onFailure: ({ error }) => (unsure ||= !surelyNotApplied(error)),
          signal: options.signal,
        });
      } catch (err) {
        // Wrong address, token or queue, or a server that stays away: the batches after it would fail the same way.
        const message = err instanceof Error ? err.message : String(err);
        // After a signal, the batches not sent were left for it, whatever this one met.
        stopped = options.signal?.aborted ? INTERRUPTED : message;
        unsure ||= !surelyNotApplied(err);
        for (let n = from; n < to; n++) outcomes[n] = unsure ? { input: items[n]!, error: message, unsure: true } : { input: items[n]!, error: message, notPosted: true };
        break;
      }
      answer.items.forEach((entry, n) => {
        const input = slice[n]!;
        outcomes[from + n] = entry.ok ? { input, result: { ok: true, id: entry.id, status: entry.status } } : { input, error: entry.errors.map((e) => (e.path ? `${e.path}: ${e.message}` : e.message)).join('; ') };
      });
      count += slice.length;
      options.onDone?.(count);
    }
  };
  await Promise.all(Array.from({ length: Math.min(options.parallel ?? 2, batches.length) }, lane));
  for (let n = 0; n < items.length; n++) outcomes[n] ??= { input: items[n]!, error: stopped ?? INTERRUPTED, notPosted: true };
  return outcomes;
}

/**
 * Whether a failed post may have created its item: it went out whole, and either no answer came
 * back or the answer was a 5xx that does not say nothing was changed (a proxy's 502, 503 or 504
 * after passing the post on, a server error after the write).
 */
export function mayHavePosted(err: unknown): err is ClientError {
  return err instanceof ClientError && err.sent && !surelyNotApplied(err) && (err.status === undefined || err.status >= 500);
}

/**
 * The sentence for a single post that {@link mayHavePosted}: what happened, that the item may
 * exist, and how to go on safely: with its key, the same post again (it creates the item at most
 * once and prints its id); without one, not blindly again.
 */
export function mayHavePostedSentence(err: ClientError, key: string | undefined): string {
  const status = err.status;
  const what = status === undefined ? err.message : err.message.includes(String(status)) ? err.message : `the server answered HTTP ${status} (${err.message})`;
  const why =
    status === undefined
      ? 'the post went out but no answer came back'
      : svcqAnswered(err.body)
        ? 'the server failed after the post reached it'
        : 'that answer may come from a proxy in front of the server (a gateway or load balancer), after it passed the post on';
  const next =
    key === undefined
      ? 'posting it again could post it twice: the queue\'s operator can look first (svcq tasks show lists each item posted), and a post with --idempotency-key can be repeated safely'
      : `run the same command again with --idempotency-key ${JSON.stringify(key)}: it posts the item at most once, and prints its id`;
  return `${what}; ${why}, so the item may have been posted: ${next}`;
}

/**
 * One post, retried a few times while the server cannot be reached or answers 503 (which changed
 * nothing: decisions §6). Without a key a post is sent again only when it surely was not acted on
 * ({@link surelyNotApplied}): it never went out whole, or svcq refused it with 503, or it met a
 * 429. One that went out and got no answer, or an answer a proxy may have given after passing it
 * on (a 502, 504, a 503 of its own), may have been created, and a retry could create it twice.
 */
export function postWithRetry(client: SvcqClient, queue: string, json: string, key: string | undefined, options: { signal?: AbortSignal; onFailure?: (error: unknown) => void; item?: ItemOptions } = {}): Promise<PostAnswer> {
  return retrying(() => client.post(queue, json, key, { ...options.item }), {
    retryable: (err, attempt) => isTransient(err) && attempt < 4 && (key !== undefined || surelyNotApplied(err)),
    onFailure: ({ error }) => options.onFailure?.(error),
    signal: options.signal,
  });
}

/** Why the items not yet sent when a signal (Ctrl-C) stopped a run were not posted. */
export const INTERRUPTED = 'stopped by a signal before they were sent';

/** Statuses after which an item changes no more (decisions §3.1). */
export const TERMINAL_STATUSES = new Set(['finished', 'failed', 'timedout', 'cancelled']);

/** The longest long poll of `item --wait` (the most the server holds one, decisions §3.6). */
const MAX_WAIT_SECONDS = 30;
/** How long past its wait a try waits for an answer before it counts as failed. */
const ITEM_WAIT_PATIENCE_MS = 30_000;

export interface WaitOptions {
  /** Give up once requests have failed this long in a row (ms); 0 gives up at the first failure. */
  giveUpMs: number;
  /** Where to say what is failing: on the first failure, then now and then, and when it works again. */
  report?: (line: string) => void;
  /** Least time between two reports of the same run of failures (default 10 s). */
  reportEveryMs?: number;
}

/**
 * Long-polls an item until it is terminal (decisions §3.6), riding out a server restart. A server
 * that cannot be reached (or answers 5xx) is retried with backoff, saying so on the first failure
 * and at most every `reportEveryMs` after; after `giveUpMs` of failures in a row it gives up with
 * one sentence. Waiting on an item that takes long is not a failure and has no limit.
 */
export async function waitForItem(client: SvcqClient, queue: string, id: string, options: WaitOptions): Promise<StatusAnswer> {
  const report = new FailureReport(options.reportEveryMs);
  const waitSeconds = Math.min(MAX_WAIT_SECONDS, Math.max(1, Math.ceil(options.giveUpMs / 1000)));
  for (;;) {
    let asked = 0;
    let failingSince: number | undefined;
    const record = await retrying(
      () => {
        asked = Date.now();
        // A server that takes the request and never answers is a failure too, found out only
        // once the long poll is over: so a poll holds no longer than --give-up (from 1 to 30 s),
        // and the answer is awaited past it no longer than what is left of --give-up (at least
        // a second), so that the verdict comes about when it is due.
        const leftMs = options.giveUpMs - (failingSince === undefined ? 0 : asked - failingSince);
        return client.item(queue, id, waitSeconds, { timeoutMs: Math.min(ITEM_WAIT_PATIENCE_MS, Math.max(1000, leftMs)) });
      },
      {
        report,
        giveUpAfterMs: options.giveUpMs,
        // No answer at all has been failing since the request went out; a reset or an error
        // answer that ends a held poll (a restart, a 503) fails when it comes.
        failedSince: (tryStartedAt, failedAt, err) => (failingSince = err instanceof ClientError && err.code === 'timeout' ? tryStartedAt : failedAt),
        gaveUp: (err, failingForMs) => new ClientError(`gave up waiting for item ${id} after ${Math.round(failingForMs / 1000)} s of failures: ${(err as Error).message}`, 'gave-up'),
        onFailure: (f) => {
          const reason = (f.error as Error).message;
          if (f.report === 'first') options.report?.(`${reason}; retrying`);
          else if (f.report === 'again') options.report?.(`${reason}; still retrying after ${Math.round(f.failingForMs / 1000)} s, giving up after ${Math.round(options.giveUpMs / 1000)} s`);
        },
        onRecovered: () => {
          failingSince = undefined;
          options.report?.('the server answers again; waiting');
        },
      },
    );
    if (TERMINAL_STATUSES.has(record.status)) return record;
    // A long poll answered at once (a server shutting down does that) is asked again after a pause, not in a tight loop.
    if (Date.now() - asked < 1000) await sleep(1000);
  }
}
