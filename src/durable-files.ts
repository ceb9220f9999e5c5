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
  // Named as this process's own before the file exists, until it is renamed or removed: no sweep takes it.
  staging.add(tmp);
  try {
    const handle = await open(tmp, 'w', 0o644);
    try {
      await handle.writeFile(bytes);
      await handle.sync();
    } finally {
      await handle.close();
    }
  } catch (err) {
    await rm(tmp, { force: true }).finally(() => staging.delete(tmp));
    throw err;
  }
  return {
    publish: () => placeStaged(tmp, file),
    discard: () => rm(tmp, { force: true }).finally(() => staging.delete(tmp)),
  };
}

/**
 * Renames a staged file into place and syncs the folder (on failure the staged file is removed).
 * Renames of one file take effect in the order they were asked for, counted from this call: run
 * at once, a later one could finish first and an older version would be left in place.
 */
export async function placeStaged(tmp: string, file: string): Promise<void> {
  const place = async (): Promise<void> => {
    try {
      await rename(tmp, file);
    } catch (err) {
      await rm(tmp, { force: true });
      throw err;
    } finally {
      staging.delete(tmp);
    }
    await fsyncDir(path.dirname(file));
  };
  const before = publishing.get(file);
  const mine = before ? before.then(place, place) : place();
  publishing.set(file, mine);
  try {
    await mine;
  } finally {
    if (publishing.get(file) === mine) publishing.delete(file);
  }
}

/** The latest rename asked for, per file, while one is under way. */
const publishing = new Map<string, Promise<void>>();

/** Staged files of this process not yet renamed or removed (their temporary paths). */
const staging = new Set<string>();

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
 * the levels still to go): names {@link stageFile} gives, other than the ones this process is
 * staging (those belong to its requests). `place`, asked first with the staged file and the file
 * it was staged for, may put it there instead (with {@link placeStaged}) and answer true: a crash
 * after a change was made durable and before its file was renamed into place. Folders are read
 * one entry at a time, since one may hold a queue's millions of payloads; `stopped` is asked
 * between entries, so that a stop need not wait for the walk. The number of files removed and
 * put in place.
 */
export async function sweepStaged(dir: string, options: { depth: number; skip?: (name: string, depth: number) => boolean; stopped?: () => boolean; place?: (tmp: string, file: string) => Promise<boolean> }): Promise<{ removed: number; placed: number }> {
  let removed = 0;
  let placed = 0;
  let folder;
  try {
    folder = await opendir(dir);
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === 'ENOENT') return { removed, placed };
    throw err;
  }
  for await (const entry of folder) {
    if (options.stopped?.()) break;
    const at = path.join(dir, entry.name);
    if (entry.isDirectory()) {
      if (options.depth > 0 && !options.skip?.(entry.name, options.depth)) {
        const below = await sweepStaged(at, { ...options, depth: options.depth - 1 });
        removed += below.removed;
        placed += below.placed;
      }
    } else if (options.depth === 0 && entry.isFile() && STAGED_NAME.test(entry.name) && !staging.has(at)) {
      // `.<name>.<12 hex digits>.tmp` was staged for `<name>` beside it.
      if (options.place && (await options.place(at, path.join(dir, entry.name.slice(1, -17))))) placed++;
      else if (await lstat(at).then(() => true, () => false)) {
        await rm(at, { force: true });
        removed++;
      }
    }
  }
  return { removed, placed };
}
