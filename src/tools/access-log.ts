import path from 'node:path';
import type { AccessEntry, AccessLogSink } from '../http/context.js';
import { AppendFile } from '../store/append-file.js';

/**
 * The access log (decisions §5): lines are queued in memory and written by the file's own group
 * writes, so a request never waits for them.
 */
export class AccessLog implements AccessLogSink {
  private constructor(private readonly file: AppendFile) {}

  static async open(dir: string): Promise<AccessLog> {
    return new AccessLog(await AppendFile.open(path.join(dir, 'access.log')));
  }

  record(entry: AccessEntry): void {
    this.file.appendLater(`${JSON.stringify(entry)}\n`);
  }

  close(): Promise<void> {
    return this.file.close();
  }
}
