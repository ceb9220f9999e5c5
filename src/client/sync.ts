import { readFile, stat } from 'node:fs/promises';
import { fsReason, scanDefinitions, sha256Hex } from '../definitions/manifest.js';
import { parseDefinitionPath } from '../definitions/names.js';
import { ClientError, type SvcqClient } from './client.js';

/** One local definition ready to upload. */
export interface LocalDefinition {
  /** Server-relative path, `<host>/svc-queues/<name>.json` or `<host>/svc-users/<name>.json`. */
  path: string;
  bytes: Buffer;
  sha256: string;
}

/** A local file that would not be accepted: the one message that says why, and each problem alone. */
export interface InvalidDefinition {
  path: string;
  /** `<path>: <problem>; <problem>`, as the server's 400 would say it */
  error: string;
  problems: string[];
}

/** What a sync did, or with `dryRun` would do. */
export interface SyncReport {
  put: string[];
  /** Those of `put` the server held no definition at (the others replace one it held). */
  created: string[];
  deleted: string[];
  unchanged: number;
  dryRun: boolean;
}

export interface SyncOptions {
  dryRun?: boolean;
  /** Called after each PUT or DELETE with how many of the planned changes are done. */
  onProgress?: (done: number, total: number) => void;
  /** How many requests may be in flight at once. */
  concurrency?: number;
  /** Starts no further PUT or DELETE once aborted (requests already sent are awaited): the sync ends with {@link SyncIncomplete}. */
  signal?: AbortSignal;
}

/** Local validation failed: nothing was sent (interface, synchronisation flow step 2; decisions §7). */
export class InvalidDefinitions extends Error {
  constructor(readonly invalid: InvalidDefinition[]) {
    super(`nothing uploaded: ${invalid.length} definition${invalid.length === 1 ? '' : 's'} did not validate`);
  }
}

/**
 * A sync that stopped part way (a request failed, or it was interrupted): `put` and `deleted` list
 * what the server confirmed, `notPut` and `notDeleted` what was left. The message says both, so
 * that the one sentence printed is the whole truth; running the sync again finishes it.
 */
export class SyncIncomplete extends Error {
  constructor(
    readonly reason: string,
    readonly put: string[],
    readonly deleted: string[],
    readonly notPut: string[],
    readonly notDeleted: string[],
    /** Of `notPut` and `notDeleted`, the requests sent that got no answer: the server may have applied them. */
    readonly unanswered: string[] = [],
  ) {
    const done = put.length + deleted.length;
    const applied = done === 0 && unanswered.length === 0 ? 'nothing was changed' : `${put.length} put and ${deleted.length} deleted before it stopped`;
    const maybe = unanswered.length === 0 ? '' : `, ${unanswered.length} of them sent without an answer (the server may have applied ${unanswered.length === 1 ? 'it' : 'them'})`;
    super(`${reason}; ${applied}, ${notPut.length} still to put and ${notDeleted.length} to delete${maybe} (run svcq sync again to finish)`);
  }
}

/**
 * Reads and validates every definition below `dir` exactly as the server will (same path rule,
 * same schemas). A file under a definition folder whose host or name breaks the rules counts as
 * invalid rather than being left out silently: the server would never accept it either.
 */
export async function loadLocalDefinitions(dir: string): Promise<{ definitions: LocalDefinition[]; invalid: InvalidDefinition[] }> {
  const isDir = await stat(dir).then((s) => s.isDirectory(), () => false);
  if (!isDir) throw new ClientError(`"${dir}" is not a folder`, 'not-a-folder');
  const { found, skipped, unreadable } = await scanDefinitions(dir).catch((err: unknown) => {
    throw new ClientError(`cannot read the folder "${dir}" (${fsReason(err)})`, 'not-a-folder');
  });
  const invalid: InvalidDefinition[] = skipped.map((rel) => {
    const parsed = parseDefinitionPath(rel);
    const error = 'error' in parsed ? parsed.error : `${rel}: not a definition path`;
    // The path's own sentence names the path; the problem alone is what follows that.
    const problem = [`${rel}: `, `path "${rel}": `].reduce((text, prefix) => (text.startsWith(prefix) ? text.slice(prefix.length) : text), error);
    return { path: rel, error, problems: [problem] };
  });
  // What cannot be read is unknown: taken for absent, the server's copy would be deleted.
  for (const u of unreadable) invalid.push({ path: u.path, error: `${u.path}: ${u.problem}`, problems: [u.problem] });
  const definitions: LocalDefinition[] = [];
  // The schemas (and ajv, which compiles them) are loaded only here, where they are needed: the
  // client library, and every other command, start without them.
  const { parseIncomingDefinition } = await import('../definitions/schemas.js');
  for (const def of found) {
    let bytes: Buffer;
    try {
      bytes = await readFile(def.file);
    } catch (err) {
      const problem = `cannot read the file (${fsReason(err)})`;
      invalid.push({ path: def.path, error: `${def.path}: ${problem}`, problems: [problem] });
      continue;
    }
    const parsed = parseIncomingDefinition(def, bytes);
    if ('error' in parsed) invalid.push({ path: def.path, error: parsed.error, problems: parsed.problems });
    else definitions.push({ path: def.path, bytes, sha256: sha256Hex(bytes) });
  }
  return { definitions, invalid };
}

