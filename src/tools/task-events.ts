import { constants } from 'node:fs';
import { readdir, readFile, stat, truncate, type FileHandle } from 'node:fs/promises';
import path from 'node:path';
import { reason, StoreUnavailable, type EventOutbox, type OutboxEntry } from '../store/store.js';
import { makeDir, openDurably, removeDurably } from '../durable-files.js';
import { AppendFile } from '../store/append-file.js';
import { parseTaskFile, removeOldDayFiles, taskFileName, utcDay } from './files.js';

/**
 * The task history (decisions §5): one JSON line per event in `tasks-YYYY-MM-DD.log` under
 * `<root>/_svcq/tasks/`. It outlives retention; it is pruned only when `keepDays` says so (day-files
 * of days more than that many days past, by UTC date, removed at start and once an hour).
 *
 * It is a projection of the store's outbox: the store writes a change's events in the same durable
 * step as the change, and this takes them from there, appends them to the day-files, syncs them,
 * records how far it got in `position.json` (the last event's number, and the day-file and size
 * that hold it), and only then tells the store it may forget them. After a crash it cuts the
 * history back to that position and takes the rest from the outbox again, so the history holds
 * every event exactly once, and the store knows nothing of files.
 */

/** How often day-files past `keepDays` are looked for. */
const PRUNE_EVERY_MS = 3_600_000;

export interface TaskEventLogOptions {
  /** Day-files of days more than this many days before today (UTC) are removed; 0 keeps every one. */
  keepDays?: number;
  warn?: (line: string) => void;
}

/** How long events gather in the outbox before they are written and synced together. */
const BATCH_MS = 100;
/** How long a history write that failed waits before it is tried again. */
const RETRY_MS = 1000;
/** Outbox entries taken per write. */
const TAKE = 4096;
const POSITION_FILE = 'position.json';
/** The position file's fixed length: its JSON, padded with spaces. */
const POSITION_BYTES = 256;

/** How far the history got: every event through `seq` is in it, and `file` holds exactly `size` bytes. */
interface Position {
  seq: number;
  file: string;
  size: number;
}

/** The history could not be brought up to date (its disk is full, say): the tools endpoints answer 503. */
export class HistoryUnavailable extends StoreUnavailable {
  constructor(cause: Error) {
    super(cause, true);
    this.message = `the task history could not be brought up to date (${reason(cause)}); try again later`;
  }
}

export class TaskEventLog {
  private file: AppendFile | undefined;
  private positionFile: FileHandle | undefined;
  private day = '';
  /**
   * The latest day-file written to (from the position at start): the history never goes back to an
   * earlier day's file. Entries from several nodes' clocks may step back across midnight, and a
   * crash recovery removes every day-file after the recorded one, so writing to an earlier file
   * after a later one would lose the later one's lines.
   */
  private latestDay = '';
  private outbox: EventOutbox | undefined;
  private position: Position | null = null;
  private closing = false;
  private timer: NodeJS.Timeout | undefined;
  /** The chain of writes, one after another, in order. */
  private writing: Promise<void> = Promise.resolve();
  /** Flushes told when a write fails (they answer 503 rather than wait for the disk). */
  private failureWaiters = new Set<(err: Error) => void>();

  private pruneTimer: NodeJS.Timeout | undefined;
  private pruning: Promise<unknown> = Promise.resolve();

  constructor(
    readonly dir: string,
    private readonly options: TaskEventLogOptions = {},
  ) {}

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

  /** The day-file for an entry: its UTC day, or the latest day written to when that is later. */
  private dayFor(ts: number): string {
    const day = this.dayOf(ts);
    return day < this.latestDay ? this.latestDay : day;
  }

