import { BaseCommand } from '../src/cli/base-command.js';
import { queueListTable } from '../src/cli/view/queues.js';
import { fetchQueueList } from '../src/cli/top/fetch.js';
import type { QueueList } from '../src/operators/answers.js';

export default class Queues extends BaseCommand<typeof Queues> {
  static override summary = 'List every defined queue with its counts, oldest pending age and rates.';
  static override description = 'Needs the master token. Rates are per second over the last 60 s, as the server counted them. --json prints the answer of GET /api/v2/queues.';
  static override examples = ['<%= config.bin %> queues --token $SVCQ_TOKEN', '<%= config.bin %> queues --json'];

  async run(): Promise<QueueList> {
    const list = await fetchQueueList(this.client());
    this.log(queueListTable(list));
    return list;
  }
}
