import { createHash, randomBytes } from 'node:crypto';
import { readdir, readFile } from 'node:fs/promises';
import path from 'node:path';
import type { TaskEvent } from '../../../src/engine/item.js';
import pg from 'pg';
import type { QueueConfig } from '../../../src/engine/config.js';
import { EmbeddedStore } from '../../../src/store/embedded-store.js';
import { ModelStore, newModelDisk } from '../../../src/store/model-store.js';
import { PgNotifier } from '../../../src/store/postgres/pg-notifier.js';
import { PostgresStore } from '../../../src/store/postgres/postgres-store.js';
import { migrate, MIGRATIONS } from '../../../src/store/postgres/schema.js';
import type { Store } from '../../../src/store/store.js';
import { openTools, type Tools } from '../../../src/tools/index.js';
import { LongPolls } from '../../../src/waiting/long-poll.js';
import { InProcessNotifier } from '../../../src/waiting/notifier.js';
import { cleanupTemp, tempDir } from '../../support/server.js';

/** A fake time far from the real one: only `advance` moves it. */
export const START = 1_700_000_000_000;

export class FakeClock {
  constructor(private t = START) {}
  readonly now = (): number => this.t;
  advance(ms: number): void {
    this.t += ms;
  }
}

/** A store under test, its clock, and a restart on the same data. */
export interface StoreUnderTest {
  /** The open store; a different object after `reopen`. */
  readonly store: Store;
  readonly clock: FakeClock;
  /** Claims and fetches that wait (decisions §3.3 `wait`, §3.6 `?wait=N`): the long polls above the store, woken by its announcements. */
  readonly waits: LongPolls;
  /** Closes the store and opens a new one on the same data (journal directory, model disk); `whileClosed` runs in between. */
  reopen(whileClosed?: () => void): Promise<void>;
  /** Closes it and removes what it kept. */
  dispose(): Promise<void>;
  /**
   * Applies what is due at the clock's time, as the store's own sweep would once time moved (the
   * PostgreSQL store sweeps on a real-time interval). Absent where a call does it: the embedded
   * store and the model apply what is due at their next call.
   */
  settle?(): Promise<void>;
  /** Every task event made durable so far, oldest first; absent for a store that keeps no task history (the model). */
  events?(): Promise<TaskEvent[]>;
}

export interface FactoryOptions {
  /** A queue's current rules, for a store that applies time-driven changes outside any request (the embedded store at open). */
  configFor: (key: string) => QueueConfig | undefined;
  clock?: FakeClock;
}

export type StoreFactory = (options: FactoryOptions) => Promise<StoreUnderTest>;

/** An open store and the long polls above it. */
interface Opened {
  store: Store;
  waits: LongPolls;
}

/**
 * A {@link StoreUnderTest} from how a store opens and closes: `reopen` closes it, runs
 * `whileClosed` and opens again on the same data; `dispose` closes it (ignoring a failure) and
 * removes what it kept. A first open that fails removes it too.
 */
async function underTest<O extends Opened>(
  clock: FakeClock,
  open: () => Promise<O>,
  close: (opened: O) => Promise<void>,
  remove: () => Promise<void> | void,
  settle?: (opened: O) => Promise<void>,
  events?: (opened: O) => Promise<TaskEvent[]>,
): Promise<StoreUnderTest> {
  let opened: O;
  try {
    opened = await open();
  } catch (err) {
    await Promise.resolve(remove()).catch(() => undefined);
    throw err;
  }
  return {
    get store() {
      return opened.store;
    },
    get waits() {
      return opened.waits;
    },
    clock,
    async reopen(whileClosed) {
      await close(opened);
      whileClosed?.();
      opened = await open();
    },
    async dispose() {
      await close(opened).catch(() => undefined);
      await remove();
    },
    ...(settle ? { settle: () => settle(opened) } : {}),
    ...(events ? { events: () => events(opened) } : {}),
  };
}

