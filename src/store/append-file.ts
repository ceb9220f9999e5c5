import { close, constants, fstat, open, write, type PathLike } from 'node:fs';
import { mkdir } from 'node:fs/promises';
import path from 'node:path';

type Waiter = { resolve: () => void; reject: (err: Error) => void };

/**
 * An append-only file with group commit. `append` queues text; whatever was queued while the
 * previous write ran goes out in one write, and every caller's promise resolves once the write
 * that carried its text is on disk. A lone append starts at once (on the next turn of the event
 * loop, so that appends made in the same turn share it), never after a timer.
 *
 * The file is opened with O_DSYNC and written at explicit offsets: each write returns only once
 * its data (and the file size) is durable, in one system call rather than a write and an
 * fdatasync, each of which is a round trip through libuv's thread pool.
 */
export class AppendFile {
  private queued = '';
  private waiters: Waiter[] = [];
  private flushing = false;
  private scheduled = false;
  private closed = false;
  /** Bytes in the file, counting what is queued. */
  size: number;
  /** Bytes handed to the file so far: where the next write goes. */
  private written: number;

  private constructor(
    readonly file: string,
    private readonly fd: number,
    size: number,
  ) {
    this.size = size;
    this.written = size;
  }

  static async open(file: string): Promise<AppendFile> {
    await mkdir(path.dirname(file), { recursive: true });
    const flags = constants.O_WRONLY | constants.O_CREAT | constants.O_DSYNC;
    const fd = await new Promise<number>((resolve, reject) => open(file as PathLike, flags, 0o644, (err, fd) => (err ? reject(err) : resolve(fd))));
    const size = await new Promise<number>((resolve, reject) => fstat(fd, (err, st) => (err ? reject(err) : resolve(st.size))));
    return new AppendFile(file, fd, size);
  }

  /** Queues text and resolves once it is on disk. */
  append(text: string): Promise<void> {
    return new Promise((resolve, reject) => {
      this.enqueue(text);
      this.waiters.push({ resolve, reject });
    });
  }

  /** Queues text without waiting for it; it is written with the next group. */
  appendLater(text: string): void {
    this.enqueue(text);
  }

  private enqueue(text: string): void {
    if (this.closed) throw new Error(`${this.file} is closed`);
    this.queued += text;
    this.size += Buffer.byteLength(text);
    if (!this.flushing && !this.scheduled) {
      this.scheduled = true;
      setImmediate(() => {
        this.scheduled = false;
        this.flush();
      });
    }
  }

  private flush(): void {
    if (this.flushing || (this.queued === '' && this.waiters.length === 0)) return;
    this.flushing = true;
    // One conversion per group rather than one per append.
    const data = Buffer.from(this.queued);
    const waiters = this.waiters;
    this.queued = '';
    this.waiters = [];
    const offset = this.written;
    this.written += data.length;
    this.writeAll(data, 0, offset, (err) => {
      if (err) {
        // The next group goes where this one should have been: no hole of zeros in the file.
        this.written = offset;
        this.size -= data.length;
      }
      if (err) waiters.forEach((w) => w.reject(err));
      else waiters.forEach((w) => w.resolve());
      this.flushing = false;
      if (this.queued !== '' || this.waiters.length > 0) this.flush();
    });
  }

  private writeAll(data: Buffer, from: number, offset: number, done: (err: Error | null) => void): void {
    if (from === data.length) return done(null);
    write(this.fd, data, from, data.length - from, offset + from, (err, n) => {
      if (err) return done(err);
      this.writeAll(data, from + n, offset, done);
    });
  }

  /** Resolves when everything queued so far is on disk. */
  sync(): Promise<void> {
    if (this.queued === '' && this.waiters.length === 0 && !this.flushing) return Promise.resolve();
    // An empty append joins the next group, which is written after everything queued before it.
    return this.append('');
  }

  /** Writes what is queued, then closes the file. */
  async close(): Promise<void> {
    if (this.closed) return;
    await this.sync();
    this.closed = true;
    await new Promise<void>((resolve, reject) => close(this.fd, (err) => (err ? reject(err) : resolve())));
  }
}
