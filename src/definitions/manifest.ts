import { createHash } from 'node:crypto';
import { lstat, readdir, readFile, stat } from 'node:fs/promises';
import path from 'node:path';
import { FOLDER, isHost, parseDefinitionPath, type DefinitionPath } from './names.js';

/** A manifest: server-relative definition path → lowercase sha256 hex of the file's bytes. */
export type Manifest = Record<string, string>;

export function sha256Hex(bytes: Buffer | string): string {
  return createHash('sha256').update(bytes).digest('hex');
}

export interface FoundDefinition extends DefinitionPath {
  file: string;
}

/** A place below the root that may hold definitions but could not be read: its definitions are unknown. */
export interface UnreadableEntry {
  /** Relative to the root: a host folder, a definition folder or a definition file. */
  path: string;
  problem: string;
}

/**
 * Finds `<host>/svc-queues/*.json` and `<host>/svc-users/*.json` below `root`, the only files
 * that sync (interface, synchronisation flow step 1). Folders that are not valid hosts, and
 * files whose names break the name rule, are returned in `skipped` so the caller can say so.
 * A definition folder that exists but cannot be read, and a link that would be a host folder or a
 * definition file but leads nowhere, are returned in `unreadable`: what they hold is unknown, and
 * taking them for empty would make a sync delete the definitions they hold on the server.
 */
export async function scanDefinitions(root: string): Promise<{ found: FoundDefinition[]; skipped: string[]; unreadable: UnreadableEntry[] }> {
  const found: FoundDefinition[] = [];
  const skipped: string[] = [];
  const unreadable: UnreadableEntry[] = [];
  const hosts = await entriesOf(root, 'directory');
  for (const link of hosts.broken.filter(isHost)) unreadable.push({ path: link, problem: 'a symbolic link that leads nowhere' });
  for (const host of hosts.names.sort()) {
    for (const folder of Object.values(FOLDER)) {
      const where = path.join(root, host, folder);
      let files: { names: string[]; broken: string[] };
      try {
        files = await entriesOf(where, 'file');
      } catch (err) {
        // Only a folder that is not there at all holds nothing.
        if (!(await exists(where))) continue;
        unreadable.push({ path: `${host}/${folder}`, problem: `cannot read the folder (${fsReason(err)})` });
        continue;
      }
      for (const link of files.broken.filter((f) => f.endsWith('.json'))) unreadable.push({ path: `${host}/${folder}/${link}`, problem: 'a symbolic link that leads nowhere' });
      for (const file of files.names.filter((f) => f.endsWith('.json')).sort()) {
        const rel = `${host}/${folder}/${file}`;
        const parsed = parseDefinitionPath(rel);
        if ('error' in parsed) skipped.push(rel);
        else found.push({ ...parsed, file: path.join(root, host, folder, file) });
      }
    }
  }
  return { found, skipped, unreadable };
}

/** Whether anything (a file, a folder, a link even to nothing) is at `p`; one we may not look at counts as there. */
async function exists(p: string): Promise<boolean> {
  return lstat(p).then(
    () => true,
    (err: NodeJS.ErrnoException) => err.code !== 'ENOENT',
  );
}

/** A file system error in a few words ("permission denied"), as a person reads it. */
export function fsReason(err: unknown): string {
  const e = err as NodeJS.ErrnoException;
  const words: Record<string, string> = { EACCES: 'permission denied', EPERM: 'operation not permitted', ENOTDIR: 'not a folder', EISDIR: 'a folder, not a file', ELOOP: 'too many levels of symbolic links', EIO: 'input/output error', ENOENT: 'not found' };
  return e.code ? `${words[e.code] ?? e.code}` : String(e.message ?? err);
}

/**
 * Names of the folders or files in `dir`. Symbolic links count as what they point to: a folder
 * of definitions kept as links must not look empty (sync would delete what it holds). Links that
 * lead nowhere are listed apart, in `broken`.
 */
async function entriesOf(dir: string, kind: 'file' | 'directory'): Promise<{ names: string[]; broken: string[] }> {
  const names: string[] = [];
  const broken: string[] = [];
  for (const entry of await readdir(dir, { withFileTypes: true })) {
    let isKind = kind === 'file' ? entry.isFile() : entry.isDirectory();
    if (entry.isSymbolicLink()) {
      const target = await stat(path.join(dir, entry.name)).catch(() => undefined);
      if (!target) broken.push(entry.name);
      isKind = kind === 'file' ? target?.isFile() === true : target?.isDirectory() === true;
    }
    if (isKind) names.push(entry.name);
  }
  return { names, broken };
}

export async function readBytes(file: string): Promise<Buffer> {
  return readFile(file);
}
