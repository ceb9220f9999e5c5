import { BaseCommand } from '../src/cli/base-command.js';
import { bulkCommand, bulkMaxFlag } from '../src/cli/bulk-command.js';
import { QUEUE_ARG_HELP, queueArg, queueHostFlag, queueTarget } from '../src/cli/queue-arg.js';

export default class Redrive extends BaseCommand<typeof Redrive> {
  static override summary = "Send a dead-letter queue's items back to the queues they came from.";
  static override description = `Needs the master token. Each pending dead letter of HOST/NAME (an item a failed or timed-out item was copied to, decisions §8.6) is posted again, with the same body, to the queue of the same host it came from, and removed from HOST/NAME; one whose queue is no longer defined stays. Oldest first, in requests of up to 1,000 items (POST /api/v2/queues/HOST/NAME/redrive), until none are left or --max have moved. A progress bar shows on a terminal (one line per request otherwise); Ctrl-C stops after the request under way. --json prints { queue, moved, more, requests, interrupted }.
${QUEUE_ARG_HELP}`;
  static override examples = ['<%= config.bin %> redrive jobs.example.com/mail-dead', '<%= config.bin %> redrive mail-dead --host jobs.example.com --max 100 --json'];

  static override args = { queue: queueArg };
  static override flags = { host: queueHostFlag, max: bulkMaxFlag };

  async run(): Promise<Record<string, unknown>> {
    const { args } = await this.parse(Redrive);
    const target = queueTarget(args.queue, this.flags.host, this.argv);
    return bulkCommand(this.client(), target, 'redrive', { statuses: [], max: this.flags.max, json: this.jsonEnabled(), log: (line) => this.log(line) });
  }
}
