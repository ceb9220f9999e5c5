import { Args, Flags } from '@oclif/core';
import cliProgress from 'cli-progress';
import { BaseCommand } from '../src/cli/base-command.js';
import { InvalidDefinitions, SyncIncomplete, syncDefinitions, type SyncReport } from '../src/client/sync.js';

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
    // Ctrl-C or SIGTERM starts nothing more, lets the requests already sent end, and says what
    // changed (catch below); a second signal leaves at once.
    const interrupt = new AbortController();
    const onSignal = (signal: NodeJS.Signals): void => {
      if (interrupt.signal.aborted) process.exit(signal === 'SIGTERM' ? 143 : 130);
      this.stoppedBy = signal;
      interrupt.abort();
    };
    process.on('SIGINT', onSignal);
    process.on('SIGTERM', onSignal);
    try {
      report = await syncDefinitions(this.client(), args.dir, {
        dryRun,
        signal: interrupt.signal,
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
      process.off('SIGINT', onSignal);
      process.off('SIGTERM', onSignal);
    }

    const verb = dryRun ? 'would ' : '';
    for (const p of report.put) this.log(`${verb}put ${p}`);
    for (const p of report.deleted) this.log(`${verb}delete ${p}`);
    this.log(`${report.put.length} put, ${report.deleted.length} deleted, ${report.unchanged} unchanged${dryRun ? ' (dry run: nothing changed)' : ''}`);
    return report;
  }

  /** The signal that interrupted the sync, if one did. */
  private stoppedBy?: NodeJS.Signals;

  /**
   * Every problem of every bad file on its own line, then the verdict; with --json the same as `{ error, invalid }`, on stderr too.
   * A sync that stopped part way lists what it did change (stdout, as a finished one does), then says why it stopped and what is left.
   */
  protected override async catch(err: Error & { exitCode?: number; oclif?: { exit?: number } }): Promise<unknown> {
    if (err instanceof SyncIncomplete) {
      if (this.jsonEnabled()) process.stderr.write(`${JSON.stringify({ error: err.message, put: err.put, deleted: err.deleted, notPut: err.notPut, notDeleted: err.notDeleted, unanswered: err.unanswered })}\n`);
      else {
        for (const p of err.put) this.log(`put ${p}`);
        for (const p of err.deleted) this.log(`delete ${p}`);
        process.stderr.write(`svcq: ${err.message}\n`);
      }
      return this.exit(this.stoppedBy === 'SIGTERM' ? 143 : this.stoppedBy ? 130 : 1);
    }
    if (!(err instanceof InvalidDefinitions)) return super.catch(err);
    if (this.jsonEnabled()) process.stderr.write(`${JSON.stringify({ error: err.message, invalid: err.invalid }, null, 2)}\n`);
    else process.stderr.write(`${err.invalid.flatMap((i) => i.problems.map((p) => `svcq: ${i.path}: ${p}\n`)).join('')}svcq: ${err.message}\n`);
    return this.exit(1);
  }
}
