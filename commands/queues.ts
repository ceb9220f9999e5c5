import { BaseCommand } from '../src/cli/base-command.js';
import { queueListTable } from '../src/cli/view/queues.js';
import { fetchQueueList } from '../src/cli/top/fetch.js';
import type { QueueList } from '../src/operators/answers.js';

export default class Queues extends BaseCommand<typeof Queues> {
  static override summary = 'List every defined queue with its counts, oldest pending age and rates.';
  static override description = `Needs the master token. Rates are per second over the last 60 s, as the server counted them. --json prints the answer of GET /api/v2/queues.
On a terminal the table fits its width: where the whole table does not fit, it is drawn without borders and the least needed columns are left out (claimed/s and posted/s first; claimed and processing become "in flight"), and a line under it says which. A figure is never cut; a long host or queue name may be, in its middle. A paused queue's name is followed by "(paused)" (svcq pause, svcq resume), which is never cut.`;
  static override examples = ['<%= config.bin %> queues --token $SVCQ_TOKEN', '<%= config.bin %> queues --json'];

  async run(): Promise<QueueList> {
    const list = await fetchQueueList(this.client());
    // Into a pipe or a file every column is printed: no terminal's width limits it (nor one that says it has none: 0).
    this.log(queueListTable(list, process.stdout.isTTY ? process.stdout.columns || undefined : undefined));
    return list;
  }
}
