import { Args, Flags } from '@oclif/core';
import cliProgress from 'cli-progress';
import { BaseCommand } from '../src/cli/base-command.js';
import { InvalidDefinitions, syncDefinitions, type SyncReport } from '../src/client/sync.js';

/** Below this many changes a bar would flash by faster than it could be read. */
const BAR_FROM = 20;

export default class Sync extends BaseCommand<typeof Sync> {
  static override summary = 'Make the server hold exactly the queue and user definitions of a folder.';
  static override description = `Scans DIR for <host>/svc-queues/*.json and <host>/svc-users/*.json, validates every file first (and uploads nothing if any fails),
then puts each file whose sha256 differs from the server's manifest and deletes each stored definition that has no local file.`;
  static override examples = ['<%= config.bin %> sync ./definitions --token $SVCQ_TOKEN', '<%= config.bin %> sync ./definitions --dry-run'];

  static override args = {
    dir: Args.string({ description: 'folder holding <host>/svc-queues and <host>/svc-users', required: true }),
  };

  static override flags = {
    'dry-run': Flags.boolean({ description: 'show what would be put and deleted, change nothing', default: false }),
  };

  async run(): Promise<SyncReport> {
    const { args } = await this.parse(Sync);
    const dryRun = this.flags['dry-run'];
    let bar: cliProgress.SingleBar | undefined;
    let report: SyncReport;
    try {
      report = await syncDefinitions(this.client(), args.dir, {
        dryRun,
        onProgress: (done, total) => {
          if (!bar && total > BAR_FROM && process.stderr.isTTY && !this.jsonEnabled()) {
            bar = new cliProgress.SingleBar({ format: 'syncing [{bar}] {value}/{total}', stream: process.stderr, hideCursor: true }, cliProgress.Presets.shades_classic);
            bar.start(total, 0);
          }
          bar?.update(done);
        },
      });
    } finally {
      bar?.stop();
    }

    const verb = dryRun ? 'would ' : '';
    for (const p of report.put) this.log(`${verb}put ${p}`);
    for (const p of report.deleted) this.log(`${verb}delete ${p}`);
    this.log(`${report.put.length} put, ${report.deleted.length} deleted, ${report.unchanged} unchanged${dryRun ? ' (dry run: nothing changed)' : ''}`);
    return report;
  }

  /** Every problem of every bad file on its own line, then the verdict; with --json the same as `{ error, invalid }`, on stderr too. */
  protected override async catch(err: Error & { exitCode?: number; oclif?: { exit?: number } }): Promise<unknown> {
    if (!(err instanceof InvalidDefinitions)) return super.catch(err);
    if (this.jsonEnabled()) process.stderr.write(`${JSON.stringify({ error: err.message, invalid: err.invalid }, null, 2)}\n`);
    else process.stderr.write(`${err.invalid.flatMap((i) => i.problems.map((p) => `svcq: ${i.path}: ${p}\n`)).join('')}svcq: ${err.message}\n`);
    return this.exit(1);
  }
}
