import { Args, Flags } from '@oclif/core';
import { BaseCommand, UserError, hostFlag } from '../src/cli/base-command.js';
import { bulkStatuses } from '../src/cli/bulk.js';
import { bulkCommand } from '../src/cli/bulk-command.js';
import { queueTarget } from '../src/cli/queue-arg.js';
import type { SubmissionAnswer } from '../src/protocol.js';

export default class Cancel extends BaseCommand<typeof Cancel> {
  static override summary = 'Cancel an item that is not yet terminal, or with --all every pending item of a queue.';
  static override description = `QUEUE ID: a pending or running item becomes "cancelled"; a worker running it stops its command. An item already terminal is left as it is (and the command says so). This form takes a user token that may post to the queue, and the queue's domain with --host.
QUEUE --all: needs the master token. Every item of the queue whose status is among --status (default pending; claimed and processing may be added) is cancelled (decisions §8.6), oldest first, in requests of up to 1,000 items (POST /api/v2/queues/HOST/NAME/cancel), until none are left or --max are cancelled. QUEUE is then HOST/NAME, or NAME with --host. A progress bar shows on a terminal (one line per request otherwise); Ctrl-C stops after the request under way. --json prints { queue, cancelled, more, status, requests, interrupted }.`;
  static override examples = [
    '<%= config.bin %> cancel thumbnails 0123456789abcdef --host jobs.example.com --token $ALICE_TOKEN',
    '<%= config.bin %> cancel jobs.example.com/thumbnails --all --token $SVCQ_MASTER_TOKEN',
    '<%= config.bin %> cancel jobs.example.com/thumbnails --all --status pending,claimed,processing --max 10000',
  ];

  static override args = {
    queue: Args.string({ description: 'queue name (HOST/NAME allowed with --all)', required: true, ignoreStdin: true }),
    id: Args.string({ description: 'item id (16 hex characters); none with --all', ignoreStdin: true }),
  };

  static override flags = {
    host: hostFlag,
    all: Flags.boolean({ description: 'cancel every item of the queue with a status among --status (master token)' }),
    status: Flags.string({ description: 'with --all: statuses to cancel, comma-separated, among pending, claimed and processing (default pending)', dependsOn: ['all'] }),
    max: Flags.integer({ description: 'with --all: cancel at most this many items (default: all there are)', min: 1, dependsOn: ['all'] }),
  };

  async run(): Promise<SubmissionAnswer | Record<string, unknown>> {
    const { args } = await this.parse(Cancel);
    if (this.flags.all) {
      if (args.id !== undefined) throw new UserError('give an item id, or --all, not both');
      const target = queueTarget(args.queue, this.flags.host, this.argv);
      const statuses = bulkStatuses('cancel', this.flags.status);
      return bulkCommand(this.client(), target, 'cancel', { statuses, max: this.flags.max, json: this.jsonEnabled(), log: (line) => this.log(line) });
    }
    if (args.id === undefined) throw new UserError('give the id of the item to cancel, or --all to cancel every pending item of the queue');
    const result = await this.client({ host: this.flags.host }).cancel(args.queue, args.id);
    this.log(result.accepted ? `${args.id} cancelled` : `${args.id} not cancelled: it is already ${result.status}`);
    return result;
  }
}
