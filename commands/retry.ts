import { Flags } from '@oclif/core';
import { BaseCommand } from '../src/cli/base-command.js';
import { bulkStatuses } from '../src/cli/bulk.js';
import { bulkCommand, bulkMaxFlag } from '../src/cli/bulk-command.js';
import { QUEUE_ARG_HELP, queueArg, queueHostFlag, queueTarget } from '../src/cli/queue-arg.js';

export default class Retry extends BaseCommand<typeof Retry> {
  static override summary = 'Make the failed (and timed-out, or cancelled) items of a queue pending again.';
  static override description = `Needs the master token. Each item of HOST/NAME whose status is among --status (default failed,timedout; cancelled may be added) is pending again in its place: same id, attempts 0, claimable at once (decisions §8.6). Oldest first, in requests of up to 1,000 items (POST /api/v2/queues/HOST/NAME/retry), until none are left or --max are pending again. A progress bar shows on a terminal (one line per request otherwise); Ctrl-C stops after the request under way. --json prints { queue, retried, more, status, requests, interrupted }.
${QUEUE_ARG_HELP}`;
  static override examples = ['<%= config.bin %> retry jobs.example.com/thumbnails', '<%= config.bin %> retry jobs.example.com/thumbnails --status failed,timedout,cancelled --max 500'];

  static override args = { queue: queueArg };
  static override flags = {
    host: queueHostFlag,
    status: Flags.string({ description: 'statuses to retry, comma-separated, among failed, timedout and cancelled (default failed,timedout)' }),
    max: bulkMaxFlag,
  };

  async run(): Promise<Record<string, unknown>> {
    const { args } = await this.parse(Retry);
    const target = queueTarget(args.queue, this.flags.host, this.argv);
    const statuses = bulkStatuses('retry', this.flags.status);
    return bulkCommand(this.client(), target, 'retry', { statuses, max: this.flags.max, json: this.jsonEnabled(), log: (line) => this.log(line) });
  }
}
