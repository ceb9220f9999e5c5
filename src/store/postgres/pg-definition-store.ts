import pg from 'pg';
import type { DefinitionChangeListener, DefinitionStore, StoredDefinition } from '../../definitions/definition-store.js';
import { parseDefinitionPath, type DefinitionPath } from '../../definitions/names.js';
import { PgListener } from './pg-listener.js';
import { migrate } from './schema.js';
import { ANSWER_TIMEOUT_MS, answered, keepConnectionErrors, watch as watchConnection } from './pg-guard.js';
import { FailureStreak } from '../failure-streak.js';
import { StoreUnavailable } from '../store.js';

export interface PgDefinitionStoreOptions {
  /** The database every node shares (the store's URL). */
  url: string;
  warn?: (line: string) => void;
  /** How long a read or a write may wait for the database before its connection is cut (default 10 s). */
  answerTimeoutMs?: number;
  /** How often the revision is read when no notification came, in milliseconds (default 500). */
  pollMs?: number;
  /** The LISTEN/NOTIFY channel writes are announced on (default `svcq_definitions`). */
  channel?: string;
}

/** Statements in flight at once: definitions change rarely, and the poll takes one connection. */
const POOL_SIZE = 3;

/**
 * Definitions in the shared database (decisions §2, §6.1): the exact bytes of every definition by
 * its server-relative path, in `svcq_definitions` (`bytea`, so whitespace, unicode and a trailing
 * newline come back byte for byte, and every node's manifest hashes the same bytes).
 *
 * - Atomicity and durability: a put or delete is one transaction; it resolves once its COMMIT
 *   succeeded (durable as the database is configured, synchronous_commit on by default). A write
 *   that fails rejects and leaves nothing.
 * - Concurrency: every write first increments the one-row revision counter and holds that row's
 *   lock until COMMIT, so writes from all nodes are serialised and their revisions become visible
 *   in the order they were given. A DELETE keeps the row as a tombstone (bytes NULL) with its
 *   revision, so a node that reads "everything after revision N" learns of deletes too.
 * - Other nodes: each write NOTIFYs `channel` in its transaction (delivered at COMMIT); every
 *   store LISTENs and also reads the revisions every `pollMs` (a lost notification, a listening
 *   connection that failed), then tells its watchers which paths changed. A change reaches
 *   another node's watchers within milliseconds, and within `pollMs` plus one query at worst.
 *   Watchers of the node that wrote are told too: reloading a path is idempotent.
 */
export class PgDefinitionStore implements DefinitionStore {
  private readonly warn: (line: string) => void;
  private readonly channel: string;
  private readonly watchers = new Set<DefinitionChangeListener>();
  private listener: PgListener | undefined;
  private timer: NodeJS.Timeout | undefined;
  /** Every revision through this one has been told to the watchers. */
  private seen = 0;
  private checking: Promise<void> | undefined;
  private checkAgain = false;
  private closed = false;
  private readonly reads: FailureStreak;

  private readonly answerTimeoutMs: number;

  private constructor(
    private readonly pool: pg.Pool,
    options: PgDefinitionStoreOptions,
  ) {
    this.answerTimeoutMs = options.answerTimeoutMs ?? ANSWER_TIMEOUT_MS;
    this.warn = options.warn ?? (() => undefined);
    this.channel = options.channel ?? 'svcq_definitions';
    this.reads = new FailureStreak(this.warn, 'reading definition changes from PostgreSQL succeeds again');
  }

  /**
   * Connects, brings the schema up to date (the store's migrations, under their advisory lock:
   * several nodes may start at once), starts listening and polling for other nodes' writes.
   */
  static async open(options: PgDefinitionStoreOptions): Promise<PgDefinitionStore> {
    // A new connection waits no longer than a statement would (5 s at most).
    const pool = new pg.Pool({ connectionString: options.url, max: POOL_SIZE, connectionTimeoutMillis: Math.min(5000, options.answerTimeoutMs ?? ANSWER_TIMEOUT_MS), keepAlive: true });
    pool.on('error', (err) => options.warn?.(`a PostgreSQL connection of the definitions failed while idle: ${err.message}`));
    keepConnectionErrors(pool);
    const store = new PgDefinitionStore(pool, options);
    try {
      const client = await pool.connect();
      try {
        await migrate(client);
      } finally {
        client.release();
      }
      store.seen = Number((await store.query<{ revision: string }>('SELECT revision FROM svcq_definition_revision')).rows[0]!.revision);
      store.listener = new PgListener({
        url: options.url,
        channel: store.channel,
        onNotify: () => store.check(),
        onResumed: () => store.check(),
        answerTimeoutMs: store.answerTimeoutMs,
        warn: store.warn,
      });
      await store.listener.start();
    } catch (err) {
      await store.close();
      throw err;
    }
    store.timer = setInterval(() => store.check(), options.pollMs ?? 500);
    store.timer.unref();
    return store;
  }

  /** The sha256 of the master token the nodes share, if a node recorded one. */
  async recordedMasterToken(): Promise<string | undefined> {
    return (await this.query<{ sha256: string }>('SELECT sha256 FROM svcq_master_token')).rows[0]?.sha256;
  }

  /**
   * Records `sha256` as the nodes' master token unless one is recorded already (or in its place,
   * with `replace`); the one recorded afterwards. Of nodes that start at once, the first insert wins.
   */
  async recordMasterToken(sha256: string, replace: boolean): Promise<string> {
    await this.query(`INSERT INTO svcq_master_token (sha256) VALUES ($1) ON CONFLICT (one) DO ${replace ? 'UPDATE SET sha256 = EXCLUDED.sha256, recorded_at = now()' : 'NOTHING'}`, [sha256]);
    return (await this.recordedMasterToken())!;
  }

