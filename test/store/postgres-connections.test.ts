import { expect } from 'chai';
import pg from 'pg';
import { resolveQueue } from '../../src/engine/config.js';
import { openStore } from '../../src/store/open-store.js';
import { PgDefinitionStore } from '../../src/store/postgres/pg-definition-store.js';
import { PostgresStore } from '../../src/store/postgres/postgres-store.js';
import { StoreUnavailable, type QueueRef } from '../../src/store/store.js';
import { startupProxy } from './support/startup-proxy.js';
import { FakeClock, freshDatabaseWithClient, postgresPresent, postgresUnderTest } from './support/stores.js';

/**
 * Connections the database ends at any moment (pg_terminate_backend, a restart): a node refuses
 * what they carried and goes on; none of them stops it.
 */

const target = await postgresUnderTest();
const sleep = (ms: number): Promise<void> => new Promise((resolve) => setTimeout(resolve, ms));

describe('PostgreSQL store: connections the database ends (decisions §6, §6.1)', function () {
  this.timeout(30_000);
  let db: { url: string; admin: pg.Client; drop: () => Promise<void> };
  let proxy: Awaited<ReturnType<typeof startupProxy>>;
  const config = resolveQueue({ leaseSeconds: 10 });
  const q: QueueRef = { key: 'conn.example.com/q', host: 'conn.example.com', name: 'q', config };

  if (postgresPresent(target)) {
    beforeEach(async () => {
      db = await freshDatabaseWithClient(target.url);
      proxy = await startupProxy(db.url);
    });
    afterEach(async () => {
      proxy.close();
      await db.drop();
    });
  }

  /** Ends every connection of the database but the admin's, and gives the pools time to drop their idle ones. */
  async function endConnections(settleMs = 200): Promise<void> {
    await db.admin.query('SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = current_database() AND pid <> pg_backend_pid()');
    await sleep(settleMs);
  }

  /** The next connection opened through the proxy is ended by the database as it becomes ready; both reach the client in one read. */
  function endNextConnectionAsItOpens(): Promise<void> {
    return new Promise((resolve) => proxy.armNext((pid) => void db.admin.query('SELECT pg_terminate_backend($1)', [pid]).then(() => resolve())));
  }

  it('a new connection of the store that the database ends in the same read as its ready answer refuses that call with 503 and stops nothing: the next call is made (decisions §6: a 503, the server keeps running; §6.1: nodes reconnect by themselves)', async () => {
    const clock = new FakeClock();
    const store = new PostgresStore({ url: proxy.url, now: clock.now, configFor: (key) => (key === q.key ? config : undefined), sweepIntervalMs: 0, eventRetentionMs: 0 });
    await store.open();
    try {
      await endConnections();
      const ended = endNextConnectionAsItOpens();
      const refused = await store.post(q, { body: '{"n":1}', postedBy: 'p' }).then(
        () => null,
        (err: unknown) => err,
      );
      await ended;
      expect(refused).to.be.instanceOf(StoreUnavailable);
      const made = await store.post(q, { body: '{"n":2}', postedBy: 'p' });
      const { rows } = await db.admin.query<{ body: string }>('SELECT body FROM svcq_items');
      expect(rows.map((r) => r.body)).to.deep.equal(['{"n":2}']);
      expect(made.id).to.match(/^[0-9a-f]{16}$/);
    } finally {
      await store.close();
    }
  });

  it('a new connection of the definitions that the database ends in the same read as its ready answer fails that read and stops nothing: the next one answers (decisions §6.1)', async () => {
    const defs = await PgDefinitionStore.open({ url: proxy.url });
    try {
      // Before the listening connection opens again (100 ms) and the counter is polled (500 ms):
      // the read is the next to open a connection.
      await endConnections(20);
      const ended = endNextConnectionAsItOpens();
      const failed = await defs.list().then(
        () => null,
        (err: unknown) => err,
      );
      await ended;
      expect(failed).to.be.instanceOf(Error);
      expect(await defs.list()).to.deep.equal([]);
    } finally {
      await defs.close();
    }
  });

  it('a node whose first look at the database\'s clock has its connection ended as it opens fails to open its store with an error, and stops nothing else (decisions §6.1: nodes keep the database\'s time)', async () => {
    const ended = endNextConnectionAsItOpens();
    const failed = await openStore({ location: { kind: 'postgres', url: proxy.url }, home: '/nonexistent', hooks: { stage: () => Promise.reject(new Error('no payloads here')) }, configFor: () => undefined, observer: { committed: () => undefined, events: () => undefined }, warn: () => undefined }).then(
      async (opened) => {
        await opened.close();
        return null;
      },
      (err: unknown) => err,
    );
    await ended;
    expect(failed).to.be.instanceOf(Error);
    expect((failed as Error).message).to.match(/cannot reach the PostgreSQL store/);
  });
});
