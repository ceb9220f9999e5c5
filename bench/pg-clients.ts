/**
 * `node --import tsx bench/pg-clients.ts --store postgres://USER@HOST:PORT/DB`: node-postgres (`pg`)
 * against postgres.js (`postgres`) on the work the PostgreSQL store gives a client, on a fresh
 * database: (1) one-row prepared queries in turn (round-trip cost), (2) folded transactions as
 * the store runs them: 4 connections, each transaction a multi-row INSERT … SELECT FROM unnest of
 * 32 rows, an UPDATE … FROM unnest of those rows, and a COMMIT. Rounds alternate the clients; the
 * figures are the client process's own CPU per operation and operations per second.
 */
import { parseArgs } from 'node:util';
import { performance } from 'node:perf_hooks';
import pg from 'pg';
import postgres from 'postgres';

const { values: opts } = parseArgs({ options: { store: { type: 'string' }, rounds: { type: 'string', default: '3' } }, strict: true });
if (!opts.store) {
  console.error('give --store postgres://USER@HOST:PORT/DB');
  process.exit(2);
}
const base = new URL(opts.store);
const dbName = `svcq_clients_${process.pid}`;
const adminUrl = Object.assign(new URL(base.toString()), { pathname: '/postgres' }).toString();
const url = Object.assign(new URL(base.toString()), { pathname: `/${dbName}` }).toString();

const ROUND_TRIPS = 4000;
const TXS = 1500;
const ROWS = 32;
const CONNS = 4;

interface Figures {
  perSecond: number;
  cpuUsPerOp: number;
}

async function measure(ops: number, run: () => Promise<void>): Promise<Figures> {
  const cpu0 = process.cpuUsage();
  const t0 = performance.now();
  await run();
  const ms = performance.now() - t0;
  const cpu = process.cpuUsage(cpu0);
  return { perSecond: (ops * 1000) / ms, cpuUsPerOp: (cpu.user + cpu.system) / ops };
}

const ids = (tx: number): string[] => Array.from({ length: ROWS }, (_, i) => `${tx}-${i}`);

async function withPg(): Promise<{ trips: Figures; folds: Figures }> {
  const pool = new pg.Pool({ connectionString: url, max: CONNS });
  try {
    const c = await pool.connect();
    const trips = await measure(ROUND_TRIPS, async () => {
      for (let i = 0; i < ROUND_TRIPS; i++) await c.query({ name: 'one', text: 'SELECT $1::int AS n', values: [i] });
    });
    await c.query('TRUNCATE t');
    c.release();
    let next = 0;
    const folds = await measure(TXS, async () => {
      await Promise.all(
        Array.from({ length: CONNS }, async () => {
          const client = await pool.connect();
          try {
            while (next < TXS) {
              const tx = next++;
              const rows = ids(tx);
              await client.query('BEGIN');
              await client.query({ name: 'ins', text: 'INSERT INTO t (id, body) SELECT * FROM unnest($1::text[], $2::text[])', values: [rows, rows.map(() => '{"n":1}')] });
              await client.query({ name: 'upd', text: "UPDATE t SET status = 'claimed' FROM unnest($1::text[]) AS u(id) WHERE t.id = u.id", values: [rows] });
              await client.query('COMMIT');
            }
          } finally {
            client.release();
          }
        }),
      );
    });
    return { trips, folds };
  } finally {
    await pool.end();
  }
}

async function withPostgresJs(): Promise<{ trips: Figures; folds: Figures }> {
  const sql = postgres(url, { max: CONNS, prepare: true, onnotice: () => undefined });
  try {
    const trips = await sql.reserve().then(async (c) => {
      const f = await measure(ROUND_TRIPS, async () => {
        for (let i = 0; i < ROUND_TRIPS; i++) await c`SELECT ${i}::int AS n`;
      });
      await c`TRUNCATE t`;
      c.release();
      return f;
    });
    let next = 0;
    const folds = await measure(TXS, async () => {
      await Promise.all(
        Array.from({ length: CONNS }, async () => {
          while (next < TXS) {
            const tx = next++;
            const rows = ids(tx);
            await sql.begin(async (t) => {
              await t`INSERT INTO t (id, body) SELECT * FROM unnest(${rows}::text[], ${rows.map(() => '{"n":1}')}::text[])`;
              await t`UPDATE t SET status = 'claimed' FROM unnest(${rows}::text[]) AS u(id) WHERE t.id = u.id`;
            });
          }
        }),
      );
    });
    return { trips, folds };
  } finally {
    await sql.end();
  }
}

const admin = new pg.Client({ connectionString: adminUrl });
await admin.connect();
await admin.query(`CREATE DATABASE ${dbName}`);
try {
  const setup = new pg.Client({ connectionString: url });
  await setup.connect();
  await setup.query("CREATE TABLE t (id text PRIMARY KEY, body text NOT NULL, status text NOT NULL DEFAULT 'pending')");
  await setup.end();
  const results: Record<string, Array<{ trips: Figures; folds: Figures }>> = { pg: [], postgres: [] };
  const fmt = (n: number, d = 0): string => n.toLocaleString('en-US', { maximumFractionDigits: d, minimumFractionDigits: d });
  for (let r = 0; r < Number(opts.rounds); r++) {
    const order = r % 2 === 0 ? (['pg', 'postgres'] as const) : (['postgres', 'pg'] as const);
    for (const name of order) {
      const f = name === 'pg' ? await withPg() : await withPostgresJs();
      results[name]!.push(f);
      console.log(`[round ${r + 1}] ${name}: ${fmt(f.trips.perSecond)} round trips/s (${fmt(f.trips.cpuUsPerOp, 1)} µs client CPU each); ${fmt(f.folds.perSecond)} folded transactions/s of ${ROWS} rows (${fmt(f.folds.cpuUsPerOp, 1)} µs client CPU each)`);
    }
  }
  const median = (xs: number[]): number => [...xs].sort((a, b) => a - b)[Math.floor((xs.length - 1) / 2)]!;
  for (const name of ['pg', 'postgres'] as const) {
    const list = results[name]!;
    console.log(`${name}: median ${fmt(median(list.map((f) => f.trips.perSecond)))} round trips/s at ${fmt(median(list.map((f) => f.trips.cpuUsPerOp)), 1)} µs; ${fmt(median(list.map((f) => f.folds.perSecond)))} folded transactions/s at ${fmt(median(list.map((f) => f.folds.cpuUsPerOp)), 1)} µs`);
  }
} finally {
  await admin.query(`DROP DATABASE IF EXISTS ${dbName} WITH (FORCE)`);
  await admin.end();
}
