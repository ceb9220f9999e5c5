import { randomBytes } from 'node:crypto';
import { readFile } from 'node:fs/promises';
import path from 'node:path';
import { makeDir, writeAtomically } from '../durable-files.js';

export interface MasterToken {
  token: string;
  /** Where it was read from or created in; undefined when it came from a flag or the environment. */
  file?: string;
  created: boolean;
}

/**
 * Where the master token is kept when neither `--master-token` nor SVCQ_MASTER_TOKEN gives one
 * (decisions §1.1): a file under the root today; a shared database tomorrow, so that every node
 * on it agrees on one token.
 */
export interface MasterTokenStore {
  /** The stored token, or a fresh random one stored now (`created`). */
  readOrCreate(): Promise<MasterToken>;
}

/**
 * `<home>/master-token`, created with mode 0600 and a fresh random 32-byte hex token on first
 * start. It is written whole under another name, synced and renamed into place, and its folder
 * synced (as every folder made for it) before the server relies on it: a power cut leaves no file
 * or the whole token, never an empty one.
 */
export class FileMasterTokenStore implements MasterTokenStore {
  constructor(readonly home: string) {}

  async readOrCreate(): Promise<MasterToken> {
    const file = path.join(this.home, 'master-token');
    let text: string | undefined;
    try {
      text = await readFile(file, 'utf8');
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code !== 'ENOENT') throw err;
    }
    if (text !== undefined) {
      const short = cutShort(text);
      // Not replaced: clients may hold the token it held, and would meet the wall without knowing why.
      if (short) {
        throw new Error(
          `the master token file ${file} ${short}, as a start cut off before the token reached the disk leaves it; it is not replaced, since clients may hold the token it was made with: give that token with --master-token or SVCQ_MASTER_TOKEN, or remove the file to have a new one made`,
        );
      }
      return { token: text.trim(), file, created: false };
    }
    await makeDir(this.home, 0o700);
    const token = randomBytes(32).toString('hex');
    await writeAtomically(file, `${token}\n`, 0o600);
    return { token, file, created: true };
  }
}

/**
 * What is wrong with a token file's text that a write cut short leaves (nothing, empty, zeros, or
 * a start of the 64 hex digits without the line end written after them), or undefined. A token an
 * operator wrote there in full is taken as it is.
 */
export function cutShort(text: string): string | undefined {
  if (text.includes('\0')) return 'holds zero bytes';
  if (text.trim() === '') return 'is empty';
  if (/^[0-9a-f]{1,63}$/.test(text)) return `holds ${text.length} of a token's 64 hex digits and no line end`;
  return undefined;
}

/** The master token: the flag, else SVCQ_MASTER_TOKEN (both resolved by the caller into `given`), else the store's. */
export async function resolveMasterToken(given: string | undefined, stored: MasterTokenStore): Promise<MasterToken> {
  if (given !== undefined && given !== '') return { token: given, created: false };
  return stored.readOrCreate();
}
