import { createHash } from 'node:crypto';
import { readdir, readFile } from 'node:fs/promises';
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
  for (const host of (await readdir(root, { withFileTypes: true })).filter((d) => d.isDirectory()).map((d) => d.name).sort()) {
    for (const folder of Object.values(FOLDER)) {
      let files: string[];
      try {
        files = (await readdir(path.join(root, host, folder), { withFileTypes: true })).filter((d) => d.isFile()).map((d) => d.name);
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

export async function readBytes(file: string): Promise<Buffer> {
  return readFile(file);
}
