import { close, constants, fdatasync, fstat, ftruncate, open, write, type PathLike } from 'node:fs';
import { open as openHandle } from 'node:fs/promises';
import { fsyncDir, makeDir } from '../durable-files.js';
import path from 'node:path';

export type Waiter = { resolve: () => void; reject: (err: Error) => void };

/**
 * An append-only file with group commit. `append` queues text; whatever was queued while the
 * previous write ran goes out in one write, and every caller's promise resolves once the write
 * that carried its text is on disk. A lone append starts at once (on the next turn of the event
 * loop, so that appends made in the same turn share it), never after a timer.
 *
 * The file is opened with O_DSYNC and written at explicit offsets: each write returns only once
 * its data (and the file size) is durable, in one system call rather than a write and an
 * fdatasync, each of which is a round trip through libuv's thread pool.
 *
 * With `preallocate`, the file is kept zero-filled for a stretch ahead of its data (the zeros
 * written through a second descriptor and synced in the background). A write into blocks that
 * already exist changes no metadata, so its O_DSYNC returns after the data alone, without a
 * journal commit for the new size: about 0.15 ms instead of 0.25 here. A reader of such a file
 * must take its first NUL byte as the end of the data (text written here never holds one), and
 * `open` finds the end of the data the same way. `close` cuts the zeros off again.
 */
export class AppendFile {
  /**
   * What is queued, already encoded: each append is written into this buffer as it comes, so its
   * size in bytes is known at once and a group goes to the file as it lies here. (Text gathered as
   * one string and encoded per group made V8 flatten a rope of every append, and measuring it for
   * the zeros ahead cost as much again: a batch of 1,000 posts spent a third of its time there.)
   */
  private queued: Buffer = Buffer.allocUnsafeSlow(QUEUE_FIRST);
  private queuedBytes = 0;
  /** The buffer of the last group written, reused for the next one but one. */
  private spare: Buffer | undefined;
  private waiters: Waiter[] = [];
  private flushing = false;
  private scheduled = false;
  private closed = false;
  /** Bytes handed to the file so far: where the next write goes. */
  private written: number;

  /** Bytes in the file, data and zeros ahead of it. */
  private allocated: number;
  /** Set while zeros are being written from `zeroFrom` on; no data is written past that meanwhile. */
  private zeroing: Promise<void> | undefined;
  private zeroFrom = 0;
  /** The next stretch of zeros to add (it doubles, up to `options.preallocate`), and the last one added. */
  private nextStretch: number;
  private lastStretch = 0;
  /** Bytes that go before the first data written from now on (see {@link prefixFirstWrite}), until a write carrying them succeeds. */
  private prefix: Buffer | undefined;
  /** Where the prefix is: waiting for data, in the queue, or in the write under way. */
  private prefixAt: 'waiting' | 'queued' | 'writing' = 'waiting';
  /** Bytes a failed write left behind at the end of the data: zeroed before the next write, so that no part of it is ever read back. */
  private scrub: { offset: number; length: number } | undefined;

  private constructor(
    readonly file: string,
    private readonly fd: number,
    size: number,
    allocated: number,
    private readonly options: AppendFileOptions,
  ) {
    this.written = size;
    this.allocated = allocated;
    this.nextStretch = Math.min(PREALLOCATE_FIRST, options.preallocate ?? 0);
  }

  /**
   * Opens `file` for appending, creating it (and its folders) when missing. Its entry is durable
   * when this resolves (its folder is synced after the open, as any folder made for it): what is
   * appended to it is acknowledged only in a file a power cut cannot take away.
   */
  static async open(file: string, options: AppendFileOptions = {}): Promise<AppendFile> {
    await makeDir(path.dirname(file));
    const flags = constants.O_WRONLY | constants.O_CREAT | constants.O_DSYNC;
    const fd = await new Promise<number>((resolve, reject) => open(file as PathLike, flags, 0o644, (err, fd) => (err ? reject(err) : resolve(fd))));
    try {
      await fsyncDir(path.dirname(file));
    } catch (err) {
      close(fd, () => {});
      throw err;
    }
    const size = await new Promise<number>((resolve, reject) => fstat(fd, (err, st) => (err ? reject(err) : resolve(st.size))));
    const end = options.preallocate ? await dataEnd(file, size) : size;
    const appender = new AppendFile(file, fd, end, size, options);
    appender.preallocate();
    return appender;
  }

