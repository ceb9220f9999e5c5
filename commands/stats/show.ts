import { Args, Flags } from '@oclif/core';
import { BaseCommand, UserError } from '../../src/cli/base-command.js';
import { parseStatFile } from '../../src/tools/files.js';
import { chartOf, parseSamples, renderChart } from '../../src/cli/view/charts.js';
import type { StatList } from '../../src/cli/view/format.js';
import { tailFile, wholeLines } from '../../src/cli/view/tail.js';

export default class StatsShow extends BaseCommand<typeof StatsShow> {
  static override summary = 'Chart one stats day-file; --json prints its samples instead.';
  static override description = 'NAME is a file name as `svcq stats` lists it. CPU is drawn as busy % between samples, disk and network I/O as bytes per second. With --follow the chart is drawn again whenever new samples arrive. If the server cannot be reached for a while (a restart, say), it says so once on stderr and carries on from where it was when the server answers again.';
  static override examples = ['<%= config.bin %> stats show cpu-2026-01-31.log', '<%= config.bin %> stats show memory-2026-01-31.log --follow', '<%= config.bin %> stats show netio-2026-01-31.log --json'];

  static override args = {
    name: Args.string({ description: 'day-file name, <type>-YYYY-MM-DD.log', required: true }),
  };

  static override flags = {
    follow: Flags.boolean({ char: 'f', description: 'redraw as new samples arrive', default: false }),
  };

  async run(): Promise<unknown[] | void> {
    const { args } = await this.parse(StatsShow);
    const file = parseStatFile(args.name);
    if (!file) throw new UserError(`"${args.name}" is not a stats day-file name (<type>-YYYY-MM-DD.log, type cpu, memory, disk, diskio or netio)`);
    if (this.flags.follow && this.jsonEnabled()) throw new UserError('--follow redraws a chart and cannot be combined with --json');
    const client = this.client();
    const bytes = await client.toolFile('stats/file', { name: args.name });
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
    await tailFile(client, 'stats/file', { name: args.name }, Buffer.byteLength(text), {
      intervalMs: Math.max(1000, interval),
      trouble: (line) => process.stderr.write(`svcq: ${line}\n`),
      write: (chunk) => {
        text += chunk.toString('utf8');
        draw();
      },
    });
  }
}
