import { BaseCommand } from '../src/cli/base-command.js';
import { onQueue, QUEUE_ARG_HELP, queueArg, queueHostFlag, queueTarget } from '../src/cli/queue-arg.js';
import { queueDetailView } from '../src/cli/view/queues.js';
import { queuePath, type QueueDetail } from '../src/operators/answers.js';

export default class Queue extends BaseCommand<typeof Queue> {
  static override summary = 'Show one queue: counts, rates, its oldest pending items and its leases.';
  static override description = `Needs the master token. Shows whether the queue is paused, the 20 oldest pending items and up to 100 leases, soonest end first. --json prints the answer of GET /api/v2/queues/HOST/NAME.
${QUEUE_ARG_HELP}`;
  static override examples = ['<%= config.bin %> queue jobs.example.com/thumbnails', '<%= config.bin %> queue thumbnails --host jobs.example.com --json', 'SVCQ_HOST=jobs.example.com <%= config.bin %> queue thumbnails'];

  static override args = {
    queue: queueArg,
  };

  static override flags = {
    host: queueHostFlag,
  };

  async run(): Promise<QueueDetail> {
    const { args } = await this.parse(Queue);
    const target = queueTarget(args.queue, this.flags.host, this.argv);
    const detail = await onQueue(target, () => this.client().json<QueueDetail>('GET', queuePath(target.host, target.name), { shape: 'queueDetail' }));
    this.log(queueDetailView(detail));
    return detail;
  }
}
