import { createHash, randomBytes } from 'node:crypto';
import { readFile } from 'node:fs/promises';
import path from 'node:path';
import { makeDir, removeDurably, writeAtomically } from '../durable-files.js';

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

  get file(): string {
    return path.join(this.home, 'master-token');
  }

  /** The token in the file, or undefined when there is no file; a file a cut left short is refused. */
  async read(): Promise<MasterToken | undefined> {
    const file = this.file;
    let text: string;
    try {
      text = await readFile(file, 'utf8');
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code === 'ENOENT') return undefined;
      throw err;
    }
    const short = cutShort(text);
    // Not replaced: clients may hold the token it held, and would meet the wall without knowing why.
    if (short) {
      throw new Error(
        `the master token file ${file} ${short}, as a start cut off before the token reached the disk leaves it; it is not replaced, since clients may hold the token it was made with: give that token with --master-token or SVCQ_MASTER_TOKEN, or remove the file to have a new one made`,
      );
    }
    return { token: text.trim(), file, created: false };
  }

  async readOrCreate(): Promise<MasterToken> {
    const stored = await this.read();
    if (stored) return stored;
    await makeDir(this.home, 0o700);
    const token = randomBytes(32).toString('hex');
    await writeAtomically(this.file, `${token}\n`, 0o600);
    return { token, file: this.file, created: true };
  }

  /** Removes a file {@link readOrCreate} made, for a start that cannot go on with it. */
  async remove(): Promise<void> {
    await removeDurably(this.home, [path.basename(this.file)]);
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
  if (/^[0-9a-f]{1,63}$/.test(text)) return `holds ${text.length} of a token's 64 hex digits and no line end (a shorter token written there by hand needs its line end)`;
  return undefined;
}

/** The master token: the flag, else SVCQ_MASTER_TOKEN (both resolved by the caller into `given`), else the store's. */
export async function resolveMasterToken(given: string | undefined, stored: MasterTokenStore): Promise<MasterToken> {
  if (given !== undefined && given !== '') return { token: given, created: false };
  return stored.readOrCreate();
}

/** What a database that several nodes share keeps of their master token (decisions §6.1). */
export interface SharedMasterToken {
  /** The sha256 (hex) of the token recorded, if any. */
  recordedMasterToken(): Promise<string | undefined>;
  /** Records `sha256` unless a token is recorded (in its place, with `replace`); the one recorded afterwards. */
  recordMasterToken(sha256: string, replace: boolean): Promise<string>;
}

/**
 * The master token of a node on a shared database: the flag, the variable or the token file, as
 * on one node, then held against the one the database records (the first node to start records
 * its own). A node whose token differs is refused, and so is a node with none at all: a token of
 * its own, made silently, would meet every management call that a load balancer sends it with the
 * wall. `replace` records this node's token in place of the database's (to change the nodes'
 * token: stop every node, start one with it, then the others with the new token).
 */
export async function resolveSharedMasterToken(given: string | undefined, file: FileMasterTokenStore, shared: SharedMasterToken, replace: boolean): Promise<MasterToken> {
  const fromFlag = given !== undefined && given !== '';
  let master = fromFlag ? { token: given, created: false } : await file.read();
  if (!master) {
    if (!replace && (await shared.recordedMasterToken()) !== undefined) {
      throw new Error(
        `the nodes of this database share a master token, and this node has none (no --master-token, SVCQ_MASTER_TOKEN or ${file.file}): give it the nodes' token; a token of its own would meet the wall through the load balancer`,
      );
    }
    master = await file.readOrCreate();
  }
  const sha256 = createHash('sha256').update(master.token).digest('hex');
  if ((await shared.recordMasterToken(sha256, replace)) !== sha256) {
    // Another node recorded a different token first: a token made for this start goes with it.
    if (master.created) await file.remove();
    throw new Error(
      `this node's master token (from ${fromFlag ? '--master-token or SVCQ_MASTER_TOKEN' : file.file}) is not the one the other nodes of this database share: give it theirs; to change the nodes' token, stop every node and start one with --replace-master-token`,
    );
  }
  return master;
}
