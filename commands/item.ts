import { Args, Flags } from '@oclif/core';
import { BaseCommand, hostFlag } from '../src/cli/base-command.js';
import { exactAnswer, exactJson } from '../src/cli/exact-json.js';
import { waitForItem } from '../src/cli/producer.js';
import type { StatusAnswer } from '../src/protocol.js';

export default class Item extends BaseCommand<typeof Item> {
  static override summary = "Show an item's status record.";
  static override description = `With --wait, long-polls until the item is terminal (finished, failed, timedout or cancelled), however long that takes, riding out a server restart.
When the server cannot be reached (or answers 5xx) it says so on stderr at once and then at most every 10 s while it retries, and gives up with exit code 1 once the failures have lasted --give-up seconds in a row.
A server that takes a request and never answers fails too: each long poll holds for --give-up seconds (1 to 30), so a silent server is given up on between --give-up and --give-up + 30 seconds after the request.`;
  static override examples = ['<%= config.bin %> item thumbnails 0123456789abcdef --host jobs.example.com --wait'];

  static override args = {
    queue: Args.string({ description: 'queue name', required: true, ignoreStdin: true }),
    id: Args.string({ description: 'item id (16 hex characters)', required: true, ignoreStdin: true }),
  };

  static override flags = {
    host: hostFlag,
    wait: Flags.boolean({ description: 'wait until the item is terminal', default: false }),
    'give-up': Flags.integer({ description: 'with --wait: seconds of failing to reach the server, in a row, after which to give up (0: at the first failure)', default: 60, min: 0 }),
  };

  async run(): Promise<StatusAnswer> {
    const { args } = await this.parse(Item);
    const client = this.client({ host: this.flags.host });
    const record = this.flags.wait
      ? await waitForItem(client, args.queue, args.id, { giveUpMs: this.flags['give-up'] * 1000, report: (line) => this.logToStderr(`svcq: ${line}`) })
      : await client.item(args.queue, args.id);
    // Bodies as their sender wrote them: 12345678901234567890 is not rounded, 1.0 stays 1.0.
    const exact = exactAnswer(record);
    this.log(summary(exact));
    return exact;
  }
}

/** The status record as a person reads it: one field a line, bodies as compact JSON. */
function summary(r: StatusAnswer): string {
  const time = (ms: number | null): string => (ms === null ? '-' : new Date(ms).toISOString());
  const body = (v: unknown): string => (v === null || v === undefined ? '-' : (exactJson(v) ?? '-'));
  const took = r.finishedAt === null ? '' : ` (${((r.finishedAt - r.postedAt) / 1000).toFixed(1)} s after posting)`;
  return [
    `id        ${r.id}`,
    `status    ${r.status}`,
    `attempts  ${r.attempts}`,
    // Post options (decisions §8.1), where the item has them.
    // (Numbers of the record may come as exact-number values: compared by their text.)
    ...(r.priority !== undefined && String(r.priority) !== '0' ? [`priority  ${String(r.priority)}`] : []),
    ...(typeof r.group === 'string' ? [`group     ${r.group}`] : []),
    `posted    ${time(r.postedAt)} by ${r.postedBy}`,
    ...(r.runAt !== undefined && r.runAt !== null ? [`runs at   ${time(Number(r.runAt))}`] : []),
    `updated   ${time(r.updatedAt)}`,
    `finished  ${time(r.finishedAt)}${took}`,
    `progress  ${body(r.progress)}`,
    `result    ${body(r.result)}`,
    `error     ${body(r.error)}`,
  ].join('\n');
}