/** The embedded store on a fresh temp directory, with the real task history and payload archive beside it, and the fake clock as its `now`. */
export const embedded: StoreFactory = async (options) => {
  const clock = options.clock ?? new FakeClock();
  const home = tempDir('svcq-conformance-');
  const warnings: string[] = [];
  let tools: Tools | undefined;
  return underTest(
    clock,
    async () => {
      tools = await openTools({ home, statsInterval: 0, warn: (l) => warnings.push(l) });
      const notifier = new InProcessNotifier();
      const store = new EmbeddedStore({ dir: path.join(home, 'store'), hooks: tools.hooks, configFor: options.configFor, warn: (l) => warnings.push(l), now: clock.now, notifier });
      await store.open();
      await tools.tasks.start(store);
      return { store, waits: new LongPolls(store, notifier) };
    },
    async ({ store }) => {
      await store.close();
      await tools?.close();
      tools = undefined;
    },
    () => cleanupTemp(home),
    undefined,
    async () => {
      await tools!.tasks.flush();
      const dir = tools!.tasks.dir;
      const out: TaskEvent[] = [];
      for (const f of (await readdir(dir)).filter((f) => f.endsWith('.log')).sort()) {
        for (const line of (await readFile(path.join(dir, f), 'utf8')).split('\n')) if (line !== '') out.push(JSON.parse(line) as TaskEvent);
      }
      return out;
    },
  );
};

/** The reference model, with a disk that outlives each ModelStore. */
export const model: StoreFactory = async (options) => {
  const clock = options.clock ?? new FakeClock();
  const disk = newModelDisk();
  return underTest(
    clock,
    async () => {
      const notifier = new InProcessNotifier();
      const store = new ModelStore(disk, { now: clock.now, notifier, configFor: options.configFor });
      await store.open();
      return { store, waits: new LongPolls(store, notifier) };
    },
    ({ store }) => store.close(),
    () => undefined,
  );
};

/** The URL of a database on the same server as `url`. */
export function databaseUrl(url: string, database: string): string {
  const u = new URL(url);
  u.pathname = `/${database}`;
  return u.toString();
}

/**
 * A fresh database on the server of SVCQ_TEST_PG_URL (made through its `postgres` maintenance
 * database), empty or a copy of `template`, and its removal.
 */
export async function freshDatabase(baseUrl: string, template?: string): Promise<{ url: string; drop: () => Promise<void> }> {
  // SVCQ_TEST_RUN names the run that made it, for a runner that drops whatever its run left behind.
  const name = `svcq_test_${process.env.SVCQ_TEST_RUN ? `${process.env.SVCQ_TEST_RUN}_` : ''}${process.pid}_${randomBytes(4).toString('hex')}`;
  const admin = databaseUrl(baseUrl, 'postgres');
  const run = async (sql: string): Promise<void> => {
    const client = new pg.Client({ connectionString: admin });
    await client.connect();
    try {
      await client.query(sql);
    } finally {
      await client.end();
    }
  };
  await run(`CREATE DATABASE ${pg.escapeIdentifier(name)}${template === undefined ? '' : ` TEMPLATE ${pg.escapeIdentifier(template)}`}`);
  return { url: databaseUrl(baseUrl, name), drop: () => run(`DROP DATABASE IF EXISTS ${pg.escapeIdentifier(name)} WITH (FORCE)`) };
}

/**
 * The name of a database the migrations of this build made, on the server of `baseUrl`, for
 * {@link migratedDatabase} to copy; made the first time it is asked for. Its name carries a hash
 * of the migrations, so that a build with other migrations makes (and leaves) one of its own.
 * Several test processes may ask at once: each builds under a name of its own and renames it;
 * the first rename wins, and the others drop theirs.
 */
const templates = new Map<string, Promise<string>>();
const SCHEMA_HASH = createHash('sha256').update(JSON.stringify(MIGRATIONS)).digest('hex').slice(0, 16);
function migratedTemplate(baseUrl: string): Promise<string> {
  const server = databaseUrl(baseUrl, 'postgres');
  let made = templates.get(server);
  if (!made) {
    made = (async () => {
      const name = `svcq_test_template_${SCHEMA_HASH}`;
      const admin = new pg.Client({ connectionString: server });
      await admin.connect();
      try {
        if ((await admin.query('SELECT 1 FROM pg_database WHERE datname = $1', [name])).rowCount === 1) return name;
        const building = `svcq_test_building_${process.pid}_${randomBytes(4).toString('hex')}`;
        await admin.query(`CREATE DATABASE ${pg.escapeIdentifier(building)}`);
        try {
          const client = new pg.Client({ connectionString: databaseUrl(baseUrl, building) });
          await client.connect();
          try {
            await migrate(client);
          } finally {
            await client.end();
          }
          await admin.query(`ALTER DATABASE ${pg.escapeIdentifier(building)} RENAME TO ${pg.escapeIdentifier(name)}`);
        } catch (err) {
          await admin.query(`DROP DATABASE IF EXISTS ${pg.escapeIdentifier(building)} WITH (FORCE)`);
          // Another process renamed its own first: that one serves.
          if ((err as { code?: string }).code !== '42P04') throw err;
        }
        return name;
      } finally {
        await admin.end();
      }
    })();
    templates.set(server, made);
    made.catch(() => templates.delete(server));
  }
  return made;
}