  /** Bytes in the file, counting what is queued. */
  get size(): number {
    return this.written + this.queuedBytes;
  }

  /** Starts writing the next stretch of zeros once the data has used half of the last one. */
  private preallocate(): void {
    if (this.zeroing !== undefined || this.closed || this.nextStretch <= 0 || this.allocated - this.size > this.lastStretch / 2) return;
    // Past the group end the queued data gets when it is written, too.
    const from = Math.max(this.allocated, this.size + this.endBytes());
    const to = from + this.nextStretch;
    this.zeroFrom = from;
    this.zeroing = writeZeros(this.file, from, to).then(
      () => {
        this.allocated = to;
        this.lastStretch = to - from;
        this.nextStretch = Math.min(this.nextStretch * 2, this.options.preallocate ?? 0);
      },
      (err: Error) => {
        // A full disk, say: the file simply grows with each write, as without preallocation.
        this.nextStretch = 0;
        this.options.warn?.(`${this.file}: could not write zeros ahead of the data (${err.message}); appending without them`);
      },
    ).finally(() => {
      this.zeroing = undefined;
      this.flush();
    });
  }

  /** Queues text (or its pieces, in order) and resolves once it is on disk. */
  append(text: string | readonly string[]): Promise<void> {
    return new Promise((resolve, reject) => {
      this.enqueue(text);
      this.waiters.push({ resolve, reject });
    });
  }

  /**
   * Queues text for callers who are already waiting (a journal's appends held at a switch): they
   * are settled with the group that carries it, in their order and before anyone who appends
   * after this, exactly as if each had called `append` here.
   */
  appendFor(text: string, waiters: readonly Waiter[]): void {
    this.enqueue(text);
    for (const w of waiters) this.waiters.push(w);
  }

  /** Queues text (or its pieces, in order) without waiting for it; it is written with the next group. */
  appendLater(text: string | readonly string[]): void {
    this.enqueue(text);
  }

  /**
   * `bytes` go in front of the next data appended, in the same write, and again in front of the
   * data after it if that write fails: the file gets them only together with data, never in a
   * write of their own (which could fail while nobody's append is in it).
   */
  prefixFirstWrite(bytes: Buffer): void {
    this.prefix = bytes;
  }

  private enqueue(text: string | readonly string[]): void {
    if (typeof text !== 'string') {
      // Each piece is encoded as it is: joined first, they would be copied once more.
      for (const piece of text) this.enqueue(piece);
      if (text.length > 0) return;
      text = '';
    }
    if (this.closed) throw new Error(`${this.file} is closed`);
    if (text !== '' && this.prefix !== undefined && this.prefixAt === 'waiting') {
      if (this.queuedBytes + this.prefix.length > this.queued.length) this.grow(this.queuedBytes + this.prefix.length);
      this.queuedBytes += this.prefix.copy(this.queued, this.queuedBytes);
      this.prefixAt = 'queued';
    }
    if (text !== '') {
      // A UTF-16 unit takes at most three bytes.
      if (this.queuedBytes + 3 * text.length > this.queued.length) this.grow(this.queuedBytes + 3 * text.length);
      this.queuedBytes += this.queued.write(text, this.queuedBytes);
    }
    if (!this.flushing && !this.scheduled) {
      this.scheduled = true;
      setImmediate(() => {
        this.scheduled = false;
        this.flush();
      });
    }
  }

  /** The bytes of the group end the queued data gets when it is written (see `groupEnd`). */
  private endBytes(): number {
    return this.queuedBytes > 0 ? (this.options.groupEnd?.length ?? 0) : 0;
  }

