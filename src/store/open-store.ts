import path from 'node:path';
import pg from 'pg';
import type { QueueConfig } from '../engine/config.js';
import { InProcessNotifier, type Notifier } from '../waiting/notifier.js';
import { EmbeddedStore } from './embedded-store.js';
import { PgNotifier } from './postgres/pg-notifier.js';
import { PostgresStore } from './postgres/postgres-store.js';
import type { EventOutbox, Store, StoreHooks, StoreObserver } from './store.js';

/** Where items live (decisions §1.1 `--store`): the embedded store under the root, or a PostgreSQL URL. */
export type StoreLocation = { kind: 'embedded' } | { kind: 'postgres'; url: string };

/**
 * Reads `--store` / `SVCQ_STORE`: absent or `embedded` is the embedded store; `postgres://…` (or
 * `postgresql://…`) is PostgreSQL. Anything else is a sentence naming the flag and what it takes.
 */
export function parseStoreLocation(value: string | undefined): StoreLocation {
  if (value === undefined || value === '' || value === 'embedded') return { kind: 'embedded' };
  if (/^postgres(ql)?:\/\//.test(value)) {
    try {
      new URL(value);
    } catch {
      throw new Error(`--store ${JSON.stringify(value)} is not a valid URL (expected postgres://USER@HOST:PORT/DB)`);
    }
    return { kind: 'postgres', url: value };
  }
  throw new Error(`--store must be "embedded" or a postgres://USER@HOST:PORT/DB URL, not ${JSON.stringify(value)}`);
}

export interface OpenStoreOptions {
  location: StoreLocation;
  /** `<root>/_svcq`: the embedded store keeps its journal under `store/` here. */
  home: string;
  hooks: StoreHooks;
  compactBytes?: number;
  configFor: (key: string) => QueueConfig | undefined;
  observer: StoreObserver;
  warn: (line: string) => void;
}

export interface OpenedStore {
  store: Store;
  /** The store's durable task events, for the task history (undefined: this store keeps none for it yet). */
  outbox: EventOutbox | undefined;
  /** Wakes long polls: in this process, or across every node on one database. */
  notifier: Notifier;
  /** Closes the store, then whatever it needed (the notifier's connection). */
  close(): Promise<void>;
}

/** Opens the store `--store` names; after it resolves every acknowledged item is back. */
export async function openStore(options: OpenStoreOptions): Promise<OpenedStore> {
  const { location, warn, configFor, observer } = options;
  if (location.kind === 'embedded') {
    const notifier = new InProcessNotifier();
    const store = new EmbeddedStore({ notifier, dir: path.join(options.home, 'store'), hooks: options.hooks, compactBytes: options.compactBytes, configFor, warn, observer });
    await store.open();
    return { store, outbox: store, notifier, close: () => store.close() };
  }
  const clock = await databaseClock(location.url, warn);
  const notifier = new PgNotifier({ url: location.url, warn });
  try {
    await notifier.start();
  } catch (err) {
    clock.close();
    throw err;
  }
  const store = new PostgresStore({ url: location.url, notifier, warn, observer, configFor, now: clock.now });
  try {
    await store.open();
  } catch (err) {
    clock.close();
    await notifier.close();
    throw err;
  }
  const outbox = isEventOutbox(store) ? store : undefined;
  return {
    store,
    outbox,
    notifier,
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

function isEventOutbox(store: object): store is EventOutbox {
  const s = store as Partial<EventOutbox>;
  return typeof s.readEvents === 'function' && typeof s.eventsDelivered === 'function' && typeof s.onEvents === 'function';
}
