import { randomBytes } from 'node:crypto';
import { lstat, mkdir, open, opendir, rename, rm } from 'node:fs/promises';
import path from 'node:path';

/** A file written and synced under a temporary name beside its place, not yet in it. */
export interface StagedFile {
  /**
   * Renames it into place and syncs the folder: a crash leaves the old bytes or the new ones.
   * Files staged for one place go there in the order their publish() was called.
   */
  publish(): Promise<void>;
  /** Removes it. */
  discard(): Promise<void>;
}

/**
 * Writes `bytes` to a temporary file beside `file` and syncs it (and any folder made for it); the
 * file itself is untouched until {@link StagedFile.publish}. On failure nothing is left behind.
 */
export async function stageFile(file: string, bytes: Buffer | string): Promise<StagedFile> {
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
      await handle.writeFile(bytes);
      await handle.sync();
    } finally {
      await handle.close();
    }
  } catch (err) {
    await rm(tmp, { force: true });
    throw err;
  }
  const place = async (): Promise<void> => {
    try {
      await rename(tmp, file);
    } catch (err) {
      await rm(tmp, { force: true });
      throw err;
    }
    await fsyncDir(dir);
  };
  return {
    async publish() {
      // Renames of one file take effect in the order they were asked for: run at once, a later
      // one could finish first and an older version would be left in place.
      const before = publishing.get(file);
      const mine = before ? before.then(place, place) : place();
      publishing.set(file, mine);
      try {
        await mine;
      } finally {
        if (publishing.get(file) === mine) publishing.delete(file);
      }
    },
    discard: () => rm(tmp, { force: true }),
  };
}

/** The latest rename asked for, per file, while one is under way. */
const publishing = new Map<string, Promise<void>>();

/**
 * temp file, fsync, rename, fsync of the folder: a crash leaves the old bytes or the new ones,
 * never a torn file. On failure the temp file is removed and nothing else changed.
 */
export async function writeAtomically(file: string, bytes: Buffer | string): Promise<void> {
  await (await stageFile(file, bytes)).publish();
}

/** Makes a folder's entries durable: a created, renamed or removed file survives a crash only once its folder is synced. */
export async function fsyncDir(dir: string): Promise<void> {
  const handle = await open(dir, 'r');
  try {
    await handle.sync();
  } finally {
    await handle.close();
  }
}

/** The name {@link stageFile} gives a file it stages: `.<name>.<12 hex digits>.tmp`. */
const STAGED_NAME = /^\..+\.[0-9a-f]{12}\.tmp$/;

/**
 * Removes the files a crash left staged (neither published nor discarded) in the folders `depth`
 * levels below `dir` (not on the way there, and only in folders `skip` lets through, asked with
 * the levels still to go): names {@link stageFile} gives, last changed before `before` (a file
 * staged since belongs to a request of this process). Folders are read one entry at a time, since
 * one may hold a queue's millions of payloads; `stopped` is asked between entries, so that a stop
 * need not wait for the walk. The number of files removed.
 */
export async function sweepStaged(dir: string, options: { depth: number; before: number; skip?: (name: string, depth: number) => boolean; stopped?: () => boolean }): Promise<number> {
  let removed = 0;
  let folder;
  try {
    folder = await opendir(dir);
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === 'ENOENT') return 0;
    throw err;
  }
  for await (const entry of folder) {
    if (options.stopped?.()) break;
    const at = path.join(dir, entry.name);
    if (entry.isDirectory()) {
      if (options.depth > 0 && !options.skip?.(entry.name, options.depth)) removed += await sweepStaged(at, { ...options, depth: options.depth - 1 });
    } else if (options.depth === 0 && entry.isFile() && STAGED_NAME.test(entry.name)) {
      const st = await lstat(at).catch(() => undefined);
      if (st !== undefined && st.mtimeMs < options.before) {
        await rm(at, { force: true });
        removed++;
      }
    }
  }
  return removed;
}
