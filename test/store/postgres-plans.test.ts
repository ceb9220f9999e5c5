import { expect } from 'chai';
import type pg from 'pg';
import { resolveQueue } from '../../src/engine/config.js';
import { PostgresStore } from '../../src/store/postgres/postgres-store.js';
import type { QueueRef } from '../../src/store/store.js';
import { FakeClock, freshDatabaseWithClient, postgresPresent, postgresUnderTest } from './support/stores.js';

/**
 * How the PostgreSQL store's statements are planned (postgres-store.ts, `Plan`): the hot ones on a
 * plan made once per connection and kept, the others planned at every run; and a kept plan made on
 * an empty table still finds its rows by index or by `ctid` once the table is large.
 */

const target = await postgresUnderTest();

/** The statements whose plan a connection keeps, with arguments for EXPLAIN EXECUTE (empty arrays: the plan is what is read). */
const KEPT: Record<string, string> = {
  svcq_claim: `'h/q', -1000, -1, 10`,
  svcq_insert_items: `'h/q', '{}', '{}', '{}', '{}', 0, 0, 'pending', 0, 0, '{}', '{}', '{}', '{}', '{}'`,
  svcq_write_items: Array(19).fill(`'{}'`).join(', '),
  svcq_finish: Array(36).fill(`'{}'`).join(', '),
  svcq_write_payloads: `'{}', '{}', '{}', '{}', '{}', 0`,
  svcq_lock_items: `'h/q', '{}'`,
};

/**
 * What `EXPLAIN (ANALYZE…)` shows for `statement` on `client`, in a transaction rolled back after
 * `settings` (SET LOCALs, as the store sends them before its statements): the connection goes
 * back as it was.
 */
async function explained(client: pg.ClientBase, settings: string, statement: string, options = 'ANALYZE, COSTS OFF, TIMING OFF, SUMMARY OFF'): Promise<string> {
  await client.query('BEGIN');
  try {
    if (settings) await client.query(settings);
    const { rows } = await client.query<{ 'QUERY PLAN': string }>(`EXPLAIN (${options}) ${statement}`);
    return rows.map((r) => r['QUERY PLAN']).join('\n');
  } finally {
    await client.query('ROLLBACK');
  }
}

