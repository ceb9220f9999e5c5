import { Args, Flags } from '@oclif/core';
import { BaseCommand, UserError } from '../../src/cli/base-command.js';
import type { SvcqClient } from '../../src/client/client.js';
import { STAT_TYPES, parseStatFile, type StatType } from '../../src/tools/files.js';
import { chartOf, parseSamples, renderChart } from '../../src/cli/view/charts.js';
import type { StatList } from '../../src/cli/view/format.js';
import { tailFile, wholeLines } from '../../src/cli/view/tail.js';

export default class StatsShow extends BaseCommand<typeof StatsShow> {
  static override summary = 'Chart one stats day-file; --json prints its samples instead.';
  static override description = `NAME is a file name as \`svcq stats\` lists it, <type>-YYYY-MM-DD.log, its date a UTC day; or a type alone (cpu, memory, disk, diskio or netio), which means the newest file of that type the server lists: the one it is writing now, on its own clock's UTC day. That is not always today's date where you are (in an American evening the UTC day has already turned; in an Asian morning it has not yet), nor this machine's idea of the date. For a given day, name its file.
CPU is drawn as busy % between samples, disk and network I/O as bytes per second. With --follow the chart is drawn again whenever new samples arrive. If the server cannot be reached for a while (a restart, say), it says so once on stderr and carries on from where it was when the server answers again. It follows the file it started with, also past midnight UTC.`;
  static override examples = ['<%= config.bin %> stats show cpu', '<%= config.bin %> stats show cpu-2026-01-31.log', '<%= config.bin %> stats show memory-2026-01-31.log --follow', '<%= config.bin %> stats show netio-2026-01-31.log --json'];

  static override args = {
    name: Args.string({ description: 'day-file name, <type>-YYYY-MM-DD.log (a UTC day), or a type alone for its newest day-file', required: true }),
  };

  static override flags = {
    follow: Flags.boolean({ char: 'f', description: 'redraw as new samples arrive', default: false }),
  };

  async run(): Promise<unknown[] | void> {
    const { args } = await this.parse(StatsShow);
    const file: { type: StatType } | undefined = isStatType(args.name) ? { type: args.name } : parseStatFile(args.name);
    if (!file) throw new UserError(`"${args.name}" is neither a stats day-file name (<type>-YYYY-MM-DD.log, as svcq stats lists them) nor a type alone (${STAT_TYPES.join(', ')}: its newest day-file)`);
    if (this.flags.follow && this.jsonEnabled()) throw new UserError('--follow redraws a chart and cannot be combined with --json');
    const client = this.client();
    const name = args.name === file.type ? await newestOf(client, file.type) : args.name;
    const bytes = await client.toolFile('stats/file', { name });
    if (this.jsonEnabled()) return parseSamples(bytes.toString('utf8'));
    let text = wholeLines(bytes).toString('utf8');
    const draw = (): void => {
      const chart = renderChart(chartOf(file.type, parseSamples(text)), process.stdout.columns ?? 80);
      // On a terminal each redraw replaces the last; into a pipe the charts simply follow each other.
      this.log(process.stdout.isTTY && this.flags.follow ? `\x1b[2J\x1b[H${chart}` : chart);
    };
    draw();
    if (!this.flags.follow) return;
    const { interval } = await client.tool<StatList>('stats');
    await tailFile(client, 'stats/file', { name }, Buffer.byteLength(text), {
      intervalMs: Math.max(1000, interval),
      trouble: (line) => process.stderr.write(`svcq: ${line}\n`),
      write: (chunk) => {
        text += chunk.toString('utf8');
        draw();
      },
    });
  }
}

function isStatType(word: string): word is StatType {
  return (STAT_TYPES as readonly string[]).includes(word);
}

/**
 * The newest day-file of `type` the server lists: the one it is writing, dated by its own clock's
 * UTC day (not a date worked out from this machine's clock, which may be another day).
 */
async function newestOf(client: SvcqClient, type: StatType): Promise<string> {
  const { files } = await client.tool<StatList>('stats');
  const newest = files
    .filter((f) => f.type === type)
    .map((f) => f.name)
    .sort()
    .at(-1);
  if (newest === undefined) throw new UserError(`the server lists no ${type} day-file yet (svcq stats lists those it has)`, 1);
  return newest;
}
