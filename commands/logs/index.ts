import { BaseCommand } from '../../src/cli/base-command.js';
import { logListTable, type LogList } from '../../src/cli/view/format.js';

export default class Logs extends BaseCommand<typeof Logs> {
  static override summary = 'List the access-log files: the active one and the rotated ones, with their sizes.';
  static override examples = ['<%= config.bin %> logs', '<%= config.bin %> logs --json'];

  async run(): Promise<LogList> {
    const list = await this.client().tool<LogList>('logs');
    this.log(logListTable(list));
    return list;
  }
}
