import { BaseCommand } from '../../src/cli/base-command.js';
import { statListTable, type StatList } from '../../src/cli/view/format.js';

export default class Stats extends BaseCommand<typeof Stats> {
  static override summary = 'List the server-health day-files (cpu, memory, disk, diskio, netio) and the sampling interval.';
  static override examples = ['<%= config.bin %> stats', '<%= config.bin %> stats show cpu-2026-01-31.log'];

  async run(): Promise<StatList> {
    const list = await this.client().tool<StatList>('stats');
    this.log(statListTable(list));
    return list;
  }
}