/**
 * The synchronisation flow at the end of interface.md: validate everything locally (and send
 * nothing if anything fails), read the manifest, PUT each file whose hash differs or is absent,
 * then DELETE each stored path with no local file. Hashes are recomputed every run; nothing is
 * remembered between runs. Deletes come last so that a failed PUT leaves every stored
 * definition in place.
 */
export async function syncDefinitions(client: SvcqClient, dir: string, options: SyncOptions = {}): Promise<SyncReport> {
  const { definitions, invalid } = await loadLocalDefinitions(dir);
  if (invalid.length > 0) throw new InvalidDefinitions(invalid);

  const { signal } = options;
  const interrupted = (): SyncIncomplete => new SyncIncomplete('interrupted', [], [], [], []);
  if (signal?.aborted) throw interrupted();
  const manifest = await client.manifest({ signal }).catch((err: unknown) => {
    throw signal?.aborted ? interrupted() : err;
  });
  const local = new Set(definitions.map((d) => d.path));
  const toPut = definitions.filter((d) => manifest[d.path] !== d.sha256);
  const toDelete = Object.keys(manifest)
    .filter((p) => !local.has(p))
    .sort();
  const report: SyncReport = {
    put: toPut.map((d) => d.path),
    created: toPut.filter((d) => manifest[d.path] === undefined).map((d) => d.path),
    deleted: toDelete,
    unchanged: definitions.length - toPut.length,
    dryRun: options.dryRun ?? false,
  };
  if (report.dryRun) return report;

  const total = toPut.length + toDelete.length;
  const put = new Set<string>();
  const deleted = new Set<string>();
  // Sent, and no answer came (a timeout, a connection cut): applied or not, the server alone knows.
  const unanswered = new Set<string>();
  const step = (): void => options.onProgress?.(put.size + deleted.size, total);
  const concurrency = options.concurrency ?? 8;
  // What the server confirmed is said whatever stops the sync: the operator learns what changed.
  const stopped = (reason: string): SyncIncomplete =>
    new SyncIncomplete(
      reason,
      report.put.filter((p) => put.has(p)),
      toDelete.filter((p) => deleted.has(p)),
      report.put.filter((p) => !put.has(p)),
      toDelete.filter((p) => !deleted.has(p)),
      [...report.put, ...toDelete].filter((p) => unanswered.has(p)),
    );
  try {
    await inBatches(toPut, concurrency, signal, async (d) => {
      await client.putDefinition(d.path, d.bytes).catch((err: unknown) => {
        if (err instanceof ClientError && err.sent && err.status === undefined) unanswered.add(d.path);
        throw err instanceof ClientError && !err.message.startsWith(d.path) ? new ClientError(`${d.path}: ${err.message}`, err.code, { status: err.status, body: err.body, transient: err.transient, sent: err.sent }) : err;
      });
      put.add(d.path);
      step();
    });
    await inBatches(toDelete, concurrency, signal, async (p) => {
      await client.deleteDefinition(p).catch((err: unknown) => {
        if (err instanceof ClientError && err.sent && err.status === undefined) unanswered.add(p);
        throw err instanceof ClientError && !err.message.startsWith(p) ? new ClientError(`${p}: ${err.message}`, err.code, { status: err.status, body: err.body, transient: err.transient, sent: err.sent }) : err;
      });
      deleted.add(p);
      step();
    });
  } catch (err) {
    if (err instanceof ClientError) throw stopped(err.message);
    throw err;
  }
  if (signal?.aborted && put.size + deleted.size < total) throw stopped('interrupted');
  return report;
}

/**
 * Runs `work` over `items` with at most `limit` at once; the first failure, or `signal`, stops new
 * work, and the first failure is thrown once the work under way has ended.
 */
async function inBatches<T>(items: T[], limit: number, signal: AbortSignal | undefined, work: (item: T) => Promise<void>): Promise<void> {
  let next = 0;
  let failed = false;
  const lane = async (): Promise<void> => {
    while (!failed && !signal?.aborted && next < items.length) {
      const item = items[next++]!;
      try {
        await work(item);
      } catch (err) {
        failed = true;
        throw err;
      }
    }
  };
  const lanes = Array.from({ length: Math.min(limit, items.length) }, lane);
  const results = await Promise.allSettled(lanes);
  const rejected = results.find((r): r is PromiseRejectedResult => r.status === 'rejected');
  if (rejected) throw rejected.reason;
}
