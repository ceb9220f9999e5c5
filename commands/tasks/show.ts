import { Args, Flags } from '@oclif/core';
import { BaseCommand, UserError } from '../../src/cli/base-command.js';
import { parseTaskFile } from '../../src/tools/files.js';
import { eventLines } from '../../src/tools/view/events.js';
import { parseJsonLines } from '../../src/tools/view/format.js';
import { tailFile, wholeLines } from '../../src/tools/view/tail.js';

export default class TasksShow extends BaseCommand<typeof TasksShow> {
  static override summary = 'Print the task events of one day, one readable line each; --follow keeps printing new ones.';
  static override examples = ['<%= config.bin %> tasks show tasks-2026-01-31.log', '<%= config.bin %> tasks show tasks-2026-01-31.log --follow', '<%= config.bin %> tasks show tasks-2026-01-31.log --json'];

  static override args = {
    name: Args.string({ description: 'day-file name, tasks-YYYY-MM-DD.log', required: true }),
  };

  static override flags = {
    follow: Flags.boolean({ char: 'f', description: 'keep printing events as they are recorded', default: false }),
  };

  async run(): Promise<unknown[] | void> {
    const { args } = await this.parse(TasksShow);
    if (!parseTaskFile(args.name)) throw new UserError(`"${args.name}" is not a task day-file name (tasks-YYYY-MM-DD.log)`);
    if (this.flags.follow && this.jsonEnabled()) throw new UserError('--follow prints events as they come and cannot be combined with --json');
    const client = this.client();
    const bytes = await client.toolFile('tasks/file', { name: args.name });
    if (this.jsonEnabled()) return parseJsonLines(bytes.toString('utf8'));
    const lines = this.flags.follow ? wholeLines(bytes) : bytes;
    for (const line of eventLines(lines.toString('utf8'))) this.log(line);
    if (!this.flags.follow) return;
    await tailFile(client, 'tasks/file', { name: args.name }, lines.length, {
      write: (chunk) => eventLines(chunk.toString('utf8')).forEach((line) => this.log(line)),
    });
  }
}
