import path from 'node:path';
import type { QueueConfig } from '../engine/config.js';
import { InProcessNotifier, type Notifier } from '../waiting/notifier.js';
import { EmbeddedStore } from './embedded-store.js';
import type { EventOutbox, PayloadKind, Store, StoreHooks, StoreObserver } from './store.js';

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
  /** Where archived payloads are read when the store keeps them itself (PostgreSQL, shared by every node). */
  payloads?: { read(host: string, queue: string, id: string, kind: PayloadKind): Promise<Buffer | null> };
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
  // Loaded only for a database: the driver and the PostgreSQL store are a fifth of the server
  // thread's code, which an embedded server would otherwise read and compile at every start.
  const { openPostgres } = await import('./postgres/open-postgres.js');
  return openPostgres(location.url, options);
}
