/**
 * A claim with criteria on PostgreSQL that matches only an item behind 20,000 pending items
 * that do not match: what the database's narrowing of the rows (src/store/postgres/pg-criteria.ts)
 * leaves to the application. Ten claims, the median reported.
 *
 *   node --import tsx bench/pg-criteria.ts [--store postgres://USER@HOST:PORT/DB]
 *
 * The database named is only used to create (and drop) one of its own.
 */
import { parseArgs } from 'node:util';
import { performance } from 'node:perf_hooks';
import { PostgresStore } from '../src/store/postgres/postgres-store.js';
import { resolveQueue } from '../src/engine/config.js';
import pg from 'pg';
const { values } = parseArgs({ options: { store: { type: 'string', default: 'postgres://postgres@127.0.0.1:5432/postgres' } } });
const on = (database: string): string => {
  const u = new URL(values.store!);
  u.pathname = `/${database}`;
  return u.toString();
};
const admin = new pg.Client({ connectionString: on('postgres') });
await admin.connect();
await admin.query('DROP DATABASE IF EXISTS svcq_crit'); await admin.query('CREATE DATABASE svcq_crit');
const store = new PostgresStore({ url: on('svcq_crit') });
await store.open();
const config = resolveQueue({ leaseSeconds: 300 });
const q = { key: `h/q`, host: 'h', name: `q`, config };
const filler = JSON.stringify({ kind: 'a', payload: 'x'.repeat(150) });
for (let b = 0; b < 20; b++) await store.postMany(q, Array.from({ length: 1000 }, () => ({ body: filler, postedBy: 'p' })));
const times: number[] = [];
for (let i = 0; i < 10; i++) {
  await store.post(q, { body: JSON.stringify({ kind: 'b', i }), postedBy: 'p' });
  const t = performance.now();
  const got = await store.claim(q, { worker: 'w', criteria: { kind: 'b' } });
  times.push(performance.now() - t);
  if (!got) throw new Error('no match');
}
times.sort((a, b) => a - b);
console.log(`claim {kind:"b"} behind 20,000 non-matching pending items: median ${times[5]!.toFixed(1)} ms (min ${times[0]!.toFixed(1)}, max ${times[9]!.toFixed(1)})`);
await store.close();
await admin.query('DROP DATABASE svcq_crit'); await admin.end();
