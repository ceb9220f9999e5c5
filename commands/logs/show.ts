import { Flags } from '@oclif/core';
import { BaseCommand, UserError } from '../../src/cli/base-command.js';
import { parseWhich } from '../../src/tools/files.js';
import { isLogRead, parseJsonLines, type LogList } from '../../src/cli/view/format.js';
import { keepLines, lastLines, newestRotated, tailAccessLog } from '../../src/cli/view/tail.js';

export default class LogsShow extends BaseCommand<typeof LogsShow> {
  static override summary = 'Print one access-log file, one JSON line per request; --follow keeps printing new lines.';
  static override description = `With --follow it works like tail -f: it prints the last --lines lines (10 unless told), then polls every second for the bytes after the last ones printed (a Range request), and carries on into the new active file when the log is rotated. If the server cannot be reached for a while (a restart, say), it says so once on stderr and carries on from where it was when the server answers again.
While following, requests that read the access log itself (paths /api/v2/logs and /api/v2/logs/file) are left out, so that the follower's own polls do not fill the screen; --include-log-reads shows them. Without --follow every line is printed.`;
  static override examples = [
    '<%= config.bin %> logs show',
    '<%= config.bin %> logs show --follow',
    '<%= config.bin %> logs show --lines 50',
    '<%= config.bin %> logs show --which 1795314492610',
  ];

  static override flags = {
    which: Flags.string({ description: '"active", or a rotated file\'s ts as `svcq logs` lists it', default: 'active' }),
    follow: Flags.boolean({ char: 'f', description: 'print the last lines, then keep printing lines as they are written', default: false }),
    lines: Flags.integer({ char: 'n', description: 'print only the last N lines first (default: all, or 10 with --follow)', min: 0 }),
    'include-log-reads': Flags.boolean({ description: 'with --follow: also print requests for /api/v2/logs and /api/v2/logs/file (the follower\'s own polls among them)', default: false }),
  };

  async run(): Promise<unknown[] | void> {
    const { which, follow } = this.flags;
    const parsed = parseWhich(which);
    if (!parsed) throw new UserError(`--which "${which}" is not "active" or a rotated file's ts`);
    if (follow && !('active' in parsed)) throw new UserError('--follow needs --which active: a rotated file never grows');
    if (follow && this.jsonEnabled()) throw new UserError('--follow prints lines as they come and cannot be combined with --json');
    const client = this.client();
    const count = this.flags.lines ?? (follow ? 10 : undefined);

    if (count === undefined) {
      const bytes = await client.toolFile('logs/file', { which });
      if (this.jsonEnabled()) return parseJsonLines(bytes.toString('utf8'));
      process.stdout.write(bytes);
      return;
    }

    const keep = follow && !this.flags['include-log-reads'] ? (line: string) => !isLogRead(line) : () => true;
    // The last lines of the file the list names: a rotation between the list and the reads would
    // have them read from the next active file, so the list is taken again until none came between.
    let list: LogList;
    let last: Awaited<ReturnType<typeof lastLines>>;
    for (let tries = 1; ; tries++) {
      list = await client.tool<LogList>('logs');
      const size = 'active' in parsed ? (list.active?.size ?? 0) : (list.rotated.find((r) => r.ts === parsed.ts)?.size ?? 0);
      last = await lastLines((from) => client.toolFile('logs/file', { which }, from), size, count, keep);
      if (!('active' in parsed) || tries === 5 || newestRotated(await client.tool<LogList>('logs')) === newestRotated(list)) break;
    }
    if (this.jsonEnabled()) return parseJsonLines(last.lines.join('\n'));
    if (last.lines.length > 0) process.stdout.write(`${last.lines.join('\n')}\n`);
    if (!follow) return;
    await tailAccessLog(client, { offset: last.end, newest: newestRotated(list) }, {
      trouble: (line) => process.stderr.write(`svcq: ${line}\n`),
      write: (chunk) => {
        const kept = keepLines(chunk, keep);
        if (kept.length > 0) process.stdout.write(kept);
      },
    });
  }
}