/**
 * A fresh database as {@link freshDatabase} makes, already at the newest schema: a copy of one
 * the migrations made ({@link migratedTemplate}), which the store opens as it opens any database
 * it made before, finding nothing to migrate. A copy takes about half the time of an empty
 * database and the migrations (0.6 s against 1.1 s on a loaded 2-core machine), for suites that
 * make one per test and do not test the migrations themselves; those make theirs empty.
 */
export async function migratedDatabase(baseUrl: string): Promise<{ url: string; drop: () => Promise<void> }> {
  return freshDatabase(baseUrl, await migratedTemplate(baseUrl));
}

/**
 * The drops of databases whose stores were disposed, still under way. A drop takes as long as
 * making the next test's database (0.2–0.5 s), and nothing waits for it but the end of the file:
 * {@link droppedAll}.
 */
const dropping = new Set<Promise<void>>();
const dropFailures: unknown[] = [];

/**
 * Databases of disposed stores being emptied for the next store of this file ({@link emptied}),
 * oldest first; each resolves to the database, or to undefined where it could not be emptied (it
 * is dropped then).
 */
const spare: Array<Promise<{ url: string; drop: () => Promise<void>; sequences: SequenceStates } | undefined>> = [];

/** Each sequence of a database as it stands (`setval`'s arguments): read from a new copy, for {@link emptied} to put back. */
export type SequenceStates = Array<{ name: string; value: string; called: boolean }>;

export async function sequenceStates(url: string): Promise<SequenceStates> {
  const client = new pg.Client({ connectionString: url });
  await client.connect();
  try {
    const { rows } = await client.query<{ name: string }>("SELECT format('%I', relname) AS name FROM pg_class WHERE relnamespace = 'public'::regnamespace AND relkind = 'S' ORDER BY relname");
    const states: SequenceStates = [];
    for (const { name } of rows) {
      const r = await client.query<{ value: string; called: boolean }>(`SELECT last_value::text AS value, is_called AS called FROM ${name}`);
      states.push({ name, ...r.rows[0]! });
    }
    return states;
  } finally {
    await client.end();
  }
}

/**
 * Empties a migrated database that a store used, so that the next store finds it as a fresh copy
 * of the migrated one ({@link migratedDatabase}): what is left connected is cut off, the tables a
 * row was written to are truncated, the definitions' revision is 0 again, the sequences are
 * put back as the copy had them (`sequences`, read from it before its first use), and the
 * statistics the tables gathered are forgotten, as a copy has none. A database copied from the
 * template costs the server a copy of every page of it, and a checkpoint when it is dropped:
 * some 0.3 s of its CPU on a 2-core machine, where this takes a fifth of that.
 * test/store/emptied-database.test.ts compares what this leaves with a new copy.
 */
