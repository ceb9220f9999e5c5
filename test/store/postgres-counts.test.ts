import { expect } from 'chai';
import { performance } from 'node:perf_hooks';
import pg from 'pg';
import { resolveQueue } from '../../src/engine/config.js';
import { PostgresStore } from '../../src/store/postgres/postgres-store.js';
import { migrate, MIGRATIONS } from '../../src/store/postgres/schema.js';
import type { QueueRef } from '../../src/store/store.js';
import { FakeClock, freshDatabaseWithClient, postgresPresent, postgresUnderTest, START } from './support/stores.js';

/**
 * Counts kept as items change (decisions §5.1: "Counts are kept as items change, never by scanning
 * items"): every transaction that changes items appends its net change per (queue, status) to
 * svcq_count_deltas, any node folds them into svcq_counts, and the overview reads the two.
 */

const target = await postgresUnderTest();
const HOST = 'counts.example.com';
const sleep = (ms: number): Promise<void> => new Promise((resolve) => setTimeout(resolve, ms));

/** A small deterministic generator (mulberry32), so that a failure can be run again as it was. */
function random(seed: number): () => number {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

type Counts = Record<string, Record<string, number>>;

describe('PostgreSQL store: counts kept as items change (decisions §5.1)', function () {
  this.timeout(120_000);
  let db: { url: string; admin: pg.Client; drop: () => Promise<void> };
  let admin: pg.Client;
  let nodes: PostgresStore[] = [];

  if (postgresPresent(target)) {
    beforeEach(async () => {
      db = await freshDatabaseWithClient(target.url);
      admin = db.admin;
      nodes = [];
    });
    afterEach(async () => {
      for (const store of nodes) await store.close().catch(() => undefined);
      await db.drop();
    });
  }

  /** Both readings in one snapshot: the kept counts (svcq_counts plus deltas) and a GROUP BY scan of svcq_items. */
  async function keptAndScanned(): Promise<{ kept: Counts; scanned: Counts; deltas: number }> {
    await admin.query('BEGIN ISOLATION LEVEL REPEATABLE READ');
    try {
      const kept = await admin.query<{ queue: string; status: string; n: string }>(
        `SELECT queue, status, sum(n)::bigint AS n FROM (SELECT queue, status, n FROM svcq_counts UNION ALL SELECT queue, status, delta FROM svcq_count_deltas) c GROUP BY 1, 2`,
      );
      const scanned = await admin.query<{ queue: string; status: string; n: string }>('SELECT queue, status, count(*) AS n FROM svcq_items GROUP BY 1, 2');
      const deltas = await admin.query<{ n: string }>('SELECT count(*) AS n FROM svcq_count_deltas');
      const shape = (rows: Array<{ queue: string; status: string; n: string }>): Counts => {
        const out: Counts = {};
        for (const r of rows) if (Number(r.n) !== 0) (out[r.queue] ??= {})[r.status] = Number(r.n);
        return out;
      };
      return { kept: shape(kept.rows), scanned: shape(scanned.rows), deltas: Number(deltas.rows[0]!.n) };
    } finally {
      await admin.query('COMMIT');
    }
  }

  it('two nodes posting, claiming, finishing, erroring, cancelling and sweeping at once: the kept counts equal a scan of the items, before and after compaction by either node', async () => {
    const clock = new FakeClock();
    const queues: QueueRef[] = [
      { key: `${HOST}/a`, host: HOST, name: 'a', config: resolveQueue({ leaseSeconds: 5, maxAttempts: 2, retryDelaySeconds: 2, timeoutSeconds: 40, retainSeconds: 20 }) },
      { key: `${HOST}/b`, host: HOST, name: 'b', config: resolveQueue({ leaseSeconds: 3, maxAttempts: 1, retainFrom: 'fetched', retainSeconds: 10 }) },
    ];
    const configFor = (key: string) => queues.find((q) => q.key === key)?.config;
    nodes = await Promise.all(
      [0, 1].map(async () => {
        // The periodic sweep runs deadlines and compaction on both nodes all along.
        const store = new PostgresStore({ url: db.url, now: clock.now, configFor, sweepIntervalMs: 20 });
        await store.open();
        return store;
      }),
    );
    const rnd = random(20240611);
    const pick = <T>(list: readonly T[]): T => list[Math.floor(rnd() * list.length)]!;
    const ids = new Map<string, string[]>(queues.map((q) => [q.key, []]));

    for (let round = 0; round < 30; round++) {
      const calls: Array<Promise<unknown>> = [];
      for (const node of nodes) {
        for (const q of queues) {
          const known = ids.get(q.key)!;
          calls.push(
            node.postMany(q, Array.from({ length: 1 + Math.floor(rnd() * 6) }, (_, i) => ({ body: `{"r":${round},"i":${i}}`, postedBy: 'p' }))).then((out) => known.push(...out.map((o) => o.id))),
            // One key posted from both nodes at once: one item.
            node.post(q, { body: '{}', postedBy: 'p', idempotencyKey: `k${round % 7}` }).then((o) => known.push(o.id)),
          );
          for (let c = 0; c < 3; c++) {
            calls.push(
              node.claimMany(q, { worker: `w${c}` }, 1 + Math.floor(rnd() * 3)).then(async (claimed) => {
                for (const item of claimed) {
                  const what = rnd();
                  if (what < 0.3) await node.result(q, item.id, '{"ok":true}');
                  else if (what < 0.55) await node.error(q, item.id, '{"ok":false}');
                  else if (what < 0.7) await node.progress(q, item.id, '{"p":1}');
                  else if (what < 0.8) await node.cancel(q, item.id);
                  // The rest keep their lease until it ends.
                }
              }),
            );
          }
          if (known.length > 0) {
            calls.push(node.cancel(q, pick(known)), node.get(q, pick(known)), node.get(q, pick(known)), node.result(q, pick(known), '{}'));
          }
          if (rnd() < 0.3) calls.push(node.claimMany(q, { worker: 'crit', criteria: { r: round } }, 2));
        }
      }
      await Promise.all(calls);
      clock.advance(Math.floor(rnd() * 4000));
      if (round % 5 === 4) {
        // Let the sweeps of both nodes apply what is due, then compare at rest.
        await sleep(150);
        const { kept, scanned } = await keptAndScanned();
        expect(kept).to.deep.equal(scanned);
      }
    }

    // Everything due applied (leases, retry delays, timeouts, retention after finishing or fetching).
    clock.advance(60_000);
    await sleep(300);
    const before = await keptAndScanned();
    expect(before.kept).to.deep.equal(before.scanned);
    const statuses = new Set(Object.values(before.scanned).flatMap((c) => Object.keys(c)));
    console.log(`      at rest: ${JSON.stringify(before.scanned)}; ${before.deltas} delta rows not yet compacted`);
    expect([...statuses].sort(), 'the run reached every status that stays').to.include.members(['cancelled', 'failed', 'finished', 'timedout']);

    // Compaction by both nodes at once (the periodic sweeps compact too), then by either.
    await Promise.all(nodes.map((n) => n.compactCounts()));
    await nodes[1]!.compactCounts();
    const after = await keptAndScanned();
    expect(after.deltas).to.equal(0);
    expect(after.kept).to.deep.equal(after.scanned);
    const table = await admin.query<{ queue: string; status: string; n: string }>('SELECT queue, status, n FROM svcq_counts WHERE n <> 0');
    const counts: Counts = {};
    for (const r of table.rows) (counts[r.queue] ??= {})[r.status] = Number(r.n);
    expect(counts).to.deep.equal(after.scanned);

    // The store's overview reads the same, from either node, and agrees with its counts() scan.
    for (const q of queues) {
      const exact = await nodes[0]!.counts(q);
      for (const node of nodes) {
        const o = await node.overview(q, { oldest: 0, leases: 0 });
        for (const [status, n] of Object.entries(o.counts)) expect(n, `${q.key} ${status}`).to.equal(exact[status as keyof typeof exact] ?? 0);
      }
    }

    // A burst more on both nodes, with no pause: the counts still agree once the calls are done.
    await Promise.all(nodes.flatMap((node) => queues.map((q) => node.postMany(q, Array.from({ length: 50 }, () => ({ body: '{}', postedBy: 'p' }))).then(() => node.claimMany(q, { worker: 'w' }, 20)))));
    const last = await keptAndScanned();
    expect(last.kept).to.deep.equal(last.scanned);
  });

  it('the overview reads its counts in under 50 ms at 200,000 items, initialised by the migration from the rows already there (decisions §5.1: counts kept, never by scanning items)', async () => {
    // The schema as the previous build left it, with 200,000 items already in one queue.
    const setup = new pg.Client({ connectionString: db.url });
    await setup.connect();
    try {
      await migrate(
        setup,
        MIGRATIONS.filter((m) => m.version < 5),
      );
    } finally {
      await setup.end();
    }
    const q: QueueRef = { key: `${HOST}/big`, host: HOST, name: 'big', config: resolveQueue({ leaseSeconds: 60 }) };
    const N = 200_000;
    await admin.query(
      `INSERT INTO svcq_items (queue, id, ord, body, posted_by, posted_at, status, updated_at, finished_at, attempts)
       SELECT $1, lpad(to_hex(g), 16, '0'), nextval('svcq_item_ord'), '{}', 'p', $2::bigint + g,
              CASE WHEN g % 10 = 0 THEN 'finished' ELSE 'pending' END, $2::bigint + g,
              CASE WHEN g % 10 = 0 THEN $2::bigint + g END, CASE WHEN g % 10 = 0 THEN 1 ELSE 0 END
         FROM generate_series(1, $3::integer) AS g`,
      [q.key, START, N],
    );
    await admin.query(`INSERT INTO svcq_queues (key) VALUES ($1)`, [q.key]);
    await admin.query('ANALYZE svcq_items');

    // Opening applies migration 5, which counts the rows already there.
    const clock = new FakeClock(START + 10 * N);
    const store = new PostgresStore({ url: db.url, now: clock.now, sweepIntervalMs: 0 });
    nodes.push(store);
    await store.open();
    // A few changes after the migration, still as deltas.
    await store.postMany(q, Array.from({ length: 5 }, () => ({ body: '{}', postedBy: 'p' })));
    await store.claimMany(q, { worker: 'w' }, 3);

    const expected = { pending: N - N / 10 + 5 - 3, claimed: 3, processing: 0, finished: N / 10, failed: 0, timedout: 0, cancelled: 0 };
    const times: number[] = [];
    for (let i = 0; i < 15; i++) {
      const started = performance.now();
      const o = await store.overview(q, { oldest: 20, leases: 100 });
      times.push(performance.now() - started);
      expect(o.counts).to.deep.equal(expected);
    }
    await store.compactCounts();
    const started = performance.now();
    expect((await store.overview(q, { oldest: 20, leases: 100 })).counts).to.deep.equal(expected);
    times.push(performance.now() - started);
    times.sort((a, b) => a - b);
    const median = times[Math.floor(times.length / 2)]!;
    // The scan the overview no longer does, for comparison.
    const scanStarted = performance.now();
    await admin.query('SELECT status, count(*) FROM svcq_items WHERE queue = $1 GROUP BY status', [q.key]);
    const scanMs = performance.now() - scanStarted;
    console.log(`      overview at ${N} items: median ${median.toFixed(1)} ms, slowest ${times[times.length - 1]!.toFixed(1)} ms (a GROUP BY scan of the items: ${scanMs.toFixed(1)} ms)`);
    expect(median).to.be.below(50);
  });
});
