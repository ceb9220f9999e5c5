import { Args, Flags } from '@oclif/core';
import cliProgress from 'cli-progress';
import { BaseCommand, UserError, hostFlag } from '../src/cli/base-command.js';
import { mayHavePosted, mayHavePostedSentence, parseItemArgument, parseItemsFromStdin, postBatches, postMany, postWithRetry, type ItemInput, type ItemOptions } from '../src/cli/producer.js';
import type { PostAnswer } from '../src/protocol.js';
import type { ClientError } from '../src/client/client.js';
import { urlProblem } from '../src/engine/urls.js';

export default class Post extends BaseCommand<typeof Post> {
  static override summary = 'Post an item to a queue and print its id and status.';
  static override description = `The item is a JSON object given as the argument, or read from stdin ("-", or no argument with piped input).
Stdin may hold one object or JSON lines (one object per line): each line is posted as an item, and nothing is posted unless every line parses. JSON lines go in batches of up to 1,000 items per request; a batch whose answer was lost is sent again without creating its items twice.
With --idempotency-key a repeated post returns the first item instead of creating another; with JSON lines of two or more items, line N uses KEY:N (those lines are posted one request each, so that the keys stay KEY:N), and a single object uses KEY itself.
Without a key, a single post whose answer was lost is not sent again (it may have been created); with one, it is. A post answered 502, 503 or 504 by a proxy in front of the server (which may have passed it on) is treated the same way; either way the command then says that the item may have been posted, and how to go on safely.
If the server cannot be reached partway through, the items already posted are printed, the rest are reported as not posted, and the exit code is 1.
Ctrl-C (or SIGTERM) partway through sends nothing more: the requests under way finish, and the outcome is reported the same way (a second Ctrl-C ends it at once).
--delay or --at, --priority, --group and --callback apply to every item posted (see docs/scheduling.md and docs/push.md): a delayed item is pending and not claimable before its time; a claim takes the highest priority first.`;
  static override examples = [
    `<%= config.bin %> post public-echo '{"text":"hello"}' --host jobs.example.com`,
    `<%= config.bin %> post thumbnails - --host jobs.example.com --token $ALICE_TOKEN < items.jsonl`,
    `<%= config.bin %> post reminders '{"to":"ann"}' --delay 3600 --priority 5 --host jobs.example.com`,
  ];

  static override args = {
    queue: Args.string({ description: 'queue name', required: true, ignoreStdin: true }),
    item: Args.string({ description: 'the item as a JSON object, or "-" to read stdin', ignoreStdin: true }),
  };

  static override flags = {
    host: hostFlag,
    'idempotency-key': Flags.string({ description: 'post at most once for this key (1-200 printable characters)' }),
    delay: Flags.integer({ description: 'not claimable for this many seconds (0-31536000)', min: 0, max: 31_536_000, exclusive: ['at'] }),
    at: Flags.string({ description: 'not claimable before this time: ms since the Unix epoch, or an ISO 8601 time with its zone', exclusive: ['delay'] }),
    priority: Flags.integer({ description: 'a claim takes the highest priority first (-100 to 100, default 0)', min: -100, max: 100 }),
    group: Flags.string({ description: "the item's group (1-128 printable ASCII characters)" }),
    callback: Flags.string({ description: "a URL the server POSTs the item's status record to when it ends (see docs/push.md; the server must allow it with --push-allow)" }),
  };

