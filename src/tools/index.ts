import { makeDir } from '../durable-files.js';
import type { StoreHooks } from '../store/store.js';
import { AccessLog, type AccessLogSink } from './access-log.js';
import { logsDir, payloadsDir, statsDir, tasksDir } from './files.js';
import { PayloadArchive } from './payload-archive.js';
import { StatsSampler, StatsThread, type Snapshot } from './stats.js';
import { TaskEventLog } from './task-events.js';
import { stderrLine } from '../server-output.js';

export const TOOLS_DEFAULTS = {
  logMaxBytes: 16 * 1024 * 1024,
  logKeep: 20,
  statsInterval: 15_000,
  historyDays: 0,
  statsDays: 0,
} as const;

export interface ToolsOptions {
  /** `<root>/_svcq` */
  home: string;
  /** Rotate the access log past this many bytes (default 16 MiB). */
  logMaxBytes?: number;
  /** Rotated access logs kept (default 20). */
  logKeep?: number;
  /**
   * Milliseconds between stats samples (default 15000). 0 takes none: for a store opened without
   * a server, where starting the stats thread (at the first sample) would cost more than the
   * store's whole life. `snapshot` still works, starting the thread when first asked.
   */
  statsInterval?: number;
  /** Task-history day-files of days more than this many days past are removed (default 0: every one kept). */
  historyDays?: number;
  /** Stats day-files of days more than this many days past are removed (default 0: every one kept). */
  statsDays?: number;
  warn?: (line: string) => void;
}

export interface Tools {
  accessLog: AccessLogSink;
  hooks: StoreHooks;
  tasks: TaskEventLog;
  sampler: StatsSampler;
  /** A live snapshot of the host (`stats/now`), taken on the stats thread. */
  snapshot(): Promise<Snapshot>;
  /** Stops sampling and flushes the access log and the task history. */
  close(): Promise<void>;
}

/**
 * Opens everything the server keeps beside the store: access log, stats sampler (started here, so
 * the first sample is taken at start), task history and payload archive.
 */
export async function openTools(options: ToolsOptions): Promise<Tools> {
  const warn = options.warn ?? ((line: string) => stderrLine(`svcq: warning: ${line}`));
  const accessLog = await AccessLog.open({
    dir: logsDir(options.home),
    maxBytes: options.logMaxBytes ?? TOOLS_DEFAULTS.logMaxBytes,
    keep: options.logKeep ?? TOOLS_DEFAULTS.logKeep,
    warn,
  });
  const tasks = new TaskEventLog(tasksDir(options.home), { keepDays: options.historyDays ?? TOOLS_DEFAULTS.historyDays, warn });
  const payloads = new PayloadArchive(payloadsDir(options.home));
  // Off the thread that answers requests: some probes block theirs (see takeSnapshot).
  const stats = new StatsThread();
  const snapshot = (): Promise<Snapshot> => stats.snapshot();
  const sampler = new StatsSampler(statsDir(options.home), options.statsInterval ?? TOOLS_DEFAULTS.statsInterval, warn, snapshot, options.statsDays ?? TOOLS_DEFAULTS.statsDays);
  // The stats folder is made (and its entry synced) before the server answers anything: the first
  // sample, taken on a thread of its own, would otherwise make it while the first answers go out.
  // One that cannot be made here is the samples' to report (each warns), as before.
  if (sampler.intervalMs > 0) {
    await makeDir(sampler.dir).catch(() => undefined);
    sampler.start();
  }
  return {
    accessLog,
    tasks,
    sampler,
    snapshot,
    hooks: {
      stage: (host, queue, id, kind, body) => payloads.stage(host, queue, id, kind, body),
    },
    async close() {
      await sampler.stop();
      await Promise.all([accessLog.close(), tasks.close(), stats.close()]);
    },
  };
}