export async function emptied(url: string, sequences: SequenceStates): Promise<void> {
  const client = new pg.Client({ connectionString: url });
  await client.connect();
  try {
    await client.query('SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = current_database() AND pid <> pg_backend_pid()');
    // Only the tables a row was ever written to (a table of the copy has no page): a TRUNCATE
    // makes every table and index it names a new file, some 3 ms each on a quiet machine.
    const { rows } = await client.query<{ tables: string[] | null }>(
      `SELECT array_agg(format('%I', relname) ORDER BY relname) AS tables FROM pg_class
        WHERE relnamespace = 'public'::regnamespace AND relkind = 'r' AND relname NOT IN ('svcq_migrations', 'svcq_definition_revision')
          AND pg_relation_size(oid) > 0`,
    );
    const written = rows[0]!.tables ?? [];
    // The backends cut off above may hold their locks a moment longer: the TRUNCATE waits for them.
    await client.query('BEGIN');
    try {
      await client.query("SET LOCAL lock_timeout = '10s'");
      if (written.length > 0) await client.query(`TRUNCATE ${written.join(', ')}`);
      await client.query('UPDATE svcq_definition_revision SET revision = 0');
      for (const s of sequences) await client.query('SELECT setval($1::regclass, $2::bigint, $3)', [s.name, s.value, s.called]);
      await client.query("DELETE FROM pg_statistic WHERE starelid IN (SELECT oid FROM pg_class WHERE relnamespace = 'public'::regnamespace)");
      await client.query('COMMIT');
    } catch (err) {
      await client.query('ROLLBACK').catch(() => undefined);
      throw err;
    }
  } finally {
    await client.end();
  }
}

/** Waits for every database drop `dispose` started, and fails with the first that failed: a suite that used {@link postgresFactory} calls it in its `after`. */
export async function droppedAll(): Promise<void> {
  for (const next of spare.splice(0)) {
    const db = await next;
    if (db) dropLater(db);
  }
  await Promise.all([...dropping]);
  if (dropFailures.length > 0) throw dropFailures.splice(0)[0];
}

function dropLater(db: { drop: () => Promise<void> }): void {
  const drop: Promise<void> = db.drop().then(
    () => void dropping.delete(drop),
    (err: unknown) => void (dropping.delete(drop), dropFailures.push(err)),
  );
  dropping.add(drop);
}

/** A new copy of the migrated database, with its sequences as they start (see {@link emptied}). */
async function newCopy(baseUrl: string): Promise<{ url: string; drop: () => Promise<void>; sequences: SequenceStates }> {
  const db = await migratedDatabase(baseUrl);
  try {
    return { ...db, sequences: await sequenceStates(db.url) };
  } catch (err) {
    await db.drop().catch(() => undefined);
    throw err;
  }
}

/**
 * The PostgreSQL store on a database of its own (a copy of the migrated one, {@link migratedDatabase},
 * or one that an earlier store of the file used and `dispose` {@link emptied}; those left are
 * dropped by {@link droppedAll}, which the file calls in its `after`), with the
 * fake clock as its `now` and a {@link PgNotifier} for the long polls; `reopen` closes both and
 * opens new ones on the same database.
 */
export function postgresFactory(baseUrl: string): StoreFactory {
  return async (options) => {
    const clock = options.clock ?? new FakeClock();
    const db = (await spare.shift()) ?? (await newCopy(baseUrl));
    const warnings: string[] = [];
    // Whether the store and its notifier were last closed without a failure: only then is the
    // database emptied for the next store, as nothing of this one can still write to it.
    let closed = false;
    return underTest(
      clock,
      async () => {
        closed = false;
        const notifier = new PgNotifier({ url: db.url, warn: (l) => warnings.push(l) });
        await notifier.start();
        const store = new PostgresStore({ url: db.url, now: clock.now, notifier, configFor: options.configFor, warn: (l) => warnings.push(l) });
        try {
          await store.open();
        } catch (err) {
          await notifier.close();
          throw err;
        }
        return { store, notifier, waits: new LongPolls(store, notifier) };
      },
      async ({ store, notifier }) => {
        await store.close();
        await notifier.close();
        closed = true;
      },
      // Emptied for the next store of this file (dropped at its end by droppedAll), or dropped now
      // where the store did not close cleanly or the emptying failed.
      () => {
        if (!closed) return dropLater(db);
        spare.push(
          emptied(db.url, db.sequences).then(
            () => db,
            () => {
              dropLater(db);
              return undefined;
            },
          ),
        );
      },
      ({ store }) => store.sweepNow(),
      // The events as the database holds them, in the order the history reads them (every change is committed before its call resolves).
      async () => {
        const client = new pg.Client({ connectionString: db.url });
        await client.connect();
        try {
          const { rows } = await client.query<Record<string, unknown>>('SELECT ts, host, queue, id, event, attempts, worker, status, schedule, occurrence, dead_letter, redriven_to, code, ms FROM svcq_events ORDER BY xid, seq');
          return rows.map((r) => {
            const e: Record<string, unknown> = { ts: Number(r.ts), host: r.host, queue: r.queue, id: r.id, event: r.event, attempts: r.attempts, status: r.status };
            if (r.worker !== null) e.worker = r.worker;
            if (r.schedule !== null) Object.assign(e, { schedule: r.schedule, occurrence: Number(r.occurrence) });
            if (r.dead_letter !== null) e.deadLetter = r.dead_letter;
            if (r.redriven_to !== null) e.redrivenTo = r.redriven_to;
            if (r.ms !== null) Object.assign(e, { code: r.code, ms: r.ms });
            return e as unknown as TaskEvent;
          });
        } finally {
          await client.end();
        }
      },
    );
  };
}