describe('PostgreSQL store: statements planned once, and planned at every run', function () {
  this.timeout(60_000);
  let db: { url: string; admin: pg.Client; drop: () => Promise<void> };
  let store: PostgresStore;
  let clock: FakeClock;
  const config = resolveQueue({ leaseSeconds: 10, maxAttempts: 3, retainSeconds: 600, 'svc-queue-archivePayloads': true });
  const q: QueueRef = { key: 'h/q', host: 'h', name: 'q', config };

  /** The store's one connection (poolSize 1): its prepared statements are visible only from it. */
  const connection = (): pg.Pool => (store as unknown as { pool: pg.Pool }).pool;

  if (postgresPresent(target)) {
    beforeEach(async () => {
      db = await freshDatabaseWithClient(target.url);
      clock = new FakeClock();
      store = new PostgresStore({ url: db.url, now: clock.now, poolSize: 1, sweepIntervalMs: 0, configFor: () => config });
      await store.open();
    });
    afterEach(async () => {
      await store.close();
      await db.drop();
    });
  }

  /**
   * Statistics of a table where nothing is pending (a queue whose workers keep up: each item posted,
   * claimed and finished), vacuumed and analyzed; then a backlog of 100,000 items builds up before
   * the next ANALYZE, posted 1,000 at a time (the items of a batch, or of one transaction, share
   * their posting time: the live index keeps one entry per time, and is much smaller than the
   * pending index).
   */
  async function analyzedWithNothingPending(): Promise<void> {
    await db.admin.query(
      `INSERT INTO svcq_items (queue, id, ord, body, posted_by, posted_at, status, updated_at, attempts)
       SELECT 'h/done', lpad(to_hex(n), 16, '0'), nextval('svcq_item_ord'), '{}', 'p', 0, 'pending', 0, 0 FROM generate_series(1, 5000) AS n`,
    );
    await db.admin.query(`UPDATE svcq_items SET status = 'claimed', lease_until = 1, attempts = 1 WHERE status = 'pending'`);
    await db.admin.query(`UPDATE svcq_items SET status = 'finished', finished_at = 0, lease_until = NULL WHERE status <> 'finished'`);
    await db.admin.query('VACUUM ANALYZE svcq_items');
  }

  async function backlog(): Promise<void> {
    await db.admin.query(
      `INSERT INTO svcq_items (queue, id, ord, body, posted_by, posted_at, status, updated_at, attempts)
       SELECT 'h/q', lpad(to_hex(n), 16, '0'), nextval('svcq_item_ord'), '{"i":1}', 'p', 1000 + n / 1000, 'pending', 1000 + n / 1000, 0 FROM generate_series(1, 100000) AS n`,
    );
  }

  /**
   * The store's own statements run first (the workload below), then the statistics of a table
   * with nothing pending are taken, then the backlog builds up; autovacuum stays off throughout,
   * so that no ANALYZE comes in between.
   */
  async function backlogAfterStaleStatistics(): Promise<void> {
    await db.admin.query('ALTER TABLE svcq_items SET (autovacuum_enabled = off)');
    await workload();
    await analyzedWithNothingPending();
    await backlog();
  }

  /** The plan the store's connection runs `EXECUTE name(args)` with, run (in a transaction rolled back). */
  function planRun(client: pg.PoolClient, name: string, args: string, generic: boolean): Promise<string> {
    return explained(client, generic ? 'SET LOCAL plan_cache_mode = force_generic_plan' : '', `EXECUTE ${name}(${args})`);
  }

  /** Posts, claims, results, an error that re-queues, and a sweep of ended leases, on an almost empty table. */
  async function workload(): Promise<void> {
    const posted = await store.postMany(q, Array.from({ length: 6 }, (_, i) => ({ body: JSON.stringify({ i }), postedBy: 'p' })));
    // In one turn, so one transaction: claims, posts and submissions together.
    const claimed = await Promise.all([store.claim(q, { worker: 'a' }), store.claim(q, { worker: 'b' }), store.post(q, { body: '{}', postedBy: 'p' })]);
    await Promise.all([store.result(q, claimed[0]!.id, '{"ok":true}'), store.error(q, claimed[1]!.id, '{"ok":false}'), store.claim(q, { worker: 'c' })]);
    // Leases that end, applied by a sweep: its writes go out before its next batch (svcq_write_items).
    await store.claimMany(q, { worker: 'd' }, 3);
    clock.advance(11_000);
    await store.sweepNow();
    expect(posted.length).to.equal(6);
  }

  it('keeps one plan per connection for claims, inserts, submissions\' locks and the writes by ctid, and plans the sweep at every run (plans: kept only where one plan fits every size)', async function () {
    if (!postgresPresent(target)) return this.skip();
    await workload();
    const { rows } = await connection().query<{ name: string; generic_plans: number; custom_plans: number }>(
      `SELECT name, generic_plans::integer, custom_plans::integer FROM pg_prepared_statements WHERE name LIKE 'svcq\\_%'`,
    );
    const plans = new Map(rows.map((r) => [r.name, r]));
    for (const name of Object.keys(KEPT)) {
      expect(plans.get(name), name).to.not.equal(undefined);
      expect(plans.get(name)!.custom_plans, `${name} planned at a run`).to.equal(0);
      expect(plans.get(name)!.generic_plans, name).to.be.above(0);
    }
    // The sweep runs before the writes it staged, and with its own plan.
    expect(plans.get('svcq_sweep')!.generic_plans).to.equal(0);
  });

  it('a plan kept from an empty table still claims through the pending index, locks by primary key and writes by ctid once the queue holds 50,000 items (plans: no sequential scan of the items)', async function () {
    if (!postgresPresent(target)) return this.skip();
    // No ANALYZE behind the test's back: it would make the connection plan again, and the plan
    // shown would not be the one kept from the empty table.
    await db.admin.query('ALTER TABLE svcq_items SET (autovacuum_enabled = off)');
    await workload();
    // Held, so that the pool does not close it (and its prepared statements) while idle.
    const client = await connection().connect();
    await db.admin.query(
      `INSERT INTO svcq_items (queue, id, ord, body, posted_by, posted_at, status, updated_at, attempts)
       SELECT 'h/q', lpad(to_hex(n), 16, '0'), nextval('svcq_item_ord'), '{}', 'p', 0, CASE WHEN n % 2 = 0 THEN 'pending' ELSE 'finished' END, 0, 0
         FROM generate_series(1, 50000) AS n`,
    );
    try {
      // The plan kept is what EXPLAIN EXECUTE shows once plans are not made per run (inside a
      // transaction rolled back: the connection goes back to the store as it was).
      const shown = new Map<string, string>();
      await client.query('BEGIN');
      try {
        await client.query('SET LOCAL plan_cache_mode = force_generic_plan');
        for (const [name, args] of Object.entries(KEPT)) {
          const { rows } = await client.query<{ 'QUERY PLAN': string }>(`EXPLAIN (COSTS OFF) EXECUTE ${name}(${args})`);
          shown.set(name, rows.map((r) => r['QUERY PLAN']).join('\n'));
        }
      } finally {
        await client.query('ROLLBACK');
      }
      // The inserts read no items at all; the claim and the writes must not read them all.
      for (const [name, plan] of shown) expect(plan, `${name}:\n${plan}`).to.not.match(/Seq Scan on svcq_items|Bitmap Heap Scan on svcq_items/);
      expect(shown.get('svcq_claim')).to.match(/Index Scan using svcq_items_pending on svcq_items/);
      // Each id probed through the primary key with both columns, not the queue read and filtered.
      expect(shown.get('svcq_lock_items')).to.match(/Index Scan using svcq_items_pkey on svcq_items\s+Index Cond: \(\(queue = .*\) AND \(id = .*\)\)/);
      for (const name of ['svcq_write_items', 'svcq_finish']) {
        const plan = shown.get(name)!;
        expect(plan, plan).to.match(/Tid Scan on svcq_items/);
        expect(plan, plan).to.not.match(/Index Scan using \w+ on svcq_items/);
      }
    } finally {
      client.release();
    }
  });
  it('a claim planned from statistics taken while no item was pending still walks the pending index once 100,000 wait, with no sort (plans: claim order read from the pending index, whatever the statistics)', async function () {
    if (!postgresPresent(target)) return this.skip();
    await backlogAfterStaleStatistics();
    // The store plans its claim again (ANALYZE ended the plan it kept), from those statistics.
    expect(await store.claim(q, { worker: 'e' })).to.not.equal(null);
    // Held, so that the pool does not close it (and its prepared statements) while idle.
    const client = await connection().connect();
    try {
      const plan = await planRun(client, 'svcq_claim', KEPT.svcq_claim!, true);
      expect(plan, plan).to.match(/Index Scan using svcq_items_pending on svcq_items/);
      expect(plan, plan).to.not.match(/Sort|svcq_items_live/);
      // The ten items claimed, not the 100,000 read.
      expect(plan, plan).to.match(/Index Scan using svcq_items_pending on svcq_items \(actual rows=10 /);
    } finally {
      client.release();
    }
  });
  it('with 100,000 items waiting across priorities −100…100, half of them delayed and the delayed ones first in claim order, a claim reads only the ten it takes from the pending index, with no sort (decisions §8.1; plans: claim order by priority, delayed items out of the way)', async function () {
    if (!postgresPresent(target)) return this.skip();
    await db.admin.query('ALTER TABLE svcq_items SET (autovacuum_enabled = off)');
    await workload();
    await db.admin.query(
      `INSERT INTO svcq_items (queue, id, ord, body, posted_by, posted_at, status, updated_at, attempts, priority, available_at)
       SELECT 'h/q', lpad(to_hex(n), 16, '0'), nextval('svcq_item_ord'), '{"i":1}', 'p', 1000, 'pending', 1000, 0,
              CASE WHEN n % 2 = 0 THEN 100 ELSE (n % 201) - 100 END, CASE WHEN n % 2 = 0 THEN 9000000000000 ELSE 0 END
         FROM generate_series(1, 100000) AS n`,
    );
    await db.admin.query('ANALYZE svcq_items');
    const claimed = await store.claimMany(q, { worker: 'e' }, 3);
    const overview = await store.overview(q, { oldest: 3, leases: 0 });
    // Claimable items of priority 100 come before any waiting item; after the three claimed.
    expect(overview.oldest.map((o) => o.postedAt)).to.deep.equal([1000, 1000, 1000]);
    expect(overview.oldest.map((o) => o.id)).to.not.include.members(claimed.map((c) => c.id));
    const rows = (await db.admin.query<{ priority: number; posted_at: string }>(`SELECT priority, posted_at FROM svcq_items WHERE id = ANY($1::text[])`, [claimed.map((c) => c.id)])).rows;
    // Priority 100 holds delayed items (n even) and claimable ones (n odd, n % 201 = 200).
    expect(rows.map((r) => [r.priority, Number(r.posted_at)]), 'the highest priority, never a delayed item').to.deep.equal([[100, 1000], [100, 1000], [100, 1000]]);
    expect(claimed.map((c) => c.attempts)).to.deep.equal([1, 1, 1]);
    const client = await connection().connect();
    try {
      for (const generic of [true, false]) {
        const plan = await planRun(client, 'svcq_claim', KEPT.svcq_claim!, generic);
        expect(plan, plan).to.match(/Index Scan using svcq_items_pending on svcq_items \(actual rows=10 /);
        expect(plan, plan).to.not.match(/Sort|Seq Scan/);
        // No delayed row read and dropped on the way.
        expect(plan, plan).to.not.match(/svcq_items_pending[\s\S]*Rows Removed by Filter/);
      }
      // The operators' list of the first pending items, claimable or waiting, in claim order: the
      // first 20 of each read from its index, and only those 40 sorted.
      const { rows: planRows } = await db.admin.query<{ 'QUERY PLAN': string }>(
        `EXPLAIN (ANALYZE, COSTS OFF, TIMING OFF, SUMMARY OFF) SELECT id, posted_at, attempts FROM (
           (SELECT id, posted_at, attempts, priority, ord FROM svcq_items WHERE queue = 'h/q' AND status = 'pending' AND available_at = 0 ORDER BY (-priority), ord LIMIT 20)
           UNION ALL
           (SELECT id, posted_at, attempts, priority, ord FROM svcq_items WHERE queue = 'h/q' AND status = 'pending' AND available_at > 0 ORDER BY (-priority), ord LIMIT 20)
         ) AS o ORDER BY (-priority), ord LIMIT 20`,
      );
      const oldest = planRows.map((r) => r['QUERY PLAN']).join('\n');
      expect(oldest, oldest).to.match(/Index Scan using svcq_items_pending on svcq_items \(actual rows=20 /);
      expect(oldest, oldest).to.match(/Index Scan using svcq_items_waiting on svcq_items \w+ \(actual rows=20 /);
      expect(oldest, oldest).to.match(/Append \(actual rows=40 /);
      expect(oldest, oldest).to.not.match(/Seq Scan/);
    } finally {
      client.release();
    }
  });
  it('the oldest pending item of GET /api/v2/queues is found by reading the live index in posting order, not every live item, when statistics were taken while nothing was pending (plans: the oldest pending item, whatever the statistics)', async function () {
    if (!postgresPresent(target)) return this.skip();
    await backlogAfterStaleStatistics();
    const overview = await store.overview(q, { oldest: 0, leases: 0 });
    expect(overview.oldestPendingAt).to.equal(1000);
    const client = await connection().connect();
    try {
      const plan = await planRun(client, 'svcq_oldest_pending', `'h/q'`, false);
      expect(plan, plan).to.match(/Index Scan using svcq_items_live on svcq_items \(actual rows=1 /);
      expect(plan, plan).to.not.match(/Sort|Aggregate|svcq_items_pending/);
    } finally {
      client.release();
    }
  });
  it('the sweep finds items waiting out a retry delay through the (queue, available_at) index, not by reading every pending item, when statistics were taken while nothing was pending (plans: the sweep, whatever the statistics)', async function () {
    if (!postgresPresent(target)) return this.skip();
    await backlogAfterStaleStatistics();
    const client = await connection().connect();
    try {
      // Planned at each run, with its values: a sweep at the clock's time of a queue without a timeout.
      const now = clock.now();
      const plan = await planRun(client, 'svcq_sweep', `'h/q', ${now}, false, 0, true, ${now - config.retainMs}, false`, false);
      expect(plan, plan).to.match(/Index Scan using svcq_items_retry on svcq_items/);
      expect(plan, plan).to.not.match(/svcq_items_pending|svcq_items_live|Seq Scan/);
      expect(plan, plan).to.not.match(/actual rows=[1-9]\d{3,}/);
    } finally {
      client.release();
    }
  });
  it('a claim with criteria reads its first page of pending items from the pending index, not the whole backlog, when statistics were taken while nothing was pending (plans: pages of a claim with criteria, whatever the statistics)', async function () {
    if (!postgresPresent(target)) return this.skip();
    await backlogAfterStaleStatistics();
    await db.admin.query('SELECT pg_stat_reset()');
    expect(await store.claim(q, { worker: 'picky', criteria: { i: { gte: 0 } } })).to.not.equal(null);
    // The store's connection reports what it read at once (at its next idle moment).
    await connection().query('SELECT pg_stat_force_next_flush()');
    await connection().query('SELECT 1');
    const { rows } = await db.admin.query<{ indexrelname: string; read: string }>(
      `SELECT indexrelname, idx_tup_read::text AS read FROM pg_stat_user_indexes WHERE relname = 'svcq_items'`,
    );
    const read = Object.fromEntries(rows.map((r) => [r.indexrelname, Number(r.read)]));
    // One page of 500 rows (and the item locked), not the 100,000 waiting.
    expect(read.svcq_items_pending, JSON.stringify(read)).to.be.within(1, 1000);
    expect(read.svcq_items_live ?? 0, JSON.stringify(read)).to.be.below(1000);
  });

  it('a claim under a rateLimit reads only the rate slots its leases would overwrite, one probe each, however many leases the window holds (plans: the rate window, decisions §8.5)', async () => {
    const rated = resolveQueue({ leaseSeconds: 10, rateLimit: { max: 100_000, perSeconds: 1 } });
    const r: QueueRef = { key: 'h/r', host: 'h', name: 'r', config: rated };
    const limited = new PostgresStore({ url: db.url, now: clock.now, poolSize: 1, sweepIntervalMs: 0, configFor: (key) => (key === r.key ? rated : config) });
    await limited.open();
    try {
      await limited.postMany(r, Array.from({ length: 3 }, (_, i) => ({ body: JSON.stringify({ i }), postedBy: 'p' })));
      expect(await limited.claimMany(r, { worker: 'w' }, 2)).to.have.length(2);
      // 50,000 leases noted in the window, as a busy queue leaves it; the next two go to its last two slots.
      await db.admin.query(`INSERT INTO svcq_rate_slots (queue, slot, at) SELECT 'h/r', n, 0 FROM generate_series(0, 49999) AS n ON CONFLICT (queue, slot) DO UPDATE SET at = 0`);
      await db.admin.query(`UPDATE svcq_limiters SET rate_count = 49998 WHERE queue = 'h/r'`);
      await db.admin.query('ANALYZE svcq_rate_slots');
      const client = await (limited as unknown as { pool: pg.Pool }).pool.connect();
      try {
        // As the store runs it: the generic plan, without sequential scans or sorts.
        const plan = await explained(client, 'SET LOCAL plan_cache_mode = force_generic_plan; SET LOCAL enable_seqscan = off; SET LOCAL enable_sort = off', `EXECUTE svcq_claim_counted('h/r', 0, 2, 0, 1, 0)`);
        // Two slots read, each by the primary key; no hash of the queue's 50,000 slots.
        expect(plan, plan).to.match(/Index Scan using svcq_rate_slots_pkey on svcq_rate_slots s \(actual rows=1 loops=2\)/);
        expect(plan, plan).to.not.match(/Hash|Seq Scan on svcq_rate_slots|Bitmap Heap Scan on svcq_rate_slots/);
      } finally {
        client.release();
      }
    } finally {
      await limited.close();
    }
  });

  it('a claim by groups fairness reads a few group rows and two items of each, and on a queue with nothing claimable one probe of the pending index, however many items the table holds (plans: the fair claim, decisions §8.5)', async () => {
    const fairConfig = resolveQueue({ leaseSeconds: 10, fairness: 'groups' });
    const f: QueueRef = { key: 'h/f', host: 'h', name: 'f', config: fairConfig };
    const e: QueueRef = { key: 'h/e', host: 'h', name: 'e', config: fairConfig };
    const fair = new PostgresStore({ url: db.url, now: clock.now, poolSize: 1, sweepIntervalMs: 0, configFor: (key) => (key === f.key || key === e.key ? fairConfig : config) });
    await fair.open();
    try {
      await fair.postMany(f, Array.from({ length: 4 }, (_, i) => ({ body: JSON.stringify({ i }), postedBy: 'p', options: { group: `g${i}` } })));
      expect(await fair.claim(f, { worker: 'w' })).to.not.equal(null);
      expect(await fair.claim(e, { worker: 'w' })).to.equal(null);
      // 50,000 claimable items over 1,000 groups in another queue, and 50,000 in this one over 1,000 groups.
      for (const key of ['h/q', 'h/f']) {
        await db.admin.query(
          `INSERT INTO svcq_items (queue, id, ord, body, posted_by, posted_at, status, updated_at, attempts, grp)
           SELECT $1, lpad(to_hex(n), 16, '0'), nextval('svcq_item_ord'), '{}', 'p', 0, 'pending', 0, 0, 'g' || (n % 1000) FROM generate_series(1, 50000) AS n`,
          [key],
        );
      }
      await db.admin.query(`INSERT INTO svcq_groups (queue, grp, head_p, head_ord) SELECT 'h/f', 'g' || n, 0, 0 FROM generate_series(4, 999) AS n ON CONFLICT DO NOTHING`);
      await db.admin.query('ANALYZE');
      const client = await (fair as unknown as { pool: pg.Pool }).pool.connect();
      const planOf = (args: string): Promise<string> => explained(client, 'SET LOCAL plan_cache_mode = force_generic_plan; SET LOCAL enable_seqscan = off; SET LOCAL enable_sort TO DEFAULT', `EXECUTE svcq_claim_fair(${args})`);
      try {
        const busy = await planOf(`'h/f', 2, 5`);
        const idle = await planOf(`'h/e', 1, 4`);
        for (const plan of [busy, idle]) {
          expect(plan, plan).to.not.match(/Seq Scan on svcq_items|Bitmap Heap Scan on svcq_items/);
          // No node reads or drops thousands of rows.
          for (const m of plan.matchAll(/actual rows=(\d+) loops=(\d+)/g)) expect(Number(m[1]) * Number(m[2]), plan).to.be.below(100);
          for (const m of plan.matchAll(/Rows Removed by Filter: (\d+)/g)) expect(Number(m[1]), plan).to.be.below(100);
        }
        expect(idle, idle).to.match(/Index (Only )?Scan using svcq_items_pending on svcq_items/);
      } finally {
        client.release();
      }
    } finally {
      await fair.close();
    }
  });
  it('claims by groups fairness walk only the dead entries of the turns taken since the store last vacuumed the groups tables, not those of every turn since autovacuum came (plans: the fair claim, decisions §8.5)', async () => {
    const fairConfig = resolveQueue({ leaseSeconds: 600, fairness: 'groups' });
    const f: QueueRef = { key: 'h/f', host: 'h', name: 'f', config: fairConfig };
    // Autovacuum off on every table of the database. On the two groups tables, because what cleans
    // them here must be the store's own VACUUM. On the others, because an autovacuum ANALYZE (the
    // 6,000 posts below call for one of svcq_items) holds back, while it runs, the horizon below
    // which a VACUUM removes dead entries and a walk marks them: under the load of the whole suite,
    // the walk once read 46 pages, as many as here with a transaction held open from the start.
    await db.admin.query(`DO $$ DECLARE t text; BEGIN FOR t IN SELECT tablename FROM pg_tables WHERE schemaname = 'public' LOOP EXECUTE format('ALTER TABLE %I SET (autovacuum_enabled = false)', t); END LOOP; END $$`);
    const fair = new PostgresStore({ url: db.url, now: clock.now, poolSize: 2, sweepIntervalMs: 0, configFor: () => fairConfig, groupsVacuum: { after: 500, minGapMs: 0, share: 0 } });
    await fair.open();
    try {
      // 200 groups of 30 items, posted 1,000 at a time: 1,200 wakes, folded by the first claim.
      for (let b = 0; b < 6; b++) await fair.postMany(f, Array.from({ length: 1000 }, (_, i) => ({ body: '{}', postedBy: 'p', options: { group: `g${i % 200}` } })));
      // 3,000 turns, ten a claim: each writes its groups' rows anew, leaving the old entries dead.
      for (let c = 0; c < 300; c++) expect(await fair.claimMany(f, { worker: 'w' }, 10)).to.have.length(10);
      await fair.groupsVacuum.settled();
      expect(fair.groupsVacuum.finished).to.be.at.least(3);
      const pagesRead = async (sql: string): Promise<number> => {
        const plan = await explained(db.admin, 'SET LOCAL enable_seqscan = off; SET LOCAL enable_bitmapscan = off; SET LOCAL enable_sort = off', sql, 'ANALYZE, BUFFERS, COSTS OFF, TIMING OFF, SUMMARY OFF');
        const m = /Buffers: shared (?:hit=(\d+))?(?: ?read=(\d+))?/.exec(plan);
        expect(m, plan).to.not.equal(null);
        return Number(m![1] ?? 0) + Number(m![2] ?? 0);
      };
      // The claim's walk of the order of groups (CLAIM_FAIR_SQL), and the fold's of the wakes.
      const walk = await pagesRead(`SELECT grp FROM svcq_groups WHERE queue = 'h/f' AND head_p IS NOT NULL ORDER BY (-head_p), turn, head_ord LIMIT 5`);
      const wakes = await pagesRead(`SELECT ctid FROM svcq_group_wakes WHERE queue = 'h/f'`);
      // Should anything else in the database hold the horizon back, the failure names it.
      const holders = JSON.stringify((await db.admin.query(`SELECT backend_type, state, backend_xmin, left(query, 60) AS query FROM pg_stat_activity WHERE datname = current_database() AND backend_xmin IS NOT NULL AND pid <> pg_backend_pid()`)).rows);
      // Without the store's VACUUM: 19 pages for the walk and 10 for the wakes (3 and 1 with it).
      expect(walk, `pages of the groups walk (what holds a snapshot in the database: ${holders})`).to.be.below(10);
      expect(wakes, `pages of the wakes (what holds a snapshot in the database: ${holders})`).to.be.below(4);
    } finally {
      await fair.close();
    }
  });
});