  async run(): Promise<PostAnswer | undefined> {
    const { args } = await this.parse(Post);
    const key = this.flags['idempotency-key'];
    if (key !== undefined && !/^[\x20-\x7e]{1,200}$/.test(key)) throw new UserError('--idempotency-key must be 1 to 200 printable ASCII characters');
    const item = itemOptions(this.flags);
    const items = await readItems(args.item);
    if (key !== undefined && items.length > 1) {
      const longest = `${key}:${Math.max(...items.map((i, n) => i.line ?? n + 1))}`;
      if (longest.length > 200) throw new UserError(`--idempotency-key is too long for ${items.length} lines: "${longest.slice(0, 40)}…" (KEY:N) would pass the 200 characters a key may have`);
    }
    const client = this.client({ host: this.flags.host });
    const json = this.jsonEnabled();

    if (items.length === 1) {
      let result;
      // A try that may have posted the item leaves it so, whatever the tries after it meet (a server gone).
      let doubt: ClientError | undefined;
      try {
        result = await postWithRetry(client, args.queue, items[0]!.json, key, { item, onFailure: (error) => (doubt ??= mayHavePosted(error) ? error : undefined) });
      } catch (err) {
        const about = mayHavePosted(err) ? err : doubt;
        if (about) throw new UserError(mayHavePostedSentence(about, key), 1);
        throw err;
      }
      this.log(`${result.id} ${result.status}`);
      return result;
    }

    const bar =
      items.length > 1 && process.stderr.isTTY
        ? new cliProgress.SingleBar({ format: 'posting [{bar}] {value}/{total}', stream: process.stderr, hideCursor: true }, cliProgress.Presets.shades_classic)
        : undefined;
    bar?.start(items.length, 0);
    // Ctrl-C (or SIGTERM) sends nothing more: the requests under way finish, and what was posted is
    // printed as usual, the rest reported as not posted. A second signal ends the process at once.
    const interrupt = new AbortController();
    const onSignal = (): void => interrupt.abort();
    process.once('SIGINT', onSignal);
    process.once('SIGTERM', onSignal);
    let outcomes;
    try {
      outcomes =
        key === undefined
          ? await postBatches(client, args.queue, items, { item, onDone: (n) => bar?.update(n), signal: interrupt.signal })
          : await postMany(client, args.queue, items, { item, idempotencyKey: key, onDone: (n) => bar?.update(n), signal: interrupt.signal });
    } finally {
      process.off('SIGINT', onSignal);
      process.off('SIGTERM', onSignal);
      bar?.stop();
    }

    let rejected = 0;
    const notPosted: ItemInput[] = [];
    const unsure: ItemInput[] = [];
    // Why each kind was not posted: the last of its outcomes says (the lines not sent after a Ctrl-C, say, differ from those under way).
    const why = { unsure: '', notPosted: '' };
    for (const outcome of outcomes) {
      if ('result' in outcome) {
        if (json) process.stdout.write(`${JSON.stringify(outcome.result)}\n`);
        else this.log(`${outcome.result.id} ${outcome.result.status}`);
      } else {
        rejected++;
        if (json) process.stdout.write(`${JSON.stringify({ ok: false, source: outcome.input.source, error: outcome.error, ...(outcome.notPosted ? { posted: false } : {}), ...(outcome.unsure ? { posted: 'unknown' } : {}) })}\n`);
        if (outcome.notPosted || outcome.unsure) {
          (outcome.notPosted ? notPosted : unsure).push(outcome.input);
          why[outcome.notPosted ? 'notPosted' : 'unsure'] = outcome.error;
        } else if (!json) process.stderr.write(`svcq: ${outcome.input.source}: ${outcome.error}\n`);
      }
    }
    // Items never sent (the server went away), or whose answer was lost, are summed up in a line each, not one per item
    // (with --json, stdout has a line for each, and stderr only the verdict, in JSON).
    const span = (inputs: ItemInput[]): string => (inputs.length === 1 ? inputs[0]!.source : `${inputs[0]!.source} to ${inputs[inputs.length - 1]!.source}`);
    if (unsure.length > 0 && !json) process.stderr.write(`svcq: ${unsure.length} item(s) may or may not have been posted (${span(unsure)}): they went out, and no answer said what became of them: ${why.unsure}\n`);
    if (notPosted.length > 0 && !json) process.stderr.write(`svcq: ${notPosted.length} item(s) not posted (${span(notPosted)}): ${why.notPosted}\n`);
    if (rejected > 0) {
      // The outcome lines may still be on their way down a pipe: the exit that follows must not cut them (or the summary) off.
      await new Promise<void>((resolve) => process.stdout.write('', () => resolve()));
      // Items that may have been posted are not counted as not posted: a re-run without a key could post them twice.
      const surelyNot = rejected - unsure.length;
      const verdict = unsure.length === 0 ? `${rejected} of ${items.length} item(s) were not posted` : surelyNot === 0 ? `${unsure.length} of ${items.length} item(s) may not have been posted` : `${surelyNot} of ${items.length} item(s) were not posted, and ${unsure.length} may not have been`;
      throw new UserError(verdict, 1);
    }
    return undefined;
  }
}

/** The item options of the flags (decisions §8.1), checked as the server checks them. */
function itemOptions(flags: { delay?: number; at?: string; priority?: number; group?: string; callback?: string }): ItemOptions {
  const out: ItemOptions = {};
  if (flags.callback !== undefined) {
    const problem = urlProblem(flags.callback);
    if (problem !== null) throw new UserError(`--callback ${problem}, not "${flags.callback}"`);
    out.callback = flags.callback;
  }
  if (flags.delay !== undefined) out.delay = flags.delay;
  if (flags.priority !== undefined) out.priority = flags.priority;
  if (flags.group !== undefined) {
    if (!/^[\x20-\x7e]{1,128}$/.test(flags.group)) throw new UserError('--group must be 1 to 128 printable ASCII characters');
    out.group = flags.group;
  }
  if (flags.at !== undefined) {
    const at = /^[0-9]+$/.test(flags.at) ? Number(flags.at) : /^\d{4}-\d\d-\d\dT.*(Z|[+-]\d\d:?\d\d)$/i.test(flags.at) ? Date.parse(flags.at) : NaN;
    if (!Number.isSafeInteger(at)) throw new UserError(`--at must be a time in ms since the Unix epoch, or an ISO 8601 time with its zone (2026-01-31T09:00:00Z), not "${flags.at}"`);
    out.at = at;
  }
  return out;
}

async function readItems(arg: string | undefined): Promise<ItemInput[]> {
  if (arg !== undefined && arg !== '-') return [parseItemArgument(arg)];
  if (arg === undefined && process.stdin.isTTY) throw new UserError('give the item as a JSON argument, or pipe JSON (one object or JSON lines) to stdin');
  const chunks: Buffer[] = [];
  for await (const chunk of process.stdin) chunks.push(chunk as Buffer);
  return parseItemsFromStdin(Buffer.concat(chunks).toString('utf8'));
}
