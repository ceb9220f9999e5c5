/**
 * Times the PostgreSQL store's statements one by one on a table of N items against an empty one,
 * to find a statement whose cost grows with the table: each is run on the store's own connection
 * (the statements prepared there by a short workload, kept plans as the store keeps them, the rest
 * planned at each run) under `EXPLAIN (ANALYZE, FORMAT JSON)` in a transaction rolled back, and
 * the medians of the planning and execution times of 30 runs are printed.
 *
 *   node --import tsx bench/pg-statements.ts --store postgres://USER@HOST:PORT/DB [--items 1000000] [--shapes empty,same,other,finished,stale] [--prefix svcq_statements]
 *
 * Shapes: `empty`; `same`: N pending items in the queue the statements run on; `other`: N pending
 * items in another queue; `finished`: N finished items kept by retention in that queue; `stale`:
 * the table analyzed while nothing was pending, then N pending items in the queue. The rows
 * are loaded with SQL in the form the store writes them (and their counts in svcq_counts), then
 * `VACUUM ANALYZE`, as autovacuum would after a bulk load (for `stale`, before it). Each shape gets a database of its own
 * (<prefix>_<shape>_<pid>), dropped after. `--show NAME` prints that statement's plan too.
 */
import { performance } from 'node:perf_hooks';
import { parseArgs } from 'node:util';
import pg from 'pg';
import { resolveQueue } from '../src/engine/config.js';
import { PostgresStore } from '../src/store/postgres/postgres-store.js';
import type { QueueRef } from '../src/store/store.js';
import { databaseUrl, query } from './pg-admin.js';

const { values: opts } = parseArgs({
  options: {
    store: { type: 'string' },
    items: { type: 'string', default: '1000000' },
    shapes: { type: 'string', default: 'empty,same,other,finished,stale' },
    prefix: { type: 'string', default: 'svcq_statements' },
    show: { type: 'string', multiple: true, default: [] },
    runs: { type: 'string', default: '30' },
  },
  strict: true,
});
if (!opts.store) throw new Error('give --store postgres://USER@HOST:PORT/DB');
const ITEMS = Number(opts.items);
const RUNS = Number(opts.runs);
const RETAIN_MS = 7 * 86_400_000;

const dbUrl = (name: string): string => databaseUrl(opts.store!, name);
const admin = async (text: string): Promise<void> => void (await query(opts.store!, 'postgres', text));

const config = resolveQueue({ leaseSeconds: 300 });
const q: QueueRef = { key: 'h/q', host: 'h', name: 'q', config };

async function load(c: pg.Client, shape: string): Promise<void> {
  if (shape === 'empty') return;
  const queue = shape === 'other' ? 'h/other' : 'h/q';
  const now = Date.now();
  if (shape === 'finished') {
    await c.query(
      `INSERT INTO svcq_items (queue, id, ord, body, posted_by, posted_at, status, updated_at, finished_at, attempts, result, version)
       SELECT $1, lpad(to_hex(n), 16, '0'), nextval('svcq_item_ord'), '{"seq":' || n || ',"pad":"${'x'.repeat(150)}"}', 'p', $2::bigint - 3600000 + n / 1000,
              'finished', $2::bigint - 3000000 + n / 1000, $2::bigint - 3000000 + n / 1000, 1, '{"ok":true}', 3
         FROM generate_series(1, $3::integer) AS n`,
      [queue, now, ITEMS],
    );
    await c.query(`INSERT INTO svcq_counts (queue, status, n) VALUES ($1, 'finished', $2)`, [queue, ITEMS]);
  } else {
    await c.query(
      `INSERT INTO svcq_items (queue, id, ord, body, posted_by, posted_at, status, updated_at, attempts)
       SELECT $1, lpad(to_hex(n), 16, '0'), nextval('svcq_item_ord'), '{"seq":' || n || ',"pad":"${'x'.repeat(150)}"}', 'p', $2::bigint - 3600000 + n / 1000,
              'pending', $2::bigint - 3600000 + n / 1000, 0
         FROM generate_series(1, $3::integer) AS n`,
      [queue, now, ITEMS],
    );
    await c.query(`INSERT INTO svcq_counts (queue, status, n) VALUES ($1, 'pending', $2)`, [queue, ITEMS]);
  }
}

interface Timing {
  planMs: number;
  execMs: number;
  plan: string;
}

function median(xs: number[]): number {
  const s = [...xs].sort((a, b) => a - b);
  return s[Math.floor(s.length / 2)]!;
}

function flatten(node: Record<string, unknown>, depth = 0): string {
  const rel = node['Relation Name'] ? ` on ${node['Relation Name'] as string}` : '';
  const idx = node['Index Name'] ? ` using ${node['Index Name'] as string}` : '';
  const cond = node['Index Cond'] ? ` [${node['Index Cond'] as string}]` : '';
  const filt = node['Filter'] ? ` filter ${node['Filter'] as string}` : '';
  let out = `${'  '.repeat(depth)}${node['Node Type'] as string}${idx}${rel}${cond}${filt} rows=${node['Actual Rows'] as number} loops=${node['Actual Loops'] as number} time=${node['Actual Total Time'] as number}\n`;
  for (const child of (node['Plans'] as Record<string, unknown>[] | undefined) ?? []) out += flatten(child, depth + 1);
  return out;
}