/**
 * The PostgreSQL store's factory when SVCQ_TEST_PG_URL is set and its server answers, or why the
 * PostgreSQL tests are skipped.
 */
export async function postgresUnderTest(): Promise<{ factory: StoreFactory; url: string } | { whyNot: string }> {
  const url = process.env.SVCQ_TEST_PG_URL;
  if (!url) return { whyNot: 'SVCQ_TEST_PG_URL is not set' };
  const client = new pg.Client({ connectionString: databaseUrl(url, 'postgres'), connectionTimeoutMillis: 3000 });
  try {
    await client.connect();
    await client.query('SELECT 1');
  } catch (err) {
    return { whyNot: `the PostgreSQL server of SVCQ_TEST_PG_URL does not answer (${(err as Error).message})` };
  } finally {
    await client.end().catch(() => undefined);
  }
  return { factory: postgresFactory(url), url };
}

/** The database {@link suiteDatabase} made for its suite: its URL, and the PostgreSQL server's (for more of the suite's own). */
export interface SuiteDatabase {
  url: string;
  base: string;
}

/**
 * A fresh PostgreSQL database for the calling suite: made before its tests, then `setUp` runs
 * with it (nodes started on it, say); after them `tearDown` runs, then the database is dropped.
 * Where no PostgreSQL answers, the suite is skipped with one line saying why. Call it in the
 * describe, before hooks of its own that use the database; read it through the getter returned.
 */
export function suiteDatabase(hooks: { setUp?: (db: SuiteDatabase) => Promise<void>; tearDown?: () => Promise<void> } = {}): () => SuiteDatabase {
  let made: { url: string; drop: () => Promise<void> } | undefined;
  let base = '';
  before(async function () {
    const pgTest = await postgresUnderTest();
    if ('whyNot' in pgTest) {
      console.log(`    skipped: ${pgTest.whyNot}`);
      this.skip();
    }
    base = pgTest.url;
    made = await freshDatabase(base);
    await hooks.setUp?.({ url: made.url, base });
  });
  after(async () => {
    await hooks.tearDown?.();
    await made?.drop();
  });
  return () => {
    if (!made) throw new Error('the suite\'s database is made in its before hook');
    return { url: made.url, base };
  };
}

/**
 * A fresh database (see {@link freshDatabase}) with a client connected to it, for tests that look
 * at its tables; `drop` ends the client, then drops it. Empty, for the store to migrate at its
 * open, unless `migrated` (a copy of the migrated one, {@link migratedDatabase}: for suites that
 * do not test the migrations, which cost a store some 0.4 s at its first open on a loaded machine).
 */
export async function freshDatabaseWithClient(baseUrl: string, migrated = false): Promise<{ url: string; admin: pg.Client; drop: () => Promise<void> }> {
  const db = migrated ? await migratedDatabase(baseUrl) : await freshDatabase(baseUrl);
  const admin = new pg.Client({ connectionString: db.url });
  try {
    await admin.connect();
  } catch (err) {
    await db.drop();
    throw err;
  }
  return {
    url: db.url,
    admin,
    drop: async () => {
      await admin.end().catch(() => undefined);
      await db.drop();
    },
  };
}

/**
 * For a PostgreSQL suite: true when `target` is a reachable server; otherwise the calling
 * `describe` is skipped with one visible line saying why.
 */
export function postgresPresent(target: Awaited<ReturnType<typeof postgresUnderTest>>): target is { factory: StoreFactory; url: string } {
  if ('factory' in target) return true;
  before(function () {
    console.log(`    skipped: ${target.whyNot}`);
    this.skip();
  });
  return false;
}