  private grow(needed: number): void {
    const bigger = Buffer.allocUnsafeSlow(Math.max(needed, 2 * this.queued.length));
    this.queued.copy(bigger, 0, 0, this.queuedBytes);
    this.queued = bigger;
  }

  private flush(): void {
    if (this.flushing || (this.queuedBytes === 0 && this.waiters.length === 0)) return;
    // Data never goes where zeros are still being written: it would race them (its group end included).
    if (this.zeroing !== undefined && this.size + this.endBytes() > this.zeroFrom) return;
    this.flushing = true;
    // The group's last bytes say it is whole (see `groupEnd`).
    const end = this.options.groupEnd;
    if (end !== undefined && this.queuedBytes > 0) {
      if (this.queuedBytes + end.length > this.queued.length) this.grow(this.queuedBytes + end.length);
      this.queuedBytes += end.copy(this.queued, this.queuedBytes);
    }
    const buffer = this.queued;
    const data = buffer.subarray(0, this.queuedBytes);
    const waiters = this.waiters;
    const carriesPrefix = this.prefixAt === 'queued';
    if (carriesPrefix) this.prefixAt = 'writing';
    this.queued = this.spare ?? Buffer.allocUnsafeSlow(QUEUE_FIRST);
    this.spare = undefined;
    this.queuedBytes = 0;
    this.waiters = [];
    const offset = this.written;
    this.written += data.length;
    const started = this.options.onGroup ? performance.now() : 0;
    const finish = (err: Error | null): void => {
      if (err) this.failed(err, offset, data.length, waiters);
      else {
        if (carriesPrefix) {
          this.prefix = undefined;
          this.prefixAt = 'waiting';
        }
        // A group of appendLater text alone (bookkeeping no caller waits for) is not reported.
        if (waiters.length > 0) this.options.onGroup?.((performance.now() - started) / 1000, waiters.length);
        waiters.forEach((w) => w.resolve());
      }
      // The group's buffer is free again (one grown past QUEUE_KEEP for a burst is left to the GC).
      if (buffer.length <= QUEUE_KEEP) this.spare = buffer;
      this.flushing = false;
      this.preallocate();
      if (this.queuedBytes > 0 || this.waiters.length > 0) this.flush();
    };
    const scrub = this.scrub;
    if (scrub === undefined) return this.writeAll(data, 0, offset, finish);
    // What a failed write may have left must be gone before anything is written after it: zeros
    // over whatever of its range the file holds (never past the file's end, which a full disk refuses).
    fstat(this.fd, (statErr, st) => {
      if (statErr) return finish(statErr);
      const length = Math.min(scrub.offset + scrub.length, st.size) - scrub.offset;
      const zeroed = (err: Error | null): void => {
        if (err) return finish(err);
        this.scrub = undefined;
        this.writeAll(data, 0, offset, finish);
      };
      if (length <= 0) zeroed(null);
      else this.writeAll(Buffer.alloc(length), 0, scrub.offset, zeroed);
    });
  }

  /**
   * A group could not be written (a full disk, an I/O error). Its appends fail, and so does
   * everything queued after it: a later record may depend on one of this group's (a claim of an
   * item whose post was here), so nothing queued before the failure is written at all. The
   * owner's `onFailure` hears of it first, synchronously, before any of those promises settles.
   * The next group goes where this one should have been (no hole in the file), over zeros where
   * part of this one reached the disk.
   */
  private failed(err: Error, offset: number, length: number, waiters: Waiter[]): void {
    const later = this.waiters;
    this.queuedBytes = 0;
    this.waiters = [];
    this.written = offset;
    // The prefix goes in front of the next data again: the write that carried it, or the queue that held it, is gone.
    this.prefixAt = 'waiting';
    // A write that reports an error may still have put some of its bytes on disk: all of its range is scrubbed.
    if (length > 0) this.scrub = { offset, length: Math.max(length, this.scrub?.length ?? 0) };
    this.options.onFailure?.(err);
    for (const w of waiters) w.reject(err);
    for (const w of later) w.reject(err);
  }

