import { randomBytes } from 'node:crypto';
import { mkdir, readFile, writeFile } from 'node:fs/promises';
import path from 'node:path';

export interface MasterToken {
  token: string;
  /** The file it was read from or created in; undefined when it came from a flag or the environment. */
  file?: string;
  created: boolean;
}

/**
 * The master token (decisions §1.1): the flag, else SVCQ_MASTER_TOKEN (both resolved by the
 * caller into `given`), else `<home>/master-token`, created with mode 0600 on first start.
 */
export async function resolveMasterToken(home: string, given: string | undefined): Promise<MasterToken> {
  if (given !== undefined && given !== '') return { token: given, created: false };
  const file = path.join(home, 'master-token');
  try {
    const token = (await readFile(file, 'utf8')).trim();
    if (token !== '') return { token, file, created: false };
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code !== 'ENOENT') throw err;
  }
  await mkdir(home, { recursive: true, mode: 0o700 });
  const token = randomBytes(32).toString('hex');
  await writeFile(file, `${token}\n`, { mode: 0o600, flag: 'w' });
  return { token, file, created: true };
}
