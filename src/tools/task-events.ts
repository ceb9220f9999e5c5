import { mkdir, readdir, rm, stat, truncate } from 'node:fs/promises';
import path from 'node:path';
import type { EventBatch, HistoryPosition } from '../store/store.js';
import { fsyncDir } from '../durable-files.js';
import { AppendFile } from '../store/append-file.js';
import { parseTaskFile, taskFileName, utcDay } from './files.js';

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
/** How long event lines gather before they are written and synced together. */
const BATCH_MS = 100;
/** How long a history write that failed waits before it is tried again. */
const RETRY_MS = 1000;

interface Batch {
  day: string;
  lines: string;
  /** Bytes in `lines`. */
  bytes: number;
  /** Each append's promise, settled with the position just past its own lines. */
  appends: Array<{ end: number; resolve: (position: HistoryPosition) => void; reject: (err: Error) => void }>;
}

export class TaskEventLog {
  private file: AppendFile | undefined;
  private day = '';
  private closing = false;

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
   * Appends a batch of events (JSON lines, all of one `ts`) in order; resolves once they are on
   * disk, with the position just past them. Each goes to the day-file of its UTC day.
   *
   * Lines are gathered for up to {@link BATCH_MS} and written and synced together: nobody waits
   * on this file in a request (the store's journal holds the events durably first), so one
   * fdatasync every few hundred milliseconds is enough, and it stays out of the journal's way.
   */
  append(events: EventBatch): Promise<HistoryPosition> {
    const day = this.dayOf(events.ts);
    if (this.batch && this.batch.day !== day) this.writeBatch();
    if (!this.batch) {
      this.batch = { day, lines: '', bytes: 0, appends: [] };
      this.batchTimer = setTimeout(() => this.writeBatch(), BATCH_MS);
    }
    const batch = this.batch;
    batch.lines += events.lines;
    batch.bytes += Buffer.byteLength(events.lines);
    const through = batch.bytes;
    const done = new Promise<HistoryPosition>((resolve, reject) => batch.appends.push({ end: through, resolve, reject }));
    if (batch.bytes >= 1 << 20) this.writeBatch();
    return done;
  }

  private batch: Batch | undefined;
  private batchTimer: NodeJS.Timeout | undefined;
  /** The chain of batch writes, one after another, in order. */
  private writing: Promise<void> = Promise.resolve();

  private writeBatch(): void {
    clearTimeout(this.batchTimer);
    this.batchTimer = undefined;
    const batch = this.batch;
    if (!batch) return;
    this.batch = undefined;
    this.writing = this.writing.then(async () => {
      // The events are durable in the store already; a history write that fails (a full disk) is
      // tried again until it succeeds, and later batches wait behind it, so the history keeps every
      // event, in order. Only a close gives up (the store delivers them again after a restart).
      for (;;) {
        try {
          if (batch.day !== this.day || !this.file) await this.switchTo(batch.day);
          const file = this.file!;
          // The file's size counts what is queued: before queuing, it is where this batch starts.
          const base = file.size;
          await file.append(batch.lines);
          const name = path.basename(file.file);
          for (const a of batch.appends) a.resolve({ file: name, size: base + a.end });
          return;
        } catch (err) {
          if (this.closing) {
            for (const a of batch.appends) a.reject(err as Error);
            return;
          }
          await new Promise((resolve) => setTimeout(resolve, RETRY_MS));
        }
      }
    });
  }

  /**
   * After a crash: cuts the history back to `position` (dropping lines written after the store's
   * last record of it) and removes day-files begun after it. Before any append.
   */
  async recover(position: HistoryPosition | null, now = Date.now()): Promise<HistoryPosition> {
    await mkdir(this.dir, { recursive: true });
    if (!position || !parseTaskFile(position.file)) {
      const file = taskFileName(utcDay(now));
      return { file, size: await stat(path.join(this.dir, file)).then((st) => st.size, () => 0) };
    }
    const target = path.join(this.dir, position.file);
    const size = await stat(target).then((st) => st.size, () => -1);
    if (size > position.size) await truncate(target, position.size);
    for (const name of await readdir(this.dir)) {
      if (parseTaskFile(name) && name > position.file) await rm(path.join(this.dir, name), { force: true });
    }
    return position;
  }

  /** Only called from the chain of batch writes, so never twice at once. */
  private async switchTo(day: string): Promise<void> {
    const previous = this.file;
    this.file = await AppendFile.open(path.join(this.dir, taskFileName(day)));
    // A new day-file's name must survive a crash as well as the bytes written into it.
    await fsyncDir(this.dir);
    this.day = day;
    await previous?.close();
  }

  /** Writes and syncs everything appended so far. */
  async flush(): Promise<void> {
    this.writeBatch();
    await this.writing;
  }

  async close(): Promise<void> {
    this.closing = true;
    await this.flush();
    // What could not be written is delivered again by the store after a restart.
    await this.file?.close().catch(() => undefined);
    this.file = undefined;
    this.day = '';
  }
}
