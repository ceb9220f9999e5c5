import { randomBytes } from 'node:crypto';
import { lstat, mkdir, open, opendir, rename, rm, type FileHandle } from 'node:fs/promises';
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
export async function stageFile(file: string, bytes: Buffer | string, mode = 0o644): Promise<StagedFile> {
  const dir = path.dirname(file);
  await makeDir(dir);
  const tmp = path.join(dir, `.${path.basename(file)}.${randomBytes(6).toString('hex')}.tmp`);
  // Named as this process's own before the file exists, until it is renamed or removed: no sweep takes it.
  staging.add(tmp);
  try {
    const handle = await open(tmp, 'w', mode);
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
export async function writeAtomically(file: string, bytes: Buffer | string, mode?: number): Promise<void> {
  await (await stageFile(file, bytes, mode)).publish();
}

/**
 * Makes `dir` and any missing folder above it, and makes each new one durable: a folder made
 * survives a power cut only once the folder holding it is synced, so each new level's parent is,
 * from the deepest up, before this resolves. A call that finds the folders made by another call
 * still syncing them waits for it: what it goes on to write is acknowledged only on a path that
 * is durable as a whole.
 */
export async function makeDir(dir: string, mode?: number): Promise<void> {
  const at = path.resolve(dir);
  const created = await mkdir(at, { recursive: true, mode });
  let mine: Promise<void> | undefined;
  if (created !== undefined) {
    mine = (async () => {
      for (let level = at; level.length >= created.length; level = path.dirname(level)) await fsyncDir(path.dirname(level));
    })();
    making.set(created, mine);
    try {
      await mine;
    } finally {
      if (making.get(created) === mine) making.delete(created);
    }
  }
  // Folders above the ones made here (or above `dir`) that another call made and is still syncing.
  for (const [top, synced] of making) {
    if (synced !== mine && (at === top || at.startsWith(top + path.sep))) await synced;
  }
}

/** Folders made by {@link makeDir} whose entries are still being synced: the top one made, with its syncing. */
const making = new Map<string, Promise<void>>();

/**
 * Opens `file` with `flags` (which create it when missing) and makes its entry durable by syncing
 * its folder (and any folder made for it) before the handle is handed out: a file created and
 * written is only there after a power cut once the folder that names it is synced.
 */
export async function openDurably(file: string, flags: number | string, mode = 0o644): Promise<FileHandle> {
  await makeDir(path.dirname(file));
  const handle = await open(file, flags, mode);
  try {
    await fsyncDir(path.dirname(file));
  } catch (err) {
    await handle.close();
    throw err;
  }
  return handle;
}

/** Removes files from one folder, then syncs the folder once, so that the removals hold after a power cut. */
export async function removeDurably(dir: string, names: readonly string[]): Promise<void> {
  if (names.length === 0) return;
  for (const name of names) await rm(path.join(dir, name), { force: true });
  await fsyncDir(dir);
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
