import { randomBytes } from 'node:crypto';
import { mkdir, open, rename, rm } from 'node:fs/promises';
import path from 'node:path';
import type { PayloadKind, StagedPayload } from '../store/store.js';
import { fsyncDir } from '../durable-files.js';

/** `<dir>/<host>/<queue>/<id>.<kind>`: callers pass only validated host, queue, id and kind. */
export function payloadFile(dir: string, host: string, queue: string, id: string, kind: PayloadKind): string {
  return path.join(dir, host, queue, `${id}.${kind}`);
}

/**
 * Archived payloads (decisions §5): the exact bytes of an item, its latest accepted progress, its
 * result and its latest error, one file each under `<root>/_svcq/payloads/<host>/<queue>/<id>.<kind>`,
 * written before the reply that accepted them. They survive retention.
 *
 * A payload is staged first (written and synced under a temporary name beside its place) and
 * published by a rename only once the store has made its change durable, so that a change that
 * could not be written leaves no payload behind.
 */
export class PayloadArchive {
  constructor(readonly dir: string) {}

  fileFor(host: string, queue: string, id: string, kind: PayloadKind): string {
    return payloadFile(this.dir, host, queue, id, kind);
  }

  async stage(host: string, queue: string, id: string, kind: PayloadKind, body: string): Promise<StagedPayload> {
    const file = this.fileFor(host, queue, id, kind);
    const dir = path.dirname(file);
    const created = await mkdir(dir, { recursive: true });
    // A folder made just now is only durable once the entry naming it is: fsync each new level's parent.
    if (created !== undefined) {
      for (let at = dir; at.length >= created.length; at = path.dirname(at)) await fsyncDir(path.dirname(at));
    }
    const tmp = path.join(dir, `.${path.basename(file)}.${randomBytes(6).toString('hex')}.tmp`);
    try {
      const handle = await open(tmp, 'w', 0o644);
      try {
        await handle.writeFile(body);
        await handle.sync();
      } finally {
        await handle.close();
      }
    } catch (err) {
      await rm(tmp, { force: true });
      throw err;
    }
    return {
      async publish() {
        await rename(tmp, file);
        await fsyncDir(dir);
      },
      discard: () => rm(tmp, { force: true }),
    };
  }
}
