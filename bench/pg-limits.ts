/**
 * Flow control on the PostgreSQL store (decisions §8.5), measured on the store itself (no HTTP):
 *
 *   node --import tsx bench/pg-limits.ts --store postgres://USER@HOST:PORT/DB [options]
 *
 *   --phases limits,fair   which parts to run
 *   --jobs 6000            claim → result cycles per run of the `limits` part (32 in flight, spread
 *                          over the nodes)
 *   --items 1000000        items of the `fair` part, over --groups groups, one group holding half
 *   --groups 10000
 *   --claims 3000          claims of one item measured per queue in the `fair` part (32 in flight)
 *
 * `limits`: the rate of claim → result cycles on a queue without limits, and on one with
 * maxActive and a rateLimit set far above what is reached (so that they never bind: what the
 * limiter row costs), on one node and on three nodes (three stores on one database).
 *
 * `fair`: claims on a queue with `fairness: "groups"` against a FIFO queue holding the same
 * items (--items over --groups, one group holding half), then EXPLAIN ANALYZE of the statements a
 * claim by groups runs, on that database.
 *
 * Each run uses a database of its own, made on the server of --store and dropped at the end.
 */
import { performance } from 'node:perf_hooks';
import { randomBytes } from 'node:crypto';
import { parseArgs } from 'node:util';
import pg from 'pg';
import { resolveQueue } from '../src/engine/config.js';
import { PostgresStore } from '../src/store/postgres/postgres-store.js';
import type { QueueRef } from '../src/store/store.js';

const { values: opts } = parseArgs({
  options: {
    store: { type: 'string' },
    phases: { type: 'string', default: 'limits,fair' },
    jobs: { type: 'string', default: '6000' },
    items: { type: 'string', default: '1000000' },
    groups: { type: 'string', default: '10000' },
    claims: { type: 'string', default: '3000' },
  },
  strict: true,
});
if (!opts.store || !/^postgres(ql)?:\/\//.test(opts.store)) {
  console.error('pg-limits: give --store postgres://USER@HOST:PORT/DB');
  process.exit(2);
}
const BASE = opts.store;
const IN_FLIGHT = 32;

function urlOf(database: string): string {
  const u = new URL(BASE);
  u.pathname = `/${database}`;
  return u.toString();
}

async function admin(sql: string): Promise<void> {
  const c = new pg.Client({ connectionString: urlOf('postgres') });
  await c.connect();
  try {
    await c.query(sql);
  } finally {
    await c.end();
  }
}

async function withDatabase<T>(run: (url: string) => Promise<T>): Promise<T> {
  const name = `svcq_limits_${process.pid}_${randomBytes(3).toString('hex')}`;
  await admin(`CREATE DATABASE ${name}`);
  try {
    return await run(urlOf(name));
  } finally {
    await admin(`DROP DATABASE IF EXISTS ${name} WITH (FORCE)`);
  }
}

function refOf(name: string, def: Parameters<typeof resolveQueue>[0]): QueueRef {
  return { key: `bench.test/${name}`, host: 'bench.test', name, config: resolveQueue({ leaseSeconds: 300, ...def }) };
}

async function openNodes(url: string, n: number, ref: QueueRef): Promise<PostgresStore[]> {
  const nodes = Array.from({ length: n }, () => new PostgresStore({ url, configFor: (key) => (key === ref.key ? ref.config : undefined) }));
  await Promise.all(nodes.map((s) => s.open()));
  return nodes;
}

async function postAll(store: PostgresStore, ref: QueueRef, n: number, group?: (i: number) => string | undefined): Promise<void> {
  const BATCH = 1000;
  let next = 0;
  const poster = async (): Promise<void> => {
    while (next < n) {
      const from = next;
      next = Math.min(n, next + BATCH);
      await store.postMany(
        ref,
        Array.from({ length: next - from }, (_, k) => ({ body: `{"i":${from + k}}`, postedBy: 'bench', options: group ? { group: group(from + k) } : undefined })),
      );
    }
  };
  await Promise.all(Array.from({ length: 4 }, poster));
}

/** Claim → result cycles, IN_FLIGHT at once spread over the nodes; cycles per second. */
async function cycles(nodes: PostgresStore[], ref: QueueRef, jobs: number): Promise<number> {
  let left = jobs;
  const started = performance.now();
  const loop = async (s: PostgresStore, w: number): Promise<void> => {
    while (left > 0) {
      const c = await s.claim(ref, { worker: `w${w}` });
      if (!c) throw new Error('the queue ran out of items');
      left--;
      await s.result(ref, c.id, '{}');
    }
  };
  await Promise.all(Array.from({ length: IN_FLIGHT }, (_, w) => loop(nodes[w % nodes.length]!, w)));
  return jobs / ((performance.now() - started) / 1000);
}

async function limitsPart(): Promise<void> {
  const jobs = Number(opts.jobs);
  const sides = [
    { label: 'no limits', def: {} },
    { label: 'maxActive 1000000, rateLimit 1000000/s', def: { maxActive: 1_000_000, rateLimit: { max: 1_000_000, perSeconds: 1 } } },
  ];
  for (const nodes of [1, 3]) {
    for (const round of [0, 1]) {
      for (const side of round === 0 ? sides : [...sides].reverse()) {
        const rate = await withDatabase(async (url) => {
          const ref = refOf('q', side.def);
          const stores = await openNodes(url, nodes, ref);
          try {
            await postAll(stores[0]!, ref, jobs + 200 + 2 * IN_FLIGHT);
            await cycles(stores, ref, 200);
            return await cycles(stores, ref, jobs);
          } finally {
            await Promise.all(stores.map((s) => s.close()));
          }
        });
        console.log(`limits  nodes=${nodes} round=${round} ${side.label}: ${rate.toFixed(0)} cycles/s`);
      }
    }
  }
}

