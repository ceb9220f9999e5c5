import pg from 'pg';
import type { OpenedStore, OpenStoreOptions } from '../open-store.js';
import { PgNotifier } from './pg-notifier.js';
import { PostgresStore } from './postgres-store.js';

/** openStore for `--store postgres://…`: the PostgreSQL store, its notifier, and the database's clock. */
export async function openPostgres(url: string, options: OpenStoreOptions): Promise<OpenedStore> {
  const { warn, configFor, observer } = options;
  const clock = await databaseClock(url, warn);
  const notifier = new PgNotifier({ url, warn });
  try {
    await notifier.start();
  } catch (err) {
    clock.close();
    throw err;
  }
  const store = new PostgresStore({ url, notifier, warn, observer, configFor, now: clock.now });
  try {
    await store.open();
  } catch (err) {
    clock.close();
    await notifier.close();
    throw err;
  }
  return {
    store,
    // The store is its own outbox (PostgresStore implements EventOutbox).
    outbox: store,
    notifier,
    payloads: { read: (host, queue, id, kind) => store.readPayload(host, queue, id, kind) },
    close: async () => {
      clock.close();
      try {
        await store.close();
      } finally {
        await notifier.close();
      }
    },
  };
}

/** How often a node measures its clock against the database's again. */
const CLOCK_CHECK_MS = 30_000;

/**
 * The database's clock, read through this node's: every node on one database stamps items and
 * judges deadlines (lease ends, retry delays, timeouts, retention) by the same time, so a node
 * whose clock runs ahead does not end another node's leases early (decisions §6.1). The offset is
 * measured at start (half the round trip either side) and every 30 s after, so no statement pays
 * for it.
 */
async function databaseClock(url: string, warn: (line: string) => void): Promise<{ now: () => number; close: () => void }> {
  let offset = 0;
  const measure = async (): Promise<void> => {
    const client = new pg.Client({ connectionString: url, connectionTimeoutMillis: 5000 });
    // An error the database sends while no statement runs (the connection ended as it opens, or
    // before end() is through) is emitted as 'error': without a listener it would end the process.
    // The measure fails by its statement instead.
    client.on('error', () => undefined);
    await client.connect();
    try {
      const t0 = Date.now();
      const { rows } = await client.query<{ ms: number }>('SELECT (extract(epoch FROM clock_timestamp()) * 1000)::float8 AS ms');
      const t1 = Date.now();
      offset = Math.round(rows[0]!.ms - (t0 + t1) / 2);
    } finally {
      await client.end().catch(() => undefined);
    }
  };
  try {
    await measure();
  } catch (err) {
    throw new Error(`cannot reach the PostgreSQL store (${(err as Error).message})`, { cause: err });
  }
  if (Math.abs(offset) > 1000) warn(`this node's clock is ${offset} ms off the database's; svcq keeps to the database's`);
  const timer = setInterval(() => {
    measure().catch(() => undefined);
  }, CLOCK_CHECK_MS);
  timer.unref();
  return { now: () => Date.now() + offset, close: () => clearInterval(timer) };
}
