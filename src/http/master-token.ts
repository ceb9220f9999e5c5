import { randomBytes } from 'node:crypto';
import { mkdir, readFile, writeFile } from 'node:fs/promises';
import path from 'node:path';

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

/** `<home>/master-token`, created with mode 0600 and a fresh random 32-byte hex token on first start. */
export class FileMasterTokenStore implements MasterTokenStore {
  constructor(readonly home: string) {}

  async readOrCreate(): Promise<MasterToken> {
    const file = path.join(this.home, 'master-token');
    try {
      const token = (await readFile(file, 'utf8')).trim();
      if (token !== '') return { token, file, created: false };
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code !== 'ENOENT') throw err;
    }
    await mkdir(this.home, { recursive: true, mode: 0o700 });
    const token = randomBytes(32).toString('hex');
    await writeFile(file, `${token}\n`, { mode: 0o600, flag: 'w' });
    return { token, file, created: true };
  }
}

/** The master token: the flag, else SVCQ_MASTER_TOKEN (both resolved by the caller into `given`), else the store's. */
export async function resolveMasterToken(given: string | undefined, stored: MasterTokenStore): Promise<MasterToken> {
  if (given !== undefined && given !== '') return { token: given, created: false };
  return stored.readOrCreate();
}
