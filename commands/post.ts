import { Args, Flags } from '@oclif/core';
import cliProgress from 'cli-progress';
import { BaseCommand, UserError, hostFlag } from '../src/cli/base-command.js';
import { parseItemArgument, parseItemsFromStdin, postBatches, postMany, type ItemInput } from '../src/cli/producer.js';
import type { PostAnswer } from '../src/protocol.js';

export default class Post extends BaseCommand<typeof Post> {
  static override summary = 'Post an item to a queue and print its id and status.';
  static override description = `The item is a JSON object given as the argument, or read from stdin ("-", or no argument with piped input).
Stdin may hold one object or JSON lines (one object per line): each line is posted as an item, and nothing is posted unless every line parses. JSON lines go in batches of up to 1,000 items per request.
With --idempotency-key a repeated post returns the first item instead of creating another; with JSON lines, line N uses KEY:N (those lines are posted one request each, so that the keys stay KEY:N).`;
  static override examples = [
    `<%= config.bin %> post public-echo '{"text":"hello"}' --host jobs.example.com`,
    `<%= config.bin %> post thumbnails - --host jobs.example.com --token $ALICE_TOKEN < items.jsonl`,
  ];

  static override args = {
    queue: Args.string({ description: 'queue name', required: true, ignoreStdin: true }),
    item: Args.string({ description: 'the item as a JSON object, or "-" to read stdin', ignoreStdin: true }),
  };

  static override flags = {
    host: hostFlag,
    'idempotency-key': Flags.string({ description: 'post at most once for this key (1-200 printable characters)' }),
  };

  async run(): Promise<PostAnswer | undefined> {
    const { args } = await this.parse(Post);
    const items = await readItems(args.item);
    const client = this.client({ host: this.flags.host });
    const json = this.jsonEnabled();

    if (items.length === 1) {
      const result = await client.post(args.queue, items[0]!.json, this.flags['idempotency-key']);
      this.log(`${result.id} ${result.status}`);
      return result;
    }

    const bar =
      items.length > 1 && process.stderr.isTTY
        ? new cliProgress.SingleBar({ format: 'posting [{bar}] {value}/{total}', stream: process.stderr, hideCursor: true }, cliProgress.Presets.shades_classic)
        : undefined;
    bar?.start(items.length, 0);
    let outcomes;
    try {
      const key = this.flags['idempotency-key'];
      outcomes =
        key === undefined
          ? await postBatches(client, args.queue, items, { onDone: (n) => bar?.update(n) })
          : await postMany(client, args.queue, items, { idempotencyKey: key, onDone: (n) => bar?.update(n) });
    } finally {
      bar?.stop();
    }

    let rejected = 0;
    for (const outcome of outcomes) {
      if ('result' in outcome) {
        if (json) process.stdout.write(`${JSON.stringify(outcome.result)}\n`);
        else this.log(`${outcome.result.id} ${outcome.result.status}`);
      } else {
        rejected++;
        if (json) process.stdout.write(`${JSON.stringify({ ok: false, source: outcome.input.source, error: outcome.error })}\n`);
        process.stderr.write(`svcq: ${outcome.input.source}: ${outcome.error}\n`);
      }
    }
    if (rejected > 0) {
      // The outcome lines may still be on their way down a pipe: the exit that follows must not cut them (or the summary) off.
      await new Promise<void>((resolve) => process.stdout.write('', () => resolve()));
      throw new UserError(`${rejected} of ${items.length} item(s) were not posted`, 1);
    }
    return undefined;
  }
}

async function readItems(arg: string | undefined): Promise<ItemInput[]> {
  if (arg !== undefined && arg !== '-') return [parseItemArgument(arg)];
  if (arg === undefined && process.stdin.isTTY) throw new UserError('give the item as a JSON argument, or pipe JSON (one object or JSON lines) to stdin');
  const chunks: Buffer[] = [];
  for await (const chunk of process.stdin) chunks.push(chunk as Buffer);
  return parseItemsFromStdin(Buffer.concat(chunks).toString('utf8'));
}
