import { BaseCommand } from '../../src/cli/base-command.js';
import type { Snapshot } from '../../src/tools/stats.js';
import { renderSnapshot } from '../../src/cli/view/panel.js';

export default class StatsNow extends BaseCommand<typeof StatsNow> {
  static override summary = "Show the server's health right now: uptime, load, per-core CPU, memory and disk.";
  static override examples = ['<%= config.bin %> stats now', '<%= config.bin %> stats now --json'];

  async run(): Promise<Snapshot> {
    const snapshot = await this.client().tool<Snapshot>('stats/now');
    this.log(renderSnapshot(snapshot));
    return snapshot;
  }
}