  /**
   * Recovers the history (a crash may have left lines past the recorded position: they are cut off,
   * with any day-file begun after it) and starts taking events from `outbox`.
   */
  async start(outbox: EventOutbox): Promise<void> {
    await makeDir(this.dir);
    this.position = await this.readPosition();
    const recorded = this.position ? null : outbox.recordedHistoryPosition?.();
    if (recorded && parseTaskFile(recorded.file)) {
      // A history written by a build that kept its position in the store's records: lines written
      // after the last of them (a crash came before the next) are handed over again, so they are cut.
      await this.recordPosition(recorded);
      this.position = recorded;
    }
    if (!this.position && !(await readdir(this.dir)).some((name) => parseTaskFile(name))) {
      // A new history records where it starts before its first write: a crash between that
      // write and its position would otherwise leave lines the outbox hands over again.
      // Named for the day of the first event waiting in the outbox (today if none): the history never goes back a day.
      // An outbox filled from a shared database holds nothing before its first read: a node that
      // joins with no history waits for it, or it would file every earlier day's events under today.
      let first = outbox.readEvents(0, 1)[0];
      if (!first && outbox.catchUp) {
        await outbox.catchUp().catch(() => undefined);
        first = outbox.readEvents(0, 1)[0];
      }
      const start: Position = { seq: 0, file: taskFileName(utcDay(first?.ts ?? Date.now())), size: 0 };
      await this.recordPosition(start);
      this.position = start;
    }
    const p = this.position;
    if (p) {
      this.latestDay = parseTaskFile(p.file)!.date;
      const target = path.join(this.dir, p.file);
      const size = await stat(target).then((st) => st.size, () => -1);
      if (size > p.size) await truncate(target, p.size);
      // Durably: a day-file that came back after a power cut would have new lines appended to its stale ones.
      await removeDurably(this.dir, (await readdir(this.dir)).filter((name) => parseTaskFile(name) && name > p.file));
    }
    this.outbox = outbox;
    outbox.onEvents(() => this.schedule());
    this.schedule();
    if ((this.options.keepDays ?? 0) > 0) {
      const prune = (): void => {
        this.pruning = this.prune().catch((err: Error) => this.options.warn?.(`could not remove old task-history files: ${err.message}`));
      };
      prune();
      this.pruneTimer = setInterval(prune, PRUNE_EVERY_MS).unref();
    }
  }

  /**
   * Removes the day-files of days more than `keepDays` before `now`'s UTC day (never the day-file
   * the history writes to, nor a later one); the names removed.
   */
  prune(now = Date.now()): Promise<string[]> {
    return removeOldDayFiles(this.dir, (name) => parseTaskFile(name)?.date, this.options.keepDays ?? 0, now, (day) => day >= this.latestDay || this.closing);
  }

  private async readPosition(): Promise<Position | null> {
    try {
      const p = JSON.parse((await readFile(path.join(this.dir, POSITION_FILE), 'utf8')).trim()) as Position;
      return typeof p.seq === 'number' && typeof p.size === 'number' && typeof p.file === 'string' && parseTaskFile(p.file) ? p : null;
    } catch {
      // None yet (a new root, or one written before the position was kept here): the history's
      // files hold what the store's last mark says, and what the outbox holds follows them.
      return null;
    }
  }

  /** Events gather for up to {@link BATCH_MS}: nobody waits on this file in a request (the store holds the events durably first). */
  private schedule(): void {
    if (this.timer || this.closing) return;
    this.timer = setTimeout(() => {
      this.timer = undefined;
      void this.drain();
    }, BATCH_MS);
  }

  /**
   * Writes what the outbox holds (one write, of up to {@link TAKE} entries; with `all`, until it is
   * empty); resolves once that is in the history (or, closing, given up). Under a steady load the
   * history so writes once per {@link BATCH_MS}, not back to back: its syncs share the disk with
   * the store's.
   */
  private drain(all = false): Promise<void> {
    this.writing = this.writing.then(async () => {
      for (;;) {
        const entries = this.outbox?.readEvents(this.position?.seq ?? 0, TAKE) ?? [];
        if (entries.length === 0) return;
        if (!(await this.write(entries))) return;
        if (!all) {
          // More came meanwhile: the next write comes after the next gathering.
          if (entries.length === TAKE || (this.outbox?.readEvents(this.position?.seq ?? 0, 1).length ?? 0) > 0) this.schedule();
          return;
        }
      }
    });
    return this.writing;
  }

