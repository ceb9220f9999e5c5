import { createHash } from 'node:crypto';
import { readdir, readFile, stat } from 'node:fs/promises';
import path from 'node:path';
import { FOLDER, parseDefinitionPath, type DefinitionPath } from './names.js';

/** A manifest: server-relative definition path → lowercase sha256 hex of the file's bytes. */
export type Manifest = Record<string, string>;

export function sha256Hex(bytes: Buffer | string): string {
  return createHash('sha256').update(bytes).digest('hex');
}

export interface FoundDefinition extends DefinitionPath {
  file: string;
}

/**
 * Finds `<host>/svc-queues/*.json` and `<host>/svc-users/*.json` below `root`, the only files
 * that sync (interface, synchronisation flow step 1). Folders that are not valid hosts, and
 * files whose names break the name rule, are returned in `skipped` so the caller can say so.
 */
export async function scanDefinitions(root: string): Promise<{ found: FoundDefinition[]; skipped: string[] }> {
  const found: FoundDefinition[] = [];
  const skipped: string[] = [];
  for (const host of (await entriesOf(root, 'directory')).sort()) {
    for (const folder of Object.values(FOLDER)) {
      let files: string[];
      try {
        files = await entriesOf(path.join(root, host, folder), 'file');
      } catch {
        continue;
      }
      for (const file of files.filter((f) => f.endsWith('.json')).sort()) {
        const rel = `${host}/${folder}/${file}`;
        const parsed = parseDefinitionPath(rel);
        if ('error' in parsed) skipped.push(rel);
        else found.push({ ...parsed, file: path.join(root, host, folder, file) });
      }
    }
  }
  return { found, skipped };
}

/**
 * Names of the folders or files in `dir`. Symbolic links count as what they point to: a folder
 * of definitions kept as links must not look empty (sync would delete what it holds).
 */
async function entriesOf(dir: string, kind: 'file' | 'directory'): Promise<string[]> {
  const names: string[] = [];
  for (const entry of await readdir(dir, { withFileTypes: true })) {
    let isKind = kind === 'file' ? entry.isFile() : entry.isDirectory();
    if (entry.isSymbolicLink()) {
      const target = await stat(path.join(dir, entry.name)).catch(() => undefined);
      isKind = kind === 'file' ? target?.isFile() === true : target?.isDirectory() === true;
    }
    if (isKind) names.push(entry.name);
  }
  return names;
}

export async function readBytes(file: string): Promise<Buffer> {
  return readFile(file);
}