  async list(): Promise<StoredDefinition[]> {
    const res = await this.query<{ path: string; bytes: Buffer }>('SELECT path, bytes FROM svcq_definitions WHERE bytes IS NOT NULL ORDER BY path COLLATE "C"');
    const out: StoredDefinition[] = [];
    for (const row of res.rows) {
      const at = parseDefinitionPath(row.path);
      if ('error' in at) this.warn(`skipping stored definition ${row.path}: ${at.error}`);
      else out.push({ at, bytes: row.bytes });
    }
    return out;
  }

  async read(at: DefinitionPath): Promise<Buffer | null> {
    const res = await this.query<{ bytes: Buffer | null }>('SELECT bytes FROM svcq_definitions WHERE path = $1', [at.path]);
    return res.rows[0]?.bytes ?? null;
  }

  async put(at: DefinitionPath, bytes: Buffer): Promise<void> {
    await this.write(async (client, revision) => {
      await client.query(
        `INSERT INTO svcq_definitions (path, bytes, revision) VALUES ($1, $2, $3)
         ON CONFLICT (path) DO UPDATE SET bytes = excluded.bytes, revision = excluded.revision`,
        [at.path, bytes, revision],
      );
      return true;
    });
  }

  /** A delete the database cannot take is a 503 (decisions §6, §6.1); only a PUT keeps interface §7's 500. */
  async delete(at: DefinitionPath): Promise<boolean> {
    try {
      return await this.write(async (client, revision) => {
        const res = await client.query('UPDATE svcq_definitions SET bytes = NULL, revision = $2 WHERE path = $1 AND bytes IS NOT NULL', [at.path, revision]);
        return (res.rowCount ?? 0) > 0;
      });
    } catch (err) {
      throw new StoreUnavailable(err as Error);
    }
  }

  /**
   * Calls `onChange` with each path that another write (on any node, this one included) put or
   * deleted, after it committed; at least once, in revision order. Returns the unsubscribe.
   */
  watch(onChange: DefinitionChangeListener): () => void {
    this.watchers.add(onChange);
    return () => this.watchers.delete(onChange);
  }

  /** One statement, cut after answerTimeoutMs without an answer. */
  private query<R extends pg.QueryResultRow>(text: string, values?: unknown[]): Promise<pg.QueryResult<R>> {
    return answered<R>(this.pool, this.answerTimeoutMs, text, values);
  }

  /** Stops listening and polling, and closes the connections. */
  async close(): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    clearInterval(this.timer);
    await this.listener?.close();
    await this.checking?.catch(() => undefined);
    await this.pool.end().catch(() => undefined);
  }

  /** One write transaction under the revision counter's row lock; committed only when `apply` changed something. */
  private async write(apply: (client: pg.PoolClient, revision: number) => Promise<boolean>): Promise<boolean> {
    if (this.closed) throw new Error('the definitions store is closed');
    const client = await this.pool.connect();
    // A network gone silent cuts the connection: the write fails within answerTimeoutMs, not after TCP gives up.
    const watched = watchConnection(client, this.answerTimeoutMs);
    let broken: Error | undefined;
    try {
      await client.query('BEGIN');
      const revision = Number((await client.query<{ revision: string }>('UPDATE svcq_definition_revision SET revision = revision + 1 RETURNING revision')).rows[0]!.revision);
      const changed = await apply(client, revision);
      if (!changed) {
        await client.query('ROLLBACK');
        return false;
      }
      await client.query('SELECT pg_notify($1, $2)', [this.channel, String(revision)]);
      await client.query('COMMIT');
      return true;
    } catch (err) {
      broken = err as Error;
      if (!watched.broken) {
        await client.query('ROLLBACK').then(
          () => (broken = undefined),
          () => undefined,
        );
      }
      throw watched.broken ?? err;
    } finally {
      watched.stop();
      client.release(watched.broken ?? broken);
    }
  }

  /** Reads what changed since the last revision told; one read at a time, another right after if asked meanwhile. */
  private check(): void {
    if (this.closed) return;
    if (this.checking) {
      this.checkAgain = true;
      return;
    }
    this.checking = this.readChanges().finally(() => {
      this.checking = undefined;
      if (this.checkAgain) {
        this.checkAgain = false;
        this.check();
      }
    });
  }

  private async readChanges(): Promise<void> {
    let rows: Array<{ path: string; revision: string }>;
    try {
      rows = (await this.query<{ path: string; revision: string }>('SELECT path, revision FROM svcq_definitions WHERE revision > $1 ORDER BY revision', [this.seen])).rows;
      this.reads.succeeded();
    } catch (err) {
      if (!this.closed) this.reads.failed(() => `could not read definition changes from PostgreSQL (${(err as Error).message}); trying again`);
      return;
    }
    for (const row of rows) {
      this.seen = Math.max(this.seen, Number(row.revision));
      const at = parseDefinitionPath(row.path);
      if ('error' in at) continue;
      for (const watcher of [...this.watchers]) {
        try {
          watcher(at);
        } catch (err) {
          this.warn(`a definition change of ${row.path} could not be applied: ${(err as Error).message}`);
        }
      }
    }
  }
}

/**
 * Opens the definitions of a `--store postgres://…` server: give `store` to
 * `DefinitionRegistry.load(store, warn)` (the registry then follows other nodes' writes by itself)
 * and call `close()` on shutdown, after the HTTP server stopped taking requests.
 */
export async function openPostgresDefinitions(url: string, warn: (line: string) => void = () => undefined): Promise<{ store: PgDefinitionStore; close: () => Promise<void> }> {
  const store = await PgDefinitionStore.open({ url, warn });
  return { store, close: () => store.close() };
}
