import { BaseCommand } from '../../src/cli/base-command.js';
import { taskListTable, type TaskList } from '../../src/cli/view/format.js';

export default class Tasks extends BaseCommand<typeof Tasks> {
  static override summary = 'List the task-history day-files.';
  static override examples = ['<%= config.bin %> tasks', '<%= config.bin %> tasks show tasks-2026-01-31.log'];

  async run(): Promise<TaskList> {
    const list = await this.client().tool<TaskList>('tasks');
    this.log(taskListTable(list));
    return list;
  }
}
