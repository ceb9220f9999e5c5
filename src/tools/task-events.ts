import path from 'node:path';
import type { TaskEvent } from '../engine/item.js';
import { fsyncDir } from '../definitions/registry.js';
import { AppendFile } from '../store/append-file.js';
import { taskFileName, utcDay } from './files.js';

export { utcDay } from './files.js';

/**
 * The task history (decisions §5): one JSON line per event in `tasks-YYYY-MM-DD.log` under
 * `<root>/_svcq/tasks/`, group-committed like the store so that an acknowledged transition has
 * its event on disk. It is never pruned: it outlives retention.
 */
export class TaskEventLog {
  private file: AppendFile | undefined;
  private day = '';
  private opening: Promise<void> | undefined;

  constructor(readonly dir: string) {}

  /** Appends events durably; resolves once they are on disk. Events of another UTC day go to that day's file. */
  async append(events: TaskEvent[]): Promise<void> {
    let start = 0;
    while (start < events.length) {
      const day = utcDay(events[start]!.ts);
      let end = start + 1;
      while (end < events.length && utcDay(events[end]!.ts) === day) end++;
      let lines = '';
      for (let i = start; i < end; i++) lines += `${JSON.stringify(events[i])}\n`;
      if (day !== this.day || !this.file) await this.switchTo(day);
      await this.file!.append(lines);
      start = end;
    }
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
