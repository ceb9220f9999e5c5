import { close, fdatasync, fstat, open, write, type PathLike } from 'node:fs';
import { mkdir } from 'node:fs/promises';
import path from 'node:path';

/**
 * An append-only file with group commit. `append` queues bytes; whatever was queued while the
 * previous write + fdatasync ran is written and synced in one go, and every caller's promise
 * resolves after the sync that covered its bytes. A lone append starts at once (on the next turn
 * of the event loop, so that appends made in the same turn share it), never after a timer.
 */
export class AppendFile {
  private queued: Buffer[] = [];
  private queuedBytes = 0;
  private waiters: Array<{ resolve: () => void; reject: (err: Error) => void }> = [];
  private flushing = false;
  private scheduled = false;
  private closed = false;
  /** Bytes in the file, counting what is queued. */
  size: number;

  private constructor(
    readonly file: string,
    private readonly fd: number,
    size: number,
  ) {
    this.size = size;
  }

  static async open(file: string): Promise<AppendFile> {
    await mkdir(path.dirname(file), { recursive: true });
    const fd = await new Promise<number>((resolve, reject) => open(file as PathLike, 'a', 0o644, (err, fd) => (err ? reject(err) : resolve(fd))));
    const size = await new Promise<number>((resolve, reject) => fstat(fd, (err, st) => (err ? reject(err) : resolve(st.size))));
    return new AppendFile(file, fd, size);
  }

  /** Queues bytes and resolves once they are on disk. */
  append(data: string | Buffer): Promise<void> {
    return new Promise((resolve, reject) => {
      this.enqueue(data);
      this.waiters.push({ resolve, reject });
    });
  }

  /** Queues bytes without waiting for them; they are written with the next group. */
  appendLater(data: string | Buffer): void {
    this.enqueue(data);
  }

  private enqueue(data: string | Buffer): void {
    if (this.closed) throw new Error(`${this.file} is closed`);
    const buf = typeof data === 'string' ? Buffer.from(data) : data;
    this.queued.push(buf);
    this.queuedBytes += buf.length;
    this.size += buf.length;
    if (!this.flushing && !this.scheduled) {
      this.scheduled = true;
      setImmediate(() => {
        this.scheduled = false;
        this.flush();
      });
    }
  }

  private flush(): void {
    if (this.flushing || this.queued.length === 0) return;
    this.flushing = true;
    const data = this.queued.length === 1 ? this.queued[0]! : Buffer.concat(this.queued, this.queuedBytes);
    const waiters = this.waiters;
    this.queued = [];
    this.queuedBytes = 0;
    this.waiters = [];
    this.writeAll(data, 0, (err) => {
      if (err) waiters.forEach((w) => w.reject(err));
      else waiters.forEach((w) => w.resolve());
      this.flushing = false;
      if (this.queued.length > 0) this.flush();
    });
  }

  private writeAll(data: Buffer, offset: number, done: (err: Error | null) => void): void {
    write(this.fd, data, offset, data.length - offset, null, (err, written) => {
      if (err) return done(err);
      if (offset + written < data.length) return this.writeAll(data, offset + written, done);
      fdatasync(this.fd, done);
    });
  }

  /** Resolves when everything queued so far is on disk. */
  sync(): Promise<void> {
    if (this.queued.length === 0 && !this.flushing) return Promise.resolve();
    // An empty append joins the next group, which is written after everything queued before it.
    return this.append(Buffer.alloc(0));
  }

  /** Writes what is queued, then closes the file. */
  async close(): Promise<void> {
    if (this.closed) return;
    await this.sync();
    this.closed = true;
    await new Promise<void>((resolve, reject) => close(this.fd, (err) => (err ? reject(err) : resolve())));
  }
}
