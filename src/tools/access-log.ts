import { closeSync, createWriteStream, fstatSync, ftruncateSync, openSync, readSync, type WriteStream } from 'node:fs';
import { readdir, rename, rm, stat, utimes } from 'node:fs/promises';
import { makeDir } from '../durable-files.js';
import path from 'node:path';
import { finished } from 'node:stream/promises';
import { ACTIVE_LOG, rotatedLogName, rotatedLogTs, sizeOf } from './files.js';
import { jsonString } from '../json-text.js';

/** One access-log line (decisions §5): never a token, never a query string. */
export interface AccessEntry {
  ts: number;
  method: string;
  host: string;
  path: string;
  status: number;
  ms: number;
  bytes: number;
  ip: string;
}

/** Takes access lines off the request path: `record` never waits for a disk. */
export interface AccessLogSink {
  record(entry: AccessEntry): void;
}

export interface AccessLogOptions {
  /** `<root>/_svcq/logs` */
  dir: string;
  /** The active file is rotated once it grows past this many bytes (`--log-max-bytes`). */
  maxBytes: number;
  /** How many rotated files are kept; older ones are removed (`--log-keep`). */
  keep: number;
  warn: (line: string) => void;
}

/**
 * The access log (decisions §5). `record` hands the line to a buffered file stream and returns:
 * a request never waits for a disk, and the lines are not fsynced (an access log promises no
 * durability, and syncing would compete with the store's own group commits). Past `maxBytes` the
 * active file is renamed `access-<ts>.log`, where `ts` is its modification time in ms, made one
 * ms later than the previous rotation's when two land in the same ms, and written back with
 * `utimes` so that name and mtime agree and stay put.
 */
export class AccessLog implements AccessLogSink {
  private stream: WriteStream | undefined;
  /** Lines recorded while a rotation runs: they belong to the next active file. */
  private held: string[] = [];
  private rotating: Promise<void> | undefined;
  private closed = false;
  /** Lines not yet handed to the stream: written together every 100 ms (or per 64 KiB), not one write per request. */
  private pending = '';
  private flushTimer: NodeJS.Timeout | undefined;
  /** A write failed (a full disk, say): part of a line may be in the file, cut off before the next write. */
  private torn = false;

  private constructor(
    private readonly options: AccessLogOptions,
    /** Bytes in the active file, counting what is buffered. */
    private size: number,
    /** `ts` of the newest rotated file. */
    private lastTs: number,
  ) {}

  static async open(options: AccessLogOptions): Promise<AccessLog> {
    await makeDir(options.dir);
    let lastTs = 0;
    for (const name of await readdir(options.dir)) lastTs = Math.max(lastTs, rotatedLogTs(name) ?? 0);
    const log = new AccessLog(options, (await sizeOf(path.join(options.dir, ACTIVE_LOG))) ?? 0, lastTs);
    if (log.size > options.maxBytes) log.rotate();
    return log;
  }

  private get activeFile(): string {
    return path.join(this.options.dir, ACTIVE_LOG);
  }

  record(entry: AccessEntry): void {
    // A request that finishes while the server shuts down has nowhere left to go.
    if (this.closed) return;
    // Built by hand (one line per request); the fields a client controls are escaped.
    const e = entry;
    const line = `{"ts":${e.ts},"method":${jsonString(e.method)},"host":${jsonString(e.host)},"path":${jsonString(e.path)},"status":${e.status},"ms":${e.ms},"bytes":${e.bytes},"ip":${jsonString(e.ip)}}\n`;
    if (this.rotating) {
      this.held.push(line);
      return;
    }
    this.write(line);
    if (this.size > this.options.maxBytes) this.rotate();
  }

  private write(line: string): void {
    this.pending += line;
    this.size += Buffer.byteLength(line);
    if (this.pending.length >= 65536) this.flushPending();
    else if (!this.flushTimer) {
      this.flushTimer = setTimeout(() => this.flushPending(), 100);
      this.flushTimer.unref();
    }
  }

