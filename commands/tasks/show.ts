import { Args, Flags } from '@oclif/core';
import { BaseCommand, UserError } from '../../src/cli/base-command.js';
import { parseTaskFile } from '../../src/tools/files.js';
import { eventLines } from '../../src/cli/view/events.js';
import { parseJsonLines, type TaskList } from '../../src/cli/view/format.js';
import { lastLines, tailFile } from '../../src/cli/view/tail.js';

export default class TasksShow extends BaseCommand<typeof TasksShow> {
  static override summary = 'Print the task events of one day, one readable line each; --follow keeps printing new ones.';
  static override description = 'With --follow it works like tail -f: it prints the last --lines events (10 unless told), then polls every second for the bytes after the last ones printed (a Range request). If the server cannot be reached for a while (a restart, say), it says so once on stderr and carries on from where it was when the server answers again. Without --follow the whole day is printed, or its last --lines events.';
  static override examples = [
    '<%= config.bin %> tasks show tasks-2026-01-31.log',
    '<%= config.bin %> tasks show tasks-2026-01-31.log --follow',
    '<%= config.bin %> tasks show tasks-2026-01-31.log --lines 100',
    '<%= config.bin %> tasks show tasks-2026-01-31.log --json',
  ];

  static override args = {
    name: Args.string({ description: 'day-file name, tasks-YYYY-MM-DD.log', required: true }),
  };

  static override flags = {
    follow: Flags.boolean({ char: 'f', description: 'print the last events, then keep printing events as they are recorded', default: false }),
    lines: Flags.integer({ char: 'n', description: 'print only the last N events first (default: all, or 10 with --follow)', min: 0 }),
  };

  async run(): Promise<unknown[] | void> {
    const { args } = await this.parse(TasksShow);
    if (!parseTaskFile(args.name)) throw new UserError(`"${args.name}" is not a task day-file name (tasks-YYYY-MM-DD.log)`);
    if (this.flags.follow && this.jsonEnabled()) throw new UserError('--follow prints events as they come and cannot be combined with --json');
    const client = this.client();
    const count = this.flags.lines ?? (this.flags.follow ? 10 : undefined);

    if (count === undefined) {
      const bytes = await client.toolFile('tasks/file', { name: args.name });
      if (this.jsonEnabled()) return parseJsonLines(bytes.toString('utf8'));
      for (const line of eventLines(bytes.toString('utf8'))) this.log(line);
      return;
    }

    const list = await client.tool<TaskList>('tasks');
    const size = list.files.find((f) => f.name === args.name)?.size ?? 0;
    const last = await lastLines((from) => client.toolFile('tasks/file', { name: args.name }, from), size, count);
    if (this.jsonEnabled()) return parseJsonLines(last.lines.join('\n'));
    for (const line of eventLines(last.lines.join('\n'))) this.log(line);
    if (!this.flags.follow) return;
    await tailFile(client, 'tasks/file', { name: args.name }, last.end, {
      trouble: (line) => process.stderr.write(`svcq: ${line}\n`),
      write: (chunk) => eventLines(chunk.toString('utf8')).forEach((line) => this.log(line)),
    });
  }
}