/** Claims of one item, IN_FLIGHT at once; claims per second (the items stay leased). */
async function claimsOnly(store: PostgresStore, ref: QueueRef, n: number): Promise<{ rate: number; groups: Map<string, number> }> {
  let left = n;
  const groups = new Map<string, number>();
  const started = performance.now();
  const loop = async (w: number): Promise<void> => {
    while (left > 0) {
      left--;
      const c = await store.claim(ref, { worker: `w${w}` });
      if (c) {
        const i = (JSON.parse(c.item) as { i: number }).i;
        const g = i % 2 === 0 ? 'big' : 'other';
        groups.set(g, (groups.get(g) ?? 0) + 1);
      }
    }
  };
  await Promise.all(Array.from({ length: IN_FLIGHT }, (_, w) => loop(w)));
  return { rate: n / ((performance.now() - started) / 1000), groups };
}

async function fairPart(): Promise<void> {
  const items = Number(opts.items);
  const groups = Number(opts.groups);
  const claims = Number(opts.claims);
  // Even items in group "big" (half of them); odd items spread over the other groups.
  const group = (i: number): string => (i % 2 === 0 ? 'big' : `g${((i - 1) / 2) % (groups - 1)}`);
  await withDatabase(async (url) => {
    const fair = refOf('fair', { fairness: 'groups' });
    const fifo = refOf('fifo', {});
    const store = new PostgresStore({ url, configFor: (key) => (key === fair.key ? fair.config : key === fifo.key ? fifo.config : undefined) });
    await store.open();
    try {
      for (const ref of [fair, fifo]) {
        const t = performance.now();
        await postAll(store, ref, items, group);
        console.log(`fair    posted ${items} items over ${groups} groups to ${ref.name}: ${((performance.now() - t) / 1000).toFixed(1)} s`);
      }
      const c = new pg.Client({ connectionString: url });
      await c.connect();
      await c.query('VACUUM ANALYZE');
      for (const ref of [fair, fifo]) {
        const t = performance.now();
        const first = await store.claim(ref, { worker: 'first' });
        console.log(`fair    first claim on ${ref.name} (a node's first look rebuilds the group heads): ${(performance.now() - t).toFixed(0)} ms, got ${first ? 'one' : 'none'}`);
      }
      for (const round of [0, 1]) {
        for (const ref of round === 0 ? [fair, fifo] : [fifo, fair]) {
          const { rate, groups: by } = await claimsOnly(store, ref, claims);
          console.log(`fair    round=${round} ${ref.name}: ${rate.toFixed(0)} claims/s (from group big: ${by.get('big') ?? 0}, others: ${by.get('other') ?? 0})`);
        }
      }
      const explain = async (label: string, sql: string, values: unknown[]): Promise<void> => {
        const res = await c.query<{ 'QUERY PLAN': string }>(`EXPLAIN (ANALYZE, BUFFERS, COSTS OFF) ${sql}`, values);
        console.log(`\n-- ${label}\n${res.rows.map((r) => r['QUERY PLAN']).join('\n')}`);
      };
      const { rows } = await c.query<{ n: number }>('SELECT count(*)::integer AS n FROM svcq_groups WHERE queue = $1', [fair.key]);
      console.log(`\nfair    svcq_groups rows of the queue: ${rows[0]!.n}`);
      await explain('pick: the least recently served group with a claimable item of the highest priority', `SELECT s.grp, s.head_p, s.head_ord FROM svcq_groups s WHERE s.queue = $1 AND s.head_p IS NOT NULL AND s.grp <> ALL ($2::text[]) ORDER BY (-s.head_p), s.turn, s.head_ord LIMIT 1`, [fair.key, []]);
      await c.query('VACUUM svcq_groups');
      await explain('the same pick after VACUUM svcq_groups', `SELECT s.grp, s.head_p, s.head_ord FROM svcq_groups s WHERE s.queue = $1 AND s.head_p IS NOT NULL AND s.grp <> ALL ($2::text[]) ORDER BY (-s.head_p), s.turn, s.head_ord LIMIT 1`, [fair.key, []]);
      await explain("the group's first claimable item (group big: 500,000 items)", `SELECT i.id, i.priority, i.ord FROM svcq_items i WHERE i.queue = $1 AND coalesce(i.grp, '') = $2 AND i.status = 'pending' AND i.available_at = 0 AND i.id <> ALL ($3::text[]) ORDER BY (-i.priority), i.ord LIMIT 1`, [fair.key, 'big', []]);
      await explain('a whole claim of 10 items by groups (svcq_claim_groups), in a transaction rolled back', `SELECT * FROM svcq_claim_groups($1, 10, NULL, true)`, [fair.key]);
      await c.query('BEGIN');
      await c.query('SELECT 1 FROM svcq_limiters WHERE queue = $1 FOR UPDATE', [fair.key]);
      const t = performance.now();
      await c.query('SELECT * FROM svcq_claim_groups($1, 10, NULL, true)', [fair.key]);
      console.log(`\nfair    svcq_claim_groups of 10 items: ${(performance.now() - t).toFixed(2)} ms`);
      await c.query('ROLLBACK');
      await c.end();
    } finally {
      await store.close();
    }
  });
}

const phases = new Set(opts.phases!.split(','));
if (phases.has('limits')) await limitsPart();
if (phases.has('fair')) await fairPart();
