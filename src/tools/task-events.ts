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

  /**
   * Appends events in order; resolves once they are on disk, with the position just past them.
   * Events of another UTC day go to that day's file.
   */
  async append(events: TaskEvent[]): Promise<HistoryPosition | undefined> {
    let start = 0;
    let position: HistoryPosition | undefined;
    while (start < events.length) {
      const day = utcDay(events[start]!.ts);
      let end = start + 1;
      while (end < events.length && utcDay(events[end]!.ts) === day) end++;
      let lines = '';
      for (let i = start; i < end; i++) lines += `${JSON.stringify(events[i])}\n`;
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
