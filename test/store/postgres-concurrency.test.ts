import { expect } from 'chai';
import pg from 'pg';
import { resolveQueue } from '../../src/engine/config.js';
import { PostgresStore } from '../../src/store/postgres/postgres-store.js';
import { MIGRATIONS } from '../../src/store/postgres/schema.js';
import { StoreUnavailable, type Claimed, type QueueRef } from '../../src/store/store.js';
import { FakeClock, freshDatabaseWithClient, postgresPresent, postgresUnderTest } from './support/stores.js';

/**
 * Several PostgresStore instances on one database, as several `svcq serve` nodes share it
 * (decisions §6.1): claims raced from every node, one idempotency key posted from every node at
 * once, deadlines swept by every node, and connections killed under load.
 */

const target = await postgresUnderTest();
const NODES = 3;
const HOST = 'nodes.example.com';
const sleep = (ms: number): Promise<void> => new Promise((resolve) => setTimeout(resolve, ms));

describe('PostgreSQL store: several nodes on one database (decisions §6.1)', function () {
  this.timeout(60_000);
  let db: { url: string; admin: pg.Client; drop: () => Promise<void> };
  let admin: pg.Client;
  let nodes: PostgresStore[] = [];
  let clock: FakeClock;
  let warnings: string[];
  const config = resolveQueue({ leaseSeconds: 10, maxAttempts: 3 });
  let queues = 0;
  const queue = (): QueueRef => {
    const name = `q${++queues}`;
    return { key: `${HOST}/${name}`, host: HOST, name, config };
  };
  /** The store's URL with an application name, so that a test can find (and kill) one node's connections. */
  const nodeUrl = (n: number): string => {
    const u = new URL(db.url);
    u.searchParams.set('application_name', `svcq-node-${n}`);
    return u.toString();
  };

  if (postgresPresent(target)) {
    beforeEach(async () => {
      db = await freshDatabaseWithClient(target.url);
      admin = db.admin;
      clock = new FakeClock();
      warnings = [];
      nodes = [];
      // Opened at once: the migrations run under an advisory lock, so the schema is made once.
      nodes = await Promise.all(
        Array.from({ length: NODES }, async (_, n) => {
          const store = new PostgresStore({ url: nodeUrl(n), now: clock.now, configFor: () => config, sweepIntervalMs: 50, warn: (l) => warnings.push(l) });
          await store.open();
          return store;
        }),
      );
    });
    afterEach(async () => {
      for (const store of nodes) await store.close().catch(() => undefined);
      await db.drop();
    });
  }

  async function itemRows(q: QueueRef): Promise<Array<{ id: string; status: string; attempts: number; lease_worker: string | null }>> {
    return (await admin.query('SELECT id, status, attempts, lease_worker FROM svcq_items WHERE queue = $1', [q.key])).rows;
  }
  async function eventCounts(q: QueueRef): Promise<Map<string, number>> {
    const res = await admin.query<{ id: string; event: string; n: number }>('SELECT id, event, count(*)::integer AS n FROM svcq_events WHERE host = $1 AND queue = $2 GROUP BY id, event', [q.host, q.name]);
    return new Map(res.rows.map((r) => [`${r.id} ${r.event}`, r.n]));
  }

  it('nodes that open at once migrate the schema once (decisions §6.1: migrations safe when several nodes start at once)', async () => {
    const res = await admin.query('SELECT version FROM svcq_migrations ORDER BY version');
    expect(res.rows.map((r) => r.version)).to.deep.equal(MIGRATIONS.map((m) => m.version));
  });

  it('hundreds of items posted across nodes and claimed from all of them at once are each leased exactly once (decisions §6.1, interface §4.2 rule 2)', async () => {
    const q = queue();
    const posted: string[] = [];
    await Promise.all(
      nodes.map(async (store, n) => {
        const singles = Array.from({ length: 60 }, (_, i) => store.post(q, { body: JSON.stringify({ n, i }), postedBy: `p${n}` }).then((o) => posted.push(o.id)));
        const batch = store.postMany(q, Array.from({ length: 40 }, (_, i) => ({ body: JSON.stringify({ n, batch: i }), postedBy: `p${n}` }))).then((out) => posted.push(...out.map((o) => o.id)));
        await Promise.all([...singles, batch]);
      }),
    );
    expect(posted.length).to.equal(300);
    expect(new Set(posted).size).to.equal(300);

    const claimed: Claimed[] = [];
    // Four claim loops per node, one of them with claimMany, all racing for the same rows.
    await Promise.all(
      nodes.flatMap((store, n) =>
        [0, 1, 2, 3].map(async (k) => {
          for (;;) {
            const got = k === 0 ? await store.claimMany(q, { worker: `w${n}.${k}` }, 7) : [await store.claim(q, { worker: `w${n}.${k}` })].filter((c): c is Claimed => c !== null);
            if (got.length === 0) return;
            claimed.push(...got);
          }
        }),
      ),
    );
    expect(claimed.length).to.equal(300);
    expect(new Set(claimed.map((c) => c.id))).to.deep.equal(new Set(posted));
    const rows = await itemRows(q);
    expect(rows.length).to.equal(300);
    const byId = new Map(claimed.map((c) => [c.id, c]));
    for (const row of rows) {
      expect(row).to.deep.include({ status: 'claimed', attempts: 1 });
      expect(row.lease_worker).to.equal(byId.get(row.id)!.lease.worker);
    }
    const events = await eventCounts(q);
    for (const id of posted) expect([events.get(`${id} posted`), events.get(`${id} claimed`)]).to.deep.equal([1, 1]);
  });

  it('one idempotency key posted from every node at once creates one item (decisions §3.5, §6.1)', async () => {
    const q = queue();
    const keys = Array.from({ length: 20 }, (_, i) => `key-${i}`);
    const outcomes = await Promise.all(nodes.flatMap((store, n) => keys.flatMap((key) => [0, 1].map(() => store.post(q, { body: JSON.stringify({ key, n }), postedBy: `p${n}`, idempotencyKey: key }).then((o) => ({ key, ...o }))))));
    for (const key of keys) {
      const mine = outcomes.filter((o) => o.key === key);
      expect(mine.filter((o) => o.created).length, key).to.equal(1);
      expect(new Set(mine.map((o) => o.id)).size, key).to.equal(1);
    }
    expect((await itemRows(q)).length).to.equal(keys.length);
    // A batch from every node with the same keys finds the same items.
    const again = await Promise.all(nodes.map((store) => store.postMany(q, keys.map((key) => ({ body: '{}', postedBy: 'p', idempotencyKey: key })))));
    for (const out of again) expect(out.every((o) => !o.created)).to.equal(true);
    expect((await itemRows(q)).length).to.equal(keys.length);
  });

  it('a lease that ends is re-queued exactly once while every node sweeps (decisions §3.2, §6.1: each deadline applied once)', async () => {
    const q = queue();
    const out = await nodes[0]!.postMany(
      q,
      Array.from({ length: 200 }, (_, i) => ({ body: JSON.stringify({ i }), postedBy: 'p' })),
    );
    const ids = out.map((o) => o.id);
    expect((await nodes[1]!.claimMany(q, { worker: 'w' }, 100)).length).to.equal(100);
    expect((await nodes[2]!.claimMany(q, { worker: 'w' }, 100)).length).to.equal(100);
    clock.advance(10_000);
    // Every node's periodic sweep (every 50 ms) and requests on every node race for the same rows.
    await Promise.all(nodes.flatMap((store) => [store.counts(q), store.get(q, ids[0]!), store.counts(q)]));
    await sleep(300);
    const rows = await itemRows(q);
    expect(rows.every((r) => r.status === 'pending' && r.attempts === 1)).to.equal(true);
    const events = await eventCounts(q);
    for (const id of ids) expect(events.get(`${id} requeued`), id).to.equal(1);
    // And the next lease end of those items, on their next claim, is again applied once.
    const again = await Promise.all(nodes.map((store) => store.claimMany(q, { worker: 'w2' }, 100)));
    expect(again.flat().length).to.equal(200);
    clock.advance(10_000);
    await sleep(300);
    const after = await eventCounts(q);
    for (const id of ids) expect(after.get(`${id} requeued`), id).to.equal(2);
  });

  it('a node that skips the deadline sweep while nothing can be due still applies a lease another node set, once it ends (decisions §3.2, §6.1)', async () => {
    // A lease of a minute: after a sweep, a node knows nothing in the queue can be due for a while
    // and its calls skip the sweep; no periodic sweep here, only the calls.
    const q: QueueRef = { ...queue(), config: resolveQueue({ leaseSeconds: 60, maxAttempts: 3 }) };
    // The other nodes' periodic sweeps would apply the lease too (and a claim skips a row a sweep
    // holds): they are closed.
    await Promise.all(nodes.map((n) => n.close()));
    const [a, b] = await Promise.all(
      [0, 1].map(async (n) => {
        const store = new PostgresStore({ url: nodeUrl(n), now: clock.now, sweepIntervalMs: 0 });
        await store.open();
        return store;
      }),
    );
    try {
      const first = await a.post(q, { body: '{"n":1}', postedBy: 'test' });
      await a.post(q, { body: '{"n":2}', postedBy: 'test' });
      clock.advance(1000);
      expect((await b.claim(q, { worker: 'on-b' }))?.id).to.equal(first.id);
      clock.advance(30_000);
      expect((await a.claim(q, { worker: 'on-a' }))?.id, 'the second item, the first still leased').to.not.equal(first.id);
      clock.advance(30_000);
      const again = await a.claim(q, { worker: 'on-a' });
      expect(again?.id, 'the lease set on the other node ended: the item is first in line again').to.equal(first.id);
      expect(again?.attempts).to.equal(2);
    } finally {
      await Promise.all([a.close(), b.close()]);
    }
  });

  it('a node whose clock is behind never stamps an item\'s change before the change it follows: a lease re-granted after another node ended the last one starts no earlier (decisions §3.2, §6.1)', async () => {
    const q = queue();
    // Only these two nodes, and no periodic sweeps: the other nodes are closed.
    await Promise.all(nodes.map((n) => n.close()));
    const behind = new FakeClock();
    const [ahead, late] = await Promise.all(
      [clock, behind].map(async (c, n) => {
        const store = new PostgresStore({ url: nodeUrl(n), now: c.now, sweepIntervalMs: 0 });
        await store.open();
        return store;
      }),
    );
    try {
      const { id } = await ahead.post(q, { body: '{}', postedBy: 'test' });
      const first = await ahead.claim(q, { worker: 'first' });
      // The lease ends on the node whose clock is ahead, which re-queues the item at its time.
      clock.advance(config.leaseMs + 5000);
      const requeuedAt = (await ahead.get(q, id))!.updatedAt;
      expect(requeuedAt).to.equal(first!.lease.until + 5000);
      behind.advance(config.leaseMs + 1000);
      const again = await late.claim(q, { worker: 'second' });
      expect(again?.id).to.equal(id);
      expect(again!.lease.until, 'the new lease runs a full lease from the re-queue, not from the late clock').to.equal(requeuedAt + config.leaseMs);
      const record = (await late.get(q, id))!;
      expect(record.updatedAt).to.equal(requeuedAt);
      const ts = (await admin.query('SELECT ts FROM svcq_events WHERE host = $1 AND queue = $2 AND id = $3 ORDER BY seq', [q.host, q.name, id])).rows.map((r) => Number(r.ts));
      expect(ts, 'event times never go back').to.deep.equal([...ts].sort((x, y) => x - y));
    } finally {
      await Promise.all([ahead.close(), late.close()]);
    }
  });

  it('connections killed under load: calls are refused with StoreUnavailable, none resolves unless committed, and the node serves again (decisions §6, §6.1)', async () => {
    const q = queue();
    const store = nodes[0]!;
    const resolvedPosts: string[] = [];
    const resolvedClaims: Claimed[] = [];
    const refusals: unknown[] = [];
    const others: unknown[] = [];
    let stop = false;
    const onFailure = (err: unknown): void => {
      if (err instanceof StoreUnavailable) refusals.push(err);
      else others.push(err);
    };
    const load = Array.from({ length: 8 }, async (_, k) => {
      for (let i = 0; !stop; i++) {
        await store.post(q, { body: JSON.stringify({ k, i }), postedBy: 'p', idempotencyKey: `${k}:${i}` }).then((o) => resolvedPosts.push(o.id), onFailure);
        if (i % 2 === 0) await store.claim(q, { worker: `w${k}` }).then((c) => c && resolvedClaims.push(c), onFailure);
      }
    });
    const kill = async (): Promise<number> => {
      const res = await admin.query(`SELECT count(pg_terminate_backend(pid))::integer AS n FROM pg_stat_activity WHERE application_name = 'svcq-node-0' AND datname = current_database()`);
      return res.rows[0].n as number;
    };
    await sleep(150);
    // A kill that finds only idle connections refuses no call (the pool opens new ones): kill
    // again until some transaction was cut, for up to 15 s (on a loaded machine the node spends
    // most of its time between transactions, and a kill can miss them many times in a row).
    let killed = 0;
    const giveUpAt = Date.now() + 15_000;
    for (let round = 0; Date.now() < giveUpAt && (round < 2 || refusals.length === 0); round++) {
      killed += await kill();
      await sleep(100);
    }
    await sleep(50);
    stop = true;
    await Promise.all(load);

    expect(killed).to.be.greaterThan(0);
    expect(others).to.deep.equal([]);
    expect(refusals.length).to.be.greaterThan(0);
    // Everything that resolved is committed: each post's item is there, each claim holds its lease.
    const rows = new Map((await itemRows(q)).map((r) => [r.id, r]));
    for (const id of resolvedPosts) expect(rows.has(id), `posted ${id}`).to.equal(true);
    for (const c of resolvedClaims) expect(rows.get(c.id), `claimed ${c.id}`).to.deep.include({ status: 'claimed', lease_worker: c.lease.worker });
    expect(resolvedPosts.length).to.be.greaterThan(0);

    // The same node serves again, on new connections.
    const after = await store.post(q, { body: '{"after":true}', postedBy: 'p' });
    expect(after.created).to.equal(true);
    expect(await store.get(q, after.id)).to.deep.include({ status: 'pending' });
    expect(warnings.some((w) => w.includes('succeed again'))).to.equal(true);
  });
});