async function time(client: pg.PoolClient, sql: string, kept: boolean): Promise<Timing> {
  const plans: number[] = [];
  const execs: number[] = [];
  let plan = '';
  for (let i = 0; i < RUNS; i++) {
    await client.query('BEGIN');
    try {
      if (kept) await client.query('SET LOCAL plan_cache_mode = force_generic_plan; SET LOCAL enable_seqscan = off');
      const { rows } = await client.query<{ 'QUERY PLAN': Array<Record<string, unknown>> }>(`EXPLAIN (ANALYZE, FORMAT JSON) ${sql}`);
      const top = rows[0]!['QUERY PLAN'][0]!;
      plans.push((top['Planning Time'] as number | undefined) ?? 0);
      execs.push(top['Execution Time'] as number);
      plan = flatten(top['Plan'] as Record<string, unknown>);
    } finally {
      await client.query('ROLLBACK');
    }
  }
  return { planMs: median(plans), execMs: median(execs), plan };
}

const results = new Map<string, Map<string, Timing>>();
for (const shape of opts.shapes!.split(',')) {
  const name = `${opts.prefix}_${shape}_${process.pid}`;
  await admin(`CREATE DATABASE ${name}`);
  const store = new PostgresStore({ url: dbUrl(name), now: () => Date.now(), poolSize: 1, sweepIntervalMs: 0, configFor: () => config });
  try {
    await store.open();
    const setup = new pg.Client({ connectionString: dbUrl(name) });
    await setup.connect();
    const t = performance.now();
    if (shape === 'stale') {
      // Statistics taken while nothing was pending (a queue whose workers kept up), then a backlog.
      await store.postMany(q, Array.from({ length: 24 }, (_, i) => ({ body: JSON.stringify({ i }), postedBy: 'p' })));
      for (let i = 0; i < 24; i++) {
        const got = await store.claim(q, { worker: 'w' });
        if (got) await store.result(q, got.id, '{"ok":true}');
      }
      await setup.query('VACUUM ANALYZE');
      await load(setup, 'same');
    } else {
      await load(setup, shape);
      await setup.query('VACUUM ANALYZE');
    }
    await setup.end();
    const loadedMs = performance.now() - t;
    // Prepares the statements on the store's one connection.
    const posted = await store.postMany(q, Array.from({ length: 24 }, (_, i) => ({ body: JSON.stringify({ i }), postedBy: 'p' })));
    const claimed = await Promise.all([store.claim(q, { worker: 'a' }), store.claim(q, { worker: 'b' })]);
    await Promise.all([store.result(q, claimed[0]!.id, '{"ok":true}'), store.error(q, claimed[1]!.id, '{"ok":false}')]);
    await store.get(q, posted[5]!.id);
    await store.sweepNow();
    await store.compactCounts();
    await store.overview(q, { oldest: 10, leases: 10 });
    const client = await (store as unknown as { pool: pg.Pool }).pool.connect();
    try {
      const now = Date.now();
      const ids = posted.slice(6, 18).map((p) => p.id);
      const newIds = Array.from({ length: 12 }, (_, i) => `ffff${String(i).padStart(12, '0')}`);
      const arr = (xs: string[]): string => `'{${xs.map((x) => `"${x.replace(/"/g, '\\"')}"`).join(',')}}'`;
      const bodies = newIds.map(() => '{"x":1}');
      const statements: Array<[string, string, boolean]> = [
        ['svcq_claim (kept)', `EXECUTE svcq_claim('h/q', ${now}, -1, 12)`, true],
        ['svcq_insert_items (kept)', `EXECUTE svcq_insert_items('h/q', ${arr(newIds)}, ${arr(bodies)}, ${arr(newIds.map(() => 'p'))}, '{${newIds.map(() => 'NULL').join(',')}}', 12, ${now}, 'pending', ${now}, 0, 0)`, true],
        ['svcq_lock_items (kept)', `EXECUTE svcq_lock_items('h/q', ${arr(ids)})`, true],
        ['svcq_read', `EXECUTE svcq_read('h/q', '${ids[0]}')`, false],
        ['svcq_sweep', `EXECUTE svcq_sweep('h/q', ${now}, false, 0, true, ${now - RETAIN_MS}, false)`, false],
        ['svcq_next_deadline', `EXECUTE svcq_next_deadline('h/q', NULL, ${RETAIN_MS}, NULL)`, false],
        ['svcq_compact_counts', `EXECUTE svcq_compact_counts`, false],
        ['svcq_overview_counts', `EXECUTE svcq_overview_counts('h/q')`, false],
        ['svcq_oldest_pending', `EXECUTE svcq_oldest_pending('h/q')`, false],
        ['overview: min(posted_at) of pending', `SELECT min(posted_at) AS at FROM svcq_items WHERE queue = 'h/q' AND status = 'pending'`, false],
        ['overview: oldest 10 pending', `SELECT id, posted_at, attempts FROM svcq_items WHERE queue = 'h/q' AND status = 'pending' ORDER BY ord LIMIT 10`, false],
        ['overview: 10 soonest leases', `SELECT id, lease_worker, lease_until, attempts FROM svcq_items WHERE queue = 'h/q' AND status IN ('claimed', 'processing') ORDER BY lease_until, ord LIMIT 10`, false],
      ];
      const byName = new Map<string, Timing>();
      for (const [label, sql, kept] of statements) byName.set(label, await time(client, sql, kept));
      results.set(shape, byName);
      console.log(`\n== ${shape}: ${shape === 'empty' ? 0 : ITEMS} items loaded (${(loadedMs / 1000).toFixed(1)} s with VACUUM ANALYZE); median of ${RUNS} runs, ms`);
      for (const [label, t] of byName) {
        console.log(`${label.padEnd(38)} plan ${t.planMs.toFixed(3).padStart(8)}  exec ${t.execMs.toFixed(3).padStart(9)}`);
        if (opts.show!.some((s) => label.startsWith(s))) console.log(t.plan);
      }
    } finally {
      client.release();
    }
  } finally {
    await store.close().catch(() => undefined);
    await admin(`DROP DATABASE IF EXISTS ${name} WITH (FORCE)`);
  }
}
