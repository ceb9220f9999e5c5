import { readFile, rm, stat } from 'node:fs/promises';
import path from 'node:path';
import { fsyncDir, writeAtomically } from '../durable-files.js';
import { scanDefinitions } from './manifest.js';
import type { DefinitionPath } from './names.js';

/** A stored definition: where it lives and its exact bytes (the manifest hashes these). */
export interface StoredDefinition {
  at: DefinitionPath;
  bytes: Buffer;
}

/**
 * Where definitions are kept, as exact bytes by path (decisions §2): files under `--root` today,
 * a table of the shared database tomorrow. The registry above it parses them, keeps them live in
 * memory and computes the manifest from what is stored.
 */
export interface DefinitionStore {
  /** Every stored definition, in path order. */
  list(): Promise<StoredDefinition[]>;
  /** Stores the exact bytes durably, replacing what the path held; resolves once a crash would keep them. */
  put(at: DefinitionPath, bytes: Buffer): Promise<void>;
  /** Removes the definition durably; false when there was none. */
  delete(at: DefinitionPath): Promise<boolean>;
  /** The exact bytes stored at one path, or null when none are (a store without it is read through `list`). */
  read?(at: DefinitionPath): Promise<Buffer | null>;
  /**
   * For a store that others write too (several nodes on one database): calls `onChange` with each
   * path put or deleted, after the write is durable, at least once (a registry re-reads the path,
   * which is idempotent). Returns the function that stops it. A registry loaded from a store that
   * has it follows the changes by itself.
   */
  watch?(onChange: DefinitionChangeListener): () => void;
}

/** Told that the definition at `at` was put or deleted (by this process or another). */
export type DefinitionChangeListener = (at: DefinitionPath) => void;

/** Definitions as files: `<root>/<host>/svc-queues/<name>.json` and `<root>/<host>/svc-users/<name>.json`. */
export class FileDefinitionStore implements DefinitionStore {
  constructor(readonly root: string) {}

  async list(): Promise<StoredDefinition[]> {
    const { found } = await scanDefinitions(this.root);
    return Promise.all(found.map(async (def) => ({ at: def, bytes: await readFile(def.file) })));
  }

  async read(at: DefinitionPath): Promise<Buffer | null> {
    return readFile(path.join(this.root, at.path)).catch((err: NodeJS.ErrnoException) => {
      if (err.code === 'ENOENT' || err.code === 'ENOTDIR') return null;
      throw err;
    });
  }

  async put(at: DefinitionPath, bytes: Buffer): Promise<void> {
    await writeAtomically(path.join(this.root, at.path), bytes);
  }

  async delete(at: DefinitionPath): Promise<boolean> {
    const file = path.join(this.root, at.path);
    const existed = await stat(file).then(() => true, () => false);
    if (existed) {
      await rm(file, { force: true });
      await fsyncDir(path.dirname(file));
    }
    return existed;
  }
}