  private flushPending(): void {
    clearTimeout(this.flushTimer);
    this.flushTimer = undefined;
    if (this.pending === '') return;
    if (!this.stream && this.torn) this.cutTornLine();
    this.stream ??= this.openStream();
    this.stream.write(this.pending);
    this.pending = '';
  }

  private openStream(): WriteStream {
    const stream = createWriteStream(this.activeFile, { flags: 'a' });
    stream.on('error', (err) => {
      this.options.warn(`access log: ${err.message}`);
      this.torn = true;
      // The next line opens a fresh stream rather than writing into a broken one.
      if (this.stream === stream) this.stream = undefined;
    });
    return stream;
  }

  /**
   * After a failed write, cuts the active file back to its last whole line, so that the next lines
   * do not continue half of one (decisions §5: one JSON line per request). Synchronous, and only
   * ever after a write failed.
   */
  private cutTornLine(): void {
    this.torn = false;
    let fd: number | undefined;
    try {
      fd = openSync(this.activeFile, 'r+');
      const size = fstatSync(fd).size;
      const tail = Buffer.alloc(Math.min(size, 64 * 1024));
      readSync(fd, tail, 0, tail.length, size - tail.length);
      let keep = size;
      if (tail.length > 0 && tail[tail.length - 1] !== 0x0a) {
        const newline = tail.lastIndexOf(0x0a);
        // A line longer than what was read back: it ends at the start of what was read.
        keep = newline === -1 ? size - tail.length : size - tail.length + newline + 1;
        ftruncateSync(fd, keep);
      }
      // Lines lost with the failed write no longer count towards the rotation.
      this.size = keep + Buffer.byteLength(this.pending);
    } catch (err) {
      this.options.warn(`access log: could not cut off a line a failed write left half-written (${(err as Error).message})`);
    } finally {
      if (fd !== undefined) closeSync(fd);
    }
  }

  private rotate(): void {
    this.flushPending();
    const stream = this.stream;
    this.stream = undefined;
    this.rotating = (async () => {
      try {
        if (stream) await finished(stream.end());
        await this.moveActiveAside();
        await this.prune();
      } catch (err) {
        this.options.warn(`access log rotation: ${(err as Error).message}`);
      }
      this.size = (await sizeOf(this.activeFile).catch(() => null)) ?? 0;
      this.rotating = undefined;
      // The next active file exists from now on, so a reader never sees a moment without one; a
      // close that came meanwhile ends it (an empty file when no line came after).
      this.stream ??= this.openStream();
      const held = this.held;
      this.held = [];
      for (const line of held) this.write(line);
      if (this.size > this.options.maxBytes && !this.closed) this.rotate();
    })();
  }

  private async moveActiveAside(): Promise<void> {
    const info = await stat(this.activeFile);
    const ts = Math.max(Math.round(info.mtimeMs), this.lastTs + 1);
    const target = path.join(this.options.dir, rotatedLogName(ts));
    await rename(this.activeFile, target);
    this.lastTs = ts;
    await utimes(target, ts / 1000, ts / 1000);
  }

  /** Keeps the newest `keep` rotated files. */
  private async prune(): Promise<void> {
    const rotated = (await readdir(this.options.dir))
      .map((name) => ({ name, ts: rotatedLogTs(name) }))
      .filter((f): f is { name: string; ts: number } => f.ts !== undefined)
      .sort((a, b) => a.ts - b.ts);
    for (const old of rotated.slice(0, Math.max(0, rotated.length - this.options.keep))) {
      await rm(path.join(this.options.dir, old.name), { force: true });
    }
  }

  /** Writes every line recorded so far, then closes the file. */
  async close(): Promise<void> {
    this.closed = true;
    while (this.rotating) await this.rotating;
    this.flushPending();
    const stream = this.stream;
    this.stream = undefined;
    if (stream) await finished(stream.end()).catch((err: Error) => this.options.warn(`access log: ${err.message}`));
  }
}

