import { expect } from 'chai';
import pg from 'pg';
import { resolveQueue } from '../../src/engine/config.js';
import { PostgresStore } from '../../src/store/postgres/postgres-store.js';
import type { QueueRef } from '../../src/store/store.js';
import { suiteDatabase } from './support/stores.js';

/**
 * Calls folded into one transaction apply their answers in the order they were made (decisions
 * §6.1: a transaction's calls run in order), whatever each awaits besides its own statement: a post
 * to a queue new to the database (which registers the queue first) and a claim made right after
 * it, in the same turn, give "posted" then "claimed" in the task events, in the order the history
 * reads them.
 */
describe('PostgreSQL: calls of one transaction apply their answers in the order they were made (decisions §5, §6.1)', function () {
  this.timeout(60_000);
  const db = suiteDatabase();

  it('a post to a new queue and a claim made in the same turn: the claim takes the item, and its event follows the post event', async () => {
    const config = resolveQueue({ leaseSeconds: 60 });
    const store = new PostgresStore({ url: db().url, configFor: () => config, sweepIntervalMs: 0 });
    await store.open();
    const client = new pg.Client({ connectionString: db().url });
    await client.connect();
    try {
      for (let n = 0; n < 20; n++) {
        const q: QueueRef = { key: `fold.example.com/q${n}`, host: 'fold.example.com', name: `q${n}`, config };
        const [posted, claimed] = await Promise.all([store.post(q, { body: '{"n":1}', postedBy: 'p' }), store.claim(q, { worker: 'w' })]);
        expect(claimed?.id, `queue q${n}: the claim made after the post takes its item`).to.equal(posted.id);
        const { rows } = await client.query<{ event: string; xid: string }>('SELECT event, xid::text FROM svcq_events WHERE queue = $1 ORDER BY xid, seq', [`q${n}`]);
        expect(rows.map((r) => r.event), `queue q${n}`).to.deep.equal(['posted', 'claimed']);
      }
    } finally {
      await client.end();
      await store.close();
    }
  });
});
