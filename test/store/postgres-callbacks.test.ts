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

  it('a node holding its own callbacks is handed each as its change commits, with the record it ended with; no other node takes it while held, until it is released', async () => {
    const db = await freshDatabase(pgTarget.url);
    let clock = 1_000_000;
    const stores = [0, 1].map(() => new PostgresStore({ url: db.url, configFor: (key) => (key === q.key ? config : undefined), warn: () => undefined, sweepIntervalMs: 0, now: () => clock }));
    try {
      for (const s of stores) await s.open();
      const [a, b] = stores as [PostgresStore, PostgresStore];
      const born: TakenCallback[] = [];
      let wants = true;
      a.holdOwnCallbacks({ holdMs: 60_000, wants: () => wants, deliver: (list) => born.push(...list) });
      const [x, y, z] = (await a.postMany(q, [0, 1, 2].map((i) => ({ body: `{"i":${i}}`, postedBy: 'p' })))).map((o) => o.id) as [string, string, string];
      const claimed = await a.claim(q, { worker: 'w' });
      expect(claimed?.id).to.equal(x);
      await a.result(q, x, '{"ok":true}');
      await a.cancel(q, y);
      // Born held: handed over as committed, due again only when the hold runs out.
      expect(born.map((c) => [c.itemId, c.event, c.tries, c.dueAt])).to.deep.equal([
        [x, 'finished', 0, clock + 60_000],
        [y, 'cancelled', 0, clock + 60_000],
      ]);
      expect(born[0]!.record).to.include({ id: x, status: 'finished', result: '{"ok":true}', attempts: 1 });
      expect(await b.takeCallbacks(10, 60_000)).to.deep.equal([]);
      expect(await a.takeCallbacks(10, 60_000)).to.deep.equal([]);
      // A release ends the hold (only of the obligation as taken): due at once, for any node.
      await a.releaseCallbacks([born[1]!, { ...born[0]!, tries: 3 }]);
      const released = await b.takeCallbacks(10, 60_000);
      expect(released.map((c) => c.itemId)).to.deep.equal([y]);
      expect(await b.settleCallback(released[0]!, { delivered: true })).to.equal('delivered');
      // The born one settles like a taken one.
      expect(await a.settleCallback(born[0]!, { delivered: true })).to.equal('delivered');
      // A node that does not want them (its own queue is long) makes them due at once.
      wants = false;
      await b.cancel(q, z);
      const [owedZ] = await b.takeCallbacks(10, 60_000);
      expect(born).to.have.length(2);
      expect(owedZ?.itemId).to.equal(z);
      // Settled like any other: a failed attempt is owed again, by the backoff.
      clock += 1000;
      expect(await b.settleCallback(owedZ!, { delivered: false, reason: 'refused' })).to.equal('retrying');
      expect((await b.overview(q, { oldest: 0, leases: 0 })).callbacks).to.deep.equal({ owed: 1, failing: 1 });
    } finally {
      for (const s of stores) await s.close().catch(() => undefined);
      await db.drop();
    }
  });
});
