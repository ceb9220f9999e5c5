import { mkdir, readdir, rm, stat, truncate } from 'node:fs/promises';
import path from 'node:path';
import type { TaskEvent } from '../engine/item.js';
import type { HistoryPosition } from '../store/store.js';
import { fsyncDir } from '../definitions/registry.js';
import { AppendFile } from '../store/append-file.js';
import { taskFileName, utcDay } from './files.js';

export { utcDay } from './files.js';


/**
 * The task history (decisions §5): one JSON line per event in `tasks-YYYY-MM-DD.log` under
 * `<root>/_svcq/tasks/`. It is never pruned: it outlives retention.
 *
 * An acknowledged transition has its event on disk because the store writes the event into its
 * own journal, in the same fsync as the change. This file is written just after, off the
 * request's path, and the store remembers how far it got (a `HistoryPosition`); after a
 * crash, `recover` cuts the file back to the last position the store knew and the store appends
 * the events its journal holds beyond it, so the history has every event exactly once.
 */
export class TaskEventLog {
  private file: AppendFile | undefined;
  private day = '';
  private opening: Promise<void> | undefined;

  constructor(readonly dir: string) {}

  private dayFrom = 0;
  private dayTo = 0;
  private dayName = '';

  /** The UTC day of `ts`, without formatting a date for every event. */
  private dayOf(ts: number): string {
    if (ts < this.dayFrom || ts >= this.dayTo) {
      this.dayName = utcDay(ts);
      this.dayFrom = Date.parse(`${this.dayName}T00:00:00Z`);
      this.dayTo = this.dayFrom + 86_400_000;
    }
    return this.dayName;
  }

  /**
   * Appends events in order; resolves once they are on disk, with the position just past them.
   * Events of another UTC day go to that day's file. `rendered`, when given, is the events as
   * JSON lines already (the store renders them once for its journal and for this file).
   */
  async append(events: TaskEvent[], rendered?: string): Promise<HistoryPosition | undefined> {
    let start = 0;
    let position: HistoryPosition | undefined;
    while (start < events.length) {
      const day = this.dayOf(events[start]!.ts);
      let end = start + 1;
      while (end < events.length && this.dayOf(events[end]!.ts) === day) end++;
      let lines = '';
      if (rendered !== undefined && start === 0 && end === events.length) lines = rendered;
      else for (let i = start; i < end; i++) lines += `${JSON.stringify(events[i])}\n`;
      if (day !== this.day || !this.file) await this.switchTo(day);
      const file = this.file!;
      const written = file.append(lines);
      // The file's size counts what is queued, so right after queuing it is the end of these lines.
      position = { file: path.basename(file.file), size: file.size };
      await written;
      start = end;
    }
    return position;
  }

  /**
   * After a crash: cuts the history back to `position` (dropping lines written after the store's
   * last record of it) and removes day-files begun after it. Before any append.
   */
  async recover(position: HistoryPosition | null, now = Date.now()): Promise<HistoryPosition> {
    await mkdir(this.dir, { recursive: true });
    if (!position || !/^tasks-\d{4}-\d{2}-\d{2}\.log$/.test(position.file)) {
      const file = taskFileName(utcDay(now));
      return { file, size: await stat(path.join(this.dir, file)).then((st) => st.size, () => 0) };
    }
    const target = path.join(this.dir, position.file);
    const size = await stat(target).then((st) => st.size, () => -1);
    if (size > position.size) await truncate(target, position.size);
    for (const name of await readdir(this.dir)) {
      if (/^tasks-\d{4}-\d{2}-\d{2}\.log$/.test(name) && name > position.file) await rm(path.join(this.dir, name), { force: true });
    }
    return position;
  }

  private async switchTo(day: string): Promise<void> {
    // Concurrent first appends of a new day share one open.
    while (this.opening) await this.opening;
    if (day === this.day && this.file) return;
    this.opening = (async () => {
      const previous = this.file;
      const file = path.join(this.dir, taskFileName(day));
      this.file = await AppendFile.open(file);
      // A new day-file's name must survive a crash as well as the bytes written into it.
      await fsyncDir(this.dir);
      this.day = day;
      await previous?.close();
    })();
    try {
      await this.opening;
    } finally {
      this.opening = undefined;
    }
  }

  async close(): Promise<void> {
    while (this.opening) await this.opening;
    await this.file?.close();
    this.file = undefined;
    this.day = '';
  }
}
