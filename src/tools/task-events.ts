import path from 'node:path';
import type { TaskEvent } from '../engine/item.js';
import { AppendFile } from '../store/append-file.js';

/** `YYYY-MM-DD` of a UTC day. */
export function utcDay(ms: number): string {
  return new Date(ms).toISOString().slice(0, 10);
}

/**
 * The task history (decisions §5): one JSON line per event in `tasks-YYYY-MM-DD.log` under
 * `<root>/_svcq/tasks/`, group-committed like the store so that an acknowledged transition has
 * its event on disk. It is never pruned: it outlives retention.
 */
export class TaskEventLog {
  private file: AppendFile | undefined;
  private day = '';

  constructor(readonly dir: string) {}

  async append(events: TaskEvent[]): Promise<void> {
    if (events.length === 0) return;
    const day = utcDay(events[0]!.ts);
    if (day !== this.day || !this.file) await this.switchTo(day);
    let lines = '';
    for (const event of events) lines += `${JSON.stringify(event)}\n`;
    await this.file!.append(lines);
  }

  private opening: Promise<void> | undefined;

  private async switchTo(day: string): Promise<void> {
    // Concurrent first appends of a new day share one open.
    while (this.opening) await this.opening;
    if (day === this.day && this.file) return;
    this.opening = (async () => {
      const previous = this.file;
      this.file = await AppendFile.open(path.join(this.dir, `tasks-${day}.log`));
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
    await this.file?.close();
    this.file = undefined;
  }
}
