import { Flags } from '@oclif/core';
import { BaseCommand, UserError } from '../../src/cli/base-command.js';
import { parseWhich } from '../../src/tools/files.js';
import { parseJsonLines } from '../../src/tools/view/format.js';
import { tailAccessLog, wholeLines } from '../../src/tools/view/tail.js';

export default class LogsShow extends BaseCommand<typeof LogsShow> {
  static override summary = 'Print one access-log file, one JSON line per request; --follow keeps printing new lines.';
  static override description = 'With --follow it polls every second for the bytes after the last ones printed (a Range request), like tail -f, and carries on into the new active file when the log is rotated.';
  static override examples = ['<%= config.bin %> logs show', '<%= config.bin %> logs show --follow', '<%= config.bin %> logs show --which 1795314492610'];

  static override flags = {
    which: Flags.string({ description: '"active", or a rotated file\'s ts as `svcq logs` lists it', default: 'active' }),
    follow: Flags.boolean({ char: 'f', description: 'keep printing lines as they are written', default: false }),
  };

  async run(): Promise<unknown[] | void> {
    const { which, follow } = this.flags;
    const parsed = parseWhich(which);
    if (!parsed) throw new UserError(`--which "${which}" is not "active" or a rotated file's ts`);
    if (follow && !('active' in parsed)) throw new UserError('--follow needs --which active: a rotated file never grows');
    if (follow && this.jsonEnabled()) throw new UserError('--follow prints lines as they come and cannot be combined with --json');
    const client = this.client();
    const bytes = await client.toolFile('logs/file', { which });
    if (this.jsonEnabled()) return parseJsonLines(bytes.toString('utf8'));
    if (!follow) {
      process.stdout.write(bytes);
      return;
    }
    const lines = wholeLines(bytes);
    process.stdout.write(lines);
    await tailAccessLog(client, lines.length, { write: (chunk) => process.stdout.write(chunk) });
  }
}
