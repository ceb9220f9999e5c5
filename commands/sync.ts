import { Args, Flags } from '@oclif/core';
import cliProgress from 'cli-progress';
import { BaseCommand } from '../src/cli/base-command.js';
import { InvalidDefinitions, SyncIncomplete, syncDefinitions, type SyncReport } from '../src/client/sync.js';

/** What --json prints of a sync: the paths put and deleted. */
interface SyncDone {
  put: string[];
  deleted: string[];
  unchanged: number;
  dryRun: false;
}

/**
 * What --json prints of a dry run: what a sync would do, each path under what would become of it,
 * and (for scripts written against a sync's report) what would be put and deleted, as a sync says.
 */
interface DryRunReport {
  dryRun: true;
  put: string[];
  deleted: string[];
  wouldCreate: string[];
  wouldUpdate: string[];
  wouldDelete: string[];
  unchanged: number;
}

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
    'dry-run': Flags.boolean({ description: 'say what would be created, updated and deleted, and change nothing (with --json: dryRun true, wouldCreate, wouldUpdate, wouldDelete, and put and deleted as a sync reports them)', default: false }),
  };

  async run(): Promise<SyncDone | DryRunReport> {
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

    if (dryRun) return this.dryRunReport(report);
    for (const p of report.put) this.log(`put ${p}`);
    for (const p of report.deleted) this.log(`delete ${p}`);
    this.log(`${report.put.length} put, ${report.deleted.length} deleted, ${report.unchanged} unchanged`);
    return { put: report.put, deleted: report.deleted, unchanged: report.unchanged, dryRun: false };
  }

  /**
   * What a dry run found, in the conditional: nothing was put or deleted, so nothing says it was.
   * A file the server does not hold would be created, one that differs from its copy updated.
   */
  private dryRunReport(report: SyncReport): DryRunReport {
    const created = new Set(report.created);
    const wouldCreate = report.put.filter((p) => created.has(p));
    const wouldUpdate = report.put.filter((p) => !created.has(p));
    for (const p of wouldCreate) this.log(`would create ${p}`);
    for (const p of wouldUpdate) this.log(`would update ${p}`);
    for (const p of report.deleted) this.log(`would delete ${p}`);
    this.log(`dry run, nothing changed: would create ${wouldCreate.length}, update ${wouldUpdate.length} and delete ${report.deleted.length}; ${report.unchanged} unchanged`);
    return { dryRun: true, put: report.put, deleted: report.deleted, wouldCreate, wouldUpdate, wouldDelete: report.deleted, unchanged: report.unchanged };
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