  /** Writes all of `data` at `offset`; `done` gets the first error. */
  private writeAll(data: Buffer, from: number, offset: number, done: (err: Error | null) => void): void {
    if (from === data.length) return done(null);
    (this.options.write ?? write)(this.fd, data, from, data.length - from, offset + from, (err, n) => {
      if (err) return done(err);
      this.writeAll(data, from + n, offset, done);
    });
  }

  /** Resolves when everything queued so far is on disk. */
  sync(): Promise<void> {
    if (this.queuedBytes === 0 && this.waiters.length === 0 && !this.flushing) return Promise.resolve();
    // An empty append joins the next group, which is written after everything queued before it.
    return this.append('');
  }

  /** Writes what is queued, cuts off any zeros ahead of the data, then closes the file. */
  async close(): Promise<void> {
    if (this.closed) return;
    // A last group that cannot be written still lets the file close; the failure is reported after.
    const synced = await this.sync().then(
      () => undefined,
      (err: Error) => err,
    );
    this.closed = true;
    await this.zeroing;
    try {
      // Also after a stretch of zeros failed halfway (a full disk): whatever lies past the data goes.
      if (this.options.preallocate) {
        await new Promise<void>((resolve, reject) => ftruncate(this.fd, this.written, (err) => (err ? reject(err) : resolve())));
        await new Promise<void>((resolve, reject) => fdatasync(this.fd, (err) => (err ? reject(err) : resolve())));
      }
    } finally {
      await new Promise<void>((resolve, reject) => close(this.fd, (err) => (err ? reject(err) : resolve())));
    }
    if (synced) throw synced;
  }
}

export interface AppendFileOptions {
  /** Keep up to this many bytes of zeros written ahead of the data (0 or absent: none). */
  preallocate?: number;
  warn?: (line: string) => void;
  /** Told, before any append's promise is rejected, that a write failed and everything queued was dropped. */
  onFailure?: (err: Error) => void;
  /** The write system call (fs.write); tests put one here that fails on cue. */
  write?: WriteFn;
  /** Told of every group made durable that an append waited for: how long its write took, and how many appends waited for it. */
  onGroup?: (seconds: number, appends: number) => void;
  /**
   * Bytes written at the end of every group that holds data, in the same write: a reader that
   * finds a group without them knows its write never finished (a crash cut it short), so that
   * none of it was acknowledged.
   */
  groupEnd?: Buffer;
}

export type WriteFn = (fd: number, buffer: Buffer, offset: number, length: number, position: number, callback: (err: NodeJS.ErrnoException | null, written: number) => void) => void;

/** The queue's first buffer; it doubles as appends need, and one of up to QUEUE_KEEP is kept for reuse. */
const QUEUE_FIRST = 64 * 1024;
const QUEUE_KEEP = 4 * 1024 * 1024;

/** The first stretch of zeros; later ones double up to `preallocate`, so a small file stays small. */
const PREALLOCATE_FIRST = 1 << 20;
const ZEROS = Buffer.alloc(1 << 20);

/** Writes zeros over [from, to) through a descriptor of its own, then syncs them and the new size. */
async function writeZeros(file: string, from: number, to: number): Promise<void> {
  const handle = await openHandle(file, 'r+');
  try {
    for (let at = from; at < to; ) at += (await handle.write(ZEROS, 0, Math.min(ZEROS.length, to - at), at)).bytesWritten;
    await handle.datasync();
  } finally {
    await handle.close();
  }
}

/** Where the data of a preallocated file ends: after its last byte that is not NUL. */
async function dataEnd(file: string, size: number): Promise<number> {
  const handle = await openHandle(file, 'r');
  try {
    const buffer = Buffer.alloc(64 * 1024);
    for (let end = size; end > 0; ) {
      const start = Math.max(0, end - buffer.length);
      const { bytesRead } = await handle.read(buffer, 0, end - start, start);
      for (let i = bytesRead - 1; i >= 0; i--) if (buffer[i] !== 0) return start + i + 1;
      end = start;
    }
    return 0;
  } finally {
    await handle.close();
  }
}
