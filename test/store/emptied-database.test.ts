import { expect } from 'chai';
import pg from 'pg';
import { resolveQueue } from '../../src/engine/config.js';
import { PostgresStore } from '../../src/store/postgres/postgres-store.js';
import type { QueueRef } from '../../src/store/store.js';
import { emptied, FakeClock, migratedDatabase, postgresPresent, postgresUnderTest, sequenceStates } from './support/stores.js';

/**
 * The conformance and model-based suites on PostgreSQL give each store a database emptied after
 * the store before it used it, rather than a new copy of the migrated one: what the next store
 * finds must be what a copy is, or a test would pass or fail by what ran before it.
 */

const target = await postgresUnderTest();

/** Every table of the schema with its rows (as JSON, in a fixed order), every sequence's state, and the statistics gathered on the schema's tables. */
async function contents(url: string): Promise<Record<string, unknown>> {
  const client = new pg.Client({ connectionString: url });
  await client.connect();
  try {
    const out: Record<string, unknown> = {};
    const tables = await client.query<{ name: string }>("SELECT relname AS name FROM pg_class WHERE relnamespace = 'public'::regnamespace AND relkind = 'r' ORDER BY relname");
    for (const { name } of tables.rows) {
      const { rows } = await client.query<{ row: string }>(`SELECT to_jsonb(t)::text AS row FROM ${pg.escapeIdentifier(name)} t ORDER BY 1`);
      out[name] = rows.map((r) => r.row);
    }
    out.sequences = await sequenceStates(url);
    const stats = await client.query<{ n: number }>("SELECT count(*)::integer AS n FROM pg_statistic WHERE starelid IN (SELECT oid FROM pg_class WHERE relnamespace = 'public'::regnamespace)");
    out.statistics = stats.rows[0]!.n;
    return out;
  } finally {
    await client.end();
  }
}

describe('test support: a PostgreSQL database emptied after a store used it is a fresh copy of the migrated one', function () {
  this.timeout(60_000);
  if (!postgresPresent(target)) return;

  it('after posts, claims, results, groups, limits, a pause and an ANALYZE, every table, sequence and statistic reads as in a new copy, and a store opened on it finds nothing', async () => {
    const fresh = await migratedDatabase(target.url);
    const used = await migratedDatabase(target.url);
    try {
      const sequences = await sequenceStates(used.url);
      const config = resolveQueue({ leaseSeconds: 10, maxAttempts: 1, retainSeconds: 60, fairness: 'groups', maxActive: 5, rateLimit: { max: 100, perSeconds: 1 } });
      const q: QueueRef = { key: 'e.example.com/q', host: 'e.example.com', name: 'q', config };
      const clock = new FakeClock();
      const store = new PostgresStore({ url: used.url, now: clock.now, configFor: (key) => (key === q.key ? config : undefined) });
      await store.open();
      await store.postMany(q, Array.from({ length: 20 }, (_, i) => ({ body: JSON.stringify({ i }), postedBy: 'p', options: { group: `g${i % 4}` } })));
      const claimed = await store.claimMany(q, { worker: 'w' }, 3);
      expect(claimed).to.have.length(3);
      await store.result(q, claimed[0]!.id, '{"ok":true}');
      await store.setPaused(q, true);
      await store.close();
      const admin = new pg.Client({ connectionString: used.url });
      await admin.connect();
      await admin.query('ANALYZE');
      // A connection left open is cut off by the emptying, as a store that was not closed would be.
      admin.on('error', () => undefined);
      const before = await contents(used.url);
      expect(before.svcq_items).to.have.length(20);
      expect(before.statistics).to.be.greaterThan(0);

      await emptied(used.url, sequences);

      expect(await contents(used.url)).to.deep.equal(await contents(fresh.url));
      const again = new PostgresStore({ url: used.url, now: clock.now, configFor: (key) => (key === q.key ? config : undefined) });
      await again.open();
      try {
        expect(await again.counts(q)).to.deep.equal({});
        expect(await again.claim(q, { worker: 'w' })).to.equal(null);
        const [posted] = await again.postMany(q, [{ body: '{"n":1}', postedBy: 'p', options: { group: 'g0' } }]);
        expect(posted!.created).to.equal(true);
        expect((await again.claim(q, { worker: 'w' }))?.id).to.equal(posted!.id);
      } finally {
        await again.close();
      }
      await admin.end().catch(() => undefined);
    } finally {
      await used.drop();
      await fresh.drop();
    }
  });
});
