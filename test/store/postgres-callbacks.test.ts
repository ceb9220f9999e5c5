import { expect } from 'chai';
import { resolveQueue } from '../../src/engine/config.js';
import { PostgresStore } from '../../src/store/postgres/postgres-store.js';
import type { QueueRef, TakenCallback } from '../../src/store/store.js';
import { freshDatabase, postgresUnderTest } from './support/stores.js';

const pgTarget = await postgresUnderTest();

/**
 * decisions §9.2 on several nodes: two stores on one database take the callbacks owed at once,
 * and no callback is taken by both for the same attempt.
 */
describe('callbacks on PostgreSQL, two nodes on one database (decisions §6.1, §9.2)', function () {
  this.timeout(60_000);
  if ('whyNot' in pgTarget) {
    before(function () {
      console.log(`    skipped: ${pgTarget.whyNot}`);
      this.skip();
    });
    return;
  }
  const config = resolveQueue({ leaseSeconds: 60, callback: 'http://127.0.0.1:9/hook' });
  const q: QueueRef = { key: 'nodes.example.com/cb', host: 'nodes.example.com', name: 'cb', config };

  it('each callback owed is taken by one node only, however the takes of two nodes interleave; a late settle of a stale hold changes nothing', async () => {
    const db = await freshDatabase(pgTarget.url);
    const stores = [0, 1].map(() => new PostgresStore({ url: db.url, configFor: (key) => (key === q.key ? config : undefined), warn: () => undefined, sweepIntervalMs: 0 }));
    try {
      for (const s of stores) await s.open();
      const [a, b] = stores as [PostgresStore, PostgresStore];
      const ids = (await a.postMany(q, Array.from({ length: 200 }, (_, i) => ({ body: `{"i":${i}}`, postedBy: 'p' })))).map((o) => o.id);
      await Promise.all(ids.map((id, i) => (i % 2 === 0 ? a : b).cancel(q, id)));
      const taken: TakenCallback[] = [];
      // Both nodes take in small batches at once until nothing is left.
      for (;;) {
        const got = (await Promise.all([a.takeCallbacks(7, 60_000), b.takeCallbacks(7, 60_000), a.takeCallbacks(5, 60_000), b.takeCallbacks(5, 60_000)])).flat();
        if (got.length === 0) break;
        taken.push(...got);
      }
      expect(taken.map((c) => c.itemId).sort()).to.deep.equal([...ids].sort());
      expect(new Set(taken.map((c) => c.id)).size).to.equal(ids.length);
      for (const c of taken) expect(c.record?.status).to.equal('cancelled');
      const settled = await Promise.all(taken.map((c, i) => (i % 2 === 0 ? a : b).settleCallback(c, { delivered: true })));
      expect(settled.every((s) => s === 'delivered')).to.equal(true);
      expect(await a.settleCallback(taken[0]!, { delivered: true })).to.equal('stale');
      expect((await b.overview(q, { oldest: 0, leases: 0 })).callbacks).to.deep.equal({ owed: 0, failing: 0 });
    } finally {
      for (const s of stores) await s.close().catch(() => undefined);
      await db.drop();
    }
  });
});