  /**
   * Appends entries to their day-files and records the position. A write that fails (a full disk)
   * is tried again until it succeeds; later entries wait behind it. Only a close gives up (the
   * outbox hands them over again after a restart).
   */
  private async write(entries: OutboxEntry[]): Promise<boolean> {
    // Entries up to `at` are in their day-files: a retry goes on from there, so entries written
    // to one day's file before a failure in the next day's are not written again.
    let at = 0;
    for (;;) {
      try {
        while (at < entries.length) {
          const day = this.dayFor(entries[at]!.ts);
          const lines: string[] = [];
          let end = at;
          for (; end < entries.length && this.dayFor(entries[end]!.ts) === day; end++) for (const piece of entries[end]!.lines) lines.push(piece);
          if (day !== this.day || !this.file) await this.switchTo(day);
          await this.file!.append(lines);
          at = end;
        }
        const seq = entries[entries.length - 1]!.seq;
        const position: Position = { seq, file: path.basename(this.file!.file), size: this.file!.size };
        await this.recordPosition(position);
        this.position = position;
        this.outbox?.eventsDelivered(seq);
        return true;
      } catch (err) {
        for (const told of [...this.failureWaiters]) told(err as Error);
        if (this.closing) return false;
        await new Promise((resolve) => setTimeout(resolve, RETRY_MS));
      }
    }
  }

  /**
   * Records the position with one synced write in place: a few dozen bytes at offset 0, padded to
   * a fixed length, which a disk writes whole (one sector). A rename per write would cost two more
   * syncs every {@link BATCH_MS}, on the disk the store's journal needs.
   */
  private async recordPosition(position: Position): Promise<void> {
    if (!this.positionFile) {
      this.positionFile = await openDurably(path.join(this.dir, POSITION_FILE), constants.O_WRONLY | constants.O_CREAT | constants.O_DSYNC);
    }
    const text = JSON.stringify(position).padEnd(POSITION_BYTES, ' ');
    await this.positionFile.write(text, 0, 'utf8');
  }

  /** Only called from the chain of writes, so never twice at once. */
  private async switchTo(day: string): Promise<void> {
    const previous = this.file;
    // A new day-file's name survives a crash as well as the bytes written into it (the open syncs the folder).
    this.file = await AppendFile.open(path.join(this.dir, taskFileName(day)));
    if (day > this.latestDay) this.latestDay = day;
    this.day = day;
    await previous?.close();
  }

  /**
   * Writes and syncs every event made durable before the call (the outbox catches up first).
   * While the history cannot be written (a full disk), it rejects with {@link StoreUnavailable}
   * at the next failed try (within a second) rather than wait for the disk.
   */
  async flush(): Promise<void> {
    await this.outbox?.catchUp?.();
    let told!: (err: Error) => void;
    const failed = new Promise<never>((_, reject) => {
      told = (err) => reject(new HistoryUnavailable(err));
    });
    this.failureWaiters.add(told);
    try {
      await Promise.race([this.drain(true), failed]);
    } finally {
      this.failureWaiters.delete(told);
    }
  }

  async close(): Promise<void> {
    clearTimeout(this.timer);
    this.timer = undefined;
    clearInterval(this.pruneTimer);
    // A last write; one that fails is not tried again.
    this.closing = true;
    await this.drain(true);
    // What could not be written is handed over again by the store after a restart.
    await this.file?.close().catch(() => undefined);
    await this.positionFile?.close().catch(() => undefined);
    this.positionFile = undefined;
    this.file = undefined;
    this.day = '';
    await this.pruning;
  }
}
